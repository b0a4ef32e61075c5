//! The template deployed and the role's least privilege, each driven by a
//! Python script under `tests/support/` with the binary this `cargo test`
//! built (see each script's docstring for every check it makes):
//!
//! - `deployed.py`: template.yaml deployed with `sam deploy` into ministack
//!   (its `full` extra: SAM transform, Lambda `provided.al2023` functions run
//!   as local processes, EventBridge schedules, SQS, CloudWatch, Logs,
//!   Secrets Manager); the binary is the function's `bootstrap`.
//! - `least_privilege.py`: the role policy read from template.yaml, attached
//!   to a user on a moto server that enforces IAM; the job runs under it.
//!
//! The tools come from `scripts/setup-tools.sh` (`.tools/sam`,
//! `.tools/ministack-full`, `.tools/py`). Without them these tests say
//! SKIPPED and pass, except under CI (`CI` set), where they fail.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use crate::common::*;

fn require(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> =
        tools.iter().copied().filter(|t| !crate::common::tools().join(t).exists()).collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!("missing {missing:?} under .tools (run scripts/setup-tools.sh)");
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {msg}; CI must run it");
    }
    eprintln!("SKIPPED {test}: {msg}");
    false
}

/// Runs `tests/support/SCRIPT` with the test build's binary; its output is
/// printed, a non-zero exit fails the test with it.
fn drive(script: &str, flag: &str) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_archive-compaction"));
    let started = Instant::now();
    let out = Command::new(python())
        .arg(root().join("tests/support").join(script))
        .arg(flag)
        .arg(&bin)
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "{script} failed ({}) after {:.0} s:\n{stdout}",
        out.status,
        started.elapsed().as_secs_f64()
    );
    assert!(stdout.contains("all checks passed"), "{script} ended without its last check");
}

#[test]
fn deployed_stack_on_ministack() {
    if require(
        "deployed_stack_on_ministack",
        &["sam/bin/sam", "ministack-full/bin/ministack", "py/bin/python"],
    ) {
        drive("deployed.py", "--bootstrap");
    }
}

#[test]
fn least_privilege_on_moto() {
    if require("least_privilege_on_moto", &["py/bin/moto_server"]) {
        drive("least_privilege.py", "--binary");
    }
}
