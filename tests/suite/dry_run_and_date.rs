//! A dry run writes nothing and says what the real run then does; `--date`
//! and `--from/--to` compact the dates they name and move no watermark.
//! Against a real S3-protocol server (ministack, or moto with
//! `TEST_S3_SERVER=moto`):
//!
//! - a dry run's plan (files, bytes, parity per date) is what the real run
//!   then does; it says what recovery would do with each kind of manifest,
//!   and a range dry run lists the dates with work first;
//! - `--date` before the watermark folds stragglers, after it compacts the
//!   date;
//! - a dry run and a date that fails parity leave the bucket as it was (the
//!   CLI binary);
//! - the Lambda events `{"dry_run": true}` and `{"date": ...}` do what the
//!   flags do;
//! - dates, ranges and dry runs leave `mismatch_runs`, the mismatch topics
//!   and metrics as the walk recorded them.
//!
//! State that only a crash leaves (a live manifest) is made with the commit
//! protocol's own phases, stopped where a crash would stop them.

use std::collections::BTreeSet;

use crate::common::*;
use archive_compaction::app::{Deps, handle};
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::keys::index_prefix;
use archive_compaction::data::metrics::metrics;
use archive_compaction::data::mqtt::statistics;
use archive_compaction::data::report::{Parity, RunReport, Status, StopReason};
use archive_compaction::infra::storage::PutMode;
use archive_compaction::protocol::lease::LeaseGuard;
use chrono::NaiveDate;
use serde_json::{Value, json};

/// Topic names of the statistics a report publishes.
fn published(r: &RunReport) -> Vec<String> {
    statistics(r, "root")
        .into_iter()
        .map(|m| m.topic.trim_start_matches("root/statistic/").to_string())
        .collect()
}

/// Per date: what the plan says (files, bytes, parity), in walk order.
/// What a dry run says of each day and the real run must then do: files
/// read (of which compacted and other multi-row), skipped, bytes, parity.
#[allow(clippy::type_complexity)]
fn plan_view(r: &RunReport) -> Vec<(NaiveDate, [u64; 5], Option<Parity>)> {
    r.days
        .iter()
        .map(|d| {
            let counts = [
                d.files_read,
                d.files_read_compacted,
                d.files_read_multi_row,
                d.files_skipped,
                d.bytes_read,
            ];
            (d.date, counts, d.parity)
        })
        .collect()
}

