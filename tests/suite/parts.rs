//! A date over `PART_FILES` is committed in parts (ministack; the S3
//! protocol is the store conformance suite's): every flight's row in one
//! compacted file exactly once, per-flight files and the compacted file
//! holding an older row of the same flight merged in one part, a crash or
//! the deadline between parts finished by the next run without starting
//! over. Read back with pyarrow.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::report::{DayAction, PlannedPartReport, Status, StopReason};
use archive_compaction::infra::storage::{PutMode, S3Store};
use serde_json::{Value, json};

const NOW: &str = "2026-07-20T04:50:00Z";
const DAY: &str = "2026-07-18";

/// Failpoints are process-wide: these tests run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The date's compacted files and every row in them, by flight (its
/// `s3_key`), as pyarrow reads them.
fn rows_by_flight(store: &S3Store) -> (Vec<String>, BTreeMap<String, Vec<Value>>) {
    let prefix = archive_compaction::data::keys::index_prefix(date(DAY));
    let after = dump(store, &prefix);
    let mut files = Vec::new();
    let mut rows: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (key, d) in &after {
        let name = &key[prefix.len()..];
        assert!(
            name.starts_with("compacted-") || !name.ends_with(".parquet"),
            "{key}: an index input left"
        );
        if name.starts_with("compacted-") {
            assert_eq!(d.error, None, "{key}");
            files.push(key.clone());
            for r in d.rows.clone().unwrap() {
                let flight = r["s3_key"].as_str().unwrap().to_string();
                rows.entry(flight).or_default().push(r);
            }
        }
    }
    (files, rows)
}

/// Asserts every generated row of the date is in its compacted files
/// exactly once, with its values.
fn assert_each_once(store: &S3Store, generated: &Generated) -> Vec<String> {
    let (files, rows) = rows_by_flight(store);
    let want = &generated.rows[DAY];
    assert_eq!(rows.len(), want.len(), "flights in the compacted files");
    for w in want {
        let got = &rows[w["s3_key"].as_str().unwrap()];
        assert_eq!(got, &vec![w.clone()], "{}", w["s3_key"]);
    }
    files
}

#[tokio::test]
async fn a_day_over_part_files_is_committed_in_parts_and_a_straggler_joins_its_flights_part() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-day").await;
    let mut generated =
        generate(&store, json!({"seed": 41, "days": [{"date": DAY, "flights": 12}]}));
    // The file of the flight that will come again as a straggler.
    let key = generated.index_keys[DAY][7].clone();
    let body = store.get(&key).await.unwrap().body;
    let cfg = config(&store, &[("PART_FILES", "5")]);
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::ReachedCutoff);
    assert_eq!(r.last_compacted_date, Some(date(DAY)));
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!((day.action, day.parts, day.files_read), (DayAction::Compacted, 3, 12));
    assert_eq!((day.rows_written, day.files_left), (12, 0));
    let files = assert_each_once(&store, &generated);
    assert_eq!(files.len(), 3, "parts of 5, 5 and 2 files: {files:?}");
    assert_valid("run-report.schema.json", &serde_json::to_value(&r).unwrap());

    // A straggler: one flight's per-flight file written again (a newer
    // row) after its date was compacted. Its older row is in one of the
    // three compacted files; the sweep must merge the two in one part, or
    // Athena would return the flight twice.
    store.put(&key, body, PutMode::Create, None).await.unwrap();
    let new_rows = rewrite(&store, &key, "REWRITTEN");
    let flight = new_rows[0]["s3_key"].as_str().unwrap().to_string();
    for row in generated.rows.get_mut(DAY).unwrap() {
        if row["s3_key"] == flight {
            *row = new_rows[0].clone();
        }
    }
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let swept = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!(swept.action, DayAction::Swept, "{swept:?}");
    assert_eq!(
        (swept.parts, swept.files_read, swept.files_read_compacted),
        (1, 2, 1),
        "the straggler with the one compacted file holding its flight"
    );
    let after = assert_each_once(&store, &generated);
    assert_eq!(after.len(), 3, "{after:?}");
}

/// A report's planned parts of the date's first pass.
fn first_pass_plan(r: &archive_compaction::data::report::RunReport) -> Vec<PlannedPartReport> {
    let day = r.days.iter().find(|d| d.date == date(DAY)).expect("the date's report");
    assert!(day.plan.parts.iter().all(|p| p.estimate_mb > 0 && p.cut.is_none()), "{day:?}");
    day.plan.parts.iter().filter(|p| p.pass == 1).cloned().collect()
}

