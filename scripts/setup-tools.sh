#!/usr/bin/env bash
# Installs what the tests, the demo and the benchmark need, into .tools/ (idempotent).
# Python venvs from PyPI (needs python3 with venv, and access to PyPI); mosquitto
# from the distribution's apt (as root, or through sudo when not root).
#   .tools/py         pyarrow, boto3 (the demo); + moto server, duckdb, jsonschema,
#                     paho-mqtt, fastparquet (with pandas), polars (the tests);
#                     + pyspark with `scripts/setup-tools.sh spark` (the ignored Spark
#                     test of tests/suite/real_writers.rs; needs Java 17; ~400 MB, 2.5 min)
#   .tools/ministack  ministack + cbor2 (it pins its own botocore: a venv of its own)
#   .tools/ministack-full  ministack[full] (same version: adds the SAM transform), for
#                     tests/suite/deployed.rs and `make deploy-local`
#   mosquitto         from Debian (apt), when missing
#   .tools/lambda     cargo-lambda + zig (PyPI): `make build`, the Lambda runtime test
#   qemu-user-static  + the arm64 C library (apt), when missing: `make test-release`
#                     runs the arm64 release bootstrap under qemu-aarch64-static
#   .tools/sam        AWS SAM CLI (PyPI): `sam deploy` of tests/suite/deployed.rs and
#                     `make deploy-local`, `make lint`, `make deploy`
#   .tools/hass       Home Assistant 2024.3.3 (PyPI, Python 3.11) with the requirements of the
#                     components tests/suite/home_assistant.rs loads, pinned by scripts/hass-constraints.txt
#   .tools/duckdb     duckdb + its httpfs extension as a wheel (PyPI), only for `make bench`:
#                     `scripts/setup-tools.sh duckdb` (the duckdb wheel alone would download
#                     httpfs from the internet at run time; this one loads it from the wheel);
#                     `scripts/setup-tools.sh bench` adds matplotlib (bench/plot.py)
#
#
#   scripts/setup-tools.sh          the test tools (everything above but duckdb)
#   scripts/setup-tools.sh demo     what `make demo` uses: .tools/py (pyarrow, boto3),
#                                   .tools/ministack, mosquitto
#   scripts/setup-tools.sh sam      the SAM CLI only
#   scripts/setup-tools.sh lambda   cargo-lambda + zig only
#   scripts/setup-tools.sh hass     Home Assistant only
#   scripts/setup-tools.sh bench    what `make bench` needs beyond the test tools (duckdb,
#                                   matplotlib; curl and GNU time from apt)
#   scripts/setup-tools.sh valgrind valgrind (apt), for `make bench-instructions` (callgrind)
#   scripts/setup-tools.sh spark    pyspark into .tools/py (the test tools first)
#   scripts/setup-tools.sh qemu     qemu-user-static + the arm64 C library (apt) only, for
#                                   `make test-release` and `make invoke-qemu`
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${TOOLS_DIR:-$PWD/.tools}
PY=${PYTHON:-python3}
mkdir -p "$TOOLS"

# Every venv is made and filled by uv (PyPI, pinned), with the same pins
# pip would install. uv does in ~20 CPU-seconds what pip did in ~170 here
# (measured on a clean machine, 2 cores: every tool below), mostly because
# it does not byte-compile every module of every package up front: Python
# compiles a module when it is first imported (once; the .pyc lands in the
# venv). uv itself comes from PyPI into .tools/uv, with pip, once.
UV_VERSION=0.13.9
UV=$TOOLS/uv/bin/uv
export UV_NO_PROGRESS=1
setup_uv() {
  if [ -x "$UV" ] && "$UV" --version 2>/dev/null | grep -q " $UV_VERSION"; then
    return
  fi
  "$PY" -m venv "$TOOLS/uv" || {
    echo "setup-tools: '$PY -m venv $TOOLS/uv' failed: it needs Python 3.11+ with venv (Debian: apt-get install python3-venv)" >&2
    exit 1
  }
  "$TOOLS/uv/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION"
}

# make_venv DIR [PYTHON]: a fresh venv at DIR (of PYTHON, default $PY).
make_venv() {
  setup_uv
  "$UV" venv -q --clear --python "${2:-$PY}" "$1" || {
    echo "setup-tools: 'uv venv --python ${2:-$PY} $1' failed: it needs Python 3.11+ (${2:-$PY})" >&2
    exit 1
  }
}

# pip_install DIR PACKAGES...: PACKAGES (pip's syntax, pinned) into DIR's venv.
pip_install() {
  local venv=$1; shift
  "$UV" pip install -q --python "$venv/bin/python" "$@"
}

