#!/usr/bin/env python3
"""Regenerates the result tables of docs/benchmarks.md from the raw benchmark records in
docs/results/ (docs/benchmarks.md, "Results"), and the speed sentence of README.md from the
newest of them.

    tools/bench/results_tables.py            rewrite docs/benchmarks.md and README.md in place
    tools/bench/results_tables.py --check    exit 1 if either differs from what the records give

A record is a text file whose header lines (before a line '---') name its date, machine, commit
and command, followed by the raw output of tools/bench/compare.py. Files in docs/results/ that
hold no compare.py output (other benchmarks' records) are left alone. The tables go between
'<!-- compare-results:begin -->' and '<!-- compare-results:end -->' in docs/benchmarks.md; the
README's sentence is the one between '<!-- speed:begin -->' and '<!-- speed:end -->'.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BEGIN, END = "<!-- compare-results:begin -->", "<!-- compare-results:end -->"
SPEED_BEGIN, SPEED_END = "<!-- speed:begin -->", "<!-- speed:end -->"
RUNTIMES = {"dynvm": "dynvm", "ort": "ONNX Runtime", "torch": "TorchScript",
            "torch-noblas": "TorchScript, OpenBLAS unset"}


def parse_record(path):
    """The header fields and compare.py tables of `path`, or None when it holds none."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    header = {}
    body = lines
    if "---" in lines:
        cut = lines.index("---")
        for line in lines[:cut]:
            key, sep, value = line.partition(":")
            if sep:
                header[key.strip().lower()] = value.strip()
        body = lines[cut + 1:]
    rows = []
    threads = None
    columns = None
    for line in body:
        m = re.match(r"^== (\d+) threads? ==$", line.strip())
        if m:
            threads = int(m.group(1))
            columns = None
            continue
        words = line.split()
        if threads is not None and words[:2] == ["case", "tokens"]:
            # "case tokens dynvm tok/s ort tok/s ... dynvm/ort dynvm/torch bar"
            columns = [w for w in words[2:] if w not in ("tok/s",)]
            continue
        if threads is not None and columns and words and not line.startswith(" ") and \
                len(words) >= 2 + len(columns) - 1:
            if not re.match(r"^[a-z0-9-]+$", words[0]) or not words[1].isdigit() or \
                    not re.match(r"^[0-9.]+$", words[2]):
                continue
            row = {"case": words[0], "tokens": int(words[1]), "threads": threads}
            for name, value in zip(columns, words[2:]):
                row[name] = value
            rows.append(row)
    if not rows:
        return None
    # Only full comparisons (dynvm, ONNX Runtime and TorchScript: compare.sh) make the tables and
    # the README sentence; a run of a subset of runtimes (compare.py --runtimes dynvm,ort, whose
    # TorchScript column reads nan) is quoted by the document section that made it.
    if all(row.get("dynvm/torch", "nan") == "nan" for row in rows):
        return None
    missing = [k for k in ("date", "machine", "commit", "command") if k not in header]
    if missing:
        raise SystemExit(f"{path}: compare.py output without header field(s) {', '.join(missing)}")
    return {"path": path, "header": header, "rows": rows,
            "verdict": [line.strip() for line in body
                        if line.startswith(("tokens:", "TOKENS DIFFER", "below the bar", "  ",
                                            "every case meets"))]}


def table(record):
    rows = record["rows"]
    runtimes = [r for r in RUNTIMES if r in rows[0]]
    head = ["case", "threads"] + [RUNTIMES[r] for r in runtimes] + ["dynvm/ORT", "dynvm/TorchScript"]
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for row in rows:
        cells = [row["case"], str(row["threads"])] + [row[r] for r in runtimes] + \
                [row.get("dynvm/ort", ""), row.get("dynvm/torch", "")]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def records(results_dir):
    found = []
    for name in sorted(os.listdir(results_dir)):
        path = os.path.join(results_dir, name)
        if not name.endswith(".txt") or not os.path.isfile(path):
            continue
        r = parse_record(path)
        if r is not None:
            found.append(r)
    return found


def tables_text(found, root):
    parts = []
    for r in found:
        h = r["header"]
        rel = os.path.relpath(r["path"], root)
        parts.append(f"[`{rel}`]({os.path.relpath(r['path'], os.path.join(root, 'docs'))}): "
                     f"{h['date']}, commit {h['commit']}, `{h['command']}`; {h['machine']}"
                     + (f"; note: {h['note']}" if "note" in h else "") + "\n\n" + table(r) + "\n\n"
                     "(tokens/s; the ratios use the faster TorchScript environment)"
                     + ("; compare.py: \"" + "\", \"".join(r["verdict"]) + "\"" if r["verdict"] else ""))
    return "\n\n".join(parts)


def speed_sentence(record, root):
    rel = os.path.relpath(record["path"], root)
    s = f"In the latest recorded run ({record['header']['date']}, [`{rel}`]({rel})),"
    parts = []
    for threads in sorted({row["threads"] for row in record["rows"]}):
        rows = [row for row in record["rows"] if row["threads"] == threads]
        ort = sorted(float(row["dynvm/ort"]) for row in rows)
        torch = sorted(float(row["dynvm/torch"]) for row in rows)
        parts.append(f"with {threads} thread{'s' if threads > 1 else ''} dynvm decodes "
                     f"{ort[0]:.2f}-{ort[-1]:.2f}x as fast as ONNX Runtime and "
                     f"{torch[0]:.2f}-{torch[-1]:.2f}x as fast as TorchScript")
    s += " " + "; ".join(parts) + f" across the {len({r['case'] for r in record['rows']})} decode cases"
    met = sum(1 for row in record["rows"] if row.get("bar") == "ok")
    s += (f"; {met} of the {len(record['rows'])} rows meet the bar "
          "(1.3x ONNX Runtime and 1.5x TorchScript with one thread, 1x with two).")
    return s


def replace_between(text, begin, end, new, path):
    if begin not in text or end not in text:
        raise SystemExit(f"{path}: markers {begin} ... {end} not found")
    a = text.index(begin) + len(begin)
    b = text.index(end)
    return text[:a] + "\n" + new + "\n" + text[b:]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true")
    p.add_argument("--root", default=ROOT)
    args = p.parse_args(argv)
    found = records(os.path.join(args.root, "docs", "results"))
    if not found:
        raise SystemExit("no compare.py records in docs/results")
    newest = max(found, key=lambda r: r["header"]["date"])
    changed = []
    for rel, begin, end, new in (
            ("docs/benchmarks.md", BEGIN, END, tables_text(found, args.root)),
            ("README.md", SPEED_BEGIN, SPEED_END, speed_sentence(newest, args.root))):
        path = os.path.join(args.root, rel)
        with open(path, encoding="utf-8") as f:
            old = f.read()
        text = replace_between(old, begin, end, new, rel)
        if text != old:
            changed.append(rel)
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
    if args.check and changed:
        print(f"out of date with docs/results: {', '.join(changed)} "
              f"(run tools/bench/results_tables.py)")
        return 1
    print(("rewrote " + ", ".join(changed)) if changed and not args.check else
          f"up to date: {len(found)} compare record(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