/// The run commits exactly the parts the dry run printed, part for part and input for input (the
/// same files, bytes, first and last key and `keys_sha256`, in order), over several day shapes:
/// per-flight files in several parts; a multi-row file holding rows of flights that have
/// per-flight files too (one flight in several files); a window past the listing limit (the first
/// pass's parts); and compacted files with a straggler (the sweep).
#[tokio::test]
async fn the_run_commits_the_parts_the_dry_run_planned_over_several_day_shapes() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let shapes = [
        ("plan-parts", json!({"date": DAY, "flights": 12}), "5"),
        ("plan-legacy", json!({"date": DAY, "flights": 12, "legacy": {"also_per_flight": 3}}), "4"),
        ("plan-window", json!({"date": DAY, "flights": 24}), "2"),
    ];
    for (name, day, part_files) in shapes {
        let store = bucket(name).await;
        let mut generated = generate(&store, json!({"seed": 47, "days": [day]}));
        let cfg = config(&store, &[("PART_FILES", part_files)]);
        let key = generated.index_keys[DAY][0].clone();
        let body = store.get(&key).await.unwrap().body;
        dry_run_then_run(&store, &cfg, name).await;
        assert_each_once(&store, &generated);
        if name == "plan-legacy" {
            continue;
        }
        // A straggler: the sweep folds it with the compacted file holding its flight's older row.
        store.put(&key, body, PutMode::Create, None).await.unwrap();
        let new_rows = rewrite(&store, &key, "REWRITTEN");
        let flight = new_rows[0]["s3_key"].as_str().unwrap().to_string();
        for row in generated.rows.get_mut(DAY).unwrap() {
            if row["s3_key"] == flight {
                *row = new_rows[0].clone();
            }
        }
        dry_run_then_run(&store, &cfg, name).await;
        assert_each_once(&store, &generated);
    }
}

/// A dry run, then a run that must commit the dry run's first-pass parts, each part's inputs
/// found again in the date's listing by its first and last key and its digest.
async fn dry_run_then_run(
    store: &S3Store,
    cfg: &archive_compaction::data::config::Config,
    name: &str,
) {
    let prefix = archive_compaction::data::keys::index_prefix(date(DAY));
    let listed: Vec<(String, u64)> =
        (store.list(&prefix).await.unwrap().into_iter()).map(|m| (m.key, m.size)).collect();
    let dry = run(store, cfg, &RunOptions { dry_run: true, ..RunOptions::at(at(NOW)) }).await;
    assert_valid("run-report.schema.json", &serde_json::to_value(&dry).unwrap());
    let planned = first_pass_plan(&dry);
    assert!(!planned.is_empty(), "{name}: {dry:?}");
    assert!(planned.iter().all(|p| !p.committed), "a dry run commits nothing: {planned:?}");
    let mut taken = std::collections::HashSet::new();
    for part in &planned {
        for key in inputs_of(part, &listed) {
            assert!(taken.insert(key.clone()), "{name}: {key} in two parts");
        }
    }
    let r = run(store, cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{name}: {:?}", r.errors);
    let committed: Vec<_> =
        planned.into_iter().map(|p| PlannedPartReport { committed: true, ..p }).collect();
    assert_eq!(first_pass_plan(&r), committed, "{name}: the run's parts are the plan's");
    assert_valid("run-report.schema.json", &serde_json::to_value(&r).unwrap());
}

/// The keys of `listed` that are `part`'s inputs: the one set of its size, from its first to its
/// last key, whose SHA-256 (sorted keys joined by `\n`, lowercase hex) is its `keys_sha256`;
/// their sizes add up to its bytes.
fn inputs_of(part: &PlannedPartReport, listed: &[(String, u64)]) -> Vec<String> {
    use sha2::Digest;
    let (first, last) = (&part.first_key, &part.last_key);
    let ends: Vec<&(String, u64)> =
        listed.iter().filter(|(k, _)| k == first || k == last).collect();
    let inner: Vec<&(String, u64)> = listed.iter().filter(|(k, _)| k > first && k < last).collect();
    let mut found = Vec::new();
    for chosen in subsets(inner.len(), (part.files as usize).saturating_sub(ends.len())) {
        let mut keys: Vec<&(String, u64)> = chosen.iter().map(|&i| inner[i]).collect();
        keys.extend(&ends);
        keys.sort();
        let joined = keys.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join("\n");
        if hex::encode(sha2::Sha256::digest(joined)) == part.keys_sha256 {
            found.push(keys);
        }
    }
    assert_eq!(found.len(), 1, "no set of listed keys has the digest of {part:?}");
    let bytes: u64 = found[0].iter().map(|(_, size)| size).sum();
    assert_eq!((found[0].len() as u64, bytes), (part.files, part.bytes), "{part:?}");
    found[0].iter().map(|(k, _)| k.clone()).collect()
}

/// Every `k` of `0..n`, in index order.
fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
    match (n, k) {
        (_, 0) => vec![vec![]],
        (n, k) if n < k => vec![],
        _ => {
            let mut out = subsets(n - 1, k);
            out.extend(subsets(n - 1, k - 1).into_iter().map(|mut s| {
                s.push(n - 1);
                s
            }));
            out
        }
    }
}