CARGO_LAMBDA_VERSION=1.9.2
ZIG_VERSION=0.17.1
SAM_VERSION=1.170.0
# 2024.3.x is the last Home Assistant release that runs on Python 3.11.
HASS_VERSION=2024.3.3
HASS_PYTHON=${HASS_PYTHON:-python3.11}
# The requirements (manifest.json) of the components Home Assistant sets up in
# tests/suite/home_assistant.rs: mqtt, recorder, frontend, backup, hardware,
# file_upload, image_upload and camera (an MQTT platform); `hass --skip-pip`
# installs nothing itself.
HASS_REQUIREMENTS=(
  "homeassistant==$HASS_VERSION"
  paho-mqtt==1.6.1
  SQLAlchemy==2.0.27 fnv-hash-fast==0.5.0 psutil-home-assistant==0.0.1
  home-assistant-frontend==20240307.0
  securetar==2024.2.1
  janus==1.0.0
  Pillow==10.2.0
  PyTurboJPEG==1.7.1
)
# duckdb-extension-httpfs ships httpfs for exactly this duckdb version.
DUCKDB_BENCH_VERSION=1.5.5
# bench/plot.py (Agg backend: no display needed); has cp311 wheels.
MATPLOTLIB_VERSION=3.11.2

setup_lambda() {
  if [ -x "$TOOLS/lambda/bin/cargo-lambda" ] && "$TOOLS/lambda/bin/cargo-lambda" lambda --version 2>/dev/null | grep -q "$CARGO_LAMBDA_VERSION" \
     && "$TOOLS/lambda/bin/python" -c 'import ziglang' 2>/dev/null; then
    return
  fi
  echo "setup-tools: installing cargo-lambda $CARGO_LAMBDA_VERSION and zig into $TOOLS/lambda" >&2
  make_venv "$TOOLS/lambda"
  pip_install "$TOOLS/lambda" \
    "cargo-lambda==$CARGO_LAMBDA_VERSION" "ziglang==$ZIG_VERSION"
}

setup_sam() {
  if [ -x "$TOOLS/sam/bin/sam" ] && "$TOOLS/sam/bin/sam" --version 2>/dev/null | grep -q "$SAM_VERSION"; then
    return
  fi
  echo "setup-tools: installing the AWS SAM CLI $SAM_VERSION into $TOOLS/sam" >&2
  make_venv "$TOOLS/sam"
  pip_install "$TOOLS/sam" "aws-sam-cli==$SAM_VERSION"
}

setup_duckdb() {
  if [ -x "$TOOLS/duckdb/bin/python" ] && "$TOOLS/duckdb/bin/python" -c "import duckdb, duckdb_extension_httpfs; assert duckdb.__version__ == '$DUCKDB_BENCH_VERSION'" 2>/dev/null; then
    return
  fi
  echo "setup-tools: installing duckdb $DUCKDB_BENCH_VERSION + httpfs into $TOOLS/duckdb" >&2
  make_venv "$TOOLS/duckdb"
  pip_install "$TOOLS/duckdb" \
    "duckdb==$DUCKDB_BENCH_VERSION" "duckdb-extension-httpfs==$DUCKDB_BENCH_VERSION"
}

# The bench venv: duckdb + httpfs (above) and matplotlib for bench/plot.py;
# curl (bench.py's independent GET floor) and GNU time (its peak RSS
# figures) from apt when missing.
setup_bench() {
  setup_duckdb
  if ! "$TOOLS/duckdb/bin/python" -c "import matplotlib; assert matplotlib.__version__ == '$MATPLOTLIB_VERSION'" 2>/dev/null; then
    echo "setup-tools: installing matplotlib $MATPLOTLIB_VERSION into $TOOLS/duckdb" >&2
    pip_install "$TOOLS/duckdb" "matplotlib==$MATPLOTLIB_VERSION"
  fi
  command -v curl >/dev/null 2>&1 || apt_install curl
  [ -x /usr/bin/time ] || apt_install time
}

setup_hass() {
  if [ -x "$TOOLS/hass/bin/hass" ] && "$TOOLS/hass/bin/python" -c "import homeassistant.const as c, paho.mqtt, sqlalchemy, fnv_hash_fast, psutil_home_assistant, hass_frontend, securetar, janus, PIL, turbojpeg; assert c.__version__ == '$HASS_VERSION'" 2>/dev/null; then
    return
  fi
  if ! "$HASS_PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
    echo "setup-tools: Home Assistant $HASS_VERSION needs Python 3.11; set HASS_PYTHON to one" >&2
    return 1
  fi
  echo "setup-tools: installing Home Assistant $HASS_VERSION into $TOOLS/hass" >&2
  make_venv "$TOOLS/hass" "$HASS_PYTHON"
  pip_install "$TOOLS/hass" \
    -c scripts/hass-constraints.txt "${HASS_REQUIREMENTS[@]}"
}

setup_qemu() {
  if command -v qemu-aarch64-static >/dev/null 2>&1 && [ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ] \
     && [ -e /usr/aarch64-linux-gnu/lib/libgcc_s.so.1 ]; then
    return
  fi
  apt_install qemu-user-static libc6-arm64-cross libgcc-s1-arm64-cross
}