#[tokio::test]
async fn dry_run_writes_nothing_and_plans_what_the_real_run_then_does() {
    init_logs();
    let store = bucket("op-dry-run").await;
    let generated = generate(
        &store,
        json!({"seed": 81, "days": [
            {"date": "2026-07-18", "flights": 8, "foreign": true},
            {"date": "2026-07-19", "flights": 6},
            {"date": "2026-07-20", "flights": 5, "unindexed": 2}
        ]}),
    );
    // A crash after verifying 07-18's output (2 inputs): the real run's
    // recovery deletes those inputs before the walk; the plan must not count them.
    let (manifest_key, _) =
        crashed_commit(&store, date("2026-07-18"), 0, 2, Crash::AfterVerify).await;
    // An index file that is not Parquet: skipped with a reason, left in place.
    let garbage =
        format!("{}019f7d73-f820-702f-b905-8c81d0944996.parquet", index_prefix(date("2026-07-19")));
    store.put(&garbage, b"PAR1 truncated".to_vec().into(), PutMode::Create, None).await.unwrap();
    // Multi-row index files that are not Parquet either: one on 07-19 (the
    // plan counts it as multi-row, but it is skipped, not read), one on the
    // mismatching 07-20 (the parity gate reads it for its rows, and skips it).
    let garbage_multi: Vec<String> = ["2026-07-19", "2026-07-20"]
        .iter()
        .map(|d| format!("{}part-0.parquet", index_prefix(date(d))))
        .collect();
    for key in &garbage_multi {
        store.put(key, b"PAR1 not parquet".to_vec().into(), PutMode::Create, None).await.unwrap();
    }
    let mut all_garbage = vec![garbage.clone()];
    all_garbage.extend(garbage_multi.iter().cloned());
    all_garbage.sort();
    let skipped_keys = |r: &RunReport| {
        let mut keys: Vec<String> = r.skipped_files.iter().map(|s| s.key.clone()).collect();
        keys.sort();
        keys
    };
    // A dry run needs no lease: it works while another run holds it.
    let lease = LeaseGuard::acquire(&store, "someone-else", std::time::Duration::from_secs(120))
        .await
        .unwrap();
    let cfg = config(&store, &[]);
    let before = dump(&store, "");

    let mut opts = RunOptions::at(at(NOW));
    opts.dry_run = true;
    let dry = run(&store, &cfg, &opts).await;
    assert_eq!(
        dump(&store, ""),
        before,
        "the dry run changed the bucket (_compaction_state/ included)"
    );
    lease.release().await.unwrap();

    assert!(dry.dry_run);
    assert_valid("run-report.schema.json", &serde_json::to_value(&dry).unwrap());
    assert_eq!(dry.last_run_status, Status::Mismatch, "{:?}", dry.errors);
    assert_eq!(dry.stop_reason, StopReason::Mismatch);
    // A dry run records no mismatch: its verdict is the day's.
    assert_eq!(dry.mismatch_date, None);
    assert_eq!(day(&dry, "2026-07-20").mismatch_uuids, generated.missing["2026-07-20"]);
    assert_eq!((dry.files_compacted, dry.days_compacted, dry.rows_written), (0, 0, 0));
    assert_eq!(dry.last_compacted_date, None, "a dry run moves no watermark");
    assert_eq!(recovered(&dry), BTreeSet::from([(manifest_key.clone(), "completed".to_string())]));
    assert!(dry.recovered[0].detail.contains("would delete 2 input(s)"), "{:?}", dry.recovered);
    let d18 = day(&dry, "2026-07-18");
    assert_eq!(d18.action, "planned");
    assert_eq!(d18.parity, Some(Parity::Passed));
    assert_eq!(d18.files_claimed, 2, "the inputs recovery would delete first are not planned");
    assert_eq!(d18.files_read, 8 - 2 + 1, "6 per-flight files + the verified output");
    assert_eq!(d18.foreign_objects, 5);
    assert!(d18.bytes_read > 0);
    let d19 = day(&dry, "2026-07-19");
    assert_eq!(
        (d19.action.as_str(), d19.files_read, d19.files_read_multi_row, d19.files_skipped),
        ("planned", 6, 0, 2),
        "the unreadable multi-row file is skipped, not read"
    );
    assert_eq!(
        skipped_keys(&dry),
        all_garbage,
        "each unreadable file once, the one the parity gate read too"
    );
    let d20 = day(&dry, "2026-07-20");
    assert_eq!((d20.action.as_str(), d20.parity), ("mismatch", Some(Parity::Mismatch)));
    assert_eq!(d20.flights, 5);
    assert_eq!(d20.files_skipped, 1, "the file the parity gate could not read");

    // The real run does what the dry run said.
    let real = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(real.last_run_status, Status::Mismatch, "{:?}", real.errors);
    assert_eq!(plan_view(&real), plan_view(&dry));
    assert_eq!(recovered(&real), recovered(&dry));
    assert_eq!(
        real.mismatch_uuids,
        day(&dry, "2026-07-20").mismatch_uuids,
        "the walk records what the dry run found"
    );
    assert_eq!(real.skipped_files, dry.skipped_files);
    let counted: u64 = real.days.iter().map(|d| d.files_skipped).sum();
    assert_eq!(counted as usize, real.skipped_files.len());
    assert_eq!(
        real.days.iter().map(|d| d.action.as_str()).collect::<Vec<_>>(),
        ["compacted", "compacted", "mismatch"]
    );
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-18", &generated.rows["2026-07-18"]);
    for key in &all_garbage {
        assert!(after.contains_key(key), "{key}: left in place");
    }
}

