//! Faults at the S3 protocol level, injected by a proxy in front of the real
//! server (tests/support/faultproxy.py): transient errors on every call site,
//! per-key DeleteObjects errors, concurrent runs, corrupt manifests, deadline.

use std::time::{Duration, Instant};

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::report::{Status, StopReason};
use archive_compaction::infra::storage::PutMode;
use serde_json::json;

const NOW: &str = "2026-07-22T04:50:00Z";

fn two_days(seed: u64) -> serde_json::Value {
    json!({"seed": seed, "days": [
        {"date": "2026-07-19", "flights": 6, "foreign": true},
        {"date": "2026-07-20", "flights": 5}
    ]})
}

#[tokio::test]
async fn a_transient_error_on_every_call_site_is_retried_and_the_run_succeeds() {
    init_logs();
    let direct = bucket("fault-transient").await;
    let generated = generate(&direct, two_days(50));
    let proxy = Proxy::start();
    proxy.set(json!({"fail_first_attempt": true}));
    let store = proxy.store(&direct).with_delete_batch_size(2);
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let stats = proxy.stats();
    let kinds = stats["by_kind"].as_object().unwrap();
    for k in
        ["ListObjectsV2", "GetObject", "PutObject", "HeadObject", "DeleteObjects", "DeleteObject"]
    {
        assert!(kinds.contains_key(k), "{k} was never called: {stats}");
    }
    assert!(stats["injected"].as_u64().unwrap() >= 10, "{stats}");
    assert_all_compacted(&direct, &generated, "2026-07-20", "transient errors");
}

