#!/usr/bin/env bash
# The unit and integration tests, under tests/support/servers.py (which
# hands the shared servers' ports over): every test on ministack, then the
# tests matching the filterset $1 (the Makefile's MOTO_TESTS) on moto, each
# run as one cargo-nextest invocation of the same build; then the slowest
# tests of both. Both runs go to the end; the exit code is the first
# failure's. Arguments after $1 go to both `cargo nextest run`s.
#   scripts/test-suite.sh 'test(/^store_conformance::/)' [nextest args...]
set -uo pipefail
cd "$(dirname "$0")/.."
moto_filter=$1; shift
NEXTEST=${NEXTEST:-cargo nextest}
status=0
t0=$SECONDS
$NEXTEST run --workspace --lib --bins --test suite "$@" || status=$?
cp target/nextest/default/junit.xml target/nextest/junit-ministack.xml 2>/dev/null
echo "test-suite: ministack run: $((SECONDS - t0)) s" >&2
t1=$SECONDS
TEST_S3_SERVER=moto $NEXTEST run --test suite -E "$moto_filter" "$@" || { [ $status -ne 0 ] || status=$?; }
cp target/nextest/default/junit.xml target/nextest/junit-moto.xml 2>/dev/null
echo "test-suite: moto run: $((SECONDS - t1)) s" >&2
python3 scripts/slowest-tests.py target/nextest/junit-ministack.xml target/nextest/junit-moto.xml >&2 || true
exit $status