#[tokio::test]
async fn a_crash_between_parts_is_finished_by_the_next_run_from_the_parts_left() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-crash").await;
    let generated = generate(&store, json!({"seed": 42, "days": [{"date": DAY, "flights": 9}]}));
    let cfg = config(&store, &[("PART_FILES", "4")]);
    let scenario = fail::FailScenario::setup();
    fail::cfg("run::after-part", "1*return->off").unwrap();
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    scenario.teardown();
    assert_eq!(r.last_run_status, Status::Failure, "{r:?}");
    let (files, rows) = rows_by_flight_or_inputs(&store);
    assert_eq!((files, rows), (1, 4), "one part committed before the crash");

    let r = run(&store, &cfg, &options_after_leases(1)).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!((day.parts, day.files_read), (2, 5), "only what the crash left: {day:?}");
    assert_eq!(assert_each_once(&store, &generated).len(), 3);
    // The lease clock's run is at 2026-07-22: its cutoff is 07-20.
    assert_eq!(r.last_compacted_date, Some(date("2026-07-20")));
}

/// A date of more per-flight files than one listing window (`PART_FILES`
/// × `sizing::WINDOW_PARTS`: 8 here) is compacted a window a pass, each pass
/// listing the date again; a crash in the second window is finished by the
/// next run, again in windows, every flight once.
#[tokio::test]
async fn a_day_past_the_listing_window_is_compacted_a_window_a_pass_across_a_crash() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-window").await;
    let generated = generate(&store, json!({"seed": 43, "days": [{"date": DAY, "flights": 24}]}));
    let cfg = config(&store, &[("PART_FILES", "2")]);
    // The dry run reads the first window and says what it left unread.
    let dry = RunOptions { dry_run: true, ..RunOptions::at(at(NOW)) };
    let r = run(&store, &cfg, &dry).await;
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!((day.action, day.files_read, day.passes), (DayAction::Planned, 8, 1), "{day:?}");
    assert!(day.reason.contains("16 more past it not read"), "{}", day.reason);
    // Parts of 2: the first window is 4 parts; the crash comes after the
    // second part of the second window.
    let scenario = fail::FailScenario::setup();
    fail::cfg("run::after-part", "5*off->1*return->off").unwrap();
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    scenario.teardown();
    assert_eq!(r.last_run_status, Status::Failure, "{r:?}");
    let (files, rows) = rows_by_flight_or_inputs(&store);
    assert_eq!((files, rows), (6, 12), "six parts committed before the crash");

    let r = run(&store, &cfg, &options_after_leases(1)).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!(
        (day.passes, day.parts, day.files_read, day.files_read_compacted),
        (2, 6, 12, 0),
        "12 per-flight files left: a window of 8, then the 4 past it; the compacted files are left as they are: {day:?}"
    );
    assert_eq!((day.rows_written, day.files_left), (12, 0));
    assert_eq!(assert_each_once(&store, &generated).len(), 12);
    assert_valid("run-report.schema.json", &serde_json::to_value(&r).unwrap());
}

/// A listing window that commits nothing (every file of it skipped: here
/// four unreadable per-flight files of no listed flight, the first keys
/// of a one-page listing, in windows of 4) with files past it fails the
/// date, naming the cause and the fix, and leaves the watermark before it:
/// never a date done with its files left.
#[tokio::test]
async fn a_listing_window_that_commits_nothing_fails_the_date_and_keeps_the_watermark() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-window-stall").await;
    let generated = generate(&store, json!({"seed": 44, "days": [{"date": DAY, "flights": 3}]}));
    let prefix = archive_compaction::data::keys::index_prefix(date(DAY));
    for i in 0..4 {
        let key = format!("{prefix}00000000-0000-7000-8000-00000000000{i}.parquet");
        store.put(&key, "not parquet".into(), PutMode::Create, None).await.unwrap();
    }
    let cfg = config(&store, &[("PART_FILES", "1")]);
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Failure, "{r:?}");
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!((day.action, day.parts), (DayAction::Failed, 0), "{day:?}");
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("committed nothing") && e.contains("3 per-flight file(s) past it")),
        "{:?}",
        r.errors
    );
    assert!(r.last_compacted_date < Some(date(DAY)), "{:?}", r.last_compacted_date);
    let after = dump(&store, &prefix);
    for key in &generated.index_keys[DAY] {
        assert!(after.contains_key(key), "{key} left as it was");
    }
}

