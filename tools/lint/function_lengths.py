#!/usr/bin/env python3
"""Lists C++ functions longer than a limit (default 150 lines) in the given directories.

    tools/lint/function_lengths.py [--limit N] [--list] DIR...

A function is a definition at namespace scope as clang-format writes it (Google style, the
repository's .clang-format): its signature starts in column 0 and its body ends with a `}` in
column 0. Lambdas and local classes count toward the function that holds them; member
functions defined inside a class body (indented) are not measured, so keep those short.
The interpreter's dispatch function (vm/interpreter.cc, Impl::Execute) is exempt: one
function holding every instruction's case is the point of a threaded interpreter.

Exits 1 when a function is over the limit, naming each with its length.
"""
import argparse
import os
import re
import sys

EXEMPT = {("vm/interpreter.cc", "DYNVM_EXECUTE")}
NOT_A_FUNCTION = re.compile(
    r"^(namespace|class|struct|union|enum|using|typedef|template\s*<[^>]*>\s*(class|struct)|"
    r"extern \"C\"|static_assert|#|//|/\*|\}|\{)")


def functions(path):
    """Yields (name, first line, length in lines) for each namespace-scope function."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line or line[0].isspace() or NOT_A_FUNCTION.match(line) or "(" not in line:
            i += 1
            continue
        # The signature may span lines; it ends at the first line ending in '{' (a body) or
        # ';' (a declaration).
        j = i
        while j < len(lines) and not lines[j].rstrip().endswith(("{", ";", "}")):
            j += 1
        if j < len(lines) and lines[j].rstrip().endswith("}"):  # a one-line body
            i = j + 1
            continue
        if j >= len(lines) or lines[j].rstrip().endswith(";") or "=" in lines[i].split("(")[0]:
            i = j + 1
            continue
        k = j + 1
        while k < len(lines) and not lines[k].startswith("}"):
            k += 1
        name = lines[i].split("(")[0].split()[-1] if lines[i].split("(")[0].split() else "?"
        yield name, i + 1, k - i + 1
        i = k + 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=150)
    parser.add_argument("--list", action="store_true", help="print every function over 80 lines")
    parser.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    over = []
    for top in args.dirs:
        for root, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith((".cc", ".h")):
                    continue
                path = os.path.normpath(os.path.join(root, name))
                for fn, line, length in functions(path):
                    if (path, fn.split("::")[-1]) in EXEMPT or any(
                            path == p and e in fn for p, e in EXEMPT):
                        continue
                    if args.list and length > 80:
                        print(f"{path}:{line}: {fn}: {length} lines")
                    if length > args.limit:
                        over.append((path, line, fn, length))
    for path, line, fn, length in over:
        print(f"{path}:{line}: {fn} is {length} lines (limit {args.limit})")
    if over:
        print(f"{len(over)} function(s) over {args.limit} lines", file=sys.stderr)
        return 1
    print(f"function lengths: none over {args.limit} lines in {' '.join(args.dirs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
