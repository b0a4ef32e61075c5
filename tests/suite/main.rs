//! The integration tests: one crate, one binary, linked once (as Cargo's own
//! `tests/testsuite/`). Each module is one guarantee; `make test` runs them
//! with cargo-nextest, a process per test, against servers started once for
//! the whole run (`scripts/test-servers.py`). Built with the `failpoints`
//! feature always on (Cargo.toml's dev-dependency on this package): the crash
//! tests configure failpoints, every other test leaves them inert.

mod common;

mod audit;
mod bounded_inputs;
mod cli_output;
mod crash;
mod deadline;
mod deployed;
mod docs;
mod dry_run_and_date;
mod end_to_end;
mod events;
mod faults;
mod home_assistant;
mod index_inputs;
mod inputs;
mod lambda_runtime;
mod migration;
mod operator_errors;
mod parts;
mod real_writers;
mod recovery;
mod reporting;
mod run_report;
mod signals;
mod simulation;
mod specs;
mod status;
mod store_conformance;
mod support_scripts;
mod walk_start;
