//! The walk starts where the data starts, and not before a date it must not
//! touch: without a watermark the lag counts from the first date; a watermark
//! in year 0001 reaches today's data in one run; flights before the first
//! index partition are walked, not passed by; with `START_DATE` set, neither
//! the walk nor the sweep reads, merges or deletes a date before it (whatever
//! the watermark says).

use std::time::Duration;

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::commands::status;
use archive_compaction::data::report::{Status, StopReason};
use archive_compaction::infra::storage::{PutMode, S3Store};
use serde_json::json;

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
    let lease = archive_compaction::protocol::lease::LeaseGuard::acquire(
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
    assert_eq!(r.last_compacted_date, Some(date("2026-07-17")), "{:?}", r.errors);
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
            put_state(&store, WATERMARK, &format!(r#"{{"last_compacted_date": "{w}"}}"#)).await;
        }
        let env: Vec<(&str, &str)> = start_date.map(|s| ("START_DATE", s)).into_iter().collect();
        let r = run(&store, &config(&store, &env), &o).await;
        assert_eq!(r.last_run_status, Status::Success, "{hint}: {:?}", r.errors);
        assert_eq!(r.stop_reason, StopReason::ReachedCutoff, "{hint}");
        assert_eq!(r.last_compacted_date, Some(date("2026-07-20")), "{hint}");
        assert_eq!(r.days_compacted, 3, "{hint}: 07-18, 07-19, 07-20 walked, no empty date");
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
        store.list("index/year=2026/month=07/day=16/").await.unwrap().is_empty(),
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
    let cfg = config(&store, &[("START_DATE", "2026-07-16"), ("SWEEP_DAYS", "14")]);
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
    let late_early = archive_py("put-row", &store, json!({"seed": 2702, "date": "2026-07-14"}));
    let late = archive_py("put-row", &store, json!({"seed": 2703, "date": "2026-07-16"}));
    let untouched_with_late = early(&store);
    assert_ne!(untouched_with_late, untouched);

    let r = run(&store, &cfg, &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let swept: Vec<String> =
        (r.days.iter()).filter(|d| d.action == "swept").map(|d| d.date.to_string()).collect();
    assert_eq!(swept, ["2026-07-16"], "the sweep stays at or after START_DATE");
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
    let s = status::gather(&store, &cfg, &status_opts(now)).await.unwrap();
    assert_eq!(s.next_date, Some(date("2026-07-16")), "status agrees");
    let r = run(&store, &cfg, &RunOptions::at(at(now))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.days.first().map(|d| d.date), Some(date("2026-07-16")), "{:?}", r.days);
    assert_eq!(dump(&store, "index/year=2026/month=07/day=14/"), before);
    assert_compacted(&dump(&store, "index/"), "2026-07-16", &g.rows["2026-07-16"]);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-17")));
}