/// The date's compacted files and the rows in them (the rest of the date
/// may still be per-flight files).
fn rows_by_flight_or_inputs(store: &S3Store) -> (usize, usize) {
    let prefix = archive_compaction::data::keys::index_prefix(date(DAY));
    let after = dump(store, &prefix);
    let compacted: Vec<_> =
        (after.iter()).filter(|(k, _)| k[prefix.len()..].starts_with("compacted-")).collect();
    let rows = compacted.iter().map(|(_, d)| d.rows.as_ref().unwrap().len()).sum();
    (compacted.len(), rows)
}

#[tokio::test]
async fn a_day_cut_by_the_deadline_between_parts_goes_on_in_the_next_run() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-deadline").await;
    let generated = generate(&store, json!({"seed": 43, "days": [{"date": DAY, "flights": 9}]}));
    let cfg = config(&store, &[("PART_FILES", "4"), ("DEADLINE_MARGIN_SECONDS", "9")]);
    // The first part is committed, then time passes (the failpoint sleeps
    // 3 s): 20 s from the start, less than the 9 s margin is left before
    // the next part.
    let scenario = fail::FailScenario::setup();
    fail::cfg("run::after-part", "1*sleep(3000)->off").unwrap();
    let mut opts = RunOptions::at(at(NOW));
    opts.deadline = Some(Instant::now() + Duration::from_secs(11));
    let r = run(&store, &cfg, &opts).await;
    scenario.teardown();
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::Deadline);
    assert_eq!(r.resume_date, Some(date(DAY)));
    assert_eq!(r.last_compacted_date, None, "the watermark stays before the date");
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!((day.action, day.parts, day.files_left), (DayAction::Partial, 1, 5), "{day:?}");
    assert!(day.reason.contains("the next run goes on within this date"), "{}", day.reason);
    assert_valid("run-report.schema.json", &serde_json::to_value(&r).unwrap());
    assert_eq!(rows_by_flight_or_inputs(&store), (1, 4));

    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!((day.parts, day.files_read), (2, 5), "only what was left: {day:?}");
    assert_eq!(assert_each_once(&store, &generated).len(), 3);
    assert_eq!(r.last_compacted_date, Some(date(DAY)));
}

/// A window's last part committed with too little time left for the next
/// window: the date stops before it is listed again (one pass, no listing
/// of its own), a clean deadline stop naming the date, and the next run
/// goes on with the files past the window alone.
#[tokio::test]
async fn a_deadline_after_a_window_stops_the_date_before_it_is_listed_again() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-window-deadline").await;
    let generated = generate(&store, json!({"seed": 46, "days": [{"date": DAY, "flights": 12}]}));
    // Parts of 1: windows of 4 per-flight files, 8 past the first.
    let cfg = config(&store, &[("PART_FILES", "1"), ("DEADLINE_MARGIN_SECONDS", "15")]);
    // The window's fourth and last part is committed, then 6 s pass:
    // less than the 15 s margin of the 20 s is left.
    let scenario = fail::FailScenario::setup();
    fail::cfg("run::after-part", "3*off->1*sleep(6000)->off").unwrap();
    let mut opts = RunOptions::at(at(NOW));
    opts.deadline = Some(Instant::now() + Duration::from_secs(20));
    let r = run(&store, &cfg, &opts).await;
    scenario.teardown();
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(
        (&r.stop_reason, r.resume_date, r.last_compacted_date),
        (&StopReason::Deadline, Some(date(DAY)), None)
    );
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!(
        (day.action, day.parts, day.passes, day.files_left),
        (DayAction::Partial, 4, 1, 8),
        "stopped before the second listing: {day:?}"
    );
    assert_valid("run-report.schema.json", &serde_json::to_value(&r).unwrap());

    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!(
        (day.files_read, day.files_left),
        (8, 0),
        "the files past the window alone: {day:?}"
    );
    assert_eq!(assert_each_once(&store, &generated).len(), 12);
    assert_eq!(r.last_compacted_date, Some(date(DAY)));
}

#[tokio::test]
async fn a_first_part_the_time_left_cannot_hold_is_not_started_and_the_next_run_does_it() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-first-refused").await;
    let generated = generate(&store, json!({"seed": 45, "days": [{"date": DAY, "flights": 6}]}));
    let cfg = config(&store, &[("DEADLINE_MARGIN_SECONDS", "9")]);
    // The date starts with more than the 9 s margin left; its listing and
    // parity gate then take 3 s more (the failpoint), so less than the
    // margin is left before its first (and only) part: the part is not
    // started, nothing of it is written, and the run is a clean deadline
    // stop naming the date.
    let scenario = fail::FailScenario::setup();
    fail::cfg("run::before-part", "1*sleep(3000)->off").unwrap();
    let mut opts = RunOptions::at(at(NOW));
    opts.deadline = Some(Instant::now() + Duration::from_secs(11));
    let r = run(&store, &cfg, &opts).await;
    scenario.teardown();
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::Deadline);
    assert_eq!(r.resume_date, Some(date(DAY)));
    assert_eq!(r.last_compacted_date, None);
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!(
        (day.action, day.parts, day.files_left, day.files_read),
        (DayAction::Partial, 0, 6, 0),
        "{day:?}"
    );
    assert!(day.reason.contains("0 part(s) committed"), "{}", day.reason);
    let untouched = dump(&store, "");
    assert!(
        !untouched.keys().any(|k| k.contains("compacted-") || k.contains("/manifests/")),
        "nothing of the part was written: {:?}",
        untouched.keys()
    );

    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(assert_each_once(&store, &generated).len(), 1);
    assert_eq!(r.last_compacted_date, Some(date(DAY)));
}

