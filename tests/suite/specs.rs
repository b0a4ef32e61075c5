//! `specs/` against the real thing: state files and run reports produced by
//! real runs on a real S3-protocol server are validated against the JSON
//! Schemas in `specs/` (with the `jsonschema` package: draft 2020-12, formats
//! checked), and `specs/reporting.md` lists exactly the MQTT topics and
//! CloudWatch metrics the code publishes.
//!
//! A manifest only exists in the middle of a commit: the test that catches
//! one crashes a run there through a failpoint (the suite is built with
//! them; nextest runs each test in a process of its own).

use std::process::Command;

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::report::{RunReport, Status, StopReason};
use archive_compaction::infra::storage::PutMode;
use archive_compaction::protocol::lease::LeaseGuard;
use serde_json::{Value, json};

/// The runs of this file one at a time (failpoints are process-wide).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NOW: &str = "2026-07-22T04:50:00Z";

fn report_json(r: &RunReport) -> Value {
    serde_json::to_value(r).unwrap()
}

#[test]
fn every_schema_in_specs_is_a_valid_json_schema() {
    let mut n = 0;
    for e in std::fs::read_dir(root().join("specs")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".schema.json") {
            assert_all_valid(&name, &[]);
            n += 1;
        }
    }
    assert!(n >= 4, "expected the watermark, lock, manifest and run-report schemas");
}

/// The first backticked word of each table row in the section of
/// `specs/reporting.md` headed `heading`, with the row's cells.
fn table_rows(heading: &str) -> Vec<(String, Vec<String>)> {
    let md = std::fs::read_to_string(root().join("specs/reporting.md")).unwrap();
    let section = md
        .split("\n## ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("no section {heading:?} in specs/reporting.md"));
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<String> =
                l.trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect();
            let name = cells[0].split('`').nth(1).unwrap().to_string();
            (name, cells)
        })
        .collect()
}

#[test]
fn reporting_md_lists_exactly_the_published_topics_and_metrics() {
    let topics: Vec<String> = table_rows("MQTT").into_iter().map(|(n, _)| n).collect();
    assert_eq!(topics, archive_compaction::data::mqtt::STATISTICS.to_vec());

    // A report with every optional figure set, so every metric is there.
    let report = RunReport { watermark_lag_days: Some(0), ..Default::default() };
    let code: Vec<(String, String)> = archive_compaction::data::metrics::metrics(&report)
        .iter()
        .map(|m| (m.name.to_string(), m.unit.as_str().to_string()))
        .collect();
    let doc: Vec<(String, String)> = table_rows("CloudWatch")
        .into_iter()
        .map(|(n, cells)| (n, cells[1].split_whitespace().next().unwrap().to_string()))
        .collect();
    let sorted = |mut v: Vec<(String, String)>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(doc),
        sorted(code),
        "specs/reporting.md's metric table (name, unit) differs from src/data/metrics.rs"
    );
}

/// Real runs, one of each outcome, and the state files they leave.
#[tokio::test]
async fn reports_and_state_files_of_real_runs_match_their_schemas() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("specs-runs").await;
    generate(
        &store,
        json!({"seed": 21, "days": [
            {"date": "2026-07-18", "flights": 6, "foreign": true},
            {"date": "2026-07-19", "flights": 5},
            {"date": "2026-07-20", "flights": 4, "unindexed": 2}
        ]}),
    );
    let cfg = config(&store, &[]);
    let mut reports = Vec::new();

    // Dry run: planned days, nothing written.
    let mut opts = RunOptions::at(at(NOW));
    opts.dry_run = true;
    let r = run(&store, &cfg, &opts).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    reports.push(("dry-run", report_json(&r)));

    // Compacts 07-18 and 07-19, stops at 07-20 (two flights unindexed).
    let mut opts = RunOptions::at(at(NOW));
    opts.event_id = Some("event-1".into());
    let r = run(&store, &cfg, &opts).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.days_compacted, 2);
    assert_eq!(r.mismatch_uuids.len(), 2);
    assert!(r.days.iter().any(|d| d.output_key.is_some()));
    reports.push(("mismatch", report_json(&r)));

    // One date, whatever the watermark: a Success.
    let mut opts = RunOptions::at(at(NOW));
    opts.only_date = Some(date("2026-07-19"));
    let r = run(&store, &cfg, &opts).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    reports.push(("only-date", report_json(&r)));

    // The watermark as the mismatch left it, with its bookkeeping fields.
    let state = dump(&store, "_compaction_state/");
    let wm = watermark(&state).expect("watermark written");
    assert_eq!(wm["mismatch_date"], "2026-07-20");
    let mut state_docs = vec![("watermark", wm)];

    // lock.json as the lease writes it; a run meanwhile does nothing.
    let lease = LeaseGuard::acquire(&store, "specs-holder", std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let lock = dump(&store, "_compaction_state/lock.json")["_compaction_state/lock.json"]
        .json
        .clone()
        .expect("lock.json is JSON");
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.stop_reason, StopReason::LeaseHeld);
    reports.push(("lease-held", report_json(&r)));
    lease.release().await.unwrap();
    assert_all_valid("lock.schema.json", &[("lock", lock)]);

    // The Python job's watermark (no bookkeeping fields) is valid too.
    let wm_key = "_compaction_state/watermark.json";
    let etag = dump(&store, wm_key)[wm_key].etag.clone();
    let python = br#"{"last_compacted_date": "2026-07-19"}"#.to_vec();
    store.put(wm_key, python.into(), PutMode::Update(etag), None).await.unwrap();
    state_docs.push(("python-watermark", watermark(&dump(&store, wm_key)).unwrap()));
    assert_all_valid("watermark.schema.json", &state_docs);

    // Failure: an unreadable watermark.
    let etag = dump(&store, wm_key)[wm_key].etag.clone();
    store.put(wm_key, b"{oops".to_vec().into(), PutMode::Update(etag), None).await.unwrap();
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Failure);
    reports.push(("failure", report_json(&r)));

    // The CLI's JSON on stdout, from the real binary (Success, fresh bucket).
    let fresh = bucket("specs-cli").await;
    generate(&fresh, json!({"seed": 22, "days": [{"date": "2026-07-20", "flights": 3}]}));
    let out = output_ok(cli_command(&fresh, &["run", "--now", NOW]).env("LOG_LEVEL", "warn"));
    let cli: Value =
        serde_json::from_slice(&out.stdout).expect("the CLI prints the report as JSON");
    assert_eq!(cli["last_run_status"], "Success");
    reports.push(("cli", cli));

    assert_all_valid("run-report.schema.json", &reports);
}