# setup_py MODULES PACKAGES...: .tools/py with PACKAGES unless MODULES import.
setup_py() {
  local modules=$1; shift
  if [ -x "$TOOLS/py/bin/python" ] && "$TOOLS/py/bin/python" -c "import $modules" 2>/dev/null; then
    return
  fi
  echo "setup-tools: installing $* into $TOOLS/py" >&2
  [ -x "$TOOLS/py/bin/python" ] || make_venv "$TOOLS/py"
  pip_install "$TOOLS/py" "$@"
}
DEMO_PY=('pyarrow==26.0.1' 'boto3==1.44.8')
TEST_PY=("${DEMO_PY[@]}" 'moto[server]==5.2.5' 'duckdb==2.0.1' 'jsonschema==4.26.0' 'paho-mqtt==2.2.0'
  'fastparquet==2026.9.0' 'pandas==3.1.1' 'polars==2.1.0')
TEST_PY_MODULES='moto, pyarrow, duckdb, boto3, jsonschema, paho.mqtt, fastparquet, pandas, polars'
SPARK_PY=('pyspark==4.3.0')

# ministack_venv DIR CHECK SPEC: ministack (SPEC, with cbor2 beside it) in
# a venv of its own at DIR (it pins its own botocore), unless DIR's Python
# already imports CHECK.
ministack_venv() {
  if [ -x "$1/bin/ministack" ] && "$1/bin/python" -c "import $2" 2>/dev/null; then
    return
  fi
  echo "setup-tools: installing $3 into $1" >&2
  make_venv "$1"
  pip_install "$1" "$3" 'cbor2==6.3.0'
}

# ministack: S3 and CloudWatch for the tests.
setup_ministack() { ministack_venv "$TOOLS/ministack" cbor2 'ministack==1.5.33'; }

# ministack with its `full` extra (the SAM transform, Lambda functions run as
# local processes, EventBridge, SQS, Logs, Secrets Manager):
# tests/suite/deployed.rs and `make deploy-local`.
setup_ministack_full() {
  ministack_venv "$TOOLS/ministack-full" 'cbor2, samtranslator' 'ministack[full]==1.5.33'
}

# apt_install PACKAGES...: as root, or through sudo; says what to do otherwise.
apt_install() {
  local sudo=""
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-tools: no apt-get here: install $* with your system's package manager, then retry" >&2
    exit 1
  fi
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "setup-tools: installing $* needs root: run 'apt-get install $*' as root (no sudo here), then retry" >&2
      exit 1
    fi
    sudo=sudo
  fi
  echo "setup-tools: installing $* (${sudo:+sudo }apt-get)" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

setup_mosquitto() {
  if command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; then
    return
  fi
  # The Debian package may start a system broker on 1883; tests and the demo use their own ports.
  apt_install mosquitto
}

case "${1:-}" in
  qemu) setup_qemu; echo "setup-tools: qemu-aarch64-static ready" >&2; exit 0 ;;
  duckdb) setup_duckdb; echo "setup-tools: duckdb ready ($TOOLS/duckdb)" >&2; exit 0 ;;
  valgrind) command -v valgrind >/dev/null 2>&1 || apt_install valgrind; exit 0 ;;
  bench) setup_bench; echo "setup-tools: bench tools ready" >&2; exit 0 ;;
  sam) setup_sam; echo "setup-tools: SAM CLI ready ($TOOLS/sam/bin/sam)" >&2; exit 0 ;;
  lambda) setup_lambda; echo "setup-tools: cargo-lambda ready ($TOOLS/lambda/bin)" >&2; exit 0 ;;
  hass) setup_hass; echo "setup-tools: Home Assistant ready ($TOOLS/hass/bin/hass)" >&2; exit 0 ;;
  spark)
    setup_py "$TEST_PY_MODULES" "${TEST_PY[@]}"
    setup_py "$TEST_PY_MODULES, pyspark" "${TEST_PY[@]}" "${SPARK_PY[@]}"
    command -v java >/dev/null 2>&1 || echo "setup-tools: pyspark needs Java 17 (Debian: apt-get install openjdk-17-jre-headless)" >&2
    echo "setup-tools: pyspark ready ($TOOLS/py)" >&2; exit 0 ;;
  ""|demo) ;;
  *) echo "usage: $0 [demo|sam|lambda|hass|duckdb|bench|spark|qemu]" >&2; exit 64 ;;
esac

if [ "${1:-}" = demo ]; then
  setup_py 'pyarrow, boto3' "${DEMO_PY[@]}"
  setup_ministack
  setup_mosquitto
  echo "setup-tools: demo tools ready ($TOOLS)" >&2
  exit 0
fi
setup_py "$TEST_PY_MODULES" "${TEST_PY[@]}"
setup_ministack
setup_ministack_full
setup_mosquitto
setup_lambda
setup_sam
setup_qemu
setup_hass
echo "setup-tools: ready ($TOOLS)" >&2