#[tokio::test]
async fn a_per_flight_file_without_its_row_in_a_later_part_fails_parity_and_status_agrees() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-mismatch").await;
    let g = generate(&store, json!({"seed": 44, "days": [{"date": DAY, "flights": 9}]}));
    // Flight 7's file holds flight 8's row only: merged and deleted, flight
    // 7 would have no index row. It is in the second part of four files.
    // In key order: the order the parts are cut in.
    let mut keys = g.index_keys[DAY].clone();
    keys.sort();
    let victim = flight_uuid(&keys[7]).to_string();
    archive_py("multi-row", &store, json!({"key": &keys[7], "from": [&keys[8]]}));
    let cfg = config(&store, &[("PART_FILES", "4")]);
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.mismatch_uuids, vec![victim.clone()]);
    assert_eq!(r.mismatch_date, Some(date(DAY)));
    assert_eq!(r.last_compacted_date, None, "the watermark does not pass it");
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!(day.parts, 1, "the first part was committed before: {day:?}");
    // The first part's four rows are compacted; nothing of the second part
    // is written or deleted.
    assert_eq!(rows_by_flight_or_inputs(&store), (1, 4));
    let prefix = archive_compaction::data::keys::index_prefix(date(DAY));
    let left = dump(&store, &prefix);
    for k in &keys[4..] {
        assert!(left.contains_key(k), "{k} deleted");
    }
    assert!(
        dump(&store, "_compaction_state/manifests/").is_empty(),
        "the committed part's manifest is deleted"
    );
    // status re-checks the recorded mismatch part by part, as the run
    // read it, and names the same flight for the same reason.
    let opts = archive_compaction::commands::status::StatusOptions {
        now: at(NOW),
        as_of: at(NOW),
        days: 3,
    };
    let s = archive_compaction::commands::status::gather(&store, &cfg, &opts).await.unwrap();
    let m = s.mismatch.expect("the recorded mismatch");
    assert_eq!(m.missing_uuids, vec![victim], "{m:?}");
}

/// Unreadable per-flight files in two listing windows (windows of 4 here):
/// each left in place and read again by every later pass, the date a
/// Mismatch once its readable files are folded, and both named in
/// `unread_files`, once each (the first window's alone were before).
#[tokio::test]
async fn unreadable_files_in_two_listing_windows_are_each_named_once() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-window-unread").await;
    let g = generate(&store, json!({"seed": 45, "days": [{"date": DAY, "flights": 9}]}));
    let mut keys = g.index_keys[DAY].clone();
    keys.sort();
    // Key order is the windows' order: keys[1] in the first window of 4,
    // keys[6] in the second (the first window's readable files are gone
    // by then, keys[1] is read again).
    for k in [&keys[1], &keys[6]] {
        store.delete(k, None).await.unwrap();
        store.put(k, "not parquet".into(), PutMode::Create, None).await.unwrap();
    }
    let cfg = config(&store, &[("PART_FILES", "1")]);
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.mismatch_date, Some(date(DAY)));
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    let mut unread: Vec<&str> = day.unread_files.iter().map(|f| f.key.as_str()).collect();
    unread.sort();
    assert_eq!(unread, vec![keys[1].as_str(), keys[6].as_str()], "{day:?}");
    let mut missing = vec![flight_uuid(&keys[1]).to_string(), flight_uuid(&keys[6]).to_string()];
    missing.sort();
    assert_eq!(r.mismatch_uuids, missing);
    // Every readable file folded, the two unreadable ones left as they were.
    assert_eq!(rows_by_flight_or_inputs(&store).1, 7, "{day:?}");
    let left = dump(&store, &archive_compaction::data::keys::index_prefix(date(DAY)));
    assert!(left.contains_key(&keys[1]) && left.contains_key(&keys[6]));
}

