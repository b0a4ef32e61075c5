#!/usr/bin/env bash
# make demo: builds the CLI, then a generated archive on a local S3 server
# (ministack) and a local MQTT broker (mosquitto); one run of the job; a
# before/after summary and what the run did per date. Everything it starts
# stops when it exits. Its tools (`scripts/setup-tools.sh demo`: pyarrow and
# boto3, ministack, mosquitto) are installed while cargo builds.
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

echo "== cargo build --bin archive-compaction (debug profile, the one make test uses)"
if [ -x "$BIN" ]; then
  echo "   (already built once: only what changed is rebuilt)"
else
  echo "   The first build compiles 285 crates: about 6 minutes on 2 cores that nothing else"
  echo "   uses (README, 'Set up'). Cargo lists each crate below as it goes. Later builds take seconds."
fi
mkdir -p "$TARGET_DIR/demo"
scripts/setup-tools.sh demo > "$TARGET_DIR/demo/setup-tools.log" 2>&1 &
setup=$!
start=$SECONDS
cargo build --bin archive-compaction
echo "   built in $((SECONDS - start)) s: $BIN"
if ! wait "$setup"; then
  cat "$TARGET_DIR/demo/setup-tools.log" >&2
  echo "demo: scripts/setup-tools.sh demo failed (above)" >&2
  exit 1
fi
sed 's/^/   /' "$TARGET_DIR/demo/setup-tools.log"

port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
S3_PORT=$(port); MQTT_PORT=$(port)

# serve.py stops its server when its stdin closes: we hold the write end of
# a FIFO open until this script exits.
start_server() {
  local kind=$1 port=$2 dir fd
  dir=$(mktemp -d)
  mkfifo "$dir/in"
  "$PY" tests/support/serve.py "$kind" "$port" < "$dir/in" > "$dir/out" 2>&1 &
  exec {fd}>"$dir/in"
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

echo; echo "== $BIN run --now 2026-07-22T04:50:00Z   (cutoff 2026-07-20: LAG_DAYS 2)"
set +e
"$BIN" run --now 2026-07-22T04:50:00Z > "$REPORT"
code=$?
set -e
echo; echo "== after (exit code $code: 0 Success, 2 Mismatch, 1 Failure)"
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
print()
for k in ["last_run_status", "stop_reason", "days_compacted", "files_compacted", "rows_written",
          "last_compacted_date", "mismatch_date", "mismatch_uuid_count", "mismatch_uuids", "mismatch_runs",
          "foreign_objects", "report_errors"]:
    print(f"  {k:<22} {r.get(k)}")
print()
print(f"  days_compacted counts the dates the watermark moved past: {len(compacted)} compacted"
      f" ({', '.join(compacted) or 'none'}) and {len(empty)} with nothing to compact"
      f" ({', '.join(empty) or 'none'}: no flights, so no index partition and no compacted file).")
PYEOF
echo; echo "The walk stopped at 2026-07-19: two flights there have no index row. Once the"
echo "writer adds them, the next run compacts 07-19 and 07-20. (Servers stop now.)"
[ "$code" = 2 ]
