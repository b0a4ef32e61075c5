#!/usr/bin/env bash
# make demo: builds the CLI, then a generated archive on a local S3 server
# (ministack) and a local MQTT broker (mosquitto); one run of the job; a
# before/after summary and what the run did per date. Everything it starts
# stops when it exits. Its tools (`scripts/setup-tools.sh demo`: pyarrow and
# boto3, ministack, mosquitto) are installed while cargo builds. What it
# writes stays in the target directory (target/demo/: the report, the
# servers' FIFOs and logs), removed on exit but the report, on success,
# failure and Ctrl-C alike.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${TOOLS_DIR:-$PWD/.tools}
export TOOLS_DIR=$TOOLS
PY="$TOOLS/py/bin/python"
# The cargo target directory (target/, or CARGO_TARGET_DIR): the binary and
# this demo's report live there, one per clone.
TARGET_DIR=$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
BIN="$TARGET_DIR/debug/archive-compaction"
REPORT="$TARGET_DIR/demo/report.json"

# The servers' FIFOs and logs, and the tools' log: removed however the
# script ends, once the servers stopped (each stops as its FIFO closes and
# removes its own temporary folder).
WORK="$TARGET_DIR/demo/run"
rm -rf "$WORK"
mkdir -p "$WORK"
server_fds=() server_pids=()
cleanup() {
  for fd in "${server_fds[@]}"; do exec {fd}>&-; done
  for pid in "${server_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== cargo build --bin archive-compaction (debug profile, the one make test uses)"
if [ -x "$BIN" ]; then
  echo "   (already built once: only what changed is rebuilt)"
else
  # Counted, not promised: the packages this build compiles (cargo tree).
  crates=$(cargo tree -e normal,build --prefix none 2>/dev/null | sed 's/ (\*)$//' | sort -u | wc -l)
  echo "   The first build compiles about $crates crates, minutes on 2 cores (README, 'Set up');"
  echo "   cargo lists each crate below as it goes. Later builds take seconds."
fi
scripts/setup-tools.sh demo > "$WORK/setup-tools.log" 2>&1 &
setup=$!
start=$SECONDS
cargo build --bin archive-compaction
took=$((SECONDS - start))
echo "   built in $((took / 60)) min $((took % 60)) s (measured): $BIN"
if ! wait "$setup"; then
  cat "$WORK/setup-tools.log" >&2
  echo "demo: scripts/setup-tools.sh demo failed (above)" >&2
  exit 1
fi
sed 's/^/   /' "$WORK/setup-tools.log"

port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
S3_PORT=$(port); MQTT_PORT=$(port)

# serve.py stops its server when its stdin closes: we hold the write end of
# a FIFO open until this script exits. Its FIFO and log in $WORK.
start_server() {
  local kind=$1 port=$2 dir fd
  dir="$WORK/$kind"
  mkdir -p "$dir"
  mkfifo "$dir/in"
  "$PY" tests/support/serve.py "$kind" "$port" < "$dir/in" > "$dir/out" 2>&1 &
  server_pids+=($!)
  exec {fd}>"$dir/in"
  server_fds+=("$fd")
  for _ in $(seq 600); do
    grep -q '^ready' "$dir/out" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$kind did not start: $(cat "$dir/out")" >&2
  return 1
}
start_server ministack "$S3_PORT"
start_server mosquitto "$MQTT_PORT"

export AWS_ENDPOINT_URL="http://127.0.0.1:$S3_PORT" AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_REGION=us-east-1
# The per-date `date reported` lines (each date's JSON, for CloudWatch) are
# left out: the table below shows the same. `LOG_LEVEL=info make demo` keeps them.
export S3_BUCKET=demo-archive S3_FORCE_PATH_STYLE=true METRICS_ENABLED=false LOG_LEVEL=${LOG_LEVEL:-info,archive_compaction::data::report=warn}
export MQTT_HOST=127.0.0.1 MQTT_PORT

echo; echo "== generating an archive in s3://$S3_BUCKET (ministack on :$S3_PORT): 5 days with 2,450 flights,"
echo "   2026-07-18 has no flights at all, 2026-07-19 misses 2 index rows"
"$PY" tests/support/archive.py gen --endpoint "$AWS_ENDPOINT_URL" --bucket "$S3_BUCKET" >/dev/null <<'JSON'
{"seed": 7, "days": [
  {"date": "2026-07-15", "flights": 600, "foreign": true},
  {"date": "2026-07-16", "flights": 450},
  {"date": "2026-07-17", "flights": 500},
  {"date": "2026-07-19", "flights": 400, "unindexed": 2},
  {"date": "2026-07-20", "flights": 500}
]}
JSON
echo; echo "== before"; "$PY" tests/support/archive.py summary --endpoint "$AWS_ENDPOINT_URL" --bucket "$S3_BUCKET"
cat <<'TXT'
   Columns: flights = flight files under flights/; per-flight = index files of one flight
   each (what the writer adds); compacted = the job's compacted-*.parquet files; multi-row =
   other Parquet files of many rows (backfills); rows = index rows in all of them; foreign =
   objects under index/ that are no index file (another suffix, a hidden or empty object):
   the job never reads or deletes them, and reports them (foreign_objects).
TXT

echo; echo "== $BIN run --now 2026-07-22T04:50:00Z   (cutoff 2026-07-20: LAG_DAYS 2)"
set +e
"$BIN" run --now 2026-07-22T04:50:00Z > "$REPORT"
code=$?
set -e
case $code in 0) meaning=Success ;; 2) meaning=Mismatch ;; *) meaning=Failure ;; esac
echo; echo "== after: the run exited $code = $meaning   (exit codes: 0 Success, 2 Mismatch, 1 Failure)"
"$PY" tests/support/archive.py summary --endpoint "$AWS_ENDPOINT_URL" --bucket "$S3_BUCKET"
echo; echo "== report (full JSON in $REPORT)"
REPORT="$REPORT" "$PY" - <<'PYEOF'
import json, os
r = json.load(open(os.environ["REPORT"]))
print("  per date, in the order the run walked them:")
print(f"    {'date':<12}{'action':<20}{'flights':>8}{'files read':>12}{'rows written':>14}")
for d in r.get("days", []):
    print(f"    {d['date']:<12}{d['action']:<20}{d['flights']:>8}{d['files_read']:>12}{d['rows_written']:>14}")
