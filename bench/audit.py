"""What `archive-compaction audit` costs: wall time, CPU time (user +
system, wait4's), peak RSS (GNU time's %M) and the GETs and bytes it read,
on a local S3 server (ministack by default) without added latency.

    python bench/audit.py [--bin target/release/archive-compaction ...]
                          [--server ministack|moto] [--flights 10000[,80000...]]
                          [--days 365] [--day-flights 100] [--out FILE]
                          [--max-duration S] [--ulimit-kib K] [--skip day,year,compact]

Two buckets, written with pyarrow (tests/support/archive.py):

  day    one day of --flights flights: audited as --flights per-flight
         files, then again after `run --date` compacted it into one file;
         several counts (`--flights 20000,80000`, `make bench-audit-rss`)
         are one bucket each, uploaded once, and every --bin (repeat it:
         before and after a change) audits each, so the peak RSS of one
         binary can be compared across sizes
  year   --days consecutive days, each one compacted file (written as the
         Python job left them) of --day-flights rows and its flight objects

Prints one JSON line per measurement; with --out (`make bench-audit`) also
writes them with the date, commit, machine and load average to FILE, from
which bench/docs.py writes docs/performance.md's `audit` block.
"""
import argparse
import concurrent.futures as cf
import datetime as dt
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import archive  # noqa: E402
from bench import free_port, provenance  # noqa: E402  (bench/bench.py, beside this file)

GNU_TIME = os.environ.get("BENCH_TIME") or "/usr/bin/time"


def start(kind):
    port = free_port()
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "support", "serve.py"), kind, str(port)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    return p, f"http://127.0.0.1:{port}"


def env(endpoint, bucket):
    e = dict(os.environ)
    e.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test",
             AWS_REGION="us-east-1", S3_BUCKET=bucket, S3_FORCE_PATH_STYLE="true",
             METRICS_ENABLED="false", LOG_LEVEL="warn")
    return e


# The audit's address-space limit in KiB (`--ulimit-kib`, as `ulimit -v`
# sets it; 0: none): a memory bound shown by running under it.
ULIMIT_KIB = 0


def measure(cmd, e, ok=(0, 2)):
    """Runs `cmd` under GNU time (and ULIMIT_KIB): (its JSON report, wall
    seconds, peak RSS MB)."""
    def limit():
        if ULIMIT_KIB:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (ULIMIT_KIB * 1024, ULIMIT_KIB * 1024))
    with tempfile.NamedTemporaryFile("r") as rf:
        t0 = time.perf_counter()
        p = subprocess.Popen([GNU_TIME, "-f", "%M", "-o", rf.name] + cmd, env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit)
        out, err = p.communicate()
        wall = time.perf_counter() - t0
        rss = rf.read().split()
    # An audit the deadline cut (exit 1, `incomplete`, with a resume_date)
    # is a measurement too: the bench says whether it finished.
    cut = p.returncode == 1 and report_of(out).get("resume_date")
    if p.returncode not in ok and not cut:
        sys.exit(f"{cmd} exited {p.returncode}: {err.decode()[-2000:]}")
    return report_of(out), wall, int(rss[-1]) / 1024 if rss and rss[-1].isdigit() else None


def report_of(out):
    """The JSON report on stdout, or {} when there is none."""
    return json.loads(out) if out.strip().startswith(b"{") else {}