#[tokio::test]
async fn per_key_delete_errors_transient_are_retried_permanent_keep_the_manifest_until_fixed() {
    init_logs();
    let direct = bucket("fault-perkey").await;
    let generated = generate(&direct, two_days(51));
    let proxy = Proxy::start();
    let store = proxy.store(&direct);
    // Transient per-key errors (twice) on 07-19's files: retried, run succeeds.
    proxy.set(json!({"delete_key_errors": [{"match": "day=19/[0-9a-f-]{36}\\.parquet$", "code": "InternalError", "times": 2}]}));
    let cfg = config(&store, &[]);
    let mut opts = RunOptions::at(at(NOW));
    opts.only_date = Some(date("2026-07-19"));
    let r = run(&store, &cfg, &opts).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.files_delete_failed, 0);
    assert_eq!(proxy.stats()["injected"], 2, "the transient per-key errors were not injected");

    // AccessDenied on one of 07-20's files: Failure, counted, manifest kept, key still there.
    proxy.set(json!({"delete_key_errors": [{"match": "day=20/[0-9a-f-]{36}\\.parquet$", "code": "AccessDenied", "times": 1}]}));
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Failure);
    assert_eq!(r.files_delete_failed, 1, "{:?}", r.errors);
    let inputs_20 = generated.index_keys["2026-07-20"].len() as u64;
    assert_eq!(
        r.files_compacted,
        inputs_20 - 1,
        "the files this run deleted, not the one it could not"
    );
    assert!(r.errors.iter().any(|e| e.contains("AccessDenied")), "{:?}", r.errors);
    let mid = dump(&direct, "");
    assert_eq!(
        mid.keys().filter(|k| k.starts_with("_compaction_state/manifests/2026-07-20/")).count(),
        1
    );
    assert_eq!(watermark(&mid).unwrap()["last_compacted_date"], "2026-07-19");
    // `status` counts the stuck manifest's inputs still listed: the one
    // left, not the ones already deleted.
    let s = archive_compaction::commands::status::gather(
        &direct,
        &config(&direct, &[]),
        &archive_compaction::commands::status::StatusOptions {
            now: at(NOW),
            as_of: at(NOW),
            days: 1,
        },
    )
    .await
    .unwrap();
    assert_eq!(s.manifests.len(), 1);
    assert_eq!(s.manifests[0].inputs, 1, "{:?}", s.manifests);
    // The run that failed the deletes marked the manifest stuck, so
    // `status` names its date blocked as the next run does (below), without
    // trying a delete itself.
    let manifest_key = s.manifests[0].key.clone();
    assert!(s.manifests[0].stuck, "{:?}", s.manifests);
    let blocked_by = format!("stuck manifest {manifest_key}");
    assert_eq!(s.next_days[0].date, date("2026-07-20"));
    assert_eq!(s.next_days[0].blocked_by.as_deref(), Some(blocked_by.as_str()));
    let mark = manifest_key.replacen("/manifests/", "/stuck/", 1);
    let body = mid[&mark].json.clone().expect("the mark is JSON");
    assert_eq!(body["code"], "AccessDenied", "{body}");
    assert_eq!(body["inputs_not_deleted"], 1, "{body}");

    // The dry run reads the mark too: it foresees the manifest stuck and
    // its date blocked, as status says and the next run does (below), not
    // `completed`; and writes nothing.
    let dry = RunOptions { dry_run: true, ..RunOptions::at(at(NOW)) };
    let r = run(&store, &cfg, &dry).await;
    assert_eq!(r.recovered.len(), 1, "{:?}", r.recovered);
    assert_eq!(r.recovered[0].action, "stuck", "{:?}", r.recovered);
    assert!(
        r.errors.iter().any(|e| e.contains("2026-07-20 is blocked") && e.contains(&blocked_by)),
        "the dry run names what status named: {blocked_by}: {:?}",
        r.errors
    );
    assert!(r.days.iter().all(|d| d.date != date("2026-07-20")), "{:?}", r.days);
    assert_eq!(dump(&direct, "").keys().collect::<Vec<_>>(), mid.keys().collect::<Vec<_>>());

    // A manifest left without its mark (a crash before the mark, or a
    // build before marks): recovery's own failed deletes mark it again.
    archive_compaction::infra::storage::Store::delete(&direct, &mark, None).await.unwrap();

    // Still denied: the next run's recovery cannot finish the manifest
    // either. It is stuck, its date blocked (day::BlockReason::Stuck): the
    // run says so, deletes nothing more, does not walk the date again and
    // leaves the watermark where it was.
    proxy.set(json!({"delete_key_errors": [{"match": "day=20/[0-9a-f-]{36}\\.parquet$", "code": "AccessDenied", "times": 1}]}));
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Failure, "{:?}", r.errors);
    assert_eq!(r.recovered.len(), 1, "{:?}", r.recovered);
    assert_eq!(r.recovered[0].action, "stuck", "{:?}", r.recovered);
    assert_eq!(r.files_compacted, 0);
    assert_eq!(r.files_delete_failed, 1);
    assert!(
        r.errors.iter().any(|e| e.contains("2026-07-20 is blocked") && e.contains(&blocked_by)),
        "the run names what status named: {blocked_by}: {:?}",
        r.errors
    );
    assert!(
        r.days.iter().all(|d| d.date != date("2026-07-20")),
        "a stuck date is not walked: {:?}",
        r.days
    );
    let after = dump(&direct, "");
    assert_eq!(watermark(&after).unwrap()["last_compacted_date"], "2026-07-19");
    assert_eq!(
        after.keys().filter(|k| k.starts_with("_compaction_state/manifests/2026-07-20/")).count(),
        1,
        "the stuck manifest is kept for the next run"
    );
    assert!(after.contains_key(&mark), "recovery marked it stuck again: {:?}", after.keys());
    // Still denied, the mark listed at the start: recovery keeps the mark
    // of a manifest it found stuck again (it removes only resolved ones').
    proxy.set(json!({"delete_key_errors": [{"match": "day=20/[0-9a-f-]{36}\\.parquet$", "code": "AccessDenied", "times": 1}]}));
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.recovered[0].action, "stuck", "{:?}", r.recovered);
    assert!(
        dump(&direct, "_compaction_state/stuck/").contains_key(&mark),
        "the mark of a manifest still stuck is kept"
    );

    // Fixed: the next run's recovery finishes the commit, then the walk moves on.
    proxy.set(json!({}));
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.recovered.len(), 1);
    assert_eq!(r.recovered[0].action, "completed");
    assert_eq!(
        r.files_compacted, 1,
        "each file counted once, by the run that retired it: the retry deleted one"
    );
    assert_all_compacted(&direct, &generated, "2026-07-20", "per-key delete errors");
    let state: Vec<String> = dump(&direct, "_compaction_state/")
        .into_keys()
        .filter(|k| !k.ends_with("watermark.json"))
        .collect();
    assert!(state.is_empty(), "the resolved manifest and its stuck mark are gone: {state:?}");
}

