#!/usr/bin/env bash
# make invoke-local [EVENT=events/console-now.json]
#
# The function as Lambda runs it, locally and without Docker: `cargo lambda
# watch` emulates the Lambda service and starts the binary as a Lambda
# runtime; a generated archive sits in a local S3 server (ministack); the
# event file is sent to the emulator's Invoke API (what `cargo lambda invoke`
# does), and the answer printed (the run report, or the error whose type is
# Mismatch or Failure, with the report). Any file in
# events/ works; the archive's dates fit events/console-now.json and
# events/eventbridge-scheduled-2026-07-22.json (2026-07-19 misses two index
# rows, so those answer Mismatch). Everything it starts stops when it exits.
#
# BOOTSTRAP=path (`make invoke-qemu`): run that arm64 release bootstrap under
# qemu-aarch64-static against `cargo lambda watch --only-lambda-apis` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
EVENT=${1:-events/console-now.json}
[ -f "$EVENT" ] || { echo "invoke-local: no event file $EVENT (see events/)" >&2; exit 64; }
TOOLS=${TOOLS_DIR:-$PWD/.tools}
PY="$TOOLS/py/bin/python"
export PATH="$TOOLS/lambda/bin:$PATH"
command -v cargo-lambda >/dev/null || { echo "invoke-local: run scripts/setup-tools.sh lambda" >&2; exit 1; }
port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
S3_PORT=$(port); INVOKE_PORT=$(port)
# The function's environment and logs: kept under the target directory
# (README: nothing is written outside the clone), replaced by the next run.
WORK="${CARGO_TARGET_DIR:-$PWD/target}/invoke-local"
rm -rf "$WORK"
mkdir -p "$WORK"

coproc S3SERVER { exec "$PY" tests/support/serve.py ministack "$S3_PORT"; }
read -r ready <&"${S3SERVER[0]}"; [ "$ready" = ready ]

BUCKET=local-archive
echo "== archive in s3://$BUCKET (ministack on :$S3_PORT): 2026-07-15..20, 2026-07-19 misses 2 index rows"
"$PY" tests/support/archive.py gen --endpoint "http://127.0.0.1:$S3_PORT" --bucket "$BUCKET" >/dev/null <<'JSON'
{"seed": 7, "days": [
  {"date": "2026-07-15", "flights": 60, "foreign": true},
  {"date": "2026-07-16", "flights": 45},
  {"date": "2026-07-17", "flights": 50},
  {"date": "2026-07-19", "flights": 40, "unindexed": 2},
  {"date": "2026-07-20", "flights": 50}
]}
JSON

# The function's environment, as the SAM template sets it (plus the local S3).
cat > "$WORK/env" <<ENV
S3_BUCKET=$BUCKET
S3_FORCE_PATH_STYLE=true
METRICS_ENABLED=false
LOG_LEVEL=${LOG_LEVEL:-info}
AWS_ENDPOINT_URL=http://127.0.0.1:$S3_PORT
AWS_ACCESS_KEY_ID=local
AWS_SECRET_ACCESS_KEY=local
AWS_REGION=us-east-1
ENV

stop() {
  for pid in ${FUNCTION:-} ${WATCH:-}; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for pid in ${FUNCTION:-} ${WATCH:-}; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
}
trap stop EXIT
# Each started in a session of its own, so that stopping it stops what it started.
if [ -z "${BOOTSTRAP:-}" ]; then
  echo "== cargo build (cargo lambda watch runs the same debug build)"
  cargo build --quiet --bin archive-compaction
  FUNCTION_NAME=archive-compaction
  echo "== cargo lambda watch on 127.0.0.1:$INVOKE_PORT (function log: $WORK/watch.log)"
  setsid cargo lambda watch --ignore-changes --invoke-address 127.0.0.1 --invoke-port "$INVOKE_PORT" \
    --env-file "$WORK/env" >"$WORK/watch.log" 2>&1 &
  WATCH=$!
else
  # `make invoke-qemu`: the release bootstrap for arm64, run by qemu-aarch64-static
  # (with Debian's arm64 C library), serving the Lambda runtime API that
  # `cargo lambda watch --only-lambda-apis` emulates: the deployed binary, locally.
  FUNCTION_NAME=_
  echo "== cargo lambda watch --only-lambda-apis on 127.0.0.1:$INVOKE_PORT"
  setsid cargo lambda watch --only-lambda-apis --invoke-address 127.0.0.1 --invoke-port "$INVOKE_PORT" \
    >"$WORK/watch.log" 2>&1 &
  WATCH=$!
  echo "== qemu-aarch64-static $BOOTSTRAP (function log: $WORK/function.log)"
  ( set -a; . "$WORK/env"; set +a
    export AWS_LAMBDA_RUNTIME_API="http://127.0.0.1:$INVOKE_PORT/.rt" AWS_LAMBDA_FUNCTION_NAME=_ \
      AWS_LAMBDA_FUNCTION_VERSION=1 AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512
    exec setsid qemu-aarch64-static -L /usr/aarch64-linux-gnu "$BOOTSTRAP" ) >"$WORK/function.log" 2>&1 &
  FUNCTION=$!
fi
for _ in $(seq 600); do
  "$PY" -c "import socket,sys; socket.create_connection(('127.0.0.1',$INVOKE_PORT),0.2)" 2>/dev/null && break
  kill -0 "$WATCH" 2>/dev/null || { cat "$WORK/watch.log" >&2; exit 1; }
  sleep 0.1
done

# The Lambda Invoke API of the emulator; the same as
#   cargo lambda invoke $FUNCTION_NAME --invoke-address 127.0.0.1 --invoke-port $INVOKE_PORT --data-file $EVENT
# with the answer printed as JSON (an error's message is the run report).
echo "== invoke $FUNCTION_NAME with $EVENT: $(tr -d '\n' < "$EVENT")"
set +e
"$PY" - "$INVOKE_PORT" "$EVENT" "$FUNCTION_NAME" <<'PYEOF'
import json, sys, urllib.error, urllib.request
port, event, function = sys.argv[1], sys.argv[2], sys.argv[3]
req = urllib.request.Request(f"http://127.0.0.1:{port}/2015-03-31/functions/{function}/invocations",
                             data=open(event, "rb").read(), headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=900) as r:
        report = json.load(r)
    print(f"== answer: the run report (status {report['last_run_status']})")
    print(json.dumps(report, indent=2))
except urllib.error.HTTPError as e:
    err = json.load(e)
    print(f"== answer: a Lambda error, errorType {err.get('errorType')}")
    try:
        print(json.dumps(json.loads(err.get("errorMessage", "")), indent=2))
    except ValueError:
        print(err.get("errorMessage"))
    sys.exit(2)
PYEOF
set -e
echo; echo "== archive after"
"$PY" tests/support/archive.py summary --endpoint "http://127.0.0.1:$S3_PORT" --bucket "$BUCKET"