#[tokio::test]
async fn dry_run_says_what_recovery_would_do_with_each_kind_of_manifest() {
    init_logs();
    let store = bucket("op-dry-recovery").await;
    let generated = generate(
        &store,
        json!({"seed": 82, "days": [
            {"date": "2026-07-18", "flights": 6},
            {"date": "2026-07-19", "flights": 5},
            {"date": "2026-07-20", "flights": 4}
        ]}),
    );
    let (verified, _) = crashed_commit(&store, date("2026-07-18"), 0, 2, Crash::AfterVerify).await;
    let (missing, _) = crashed_commit(&store, date("2026-07-19"), 0, 1, Crash::BeforeOutput).await;
    let (differs, m) = crashed_commit(&store, date("2026-07-19"), 1, 2, Crash::OutputDiffers).await;
    let unreadable =
        "_compaction_state/manifests/2026-07-20/019f0000-0000-7000-8000-000000000000.json";
    store.put(unreadable, Vec::new().into(), PutMode::Create, None).await.unwrap();
    // Quarantined by an earlier run, for a date past the cutoff: reported, not in the way.
    let earlier =
        "_compaction_state/quarantine/2026-07-25/019f0000-0000-7000-8000-000000000002.json";
    store.put(earlier, b"{}".to_vec().into(), PutMode::Create, None).await.unwrap();
    let cfg = config(&store, &[]);
    let before = dump(&store, "");

    let mut opts = RunOptions::at(at(NOW));
    opts.dry_run = true;
    let dry = run(&store, &cfg, &opts).await;
    assert_eq!(dump(&store, ""), before, "the dry run changed the bucket");
    let want = BTreeSet::from([
        (verified, "completed".to_string()),
        (missing, "output_missing".to_string()),
        (differs, "output_mismatch".to_string()),
        (unreadable.to_string(), "quarantined".to_string()),
        (earlier.to_string(), "quarantined_earlier".to_string()),
    ]);
    assert_eq!(recovered(&dry), want);
    for r in dry.recovered.iter().filter(|r| r.key != earlier) {
        assert!(r.detail.contains("would"), "{r:?}");
    }
    assert_valid("run-report.schema.json", &serde_json::to_value(&dry).unwrap());
    assert_eq!(dry.manifests_recovered, 0, "nothing was recovered");
    // As the real run will: 07-18 and 07-19 planned, then the date of the
    // unreadable manifest blocks the walk.
    assert_eq!(dry.last_run_status, Status::Failure);
    assert_eq!(dry.stop_reason, StopReason::BlockedByManifest);
    assert_eq!(
        day(&dry, "2026-07-19").files_claimed,
        1,
        "the output recovery would delete is not folded in"
    );
    assert_eq!(day(&dry, "2026-07-19").files_read, 5);
    let bad_output = m.output.unwrap().key;
    assert!(before.contains_key(&bad_output));

    let real = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(real.last_run_status, Status::Failure);
    assert_eq!(real.stop_reason, StopReason::BlockedByManifest);
    assert_eq!(recovered(&real), want);
    assert_valid("run-report.schema.json", &serde_json::to_value(&real).unwrap());
    assert_eq!(plan_view(&real), plan_view(&dry));
    let after = dump(&store, "");
    for d in ["2026-07-18", "2026-07-19"] {
        assert_compacted(&after, d, &generated.rows[d]);
    }
    assert!(!after.contains_key(&bad_output));
    assert!(after.contains_key(&unreadable.replace("/manifests/", "/quarantine/")));
}

#[tokio::test]
async fn date_before_the_watermark_folds_stragglers_and_leaves_the_watermark() {
    init_logs();
    let store = bucket("op-date-before").await;
    let first = generate(
        &store,
        json!({"seed": 85, "days": [
            {"date": "2026-07-18", "flights": 6},
            {"date": "2026-07-19", "flights": 4}
        ]}),
    );
    let cfg = config(&store, &[]);
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-20")));
    // Late index files (with their flights) land in the compacted 07-18.
    let late =
        generate(&store, json!({"seed": 86, "days": [{"date": "2026-07-18", "flights": 3}]}));
    let wm_key = "_compaction_state/watermark.json";
    let wm_before = dump(&store, wm_key);

    let mut opts = RunOptions::at(at(NOW));
    opts.only_date = Some(date("2026-07-18"));
    let r = run(&store, &cfg, &opts).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.days.len(), 1);
    let d = &r.days[0];
    assert_eq!(d.action, "compacted");
    assert_eq!(d.parity, Some(Parity::Passed));
    assert_eq!(d.files_read, 4, "the compacted file and the 3 late ones");
    assert_eq!(r.last_compacted_date, Some(date("2026-07-20")));
    assert_eq!(r.days_compacted, 0);
    assert_eq!(dump(&store, wm_key), wm_before, "the watermark file was written");
    let mut rows = first.rows["2026-07-18"].clone();
    rows.extend(late.rows["2026-07-18"].iter().cloned());
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-18", &rows);
    assert_compacted(&after, "2026-07-19", &first.rows["2026-07-19"]);
}

