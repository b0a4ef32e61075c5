//! Every index file of a partition is an input: multi-row files under any
//! name (a legacy migration's `legacy-migration.parquet`, exports, the Python
//! job's `compacted-*.parquet`) count for parity by their rows, are merged
//! and deduplicated (a per-flight file beats any multi-row file; between two
//! multi-row files the later LastModified wins) and retired through the
//! manifest; a range repair (`--from`/`--to`) folds days the Python job left
//! with duplicates without moving the watermark.
//!
//! Inputs are written by pyarrow as the writer, the migration and the Python
//! job would (tests/support/archive.py); outputs are read back with pyarrow.
//! Runs on both S3 servers (`TEST_S3_SERVER=ministack|moto`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::report::{Parity, RunReport, Status, StopReason};
use archive_compaction::infra::storage::{PutMode, S3Store};
use serde_json::{Value, json};

/// Uploads a field case's `bucket/` folder, key by key.
async fn upload_case(store: &S3Store, case: &str) -> Vec<String> {
    let root = root().join("tests/fixtures/cases").join(case).join("bucket");
    let mut keys = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let key = p
                .strip_prefix(&root)
                .unwrap()
                .components()
                .map(|c| c.as_os_str().to_str().unwrap())
                .collect::<Vec<_>>()
                .join("/");
            let body = std::fs::read(Path::new(&p)).unwrap();
            store.put(&key, body.into(), PutMode::Create, None).await.unwrap();
            keys.push(key);
        }
    }
    keys.sort();
    keys
}

fn rows_of(objects: &BTreeMap<String, Dumped>, key: &str) -> Vec<Value> {
    objects[key].rows.clone().unwrap_or_else(|| panic!("{key}: no rows"))
}

fn uuid_of(row: &Value) -> String {
    let k = row["s3_key"].as_str().unwrap();
    k.trim_end_matches(".json.gz")
        .rsplit('_')
        .next()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string()
}

/// Rows with the values of `newer` replacing those of the same flight.
fn overlay(base: &[Value], newer: &[Value]) -> Vec<Value> {
    let mut by: BTreeMap<String, Value> = base.iter().map(|r| (uuid_of(r), r.clone())).collect();
    for r in newer {
        by.insert(uuid_of(r), r.clone());
    }
    by.into_values().collect()
}

fn day<'a>(r: &'a RunReport, d: &str) -> &'a archive_compaction::data::report::DayReport {
    r.days
        .iter()
        .find(|x| x.date == date(d))
        .unwrap_or_else(|| panic!("{d} not in the report: {:?}", r.days))
}

/// S3 LastModified has one-second precision: wait so the next write is
/// strictly later than the previous one.
fn next_second() {
    std::thread::sleep(Duration::from_millis(1100));
}

