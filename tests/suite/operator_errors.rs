//! An operator's slips are refused or reported, and write and delete nothing
//! where they must not (the bucket is read back with pyarrow before and
//! after): a future invocation time, a watermark ahead of today's cutoff, a
//! watermark without its date, a mistyped event, a mistyped `LOG_LEVEL`, a
//! mistyped setting name (a warning), `audit` and `prune-cache` with a bad
//! setting (no run report), a lock that lasts ten years, a lease that expires
//! under its own run, a date too big for the function's memory.

use std::process::Output;
use std::sync::Arc;

use crate::common::*;
use archive_compaction::app::{Deps, handle};
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::commands::status;
use archive_compaction::data::report::{Status, StopReason};
use archive_compaction::infra::clock::ManualClock;
use archive_compaction::infra::storage::S3Store;
use serde_json::json;

const LOCK: &str = "_compaction_state/lock.json";

/// Options for a run at `now` whose wall clock shows `wall`.
fn at_wall(now: &str, wall: &str) -> RunOptions {
    let mut o = RunOptions::at(at(now));
    o.clock = Arc::new(ManualClock::new(at(wall)));
    o
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
    assert!(err.contains("ahead of the wall clock") && err.contains("--now"), "{err}");
    // Ended before the lease as every run ends: its last log line says so.
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.lines().any(|l| l.contains("run finished") && l.contains("Failure")), "{log}");
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
    assert!(e.0.errors[0].contains("ahead of the wall clock"), "{:?}", e.0.errors);
    assert_eq!(dump(&store, ""), before, "a refused run changed the bucket");

    // Within the skew, across midnight: the cutoff is the wall clock's
    // (07-19), not the invocation time's (07-20).
    let r =
        run(&store, &config(&store, &[]), &at_wall("2026-07-22T00:02:00Z", "2026-07-21T23:58:00Z"))
            .await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.cutoff, Some(date("2026-07-19")));
    let after = dump(&store, "");
    assert_eq!(watermark(&after).unwrap()["last_compacted_date"], "2026-07-19");
    for k in after.keys().filter(|k| k.contains("day=20/")) {
        assert_eq!(after.get(k), before.get(k), "07-20 is past the wall clock's cutoff");
    }
}