/// The schema check itself catches a report that breaks the contract.
#[test]
fn reporting_md_lists_exactly_the_discovery_configs() {
    let doc = table_rows("Home Assistant discovery");
    let configs = archive_compaction::data::mqtt::discovery("root", "b");
    assert_eq!(doc.len(), configs.len());
    for ((name, cells), m) in doc.iter().zip(&configs) {
        assert_eq!(
            m.topic,
            format!("homeassistant/sensor/SkyFollower_archive_compaction_{name}/config")
        );
        let c: Value = serde_json::from_str(&m.payload).unwrap();
        assert_eq!(c["name"], cells[1].as_str(), "{name}: name");
        assert_eq!(c["icon"], cells[2].trim_matches('`'), "{name}: icon");
        let classes = [&c["state_class"], &c["device_class"]]
            .iter()
            .filter_map(|v| v.as_str())
            .map(|v| format!("`{v}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let classes = if classes.is_empty() { "none".to_string() } else { classes };
        assert_eq!(classes, cells[4], "{name}: state_class / device_class");
        if let Some(t) = c["value_template"].as_str() {
            assert!(
                cells[3].replace("\\|", "|").contains(&format!("`{t}`"))
                    || cells[3] == "its own, same template",
                "{name}: value_template {t} not in {:?}",
                cells[3]
            );
        } else {
            assert_eq!(cells[3], "its own", "{name}");
        }
    }
}

#[test]
fn the_schema_check_rejects_a_broken_report() {
    let mut r = report_json(&RunReport::default());
    assert_all_valid("run-report.schema.json", &[("default", r.clone())]);
    r["last_run_status"] = json!("Done");
    r["mismatch_date"] = json!("22/07/2026");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.json");
    std::fs::write(&p, r.to_string()).unwrap();
    let out = Command::new(python())
        .arg(root().join("tests/support/check_schema.py"))
        .arg(root().join("specs/run-report.schema.json"))
        .arg(&p)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(text.contains("last_run_status") && text.contains("mismatch_date"), "{text}");
}

/// A run crashed between writing its output and deleting its inputs leaves
/// the lease and a manifest: both match their schemas, and so does the
/// report of the run that recovers them.
#[tokio::test]
async fn lock_and_manifest_left_by_a_crash_match_their_schemas() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("specs-crash").await;
    generate(
        &store,
        json!({"seed": 23, "days": [
            {"date": "2026-07-19", "flights": 5},
            {"date": "2026-07-20", "flights": 4}
        ]}),
    );
    let cfg = config(&store, &[]);
    {
        let scenario = fail::FailScenario::setup();
        fail::cfg("commit::after-output-put", "panic").unwrap();
        let (s, c) = (store.clone(), cfg.clone());
        let crashed =
            tokio::spawn(async move { run(&s, &c, &RunOptions::at(at(NOW))).await }).await;
        assert!(crashed.is_err(), "the failpoint did not fire");
        scenario.teardown();
    }
    let state = dump(&store, "_compaction_state/");
    let lock = state["_compaction_state/lock.json"].json.clone().expect("lease left by the crash");
    let manifests: Vec<(&str, Value)> = state
        .iter()
        .filter(|(k, _)| k.starts_with("_compaction_state/manifests/"))
        .map(|(k, d)| (k.as_str(), d.json.clone().expect("manifest is JSON")))
        .collect();
    assert_eq!(manifests.len(), 1, "{:?}", state.keys().collect::<Vec<_>>());
    assert_all_valid("lock.schema.json", &[("lock", lock)]);
    assert_all_valid("manifest.schema.json", &manifests);

    let r = run(&store, &cfg, &options_after_leases(1)).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.recovered.len(), 1);
    assert_all_valid("run-report.schema.json", &[("recovering", report_json(&r))]);
}
