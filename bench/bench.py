"""`make bench`: this job against the alternatives, on days of N single-row
index files in a local S3 server behind a latency proxy.

    python bench/bench.py [--sizes 1000,10000,50000] [--latency-ms 20]
                          [--concurrency 64] [--slow-max 10000] [--query-max 10000]
                          [--systems floor,curl,baseline,duckdb,query,job]
                          [--sweep 16,32,64,128,256 --sweep-size 10000]

For each N, in one run and against the same data:

  floor     the I/O floor: list the partition, then only the GETs, at the
            job's concurrency, with the job's own read path (bench-tool floor;
            its time is the GET phase alone)
  curl      an independent GET floor: one system `curl` process,
            --parallel --parallel-max <concurrency> over kept-alive HTTP/1.1
            connections, SigV4-signed (--aws-sigv4), every index key of the
            day (listed beforehand with boto3 directly against the server,
            not through the proxy; the listing's time is reported apart)
  baseline  what the Python job does: list, sequential GET, pyarrow
            read + concat_tables, one PUT (bench/baseline.py)
  duckdb    DuckDB (httpfs, from the duckdb-extension-httpfs wheel: no
            download at run time) COPY (SELECT * FROM read_parquet('s3://...'))
            TO 's3://...' (bench/duckdb_copy.py)
  job       `archive-compaction run` (release build), the whole invocation:
            lease, parity listings, reads, merge, manifest, PUT, HEAD,
            deletes, watermark
  query     what compaction buys at query time: DuckDB reading the day
            partition through the proxy as Athena reads one, `count(*)` and a
            lookup by icao_hex, BEFORE compaction (the N uploaded files) and
            AFTER the job compacted the same bucket (bench/duckdb_query.py);
            the answers must agree, or the bench fails. Up to --query-max files.

Each runs as its own process: wall time (perf counter around the process,
except the floor), CPU time (the process's user + system time, ru_utime +
ru_stime via wait4, whole process, start-up included; reported per file),
peak RSS (GNU time's %M: see run()) and the requests the proxy saw while it ran. baseline and duckdb are skipped above
--slow-max files (they take ~25 ms a file sequentially: 50,000 files would
be ~20 minutes each).

The archive (index files written by pyarrow with the writer's defaults, via
tests/support/archive.py, plus the flights/ objects the parity gate lists)
is generated once per N into target/bench-data/ and reused by later runs;
it is uploaded to the S3 server (--server: ministack by default, or moto)
before each measurement. Results go to
target/bench-results.json and a table on stdout; `make bench` then draws
docs/bench.png from the JSON (bench/plot.py).
"""
import argparse
import datetime as dt
import gzip
import json
import math
import multiprocessing as mp
import os
import platform
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import archive  # noqa: E402  (the tests' fixture writer: real schema, pyarrow defaults)

