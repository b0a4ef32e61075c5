//! `status`, the run report and the straggler sweep say and do what is true
//! against a real S3-protocol server (ministack, or moto with
//! `TEST_S3_SERVER=moto`), with pyarrow-written inputs read back by pyarrow:
//!
//! - with `START_DATE` set, neither the walk nor the sweep reads, merges or
//!   deletes a date before it (whatever the watermark says);
//! - `status` re-checks a recorded mismatch with the run's own parity gate,
//!   so a zero-row per-flight file still shows as failing;
//! - `--date`, `--from/--to` and the dry run leave `mismatch_runs`, the
//!   mismatch topics and metrics as the walk recorded them;
//! - a quarantined manifest on a compacted date fails the run, naming it,
//!   and the sweep logs that it skipped the date;
//! - `status` always prints a status (`--json`: valid against
//!   `specs/status.schema.json`), errors first;
//! - report wording: stop reasons before the walk, usage errors, the
//!   `--date` deadline, `updated_at`, one-line S3 errors, stragglers.

mod common;

use archive_compaction::metrics::metrics;
use archive_compaction::mqtt::statistics;
use archive_compaction::report::{Parity, RunReport, Status, StopReason};
use archive_compaction::run::{RunOptions, run};
use archive_compaction::status::{self, MismatchCause, StatusOptions, StatusReport};
use archive_compaction::storage::{PutMode, S3Store};
use chrono::Utc;
use common::*;
use serde_json::{Value, json};

const WATERMARK: &str = "_compaction_state/watermark.json";

fn status_opts(now: &str) -> StatusOptions {
    StatusOptions {
        now: at(now),
        as_of: Utc::now(),
        days: 5,
    }
}

fn opts_with_event(now: &str, event: &str) -> RunOptions {
    let mut o = RunOptions::at(at(now));
    o.event_id = Some(event.into());
    o
}

/// Topic names of the statistics a report publishes.
fn published(r: &RunReport) -> Vec<String> {
    statistics(r, "root")
        .into_iter()
        .map(|m| m.topic.trim_start_matches("root/statistic/").to_string())
        .collect()
}

