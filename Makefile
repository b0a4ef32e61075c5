# archive-compaction: common tasks. `make help` lists them.
SHELL := /bin/bash
CARGO ?= cargo
TOOLS_DIR ?= $(CURDIR)/.tools
export TOOLS_DIR
# cargo-lambda and zig (scripts/setup-tools.sh lambda), the SAM CLI (scripts/setup-tools.sh sam).
LAMBDA_BIN := $(TOOLS_DIR)/lambda/bin
SAM := $(TOOLS_DIR)/sam/bin/sam
export SAM_CLI_TELEMETRY ?= 0
# Python caches each module's bytecode (__pycache__) on its first import: the
# suite starts hundreds of Python processes (servers, helpers, the SAM CLI,
# Home Assistant), and a machine image that sets PYTHONDONTWRITEBYTECODE has
# each of them compile every module it imports from source (boto3, pyarrow
# and pandas: 2.6 s of CPU a process cold, 0.7 s cached).
unexport PYTHONDONTWRITEBYTECODE
# `make build ARCH=x86-64` for an x86_64 bootstrap (the template deploys arm64).
ARCH ?= arm64
# `make invoke-local EVENT=events/console-dry-run.json`
EVENT ?= events/console-now.json

.PHONY: docs-settings help tools test test-unit test-ministack test-moto test-crash test-release release-bootstrap demo lint fmt \
	lambda-tools sam-tools qemu-tools build deploy deploy-local invoke-local invoke-qemu validate bench bench-parts bench-sizing bench-windows bench-concurrency bench-audit bench-audit-scale bench-audit-rss bench-sets bench-backlog bench-instructions instructions-tools bench-plot bench-docs bench-tools mutants

help: ## This list.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

tools: ## Install the test tools: venvs under .tools/ (moto, ministack, ministack[full], pyarrow, duckdb, SAM CLI, cargo-lambda + zig, Home Assistant) and mosquitto (apt).
	@scripts/setup-tools.sh

# The integration tests are one crate (tests/suite/), built once with the
# failpoints compiled in (Cargo.toml's dev-dependency on this package) and
# run by cargo-nextest, a process per test, many at once, against one
# ministack, one moto and one mosquitto started for the whole run
# (tests/support/servers.py). Every test runs on ministack; MOTO_TESTS, the
# tests whose outcome depends on the S3 server (the store conformance suite,
# conditional writes, ETags, listing encodings, multipart, an overwritten
# object), run again on moto. scripts/slowest-tests.py prints the slowest.
NEXTEST ?= $(CARGO) nextest
NEXTEST_ARGS ?=
SERVERS := $(TOOLS_DIR)/py/bin/python tests/support/servers.py
MOTO_TESTS := test(/^store_conformance::/) | test(/^crash::an_input_overwritten/) \
	| test(/^end_to_end::(a_multipart|multipart)/) | test(/^inputs::keys_with/) \
	| test(/^deadline::a_lost_answer/) | test(/^faults::(two_concurrent|per_key_delete)/) \
	| test(/^recovery::an_output_that_differs/) | test(/^status::/)

test: tools ## Everything: unit, doc and integration tests (nextest) on ministack; the S3-server-dependent ones again on moto; the shipped arm64 bootstrap (test-release).
	$(CARGO) test --doc
	$(SERVERS) ministack moto mosquitto forkserver -- scripts/test-suite.sh '$(MOTO_TESTS)' $(NEXTEST_ARGS)
	@$(MAKE) --no-print-directory test-release

# The bootstrap `sam build` makes (scripts/release-bootstrap.sh), run under
# qemu-aarch64 by the one ignored test of tests/suite/lambda_runtime.rs.
RELEASE_BOOTSTRAP := $(CURDIR)/target/sam-build/CompactionFunction/bootstrap

release-bootstrap: lambda-tools sam-tools ## The deployed artefact: `sam build`'s arm64 release bootstrap (target/sam-build), checked: aarch64, glibc <= 2.34.
	scripts/release-bootstrap.sh

test-release: tools qemu-tools release-bootstrap ## release-bootstrap, then that file under qemu-aarch64 as the function: Success, Mismatch, Failure (in `make test`).
	RELEASE_BOOTSTRAP=$(RELEASE_BOOTSTRAP) $(NEXTEST) run --test suite --run-ignored only --no-capture -E 'test(/release_bootstrap/)'

# cargo refuses `--lib --doc` in one command: two runs.
test-unit: ## Unit and doc tests only (no servers, no tools).
	$(CARGO) test --lib
	$(CARGO) test --doc

test-ministack: tools ## Integration tests against ministack (nextest; NEXTEST_ARGS="-E 'test(/^crash::/)'" to narrow).
	$(SERVERS) ministack mosquitto forkserver -- $(NEXTEST) run --test suite $(NEXTEST_ARGS)

