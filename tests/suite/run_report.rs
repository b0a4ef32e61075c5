//! The run report names the true reason and the true fact: stop reasons
//! before the walk, usage errors, the `--date` deadline, `updated_at`,
//! one-line S3 errors, stragglers. A quarantined manifest on a compacted date
//! fails every run and is named, and the sweep logs that it skipped the date.

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::commands::status;
use archive_compaction::data::metrics::metrics;
use archive_compaction::data::report::{Status, StopReason};
use archive_compaction::infra::storage::{PutMode, S3Store};
use chrono::Utc;
use serde_json::json;

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
    let out = cli_command(&store, &["run", "--from", "2026-07-19", "--to", "2026-07-18"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("from 2026-07-19 is after to"));

    // A bad setting: the run report says error, not reached_cutoff.
    let out = cli_command(&store, &["run"]).env("LAG_DAYS", "x").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(report_of(&out)["stop_reason"], "error");

    // A --max-duration within DEADLINE_MARGIN_SECONDS would start no date
    // and end Success having done nothing: refused as a bad setting, with
    // what to give instead, before anything is read.
    let out = cli_command(&store, &["run", "--date", "2026-07-18", "--max-duration", "0s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let r = report_of(&out);
    assert_eq!(r["stop_reason"], "error");
    assert_eq!(r["last_run_status"], "Failure");
    let refusal = r["errors"][0].as_str().unwrap();
    assert!(
        refusal.contains(
            "setting --max-duration: 0s is not more than DEADLINE_MARGIN_SECONDS (60 s): no date would start"
        ),
        "{refusal}"
    );
    let out = cli_command(&store, &["run", "--max-duration", "30"])
        .env("DEADLINE_MARGIN_SECONDS", "8")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let refusal = report_of(&out)["errors"][0].as_str().unwrap().to_string();
    assert!(
        refusal.contains("setting DEADLINE_MARGIN_SECONDS: must be at least 9, got 8")
            && refusal.contains("the S3 cut-off before the deadline"),
        "{refusal}"
    );
    assert_eq!(dump(&store, ""), before);

    // --date near the deadline (a margin of 9 s, 9.001 s given: the lease
    // and recovery's S3 calls take more than the millisecond between): the
    // date is not started, and the log does not promise that the next run
    // continues.
    let out = cli_command(&store, &["run", "--date", "2026-07-18", "--max-duration", "9.001"])
        .env("DEADLINE_MARGIN_SECONDS", "9")
        .output()
        .unwrap();
    let r = report_of(&out);
    assert_eq!(r["stop_reason"], "deadline", "{r:#}");
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(!logs.contains("the next run continues"), "{logs}");
    assert!(logs.contains("run it again"), "{logs}");
    assert_eq!(dump(&store, ""), before);

    // updated_at is when watermark.json was written, not the invocation time.
    let t0 = Utc::now();
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let wm = watermark(&dump(&store, WATERMARK)).unwrap();
    let updated = at(wm["updated_at"].as_str().unwrap());
    assert!(updated >= t0 - chrono::Duration::seconds(5), "{updated} vs {t0}");
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
    assert!(e.starts_with("S3 ") && e.contains("tr-no-such-bucket-2711"), "{e}");
    assert!(e.contains("NoSuchBucket"), "{e}");

    // A server that is not there: a dispatch error, one line, no SDK dump.
    let port = free_port();
    let gone =
        S3Store::new(sdk_client(&format!("http://127.0.0.1:{port}")), store.bucket().to_string());
    let r = run(&gone, &config(&gone, &[]), &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Failure);
    let e = &r.errors[0];
    assert!(!e.contains('\n') && e.len() < 400, "{e}");
    assert!(e.contains(": dispatch: "), "{e}");
    assert!(!e.contains("extensions") && !e.contains("ConnectorError {"), "{e}");
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
    store.put(quarantined, b"{}".to_vec().into(), PutMode::Create, None).await.unwrap();
    let late = archive_py("put-row", &store, json!({"seed": 2708, "date": "2026-07-18"}));
    let late_17 = archive_py("put-row", &store, json!({"seed": 2709, "date": "2026-07-17"}));
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
        let failure = metrics(&r).into_iter().find(|m| m.name == "RunFailure").unwrap();
        assert_eq!(failure.value, 1.0, "the alarmed metric");
    }
    // The sweep went on elsewhere (07-17 folded) but left 07-18 alone.
    let after = dump(&store, "index/");
    assert!(!after.contains_key(late_17["key"].as_str().unwrap()));
    assert_eq!(dump(&store, "index/year=2026/month=07/day=18/"), day18);
    assert!(after.contains_key(late["key"].as_str().unwrap()));

    // The CLI's log says why the sweep skipped it; status names the date.
    let out = cli_command(&store, &["run", "--now", now]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(
        logs.contains("straggler sweep skips the date") && logs.contains("2026-07-18"),
        "{logs}"
    );
    let s = status::gather(&store, &cfg, &status_opts(now)).await.unwrap();
    assert_eq!(s.quarantined[0].date, Some(date("2026-07-18")));

    // Resolved by the operator: the next run folds the late file.
    store.delete(quarantined, None).await.unwrap();
    let r = run(&store, &cfg, &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert!(!dump(&store, "index/").contains_key(late["key"].as_str().unwrap()));
}
