"""A backlog drained by scheduled invocations: --days consecutive days of
--day-flights per-flight index files each (and their flight objects),
written with pyarrow (tests/support/archive.py gen), then
`archive-compaction run --max-duration S` again and again, as Lambda's
schedule would with a timeout of S seconds, until an invocation finds
nothing left before the cutoff.

    python bench/backlog.py [--bin target/release/archive-compaction]
                            [--days 365] [--day-flights 100]
                            [--max-duration 20] [--margin 9] [--out FILE]

Per invocation: its status, stop reason, `resume_date`, the dates and
files it compacted, wall time, CPU time (user + system) and peak RSS (GNU
time's %M). The bench fails unless every invocation is a Success, or a
deadline stop naming `resume_date` (a clean stop, exit 0), and unless the
bucket read back with pyarrow has every flight's row exactly once, in its
own date's partition, and no per-flight file left. With --out (`make
bench-backlog`) the figures go to FILE, from which bench/docs.py writes
docs/performance.md's `backlog` block.
"""
import argparse
import datetime as dt
import io
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import archive  # noqa: E402
from audit import env, start, GNU_TIME  # noqa: E402  (bench/audit.py, beside this file)
from bench import provenance  # noqa: E402

LAST_DAY = dt.date(2026, 7, 20)
NOW = "2026-07-22T04:50:00Z"


def invoke(binary, e, max_duration):
    """One scheduled invocation: (its report, wall s, CPU s, peak RSS MB)."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.NamedTemporaryFile("r") as rf:
        t0 = time.perf_counter()
        p = subprocess.run([GNU_TIME, "-f", "%M", "-o", rf.name, binary, "run", "--now", NOW,
                            "--max-duration", str(max_duration)], env=e, capture_output=True)
        wall = time.perf_counter() - t0
        rss = rf.read().split()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        report = json.loads(p.stdout)
    except ValueError:
        sys.exit(f"bench/backlog.py: the run exited {p.returncode} without a report: {p.stderr.decode()[-2000:]}")
    clean = report["last_run_status"] == "Success" or (
        report.get("stop_reason") == "deadline" and report.get("resume_date"))
    if p.returncode != 0 or not clean:
        sys.exit(f"bench/backlog.py: an invocation was neither a Success nor a clean deadline stop "
                 f"(exit {p.returncode}): {p.stdout.decode()[:2000]}")
    return report, wall, cpu, int(rss[-1]) / 1024 if rss and rss[-1].isdigit() else None


def read_back(s3, bucket, days):
    """Every date's partition read with pyarrow: (rows, distinct flights,
    compacted files, per-flight files left, rows outside their date)."""
    import pyarrow.parquet as pq
    rows = files = left = misplaced = 0
    flights = set()
    for d in days:
        prefix = archive.index_prefix(d)
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                name = o["Key"][len(prefix):]
                if not name.startswith("compacted-"):
                    left += 1
                    continue
                files += 1
                t = pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()))
                rows += t.num_rows
                for key in t.column("s3_key").to_pylist():
                    flights.add(key)
                    if f"/{d:%Y/%m/%d}/" not in key:
                        misplaced += 1
    return rows, len(flights), files, left, misplaced


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "archive-compaction"))
    ap.add_argument("--server", default="ministack")
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--day-flights", type=int, default=100)
    ap.add_argument("--max-duration", type=int, default=20,
                    help="each invocation's time, seconds (Lambda's timeout in the schedule)")
    ap.add_argument("--margin", type=int, default=9,
                    help="DEADLINE_MARGIN_SECONDS (the template's 60 s is for a 900 s timeout)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    load_before = os.getloadavg()
    srv, endpoint = start(args.server)
    s3 = archive.client(endpoint)
    bucket = "bench-backlog"
    s3.create_bucket(Bucket=bucket)
    first = LAST_DAY - dt.timedelta(days=args.days - 1)
    days = [first + dt.timedelta(days=i) for i in range(args.days)]
    spec = json.dumps({"seed": 3, "create_bucket": False,
                       "days": [{"date": d.isoformat(), "flights": args.day_flights} for d in days]})
    t0 = time.perf_counter()
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "archive.py"), "gen",
                    "--endpoint", endpoint, "--bucket", bucket], input=spec.encode(), check=True,
                   stdout=subprocess.DEVNULL)
    print(f"bench/backlog.py: {args.days} days of {args.day_flights} flights written in "
          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    e = env(endpoint, bucket)
    e["START_DATE"] = first.isoformat()
    e["DEADLINE_MARGIN_SECONDS"] = str(args.margin)
    runs = []
    while True:
        report, wall, cpu, rss = invoke(args.bin, e, args.max_duration)
        line = {"invocation": len(runs) + 1, "status": report["last_run_status"],
                "stop_reason": report.get("stop_reason"), "resume_date": report.get("resume_date"),
                "days_compacted": report.get("days_compacted", 0),
                "files_compacted": report.get("files_compacted", 0),
                "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_rss_mb": rss}
        print(json.dumps(line), flush=True)
        runs.append(line)
        if line["days_compacted"] == 0:
            break
        if len(runs) > 10 * args.days:
            sys.exit("bench/backlog.py: the backlog is not draining")
    rows, distinct, files, left, misplaced = read_back(s3, bucket, days)
    srv.stdin.close()
    srv.wait()
    flights = args.days * args.day_flights
    check = {"flights": flights, "rows": rows, "distinct_flights": distinct, "compacted_files": files,
             "per_flight_files_left": left, "rows_outside_their_date": misplaced}
    print(json.dumps(check), flush=True)
    if (rows, distinct, left, misplaced) != (flights, flights, 0, 0):
        sys.exit(f"bench/backlog.py: the bucket read back is not every flight once: {check}")
    if args.out:
        meta = {**provenance(load_before), "server": args.server,
                "command": "make bench-backlog" if os.environ.get("MAKELEVEL") else " ".join(sys.argv),
                "days": args.days, "day_flights": args.day_flights, "max_duration_s": args.max_duration,
                "margin_s": args.margin}
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "backlog": runs, "backlog_check": check}, f, indent=1)


if __name__ == "__main__":
    main()