/// A date whose uuid sets spill to local disk (`FLIGHTS_IN_MEMORY` 3 here:
/// its 24 flights, the 16 flights of its files past the window of 8, the
/// gate's flights named only by a compacted file, each in sorted runs on
/// disk) is gated and compacted as one held in memory: a crash in the
/// second window, then a run whose gate finds the compacted flights by
/// their rows, batch by batch, and finishes the date, every flight once; a
/// date of flights without index files is a Mismatch naming them in uuid
/// order. With `TMPDIR` a directory that does not exist, a date past the
/// limit fails with the spill error naming it and the fix, and changes
/// nothing (the listings and the gate come before any input is read).
#[tokio::test]
async fn a_day_whose_uuid_sets_spill_to_disk_is_gated_and_compacted_as_in_memory() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-spill").await;
    let generated = generate(&store, json!({"seed": 45, "days": [{"date": DAY, "flights": 24}]}));
    let cfg = config(&store, &[("PART_FILES", "2"), ("FLIGHTS_IN_MEMORY", "3")]);
    // No spill directory: the date is refused with the fix, nothing changed.
    let before = dump(&store, "index/");
    // SAFETY: nextest runs each test in its own process; nothing else of
    // this one reads the environment meanwhile.
    unsafe { std::env::set_var("TMPDIR", "/nonexistent/spill-dir") };
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    unsafe { std::env::remove_var("TMPDIR") };
    assert_eq!(r.last_run_status, Status::Failure, "{r:?}");
    assert!(
        r.errors[0].contains("/nonexistent/spill-dir") && r.errors[0].contains("EphemeralStorage"),
        "{:?}",
        r.errors
    );
    assert_eq!(dump(&store, "index/"), before, "a refused date changed the bucket");

    let scenario = fail::FailScenario::setup();
    fail::cfg("run::after-part", "5*off->1*return->off").unwrap();
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    scenario.teardown();
    assert_eq!(r.last_run_status, Status::Failure, "{r:?}");
    assert_eq!(rows_by_flight_or_inputs(&store), (6, 12), "six parts before the crash");
    // 12 flights now named by compacted files alone: more than a batch of
    // 3, so the gate takes them off its set in several passes.
    let r = run(&store, &cfg, &options_after_leases(1)).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!(
        (day.flights, day.parity),
        (24, Some(archive_compaction::data::report::Parity::Passed))
    );
    assert_eq!((day.rows_written, day.files_left), (12, 0), "{day:?}");
    assert_eq!(assert_each_once(&store, &generated).len(), 12);

    // A later date, 7 of its 10 flights without an index file.
    let later = "2026-07-21";
    let g = generate(
        &store,
        json!({"seed": 46, "days": [{"date": later, "flights": 10, "unindexed": 7}]}),
    );
    let r = run(&store, &cfg, &RunOptions::at(at("2026-07-23T04:50:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{r:?}");
    assert_eq!(r.mismatch_date, Some(date(later)));
    assert_eq!((r.mismatch_uuid_count, &r.mismatch_uuids), (7, &g.missing[later]));
    let day = r.days.iter().find(|d| d.date == date(later)).unwrap();
    assert_eq!((day.mismatch_uuid_count, &day.mismatch_uuids), (7, &g.missing[later]));
}

/// Told less memory than the whole date needs in one part, with no
/// `PART_FILES` set, the run sizes the date's parts itself
/// (`sizing::MemoryFit`): the largest that fit, every flight once, in one run.
#[tokio::test]
async fn a_day_the_memory_cannot_hold_in_one_part_is_cut_into_parts_by_the_run_itself() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-memory-sized").await;
    let flights = 1_500u64;
    let generated =
        generate(&store, json!({"seed": 47, "days": [{"date": DAY, "flights": flights}]}));
    let fit = archive_compaction::protocol::sizing::MemoryFit::new(Some(70), 50_000, 524_288);
    let part = fit.part_files(date(DAY), flights, flights).unwrap();
    assert!(
        (archive_compaction::protocol::sizing::MIN_PART_FILES..flights).contains(&part),
        "the premise: more than one part, each of at least the smallest: {part}"
    );
    let cfg = config(&store, &[("MEMORY_LIMIT_MB", "70")]);
    let parts = flights.div_ceil(part);
    // The dry run plans the parts the run then commits, and writes nothing.
    let before = dump(&store, "");
    let mut opts = RunOptions::at(at(NOW));
    opts.dry_run = true;
    let dry = run(&store, &cfg, &opts).await;
    assert_eq!(dry.last_run_status, Status::Success, "{:?}", dry.errors);
    let planned = dry.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!(
        (planned.action, planned.parts, planned.files_read),
        (DayAction::Planned, parts, flights),
        "{planned:?}"
    );
    assert_eq!(dump(&store, ""), before, "the dry run wrote nothing");
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.last_compacted_date, Some(date(DAY)));
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!(
        (day.action, day.parts, day.files_read, day.files_left),
        (DayAction::Compacted, parts, flights, 0),
        "parts of {part}: {day:?}"
    );
    assert_eq!(assert_each_once(&store, &generated).len() as u64, parts);
}

