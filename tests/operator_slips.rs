//! An operator's slips, on a real S3-protocol server (ministack, or moto
//! with `TEST_S3_SERVER=moto`), each shown to write and delete nothing
//! where it must not (the bucket is read back with pyarrow before and
//! after): a future invocation time, a watermark ahead of today's cutoff, a
//! watermark without its date, a mistyped event, a mistyped `LOG_LEVEL`, a
//! lock that lasts ten years, `audit` and `prune-cache` with a bad setting
//! (no run report), a mistyped setting name (a warning), a lease that expires under its own run, a
//! fresh deployment stuck on its first date (the lag without a watermark),
//! and SIGTERM / SIGINT sent to the real binary at several moments of a run
//! (listing, reading, between commit phases), each followed by a run that
//! is not blocked and leaves every row exactly once.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use archive_compaction::app::{Deps, handle};
use archive_compaction::clock::ManualClock;
use archive_compaction::config::Config;
use archive_compaction::metrics::metrics;
use archive_compaction::report::{RunReport, Status, StopReason};
use archive_compaction::run::{RunOptions, run};
use archive_compaction::status::{self, StatusOptions, StatusReport};
use archive_compaction::storage::{PutMode, S3Store};
use common::*;
use serde_json::{Value, json};

const NOW: &str = "2026-07-22T04:50:00Z";
const WATERMARK: &str = "_compaction_state/watermark.json";
const LOCK: &str = "_compaction_state/lock.json";

fn three_days(seed: u64) -> Value {
    json!({"seed": seed, "days": [
        {"date": "2026-07-18", "flights": 5},
        {"date": "2026-07-19", "flights": 4},
        {"date": "2026-07-20", "flights": 6}
    ]})
}

async fn put_state(store: &S3Store, key: &str, body: &str) {
    store
        .put(key, body.as_bytes().to_vec().into(), PutMode::Create, None)
        .await
        .unwrap();
}

/// Options for a run at `now` whose wall clock shows `wall`.
fn at_wall(now: &str, wall: &str) -> RunOptions {
    let mut o = RunOptions::at(at(now));
    o.clock = Arc::new(ManualClock::new(at(wall)));
    o
}

fn metric(r: &RunReport, name: &str) -> Option<f64> {
    metrics(r).iter().find(|m| m.name == name).map(|m| m.value)
}

/// A fresh bucket (named after `hint`, logs set up) holding
/// [`three_days`]`(seed)` and the state files `state` (key, body) as an
/// operator left them; returns the store and the whole bucket as pyarrow
/// reads it back before the slip.
async fn slip_world(
    hint: &str,
    seed: u64,
    state: &[(&str, &str)],
) -> (S3Store, BTreeMap<String, Dumped>) {
    init_logs();
    let store = bucket(hint).await;
    generate(&store, three_days(seed));
    for (key, body) in state {
        put_state(&store, key, body).await;
    }
    let before = dump(&store, "");
    (store, before)
}

/// What `status` says of `store` at [`NOW`] (the wall clock at `NOW` too),
/// over the last three dates.
async fn status_at_now(store: &S3Store, cfg: &Config) -> StatusReport {
    let opts = StatusOptions {
        now: at(NOW),
        as_of: at(NOW),
        days: 3,
    };
    status::gather(store, cfg, &opts).await.unwrap()
}

fn cli_out(store: &S3Store, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = cli_command(store, args);
    cmd.envs(env.iter().copied());
    cmd.output().expect("run the archive-compaction binary")
}