days = r.get("days", [])
compacted = [d["date"] for d in days if d["action"] == "compacted"]
empty = [d["date"] for d in days if d["action"] == "nothing_to_compact"]
print("    (flights: files under flights/ for the date; files read: index files merged;")
print("     rows written: rows in the date's compacted file)")
print()
# Each counter beside what it counts.
meaning = {
    "last_run_status": "Success, Mismatch (a date's flights lack index rows) or Failure",
    "stop_reason": "why the walk stopped",
    "days_compacted": f"dates the watermark moved past: {len(compacted)} compacted"
                      f" ({', '.join(compacted) or 'none'}) + {len(empty)} with nothing to compact"
                      f" ({', '.join(empty) or 'none'}: no flights, no index partition)",
    "files_compacted": "index files merged into compacted files (and then deleted)",
    "rows_written": "rows in the compacted files written",
    "last_compacted_date": "the watermark: every date up to it is compacted",
    "mismatch_date": "the date whose flights lack index rows (the walk stops there)",
    "mismatch_uuid_count": "flights of that date without an index row",
    "mismatch_uuids": "those flights",
    "mismatch_runs": "runs in a row that met this mismatch",
    "foreign_objects": "objects under index/ that are no index file: left alone",
    "report_errors": "what could not be sent to CloudWatch or MQTT",
}
for k, what in meaning.items():
    v = r.get(k)
    v = ", ".join(v) if isinstance(v, list) and v else ("none" if v in (None, []) else v)
    print(f"  {k:<20} {str(v):<12} {what}")
PYEOF
echo; echo "The walk stopped at 2026-07-19: two flights there have no index row. Once the"
echo "writer adds them, the next run compacts 07-19 and 07-20. (Servers stop now.)"
[ "$code" = 2 ]