#[tokio::test]
async fn date_after_the_watermark_compacts_it_without_moving_the_watermark() {
    init_logs();
    let store = bucket("op-date-after").await;
    let generated = generate(
        &store,
        json!({"seed": 87, "days": [
            {"date": "2026-07-18", "flights": 4},
            {"date": "2026-07-19", "flights": 5},
            {"date": "2026-07-20", "flights": 3},
            {"date": "2026-07-21", "flights": 6}
        ]}),
    );
    let cfg = config(&store, &[]);
    // Cutoff 2026-07-18.
    let r = run(&store, &cfg, &RunOptions::at(at("2026-07-20T04:50:00Z"))).await;
    assert_eq!(r.last_compacted_date, Some(date("2026-07-18")), "{:?}", r.errors);
    let wm_key = "_compaction_state/watermark.json";
    let wm_before = dump(&store, wm_key);

    // watermark + 1, and a date past the cutoff, through the binary.
    for d in ["2026-07-19", "2026-07-21"] {
        let out = cli(&store, &["run", "--date", d, "--now", "2026-07-20T04:50:00Z"]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let r: RunReport = stdout_json(&out);
        assert_eq!(r.days.len(), 1);
        assert_eq!(r.days[0].action, "compacted");
        assert_eq!(r.stop_reason, StopReason::EndOfRange, "--date {d}");
        assert_eq!(r.last_compacted_date, Some(date("2026-07-18")));
        assert_eq!(dump(&store, wm_key), wm_before, "--date {d} wrote the watermark");
        assert_compacted(&dump(&store, "index/"), d, &generated.rows[d]);
    }

    // The normal walk passes over them: one compacted file each, parity from its rows.
    let r = run(&store, &cfg, &RunOptions::at(at("2026-07-23T04:50:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(
        r.days
            .iter()
            .map(|d| (d.date.to_string(), d.action.as_str(), d.parity))
            .collect::<Vec<_>>(),
        vec![
            ("2026-07-19".to_string(), "nothing_to_compact", Some(Parity::Passed)),
            ("2026-07-20".to_string(), "compacted", Some(Parity::Passed)),
            ("2026-07-21".to_string(), "nothing_to_compact", Some(Parity::Passed)),
        ]
    );
    assert_eq!(r.last_compacted_date, Some(date("2026-07-21")));
    let after = dump(&store, "");
    for (d, rows) in &generated.rows {
        assert_compacted(&after, d, rows);
    }
}

#[tokio::test]
async fn cli_dry_run_and_a_date_that_fails_parity_leave_the_bucket_as_it_was() {
    init_logs();
    let store = bucket("op-cli").await;
    let generated = generate(
        &store,
        json!({"seed": 88, "days": [
            {"date": "2026-07-18", "flights": 5},
            {"date": "2026-07-19", "flights": 4, "unindexed": 1}
        ]}),
    );
    let before = dump(&store, "");

    let out = cli(&store, &["run", "--dry-run", "--now", NOW]);
    assert_eq!(out.status.code(), Some(2), "Mismatch exit code");
    let r: RunReport = stdout_json(&out);
    assert!(r.dry_run);
    assert_eq!(
        r.days.iter().map(|d| d.action.as_str()).collect::<Vec<_>>(),
        ["planned", "mismatch"]
    );
    assert_eq!(r.days[0].files_read, 5);
    assert_eq!(r.days[1].mismatch_uuids, generated.missing["2026-07-19"]);
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(logs.contains("date done"), "per-date progress in the logs:\n{logs}");
    assert!(
        !logs.contains("/3 dates") && !logs.contains("\u{1b}[2K"),
        "no progress bar when stderr is not a terminal:\n{logs}"
    );
    assert_eq!(dump(&store, ""), before, "the dry run changed the bucket");

    let out = cli(&store, &["run", "--date", "2026-07-19", "--now", NOW]);
    assert_eq!(out.status.code(), Some(2));
    let r: RunReport = stdout_json(&out);
    assert!(!r.dry_run);
    assert_eq!(r.mismatch_date, None, "--date records no mismatch");
    assert_eq!(r.days[0].mismatch_uuids, generated.missing["2026-07-19"]);
    assert_eq!(
        dump(&store, ""),
        before,
        "--date of a mismatching day writes nothing (not even the mismatch)"
    );
}

#[tokio::test]
async fn lambda_events_dry_run_and_date() {
    init_logs();
    let store = bucket("op-lambda").await;
    let generated = generate(
        &store,
        json!({"seed": 89, "days": [
            {"date": "2026-07-18", "flights": 4},
            {"date": "2026-07-19", "flights": 3}
        ]}),
    );
    let deps = Deps::from_parts(config(&store, &[]), store.clone(), None, None);
    let before = dump(&store, "");
    let event = |payload: Value| {
        lambda_runtime::LambdaEvent::new(payload, lambda_runtime::Context::default())
    };

    let r = handle(&deps, event(json!({"dry_run": true, "now": NOW})))
        .await
        .unwrap_or_else(|e| panic!("{:?}", e.0));
    assert!(r.dry_run);
    assert_eq!(
        r.days.iter().map(|d| (d.action.as_str(), d.files_read)).collect::<Vec<_>>(),
        [("planned", 4), ("planned", 3), ("nothing_to_compact", 0)]
    );
    assert_eq!(dump(&store, ""), before, "the dry-run event changed the bucket");

    let r = handle(&deps, event(json!({"date": "2026-07-19", "now": NOW})))
        .await
        .unwrap_or_else(|e| panic!("{:?}", e.0));
    assert_eq!(r.days.len(), 1);
    assert_eq!(r.days[0].action, "compacted");
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-19", &generated.rows["2026-07-19"]);
    assert_eq!(watermark(&after), None, "the date event does not write the watermark");
    for k in &generated.index_keys["2026-07-18"] {
        assert_eq!(after.get(k), before.get(k));
    }
}

/// A migration's range dry run over months of empty dates lists
/// the one date with work first, not after 100 empty ones it cuts it from.
#[tokio::test]
async fn a_range_dry_run_lists_the_dates_with_work_first() {
    init_logs();
    let store = bucket("op-range-plan").await;
    generate(&store, json!({"seed": 139, "days": [{"date": "2026-07-20", "flights": 3}]}));
    let out = cli(
        &store,
        &["run", "--from", "2026-03-01", "--to", "2026-07-20", "--dry-run", "--now", NOW],
    );
    assert_eq!(out.status.code(), Some(0));
    let r: RunReport = stdout_json(&out);
    assert_eq!(r.days_total, 142);
    assert!(r.days_truncated);
    assert_eq!(
        (r.days[0].date, r.days[0].action.as_str(), r.days[0].files_read),
        (date("2026-07-20"), "planned", 3),
        "{:?}",
        r.days.iter().take(3).collect::<Vec<_>>()
    );
    assert!((r.days[1..].iter()).all(|d| d.action == "nothing_to_compact"), "then the empty ones");
    assert_eq!(r.days[1].date, date("2026-03-01"), "in date order");
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
        ("--from 2026-07-19 --to 2026-07-20 (with a per-flight file to fold)", {
            let mut o = opts_with_event(now, "e5");
            o.repair = Some(range("2026-07-19", "2026-07-20"));
            o
        }),
        ("--dry-run", {
            let mut o = opts_with_event(now, "e6");
            o.dry_run = true;
            o
        }),
    ];
    for (case, opts) in cases {
        let r = run(&store, &cfg, &opts).await;
        assert_eq!(r.last_run_status, Status::Mismatch, "{case}: {:?}", r.errors);
        assert_eq!(r.mismatch_runs, 2, "{case}: the walk's count, not counted");
        assert_eq!(r.mismatch_date, None, "{case}");
        assert_eq!(r.mismatch_uuid_count, 0, "{case}");
        let own: Vec<_> = (r.days.iter()).filter(|d| d.parity == Some(Parity::Mismatch)).collect();
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
        assert_eq!(dump(&store, WATERMARK), wm_before, "{case} wrote the watermark");
    }

    // The CLI: --date on the blocked date, exit 2, nothing recorded.
    let out = cli_command(&store, &["run", "--date", "2026-07-19", "--now", now]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let r = report_of(&out);
    assert_eq!(r["mismatch_runs"], 2);
    assert_eq!(r["mismatch_date"], Value::Null);
    assert_valid("run-report.schema.json", &r);
    assert_eq!(dump(&store, WATERMARK), wm_before);

    // The walk itself still counts.
    let r = run(&store, &cfg, &opts_with_event(now, "e7")).await;
    assert_eq!((r.mismatch_date, r.mismatch_runs), (Some(date("2026-07-19")), 3));
}
