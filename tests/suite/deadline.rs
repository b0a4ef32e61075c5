//! Time and truth under network faults, with the fault proxy
//! (tests/support/faultproxy.py) in front of the real S3 server:
//!
//! - a request that never answers, at one phase or another, ends the run
//!   within its deadline (S3 calls end `S3_DEADLINE_MARGIN` before it), with
//!   a report that says `deadline` and the lease released;
//! - a write whose answer is lost (applied, then the connection closed) is
//!   sent again by the SDK and fails its own condition: the run reads it
//!   back and recognises its own lease, manifest, output and watermark;
//! - a GetObject body cut off (reset, truncated) is read again;
//! - after a 503 storm on the manifest's DELETE (with no message) beside the
//!   watermark's PUT, the report's watermark is the one in the bucket, and
//!   a lease that could not be released is an error in the report.

use std::time::{Duration, Instant};

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::report::{Status, StopReason};
use serde_json::json;

const NOW: &str = "2026-07-22T04:50:00Z";

fn two_days(seed: u64) -> serde_json::Value {
    json!({"seed": seed, "days": [
        {"date": "2026-07-19", "flights": 4},
        {"date": "2026-07-20", "flights": 3}
    ]})
}

/// How long after its deadline a run stopped by a stalled request may end:
/// the lease's release ends 3 s before the deadline, the rest is slack for
/// a loaded machine.
const PAST_DEADLINE: Duration = Duration::from_secs(1);

/// One request that never answers, at each of six phases (one proxy and
/// bucket each, run side by side): every run ends within its deadline
/// (12 s) plus [`PAST_DEADLINE`], says `deadline`, names the S3 call, and
/// releases its lease.
#[tokio::test]
async fn a_request_that_never_answers_ends_the_run_within_its_deadline_at_every_phase() {
    init_logs();
    let phases = [
        ("listing", r"^GET /[^/?]+/?\?.*list-type=2"),
        ("index GET", r"^GET /[^/]+/index/.*[0-9a-f-]{36}\.parquet"),
        ("manifest PUT", r"^PUT /[^/]+/_compaction_state/manifests/"),
        ("output PUT", r"^PUT /[^/]+/index/.*/compacted-"),
        ("DeleteObjects", r"^POST /[^/?]+/?\?delete"),
        ("watermark PUT", r"^PUT /[^/]+/_compaction_state/watermark"),
    ];
    let deadline = Duration::from_secs(12);
    let mut runs = Vec::new();
    for (i, (phase, rule)) in phases.iter().enumerate() {
        let direct = bucket(&format!("dl-stall-{i}")).await;
        generate(&direct, two_days(350 + i as u64));
        let proxy = Proxy::start();
        proxy.set(json!({"stall": [{"match": rule, "times": -1}]}));
        runs.push((phase, direct, proxy));
    }
    let results = futures::future::join_all(runs.iter().map(|(_, direct, proxy)| async move {
        let store = proxy.store(direct);
        let cfg = config(&store, &[("DEADLINE_MARGIN_SECONDS", "9")]);
        let mut opts = RunOptions::at(at(NOW));
        let t0 = Instant::now();
        opts.deadline = Some(t0 + deadline);
        let r = run(&store, &cfg, &opts).await;
        (r, t0.elapsed())
    }))
    .await;
    for ((phase, direct, proxy), (r, took)) in runs.iter().zip(results) {
        let stalled = proxy.stats()["by_rule"]["stall"].as_u64().unwrap_or(0);
        assert!(stalled >= 1, "{phase}: nothing stalled: {}", proxy.stats());
        assert!(
            took <= deadline + PAST_DEADLINE,
            "{phase}: the run took {took:?}, its deadline was {deadline:?}"
        );
        assert_eq!(r.stop_reason, StopReason::Deadline, "{phase}: {:?}", r.errors);
        assert_eq!(r.last_run_status, Status::Failure, "{phase}");
        assert!(
            r.errors.iter().any(|e| e.contains("not answered before the run's deadline")),
            "{phase}: {:?}",
            r.errors
        );
        let left = dump(direct, "_compaction_state/");
        assert!(
            !left.contains_key("_compaction_state/lock.json"),
            "{phase}: the lease was not released"
        );
    }
}

/// audit keeps the run's deadline rule: an index GET that never answers is
/// cut 8 s before the deadline (12 s) and the audit ends with its report,
/// `incomplete`, naming the date to resume from. Before, audit bounded no
/// S3 call: a stalled request outlived Lambda's timeout with no report.
#[tokio::test]
async fn an_audit_whose_request_never_answers_ends_within_its_deadline_with_a_report() {
    init_logs();
    let direct = bucket("dl-audit").await;
    generate(&direct, two_days(365));
    let proxy = Proxy::start();
    proxy.set(
        json!({"stall": [{"match": r"^GET /[^/]+/index/.*2026/month=07/day=20/", "times": -1}]}),
    );
    let store = proxy.store(&direct);
    let cfg = config(&store, &[("DEADLINE_MARGIN_SECONDS", "9")]);
    let mut opts = archive_compaction::commands::audit::AuditOptions::range(
        date("2026-07-19"),
        date("2026-07-20"),
    );
    let deadline = Duration::from_secs(12);
    let t0 = Instant::now();
    opts.deadline = Some(t0 + deadline);
    let r = archive_compaction::commands::audit::audit(&store, &cfg, &opts).await.unwrap();
    let took = t0.elapsed();
    assert!(proxy.stats()["by_rule"]["stall"].as_u64().unwrap_or(0) >= 1, "{}", proxy.stats());
    assert!(
        took <= deadline + PAST_DEADLINE,
        "the audit took {took:?}, its deadline was {deadline:?}"
    );
    assert_eq!(r.status, archive_compaction::commands::audit::AuditStatus::Incomplete, "{r:?}");
    assert_eq!(r.resume_date, Some(date("2026-07-20")), "{r:?}");
    assert_eq!(r.totals.dates_audited, 1, "07-19 was audited: {r:?}");
}

