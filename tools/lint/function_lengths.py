#!/usr/bin/env python3
"""Lists C++ functions longer than a limit (default 150 lines) in the given directories.

    tools/lint/function_lengths.py [--limit N] [--list] DIR...

Every function definition counts, wherever it is written: at namespace scope, and inside a
class or struct body (member functions defined in place, nested classes included). A function
is measured from the first line of its signature to the line of its closing brace. Lambdas and
local classes count toward the function that holds them. The scan strips comments, string and
character literals (raw strings included) and preprocessor lines, then matches braces: a `{` at
namespace or class scope opens a function body when the declaration before it has a parameter
list and no `=` ahead of it (so `int x = f({...})` and `Foo kFoo = {...}` are initializers), and a
brace-initialized member in a constructor's initializer list (`: a_{x} {`) stays part of the
signature.

The interpreter's dispatch function (vm/interpreter.cc, the DYNVM_EXECUTE body) is exempt: one
function holding every instruction's case is the point of a threaded interpreter.

Exits 1 when a function is over the limit, naming each with its length.
"""
import argparse
import os
import re
import sys

EXEMPT = {("vm/interpreter.cc", "DYNVM_EXECUTE")}
EXTENSIONS = (".cc", ".h", ".cu", ".cuh")
SCOPE_OPENER = re.compile(
    r"^\s*(template\s*<.*>\s*)?(inline\s+)?(namespace|class|struct|union|enum)\b|^\s*extern\s*$",
    re.S)
IDENT_END = re.compile(r"[A-Za-z_0-9]\s*$")


def strip(text):
    """Blanks comments, literals and preprocessor lines, keeping every newline in place."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n:
                if text[i] == "\n" and text[i - 1] != "\\":
                    break
                out.append("\n" if text[i] == "\n" else " ")
                i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        m = re.match(r'R"([^(\s]*)\(', text[i:i + 20]) if c == "R" and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) else None
        if m:
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + len(m.group(0)))
            end = n if end < 0 else end + len(close)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:end]))
            i = end
            continue
        if c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
            continue
        if c == "\n":
            line_start = True
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    """Yields (name, first line, length in lines) for each function definition."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip(f.read())
    line_of = []
    line = 1
    for ch in text:
        line_of.append(line)
        if ch == "\n":
            line += 1
    n = len(text)

    def matching(i):  # the index of the `}` matching the `{` at i
        depth = 0
        for j in range(i, n):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    return j
        return n - 1

    def scan(start, end):  # a namespace or class scope: text[start:end]
        decl = start  # where the declaration being read began
        i = start
        while i < end:
            c = text[i]
            if c in ";}":
                decl = i + 1
            elif c == "{":
                head = text[decl:i]
                close = matching(i)
                paren = head.find("(")
                if SCOPE_OPENER.match(head) and (paren < 0 or "namespace" in head[:paren]):
                    yield from scan(i + 1, close)
                    decl = close + 1
                elif paren >= 0 and "=" not in head[:paren] and not head.lstrip().startswith(
                        ("static_assert", "return")):
                    # A brace-initialized member of an initializer list: part of the signature.
                    if IDENT_END.search(head) and re.search(r"\)\s*:", head):
                        i = close + 1
                        continue
                    words = head[:paren].split()
                    name = words[-1] if words else "?"
                    first = decl + len(head) - len(head.lstrip())
                    yield name, line_of[first], line_of[close] - line_of[first] + 1
                    decl = close + 1
                else:
                    decl = close + 1
                i = close + 1
                continue
            i += 1

    yield from scan(0, n)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=150)
    parser.add_argument("--list", action="store_true", help="print every function over 80 lines")
    parser.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    over = []
    count = 0
    for top in args.dirs:
        for root, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(EXTENSIONS):
                    continue
                path = os.path.normpath(os.path.join(root, name))
                for fn, line, length in functions(path):
                    count += 1
                    if any(path == p and e in fn for p, e in EXEMPT):
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
    print(f"function lengths: {count} functions, none over {args.limit} lines in "
          f"{' '.join(args.dirs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