TOOLS = os.environ.get("TOOLS_DIR") or os.path.join(ROOT, ".tools")
PY = os.path.join(TOOLS, "py", "bin", "python")
DUCK_PY = os.path.join(TOOLS, "duckdb", "bin", "python")
# BENCH_PROFILE=profiling runs the build of `cargo build --profile profiling`
# (release with symbols, for `perf record`); default the release build.
RELEASE = os.path.join(ROOT, "target", os.environ.get("BENCH_PROFILE") or "release")
# BENCH_JOB=path runs another build of the job (e.g. a copy of the previous
# one, for an A/B comparison on the same machine state).
JOB = os.environ.get("BENCH_JOB") or os.path.join(RELEASE, "archive-compaction")
# The job's address-space limit in KiB (`--job-ulimit-kib`; 0: none).
JOB_ULIMIT_KIB = 0
TOOL = os.path.join(RELEASE, "examples", "bench-tool")
# GNU time measures each contender's peak RSS (see run()).
GNU_TIME = os.environ.get("BENCH_TIME") or "/usr/bin/time"
# BENCH_CURL=path runs another curl (the system's by default).
CURL = os.environ.get("BENCH_CURL") or shutil.which("curl") or "curl"
DATA = os.path.join(ROOT, "target", "bench-data")
DATE = dt.date(2026, 7, 20)
GEN_VERSION = 1
CHUNK = 1000


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def _gen_chunk(args):
    n, k, out = args
    rnd = random.Random(1_000_003 * n + k)
    for i in range(k * CHUNK, min(n, (k + 1) * CHUNK)):
        u, key, row = archive.make_flight(DATE, rnd, "mixed", i)
        path = os.path.join(out, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(gzip.compress(json.dumps(archive.canonical(row)).encode()))
        ik = os.path.join(out, archive.index_prefix(DATE) + f"{u}.parquet")
        os.makedirs(os.path.dirname(ik), exist_ok=True)
        with open(ik, "wb") as f:
            f.write(archive.parquet_bytes([row]))


def generate(n):
    """The day's files under target/bench-data/N{n}/ (made once, then reused)."""
    out = os.path.join(DATA, f"N{n}")
    marker = os.path.join(out, ".complete")
    if os.path.exists(marker) and open(marker).read() == str(GEN_VERSION):
        return out
    log(f"bench: generating {n} flights + index files into {out} (once; reused by later runs)")
    t0 = time.time()
    if os.path.exists(out):
        import shutil
        shutil.rmtree(out)
    os.makedirs(out)
    with mp.Pool(max(1, os.cpu_count() or 1)) as pool:
        pool.map(_gen_chunk, [(n, k, out) for k in range(math.ceil(n / CHUNK))])
    open(marker, "w").write(str(GEN_VERSION))
    log(f"bench: generated in {time.time() - t0:.1f} s")
    return out


class Services:
    """moto (tests/support/serve.py) and the latency proxy; both stop when we close their stdin."""

    def __init__(self, server, latency_ms, proxy="rust"):
        self.procs = []
        self.s3_port = free_port()
        self._start([PY, os.path.join(ROOT, "tests", "support", "serve.py"), server, str(self.s3_port)])
        self.proxy_port = free_port()
        if proxy == "python":  # the tests' fault proxy, for comparison
            self._start([PY, os.path.join(ROOT, "tests", "support", "faultproxy.py"),
                         str(self.proxy_port), str(self.s3_port)])
            import urllib.request
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{self.proxy_port}/__proxy/config",
                data=json.dumps({"latency_ms": latency_ms}).encode(), method="POST")).read()
        else:
            self._start([TOOL, "proxy", str(self.proxy_port), str(self.s3_port),
                         "--latency-ms", str(latency_ms)])
        self.direct = f"http://127.0.0.1:{self.s3_port}"
        self.proxied = f"http://127.0.0.1:{self.proxy_port}"

    def _start(self, cmd):
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.procs.append(p)
        line = p.stdout.readline().decode().strip()
        if line != "ready":
            raise SystemExit(f"bench: {cmd[:2]} did not start")

    def stats(self):
        import urllib.request
        with urllib.request.urlopen(f"{self.proxied}/__proxy/stats") as r:
            return json.loads(r.read())

    def close(self):
        for p in self.procs:
            try:
                p.stdin.close()
                p.wait(timeout=10)
            except Exception:
                p.kill()
                p.wait()


def env(endpoint, **extra):
    e = dict(os.environ)
    e.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test",
             AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    e.update({k: str(v) for k, v in extra.items()})
    return e