/// A tmpfs of `bytes` mounted on a new temporary directory, unmounted when
/// dropped: a local disk that fills. `None` (the test then skips, and fails
/// under `CI`) where this process may not mount.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount(test: &str, bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallDisk(dir)),
            other => {
                let msg = format!("cannot mount a tmpfs (root is needed): {other:?}");
                assert!(std::env::var_os("CI").is_none(), "{test}: {msg}; CI must run it");
                eprintln!("SKIPPED {test}: {msg}");
                None
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.0.path()).status();
    }
}

/// A local disk too small for a date's spilled uuid sets (a 12 KiB tmpfs
/// as `TMPDIR`, `FLIGHTS_IN_MEMORY` 250, 400 flights: about 21 KB needed)
/// ends the date with `DiskTooSmall` naming the date, the directory, the
/// need and the free space, and changes nothing; the next run, with room,
/// compacts the date exactly.
#[tokio::test]
async fn a_local_disk_too_small_for_the_sets_ends_the_date_with_its_need_and_the_next_run_finishes()
{
    let _serial = SERIAL.lock().await;
    init_logs();
    let Some(disk) = SmallDisk::mount(
        "a_local_disk_too_small_for_the_sets_ends_the_date_with_its_need",
        12 * 1024,
    ) else {
        return;
    };
    let store = bucket("parts-small-disk").await;
    let generated = generate(&store, json!({"seed": 48, "days": [{"date": DAY, "flights": 400}]}));
    let cfg = config(&store, &[("FLIGHTS_IN_MEMORY", "250")]);
    let before = dump(&store, "index/");
    // SAFETY: nextest runs each test in its own process; nothing else of
    // this one reads the environment meanwhile.
    unsafe { std::env::set_var("TMPDIR", disk.0.path()) };
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    unsafe { std::env::remove_var("TMPDIR") };
    assert_eq!(r.last_run_status, Status::Failure, "{r:?}");
    let dir = disk.0.path().display().to_string();
    assert!(
        r.errors.len() == 1
            && r.errors[0].contains(&format!("date {DAY}: its uuid sets need about 1 MB"))
            && r.errors[0].contains(&dir)
            && r.errors[0].contains("0 MB is free")
            && r.errors[0].contains("EphemeralStorage"),
        "{:?}",
        r.errors
    );
    assert!(r.days.iter().all(|d| d.action != DayAction::Compacted), "{r:?}");
    assert_eq!(dump(&store, "index/"), before, "the refused date changed the bucket");
    drop(disk);

    let r = run(&store, &cfg, &options_after_leases(1)).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!(
        (day.action, day.files_read, day.files_left),
        (DayAction::Compacted, 400, 0),
        "{day:?}"
    );
    assert_eq!(assert_each_once(&store, &generated).len(), 1);
}

/// A flight archived while a date is compacted in windows (its record and
/// a per-flight file holding another flight's row, put once the first part
/// is committed) gets its own-row check in the pass that reads its file:
/// every pass lists the date's flights again, so the date is a Mismatch
/// naming that flight, with the first window's parts kept, not a date
/// compacted without its row.
#[tokio::test]
async fn a_flight_archived_between_passes_is_checked_for_its_own_row() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-window-newcomer").await;
    let g = generate(&store, json!({"seed": 49, "days": [{"date": DAY, "flights": 12}]}));
    let mut keys = g.index_keys[DAY].clone();
    keys.sort();
    // Parts of 2, windows of 8: the newcomer's file is read by pass 2.
    let cfg = config(&store, &[("PART_FILES", "2")]);
    let added = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let (bucket_store, newcomer) = (store.clone(), added.clone());
    let other = keys[11].clone();
    let scenario = fail::FailScenario::setup();
    fail::cfg_callback("run::after-part", move || {
        let mut newcomer = newcomer.lock().unwrap();
        if newcomer.is_none() {
            let n =
                generate(&bucket_store, json!({"seed": 50, "days": [{"date": DAY, "flights": 1}]}));
            let key = n.index_keys[DAY][0].clone();
            archive_py("multi-row", &bucket_store, json!({"key": &key, "from": [&other]}));
            *newcomer = Some(key);
        }
    })
    .unwrap();
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    scenario.teardown();
    let key = added.lock().unwrap().clone().expect("archived after the first part");
    assert!(!keys.contains(&key));
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.mismatch_date, Some(date(DAY)));
    assert_eq!(r.mismatch_uuids, vec![flight_uuid(&key).to_string()]);
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    assert_eq!((day.passes, day.parts), (2, 4), "{day:?}");
    assert!(dump(&store, "index/").contains_key(&key), "its file is kept");
}

