//! Inputs that are small or plain in the listing but would take far more
//! memory than the function has once decoded, each beside an ordinary day
//! (tests/support/hostile.py writes them with pyarrow): the job binary, run
//! twice under a 512 MiB address-space limit (`ulimit -v`, the deployed
//! function's memory), exits 0 or 2 with a report, leaves the file in place
//! and names it in `skipped_files` (with the limit it broke), and compacts
//! the day's other flights. The limits are decided from the listing and
//! the footer before any decode (src/data/input.rs).

use std::process::{Command, Output};

use crate::common::*;
use archive_compaction::infra::storage::S3Store;
use serde_json::{Value, json};

const NOW: &str = "2026-07-22T04:50:00Z";
const DAY: &str = "2026-07-20";

/// The address space the job may take, in KiB (512 MiB).
const ADDRESS_SPACE_KIB: u64 = 512 * 1024;

/// Writes one hostile object with tests/support/hostile.py; returns its key
/// and size.
fn plant(store: &S3Store, spec: Value) -> (String, u64) {
    let out = support_py(
        "hostile.py",
        &["--endpoint", &endpoint(), "--bucket", store.bucket()],
        Some(&spec.to_string()),
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    (v["key"].as_str().unwrap().to_string(), v["size"].as_u64().unwrap())
}

/// The job binary with `args` against `store`'s bucket, under the address
/// space limit, with `extra` settings.
fn limited(store: &S3Store, args: &[&str], extra: &[(&str, &str)]) -> Output {
    // The job as every CLI test runs it (cli_command: binary, arguments,
    // a clean environment), exec'd by a shell that set the limit first.
    let job = cli_command(store, args);
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""))
        .arg(job.get_program())
        .args(job.get_args())
        .env_clear();
    for (k, v) in job.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.envs(extra.iter().copied());
    cmd.output().expect("run the archive-compaction binary")
}

/// A run under the limit: it must exit 0 or 2 with a report.
fn run_limited(store: &S3Store, extra: &[(&str, &str)]) -> Value {
    let out = limited(store, &["run", "--now", NOW], extra);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 2)),
        "exit {:?} under a {ADDRESS_SPACE_KIB} KiB limit; stderr (tail): {}",
        out.status.code(),
        &stderr[stderr.len().saturating_sub(3000)..]
    );
    report_of(&out)
}

/// The report's skipped file `key`.
fn skipped<'a>(report: &'a Value, key: &str) -> &'a Value {
    (report["skipped_files"].as_array().unwrap().iter())
        .find(|f| f["key"] == key)
        .unwrap_or_else(|| panic!("{key} not in skipped_files: {report:#}"))
}

/// Plants `spec`'s object beside a day of six ordinary flights, runs the
/// job twice under the limit and checks, after each run, what every case
/// must hold: the object named in `skipped_files` and left as it was, the
/// six flights in the day's one compacted file, their per-flight files
/// gone. Returns the object's key and each run's report.
async fn hostile_day(hint: &str, spec: Value) -> (String, [Value; 2]) {
    init_logs();
    let store = bucket(hint).await;
    let generated = generate(&store, json!({"seed": 3, "days": [{"date": DAY, "flights": 6}]}));
    let ordinary = generated.index_keys[DAY].clone();
    let (key, size) = plant(&store, spec);
    let prefix = archive_compaction::data::keys::index_prefix(date(DAY));
    let mut reports = Vec::new();
    for run in 0..2 {
        let report = run_limited(&store, &[]);
        skipped(&report, &key);
        let listed = store.list(&prefix).await.unwrap();
        let left = listed.iter().find(|o| o.key == key);
        assert_eq!(left.map(|o| o.size), Some(size), "run {run}: {key} left in place as it was");
        for k in &ordinary {
            assert!(listed.iter().all(|o| &o.key != k), "run {run}: {k} not compacted: {listed:?}");
        }
        let compacted: Vec<&str> = (listed.iter())
            .filter(|o| o.key.contains("/compacted-"))
            .map(|o| o.key.as_str())
            .collect();
        assert_eq!(compacted.len(), 1, "run {run}: {listed:?}");
        let by_key = |mut rows: Vec<Value>| {
            rows.sort_by_key(|r| r["s3_key"].as_str().unwrap().to_string());
            rows
        };
        let rows = dump(&store, compacted[0])[compacted[0]].rows.clone();
        assert_eq!(
            by_key(rows.unwrap()),
            by_key(generated.rows[DAY].clone()),
            "run {run}: the day's flights"
        );
        reports.push(report);
    }
    (key, reports.try_into().unwrap())
}

