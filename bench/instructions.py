"""`make bench-instructions`: the job's user-space instructions against the
SDK's floor, counted by callgrind (valgrind), on one day of N single-row
index files.

    python bench/instructions.py [--files 10000] [--concurrency 64]
                                 [--server ministack] [--out target/bench-instructions.json]

The day is bench/bench.py's (pyarrow with the writer's defaults, through
tests/support/archive.py; cached in target/bench-data/), uploaded to a local
S3 server (ministack) reached over plain HTTP through bench-tool's proxy at
0 ms (it counts the requests by kind). Two programs run under
`valgrind --tool=callgrind`, the `profiling` build of each (release with
symbols; the same code as release):

  sdk-floor  bench/sdk_floor.rs: list the day's index prefix, GET every file,
             CONCURRENCY in flight, keep the bodies; the SDK's defaults
  job        `archive-compaction run` on that day (LOG_LEVEL info, its
             default), which must compact every file

Instructions are the `Ir` count of the whole process (start-up included);
under callgrind the threads run one at a time and the count moves by a
fraction of a percent from run to run, whatever the load. The job's split
is callgrind_annotate's inclusive cost of the functions in SPLIT. The
figures go to --out, and bench/docs.py writes them into
docs/performance.md's `instructions` block. The callgrind files stay in
target/instructions/ for `callgrind_annotate --inclusive=yes`.
"""
import argparse
import datetime as dt
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("BENCH_PROFILE", "profiling")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the day's files, the servers, the job's run and checks)

ROOT = bench.ROOT
FLOOR = os.path.join(bench.RELEASE, "examples", "sdk-floor")
OUT_DIR = os.path.join(ROOT, "target", "instructions")

# The job's split: (part, regexes over callgrind_annotate's function names);
# a part's cost is the sum, over its regexes, of the largest inclusive cost
# among the functions each matches (an async function's cost is its
# future's `poll`, named `{{closure}}`; a function shows once a source file
# its lines come from, each with the same inclusive cost or less). The
# parts overlap: `commit` (phases 2-6 of a part: manifest, PUT, verify,
# delete) holds the re-list that `listing` counts too.
SPLIT = [
    ("decode", [r"^archive_compaction::data::merge::schema::decode_parsed$"]),
    ("footer", [r"^archive_compaction::data::input::parse_footer$"]),
    ("listing", [r"^archive_compaction::protocol::day::Day::list_window::\{\{closure\}\}$",
                 r"^archive_compaction::protocol::commit::listed_etags::\{\{closure\}\}$"]),
    ("GET", [r"^archive_compaction::infra::storage::s3::S3Store::get_read::\{\{closure\}\}$"]),
    ("commit", [r"^archive_compaction::protocol::commit::write_part::\{\{closure\}\}$"]),
]


def callgrind(name, cmd):
    """`cmd` under callgrind, its output in target/instructions/{name}.out."""
    out = os.path.join(OUT_DIR, f"{name}.out")
    return out, ["valgrind", "--tool=callgrind", "--quiet", f"--callgrind-out-file={out}"] + cmd


def total(out):
    """The Ir count a callgrind file sums up ("summary:" or "totals:")."""
    with open(out) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit(f"bench: no totals in {out}")


def inclusive(out):
    """{function: inclusive Ir} from callgrind_annotate --inclusive=yes."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                          capture_output=True, text=True, check=True).stdout
    costs = {}
    for m in re.finditer(r"^\s*([\d,]+) \([^)]*\)\s+(?:[^:\s]*:)?(.+?)(?: \[[^\]]*\])?$", text, re.M):
        name = m.group(2).strip()
        costs[name] = max(costs.get(name, 0), int(m.group(1).replace(",", "")))
    return costs


def split(costs):
    parts = {}
    for part, patterns in SPLIT:
        found = [max((c for f, c in costs.items() if re.search(p, f)), default=None) for p in patterns]
        parts[part] = sum(found) if None not in found else None
    return parts


def measure_floor(svc, bucket, prefix, n, args):
    if args.reuse_floor:
        with open(args.out) as f:
            kept = bench.json.load(f)["instructions"]
        if kept["files"] != n:
            raise SystemExit(f"bench: {args.out} holds {kept['files']} files, not {n}: run without --reuse-floor")
        return kept["sdk_floor"]
    floor_out, cmd = callgrind("sdk-floor", [FLOOR, bucket, prefix, str(args.concurrency)])
    t0 = time.perf_counter()
    out, _, _, req, kinds, _ = bench.run(cmd, bench.env(svc.proxied), svc)
    floor_s = time.perf_counter() - t0
    got = bench.json.loads(out)
    if got["objects"] != n:
        raise SystemExit(f"bench: sdk-floor read {got['objects']} objects, not {n}")
    floor = {"instructions": total(floor_out), "requests": req, "by_kind": kinds, "seconds": floor_s}
    bench.log(f"bench: sdk-floor {floor['instructions']:,} instructions in {floor_s:.0f} s")
    return floor


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--server", default="ministack", choices=["ministack", "moto"])
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "bench-instructions.json"))
    ap.add_argument("--reuse-floor", action="store_true",
                    help="take sdk-floor's figures from --out (same --files) instead of running it again: "
                         "quicker when only the job changed")
    args = ap.parse_args()
    n = args.files
    for exe in (bench.JOB, bench.TOOL, FLOOR):
        if not os.path.exists(exe):
            raise SystemExit(f"bench: {exe} missing; run `make bench-instructions` (it builds them)")
    os.makedirs(OUT_DIR, exist_ok=True)
    prov = bench.provenance(os.getloadavg())
    data = bench.generate(n)
    prefix = bench.archive.index_prefix(bench.DATE)
    svc = bench.Services(args.server, 0)
    try:
        bucket = f"instructions-{n}"
        bench.prepare_bucket(svc, bucket, data)
        floor = measure_floor(svc, bucket, prefix, n, args)
        job_out, cmd = callgrind("job", [])
        os.environ["BENCH_JOB_WRAPPER"] = " ".join(cmd)
        os.environ["BENCH_LOG_LEVEL"] = "info"
        t0 = time.perf_counter()
        m = bench.measure_job(svc, bucket, n, args.concurrency)
        job_s = time.perf_counter() - t0
        job = {"instructions": total(job_out), "requests": m["requests"], "by_kind": m["by_kind"],
               "seconds": job_s, "split": split(inclusive(job_out))}
        bench.log(f"bench: job {job['instructions']:,} instructions in {job_s:.0f} s")
    finally:
        svc.close()
    meta = {**prov, "server": args.server, "concurrency": args.concurrency,
            "valgrind": subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip(),
            "command": " ".join(["bench/instructions.py"] + sys.argv[1:]), "cpus": os.cpu_count()}
    with open(args.out, "w") as f:
        bench.json.dump({"meta": meta, "instructions": {"files": n, "job": job, "sdk_floor": floor}}, f, indent=1)
    ratio = job["instructions"] / floor["instructions"]
    print(f"files {n:,}: job {job['instructions']:,} ({job['instructions'] / n:,.0f} a file), "
          f"sdk-floor {floor['instructions']:,} ({floor['instructions'] / n:,.0f} a file), ratio {ratio:.3f}")
    print("job split (inclusive): " + ", ".join(
        f"{k} {v / n:,.0f}/file" if v else f"{k} ?" for k, v in job["split"].items()))
    print(f"figures: {args.out}")


if __name__ == "__main__":
    main()
