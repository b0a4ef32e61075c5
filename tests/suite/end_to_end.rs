//! End to end against a real S3-protocol server (ministack by default,
//! `TEST_S3_SERVER=moto` for the second implementation), with index files
//! written by pyarrow and outputs read back by pyarrow.

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::report::{Status, StopReason};
use archive_compaction::infra::storage::PutMode;
use serde_json::json;

#[tokio::test]
async fn compacts_every_day_exactly_once_and_a_rerun_is_a_no_op() {
    init_logs();
    let store = bucket("e2e-basic").await;
    let generated = generate(
        &store,
        json!({"seed": 1, "days": [
            {"date": "2026-07-18", "flights": 40},
            {"date": "2026-07-19", "flights": 25, "foreign": true},
            {"date": "2026-07-21", "flights": 30}
        ]}),
    );
    let before = dump(&store, "");
    let cfg = config(&store, &[]);
    // Cutoff = 2026-07-23 - 2 days = 2026-07-21; 07-20 has no files at all.
    let report = run(&store, &cfg, &RunOptions::at(at("2026-07-23T04:50:00Z"))).await;
    assert_eq!(report.last_run_status, Status::Success, "{:?}", report.errors);
    assert_eq!(report.stop_reason, StopReason::ReachedCutoff);
    assert_eq!(report.days_compacted, 4, "07-18..07-21, the empty 07-20 included");
    assert_eq!(report.files_compacted, 95);
    assert_eq!(report.rows_written, 95);
    assert_eq!(report.last_compacted_date, Some(date("2026-07-21")));
    assert_eq!(report.watermark_lag_days, Some(0));
    assert_eq!(report.foreign_objects, 5);

    let after = dump(&store, "");
    for (d, rows) in &generated.rows {
        assert_compacted(&after, d, rows);
    }
    for f in &generated.foreign {
        assert_eq!(after.get(f), before.get(f), "foreign object {f} was touched");
    }
    for keys in generated.flights.values() {
        for k in keys {
            assert_eq!(after.get(k), before.get(k), "flight object {k} changed");
        }
    }
    let wm = watermark(&after).expect("watermark written");
    assert_eq!(wm["last_compacted_date"], "2026-07-21");
    assert!(!after.keys().any(|k| k.starts_with("_compaction_state/manifests/")), "manifests left");
    assert!(!after.contains_key("_compaction_state/lock.json"), "lease not released");
    let output = &after[report.days[0].output_key.as_ref().unwrap()];
    assert!(output.compression.as_ref().unwrap().iter().all(|c| c == "ZSTD"));

    // A second run changes nothing (bar the lease, taken and released).
    let again = run(&store, &cfg, &RunOptions::at(at("2026-07-23T04:50:00Z"))).await;
    assert_eq!(again.last_run_status, Status::Success);
    assert_eq!(again.stop_reason, StopReason::NothingToDo);
    assert_eq!(again.days_compacted, 0);
    assert_eq!(dump(&store, ""), after, "second run changed the bucket");
}

#[tokio::test]
async fn a_mismatch_day_stops_the_walk_and_names_the_missing_flights() {
    init_logs();
    let store = bucket("e2e-mismatch").await;
    let generated = generate(
        &store,
        json!({"seed": 2, "days": [
            {"date": "2026-07-18", "flights": 10},
            {"date": "2026-07-19", "flights": 12, "unindexed": 3},
            {"date": "2026-07-20", "flights": 8}
        ]}),
    );
    let cfg = config(&store, &[]);
    let report = run(&store, &cfg, &RunOptions::at(at("2026-07-22T04:50:00Z"))).await;
    assert_eq!(report.last_run_status, Status::Mismatch);
    assert_eq!(report.last_run_status.exit_code(), 2);
    assert_eq!(report.mismatch_date, Some(date("2026-07-19")));
    assert_eq!(report.mismatch_uuids, generated.missing["2026-07-19"]);
    assert_eq!(report.mismatch_uuid_count, 3);
    assert_eq!(report.mismatch_runs, 1);
    assert_eq!(report.last_compacted_date, Some(date("2026-07-18")));
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-18", &generated.rows["2026-07-18"]);
    assert_eq!(watermark(&after).unwrap()["last_compacted_date"], "2026-07-18");
    assert_eq!(watermark(&after).unwrap()["mismatch_date"], "2026-07-19");
    for d in ["2026-07-19", "2026-07-20"] {
        for k in &generated.index_keys[d] {
            assert!(after.contains_key(k), "{k} was touched on a day past the mismatch");
        }
        assert!(
            !after
                .keys()
                .any(|k| k.contains(&format!("day={}", &d[8..])) && k.contains("compacted-"))
        );
    }
}