/// The acceptance check from outside: the CLI with `--max-duration 40`, a
/// manifest PUT that never answers: the process ends within 40 s plus 2 s
/// with its report (`stop_reason` `deadline`, exit 1).
#[tokio::test]
async fn the_cli_with_a_forty_second_deadline_ends_in_time_with_its_report() {
    init_logs();
    let direct = bucket("dl-cli").await;
    generate(&direct, two_days(360));
    let proxy = Proxy::start();
    proxy.set(
        json!({"stall": [{"match": r"^PUT /[^/]+/_compaction_state/manifests/", "times": -1}]}),
    );
    let t0 = Instant::now();
    let out = cli_command(&direct, &["run", "--now", NOW, "--max-duration", "40"])
        .env("AWS_ENDPOINT_URL", proxy.endpoint())
        .env("DEADLINE_MARGIN_SECONDS", "10")
        .output()
        .unwrap();
    let took = t0.elapsed();
    let report = report_of(&out);
    assert!(took <= Duration::from_secs(42), "the run took {took:?} with --max-duration 40");
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    assert_eq!(report["stop_reason"], "deadline", "{report:#}");
    assert!(
        !dump(&direct, "_compaction_state/").contains_key("_compaction_state/lock.json"),
        "the lease was not released"
    );
}

/// Each conditional write's answer lost once (applied, the connection then
/// closed): the SDK sends it again and the retry fails its own condition.
/// The run recognises its own lease, manifest, output and watermark, and
/// compacts everything.
#[tokio::test]
async fn a_lost_answer_on_each_conditional_write_is_recognised_as_the_runs_own() {
    init_logs();
    let direct = bucket("dl-lost").await;
    let generated = generate(&direct, two_days(370));
    let proxy = Proxy::start();
    let lose = |m: &str| json!({"match": m, "times": 1});
    proxy.set(json!({"lose_answer": [
        lose(r"^PUT /[^/]+/_compaction_state/lock\.json"),
        lose(r"^PUT /[^/]+/_compaction_state/manifests/"),
        lose(r"^PUT /[^/]+/index/.*/compacted-"),
        lose(r"^PUT /[^/]+/_compaction_state/watermark\.json"),
    ]}));
    let store = proxy.store(&direct);
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(proxy.stats()["by_rule"]["lose_answer"], 4, "{}", proxy.stats());
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::ReachedCutoff);
    assert_eq!(r.days_compacted, 2);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let after = assert_all_compacted(&direct, &generated, "2026-07-20", "lost answers");
    assert!(!after.contains_key("_compaction_state/lock.json"));
}

/// GetObject bodies cut half-way (a reset, a truncation) on index files and
/// on the lease's confirmation: each is read again and the run succeeds.
#[tokio::test]
async fn a_body_cut_off_is_read_again_and_the_run_succeeds() {
    init_logs();
    let direct = bucket("dl-cut").await;
    let generated = generate(&direct, two_days(380));
    let proxy = Proxy::start();
    proxy.set(json!({"cut_body": [
        {"match": r"^GET /[^/]+/index/year=2026/month=07/day=19/", "mode": "reset", "times": 1},
        {"match": r"^GET /[^/]+/index/year=2026/month=07/day=20/", "mode": "truncate", "times": 1},
        {"match": r"^GET /[^/]+/_compaction_state/lock\.json", "mode": "truncate", "times": 1},
    ]}));
    let store = proxy.store(&direct);
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(proxy.stats()["by_rule"]["cut_body"], 3, "{}", proxy.stats());
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_all_compacted(&direct, &generated, "2026-07-20", "bodies cut");
}

/// A 503 storm without a message on every manifest DELETE and on the
/// lease's release: the first date's watermark PUT succeeds beside its
/// manifest's failed DELETE. The report says the watermark the bucket
/// holds (`last_compacted_date`, `days_compacted`), the S3 error names
/// the status's meaning, and the lease not released is an error saying
/// what the next run will see.
#[tokio::test]
async fn after_a_failed_manifest_delete_the_report_equals_the_watermark_in_the_bucket() {
    init_logs();
    let direct = bucket("dl-report").await;
    generate(&direct, two_days(390));
    let proxy = Proxy::start();
    proxy.set(json!({"fail": [
        {"match": r"^DELETE /[^/]+/_compaction_state/manifests/", "status": 503, "code": "", "times": -1},
        {"match": r"^DELETE /[^/]+/_compaction_state/lock\.json", "status": 503, "code": "", "times": -1},
    ]}));
    let store = proxy.store(&direct);
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Failure);
    let wm = watermark(&dump(&direct, "_compaction_state/")).expect("watermark written");
    assert_eq!(wm["last_compacted_date"], "2026-07-19", "{:?}", r.errors);
    assert_eq!(
        r.last_compacted_date.map(|d| d.to_string()).as_deref(),
        wm["last_compacted_date"].as_str(),
        "the report's watermark is not the bucket's: {:?}",
        r.errors
    );
    assert_eq!(r.days_compacted, 1);
    assert!(
        r.errors.iter().any(|e| e.contains("HTTP 503: Slow Down (the server sent no message)")),
        "{:?}",
        r.errors
    );
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("was not released") && e.contains("the next run finds it held by")),
        "{:?}",
        r.errors
    );
}
