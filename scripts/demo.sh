#!/usr/bin/env bash
# make demo: a generated archive on a local S3 server (ministack) and a local
# MQTT broker (mosquitto); one run of the job; a before/after summary.
# Everything it starts stops when it exits.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${TOOLS_DIR:-$PWD/.tools}
PY="$TOOLS/py/bin/python"
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
export S3_BUCKET=demo-archive S3_FORCE_PATH_STYLE=true METRICS_ENABLED=false LOG_LEVEL=${LOG_LEVEL:-info}
export MQTT_HOST=127.0.0.1 MQTT_PORT

echo "== generating an archive in s3://$S3_BUCKET (ministack on :$S3_PORT): 5 days, 2,450 flights, 2026-07-19 misses 2 index rows"
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

echo; echo "== cargo build (debug profile: the same build make test uses)"; cargo build --quiet --bin archive-compaction
echo; echo "== archive-compaction run --now 2026-07-22T04:50:00Z   (cutoff 2026-07-20)"
set +e
target/debug/archive-compaction run --now 2026-07-22T04:50:00Z > /tmp/archive-compaction-demo-report.json
code=$?
set -e
echo; echo "== after (exit code $code: 0 Success, 2 Mismatch, 1 Failure)"
"$PY" tests/support/archive.py summary --endpoint "$AWS_ENDPOINT_URL" --bucket "$S3_BUCKET"
echo; echo "== report (full JSON in /tmp/archive-compaction-demo-report.json)"
"$PY" - <<'PYEOF'
import json
r = json.load(open("/tmp/archive-compaction-demo-report.json"))
for k in ["last_run_status", "stop_reason", "days_compacted", "files_compacted", "rows_written",
          "last_compacted_date", "mismatch_date", "mismatch_uuid_count", "mismatch_uuids", "mismatch_runs",
          "foreign_objects", "report_errors"]:
    print(f"  {k:<22} {r.get(k)}")
PYEOF
echo; echo "The walk stopped at 2026-07-19: two flights there have no index row. Once the"
echo "writer adds them, the next run compacts 07-19 and 07-20. (Servers stop now.)"
[ "$code" = 2 ]
