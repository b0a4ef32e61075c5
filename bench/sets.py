"""What a date's uuid sets cost the run as the date grows, without S3
(`make bench-sets`): `bench-tool sets` (bench/tool.rs) runs the run's own
code (the spilling sets of src/data/spill.rs, the parity gate's first look and
multi-row batches, the parts' grouping, a part's membership checks) over
generated uuids, under `ulimit -v` (RLIMIT_AS), and reports its seconds,
the sets' bytes on disk and its peak RSS (`VmHWM`).

    python bench/sets.py [--tool target/release/examples/bench-tool]
                         [--sizes 1000000,10000000,30000000]
                         [--ulimit-kib 524288] [--out FILE]

Each size runs with `FLIGHTS_IN_MEMORY` at its default (the sets spill);
the middle size runs once more with the limit at the size (every set in
memory, as before the sets spilled), to show where that dies. 30 % of each
date's flights are named only by compacted files (the gate's multi-row
batches and the grouping's pairs), 200,000 by the listing window's files,
the rest by files past it.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from bench import provenance  # noqa: E402  (bench/bench.py, beside this file)


def measure(tool, flights, limit, ulimit_kib):
    """One `bench-tool sets` run: its JSON, or how it died."""
    def cap():
        if ulimit_kib:
            resource.setrlimit(resource.RLIMIT_AS, (ulimit_kib * 1024, ulimit_kib * 1024))
    compacted = flights * 3 // 10
    cmd = [tool, "sets", "--flights", str(flights), "--compacted", str(compacted)]
    if limit:
        cmd += ["--limit", str(limit)]
    t0, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=cap)
    out, err = p.communicate()
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row = {"flights": flights, "compacted": compacted, "limit": limit or None, "wall_s": wall,
           "cpu_s": cpu, "ulimit_v_kib": ulimit_kib}
    if p.returncode == 0:
        row.update(json.loads(out.decode().strip().splitlines()[-1]))
        row["outcome"] = "ok"
    else:
        last = (err.decode(errors="replace").strip().splitlines() or ["?"])[0][:200]
        row["outcome"] = f"died (exit {p.returncode}): {last}"
    print(json.dumps(row), flush=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", default=os.path.join(ROOT, "target", "release", "examples", "bench-tool"))
    ap.add_argument("--sizes", default="1000000,10000000,30000000")
    ap.add_argument("--ulimit-kib", type=int, default=524288)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    load_before = os.getloadavg()
    prov = provenance(load_before)
    sizes = [int(x) for x in args.sizes.split(",") if x]
    rows = [measure(args.tool, n, 0, args.ulimit_kib) for n in sizes]
    middle = sizes[len(sizes) // 2]
    rows.append(measure(args.tool, middle, middle, args.ulimit_kib))
    if args.out:
        meta = {**prov, "command": " ".join(["bench/sets.py"] + sys.argv[1:])}
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "sets": rows}, f, indent=1)


if __name__ == "__main__":
    main()