def run(cmd, env_, svc, stderr_out=None, limit_as_kib=0):
    """Runs one contender: (stdout, wall seconds, peak RSS MB, proxy requests,
    requests by kind, CPU seconds (user, system)).

    The peak RSS is GNU time's `%M` for the command, not the ru_maxrss of
    our own wait4: Linux records the RSS a process had when it called exec,
    so a child forked from this Python process (about 100 MB with pyarrow and
    boto3 loaded) would report at least that. GNU time is small, and the
    command it forks starts from its size. CPU time is wait4's (time's and the
    command's together; time's own is about a millisecond). `limit_as_kib`
    (0: none) is the command's address-space limit, as `ulimit -v` sets it
    (RLIMIT_AS): the job's under `--job-ulimit-kib`, to show a memory bound
    by running under it, not by hoping."""
    def limit():
        if limit_as_kib:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (limit_as_kib * 1024, limit_as_kib * 1024))
    before = svc.stats()
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe, \
            tempfile.NamedTemporaryFile("r", prefix="bench-rss-") as rf:
        p = subprocess.Popen([GNU_TIME, "-f", "%M", "-o", rf.name] + cmd, env=env_, stdout=fo, stderr=fe,
                             preexec_fn=limit)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
        if stderr_out is not None:
            stderr_out.append(err.decode(errors="replace"))
        if os.environ.get("BENCH_STDERR"):
            with open(os.environ["BENCH_STDERR"], "ab") as f:
                f.write(err)
        # Its last line is %M (KiB); one before it says so if the command failed.
        rss_lines = rf.read().split()
    rss_kib = int(rss_lines[-1]) if rss_lines and rss_lines[-1].isdigit() else float("nan")
    after = svc.stats()
    kinds = {k: v - before["by_kind"].get(k, 0) for k, v in after["by_kind"].items()
             if v - before["by_kind"].get(k, 0)}
    if p.returncode not in (0,):
        log(err.decode()[-3000:])
        raise SystemExit(f"bench: {os.path.basename(cmd[0])} {cmd[1:3]} exited {p.returncode}")
    return (out.decode(), wall, rss_kib / 1024.0, after["requests"] - before["requests"], kinds,
            (ru.ru_utime, ru.ru_stime))


def cpu_fields(cpu, n):
    """user/system CPU seconds of a process and its CPU per file in ms."""
    user, sys_ = cpu
    return {"user_s": user, "sys_s": sys_, "cpu_ms_per_file": (user + sys_) * 1000 / max(n, 1)}


def prepare_bucket(svc, bucket, data):
    import boto3
    s3 = boto3.client("s3", endpoint_url=svc.direct, region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    try:
        s3.create_bucket(Bucket=bucket)
    except Exception:
        pass
    out = subprocess.run([TOOL, "upload", "--dir", data, "--bucket", bucket, "--concurrency", "32"],
                         env=env(svc.direct), check=True, capture_output=True)
    log(f"bench: uploaded {bucket}: {out.stdout.decode().strip()}")


def probe_server(svc, bucket, prefix, count=100):
    """The S3 server's own time per GET: sequential, direct (no proxy), boto3,
    in ms. The contenders pay it on top of the proxy's latency."""
    import boto3
    s3 = boto3.client("s3", endpoint_url=svc.direct, region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=count)["Contents"]]
    t0 = time.perf_counter()
    for k in keys:
        s3.get_object(Bucket=bucket, Key=k)["Body"].read()
    return (time.perf_counter() - t0) / len(keys) * 1000


# `FLIGHTS_IN_MEMORY` for the job (`--flights-in-memory`; empty: its default).
FLIGHTS_IN_MEMORY = {}


def measure_job(svc, bucket, n, concurrency):
    now = (DATE + dt.timedelta(days=2)).isoformat() + "T04:50:00Z"
    # BENCH_JOB_WRAPPER="perf record -o target/perf.data" profiles the job
    # (its CPU figures are then the wrapper's and the job's together).
    wrapper = shlex.split(os.environ.get("BENCH_JOB_WRAPPER", ""))
    # The run module's debug lines carry each phase's time (list, read,
    # write, delete); everything else logs at warn.
    err = []
    out, wall, rss, req, kinds, cpu = run(
        wrapper + [JOB, "run", "--now", now],
        env(svc.proxied, S3_BUCKET=bucket, START_DATE=DATE.isoformat(), READ_CONCURRENCY=concurrency,
            S3_FORCE_PATH_STYLE="true", METRICS_ENABLED="false", **FLIGHTS_IN_MEMORY,
            LOG_LEVEL=os.environ.get("BENCH_LOG_LEVEL") or "warn,archive_compaction::commands::run=debug,archive_compaction::protocol::commit=debug"), svc, err,
        limit_as_kib=JOB_ULIMIT_KIB)
    # From the first "{": a BENCH_JOB_WRAPPER such as heaptrack prints its
    # own lines around the job's report on the same stdout.
    rep, _ = json.JSONDecoder().raw_decode(out[out.find("{"):])
    day = next((d for d in rep["days"] if d["date"] == DATE.isoformat()), {})
    # Every per-flight file read once and every row written once; a day in
    # listing windows also folds the compacted files of its earlier windows
    # (files_read_compacted), so files_compacted may be more than n.
    per_flight = day.get("files_read", 0) - day.get("files_read_compacted", 0) - day.get("files_read_multi_row", 0)
    if rep["last_run_status"] != "Success" or rep["rows_written"] != n or per_flight != n:
        raise SystemExit(f"bench: job did not compact {n} files (rss {rss} MB): {out[:2000]}")
    return {"wall_s": wall, "rss_mb": rss, "requests": req, "by_kind": kinds, **cpu_fields(cpu, n),
            "output_bytes": rep["bytes_written"], "rows": rep["rows_written"],
            "phases_s": job_phases(err[0]), "parts": day.get("parts"), "passes": day.get("passes"),
            "part_files": int(os.environ.get("PART_FILES", "50000")), "ulimit_v_kib": JOB_ULIMIT_KIB}


