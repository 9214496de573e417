"""The operator definitions of compiler/ops/*.cc, read from their source tables.

Each family file holds one `static constexpr OpRow kRows[] = {...};` table whose rows are
`{name, since, "since:max_inputs:required_mask ...", "attr:T[@since[-until]] ...", traits,
shape_fn[, lower[, view_if]]}` (compiler/ops/op_def.h). This module parses those rows, resolving
`ops::kName` through compiler/ops/names.h, so the fuzzer's coverage is measured against exactly
the operators the compiler defines, at the opsets each signature allows.
"""
import os
import re

ATTR_KINDS = {"i": "INT", "f": "FLOAT", "s": "STRING", "I": "INTS", "F": "FLOATS",
              "S": "STRINGS", "t": "TENSOR", "g": "GRAPH", "T": "TYPE_PROTO",
              "x": "SPARSE_TENSOR"}


class OpVersion:
    """One schema version: from opset `since`, at most `max_inputs` (0: any), `required`;
    `refused`: a version dynvm refuses ("since:x" in a row)."""

    def __init__(self, since, max_inputs, required_mask, refused=False):
        self.since = since
        self.max_inputs = max_inputs
        self.required_mask = required_mask
        self.refused = refused

    def __repr__(self):
        return f"{self.since}:{self.max_inputs}:{self.required_mask}"


class OpDef:
    """A parsed row: name, domain, family, since, versions, attrs {name: (kind, since, until)}."""

    def __init__(self, domain, family, name, since, versions, attrs, traits):
        self.domain = domain
        self.family = family
        self.name = name
        self.since = since
        self.versions = versions
        self.attrs = attrs
        self.traits = traits

    def version_at(self, opset):
        """The signature in force at `opset`, or None when the op does not exist there."""
        if opset < self.since:
            return None
        found = None
        for v in self.versions:
            if v.since <= opset:
                found = v
        return None if found is not None and found.refused else found

    def valid_opsets(self, lo=7, hi=17):
        """The opsets in [lo, hi] at which a model may use the op."""
        return [o for o in range(lo, hi + 1) if self.version_at(o) is not None]

    def attr_at(self, name, opset):
        a = self.attrs.get(name)
        if a is None:
            return None
        kind, since, until = a
        return kind if since <= opset < until else None

    def __repr__(self):
        return f"OpDef({self.domain}::{self.name} since {self.since} {self.versions})"


def _names(repo):
    table = {}
    with open(os.path.join(repo, "compiler/ops/names.h")) as f:
        for m in re.finditer(r'constexpr char (k\w+)\[\] = "([^"]*)";', f.read()):
            table[m.group(1)] = m.group(2)
    return table


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _split_top(body):
    """Splits `{...}, {...}` into the row bodies (top-level braces)."""
    rows, depth, start = [], 0, None
    for i, ch in enumerate(body):
        if ch == "{":
            if depth == 0:
                start = i + 1
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                rows.append(body[start:i])
    return rows


def _fields(row):
    """Comma-separated fields of a row; adjacent string literals are joined."""
    fields, cur, in_str = [], [], False
    for ch in row:
        if ch == '"':
            in_str = not in_str
        if ch == "," and not in_str:
            fields.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        fields.append("".join(cur).strip())
    return fields


def _string(field):
    parts = re.findall(r'"([^"]*)"', field)
    return "".join(parts)


def _parse_attrs(spec):
    attrs = {}
    for item in spec.split():
        name, _, rest = item.partition(":")
        kind, _, span = rest.partition("@")
        since, until = 0, 1 << 30
        if span:
            a, _, b = span.partition("-")
            since = int(a)
            if b:
                until = int(b)
        attrs[name] = (ATTR_KINDS[kind], since, until)
    return attrs


def load(repo):
    """Every OpDef of compiler/ops/*.cc, keyed (domain, name)."""
    names = _names(repo)
    ops_dir = os.path.join(repo, "compiler/ops")
    defs = {}
    for fname in sorted(os.listdir(ops_dir)):
        if not fname.endswith(".cc") or fname.endswith("_test.cc"):
            continue
        text = _strip_comments(open(os.path.join(ops_dir, fname)).read())
        m = re.search(r"kRows\[\]\s*=\s*\{(.*?)\n\s*\};", text, flags=re.S)
        if not m:
            continue
        dm = re.search(r"t\.Add\(([^,]+),\s*kRows\)", text)
        domain_expr = dm.group(1).strip() if dm else '""'
        domain = "dynvm" if "kDynvmDomain" in domain_expr else _string(domain_expr)
        for row in _split_top(m.group(1)):
            f = _fields(row)
            name = f[0]
            if name.startswith("ops::"):
                name = names[name[5:]]
            else:
                name = _string(name)
            versions = []
            for v in _string(f[2]).split():
                if v.endswith(":x"):  # a version dynvm refuses
                    versions.append(OpVersion(int(v[:-2]), 0, 0, refused=True))
                    continue
                s, mi, rm = v.split(":")
                versions.append(OpVersion(int(s), int(mi), int(rm)))
            traits = set(re.findall(r"k[A-Z]\w+", f[4]))
            defs[(domain, name)] = OpDef(domain, fname[:-3], name, int(f[1]), versions,
                                         _parse_attrs(_string(f[3])), traits)
    return defs


def onnx_ops(repo, lo=7, hi=17):
    """The default-domain operators with an ONNX signature somewhere in opsets [lo, hi]."""
    return {name: d for (dom, name), d in load(repo).items()
            if dom == "" and d.versions and d.valid_opsets(lo, hi)}


if __name__ == "__main__":
    import sys
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../..")
    ops = onnx_ops(repo)
    for name in sorted(ops):
        d = ops[name]
        print(f"{d.family:12s} {name:28s} opsets {d.valid_opsets()[0]}-17 {d.versions}")
    print(len(ops), "operators")
