"""`make bench-sizing`: the run sizing a date's parts itself, with no
setting changed: for each day of N per-flight files (bench.py's generated
day, uploaded by its prepare_bucket, behind its latency proxy) and each
told memory M, `archive-compaction run --now ...` with
`AWS_LAMBDA_FUNCTION_MEMORY_SIZE=M` and no `PART_FILES`,
`FLIGHTS_IN_MEMORY`, `MEMORY_LIMIT_MB` or `READ_CONCURRENCY`, run again (a
new process each time, as nights are) until the date is compacted, at
most --runs times.

    python bench/sizing.py [--sizes 30000,100000,500000] [--memories 128,256,512v]
                           [--max-duration S --margin S] [--runs 5]
                           [--out target/bench-sizing.json] [--append]

A memory ending in `v` (`512v`) runs the job under `ulimit -v` of that
many MiB as well (bench.py's --job-ulimit-kib): Lambda bounds resident
memory, not address space, so every run's peak RSS (GNU time's %M) is
what is compared with M. --max-duration S runs every invocation as
`run --max-duration S` with `DEADLINE_MARGIN_SECONDS` --margin.

Per run: status, stop reason, the date's action, parts, passes,
files_left, per-flight files read, wall, CPU (user + system, wait4) per
file read and peak RSS. A case passes when the date is compacted within
--runs runs, every run exited 0 with a report, the per-flight files
read over the runs are N, and the bucket read back with pyarrow
(backlog.py's read_back) holds N rows of N distinct flights, no
per-flight file left. A failing case keeps its last report and stderr
tail in the JSON; the script then exits 1 after writing it. bench/docs.py
--block sizing writes docs/performance.md's `sizing` block from --out.
"""
import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (bench/bench.py, beside this file)
from backlog import read_back  # noqa: E402