#[tokio::test]
async fn start_date_keeps_the_walk_and_the_sweep_off_earlier_dates() {
    init_logs();
    let store = bucket("tr-start-date").await;
    let first = generate(
        &store,
        json!({"seed": 2701, "days": [
            {"date": "2026-07-14", "flights": 3},
            {"date": "2026-07-15", "flights": 2},
            {"date": "2026-07-16", "flights": 4},
            {"date": "2026-07-17", "flights": 2}
        ]}),
    );
    let cfg = config(
        &store,
        &[("START_DATE", "2026-07-16"), ("SWEEP_DAYS", "14")],
    );
    let early = |s: &S3Store| {
        let mut d = dump(s, "index/year=2026/month=07/day=14/");
        d.extend(dump(s, "index/year=2026/month=07/day=15/"));
        d
    };
    let untouched = early(&store);
    // Cutoff 2026-07-17.
    let now = "2026-07-19T04:50:00Z";
    let r = run(&store, &cfg, &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-17")));
    // Late files on a date before START_DATE and on one after it.
    let late_early = archive_py(
        "put-row",
        &store,
        json!({"seed": 2702, "date": "2026-07-14"}),
    );
    let late = archive_py(
        "put-row",
        &store,
        json!({"seed": 2703, "date": "2026-07-16"}),
    );
    let untouched_with_late = early(&store);
    assert_ne!(untouched_with_late, untouched);

    let r = run(&store, &cfg, &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let swept: Vec<String> = (r.days.iter())
        .filter(|d| d.action == "swept")
        .map(|d| d.date.to_string())
        .collect();
    assert_eq!(
        swept,
        ["2026-07-16"],
        "the sweep stays at or after START_DATE"
    );
    assert_eq!(r.stragglers_folded, 1, "{:?}", r.days);
    assert_eq!(
        early(&store),
        untouched_with_late,
        "a date before START_DATE was read, merged or deleted"
    );
    let after = dump(&store, "index/");
    let mut rows = first.rows["2026-07-16"].clone();
    rows.push(late["row"].clone());
    assert_compacted(&after, "2026-07-16", &rows);
    assert!(after.contains_key(late_early["key"].as_str().unwrap()));

    // A watermark before START_DATE (the Python job's): the walk starts at
    // START_DATE, not the day after the watermark.
    let store = bucket("tr-start-date-wm").await;
    let g = generate(
        &store,
        json!({"seed": 2704, "days": [
            {"date": "2026-07-14", "flights": 3},
            {"date": "2026-07-16", "flights": 2}
        ]}),
    );
    store
        .put(
            WATERMARK,
            br#"{"last_compacted_date": "2026-07-13"}"#.to_vec().into(),
            PutMode::Create,
            None,
        )
        .await
        .unwrap();
    let before = dump(&store, "index/year=2026/month=07/day=14/");
    let s = status::gather(&store, &cfg, &status_opts(now))
        .await
        .unwrap();
    assert_eq!(s.next_date, Some(date("2026-07-16")), "status agrees");
    let r = run(&store, &cfg, &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(
        r.days.first().map(|d| d.date),
        Some(date("2026-07-16")),
        "{:?}",
        r.days
    );
    assert_eq!(dump(&store, "index/year=2026/month=07/day=14/"), before);
    assert_compacted(&dump(&store, "index/"), "2026-07-16", &g.rows["2026-07-16"]);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-17")));
}

#[tokio::test]
async fn status_predicts_the_zero_row_mismatch_the_run_keeps_stopping_on() {
    init_logs();
    let (store, v) = variants_bucket(
        "tr-status-zero",
        2705,
        "2026-07-20",
        &["zero_rows", "default", "default"],
    )
    .await;
    let zero_uuid = flight_uuid(v["zero_rows"]["key"].as_str().unwrap());
    let cfg = config(&store, &[]);
    let now = "2026-07-22T04:50:00Z";
    for event in ["e1", "e2"] {
        let r = run(&store, &cfg, &opts_with_event(now, event)).await;
        assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
        assert_eq!(r.mismatch_uuids, [zero_uuid]);
    }
    let s = status::gather(&store, &cfg, &status_opts(now))
        .await
        .unwrap();
    assert_valid("status.schema.json", &serde_json::to_value(&s).unwrap());
    let m = s.mismatch.as_ref().expect("the recorded mismatch");
    assert_eq!(m.date, date("2026-07-20"));
    assert_eq!(m.mismatch_runs, 2);
    assert_eq!(
        m.missing_uuids,
        [zero_uuid],
        "status must say it still fails"
    );
    assert_eq!(m.missing_uuid_count, 1);
    assert_eq!(m.cause, Some(MismatchCause::PerFlightFileWithoutOwnRow));
    let text = status::format_human(&s);
    assert!(
        text.contains("1 of 3 flights whose per-flight file holds no row of theirs"),
        "{text}"
    );
    assert!(!text.contains("the next run passes it"), "{text}");
    // And the next run does stop there again.
    let r = run(&store, &cfg, &opts_with_event(now, "e3")).await;
    assert_eq!(r.last_run_status, Status::Mismatch);
    assert_eq!(r.mismatch_runs, 3);
}

#[tokio::test]
async fn date_ranges_and_dry_runs_leave_the_recorded_mismatch_alone() {
    init_logs();
    let store = bucket("tr-date-mismatch").await;
    let g = generate(
        &store,
        json!({"seed": 2706, "days": [
            {"date": "2026-07-18", "flights": 3},
            {"date": "2026-07-19", "flights": 4, "unindexed": 1},
            {"date": "2026-07-20", "flights": 3, "unindexed": 2}
        ]}),
    );
    let cfg = config(&store, &[]);
    let now = "2026-07-22T04:50:00Z";
    for event in ["e1", "e2"] {
        let r = run(&store, &cfg, &opts_with_event(now, event)).await;
        assert_eq!(r.mismatch_date, Some(date("2026-07-19")));
    }
    let wm_before = dump(&store, WATERMARK);
    assert_eq!(watermark(&wm_before).unwrap()["mismatch_runs"], 2);

    // --date on the blocked date, on another mismatching date, a range over
    // both, and a dry run: each says Mismatch in its own days[], and leaves
    // the walk's mismatch (file, report fields, topics, metrics) as it was.
    let cases: Vec<(&str, RunOptions)> = vec![
        ("--date 2026-07-19", {
            let mut o = opts_with_event(now, "e3");
            o.only_date = Some(date("2026-07-19"));
            o
        }),
        ("--date 2026-07-20", {
            let mut o = opts_with_event(now, "e4");
            o.only_date = Some(date("2026-07-20"));
            o
        }),
        (
            "--from 2026-07-19 --to 2026-07-20 (with a per-flight file to fold)",
            {
                let mut o = opts_with_event(now, "e5");
                o.repair = Some((date("2026-07-19"), date("2026-07-20")));
                o
            },
        ),
        ("--dry-run", {
            let mut o = opts_with_event(now, "e6");
            o.dry_run = true;
            o
        }),
    ];
    for (case, opts) in cases {
        let r = run(&store, &cfg, &opts).await;
        assert_eq!(
            r.last_run_status,
            Status::Mismatch,
            "{case}: {:?}",
            r.errors
        );
        assert_eq!(r.mismatch_runs, 2, "{case}: the walk's count, not counted");
        assert_eq!(r.mismatch_date, None, "{case}");
        assert_eq!(r.mismatch_uuid_count, 0, "{case}");
        let own: Vec<_> = (r.days.iter())
            .filter(|d| d.parity == Some(Parity::Mismatch))
            .collect();
        assert!(!own.is_empty(), "{case}: its own verdict in days[]");
        for d in own {
            assert_eq!(d.mismatch_uuids, g.missing[&d.date.to_string()], "{case}");
        }
        let topics = published(&r);
        for t in ["mismatch_date", "mismatch_uuids", "mismatch_uuid_count"] {
            assert!(!topics.iter().any(|x| x == t), "{case}: {t} published");
        }
        assert!(topics.iter().any(|x| x == "mismatch_runs"));
        let m = metrics(&r);
        assert!(!m.iter().any(|x| x.name == "MismatchUuidCount"), "{case}");
        let runs = m.iter().find(|x| x.name == "MismatchRuns").unwrap();
        assert_eq!(runs.value, 2.0, "{case}");
        assert_eq!(
            dump(&store, WATERMARK),
            wm_before,
            "{case} wrote the watermark"
        );
    }

    // The CLI: --date on the blocked date, exit 2, nothing recorded.
    let out = cli_command(&store, &["run", "--date", "2026-07-19", "--now", now])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let r = report_of(&out);
    assert_eq!(r["mismatch_runs"], 2);
    assert_eq!(r["mismatch_date"], Value::Null);
    assert_valid("run-report.schema.json", &r);
    assert_eq!(dump(&store, WATERMARK), wm_before);

    // The walk itself still counts.
    let r = run(&store, &cfg, &opts_with_event(now, "e7")).await;
    assert_eq!(
        (r.mismatch_date, r.mismatch_runs),
        (Some(date("2026-07-19")), 3)
    );
}

#[tokio::test]
async fn a_quarantined_manifest_on_a_compacted_date_fails_every_run_and_is_named() {
    init_logs();
    let store = bucket("tr-quarantined").await;
    generate(
        &store,
        json!({"seed": 2707, "days": [
            {"date": "2026-07-17", "flights": 3},
            {"date": "2026-07-18", "flights": 3},
            {"date": "2026-07-19", "flights": 2}
        ]}),
    );
    let cfg = config(&store, &[]);
    let now = "2026-07-21T04:50:00Z";
    let r = run(&store, &cfg, &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-19")));
    let quarantined =
        "_compaction_state/quarantine/2026-07-18/019f0000-0000-7000-8000-000000002707.json";
    store
        .put(quarantined, b"{}".to_vec().into(), PutMode::Create, None)
        .await
        .unwrap();
    let late = archive_py(
        "put-row",
        &store,
        json!({"seed": 2708, "date": "2026-07-18"}),
    );
    let late_17 = archive_py(
        "put-row",
        &store,
        json!({"seed": 2709, "date": "2026-07-17"}),
    );
    let day18 = dump(&store, "index/year=2026/month=07/day=18/");

    for dry_run in [true, false] {
        let mut opts = RunOptions::at(at(now));
        opts.dry_run = dry_run;
        let r = run(&store, &cfg, &opts).await;
        assert_eq!(r.last_run_status, Status::Failure, "dry {dry_run}: {r:?}");
        assert!(
            r.errors
                .iter()
                .any(|e| e.starts_with("2026-07-18 is blocked") && e.contains(quarantined)),
            "dry {dry_run}: {:?}",
            r.errors
        );
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        let failure = metrics(&r)
            .into_iter()
            .find(|m| m.name == "RunFailure")
            .unwrap();
        assert_eq!(failure.value, 1.0, "the alarmed metric");
    }
    // The sweep went on elsewhere (07-17 folded) but left 07-18 alone.
    let after = dump(&store, "index/");
    assert!(!after.contains_key(late_17["key"].as_str().unwrap()));
    assert_eq!(dump(&store, "index/year=2026/month=07/day=18/"), day18);
    assert!(after.contains_key(late["key"].as_str().unwrap()));

    // The CLI's log says why the sweep skipped it; status names the date.
    let out = cli_command(&store, &["run", "--now", now])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(
        logs.contains("straggler sweep skips the date") && logs.contains("2026-07-18"),
        "{logs}"
    );
    let s = status::gather(&store, &cfg, &status_opts(now))
        .await
        .unwrap();
    assert_eq!(s.quarantined[0].date, Some(date("2026-07-18")));

    // Resolved by the operator: the next run folds the late file.
    store.delete(quarantined, None).await.unwrap();
    let r = run(&store, &cfg, &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert!(!dump(&store, "index/").contains_key(late["key"].as_str().unwrap()));
}

#[tokio::test]
async fn status_always_prints_a_status_with_the_errors_first() {
    init_logs();
    let store = bucket("tr-status-errors").await;
    generate(
        &store,
        json!({"seed": 2710, "days": [{"date": "2026-07-18", "flights": 2}]}),
    );
    // S3_BUCKET unset: a status, not a run report.
    let out = cli_command(&store, &["status", "--json"])
        .env_remove("S3_BUCKET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
    });
    assert_valid("status.schema.json", &v);
    assert!(v.get("last_run_status").is_none(), "a run report: {v}");
    let s: StatusReport = serde_json::from_value(v).unwrap();
    assert!(s.errors[0].contains("S3_BUCKET"), "{:?}", s.errors);
    assert!(s.state_unreadable && s.bucket_unreadable);
    assert_eq!(s.lease.state, status::LeaseState::Unknown, "never \"free\"");
    let out = cli_command(&store, &["status"])
        .env_remove("S3_BUCKET")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("errors\n  setting S3_BUCKET"), "{text}");

    // An S3 error (a bucket that does not exist): a status too, one-line error.
    let out = cli_command(&store, &["status", "--json"])
        .env("S3_BUCKET", "tr-no-such-bucket-2710")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid("status.schema.json", &v);
    let e = v["errors"][0].as_str().unwrap();
    assert!(!e.contains('\n') && e.len() < 400, "{e}");

    // An invalid watermark: errors first, the watermark unknown, never "none".
    store
        .put(
            WATERMARK,
            b"{not json".to_vec().into(),
            PutMode::Create,
            None,
        )
        .await
        .unwrap();
    let out = cli_command(&store, &["status", "--now", "2026-07-22T04:50:00Z"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("errors\n  state file s3://"), "{text}");
    assert!(text.contains("watermark    unknown"), "{text}");
    assert!(!text.contains("nothing compacted yet"), "{text}");
    assert!(!text.contains("none due"), "{text}");
    let out = cli_command(&store, &["status", "--json"]).output().unwrap();
    assert_valid(
        "status.schema.json",
        &serde_json::from_slice(&out.stdout).unwrap(),
    );
}

#[tokio::test]
async fn reports_name_the_true_reason_and_the_true_fact() {
    init_logs();
    let store = bucket("tr-wording").await;
    let g = generate(
        &store,
        json!({"seed": 2711, "days": [
            {"date": "2026-07-18", "flights": 3},
            {"date": "2026-07-19", "flights": 2}
        ]}),
    );
    let now = "2026-07-22T04:50:00Z";
    let before = dump(&store, "");

    // A reversed --from/--to: a usage error, exit 1, no report.
    let out = cli_command(
        &store,
        &["run", "--from", "2026-07-19", "--to", "2026-07-18"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("from 2026-07-19 is after to"));

    // A bad setting: the run report says error, not reached_cutoff.
    let out = cli_command(&store, &["run"])
        .env("LAG_DAYS", "x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(report_of(&out)["stop_reason"], "error");

    // --date near the deadline: the date is not started, and the log does
    // not promise that the next run continues.
    let out = cli_command(
        &store,
        &["run", "--date", "2026-07-18", "--max-duration", "0s"],
    )
    .output()
    .unwrap();
    let r = report_of(&out);
    assert_eq!(r["stop_reason"], "deadline");
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(!logs.contains("the next run continues"), "{logs}");
    assert!(logs.contains("run it again"), "{logs}");
    // Said before the run, with what to give instead.
    assert!(
        logs.contains(
            "--max-duration 0s is not more than DEADLINE_MARGIN_SECONDS (60 s): no date will start"
        ),
        "{logs}"
    );
    assert_eq!(dump(&store, ""), before);

    // updated_at is when watermark.json was written, not the invocation time.
    let t0 = Utc::now();
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let wm = watermark(&dump(&store, WATERMARK)).unwrap();
    let updated = at(wm["updated_at"].as_str().unwrap());
    assert!(
        updated >= t0 - chrono::Duration::seconds(5),
        "{updated} vs {t0}"
    );
    assert_ne!(updated, at(now));

    // The Python job's two compacted files on a compacted date: the sweep
    // folds them into one; both are retired, one is a straggler.
    assert_eq!(g.index_keys["2026-07-18"].len(), 3);
    let compacted = dump(&store, "index/year=2026/month=07/day=18/");
    let (first, _) = compacted.iter().next().unwrap();
    let second = "index/year=2026/month=07/day=18/compacted-python-2.parquet";
    archive_py(
        "multi-row",
        &store,
        json!({"key": second, "from": [first], "set": {"ident": "STITCHED"}}),
    );
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.stragglers_folded, 1, "{:?}", r.days);
    assert_eq!(r.files_compacted, 2, "both compacted files retired");

    // An S3 error is one line naming the operation, the key and the code.
    let missing = S3Store::new(sdk_client(&endpoint()), "tr-no-such-bucket-2711");
    let r = run(&missing, &config(&missing, &[]), &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Failure);
    assert_eq!(r.stop_reason, StopReason::Error);
    let e = &r.errors[0];
    assert!(!e.contains('\n') && e.len() < 400, "{e}");
    assert!(
        e.starts_with("S3 ") && e.contains("tr-no-such-bucket-2711"),
        "{e}"
    );
    assert!(e.contains("NoSuchBucket"), "{e}");

    // A server that is not there: a dispatch error, one line, no SDK dump.
    let port = free_port();
    let gone = S3Store::new(
        sdk_client(&format!("http://127.0.0.1:{port}")),
        store.bucket().to_string(),
    );
    let r = run(&gone, &config(&gone, &[]), &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Failure);
    let e = &r.errors[0];
    assert!(!e.contains('\n') && e.len() < 400, "{e}");
    assert!(e.contains(": dispatch: "), "{e}");
    assert!(
        !e.contains("extensions") && !e.contains("ConnectorError {"),
        "{e}"
    );
}
