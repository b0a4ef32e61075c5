#!/usr/bin/env bash
# make release-bootstrap (the first half of `make test-release`, part of `make test`)
#
# The bootstrap a deployment uploads, built the way `make deploy` builds it:
# `sam build` of template.yaml. Its CompactionFunction has `BuildMethod:
# rust-cargolambda` (Binary archive-compaction, Architectures from the
# Architecture parameter, arm64 by default), so SAM's builder
# (aws_lambda_builders, rust_cargo workflow) runs `cargo lambda build
# --release --arm64 --bin archive-compaction` in this directory (CodeUri .),
# which cross-compiles with zig as the C compiler and linker, and copies
# target/lambda/archive-compaction/bootstrap into the build directory. The
# command is printed from SAM's own builder code before the build, so the
# log shows what SAM ran, not what this script believes it runs.
#
# Nothing is reused from an earlier run: the build directory is removed
# first, and the bootstrap checked must be newer than the start of this
# build (cargo itself decides, from its fingerprints of this checkout, what
# to recompile). Then scripts/check_elf.py: an aarch64 ELF needing no glibc
# symbol newer than 2.34 (provided.al2023's).
#
# Prints the path of the bootstrap on its last line (stdout); everything else
# goes to stderr. SAM_BUILD_DIR (default target/sam-build) picks the build
# directory.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${TOOLS_DIR:-$PWD/.tools}
OUT=${SAM_BUILD_DIR:-target/sam-build}
ARCHITECTURE=${ARCHITECTURE:-arm64}
BOOTSTRAP=$OUT/CompactionFunction/bootstrap
export SAM_CLI_TELEMETRY=0 PATH="$TOOLS/lambda/bin:$PATH"
[ -x "$TOOLS/sam/bin/sam" ] && [ -x "$TOOLS/lambda/bin/cargo-lambda" ] \
  || { echo "release-bootstrap: run scripts/setup-tools.sh (sam, lambda)" >&2; exit 1; }
say() { echo "release-bootstrap: $*" >&2; }

# What SAM's rust-cargolambda builder runs for this template, from its code.
"$TOOLS/sam/bin/python" - "$ARCHITECTURE" >&2 <<'PY'
import sys
from aws_lambda_builders.workflows.rust_cargo.actions import RustCargoLambdaBuildAction
from aws_lambda_builders.workflow import BuildMode
from samcli.yamlhelper import yaml_parse
fn = yaml_parse(open("template.yaml").read())["Resources"]["CompactionFunction"]
assert fn["Metadata"]["BuildMethod"] == "rust-cargolambda", fn["Metadata"]
cmd = RustCargoLambdaBuildAction(
    ".", {"cargo": type("B", (), {"binary_path": "cargo"})()}, BuildMode.RELEASE, None,
    runtime=fn["Properties"]["Runtime"], architecture=sys.argv[1],
    handler=fn["Metadata"]["BuildProperties"]["Binary"]).build_command()
print(f"release-bootstrap: template.yaml's CompactionFunction: BuildMethod rust-cargolambda, "
      f"Runtime {fn['Properties']['Runtime']}, Architecture {sys.argv[1]}: sam build runs "
      f"`{' '.join(cmd)}` (aws_lambda_builders RustCargoLambdaBuildAction)")
PY

# One sam build at a time in this checkout: each `cargo lambda build` moves
# target/<triple>/release/archive-compaction into target/lambda/, so two at
# once (CI's build ahead and make test's own) race on that move, and the
# second fails with "error moving the binary … No such file or directory".
# cargo's own lock covers the compile only. The lock is held to the end.
mkdir -p target
exec 9>target/.release-bootstrap.lock
if ! flock -n 9; then
  say "waiting for another release build in this checkout (target/.release-bootstrap.lock)"
  flock 9
fi

rm -rf "$OUT"
# The build's start, kept under target/ (nothing outside the clone).
stamp=target/.release-bootstrap.stamp
touch "$stamp"
say "sam build --template template.yaml --build-dir $OUT --parameter-overrides Architecture=$ARCHITECTURE"
TIMEFORMAT="release-bootstrap: sam build took %R s wall, CPU %U s user + %S s sys (its processes and their children)"
time "$TOOLS/sam/bin/sam" build --template template.yaml --build-dir "$OUT" \
  --parameter-overrides "Architecture=$ARCHITECTURE" >&2
[ -f "$BOOTSTRAP" ] || { say "sam build left no $BOOTSTRAP"; exit 1; }
[ "$BOOTSTRAP" -nt "$stamp" ] || { say "$BOOTSTRAP is older than this build"; exit 1; }
rm -f "$stamp"

machine=$([ "$ARCHITECTURE" = arm64 ] && echo aarch64 || echo x86_64)
elf=$(python3 scripts/check_elf.py "$BOOTSTRAP" --machine "$machine" --max-glibc 2.34)
say "check_elf: $elf"
# No failpoints in what ships: the test build has them (Cargo.toml's
# dev-dependency on this package, feature `failpoints`), a release build
# has no dev-dependencies. A compiled-in `failpoint!` keeps its name as a
# string; none of src/'s names may be in the bootstrap.
names=$(grep -rhoE 'failpoint!\("[^"]+"' src | sed -E 's/.*\("//; s/"$//' | sort -u)
[ -n "$names" ] || { say "no failpoint!(...) names found under src/"; exit 1; }
for name in $names; do
  if grep -aqF "$name" "$BOOTSTRAP"; then
    say "$BOOTSTRAP carries the failpoint $name: a release build must not have the failpoints feature"; exit 1
  fi
done
say "no failpoints: none of the $(echo "$names" | wc -l) failpoint names of src/ is in $BOOTSTRAP"
bytes=$(stat -c %s "$BOOTSTRAP")
say "$BOOTSTRAP: $bytes bytes ($(awk "BEGIN {printf \"%.1f\", $bytes / 1048576}") MiB), sha256 $(sha256sum "$BOOTSTRAP" | cut -c1-16)…"
echo "$BOOTSTRAP"
