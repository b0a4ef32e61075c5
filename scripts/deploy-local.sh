#!/usr/bin/env bash
# make deploy-local [STACK=archive-compaction-local] [PROFILE=dev|release]
#                   [MQTT_HOST=… MQTT_PORT=… MQTT_USERNAME=… MQTT_PASSWORD=…
#                    MQTT_TLS=… MQTT_TOPIC_ROOT=…]
#
# The MQTT_* variables, when set, become the stack's Mqtt* parameters (the
# function then publishes its statistics and Home Assistant discovery to
# that broker, as deployed; a broker on this host is 127.0.0.1, since the
# emulator runs the function as a local process); unset, MQTT stays off.
#
# template.yaml deployed into a local AWS emulator the way `make deploy`
# deploys it into an account: ministack (its `full` extra: the SAM
# transform, Lambda provided.al2023 functions run as local processes,
# EventBridge, SQS, CloudWatch, Logs, Secrets Manager) on 127.0.0.1, a
# generated archive in its S3, then scripts/deploy_local.py: `sam deploy`
# (package + change set) of the template with the function's code built for
# this host. Prints the stack's outputs and how to invoke the function, and
# keeps ministack running until Ctrl-C (everything it started stops then).
#
# The bootstrap is the host build: `cargo build` (dev profile, the one the
# tests share: seconds when they were built) or, with PROFILE=release,
# `cargo build --release` (minutes). Not `cargo lambda build`:
# that cross-builds for Linux/arm64 from scratch (tens of minutes on two
# cores), and the emulator runs host binaries. Architecture is set to the
# host's (x86_64 here); ministack leaves out FunctionErrorsAlarm (metric
# math, which it cannot create); docs/deploying.md says what else differs.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${TOOLS_DIR:-$PWD/.tools}
PY="$TOOLS/py/bin/python"
STACK=${STACK:-archive-compaction-local}
PROFILE=${PROFILE:-dev}
[ -x "$TOOLS/sam/bin/sam" ] && [ -x "$TOOLS/ministack-full/bin/ministack" ] \
  || { echo "deploy-local: run scripts/setup-tools.sh" >&2; exit 1; }
port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=${PORT:-$(port)}
ENDPOINT=http://127.0.0.1:$PORT
# Its FIFO, the server's answer and the stack's outputs: kept under the
# target directory (README: nothing is written outside the clone), replaced
# by the next run.
WORK="${CARGO_TARGET_DIR:-$PWD/target}/deploy-local"
rm -rf "$WORK"
mkdir -p "$WORK"

if [ "$PROFILE" = release ]; then
  echo "== cargo build --release (the bootstrap, for this host)"
  cargo build --release --quiet --bin archive-compaction
  BOOTSTRAP=target/release/archive-compaction
else
  echo "== cargo build (dev profile; PROFILE=release for the release build)"
  cargo build --quiet --bin archive-compaction
  BOOTSTRAP=target/debug/archive-compaction
fi

# serve.py runs ministack until its stdin closes: a FIFO held open by this script.
mkfifo "$WORK/hold"
"$PY" tests/support/serve.py ministack-full "$PORT" <"$WORK/hold" >"$WORK/serve.out" &
SERVER=$!
exec 3>"$WORK/hold"
trap 'exec 3>&-; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 600); do grep -q ready "$WORK/serve.out" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$WORK/serve.out" || { echo "deploy-local: ministack did not start" >&2; exit 1; }
echo "== ministack (full) on $ENDPOINT (its log is removed when it stops; this script's files: $WORK)"

BUCKET=local-archive
today=$(date -u +%F)
d() { date -u -d "$today - $1 days" +%F; }
echo "== archive in s3://$BUCKET: $(d 5) .. $(d 3), $(d 4) misses 2 index rows"
"$PY" tests/support/archive.py gen --endpoint "$ENDPOINT" --bucket "$BUCKET" >/dev/null <<JSON
{"seed": 7, "days": [
  {"date": "$(d 5)", "flights": 40},
  {"date": "$(d 4)", "flights": 30, "unindexed": 2},
  {"date": "$(d 3)", "flights": 30}
]}
JSON

MQTT_PARAMS=()
for pair in MQTT_HOST:MqttHost MQTT_PORT:MqttPort MQTT_USERNAME:MqttUsername \
            MQTT_PASSWORD:MqttPassword MQTT_TLS:MqttTls MQTT_TOPIC_ROOT:MqttTopicRoot; do
  var=${pair%%:*} param=${pair#*:}
  [ -n "${!var:-}" ] && MQTT_PARAMS+=(--param "$param=${!var}")
done
if [ -n "${MQTT_HOST:-}" ]; then
  echo "== MQTT: statistics to ${MQTT_HOST}:${MQTT_PORT:-1883}"
else
  echo "== MQTT off (set MQTT_HOST, and MQTT_PORT, MQTT_USERNAME, MQTT_PASSWORD, MQTT_TLS, MQTT_TOPIC_ROOT as needed)"
fi

echo "== sam deploy of template.yaml as stack $STACK"
AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test "$TOOLS/sam/bin/python" scripts/deploy_local.py \
  --endpoint "$ENDPOINT" --stack-name "$STACK" --bootstrap "$BOOTSTRAP" --build-dir "$WORK/build" \
  --without-metric-math-alarms \
  --param "BucketName=$BUCKET" --param "Architecture=$(uname -m | sed 's/aarch64/arm64/')" \
  --param "ScheduleExpression=rate(5 minutes)" ${MQTT_PARAMS[@]+"${MQTT_PARAMS[@]}"} | tee "$WORK/stack.json"
FN=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["outputs"]["FunctionName"])' "$WORK/stack.json")
cat <<EOF2

== deployed. The schedule runs it every 5 minutes; to invoke it now (the SAM CLI, against ministack;
   the event {} takes the invocation time from the clock, so the cutoff is today minus LAG_DAYS):
  AWS_ENDPOINT_URL=$ENDPOINT AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 \\
    $TOOLS/sam/bin/sam remote invoke --stack-name $STACK CompactionFunction --event '{}'
  (a Mismatch on $(d 4) is the expected answer: two of its flights have no index row; $(d 5)
   is compacted by the first run. The events/ files pin their time to 2026-07-22: not for this archive)
The archive: $PY tests/support/archive.py summary --endpoint $ENDPOINT --bucket $BUCKET
Ctrl-C stops ministack.
EOF2
while kill -0 "$SERVER" 2>/dev/null; do sleep 1; done
