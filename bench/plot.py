"""The figure of `make bench`: docs/bench.png from target/bench-results.json.

    python bench/plot.py [--results target/bench-results.json] [--out docs/bench.png]

Left: wall time (s) against N files, log-log, for the job, its own I/O
floor, the curl GET floor, the sequential baseline and DuckDB's COPY.
Right: DuckDB's query time on the day partition (count(*) and the lookup by
icao_hex) before and after compaction, per N. Runs in .tools/duckdb
(matplotlib, Agg backend: no display). `make bench` runs it at its end;
`make bench-plot` redraws from an existing JSON.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import NullLocator  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

SYSTEMS = [  # key in the JSON, label, style
    ("job", "job (archive-compaction run)", dict(color="C0", marker="o", linewidth=2.5)),
    ("floor", "I/O floor (job's read path, GETs only)", dict(color="C2", marker="s", linestyle="--")),
    ("curl", "curl floor (--parallel, GETs only)", dict(color="C4", marker="D", linestyle="--")),
    ("baseline", "sequential baseline (Python)", dict(color="C3", marker="^")),
    ("duckdb", "DuckDB COPY", dict(color="C1", marker="v")),
]
QUERIES = [  # (query, when) -> style
    ("count", "before", "count(*), before", dict(color="C3", marker="o")),
    ("count", "after", "count(*), after", dict(color="C0", marker="o")),
    ("lookup", "before", "lookup by icao_hex, before", dict(color="C3", marker="s", linestyle="--")),
    ("lookup", "after", "lookup by icao_hex, after", dict(color="C0", marker="s", linestyle="--")),
]


def series(results, pick):
    """(Ns, values) over the sizes where pick(result) is not None, N ascending."""
    pts = [(n, pick(r)) for n, r in sorted(results.items())]
    pts = [(n, v) for n, v in pts if v is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default=os.path.join(ROOT, "target", "bench-results.json"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench.png"))
    args = ap.parse_args()
    with open(args.results) as f:
        doc = json.load(f)
    results = {int(n): r for n, r in doc["results"].items()}
    if not results:
        raise SystemExit(f"plot: no results in {args.results} (a --sweep-only run has none to plot)")
    meta = doc.get("meta", {})

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))
    for key, label, style in SYSTEMS:
        xs, ys = series(results, lambda r: r.get(key, {}).get("wall_s"))
        if xs:
            left.plot(xs, ys, label=label, **style)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("index files in the day (N)")
    left.set_ylabel("wall time (s)")
    left.set_title("Compacting a day of N single-row files")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8, loc="lower right")

    have_query = False
    for q, when, label, style in QUERIES:
        xs, ys = series(results, lambda r: r.get("query", {}).get(when, {}).get(q, {}).get("wall_s"))
        if xs:
            have_query = True
            right.plot(xs, ys, label=label, **style)
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("index files in the day before compaction (N)")
    right.set_ylabel("DuckDB query time (s)")
    right.set_title("Reading the day partition: before vs after compaction")
    right.grid(True, which="both", alpha=0.3)
    if have_query:
        right.legend(fontsize=8)
    else:
        right.text(0.5, 0.5, "no DuckDB query figures in this run", ha="center", va="center",
                   transform=right.transAxes)
    # How many times faster count(*) is after compaction, beside each point.
    for n, r in sorted(results.items()):
        q = r.get("query")
        if q:
            b, a = q["before"]["count"]["wall_s"], q["after"]["count"]["wall_s"]
            right.annotate(f"count(*) {b / max(a, 1e-9):.0f}x faster", (n, a), textcoords="offset points",
                           xytext=(0, -16), ha="center", fontsize=8, color="C0")
    for ax, sizes in ((left, sorted(results)), (right, sorted(n for n, r in results.items() if "query" in r))):
        if not sizes:
            continue
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.xaxis.set_minor_locator(NullLocator())  # only the measured Ns labelled
        lo, hi = sizes[0], sizes[-1]
        ax.set_xlim(lo / 1.6, hi * 1.6)  # room for a lone point and the labels
    lo, hi = right.get_ylim()
    right.set_ylim(lo / 2, hi)  # room for the labels under the "after" points

    fig.suptitle(f"make bench: {meta.get('server', '?')} behind a {meta.get('latency_ms', '?')} ms proxy, "
                 f"READ_CONCURRENCY {meta.get('concurrency', '?')}, {meta.get('cpus', '?')} CPUs", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
