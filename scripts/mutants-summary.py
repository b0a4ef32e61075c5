"""Folds a cargo-mutants run (mutants.out/) into the committed summary.

    python3 scripts/mutants-summary.py [--out mutants.out] [--summary docs/mutants.tsv]
                                       [--doc docs/testing.md]

`make mutants` runs it after cargo-mutants. Each mutant cargo-mutants
tested (caught.txt, missed.txt, timeout.txt, unviable.txt: one
`FILE:LINE:COL: DESCRIPTION` a line) becomes one row of the summary, a
tab-separated file kept in git: outcome, file, line, the commit tested
(`git rev-parse --short HEAD`, `+dirty` when the tree differs), the
description and its ordinal `n`. A mutant is known by its file, its
description and `n`, its place among the mutants of that file with the
same description (in line and column order, from `cargo mutants --list`
of the tree tested): two `replace > with >=` on different lines are two
rows, and a row survives its line moving. A mutant already in the summary
is replaced by the newer result, so shards and files run on different
days accumulate into one table; each row's line is refreshed from the
list. Then the table between the `mutants-summary` markers of
docs/testing.md is rewritten: per file,
caught / missed / timeout / unviable and the share of viable mutants
caught, and every missed mutant by name.

Before the table is written, `cargo mutants --list` of the summary's files
(this tree as it is) gives the mutants that exist now: a row whose
mutant is no longer listed (its code changed or went) is dropped, and the
listed mutants without a row are counted as unmeasured. Without
cargo-mutants on the PATH the rows are kept as they are.
"""
import argparse
import csv
import os
import re
import subprocess
from collections import defaultdict

OUTCOMES = ["caught", "missed", "timeout", "unviable"]
LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<what>.*)$")
BEGIN, END = "<!-- BEGIN mutants-summary -->", "<!-- END mutants-summary -->"


def commit():
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src"]).returncode != 0
    return rev + ("+dirty" if dirty else "")


def load(path):
    rows = {}
    if os.path.exists(path):
        with open(path, newline="") as f:
            for r in csv.DictReader(f, delimiter="\t"):
                r.setdefault("n", "0")
                r["n"] = r["n"] or "0"
                rows[(r["file"], r["mutant"], int(r["n"]))] = r
    return rows


def listed(files):
    """Every mutant cargo-mutants lists for `files` in this tree, as a map
    from (file, line, column, description) to its key (file, description,
    n), or None when cargo-mutants is not installed."""
    args = ["cargo", "mutants", "--list"] + [a for f in sorted(files) for a in ("--file", f)]
    try:
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    found = [m for m in map(LINE.match, out.splitlines()) if m]
    found.sort(key=lambda m: (m["file"], int(m["line"]), int(m["col"])))
    seen, keys = defaultdict(int), {}
    for m in found:
        n = seen[(m["file"], m["what"])]
        seen[(m["file"], m["what"])] += 1
        keys[(m["file"], m["line"], m["col"], m["what"])] = (m["file"], m["what"], n)
    return keys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="mutants.out")
    ap.add_argument("--summary", default="docs/mutants.tsv")
    ap.add_argument("--doc", default="docs/testing.md")
    args = ap.parse_args()
    rows = load(args.summary)
    rev, added = commit(), 0
    results = []
    for outcome in OUTCOMES:
        path = os.path.join(args.out, f"{outcome}.txt")
        if not os.path.exists(path):
            continue
        for text in open(path):
            m = LINE.match(text.strip())
            if m:
                results.append((outcome, m))
    # The tree tested is this one (cargo mutants --in-place), so its list
    # gives each result its ordinal.
    now = listed({f for f, _, _ in rows} | {m["file"] for _, m in results})
    for outcome, m in results:
        key = (now or {}).get((m["file"], m["line"], m["col"], m["what"]), (m["file"], m["what"], 0))
        rows[key] = {"outcome": outcome, "file": m["file"], "line": m["line"], "commit": rev,
                     "mutant": m["what"], "n": str(key[2])}
        added += 1
    gone = unmeasured = 0
    if now is not None:
        line_of = {key: line for (_, line, _, _), key in now.items()}
        gone = len([k for k in rows if k not in line_of])
        rows = {k: dict(r, line=line_of[k]) for k, r in rows.items() if k in line_of}
        unmeasured = len(line_of.keys() - rows.keys())
    with open(args.summary, "w", newline="") as f:
        w = csv.DictWriter(f, ["outcome", "file", "line", "commit", "mutant", "n"], delimiter="\t", lineterminator="\n")
        w.writeheader()
        for key in sorted(rows, key=lambda k: (k[0], int(rows[k]["line"]), k[1], k[2])):
            w.writerow(rows[key])
    per_file = defaultdict(lambda: dict.fromkeys(OUTCOMES, 0))
    for r in rows.values():
        per_file[r["file"]][r["outcome"]] += 1
    lines = [BEGIN, "", "| file | caught | missed | timeout | unviable | viable caught |", "|---|---|---|---|---|---|"]
    total = dict.fromkeys(OUTCOMES, 0)
    for file in sorted(per_file):
        c = per_file[file]
        for k in OUTCOMES:
            total[k] += c[k]
        viable = c["caught"] + c["missed"] + c["timeout"]
        share = f"{100 * (c['caught'] + c['timeout']) / viable:.0f} %" if viable else "-"
        lines.append(f"| `{file}` | {c['caught']} | {c['missed']} | {c['timeout']} | {c['unviable']} | {share} |")
    viable = total["caught"] + total["missed"] + total["timeout"]
    share = f"{100 * (total['caught'] + total['timeout']) / viable:.0f} %" if viable else "-"
    lines.append(f"| all | {total['caught']} | {total['missed']} | {total['timeout']} | {total['unviable']} | {share} |")
    missed = sorted((r for r in rows.values() if r["outcome"] == "missed"), key=lambda r: (r["file"], int(r["line"])))
    lines += ["", f"Missed ({len(missed)}):" if missed else "Missed: none.", ""]
    lines += [f"- `{r['file']}:{r['line']}`: {r['mutant']} ({r['commit']})" for r in missed]
    if now is not None:
        lines += ["", f"Listed by `cargo mutants --list` for these files and not measured: {unmeasured}."]
    lines += ["", END]
    doc = open(args.doc).read()
    if BEGIN in doc and END in doc:
        doc = doc[: doc.index(BEGIN)] + "\n".join(lines) + doc[doc.index(END) + len(END):]
        open(args.doc, "w").write(doc)
    print(f"mutants-summary: {added} results from {args.out} folded into {args.summary} "
          f"({len(rows)} mutants: {total['caught']} caught, {total['missed']} missed, "
          f"{total['timeout']} timeout, {total['unviable']} unviable; viable caught {share}); "
          f"{gone} rows of mutants no longer listed dropped, {unmeasured} listed mutants without a row")


if __name__ == "__main__":
    main()