def timed(name, cmd, e):
    """Measures `cmd` and prints one JSON line; CPU is the user + system
    time of the children reaped meanwhile (GNU time and the command)."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    report, wall, rss = measure(cmd, e)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    t = report.get("totals", {})
    line = {"measure": name, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_rss_mb": rss,
            "dates": report.get("dates"), "flights": t.get("flights"), "rows": t.get("rows"),
            "gets": t.get("requests"), "bytes_read": t.get("bytes_read"),
            "multi_row_bytes": t.get("multi_row_bytes"), "status": report.get("status"),
            "resume_date": report.get("resume_date"), "ulimit_v_kib": ULIMIT_KIB or None}
    print(json.dumps(line), flush=True)
    MEASURED.append(line)
    return report


MEASURED = []


def put_all(s3, bucket, puts):
    def put(item):
        s3.put_object(Bucket=bucket, Key=item[0], Body=item[1])
    with cf.ThreadPoolExecutor(32) as ex:
        list(ex.map(put, puts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append",
                    help="the binary to measure; repeat it to measure several on the same buckets "
                         "(default target/release/archive-compaction)")
    ap.add_argument("--server", default="ministack")
    ap.add_argument("--flights", default="10000",
                    help="the day's flights; a comma list is one bucket each (the day part only)")
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--day-flights", type=int, default=100)
    ap.add_argument("--skip", default="",
                    help="parts to leave out: day, year, and compact (the day's compaction and "
                         "its second audit)")
    ap.add_argument("--max-duration", default="",
                    help="audit --max-duration for the uncompacted day (e.g. 900 for a Lambda's "
                         "15 minutes); its report's resume_date says whether it finished")
    ap.add_argument("--ulimit-kib", type=int, default=0,
                    help="run every audit under this address-space limit (ulimit -v, KiB; 0: none)")
    ap.add_argument("--out", default="",
                    help="also write the measurements, with when, what and where, as JSON "
                         "(make bench-audit: target/bench-audit.json, which bench/docs.py puts "
                         "into docs/performance.md's `audit` block)")
    args = ap.parse_args()
    bins = args.bin or [os.path.join(ROOT, "target", "release", "archive-compaction")]
    sizes = [int(n) for n in args.flights.split(",")]
    global ULIMIT_KIB
    ULIMIT_KIB = args.ulimit_kib
    load_before = os.getloadavg()
    srv, endpoint = start(args.server)
    s3 = archive.client(endpoint)
    if "day" not in args.skip:
        buckets = []
        for n in sizes:
            b = "bench-audit-day" if len(sizes) == 1 else f"bench-audit-day-{n}"
            s3.create_bucket(Bucket=b)
            spec = json.dumps({"seed": 1, "create_bucket": False,
                               "days": [{"date": "2026-07-20", "flights": n}]})
            subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "archive.py"), "gen",
                            "--endpoint", endpoint, "--bucket", b], input=spec.encode(), check=True,
                           stdout=subprocess.DEVNULL)
            buckets.append((n, b))
        bound = ["--max-duration", args.max_duration] if args.max_duration else []
        for n, b in buckets:
            for binary in bins:
                named = f" ({os.path.relpath(binary, ROOT)})" if len(bins) > 1 else ""
                timed(f"day of {n} per-flight files" + (f", --max-duration {args.max_duration}" if bound else "") + named,
                      [binary, "audit", "--from", "2026-07-20", "--to", "2026-07-20"] + bound, env(endpoint, b))
    if "day" not in args.skip and "compact" not in args.skip:
        n, b = buckets[-1]
        e = env(endpoint, b)
        subprocess.run([bins[0], "run", "--date", "2026-07-20", "--now", "2026-07-22T04:50:00Z"], env=e,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for binary in bins:
            timed(f"day of {n} flights, one compacted file",
                  [binary, "audit", "--from", "2026-07-20", "--to", "2026-07-20"], e)
    if "year" not in args.skip:
        b = "bench-audit-year"
        s3.create_bucket(Bucket=b)
        rnd = random.Random(2)
        start_day = dt.date(2025, 1, 1)
        puts = []
        for i in range(args.days):
            d = start_day + dt.timedelta(days=i)
            rows = []
            for k in range(args.day_flights):
                _, key, row = archive.make_flight(d, rnd, "mixed", k)
                puts.append((key, gzip.compress(json.dumps(archive.canonical(row)).encode())))
                rows.append(row)
            rows.sort(key=lambda r: r["s3_key"].rsplit("_", 1)[-1])
            puts.append((archive.index_prefix(d) + "compacted-py.parquet", archive.parquet_bytes(rows)))
        put_all(s3, b, puts)
        last = start_day + dt.timedelta(days=args.days - 1)
        timed(f"{args.days} compacted days of {args.day_flights} flights",
              [bins[0], "audit", "--from", start_day.isoformat(), "--to", last.isoformat()],
              env(endpoint, b))
    srv.stdin.close()
    srv.wait()
    if args.out:
        build = "release" if os.sep + "release" + os.sep in os.path.abspath(bins[0]) else "debug"
        meta = {**provenance(load_before), "server": args.server, "build": build,
                "command": "bench/audit.py " + " ".join(sys.argv[1:])}
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "audit": MEASURED}, f, indent=1)


if __name__ == "__main__":
    main()