def job_phases(stderr):
    """Seconds per phase of the job's commit (`phase="list"` ... `seconds=`
    in its debug lines, summed over dates), and `other`: the run's own
    duration (its report) outside them is computed by the caller."""
    phases = {}
    for m in re.finditer(r'phase="(\w+)".*?seconds=([0-9.eE+-]+)', stderr):
        phases[m.group(1)] = phases.get(m.group(1), 0.0) + float(m.group(2))
    return phases


def measure_floor(svc, bucket, concurrency, n):
    out, wall, rss, req, kinds, cpu = run(
        [TOOL, "floor", "--bucket", bucket, "--prefix", archive.index_prefix(DATE),
         "--concurrency", str(concurrency), "--date", DATE.isoformat()], env(svc.proxied), svc)
    f = json.loads(out)
    return {"wall_s": f["get_seconds"], "process_s": wall, "rss_mb": rss, "requests": req,
            "by_kind": kinds, **cpu_fields(cpu, n), "bytes_read": f["bytes"],
            "list_s": f["list_seconds"], "ranges_list_s": f["ranges_list_seconds"]}


def s3_direct(svc):
    import boto3
    return boto3.client("s3", endpoint_url=svc.direct, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


def list_keys(svc, bucket, prefix):
    """Every key under `prefix`, listed directly (not through the proxy)."""
    pages = s3_direct(svc).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def measure_curl(svc, bucket, concurrency, n):
    """The independent GET floor: one curl process fetching every index key of
    the day through the proxy, `--parallel-max concurrency` transfers in flight
    on kept-alive connections. Its wall time is the curl process alone; the
    listing (direct, boto3) is timed apart as list_s."""
    prefix = archive.index_prefix(DATE)
    t0 = time.perf_counter()
    keys = list_keys(svc, bucket, prefix)
    list_s = time.perf_counter() - t0
    if len(keys) != n:
        raise SystemExit(f"bench: curl: listed {len(keys)} keys under {bucket}/{prefix}, expected {n}")
    with tempfile.NamedTemporaryFile("w", suffix=".curlrc", prefix="bench-curl-") as cfg:
        for k in keys:
            cfg.write(f'url = "{svc.proxied}/{bucket}/{k}"\noutput = "/dev/null"\n')
        cfg.flush()
        out, wall, rss, req, kinds, cpu = run(
            [CURL, "--silent", "--show-error", "--fail", "--http1.1",
             "--parallel", "--parallel-immediate", "--parallel-max", str(concurrency),
             "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "test:test",
             "--write-out", "%{http_code} %{size_download}\n", "--config", cfg.name],
            env(svc.proxied), svc)
    codes = [line.split() for line in out.splitlines() if line.strip()]
    ok = sum(1 for c in codes if c[0] == "200")
    if ok != n or kinds.get("GetObject", 0) != n or req != n:
        raise SystemExit(f"bench: curl fetched {ok} of {n} keys with 200 (proxy saw {req} requests: {kinds})")
    return {"wall_s": wall, "list_s": list_s, "rss_mb": rss, "requests": req, "by_kind": kinds,
            **cpu_fields(cpu, n), "bytes_read": sum(int(c[1]) for c in codes),
            "parallel_max": concurrency, "curl": CURL}


def lookup_value(data):
    """An icao_hex that exists in the day: the first index file's (by key)."""
    import pyarrow.parquet as pq
    d = os.path.join(data, archive.index_prefix(DATE))
    first = sorted(f for f in os.listdir(d) if f.endswith(".parquet"))[0]
    return pq.read_table(os.path.join(d, first), columns=["icao_hex"]).column(0)[0].as_py()


def measure_query(svc, bucket, n, icao):
    """DuckDB's count(*) and lookup on the day partition, through the proxy,
    one process (bench/duckdb_query.py); each query is timed on its own, on a
    fresh database."""
    out, wall, rss, req, kinds, cpu = run(
        [DUCK_PY, os.path.join(ROOT, "bench", "duckdb_query.py"), "--bucket", bucket,
         "--prefix", archive.index_prefix(DATE), "--endpoint", f"127.0.0.1:{svc.proxy_port}",
         "--icao-hex", icao], env(svc.proxied), svc)
    q = json.loads(out)
    return {"process_s": wall, "rss_mb": rss, "requests": req, "by_kind": kinds, **cpu_fields(cpu, n), **q}


def check_query(n, before, after):
    """The answers before and after compaction agree: count = N both times,
    the lookup finds at least one row and the same rows. Fails the bench
    otherwise."""
    problems = []
    for when, q in (("before", before), ("after", after)):
        if q["count"]["result"] != n:
            problems.append(f"count(*) {when} compaction = {q['count']['result']}, expected {n}")
    if before["lookup"]["result"] < 1:
        problems.append(f"lookup icao_hex = {before['lookup']['icao_hex']} found no row before compaction")
    if before["lookup"]["rows"] != after["lookup"]["rows"]:
        problems.append("lookup icao_hex = {} returned different rows: before {}, after {}".format(
            before["lookup"]["icao_hex"], before["lookup"]["rows"], after["lookup"]["rows"]))
    if problems:
        raise SystemExit("bench: DuckDB answers differ before and after compaction:\n  " + "\n  ".join(problems))


def measure_baseline(svc, bucket, n):
    out, wall, rss, req, kinds, cpu = run(
        [PY, os.path.join(ROOT, "bench", "baseline.py"), "--bucket", bucket,
         "--prefix", archive.index_prefix(DATE)], env(svc.proxied), svc)
    return {"wall_s": wall, "rss_mb": rss, "requests": req, "by_kind": kinds, **cpu_fields(cpu, n),
            **json.loads(out)}


def measure_duckdb(svc, bucket, n):
    out, wall, rss, req, kinds, cpu = run(
        [DUCK_PY, os.path.join(ROOT, "bench", "duckdb_copy.py"), "--bucket", bucket,
         "--prefix", archive.index_prefix(DATE), "--endpoint", f"127.0.0.1:{svc.proxy_port}"],
        env(svc.proxied), svc)
    return {"wall_s": wall, "rss_mb": rss, "requests": req, "by_kind": kinds, **cpu_fields(cpu, n),
            **json.loads(out)}


def repeated(k, bucket, measure, prepare):
    """Runs `measure` k times, the first on `bucket`, each later one on a
    fresh copy (`prepare`d as `{bucket}-r{i}`: a run compacts and deletes its
    inputs and moves the watermark), and returns the run with the median CPU
    time, with every run's CPU per file and wall time beside it."""
    runs = []
    for i in range(max(1, k)):
        b = bucket if i == 0 else f"{bucket}-r{i}"
        if i:
            prepare(b)
        runs.append(measure(b))
    runs.sort(key=lambda m: m["cpu_ms_per_file"])
    med = dict(runs[len(runs) // 2])
    if len(runs) > 1:
        med["cpu_ms_per_file_runs"] = [m["cpu_ms_per_file"] for m in runs]
        med["wall_s_runs"] = [m["wall_s"] for m in runs]
    return med


def provenance(load_before):
    """When, what and where a run measured, for docs/performance.md (bench/docs.py):
    the UTC date, the commit (with `+dirty` when the work tree outside docs/
    differs from it),
    the CPU model and count, the kernel, and the load average at the start."""
    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    # Dirty when what is measured differs from the commit: the page and plot
    # this benchmark writes (docs/) do not count.
    if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs"):
        commit += "+dirty"
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    machine = f"{os.cpu_count()} CPUs" + (f" ({model})" if model else "") + f", {platform.system()} {platform.release()} {platform.machine()}"
    return {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit, "machine": machine,
            "load_before": " ".join(f"{x:.1f}" for x in load_before)}


def fmt_table(results, args):
    lines = []
    hdr = (f"{'files':>7}  {'system':<9}{'wall s':>9}{'CPU ms/file':>13}{'peak RSS MB':>13}"
           f"{'requests':>10}   vs job")
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for n, r in results.items():
        job = r["job"]["wall_s"]
        for name in ("job", "floor", "curl", "baseline", "duckdb"):
            m = r.get(name)
            if m is None and name not in args.systems.split(","):
                continue
            if m is None:
                lines.append(f"{n:>7}  {name:<9}{'skipped (above --slow-max)':>45}")
                continue
            ratio = {"job": "1.00x",
                     "floor": f"job is {job / m['wall_s']:.2f}x the floor",
                     "curl": f"job is {job / m['wall_s']:.2f}x the curl floor"}.get(
                         name, f"job is {m['wall_s'] / job:.1f}x faster")
            lines.append(f"{n:>7}  {name:<9}{m['wall_s']:>9.2f}{m['cpu_ms_per_file']:>13.3f}{m['rss_mb']:>13.0f}"
                         f"{m['requests']:>10}   {ratio}")
        k = r["job"]["by_kind"]
        if "cpu_ms_per_file_runs" in r["job"]:
            lines.append(f"{'':>7}  job CPU ms/file over {len(r['job']['cpu_ms_per_file_runs'])} runs: "
                         + ", ".join(f"{x:.3f}" for x in r["job"]["cpu_ms_per_file_runs"])
                         + "; wall s: " + ", ".join(f"{x:.2f}" for x in sorted(r["job"]["wall_s_runs"])))
        ph = r["job"].get("phases_s")
        if ph:
            rest = r["job"]["wall_s"] - sum(ph.values())
            lines.append(f"{'':>7}  job phases: " + ", ".join(f"{k} {v:.2f} s" for k, v in ph.items())
                         + f"; the rest of the process (start, lease, recovery, watermark, release) {rest:.2f} s")
        lines.append(f"{'':>7}  job requests by kind: {json.dumps(k, sort_keys=True)}; "
                     f"N + ceil(N/1000) = {n + math.ceil(n / 1000)}; output {r['job']['output_bytes']:,} B "
                     f"for {r['job']['rows']:,} rows")
        if "floor" in r and r["floor"].get("ranges_list_s", -1) >= 0:
            lines.append(f"{'':>7}  floor: listing the partition page by page {r['floor']['list_s']:.2f} s, "
                         f"in key ranges as the job does {r['floor']['ranges_list_s']:.2f} s")
        if "curl" in r:
            lines.append(f"{'':>7}  curl: {r['curl']['requests']} GETs, all 200, --parallel-max "
                         f"{r['curl']['parallel_max']}; its listing (direct, boto3, not in its time) "
                         f"{r['curl']['list_s']:.2f} s")
        q = r.get("query")
        if q is not None:
            for which, label in (("count", "count(*)"), ("lookup", f"icao_hex = '{q['icao_hex']}'")):
                b, a = q["before"][which], q["after"][which]
                lines.append(f"{'':>7}  DuckDB {label:<22} before {b['wall_s']:>7.2f} s {b['requests']:>6} req"
                             f"   after {a['wall_s']:>6.2f} s {a['requests']:>4} req"
                             f"   {b['wall_s'] / max(a['wall_s'], 1e-9):.1f}x faster; answer {a['result']}"
                             + ((" row" if a["result"] == 1 else " rows") if which == "lookup" else ""))
        elif "query" in args.systems.split(","):
            lines.append(f"{'':>7}  DuckDB queries skipped (above --query-max)")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,50000")
    ap.add_argument("--latency-ms", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--slow-max", type=int, default=10000)
    ap.add_argument("--server", default="ministack", choices=["ministack", "moto"],
                    help="S3 server behind the proxy (tests/support/serve.py): ministack serves about "
                         "500 GETs a second on 2 cores, moto about 170")
    ap.add_argument("--proxy", default="rust", choices=["rust", "python"],
                    help="latency proxy: bench-tool proxy (default) or tests/support/faultproxy.py")
    ap.add_argument("--query-max", type=int, default=10000,
                    help="largest N for the DuckDB queries before and after compaction (system `query`)")
    ap.add_argument("--systems", default="floor,curl,baseline,duckdb,query,job",
                    help="comma-separated; the job always runs")
    ap.add_argument("--sweep", default="",
                    help="READ_CONCURRENCY values to try (job and floor, and curl --parallel-max when "
                         "curl is in --systems)")
    ap.add_argument("--sweep-size", type=int, default=10000)
    ap.add_argument("--job-ulimit-kib", type=int, default=0,
                    help="run the job under this address-space limit (ulimit -v, KiB; 0: none), "
                         "e.g. 524288 for a 512 MB Lambda")
    ap.add_argument("--flights-in-memory", type=int, default=0,
                    help="the job's FLIGHTS_IN_MEMORY (0: its default): below the day's flights, its uuid sets spill to disk")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of the job per N (the bucket is uploaded again before each); "
                         "the table shows the run with the median CPU time, the JSON every run")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "bench-results.json"))
    args = ap.parse_args()
    global JOB_ULIMIT_KIB
    JOB_ULIMIT_KIB = args.job_ulimit_kib
    if args.flights_in_memory:
        FLIGHTS_IN_MEMORY["FLIGHTS_IN_MEMORY"] = args.flights_in_memory
    systems = args.systems.split(",")
    for exe in (JOB, TOOL):
        if not os.path.exists(exe):
            raise SystemExit(f"bench: {exe} missing; run `make bench` (it builds them)")
    if not os.access(GNU_TIME, os.X_OK):
        raise SystemExit(f"bench: {GNU_TIME} (GNU time, for peak RSS) missing: run `make bench-tools`")
    if "curl" in systems and not shutil.which(CURL):
        raise SystemExit(f"bench: {CURL} not found: install curl (scripts/setup-tools.sh bench does)")
    if {"duckdb", "query"} & set(systems) and not os.path.exists(DUCK_PY):
        raise SystemExit(f"bench: {DUCK_PY} missing: run `make bench-tools`")
    load_before = os.getloadavg()
    # Taken now, not at the end: the commit the binaries were built from
    # (the Makefile builds them just before), whatever lands meanwhile.
    prov = provenance(load_before)
    svc = Services(args.server, args.latency_ms, args.proxy)
    results, sweep, meta_extra = {}, {}, {}
    try:
        if args.sweep:
            n = args.sweep_size
            data = generate(n)
            for c in [int(x) for x in args.sweep.split(",")]:
                bucket = f"sweep-{n}-{c}"
                prepare_bucket(svc, bucket, data)
                fl = measure_floor(svc, bucket, c, n)
                sweep[c] = {"floor": fl}
                if "curl" in systems:
                    sweep[c]["curl"] = measure_curl(svc, bucket, c, n)
                jb = measure_job(svc, bucket, n, c)
                sweep[c]["job"] = jb
                log(f"bench: sweep N={n} concurrency={c}: floor {fl['wall_s']:.2f} s, "
                    + (f"curl {sweep[c]['curl']['wall_s']:.2f} s, " if "curl" in sweep[c] else "")
                    + f"job {jb['wall_s']:.2f} s, job RSS {jb['rss_mb']:.0f} MB")
        for n in [int(x) for x in args.sizes.split(",") if x]:
            data = generate(n)
            bucket = f"bench-{n}"
            prepare_bucket(svc, bucket, data)
            r = {}
            if "server_ms" not in meta_extra:
                meta_extra["server_ms"] = probe_server(svc, bucket, archive.index_prefix(DATE))
                log(f"bench: {args.server} serves a GET in {meta_extra['server_ms']:.1f} ms "
                    "(sequential, direct, boto3)")
            query = "query" in systems and n <= args.query_max
            if query:  # first: nothing else has touched the freshly uploaded day
                icao = lookup_value(data)
                before = measure_query(svc, bucket, n, icao)
                log(f"bench: N={n} DuckDB before compaction: count(*) {before['count']['wall_s']:.2f} s, "
                    f"lookup {before['lookup']['wall_s']:.2f} s")
            if "floor" in systems:
                r["floor"] = measure_floor(svc, bucket, args.concurrency, n)
                log(f"bench: N={n} floor {r['floor']['wall_s']:.2f} s")
            if "curl" in systems:
                r["curl"] = measure_curl(svc, bucket, args.concurrency, n)
                log(f"bench: N={n} curl {r['curl']['wall_s']:.2f} s")
            if "baseline" in systems and n <= args.slow_max:
                r["baseline"] = measure_baseline(svc, bucket, n)
                log(f"bench: N={n} baseline {r['baseline']['wall_s']:.2f} s")
            if "duckdb" in systems and n <= args.slow_max:
                r["duckdb"] = measure_duckdb(svc, bucket, n)
                log(f"bench: N={n} duckdb {r['duckdb']['wall_s']:.2f} s")
            r["job"] = repeated(args.repeat, bucket, lambda b: measure_job(svc, b, n, args.concurrency),
                                lambda b: prepare_bucket(svc, b, data))
            log(f"bench: N={n} job {r['job']['wall_s']:.2f} s, {r['job']['rss_mb']:.0f} MB, "
                f"CPU {r['job']['user_s']:.2f} s user + {r['job']['sys_s']:.2f} s sys = "
                f"{r['job']['cpu_ms_per_file']:.3f} ms/file")
            if query:  # the same bucket, now compacted by the job's first run
                after = measure_query(svc, bucket, n, icao)
                log(f"bench: N={n} DuckDB after compaction: count(*) {after['count']['wall_s']:.2f} s, "
                    f"lookup {after['lookup']['wall_s']:.2f} s")
                r["query"] = {"icao_hex": icao, "before": before, "after": after}
                check_query(n, before, after)
            results[n] = r
    finally:
        svc.close()
    meta = {"latency_ms": args.latency_ms, "concurrency": args.concurrency, "server": args.server,
            "proxy": args.proxy, **meta_extra,
            "cpus": os.cpu_count(), "command": " ".join(["bench/bench.py"] + sys.argv[1:]),
            **prov}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "results": results, "sweep": sweep}, f, indent=1)
    print(f"\nlatency {args.latency_ms} ms per request, READ_CONCURRENCY {args.concurrency}, "
          f"S3 server {args.server}"
          + (f" ({meta_extra['server_ms']:.1f} ms a GET on its own)" if "server_ms" in meta_extra else "")
          + f", {args.proxy} proxy, {os.cpu_count()} CPUs\n")
    if sweep:
        has_curl = any("curl" in s for s in sweep.values())
        print(f"{'concurrency':>12}{'floor s':>9}" + (f"{'curl s':>8}" if has_curl else "")
              + f"{'job s':>8}{'job CPU ms/file':>17}{'job RSS MB':>12}")
        for c, s in sweep.items():
            print(f"{c:>12}{s['floor']['wall_s']:>9.2f}"
                  + (f"{s['curl']['wall_s']:>8.2f}" if has_curl else "")
                  + f"{s['job']['wall_s']:>8.2f}{s['job']['cpu_ms_per_file']:>17.3f}{s['job']['rss_mb']:>12.0f}")
        print()
    if results:
        print(fmt_table(results, args))
    print(f"\nfigures: {args.out}")


if __name__ == "__main__":
    main()