#[tokio::test]
async fn start_date_and_python_watermark_format() {
    init_logs();
    let store = bucket("e2e-start").await;
    let generated = generate(
        &store,
        json!({"seed": 3, "days": [
            {"date": "2026-07-17", "flights": 5},
            {"date": "2026-07-18", "flights": 5},
            {"date": "2026-07-19", "flights": 5}
        ]}),
    );
    // START_DATE skips 07-17 when there is no watermark.
    let cfg = config(&store, &[("START_DATE", "2026-07-18"), ("LAG_DAYS", "3")]);
    let r = run(&store, &cfg, &RunOptions::at(at("2026-07-21T10:00:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-18")));
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-18", &generated.rows["2026-07-18"]);
    for k in &generated.index_keys["2026-07-17"] {
        assert!(after.contains_key(k));
    }

    // The Python job's file (with a field of its own) is read and kept.
    let wm = after["_compaction_state/watermark.json"].etag.clone();
    let python = br#"{"last_compacted_date": "2026-07-18", "written_by": "python-job"}"#;
    store
        .put("_compaction_state/watermark.json", python.to_vec().into(), PutMode::Update(wm), None)
        .await
        .unwrap();
    let cfg = config(&store, &[]);
    let r = run(&store, &cfg, &RunOptions::at(at("2026-07-21T10:00:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.watermark_before, Some(date("2026-07-18")));
    assert_eq!(r.last_compacted_date, Some(date("2026-07-19")));
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-19", &generated.rows["2026-07-19"]);
    let w = watermark(&after).unwrap();
    assert_eq!(w["last_compacted_date"], "2026-07-19");
    assert_eq!(w["written_by"], "python-job");
}

#[tokio::test]
async fn an_unreadable_watermark_is_a_failure_not_a_first_run() {
    init_logs();
    let store = bucket("e2e-badwm").await;
    let generated =
        generate(&store, json!({"seed": 4, "days": [{"date": "2026-07-18", "flights": 5}]}));
    store
        .put(
            "_compaction_state/watermark.json",
            b"{not json".to_vec().into(),
            PutMode::Create,
            None,
        )
        .await
        .unwrap();
    let before = dump(&store, "index/");
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at("2026-07-21T10:00:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Failure);
    assert!(r.errors[0].contains("_compaction_state/watermark.json"), "{:?}", r.errors);
    assert_eq!(dump(&store, "index/"), before);
    assert_eq!(generated.rows.len(), 1);
}

#[tokio::test]
async fn no_partitions_and_no_watermark_is_a_quiet_success() {
    init_logs();
    let store = bucket("e2e-empty").await;
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at("2026-07-21T10:00:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::NoPartitions);
    assert_eq!(r.last_compacted_date, None);
}

#[tokio::test]
async fn a_day_already_compacted_by_a_crashed_run_passes_parity_from_its_compacted_rows() {
    init_logs();
    let store = bucket("e2e-parity-compacted").await;
    let generated =
        generate(&store, json!({"seed": 5, "days": [{"date": "2026-07-18", "flights": 6}]}));
    // First run compacts with --date (the watermark is not moved), so the day
    // looks exactly like a crash between deleting the inputs and the watermark write.
    let mut opts = RunOptions::at(at("2026-07-21T10:00:00Z"));
    opts.only_date = Some(date("2026-07-18"));
    let r = run(&store, &config(&store, &[]), &opts).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.last_compacted_date, None);
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at("2026-07-21T10:00:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-19")));
    assert_compacted(&dump(&store, "index/"), "2026-07-18", &generated.rows["2026-07-18"]);
}

/// A compacted file at or above `MULTIPART_THRESHOLD_BYTES` goes up as a
/// multipart upload (here: every output, threshold 0, one part), and the
/// commit protocol's HEAD check still verifies it: S3 keeps a composite
/// checksum for multipart objects, so the check reads the body back.
#[tokio::test]
async fn a_multipart_output_commits_and_verifies() {
    init_logs();
    let store = bucket("e2e-multipart")
        .await
        .with_multipart(0, archive_compaction::infra::storage::MULTIPART_PART_MIN);
    let generated =
        generate(&store, json!({"seed": 41, "days": [{"date": "2026-07-18", "flights": 30}]}));
    let cfg = config(&store, &[("MULTIPART_THRESHOLD_BYTES", "0")]);
    assert_eq!(cfg.multipart_threshold, 0);
    let report = run(&store, &cfg, &RunOptions::at(at("2026-07-20T04:50:00Z"))).await;
    assert_eq!(report.last_run_status, Status::Success, "{:?}", report.errors);
    assert_eq!(report.files_compacted, 30);
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-18", &generated.rows["2026-07-18"]);
}

/// The storage seam's multipart path on its own: an 11 MiB body in 5 MiB
/// parts (three parts, the last 1 MiB) arrives byte for byte; a second
/// conditional create of the same key loses (`If-None-Match: *` on
/// CompleteMultipartUpload) and leaves the first object as it was.
#[tokio::test]
async fn multipart_put_is_whole_and_conditional() {
    use archive_compaction::infra::error::Error;
    use archive_compaction::infra::storage::{MULTIPART_PART_MIN, multipart_ranges};
    let store = bucket("multipart-seam").await.with_multipart(0, MULTIPART_PART_MIN);
    let mut body = Vec::with_capacity(11 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while body.len() < 11 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        body.extend_from_slice(&x.to_le_bytes());
    }
    assert_eq!(multipart_ranges(body.len(), MULTIPART_PART_MIN).len(), 3);
    let body = bytes::Bytes::from(body);
    let sum = archive_compaction::infra::storage::sha256_b64(&body);
    let key = "index/year=2026/month=07/day=18/compacted-multipart.parquet";
    let etag =
        store.put(key, body.clone(), PutMode::Create, Some(&sum)).await.expect("multipart put");
    let got = store.get(key).await.expect("get");
    assert!(got.body == body, "multipart object differs from what was uploaded");
    assert!(archive_compaction::infra::storage::etag_eq(&got.etag, &etag));
    let again = store.put(key, bytes::Bytes::from_static(b"other"), PutMode::Create, None).await;
    // A one-part upload of 5 bytes: still multipart (threshold 0).
    assert!(
        matches!(again, Err(Error::PreconditionFailed { .. })),
        "second create of {key} should lose its condition: {again:?}"
    );
    assert!(store.get(key).await.unwrap().body == body);
}