test-moto: tools ## Integration tests against moto's server mode (every test; make test runs MOTO_TESTS there).
	TEST_S3_SERVER=moto $(SERVERS) moto ministack mosquitto forkserver -- $(NEXTEST) run --test suite $(NEXTEST_ARGS)

test-crash: tools ## Failpoint crash tests and the SIGKILL test.
	$(SERVERS) ministack forkserver -- $(NEXTEST) run --test suite -E 'test(/^crash::/)' $(NEXTEST_ARGS)

# The modules that carry the promise (docs/testing.md, "Mutation testing"),
# each mutant judged by the fast tests: the unit tests and the failpoints
# simulation at MUTANTS_SIM_SEEDS schedules, in one `cargo nextest run`.
# `make mutants MUTANTS_FILES=src/protocol/proof.rs` for one file; `make mutants
# SHARD=2/5` for the second of five pieces of the list (cargo-mutants
# --shard). --in-place: the mutants are built in this tree's target/ (a copy
# would start cold); do not edit the tree while it runs. Results in
# mutants.out/, then folded into docs/mutants.tsv and docs/testing.md's
# table (scripts/mutants-summary.py): commit those two. CARGO_INCREMENTAL=1
# whatever the caller's shell says: a mutant's rebuild (our crate, its unit
# tests, the suite relinked) takes ~8 s incremental against ~24 s without.
MUTANTS_FILES ?= src/protocol/proof.rs src/protocol/commit.rs src/protocol/partition.rs src/protocol/manifest.rs src/protocol/sizing.rs src/protocol/read.rs src/protocol/recovery.rs src/protocol/lease.rs src/protocol/day.rs src/protocol/plan.rs src/data/spill.rs src/data/merge/stream.rs
MUTANTS_SIM_SEEDS ?= 300
MUTANTS_ARGS ?=
# The targets built and run for each mutant (cargo-mutants --cargo-arg: the
# build too, so the CLI's example and benches are not rebuilt a mutant),
# and the tests of them that judge it (--max-fail 1:immediate: a caught
# mutant stops at its first failing test, and the tests still running are
# ended, not waited for: with --fail-fast a unit test that caught a mutant
# waited for the simulation, which such a mutant can make endless, and
# the mutant was judged a timeout).
MUTANTS_TARGETS ?= --lib --test suite
MUTANTS_TESTS ?= --max-fail 1:immediate -E 'kind(lib) | test(/^simulation::/)'
SHARD ?=

mutants: ## Mutation testing (not part of `make test`): cargo-mutants over MUTANTS_FILES (SHARD=k/N for a piece) with the unit tests and the simulation; folds the results into docs/mutants.tsv.
	@command -v cargo-mutants >/dev/null || { echo "cargo-mutants is not installed: cargo install cargo-mutants --locked"; exit 1; }
	CARGO_INCREMENTAL=1 SIM_SEEDS=$(MUTANTS_SIM_SEEDS) $(CARGO) mutants --in-place --no-shuffle --test-tool nextest \
		$(if $(SHARD),--shard $(SHARD)) $(foreach f,$(MUTANTS_FILES),--file $(f)) \
		$(foreach a,$(MUTANTS_TARGETS),--cargo-arg=$(a)) $(MUTANTS_ARGS) -- $(MUTANTS_TESTS); \
	status=$$?; python3 scripts/mutants-summary.py; exit $$status

demo: ## Build the CLI, then one run on a generated archive (local S3 and MQTT servers), before/after.
	@scripts/demo.sh

# `make bench BENCH_ARGS="--sizes 1000 --latency-ms 20"`: see bench/bench.py for every option.
# The job is built alone (`--bin`), as the deployment builds it: built in one
# command with the example, its dependencies would get the dev-dependencies'
# features too (Cargo's feature unification), and the job measured would
# not be the one that ships.
BENCH_ARGS ?=

bench: tools bench-tools ## Benchmark (not part of `make test`): job vs sequential baseline vs DuckDB vs I/O floors (own, curl), DuckDB queries before/after, N = 1k, 10k, 50k files (~40 min on 2 cores); draws docs/bench.png, writes docs/performance.md's figures.
	$(CARGO) build --release --example bench-tool
	$(CARGO) build --release --bin archive-compaction
	$(TOOLS_DIR)/py/bin/python bench/bench.py $(BENCH_ARGS)
	$(TOOLS_DIR)/duckdb/bin/python bench/plot.py
	python3 bench/docs.py

bench-plot: bench-tools ## Redraw docs/bench.png from an existing target/bench-results.json.
	$(TOOLS_DIR)/duckdb/bin/python bench/plot.py

bench-docs: ## Rewrite docs/performance.md's figures from an existing target/bench-results.json.
	python3 bench/docs.py