#[tokio::test]
async fn a_watermark_ahead_of_todays_cutoff_fails_every_run_and_is_reported() {
    let (store, before) =
        slip_world("slip-ahead", 262, &[(WATERMARK, r#"{"last_compacted_date": "2029-12-30"}"#)])
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
        s.errors.iter().any(|e| e.contains("2029-12-30 is 1259 day(s) ahead of today's cutoff")),
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
        (r#"{"last_compacted_dat": "2026-07-17"}"#, "last_compacted_date"),
        (r#"{"mismatch_runs": 0}"#, "last_compacted_date"),
        (r#"{"last_compacted_date": "2026-07-17", "mismatch_runs": "2"}"#, "mismatch_runs"),
    ] {
        let _ = store.delete(WATERMARK, None).await;
        put_state(&store, WATERMARK, body).await;
        let before = dump(&store, "");
        let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
        assert_eq!(r.last_run_status, Status::Failure, "{body}");
        assert_eq!(r.days_compacted, 0);
        let err = &r.errors[0];
        assert!(err.contains(WATERMARK) && err.contains(&format!("\"{field}\"")), "{body}: {err}");
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
        (json!({"dry-run": true, "now": NOW}), "unknown field \"dry-run\""),
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
        assert!(e.0.errors[0].contains(needle), "{payload}: {:?}", e.0.errors);
    }
    assert_eq!(dump(&store, ""), before, "a refused event changed the bucket");
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
        (&["audit", "--from", "2026-07-18", "--to", "2026-07-20"], ("LAG_DAYS", "two")),
        (&["prune-cache", "--dir", dir], ("LOG_LEVEL", "warning")),
        (&["prune-cache", "--dir", dir, "--dry-run"], ("SWEEP_DAYS", "-1")),
    ];
    for (args, (name, value)) in cases {
        let out = cli_out(&store, args, &[(name, value)]);
        assert_eq!(out.status.code(), Some(1), "{args:?} {name}={value}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&out.stdout));
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

/// A date whose estimated peak is over 90% of the memory the run may use
/// is refused after its listing, before any input is read: a Failure with
/// a report naming the date, the files, the estimate and the MemorySize
/// that would do; nothing read, written or deleted, the lease released.
/// (Before, such a date died on an allocation with no report and the lease
/// held.) 64 MB is below any date's estimate (60 MB + 1.5 KB a file, over
/// 90%); the Lambda's own setting is the default.
#[tokio::test]
async fn a_date_too_big_for_the_memory_is_refused_before_it_is_read() {
    let (store, before) = slip_world("slip-memory", 267, &[]).await;
    for limit in [("MEMORY_LIMIT_MB", "64"), ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "64")] {
        let r = run(&store, &config(&store, &[limit]), &RunOptions::at(at(NOW))).await;
        assert_eq!(r.last_run_status, Status::Failure, "{limit:?}");
        let e = &r.errors[0];
        assert!(
            e.contains("date 2026-07-18 holds 5 index files")
                && e.contains("needs about 61 MB")
                && e.contains("more than 90% of the 64 MB")
                && e.contains("at least 128 MB")
                && e.contains("run --date 2026-07-18"),
            "{limit:?}: {e}"
        );
        assert_eq!(r.files_compacted, 0);
        // The refused date's report gives its flights' count.
        let day = r.days.iter().find(|d| d.date.to_string() == "2026-07-18");
        assert_eq!(day.map(|d| d.flights), Some(5), "{limit:?}: {:?}", r.days);
        assert_eq!(dump(&store, ""), before, "{limit:?}: a refused date changed the bucket");
    }
    // No limit (the CLI outside Lambda), or one the date fits: compacted.
    let r = run(
        &store,
        &config(&store, &[("MEMORY_LIMIT_MB", "0"), ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "64")]),
        &RunOptions::at(at(NOW)),
    )
    .await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
}

/// The binary with only `env` and a `HOME` with no AWS profile.
fn bare_cli(home: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_archive-compaction"))
        .args(args)
        .env_clear()
        .env("HOME", home)
        .envs(env.iter().copied())
        .output()
        .expect("run the archive-compaction binary")
}

/// What the SDK needs of the environment is refused before any request, in
/// one line on stderr naming the variable: no region anywhere (no
/// `AWS_REGION`, no profile: the SDK's instance-metadata fallback is not
/// asked, and its warnings stay out of the log), an endpoint that is not a URL.
#[test]
fn no_region_or_a_bad_endpoint_is_one_line_naming_the_variable() {
    let home = tempfile::tempdir().unwrap();
    let audit: &[&str] = &["audit", "--from", "2026-07-18", "--to", "2026-07-18"];
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 5] = [
        (&["status"], &[], "AWS_REGION"),
        (&["run"], &[], "AWS_REGION"),
        (audit, &[], "AWS_REGION"),
        (
            &["status"],
            &[("AWS_REGION", "eu-west-1"), ("AWS_ENDPOINT_URL", "localhost:4566")],
            "AWS_ENDPOINT_URL",
        ),
        (
            &["run"],
            &[("AWS_REGION", "eu-west-1"), ("AWS_ENDPOINT_URL_S3", "ftp://x")],
            "AWS_ENDPOINT_URL_S3",
        ),
    ];
    for (args, env, named) in cases {
        let env = [env, &[("S3_BUCKET", "archive")]].concat();
        let out = bare_cli(home.path(), args, &env);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
        assert!(lines[0].contains(&format!("setting {named}: ")), "{args:?}: {stderr}");
        assert!(lines[0].chars().count() <= 300, "{args:?}: {} chars", lines[0].len());
    }
    // A refused dry run's report says what was asked: a dry run, of which bucket.
    let out = bare_cli(home.path(), &["run", "--dry-run"], &[("S3_BUCKET", "archive")]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    assert_eq!(
        (report["dry_run"].as_bool(), report["bucket"].as_str()),
        (Some(true), Some("archive"))
    );
    assert_eq!(report["last_run_status"], "Failure", "{report}");
    // A profile's region is a region.
    std::fs::create_dir(home.path().join(".aws")).unwrap();
    std::fs::write(home.path().join(".aws/config"), "[default]\nregion = eu-west-1\n").unwrap();
    let out = bare_cli(
        home.path(),
        &["run", "--dry-run"],
        &[("S3_BUCKET", "archive"), ("AWS_ENDPOINT_URL", "http://127.0.0.1:9")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("AWS_REGION") && stderr.contains("run starting"), "{stderr}");
}