#[tokio::test]
async fn two_concurrent_runs_exactly_one_compacts() {
    init_logs();
    let store = bucket("concurrent").await;
    let generated = generate(&store, two_days(52));
    let cfg = config(&store, &[]);
    let (oa, ob) = (RunOptions::at(at(NOW)), RunOptions::at(at(NOW)));
    let (a, b) = tokio::join!(run(&store, &cfg, &oa), run(&store, &cfg, &ob));
    let worked: Vec<_> = [&a, &b].into_iter().filter(|r| r.days_compacted > 0).collect();
    let held: Vec<_> =
        [&a, &b].into_iter().filter(|r| r.stop_reason == StopReason::LeaseHeld).collect();
    assert_eq!(worked.len(), 1, "{a:?}\n{b:?}");
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].days_compacted, 0);
    assert!(held[0].errors[0].contains("held by"), "{:?}", held[0].errors);
    assert_all_compacted(&store, &generated, "2026-07-20", "concurrent runs");
}

#[tokio::test]
async fn unreadable_manifests_are_quarantined_and_nothing_is_deleted_on_their_word() {
    init_logs();
    let store = bucket("quarantine").await;
    let generated = generate(&store, two_days(53));
    let m19 = "_compaction_state/manifests/2026-07-19/019f0000-0000-7000-8000-000000000001.json";
    let m20 = "_compaction_state/manifests/2026-07-20/019f0000-0000-7000-8000-000000000002.json";
    store.put(m19, Vec::new().into(), PutMode::Create, None).await.unwrap();
    store
        .put(
            m20,
            br#"{"schema_version": 1, "job_id": "019f"#.to_vec().into(),
            PutMode::Create,
            None,
        )
        .await
        .unwrap();
    let before = dump(&store, "index/");
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Failure);
    assert_eq!(r.stop_reason, StopReason::BlockedByManifest);
    assert_eq!(
        r.recovered.iter().filter(|m| m.action == "quarantined").count(),
        2,
        "{:?}",
        r.recovered
    );
    assert!(r.errors[0].contains("2026-07-19"), "{:?}", r.errors);
    let after = dump(&store, "");
    for q in [m19, m20] {
        let moved = q.replace("/manifests/", "/quarantine/");
        assert!(after.contains_key(&moved), "{moved} missing");
        assert!(!after.contains_key(q));
    }
    let index_after: std::collections::BTreeMap<_, _> =
        after.into_iter().filter(|(k, _)| k.starts_with("index/")).collect();
    assert_eq!(index_after, before, "index/ changed on the word of an unreadable manifest");

    // An operator inspects and deletes the quarantined files: the dates unblock.
    for q in [m19, m20] {
        store.delete(&q.replace("/manifests/", "/quarantine/"), None).await.unwrap();
    }
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_all_compacted(&store, &generated, "2026-07-20", "unreadable manifests");
}

#[tokio::test]
async fn the_deadline_stops_the_walk_before_a_new_date_and_the_next_run_continues() {
    init_logs();
    let store = bucket("deadline").await;
    let generated = generate(&store, two_days(54));
    let cfg = config(&store, &[("DEADLINE_MARGIN_SECONDS", "9")]);
    let mut opts = RunOptions::at(at(NOW));
    opts.deadline = Some(Instant::now() + Duration::from_secs(2));
    let r = run(&store, &cfg, &opts).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::Deadline);
    assert_eq!(r.days_compacted, 0);
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.stop_reason, StopReason::ReachedCutoff);
    assert_all_compacted(&store, &generated, "2026-07-20", "the deadline");
}

#[tokio::test]
async fn the_same_event_delivered_twice_ends_in_the_same_state() {
    init_logs();
    let store = bucket("redelivery").await;
    let generated = generate(&store, two_days(55));
    let cfg = config(&store, &[]);
    let mut opts = RunOptions::at(at(NOW));
    opts.event_id = Some("evt-1".into());
    let first = run(&store, &cfg, &opts).await;
    assert_eq!(first.last_run_status, Status::Success);
    let state = dump(&store, "");
    let second = run(&store, &cfg, &opts).await;
    assert_eq!(second.last_run_status, Status::Success);
    assert_eq!(second.days_compacted, 0);
    assert_eq!(dump(&store, ""), state);
    assert_all_compacted(&store, &generated, "2026-07-20", "the same event twice");
}