/// The limit `key` broke in each report (the same on both runs).
fn limit_of(key: &str, reports: &[Value; 2]) -> Value {
    let limit = skipped(&reports[0], key)["limit"].clone();
    assert_eq!(skipped(&reports[1], key)["limit"], limit, "{reports:#?}");
    limit
}

#[tokio::test]
async fn a_per_flight_file_whose_value_decompresses_to_700_mb_is_named_not_decoded() {
    let (key, reports) = hostile_day("bomb", json!({"kind": "bomb", "date": DAY})).await;
    let limit = limit_of(&key, &reports);
    assert_eq!(limit["limit"], "decoded_bytes", "{limit}");
    assert!(limit["found"].as_u64().unwrap() >= 700_000_000, "{limit}");
    assert_eq!(limit["allowed"], 128 * 1024 * 1024, "{limit}");
}

#[tokio::test]
async fn a_small_file_of_20_million_dictionary_encoded_rows_is_named_not_decoded() {
    let (key, reports) = hostile_day("rows", json!({"kind": "rows", "date": DAY})).await;
    let limit = limit_of(&key, &reports);
    assert_eq!(limit["limit"], "decoded_bytes", "{limit}");
    assert!(limit["found"].as_u64().unwrap() > 20_000_000 * 9 * 24, "{limit}");
}

#[tokio::test]
async fn status_counts_other_day_rows_within_the_limit_too() {
    init_logs();
    let store = bucket("rows-status").await;
    generate(&store, json!({"seed": 3, "days": [{"date": DAY, "flights": 2}]}));
    plant(&store, json!({"kind": "rows", "date": DAY}));
    let out = limited(&store, &["status", "--now", NOW, "--json"], &[]);
    assert!(
        matches!(out.status.code(), Some(0 | 2)),
        "status exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(s["next_days"].as_array().is_some_and(|d| !d.is_empty()), "{s:#}");
}

#[tokio::test]
async fn a_file_with_50000_columns_is_named_not_decoded() {
    let spec = json!({"kind": "columns", "date": DAY});
    let (key, reports) = hostile_day("columns", spec).await;
    let limit = limit_of(&key, &reports);
    assert!(
        limit["limit"] == "columns" || limit["limit"] == "footer_bytes",
        "{limit}: a 50,000-column footer is over 1,000 columns or 4 MiB"
    );
}

#[tokio::test]
async fn a_big_object_that_is_not_parquet_is_named_from_its_tail_alone() {
    let spec = json!({"kind": "not_parquet", "date": DAY});
    let (key, reports) = hostile_day("not-parquet", spec).await;
    assert!(limit_of(&key, &reports).is_null());
    let reason = skipped(&reports[0], &key)["reason"].clone();
    assert!(reason.as_str().unwrap().contains("not a Parquet file"), "{reason}");
    // Never fetched whole: each run reads its last 64 KiB.
    for (run, report) in reports.iter().enumerate() {
        let read: u64 = (report["days"].as_array().unwrap().iter())
            .map(|d| d["bytes_read"].as_u64().unwrap())
            .sum();
        assert!(read < 1024 * 1024, "run {run} read {read} bytes");
    }
}

#[tokio::test]
async fn a_compacted_file_over_a_limit_leaves_its_day_unmerged() {
    init_logs();
    let store = bucket("compacted-over").await;
    let generated = generate(&store, json!({"seed": 3, "days": [{"date": DAY, "flights": 6}]}));
    // Written before the limits: a million rows, 216 MB decoded by the
    // footer's count, over the 128 MiB budget.
    let name = "compacted-019f0000-0000-7000-8000-000000000000.parquet";
    let spec = json!({"kind": "rows", "date": DAY, "rows": 1_000_000, "name": name});
    let (key, size) = plant(&store, spec);
    let prefix = archive_compaction::data::keys::index_prefix(date(DAY));
    let mut before = generated.index_keys[DAY].clone();
    before.push(key.clone());
    before.sort();
    for run in 0..2 {
        let report = run_limited(&store, &[]);
        let entry = skipped(&report, &key);
        assert_eq!(entry["limit"]["limit"], "decoded_bytes", "run {run}: {entry}");
        let listed = store.list(&prefix).await.unwrap();
        let mut keys: Vec<String> = listed.iter().map(|o| o.key.clone()).collect();
        keys.sort();
        assert_eq!(keys, before, "run {run}: the day's stragglers left unmerged, nothing written");
        let left = listed.iter().find(|o| o.key == key).map(|o| o.size);
        assert_eq!(left, Some(size), "run {run}");
    }
}