/// A planned part heavier than the time left allows is cut by the planner, not skipped: with a
/// pace measured on the date's first part (1,500 files) and then just enough time for 1,200 files
/// of the second (1,500), the run logs the cut, the report lists the second part as its pieces,
/// each `cut` with why, the first piece committed, and after the run (a second one if the deadline
/// stopped the first) every flight's row is in the date's compacted files exactly once.
#[tokio::test]
async fn a_part_heavier_than_the_time_left_is_cut_and_every_flight_is_compacted_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("parts-cut").await;
    let (part_files, want_weight) = (1_500u64, 1_200u64);
    let flights = 2 * part_files;
    let generated =
        generate(&store, json!({"seed": 48, "days": [{"date": DAY, "flights": flights}]}));
    let part = part_files.to_string();
    let cfg = config(&store, &[("PART_FILES", &part), ("DEADLINE_MARGIN_SECONDS", "9")]);
    let deadline = Instant::now() + Duration::from_secs(90);
    // Before the second part: the first part's time (a little over its commit, which the run
    // timed) gives the run's pace, twice it per file; then sleep until the time left, less the 8 s
    // S3 margin, holds `want_weight` files at that pace, between MIN_PART_FILES and the part.
    let (hits, first_done) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(None)));
    let premise = Arc::new(Mutex::new(None));
    let scenario = fail::FailScenario::setup();
    let (h, f, p) = (hits.clone(), first_done.clone(), premise.clone());
    fail::cfg_callback("run::before-part", move || match h.fetch_add(1, Ordering::SeqCst) {
        0 => *f.lock().unwrap() = Some(Instant::now()),
        1 => {
            let first = f.lock().unwrap().expect("the first part's start").elapsed();
            let seconds_per_file = 2.0 * first.as_secs_f64() / part_files as f64;
            let needed = Duration::from_secs_f64(8.0 + want_weight as f64 * seconds_per_file);
            let left = deadline.saturating_duration_since(Instant::now());
            *p.lock().unwrap() = Some((left, needed));
            std::thread::sleep(left.saturating_sub(needed));
        }
        _ => {}
    })
    .unwrap();
    let mut opts = RunOptions::at(at(NOW));
    opts.deadline = Some(deadline);
    let r = run(&store, &cfg, &opts).await;
    scenario.teardown();
    let (left, needed) = premise.lock().unwrap().expect("a second part was started");
    assert!(left > needed, "the premise: {left:?} left before the second part, {needed:?} needed");
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let day = r.days.iter().find(|d| d.date == date(DAY)).unwrap();
    let plan = &day.plan.parts;
    assert_eq!(plan.len() as u64, day.plan.parts_planned, "{plan:?}");
    assert!(plan.len() >= 3, "the second part cut into pieces: {plan:?}");
    assert_eq!((plan[0].files, plan[0].committed, &plan[0].cut), (part_files, true, &None));
    let pieces = &plan[1..];
    assert_eq!(pieces.iter().map(|p| p.files).sum::<u64>(), part_files, "{plan:?}");
    let min = archive_compaction::protocol::sizing::MIN_PART_FILES;
    assert!((min..part_files).contains(&pieces[0].files), "{plan:?}");
    for p in pieces {
        let why = p.cut.as_deref().expect("each piece says it was cut");
        assert!(
            why.starts_with(&format!("part 2 of pass 1 (weight {part_files}) cut to weight "))
                && why.ends_with(" s left"),
            "{why}"
        );
    }
    assert!(pieces[0].committed, "the first piece fits the time it was cut for: {plan:?}");
    let committed = plan.iter().filter(|p| p.committed).count() as u64;
    assert_eq!(day.parts, committed, "{day:?}");
    assert_valid("run-report.schema.json", &serde_json::to_value(&r).unwrap());
    if day.action == DayAction::Partial {
        // The deadline stopped the date after the cut: the next run goes on from what is left.
        assert_eq!((&r.stop_reason, r.resume_date), (&StopReason::Deadline, Some(date(DAY))));
        let files_left: u64 = plan.iter().filter(|p| !p.committed).map(|p| p.files).sum();
        assert_eq!(day.files_left, files_left, "{day:?}");
        let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
        assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
        assert_eq!(r.last_compacted_date, Some(date(DAY)));
        assert_each_once(&store, &generated);
    } else {
        assert_eq!((day.action, day.files_left), (DayAction::Compacted, 0), "{day:?}");
        assert_eq!(committed as usize, plan.len(), "every piece committed: {plan:?}");
        assert_eq!(r.last_compacted_date, Some(date(DAY)));
        assert_eq!(assert_each_once(&store, &generated).len(), plan.len());
    }
}