bench-parts: tools bench-tools ## A day in parts: 100,000, 200,000 and 500,000 files in one day, the job alone under `ulimit -v 524288` (a 512 MB Lambda's address space) with the default PART_FILES; writes docs/performance.md's "A day in parts" (~90 min on 2 cores, most of it ministack's listings).
	$(CARGO) build --release --example bench-tool
	$(CARGO) build --release --bin archive-compaction
	$(TOOLS_DIR)/py/bin/python bench/bench.py --sizes 100000,200000,500000 --systems job --job-ulimit-kib 524288 --out target/bench-parts.json $(BENCH_ARGS)
	python3 bench/docs.py --results target/bench-parts.json --block parts

bench-sizing: tools bench-tools ## Parts the run sizes itself, no setting changed but Lambda's AWS_LAMBDA_FUNCTION_MEMORY_SIZE: days of 30,000, 100,000 and 500,000 files at 128, 256 and 512 MB (512 under `ulimit -v 524288` too), each run again as nights until compacted, and 30,000 files in `--max-duration 30` invocations; writes docs/performance.md's "Parts sized by the run" (~2 h on 2 cores, most of it ministack's uploads).
	$(CARGO) build --release --example bench-tool
	$(CARGO) build --release --bin archive-compaction
	$(TOOLS_DIR)/py/bin/python bench/sizing.py --sizes 30000 --memories 128,256,512v --out target/bench-sizing.json $(BENCH_ARGS)
	$(TOOLS_DIR)/py/bin/python bench/sizing.py --append --sizes 30000 --memories 512 --max-duration 30 --margin 10 --out target/bench-sizing.json $(BENCH_ARGS)
	$(TOOLS_DIR)/py/bin/python bench/sizing.py --append --sizes 100000,500000 --memories 128,256,512v --out target/bench-sizing.json $(BENCH_ARGS)
	python3 bench/docs.py --results target/bench-sizing.json --block sizing

bench-windows: tools bench-tools ## A day past one listing window: 500,000 files in one day (windows of 200,000 per-flight files at the default PART_FILES), the job alone under `ulimit -v 524288`; writes docs/performance.md's "A day in listing windows" (~35 min on 2 cores, most of it ministack's upload and listings).
	$(CARGO) build --release --example bench-tool
	$(CARGO) build --release --bin archive-compaction
	$(TOOLS_DIR)/py/bin/python bench/bench.py --sizes 500000 --systems job --job-ulimit-kib 524288 --out target/bench-windows.json $(BENCH_ARGS)
	python3 bench/docs.py --results target/bench-windows.json --block windows

bench-concurrency: tools bench-tools ## READ_CONCURRENCY sweep at 10,000 files (job, I/O floor and curl floor).
	$(CARGO) build --release --example bench-tool
	$(CARGO) build --release --bin archive-compaction
	$(TOOLS_DIR)/py/bin/python bench/bench.py --sizes "" --sweep 8,16,32,64,128,256 --out target/bench-sweep.json $(BENCH_ARGS)
	python3 bench/docs.py --results target/bench-sweep.json

bench-backlog: tools ## A 365-day backlog of 100 per-flight files a day drained by `run --max-duration 20` invocations, read back with pyarrow; writes docs/performance.md's backlog figures (~5 min).
	$(CARGO) build --release --bin archive-compaction
	$(TOOLS_DIR)/py/bin/python bench/backlog.py --out target/bench-backlog.json
	python3 bench/docs.py --results target/bench-backlog.json

bench-audit: tools ## What `audit` costs (release build, ministack): a day of 10,000 per-flight files, the same day compacted, 365 compacted days; writes docs/performance.md's audit figures.
	$(CARGO) build --release --bin archive-compaction
	$(TOOLS_DIR)/py/bin/python bench/audit.py --out target/bench-audit.json
	python3 bench/docs.py --results target/bench-audit.json

bench-audit-scale: tools ## `audit` of an uncompacted 200,000-file day under `--max-duration 900` (a Lambda's 15 minutes) and `ulimit -v 524288`; writes docs/performance.md's audit-scale figures (~15 min, most of it the upload).
	$(CARGO) build --release --bin archive-compaction
	$(TOOLS_DIR)/py/bin/python bench/audit.py --flights 200000 --skip year,compact --max-duration 900 --ulimit-kib 524288 --out target/bench-audit-scale.json
	python3 bench/docs.py --results target/bench-audit-scale.json --block audit-scale

bench-audit-rss: tools ## `audit`'s peak RSS on uncompacted days of 20,000 and 80,000 per-flight files (it should not grow); AUDIT_BEFORE=path/to/binary measures that binary too, on the same buckets; writes target/bench-audit-rss.json (~20 min, most of it the upload).
	$(CARGO) build --release --bin archive-compaction
	$(TOOLS_DIR)/py/bin/python bench/audit.py --flights 20000,80000 --skip year,compact $(if $(AUDIT_BEFORE),--bin $(AUDIT_BEFORE)) --bin target/release/archive-compaction --out target/bench-audit-rss.json