UNSET = ("PART_FILES", "FLIGHTS_IN_MEMORY", "MEMORY_LIMIT_MB", "READ_CONCURRENCY", "INPUT_BUDGET_MB",
         "DEADLINE_MARGIN_SECONDS", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE")


def invoke(cmd, env, limit_kib):
    """One run: (exit code, stdout, stderr, wall s, peak RSS MB)."""
    def limit():
        if limit_kib:
            resource.setrlimit(resource.RLIMIT_AS, (limit_kib * 1024, limit_kib * 1024))
    with tempfile.NamedTemporaryFile("r", prefix="bench-rss-") as rf:
        t0 = time.perf_counter()
        p = subprocess.Popen([bench.GNU_TIME, "-f", "%M", "-o", rf.name] + cmd, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit)
        out, err = p.communicate()
        wall = time.perf_counter() - t0
        rss = rf.read().split()
    return p.returncode, out.decode(), err.decode(errors="replace"), wall, \
        int(rss[-1]) / 1024 if rss and rss[-1].isdigit() else None


def case(svc, n, memory, args, progress):
    ulimit = memory.endswith("v")
    mb = int(memory.rstrip("v"))
    limit_kib = mb * 1024 if ulimit else 0
    bucket = f"sizing-{n}-{mb}" + ("-v" if ulimit else "") + (f"-t{args.max_duration}" if args.max_duration else "")
    bench.prepare_bucket(svc, bucket, bench.generate(n))
    now = (bench.DATE + dt.timedelta(days=2)).isoformat() + "T04:50:00Z"
    cmd = [bench.JOB, "run", "--now", now] + (["--max-duration", str(args.max_duration)] if args.max_duration else [])
    e = {k: v for k, v in bench.env(svc.proxied, S3_BUCKET=bucket, START_DATE=bench.DATE.isoformat(),
                                    S3_FORCE_PATH_STYLE="true", METRICS_ENABLED="false",
                                    LOG_LEVEL="warn").items() if k not in UNSET}
    e["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = str(mb)
    if args.max_duration:
        e["DEADLINE_MARGIN_SECONDS"] = str(args.margin)
    row = {"files": n, "memory_mb": mb, "ulimit_v_kib": limit_kib, "max_duration_s": args.max_duration or None,
           "margin_s": args.margin if args.max_duration else None, "runs": [], "load_before": os.getloadavg()[0]}
    done, failure = False, None
    for i in range(args.runs):
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        code, out, err, wall, rss = invoke(cmd, e, limit_kib)
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        try:
            rep, _ = json.JSONDecoder().raw_decode(out[out.find("{"):])
        except ValueError:
            rep = None
        day = next((d for d in (rep or {}).get("days", []) if d["date"] == bench.DATE.isoformat()), {})
        per_flight = day.get("files_read", 0) - day.get("files_read_compacted", 0) - day.get("files_read_multi_row", 0)
        r = {"run": i + 1, "exit": code, "status": (rep or {}).get("last_run_status"),
             "stop_reason": (rep or {}).get("stop_reason"), "action": day.get("action"),
             "parts": day.get("parts"), "passes": day.get("passes"), "files_left": day.get("files_left"),
             "files_read": per_flight, "rows_written": (rep or {}).get("rows_written"),
             "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
             "cpu_ms_per_file": round(cpu * 1000 / max(per_flight, 1), 3), "rss_mb": rss,
             "load": os.getloadavg()[0]}
        row["runs"].append(r)
        progress(f"N={n} M={memory}{' max-duration ' + str(args.max_duration) if args.max_duration else ''} "
                 f"run {i + 1}: " + json.dumps(r))
        if code != 0 or rep is None or rep["last_run_status"] != "Success":
            failure = {"report": out[:20000], "stderr_tail": err[-4000:]}
            break
        if rep.get("last_compacted_date") == bench.DATE.isoformat():
            done = True
            break
    rows, distinct, files, left, misplaced = read_back(bench.s3_direct(svc), bucket, [bench.DATE])
    read = sum(r["files_read"] for r in row["runs"])
    row.update(done=done, files_read=read, read_back={"rows": rows, "distinct_flights": distinct,
               "compacted_files": files, "per_flight_files_left": left, "rows_outside_their_date": misplaced},
               peak_rss_mb=max((r["rss_mb"] or 0) for r in row["runs"]), load_after=os.getloadavg()[0])
    row["exact"] = done and read == n and (rows, distinct, left, misplaced) == (n, n, 0, 0)
    if not row["exact"] and failure is None:
        failure = {"report": out[:20000], "stderr_tail": err[-4000:]}
    if failure:
        row["failure"] = failure
    progress(f"N={n} M={memory}{' max-duration ' + str(args.max_duration) if args.max_duration else ''}: "
             f"{'EXACT' if row['exact'] else 'NOT EXACT'} in {len(row['runs'])} run(s), peak RSS "
             f"{row['peak_rss_mb']:.0f} MB, read back {rows} rows / {distinct} flights / {files} compacted files, "
             f"{left} per-flight left" + (f"; FAILURE: {json.dumps(failure)}" if failure else ""))
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="30000,100000,500000")
    ap.add_argument("--memories", default="128,256,512v")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max-duration", type=int, default=0)
    ap.add_argument("--margin", type=int, default=10)
    ap.add_argument("--latency-ms", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(bench.ROOT, "target", "bench-sizing.json"))
    ap.add_argument("--append", action="store_true", help="add the cases to --out's")
    ap.add_argument("--progress", default="", help="also append each run's line to this file")
    args = ap.parse_args()

    def progress(line):
        bench.log("sizing: " + line)
        if args.progress:
            with open(args.progress, "a") as f:
                f.write(time.strftime("%H:%M:%S ") + line + "\n")
    data = {"meta": {}, "sizing": []}
    if args.append and os.path.exists(args.out):
        with open(args.out) as f:
            data = json.load(f)
    if not data["meta"]:
        data["meta"] = {**bench.provenance(os.getloadavg()), "server": "ministack", "latency_ms": args.latency_ms,
                        "command": "make bench-sizing" if os.environ.get("MAKELEVEL") else " ".join(sys.argv)}
    svc = bench.Services("ministack", args.latency_ms)
    try:
        for n in [int(x) for x in args.sizes.split(",") if x]:
            for m in [x for x in args.memories.split(",") if x]:
                data["sizing"].append(case(svc, n, m, args, progress))
                with open(args.out, "w") as f:
                    json.dump(data, f, indent=1)
    finally:
        svc.close()
    if not all(r["exact"] for r in data["sizing"]):
        sys.exit("bench/sizing.py: a day was not compacted exactly (see " + args.out + ")")


if __name__ == "__main__":
    main()
