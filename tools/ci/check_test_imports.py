#!/usr/bin/python3
"""Checks that every Python module a test imports is importable by Debian's /usr/bin/python3.

The tests' Python runs under /usr/bin/python3, which sees Debian's python3-* packages (a python3
earlier on PATH, such as pyenv's, does not). The scripts looked at: python/tests/*.py, every *.py
a CMakeLists.txt names (the scripts ctest runs), every *.py tools/test.sh names, and the scripts
those name in a string (a script a test runs through subprocess): every import in them counts,
function-level ones included. The repository's modules they import count with their module-level
imports (what the import runs). The imports are sorted into
  - the standard library and the repository's own modules (dynvm, conftest, ...): fine;
  - optional ones, imported inside `try: ... except ImportError` (PyTorch: the export tests exit
    77, a ctest skip, without it), also in the repository's modules such a script imports:
    listed;
  - the rest, which must import, and `from X import name` must find the name: else this fails
    and names the Debian package to add to tools/install-deps.sh's test profile.

  /usr/bin/python3 tools/ci/check_test_imports.py        (ctest's test_imports_test)
"""

import ast
import importlib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The repository's own packages that are built, not installed (python/dynvm: the build's
# PYTHONPATH).
BUILT = {"dynvm"}
DEBIAN = {"numpy": "python3-numpy", "pytest": "python3-pytest", "onnx": "python3-onnx",
          "torch": "python3-torch", "torchvision": "python3-torchvision", "google": "python3-protobuf",
          "grpc": "python3-grpcio", "yaml": "python3-yaml"}


def entry_points():
    files = set()
    tests = os.path.join(ROOT, "python", "tests")
    files.update(os.path.join(tests, f) for f in os.listdir(tests) if f.endswith(".py"))
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "build"]
        if "CMakeLists.txt" not in names:
            continue
        text = open(os.path.join(folder, "CMakeLists.txt"), encoding="utf-8").read()
        for m in re.finditer(r"\$\{(CMAKE_CURRENT_SOURCE_DIR|PROJECT_SOURCE_DIR)\}/([\w/.-]+\.py)", text):
            base = folder if m.group(1) == "CMAKE_CURRENT_SOURCE_DIR" else ROOT
            files.add(os.path.normpath(os.path.join(base, m.group(2))))
    text = open(os.path.join(ROOT, "tools", "test.sh"), encoding="utf-8").read()
    for m in re.finditer(r"([\w/.-]+\.py)\b", text):
        path = os.path.join(ROOT, m.group(1))
        if os.path.isfile(path):
            files.add(path)
    return files


def catches_import_error(handlers):
    for h in handlers:
        if h.type is None:
            return True
        types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        for t in types:
            if isinstance(t, ast.Name) and t.id in ("ImportError", "ModuleNotFoundError", "Exception"):
                return True
    return False


def imports_of(path, module_level_only):
    """(module, names or None, optional, line) for each import; and the .py paths in strings."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    found, scripts = [], set()

    def visit(node, optional):
        if module_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.Lambda)):
            return
        if isinstance(node, ast.Try):
            inner = optional or catches_import_error(node.handlers)
            for child in node.body:
                visit(child, inner)
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child, optional)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                found.append((a.name, None, optional, node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [a.name for a in node.names], optional, node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"[\w/.-]+\.py", node.value):
                scripts.add(node.value)
        for child in ast.iter_child_nodes(node):
            visit(child, optional)

    visit(tree, False)
    return found, scripts


def path_value(node, path):
    """The value of a path expression built from __file__, string constants and os.path's join,
    dirname and abspath (what `sys.path.insert(0, ...)` takes), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id == "__file__":
        return path
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        args = [path_value(a, path) for a in node.args]
        if None in args:
            return None
        f = {"join": os.path.join, "dirname": os.path.dirname, "abspath": os.path.abspath,
             "realpath": os.path.realpath}.get(node.func.attr)
        return f(*args) if f else None
    return None


def extra_paths(path):
    """The folders `path` adds to sys.path (sys.path.insert(i, p) or sys.path.append(p))."""
    folders = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("insert", "append")
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "path"
                and node.args):
            value = path_value(node.args[-1], path)
            if value:
                folders.append(os.path.normpath(value))
    return folders


def local_module(name, path):
    """The repository file of module `name` imported from `path`, or None if not local."""
    top = name.split(".")[0]
    folders = [os.path.dirname(path), os.path.join(ROOT, "python")] + extra_paths(path)
    for folder in folders:
        for candidate in (os.path.join(folder, top + ".py"), os.path.join(folder, top, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
    return None


def main():
    # (path, is a script (not an imported module), modules optional for it)
    todo = [(path, True, frozenset()) for path in sorted(entry_points())]
    seen, failures, optional_seen = set(), [], set()
    checked = {}
    while todo:
        path, script, inherited = todo.pop()
        if (path, script) in seen:
            continue
        seen.add((path, script))
        imports, scripts = imports_of(path, module_level_only=not script)
        if script:
            for s in scripts:
                for base in (ROOT, os.path.dirname(path)):
                    candidate = os.path.normpath(os.path.join(base, s))
                    if os.path.isfile(candidate) and candidate.startswith(ROOT + os.sep):
                        todo.append((candidate, True, frozenset()))
        optional_here = inherited | {m.split(".")[0] for m, _, opt, _ in imports if opt}
        where = os.path.relpath(path, ROOT)
        for module, names, optional, line in imports:
            top = module.split(".")[0]
            if top in sys.stdlib_module_names:
                continue
            local = local_module(module, path)
            if local is not None or top in BUILT:
                if local is not None and top not in BUILT:
                    todo.append((local, False, optional_here))
                continue
            if optional or top in inherited:
                optional_seen.add(f"{top} ({where}:{line})")
                continue
            key = (module, tuple(names or ()))
            if key not in checked:
                checked[key] = check(module, names)
            if checked[key]:
                failures.append(f"{where}:{line}: {checked[key]} (Debian package: "
                                f"{DEBIAN.get(top, 'python3-' + top)})")
    files = len({path for path, _ in seen})
    print(f"check_test_imports: {files} Python files checked with {sys.executable}")
    if optional_seen:
        print("optional (their tests skip without them): " + ", ".join(sorted(optional_seen)))
    if failures:
        print("\n".join(failures), file=sys.stderr)
        print("check_test_imports: add the packages above to tools/install-deps.sh's test profile",
              file=sys.stderr)
        return 1
    return 0


def check(module, names):
    """An error message, or '' when `import module` (and `from module import names`) works."""
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 (any failure to import is what this reports)
        return f"import {module}: {type(e).__name__}: {e}"
    for name in names or ():
        if name == "*" or hasattr(mod, name):
            continue
        try:
            importlib.import_module(f"{module}.{name}")
        except Exception as e:  # noqa: BLE001
            return f"from {module} import {name}: {type(e).__name__}: {e}"
    return ""


if __name__ == "__main__":
    sys.exit(main())