bench-sets: tools ## A date's uuid sets (flights, files past the window, the parity gate's, the parts' pairs) at 1, 10 and 30 million flights under `ulimit -v 524288`, without S3 (bench-tool sets: the run's own code over generated uuids), and once with every set in memory; writes docs/performance.md's "A day of any size" (~3 min, ~1.2 GB of TMPDIR).
	$(CARGO) build --release --example bench-tool
	$(TOOLS_DIR)/py/bin/python bench/sets.py --out target/bench-sets.json
	python3 bench/docs.py --results target/bench-sets.json --block sets

bench-tools:
	@scripts/setup-tools.sh bench

# The block between docs/configuration.md's two settings markers, replaced by
# what the code's declaration prints (tests/suite/docs.rs holds them equal).
docs-settings: ## Rewrite docs/configuration.md's settings table from src/data/config.rs (`archive-compaction settings --markdown`).
	@mkdir -p target
	$(CARGO) run --quiet --bin archive-compaction -- settings --markdown > target/settings.md
	awk '/^<!-- end of settings -->/ { skip = 0 } !skip { print } /^<!-- settings: generated/ { while ((getline l < "target/settings.md") > 0) print l; skip = 1 }' \
		docs/configuration.md > target/configuration.md && mv target/configuration.md docs/configuration.md

# `make bench-instructions INSTRUCTIONS_FILES=2000` for a quicker pass (~2 min).
# The profiling build (release with symbols) of the job alone (`--bin`, as
# the deployment builds it), then the examples in their own command.
INSTRUCTIONS_FILES ?= 10000

bench-instructions: tools instructions-tools ## Instructions (callgrind) of the job's `run` and of an aws-sdk-s3 floor (bench/sdk_floor.rs: list + GET, 64 in flight) on a day of INSTRUCTIONS_FILES (10,000) per-flight files; writes docs/performance.md's "Instructions" (~8 min on 2 cores).
	$(CARGO) build --profile profiling --bin archive-compaction
	$(CARGO) build --profile profiling --example bench-tool --example sdk-floor
	$(TOOLS_DIR)/py/bin/python bench/instructions.py --files $(INSTRUCTIONS_FILES)
	python3 bench/docs.py --results target/bench-instructions.json

instructions-tools:
	@scripts/setup-tools.sh valgrind


fmt: ## Format the code.
	$(CARGO) fmt --all

lint: sam-tools ## rustfmt check, clippy and rustdoc (intra-doc links) with warnings as errors, sam validate --lint.
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	RUSTDOCFLAGS='-D warnings' $(CARGO) doc --no-deps --document-private-items
	$(SAM) validate --lint --template template.yaml

validate: sam-tools ## sam validate --lint on template.yaml only.
	$(SAM) validate --lint --template template.yaml

lambda-tools:
	@scripts/setup-tools.sh lambda

sam-tools:
	@scripts/setup-tools.sh sam

qemu-tools:
	@scripts/setup-tools.sh qemu

build: lambda-tools ## The Lambda bootstrap: target/lambda/archive-compaction/bootstrap (arm64; ARCH=x86-64 for x86_64).
	PATH="$(LAMBDA_BIN):$$PATH" $(CARGO) lambda build --release --$(ARCH) --bin archive-compaction
	@file target/lambda/archive-compaction/bootstrap 2>/dev/null || ls -l target/lambda/archive-compaction/bootstrap

# The credentials and the terminal are checked before anything is built:
# without them `sam deploy --guided` would fail (or wait for answers) only
# after minutes of cross-compiling.
deploy: sam-tools ## sam build && sam deploy --guided (needs AWS credentials and a terminal).
	@SAM_PYTHON=$(TOOLS_DIR)/sam/bin/python scripts/deploy-preflight.sh
	@scripts/setup-tools.sh lambda
	PATH="$(LAMBDA_BIN):$$PATH" $(SAM) build --template template.yaml
	$(SAM) deploy --guided

deploy-local: tools ## template.yaml deployed into ministack (sam deploy) with a generated archive; prints the outputs and how to invoke.
	@scripts/deploy-local.sh

invoke-local: tools lambda-tools ## The function under `cargo lambda watch` on a local S3 archive, invoked with EVENT.
	@scripts/invoke-local.sh $(EVENT)

invoke-qemu: tools qemu-tools build ## As invoke-local, but the arm64 bootstrap of `make build` under qemu-aarch64-static (make test-release is its test).
	@BOOTSTRAP=target/lambda/archive-compaction/bootstrap scripts/invoke-local.sh $(EVENT)