#[tokio::test]
async fn field_case_legacy_migration_day_compacts_on_a_fresh_deployment() {
    init_logs();
    let store = bucket("case-legacy").await;
    upload_case(&store, "legacy-migration-day").await;
    let legacy = "index/year=2022/month=07/day=11/legacy-migration.parquet";
    let before = dump(&store, "");
    let want = rows_of(&before, legacy);
    assert_eq!(want.len(), 4);
    // No watermark, no START_DATE: the walk starts at the earliest partition.
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at("2022-07-14T04:50:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.mismatch_uuid_count, 0, "{:?}", r.mismatch_uuids);
    assert_eq!(r.last_compacted_date, Some(date("2022-07-12")));
    let d = day(&r, "2022-07-11");
    assert_eq!(d.action, "compacted");
    assert_eq!((d.files_read, d.files_read_multi_row), (1, 1));
    let after = dump(&store, "");
    assert!(!after.contains_key(legacy), "the multi-row file is retired");
    assert_compacted(&after, "2022-07-11", &want);
    assert!(
        !after.keys().any(|k| k.starts_with("_compaction_state/manifests/")),
        "no manifest left"
    );
    for k in before.keys().filter(|k| k.starts_with("flights/")) {
        assert_eq!(after[k], before[k], "{k} untouched");
    }
}

#[tokio::test]
async fn a_fresh_deployment_compacts_a_legacy_migration_day_and_a_flight_also_in_its_own_file_once()
{
    init_logs();
    let store = bucket("legacy-fresh").await;
    let g = generate(
        &store,
        json!({"seed": 120, "days": [
            {"date": "2026-07-19", "flights": 60,
             "legacy": {"name": "legacy-migration.parquet", "also_per_flight": 3}},
            {"date": "2026-07-20", "flights": 20, "foreign": true},
        ]}),
    );
    // Through a proxy that counts GETs per key: the multi-row file is read
    // once, for parity and the merge alike.
    let proxy = Proxy::start();
    let via = proxy.store(&store);
    let r = run(&via, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-20")));
    let gets = proxy.stats()["gets_by_path"].clone();
    let legacy =
        format!("/{}/index/year=2026/month=07/day=19/legacy-migration.parquet", store.bucket());
    assert_eq!(gets[&legacy], 1, "GETs by path: {gets}");
    let d19 = day(&r, "2026-07-19");
    assert_eq!(d19.files_read_multi_row, 1);
    assert_eq!(d19.files_read, 4, "the multi-row file and 3 per-flight files");
    assert_eq!(d19.duplicates_removed, 3, "a per-flight file beats the multi-row row");
    let after = dump(&store, "");
    for (d, rows) in &g.rows {
        assert_compacted(&after, d, rows);
    }
    // Foreign objects: untouched and named in the report.
    let d20 = day(&r, "2026-07-20");
    assert_eq!(d20.foreign_objects as usize, g.foreign.len());
    let mut named = d20.foreign_keys.clone();
    named.sort();
    let mut foreign = g.foreign.clone();
    foreign.sort();
    assert_eq!(named, foreign);
    for f in &g.foreign {
        assert!(after.contains_key(f), "foreign {f} deleted");
    }
    // A second run changes nothing.
    let again = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(again.last_run_status, Status::Success, "{:?}", again.errors);
    assert_eq!(dump(&store, "index/"), dump_index(&after));
}

fn dump_index(all: &BTreeMap<String, Dumped>) -> BTreeMap<String, Dumped> {
    all.iter()
        .filter(|(k, _)| k.starts_with("index/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

const NOW: &str = "2026-07-22T04:50:00Z";
const ODD: &str = "legacy export+2022 (1) ~\u{e9}.parquet";

#[tokio::test]
async fn one_flight_in_three_places_ends_once_at_its_newest_version() {
    init_logs();
    let store = bucket("three-places").await;
    let g = generate(&store, json!({"seed": 121, "days": [{"date": "2026-07-20", "flights": 5}]}));
    let keys = &g.index_keys["2026-07-20"];
    let p = "index/year=2026/month=07/day=20/";
    // An export under an odd name holds flights 2 and 3 (older values)...
    let export = archive_py(
        "multi-row",
        &store,
        json!({"key": format!("{p}{ODD}"), "from": [&keys[1], &keys[2]], "set": {"ident": "EXPORT"}}),
    );
    next_second();
    // ...the Python job's compacted file, written later, holds all five (it
    // sorts before the export in key order, so only LastModified makes it
    // win between the two)...
    let py = archive_py(
        "multi-row",
        &store,
        json!({"key": format!("{p}compacted-20260721T030000.parquet"), "from": keys, "set": {"ident": "PYJOB"},
               "delete": &keys[1..]}),
    );
    assert_eq!(export["rows"].as_array().unwrap().len(), 2);
    // ...and flight 1 still has its per-flight file (the newest version).
    let want = overlay(py["rows"].as_array().unwrap(), &g.rows["2026-07-20"][..1]);
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let d = day(&r, "2026-07-20");
    assert_eq!(d.parity, Some(archive_compaction::data::report::Parity::Passed));
    assert_eq!((d.files_read, d.files_read_compacted, d.files_read_multi_row), (3, 1, 1));
    assert_eq!(d.duplicates_removed, 3);
    let after = dump(&store, "index/");
    assert!(!after.contains_key(&format!("{p}{ODD}")));
    assert_compacted(&after, "2026-07-20", &want);
    let idents: Vec<&str> = want.iter().map(|r| r["ident"].as_str().unwrap()).collect();
    assert_eq!(idents.iter().filter(|i| **i == "PYJOB").count(), 4, "{idents:?}");
}

#[tokio::test]
async fn an_unreadable_multi_row_file_is_named_and_the_flights_it_would_cover_are_missing() {
    init_logs();
    let store = bucket("legacy-corrupt").await;
    let g = generate(
        &store,
        json!({"seed": 122, "days": [
            {"date": "2026-07-20", "flights": 6, "legacy": {"name": "legacy-migration.parquet", "also_per_flight": 2}},
        ]}),
    );
    let legacy = "index/year=2026/month=07/day=20/legacy-migration.parquet";
    store
        .client()
        .put_object()
        .bucket(store.bucket())
        .key(legacy)
        .body(b"PAR1 this is not parquet PAR1".to_vec().into())
        .send()
        .await
        .unwrap();
    let before = dump(&store, "index/");
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.mismatch_date, Some(date("2026-07-20")));
    assert_eq!(r.mismatch_uuid_count, 4, "the 4 flights only the file indexed");
    let covered: Vec<String> = g.rows["2026-07-20"][..2].iter().map(uuid_of).collect();
    for u in &covered {
        assert!(!r.mismatch_uuids.contains(u), "{u} has its own file");
    }
    let s = r
        .skipped_files
        .iter()
        .find(|s| s.key == legacy)
        .unwrap_or_else(|| panic!("{legacy} not named: {:?}", r.skipped_files));
    assert!(s.reason.contains("unreadable"), "{}", s.reason);
    assert_eq!(dump(&store, "index/"), before, "nothing written or deleted");
}

/// Three days the Python job compacted, and one it left with a flight
/// without an index row. The watermark is the Python job's.
async fn python_job_days(store: &S3Store) -> (BTreeMap<String, Vec<Value>>, String) {
    let g = generate(
        store,
        json!({"seed": 123, "days": [
            {"date": "2026-07-10", "flights": 6, "unindexed": 1},
            {"date": "2026-07-11", "flights": 8},
            {"date": "2026-07-12", "flights": 8},
            {"date": "2026-07-13", "flights": 8},
        ]}),
    );
    let mut want = BTreeMap::new();
    let pre = |d: &str| format!("index/year=2026/month=07/day={}/", &d[8..]);
    // 07-11: the Python job's compacted file, then a late index file for a
    // flight it already holds (the writer stitched it afterwards).
    let d = "2026-07-11";
    let py = archive_py(
        "multi-row",
        store,
        json!({"key": format!("{}compacted-py-a.parquet", pre(d)), "from": g.index_keys[d], "move": true, "shuffle": true}),
    );
    let flight =
        g.flights[d].iter().find(|f| f.contains(&uuid_of(&py["rows"][0]))).unwrap().clone();
    let late = archive_py(
        "put-row",
        store,
        json!({"seed": 9, "date": d, "flight_key": flight, "set": {"ident": "LATE"}}),
    );
    want.insert(d.to_string(), overlay(py["rows"].as_array().unwrap(), &[late["row"].clone()]));
    // 07-12: a stitched rewrite beside its compacted file: a second, later
    // compacted file holding two flights again with new values (named to
    // sort first, so only LastModified makes it win).
    let d = "2026-07-12";
    let keys = &g.index_keys[d];
    let py = archive_py(
        "multi-row",
        store,
        json!({"key": format!("{}compacted-py-a.parquet", pre(d)), "from": keys}),
    );
    next_second();
    let stitched = archive_py(
        "multi-row",
        store,
        json!({"key": format!("{}compacted-py-0.parquet", pre(d)), "from": &keys[..2],
               "set": {"ident": "STITCHED"}, "delete": keys}),
    );
    want.insert(
        d.to_string(),
        overlay(py["rows"].as_array().unwrap(), stitched["rows"].as_array().unwrap()),
    );
    // 07-13: one compacted file and nothing else: nothing to do, no GET.
    let d = "2026-07-13";
    let py = archive_py(
        "multi-row",
        store,
        json!({"key": format!("{}compacted-py-a.parquet", pre(d)), "from": g.index_keys[d], "move": true}),
    );
    want.insert(d.to_string(), py["rows"].as_array().unwrap().clone());
    let wm = r#"{"last_compacted_date": "2026-07-13"}"#.to_string();
    store
        .put(
            "_compaction_state/watermark.json",
            wm.clone().into_bytes().into(),
            PutMode::Create,
            None,
        )
        .await
        .unwrap();
    (want, wm)
}

fn repair(from: &str, to: &str) -> RunOptions {
    let mut o = RunOptions::at(at(NOW));
    o.repair = Some(range(from, to));
    o
}

#[tokio::test]
async fn a_range_repairs_the_python_jobs_duplicates_and_leaves_the_watermark() {
    init_logs();
    let store = bucket("repair-range").await;
    let (want, wm) = python_job_days(&store).await;
    let cfg = config(&store, &[]);
    let before = dump(&store, "");
    let untouched = |after: &BTreeMap<String, Dumped>, d: &str| {
        let p = format!("index/year=2026/month=07/day={}/", &d[8..]);
        let pick = |m: &BTreeMap<String, Dumped>| -> Vec<(String, String)> {
            m.iter()
                .filter(|(k, _)| k.starts_with(&p))
                .map(|(k, v)| (k.clone(), v.etag.clone()))
                .collect()
        };
        assert_eq!(pick(after), pick(&before), "{d} must be untouched");
    };

    // The dry run shows the plan and changes nothing.
    let mut dry = repair("2026-07-10", "2026-07-13");
    dry.dry_run = true;
    let r = run(&store, &cfg, &dry).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(day(&r, "2026-07-11").action, "planned");
    assert_eq!(day(&r, "2026-07-12").action, "planned");
    assert_eq!(day(&r, "2026-07-13").action, "nothing_to_compact");
    assert_eq!(dump(&store, ""), before, "a dry run writes nothing");

    let r = run(&store, &cfg, &repair("2026-07-10", "2026-07-13")).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::EndOfRange);
    // Reported in the day's own fields; the walk's mismatch is not touched.
    assert_eq!(r.mismatch_date, None, "reported...");
    assert_eq!(r.mismatch_uuid_count, 0);
    assert_eq!(day(&r, "2026-07-10").parity, Some(Parity::Mismatch));
    assert_eq!(day(&r, "2026-07-10").mismatch_uuids.len(), 1);
    assert_eq!(day(&r, "2026-07-11").action, "compacted", "...and the range goes on");
    assert_eq!(day(&r, "2026-07-11").duplicates_removed, 1);
    assert_eq!(day(&r, "2026-07-12").action, "compacted");
    assert_eq!(day(&r, "2026-07-12").duplicates_removed, 2);
    let d13 = day(&r, "2026-07-13");
    assert_eq!(d13.action, "nothing_to_compact");
    assert_eq!((d13.files_read, d13.bytes_read), (0, 0), "no GET");
    assert_eq!(r.days_compacted, 0, "the watermark is not moved");
    let after = dump(&store, "");
    for d in ["2026-07-11", "2026-07-12", "2026-07-13"] {
        assert_compacted(&after, d, &want[d]);
    }
    untouched(&after, "2026-07-10");
    untouched(&after, "2026-07-13");
    assert_eq!(
        watermark(&after),
        Some(serde_json::from_str::<Value>(&wm).unwrap()),
        "the watermark file is not written"
    );
    assert!(!after.keys().any(|k| k.contains("/manifests/")), "no manifest left");

    // The same range again changes nothing and reads nothing.
    let again = run(&store, &cfg, &repair("2026-07-10", "2026-07-13")).await;
    assert_eq!(again.last_run_status, Status::Mismatch, "{:?}", again.errors);
    for d in ["2026-07-11", "2026-07-12", "2026-07-13"] {
        let x = day(&again, d);
        assert_eq!(x.action, "nothing_to_compact", "{d}");
        assert_eq!(x.bytes_read, 0, "{d}");
    }
    let mut now = dump(&store, "");
    let mut was = after.clone();
    now.remove("_compaction_state/lock.json");
    was.remove("_compaction_state/lock.json");
    assert_eq!(now, was);
}

#[tokio::test]
async fn a_range_stopped_at_the_deadline_says_where_and_the_same_event_continues() {
    init_logs();
    let store = bucket("repair-deadline").await;
    let (want, _) = python_job_days(&store).await;
    let cfg = config(&store, &[]);
    let before = dump(&store, "index/");
    let mut o = repair("2026-07-11", "2026-07-13");
    o.deadline = Some(Instant::now());
    let r = run(&store, &cfg, &o).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::Deadline);
    assert_eq!(r.resume_date, Some(date("2026-07-11")));
    assert_eq!(dump(&store, "index/"), before);
    let r = run(&store, &cfg, &repair("2026-07-11", "2026-07-13")).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::EndOfRange);
    assert_eq!(r.resume_date, None);
    let after = dump(&store, "index/");
    for d in ["2026-07-11", "2026-07-12", "2026-07-13"] {
        assert_compacted(&after, d, &want[d]);
    }
}

/// A reversed range cannot reach a run (`DateRange` is checked where it is
/// parsed): the Lambda event with one is a clear Failure that touches
/// nothing.
#[tokio::test]
async fn a_bad_range_is_a_clear_failure_and_touches_nothing() {
    init_logs();
    let store = bucket("repair-bad").await;
    generate(&store, json!({"seed": 124, "days": [{"date": "2026-07-20", "flights": 3}]}));
    let before = dump(&store, "");
    let deps =
        archive_compaction::app::Deps::from_parts(config(&store, &[]), store.clone(), None, None);
    let e = archive_compaction::app::handle(
        &deps,
        lambda_runtime::LambdaEvent::new(
            json!({"from": "2026-07-20", "to": "2026-07-19"}),
            lambda_runtime::Context::default(),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(e.0.last_run_status, Status::Failure);
    assert!(e.0.errors.iter().any(|e| e.contains("after to 2026-07-19")), "{:?}", e.0.errors);
    let mut now = dump(&store, "");
    now.remove("_compaction_state/lock.json");
    assert_eq!(now, before);
}