#[tokio::test]
async fn a_future_invocation_time_is_refused_and_writes_nothing() {
    let (store, before) = slip_world(
        "slip-future-now",
        261,
        &[(WATERMARK, r#"{"last_compacted_date": "2026-07-17"}"#)],
    )
    .await;

    // The CLI, with a typo in the year: exit 1, a clear error, nothing written.
    let out = cli_out(&store, &["run", "--now", "2030-01-01T00:00:00Z"], &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let r = report_of(&out);
    assert_eq!(r["last_run_status"], "Failure");
    let err = r["errors"][0].as_str().unwrap();
    assert!(
        err.contains("ahead of the wall clock") && err.contains("--now"),
        "{err}"
    );
    // The Lambda console event alike.
    let deps = Deps::from_parts(config(&store, &[]), store.clone(), None, None);
    let e = handle(
        &deps,
        lambda_runtime::LambdaEvent::new(
            json!({"now": "2030-01-01T00:00:00Z"}),
            lambda_runtime::Context::default(),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(e.0.last_run_status, Status::Failure);
    assert!(
        e.0.errors[0].contains("ahead of the wall clock"),
        "{:?}",
        e.0.errors
    );
    assert_eq!(dump(&store, ""), before, "a refused run changed the bucket");

    // Within the skew, across midnight: the cutoff is the wall clock's
    // (07-19), not the invocation time's (07-20).
    let r = run(
        &store,
        &config(&store, &[]),
        &at_wall("2026-07-22T00:02:00Z", "2026-07-21T23:58:00Z"),
    )
    .await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.cutoff, Some(date("2026-07-19")));
    let after = dump(&store, "");
    assert_eq!(
        watermark(&after).unwrap()["last_compacted_date"],
        "2026-07-19"
    );
    for k in after.keys().filter(|k| k.contains("day=20/")) {
        assert_eq!(
            after.get(k),
            before.get(k),
            "07-20 is past the wall clock's cutoff"
        );
    }
}

#[tokio::test]
async fn a_watermark_ahead_of_todays_cutoff_fails_every_run_and_is_reported() {
    let (store, before) = slip_world(
        "slip-ahead",
        262,
        &[(WATERMARK, r#"{"last_compacted_date": "2029-12-30"}"#)],
    )
    .await;
    let cfg = config(&store, &[]);

    let r = run(&store, &cfg, &at_wall(NOW, NOW)).await;
    assert_eq!(r.last_run_status, Status::Failure);
    assert_eq!(r.stop_reason, StopReason::Error);
    // 2029-12-30 - 2026-07-20.
    assert_eq!(r.watermark_ahead_days, Some(1259));
    let err = &r.errors[0];
    assert!(
        err.contains("ahead of today's cutoff 2026-07-20")
            && err.contains("Fix:")
            && err.contains("watermark.json"),
        "{err}"
    );
    // The metric the lag alarm watches carries the distance, never 0, and
    // the report's lag is the metric's.
    assert_eq!(metric(&r, "WatermarkLagDays"), Some(1259.0));
    assert_eq!(r.watermark_lag_days, Some(1259));
    assert_eq!(dump(&store, ""), before, "the run changed the bucket");

    // status says so too, never "up to date".
    let s = status_at_now(&store, &cfg).await;
    assert_eq!(s.watermark_ahead_days, Some(1259));
    // Listed among the errors (printed first, exit 1), and on the lag line.
    assert!(
        s.errors
            .iter()
            .any(|e| e.contains("2029-12-30 is 1259 day(s) ahead of today's cutoff")),
        "{:?}",
        s.errors
    );
    let text = status::format_human(&s);
    assert!(text.starts_with("errors\n"), "{text}");
    assert!(text.contains("AHEAD of today's cutoff"), "{text}");
    assert!(!text.contains("up to date"), "{text}");

    // The real binary on the real clock: a Failure too.
    let out = cli_out(&store, &["run"], &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(report_of(&out)["watermark_ahead_days"].as_i64().unwrap() > 0);
    assert_eq!(dump(&store, ""), before);
}

#[tokio::test]
async fn a_watermark_without_its_date_or_with_a_wrong_type_compacts_nothing() {
    init_logs();
    let store = bucket("slip-watermark").await;
    generate(&store, three_days(263));
    let cfg = config(&store, &[]);
    for (body, field) in [
        (
            r#"{"last_compacted_dat": "2026-07-17"}"#,
            "last_compacted_date",
        ),
        (r#"{"mismatch_runs": 0}"#, "last_compacted_date"),
        (
            r#"{"last_compacted_date": "2026-07-17", "mismatch_runs": "2"}"#,
            "mismatch_runs",
        ),
    ] {
        let _ = store.delete(WATERMARK, None).await;
        put_state(&store, WATERMARK, body).await;
        let before = dump(&store, "");
        let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
        assert_eq!(r.last_run_status, Status::Failure, "{body}");
        assert_eq!(r.days_compacted, 0);
        let err = &r.errors[0];
        assert!(
            err.contains(WATERMARK) && err.contains(&format!("\"{field}\"")),
            "{body}: {err}"
        );
        assert_eq!(dump(&store, ""), before, "{body}: the bucket changed");
    }
    // The CLI: exit 1, the same message.
    let out = cli_out(&store, &["run", "--now", NOW], &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // Deleting the file is the way to start over.
    store.delete(WATERMARK, None).await.unwrap();
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-20")));
}

#[tokio::test]
async fn a_mistyped_event_compacts_nothing() {
    let (store, before) = slip_world("slip-event", 264, &[]).await;
    let deps = Deps::from_parts(config(&store, &[]), store.clone(), None, None);
    for (payload, needle) in [
        (
            json!({"dry-run": true, "now": NOW}),
            "unknown field \"dry-run\"",
        ),
        (json!([]), "an array"),
        (json!({"date": "2026-7-18", "now": NOW}), "\"date\""),
    ] {
        let e = handle(
            &deps,
            lambda_runtime::LambdaEvent::new(payload.clone(), lambda_runtime::Context::default()),
        )
        .await
        .unwrap_err();
        assert_eq!(e.0.last_run_status, Status::Failure, "{payload}");
        assert!(
            e.0.errors[0].contains(needle),
            "{payload}: {:?}",
            e.0.errors
        );
    }
    assert_eq!(
        dump(&store, ""),
        before,
        "a refused event changed the bucket"
    );
}

#[tokio::test]
async fn a_mistyped_log_level_is_refused_and_writes_nothing() {
    let (store, before) = slip_world("slip-log-level", 265, &[]).await;
    for level in ["warning", "verbose", "debug;"] {
        let out = cli_out(&store, &["run", "--now", NOW], &[("LOG_LEVEL", level)]);
        assert_eq!(out.status.code(), Some(1), "{level}: {out:?}");
        let r = report_of(&out);
        let err = r["errors"][0].as_str().unwrap();
        assert!(err.contains("LOG_LEVEL") && err.contains(level), "{err}");
        // The error is logged too (at the fallback level).
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("bad configuration"), "{level}: {stderr}");
    }
    assert_eq!(dump(&store, ""), before);
    // A documented value logs at its level.
    let out = cli_out(
        &store,
        &["run", "--now", NOW, "--dry-run"],
        &[("LOG_LEVEL", "warn,archive_compaction=info")],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("run starting"));
}

/// A variable one or two letters off a setting's name is ignored, as any
/// other, but named in a warning with the setting it resembles: `MQTT_HOTS`
/// would otherwise turn MQTT off in silence.
#[tokio::test]
async fn a_mistyped_setting_name_is_named_in_a_warning() {
    init_logs();
    let store = bucket("slip-setting-name").await;
    generate(&store, three_days(273));
    let out = cli_out(
        &store,
        &["run", "--now", NOW, "--dry-run"],
        &[("MQTT_HOTS", "127.0.0.1"), ("LAG_DAY", "5")],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (variable, setting) in [("MQTT_HOTS", "MQTT_HOST"), ("LAG_DAY", "LAG_DAYS")] {
        let line = format!(
            "environment variable {variable} is not a setting and is ignored: did you mean {setting}?"
        );
        assert!(stderr.contains(&line), "{line}:\n{stderr}");
    }
    // Ignored: the cutoff is LAG_DAYS' default.
    assert_eq!(report_of(&out)["cutoff"], "2026-07-20");
}

/// `audit` and `prune-cache` with a bad setting: exit 1, the setting named
/// on stderr, nothing on stdout (their scripts parse their own reports,
/// never a run report), nothing written.
#[tokio::test]
async fn audit_and_prune_cache_with_a_bad_setting_print_no_run_report() {
    init_logs();
    let store = bucket("slip-bad-setting-audit").await;
    generate(&store, three_days(272));
    let before = dump(&store, "");
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().to_str().unwrap();
    let cases: [(&[&str], (&str, &str)); 3] = [
        (
            &["audit", "--from", "2026-07-18", "--to", "2026-07-20"],
            ("LAG_DAYS", "two"),
        ),
        (&["prune-cache", "--dir", dir], ("LOG_LEVEL", "warning")),
        (
            &["prune-cache", "--dir", dir, "--dry-run"],
            ("SWEEP_DAYS", "-1"),
        ),
    ];
    for (args, (name, value)) in cases {
        let out = cli_out(&store, args, &[(name, value)]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?} {name}={value}: {out:?}"
        );
        assert!(
            out.stdout.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = format!("archive-compaction {}: setting {name}", args[0]);
        assert!(stderr.contains(&line) && stderr.contains(value), "{stderr}");
        assert!(!stderr.contains("run failed"), "{stderr}");
    }
    assert_eq!(dump(&store, ""), before);
}

#[tokio::test]
async fn a_lock_that_lasts_ten_years_is_a_failure_naming_the_file() {
    let (store, before) = slip_world(
        "slip-lock-2036",
        266,
        &[(
            LOCK,
            r#"{"holder": "by-hand", "acquired_at": "2026-07-22T04:00:00Z", "expires_at": "2036-07-22T04:00:00Z"}"#,
        )],
    )
    .await;
    let out = cli_out(&store, &["run", "--now", NOW], &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let r = report_of(&out);
    assert_eq!(r["last_run_status"], "Failure");
    assert_eq!(r["stop_reason"], "error");
    let err = r["errors"][0].as_str().unwrap();
    assert!(
        err.contains("remove _compaction_state/lock.json") && err.contains("2036-07-22"),
        "{err}"
    );
    assert_eq!(dump(&store, ""), before, "the lock or the bucket changed");
    // status names it among its errors (exit 1), not as "a run is under way" alone.
    let out = cli_out(&store, &["status", "--now", NOW], &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("longer than any run holds it"), "{text}");
    // Its lease line says what a run does with it (fails), not "held … a new
    // run does nothing until then".
    assert!(
        text.contains("lease        implausible: by-hand claims it until 2036-07-22T04:00:00Z"),
        "{text}"
    );
    assert!(!text.contains("a new run does nothing"), "{text}");
    let out = cli_out(&store, &["status", "--now", NOW, "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status --json");
    assert_eq!(v["lease"]["state"], "implausible", "{v}");
}

#[tokio::test]
async fn a_lease_that_expires_under_its_own_run_says_so() {
    init_logs();
    let store = bucket("slip-lease-expired").await;
    generate(&store, three_days(267));
    // Every request 700 ms late: a 1 s lease lapses between two steps.
    let proxy = Proxy::start();
    proxy.set(json!({"latency_ms": 700}));
    let slow = proxy.store(&store);
    let cfg = config(&store, &[("LEASE_SECONDS", "1")]);
    let r = run(&slow, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Failure);
    let err = r.errors.join("; ");
    assert!(err.contains("expired under this run"), "{err}");
    assert!(!err.contains("taken over or deleted"), "{err}");
}

#[tokio::test]
async fn without_a_watermark_the_lag_counts_from_the_first_date() {
    init_logs();
    let store = bucket("slip-lag-fresh").await;
    // A fresh deployment stuck on its first date (flights without index rows).
    generate(
        &store,
        json!({"seed": 268, "days": [
            {"date": "2026-07-18", "flights": 4, "unindexed": 1},
            {"date": "2026-07-19", "flights": 3}
        ]}),
    );
    let cfg = config(&store, &[]);
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Mismatch);
    assert_eq!(r.last_compacted_date, None);
    // 07-18, 07-19, 07-20 are not compacted.
    assert_eq!(r.watermark_lag_days, Some(3));
    assert_eq!(metric(&r, "WatermarkLagDays"), Some(3.0));
    // A run that finds the lease held did no work: it reports the lag as
    // the walk counts it and publishes none, so it cannot clear the alarm
    // with a 0.
    let lease = archive_compaction::lease::LeaseGuard::acquire(
        &store,
        "someone-else",
        std::time::Duration::from_secs(120),
    )
    .await
    .unwrap();
    let held = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    lease.release().await.unwrap();
    assert_eq!(held.stop_reason, StopReason::LeaseHeld);
    assert_eq!(held.watermark_lag_days, Some(3), "counted from 07-18");
    assert_eq!(metric(&held, "WatermarkLagDays"), None);
    // Days later, still stuck: the lag grows past the alarm's threshold.
    let r = run(&store, &cfg, &RunOptions::at(at("2026-07-27T04:50:00Z"))).await;
    assert_eq!(r.watermark_lag_days, Some(8));
    let s = status_at_now(&store, &cfg).await;
    assert_eq!(s.watermark_lag_days, Some(3));
    assert!(status::format_human(&s).contains("no watermark yet: counted from 2026-07-18"));
    // With START_DATE, from there.
    let cfg = config(&store, &[("START_DATE", "2026-07-10")]);
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(
        r.last_compacted_date,
        Some(date("2026-07-17")),
        "{:?}",
        r.errors
    );
    let fresh = bucket("slip-lag-start").await;
    let cfg = config(&fresh, &[("START_DATE", "2026-07-10")]);
    let mut o = RunOptions::at(at(NOW));
    o.dry_run = true;
    let r = run(&fresh, &cfg, &o).await;
    assert_eq!(r.watermark_lag_days, Some(11), "07-10 to 07-20");
}

/// A watermark in year 0001 (a hand edit, a restore gone wrong) or a
/// START_DATE decades back: the 740,000 dates before the first partition
/// hold nothing, and walking them one by one (two listings and a watermark
/// write each) took weeks of runs. One listing of index/ and flights/ finds
/// the first partition with data; the run starts there, moves the watermark
/// over the empty dates, and reaches today's data in one run (within a
/// minute and a half here: the run is given that deadline).
#[tokio::test]
async fn a_watermark_in_year_0001_reaches_todays_data_in_one_run() {
    init_logs();
    let mut o = RunOptions::at(at(NOW));
    // Two and a half minutes, less DEADLINE_MARGIN_SECONDS (60): a minute
    // and a half to walk.
    o.deadline = Some(std::time::Instant::now() + Duration::from_secs(150));
    for (hint, seed, watermark, start_date) in [
        ("slip-year-1", 271, Some("0001-01-01"), None),
        ("slip-start-1970", 272, None, Some("1970-01-01")),
    ] {
        let store = bucket(hint).await;
        let g = generate(&store, three_days(seed));
        if let Some(w) = watermark {
            put_state(
                &store,
                WATERMARK,
                &format!(r#"{{"last_compacted_date": "{w}"}}"#),
            )
            .await;
        }
        let env: Vec<(&str, &str)> = start_date.map(|s| ("START_DATE", s)).into_iter().collect();
        let r = run(&store, &config(&store, &env), &o).await;
        assert_eq!(r.last_run_status, Status::Success, "{hint}: {:?}", r.errors);
        assert_eq!(r.stop_reason, StopReason::ReachedCutoff, "{hint}");
        assert_eq!(r.last_compacted_date, Some(date("2026-07-20")), "{hint}");
        assert_eq!(
            r.days_compacted, 3,
            "{hint}: 07-18, 07-19, 07-20 walked, no empty date"
        );
        assert_eq!(r.watermark_lag_days, Some(0), "{hint}");
        assert_all_compacted(&store, &g, "2026-07-20", hint);
    }
}

#[tokio::test]
async fn flights_before_the_first_index_partition_are_walked_not_passed_by() {
    init_logs();
    // The writer's index upload was broken from the start: 07-16's flights
    // have no index file at all (no index partition for that date), the
    // dates after it do. Without a watermark or START_DATE, the walk starts
    // at the earliest partition of either root: 07-16, a Mismatch.
    let store = bucket("slip-first-unindexed").await;
    let g = generate(
        &store,
        json!({"seed": 269, "days": [
            {"date": "2026-07-16", "flights": 3, "unindexed": 3},
            {"date": "2026-07-17", "flights": 2},
            {"date": "2026-07-18", "flights": 2}
        ]}),
    );
    assert!(
        store
            .list("index/year=2026/month=07/day=16/")
            .await
            .unwrap()
            .is_empty(),
        "07-16 must have no index partition"
    );
    let cfg = config(&store, &[]);
    let s = status_at_now(&store, &cfg).await;
    assert_eq!(s.next_date, Some(date("2026-07-16")));
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.mismatch_date, Some(date("2026-07-16")));
    let mut missing = g.missing["2026-07-16"].clone();
    missing.sort();
    let mut got = r.mismatch_uuids.clone();
    got.sort();
    assert_eq!(got, missing);
    // 07-16 to the cutoff 07-20: five dates, none compacted.
    assert_eq!(r.watermark_lag_days, Some(5));
    assert_eq!(r.last_compacted_date, None);
    // A bucket whose index rows never landed at all: a Mismatch, not a
    // Success with lag 0 ("nothing to compact") every night.
    let none = bucket("slip-never-indexed").await;
    generate(
        &none,
        json!({"seed": 270, "days": [{"date": "2026-07-18", "flights": 2, "unindexed": 2}]}),
    );
    let r = run(&none, &config(&none, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.mismatch_date, Some(date("2026-07-18")));
    assert_eq!(r.watermark_lag_days, Some(3));
}

/// The real binary through the proxy, sent `signal` while the proxy holds
/// the first request matching `hold` (see faultproxy.py), which is let go
/// once the run has logged the stop request: the signal lands in the phase
/// that request belongs to however loaded the machine is (a signal sent
/// on a log line raced the run: 200 ms late it hit the next phase).
/// Returns its output.
fn signalled_run(store: &S3Store, proxy: &Proxy, hold: &str, signal: &str) -> Output {
    let held_before = proxy.stats()["held"].as_u64();
    proxy.set(json!({ "hold": hold }));
    let mut cmd = cli_command(store, &["run", "--now", NOW]);
    cmd.env("AWS_ENDPOINT_URL", proxy.endpoint())
        .env("LOG_LEVEL", "info,archive_compaction=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn the binary");
    let pid = child.id().to_string();
    let stderr = child.stderr.take().unwrap();
    let (stop_logged, stop_seen) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            if line.contains("stop requested") {
                let _ = stop_logged.send(());
            }
            log.push_str(&line);
            log.push('\n');
        }
        log
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let held = loop {
        if proxy.stats()["held"].as_u64() > held_before {
            break true;
        }
        if child.try_wait().unwrap().is_some() || std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if held {
        let ok = std::process::Command::new("kill")
            .args([format!("-{signal}"), pid])
            .status()
            .unwrap();
        assert!(ok.success());
        let _ = stop_seen.recv_timeout(Duration::from_secs(60));
    }
    proxy.set(json!({}));
    let out = child.wait_with_output().unwrap();
    let log = reader.join().unwrap();
    assert!(held, "no request matched {hold:?}:\n{log}");
    Output {
        stderr: log.into_bytes(),
        ..out
    }
}

#[tokio::test]
async fn sigterm_and_sigint_stop_a_run_cleanly_at_each_moment_and_the_next_run_is_not_blocked() {
    init_logs();
    let proxy = Proxy::start();
    // (moment, the request the proxy holds while the signal lands, signal)
    let day18 = "/[^/?]+/index/year=2026/month=07/day=18/";
    for (n, (when, hold, signal)) in [
        // Listing the first date.
        (
            "walking dates",
            "^GET /[^/?]+/\\?.*prefix=index/year=2026/month=07/day=18/".to_string(),
            "TERM",
        ),
        // Reading its inputs (listed, then the GETs).
        ("partition listed", format!("^GET {day18}"), "TERM"),
        // Between commit phases: manifest and output written, inputs not
        // yet verified or deleted.
        (
            "manifest and output written",
            format!("^HEAD {day18}compacted-"),
            "INT",
        ),
        // Between dates: the first date done, its watermark not yet written.
        (
            "date done",
            "^PUT /[^/?]+/_compaction_state/watermark".to_string(),
            "TERM",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let store = bucket(&format!("slip-sigterm-{n}")).await;
        let generated = generate(&store, three_days(270 + n as u64));
        let out = signalled_run(&store, &proxy, &hold, signal);
        let log = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{when}: {log}");
        let r = report_of(&out);
        assert_eq!(r["stop_reason"], "interrupted", "{when}: {r}");
        assert_eq!(r["last_run_status"], "Failure");
        let err = r["errors"][0].as_str().unwrap();
        assert!(
            err.contains(&format!("stopped by SIG{signal}")),
            "{when}: {err}"
        );
        assert!(log.contains("stop requested"), "{when}: {log}");
        let mid = dump(&store, "");
        let manifests = |o: &BTreeMap<String, Dumped>| {
            o.keys()
                .filter(|k| k.starts_with("_compaction_state/manifests/"))
                .count()
        };
        let wm = watermark(&mid).map(|w| w["last_compacted_date"].clone());
        let days: Vec<(String, String)> = (r["days"].as_array().unwrap().iter())
            .map(|d| {
                (
                    d["date"].as_str().unwrap().into(),
                    d["action"].as_str().unwrap().into(),
                )
            })
            .collect();
        if when == "date done" {
            // 07-18 went through whole (its watermark written, or left for
            // the next run to pass); 07-19 was not started.
            assert_eq!(days, [("2026-07-18".into(), "compacted".into())], "{when}");
            assert!(
                err.contains("date 2026-07-19 was not started") || wm.is_none(),
                "{err}"
            );
            assert_eq!(manifests(&mid), 0);
        } else {
            // The date under way stopped before its next write: before
            // its manifest (listing, reading: nothing written), or with
            // its manifest and output written, its inputs left for
            // recovery, as at a crash.
            assert_eq!(days, [("2026-07-18".into(), "failed".into())], "{when}");
            assert!(err.contains("a destructive step was not started"), "{err}");
            assert_eq!(wm, None, "{when}");
            let left = usize::from(when == "manifest and output written");
            assert_eq!(manifests(&mid), left, "{when}: manifests left");
        }
        // Stopped: not every date went through.
        assert_ne!(
            watermark(&mid).map(|w| w["last_compacted_date"].clone()),
            Some(json!("2026-07-20")),
            "{when}: the run was not stopped"
        );

        // The next run (as the scheduled one would be) is not blocked and
        // leaves every row exactly once.
        let next = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
        let recovered: Vec<&str> = next.recovered.iter().map(|m| m.action.as_str()).collect();
        let want: &[&str] = if n == 2 { &["completed"] } else { &[] };
        assert_eq!(recovered, want, "{when}: what the next run's recovery did");
        assert_eq!(
            next.last_run_status,
            Status::Success,
            "{when}: {:?}",
            next.errors
        );
        assert_ne!(next.stop_reason, StopReason::LeaseHeld);
        assert_all_compacted(&store, &generated, "2026-07-20", when);
    }
}

#[tokio::test]
async fn a_signal_with_no_run_under_way_or_a_second_one_exits_at_once() {
    init_logs();
    let store = bucket("slip-second-signal").await;
    generate(&store, three_days(275));
    let proxy = Proxy::start();
    proxy.set(json!({"latency_ms": 400}));
    let mut cmd = cli_command(&store, &["run", "--now", NOW]);
    cmd.env("AWS_ENDPOINT_URL", proxy.endpoint())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id().to_string();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            if line.unwrap().contains("walking dates") {
                for _ in 0..2 {
                    std::process::Command::new("kill")
                        .args(["-INT", &pid])
                        .status()
                        .unwrap();
                    std::thread::sleep(Duration::from_millis(100));
                }
                break;
            }
        }
    });
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
}

#[tokio::test]
async fn lambdas_shutdown_signal_stops_an_invocation_like_the_cli() {
    let (store, before) = slip_world("slip-lambda-stop", 276, &[]).await;
    let deps = Deps::from_parts(config(&store, &[]), store.clone(), None, None);
    // What the listener in `main` does on SIGTERM while an invocation runs.
    deps.stop.request("SIGTERM");
    let e = handle(
        &deps,
        lambda_runtime::LambdaEvent::new(json!({"now": NOW}), lambda_runtime::Context::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(e.0.last_run_status, Status::Failure);
    assert_eq!(e.0.stop_reason, StopReason::Interrupted);
    assert_eq!(e.0.resume_date, Some(date("2026-07-18")));
    assert!(e.0.errors[0].contains("stopped by SIGTERM: date 2026-07-18 was not started"));
    assert_eq!(
        dump(&store, ""),
        before,
        "the lease is released, nothing else written"
    );
}
