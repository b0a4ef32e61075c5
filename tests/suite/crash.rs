//! Crash and fault tests (feature `failpoints`): crash at every step of the
//! commit protocol and of recovery (error and panic variants), then run again
//! and check the invariants with an independent reader: every row exactly
//! once, no per-flight file left in a compacted day, no manifest left,
//! watermark at the cutoff. Plus a SIGKILL test of the real binary.

use std::time::Duration;

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::config::Config;
use archive_compaction::data::report::{RunReport, Status};
use archive_compaction::infra::storage::S3Store;
use serde_json::json;

const NOW: &str = "2026-07-22T04:50:00Z";

/// Failpoints are process-wide: these tests run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn spec(seed: u64) -> serde_json::Value {
    json!({"seed": seed, "days": [
        {"date": "2026-07-18", "flights": 7},
        {"date": "2026-07-19", "flights": 5, "foreign": true},
        {"date": "2026-07-20", "flights": 6}
    ]})
}

async fn run_catching(store: &S3Store, cfg: &Config, laps: i64) -> Option<RunReport> {
    let (store, cfg) = (store.clone(), cfg.clone());
    tokio::spawn(async move { run(&store, &cfg, &options_after_leases(laps)).await }).await.ok()
}

fn assert_invariants(store: &S3Store, generated: &Generated) {
    let after = dump(store, "");
    for (d, rows) in &generated.rows {
        assert_compacted(&after, d, rows);
    }
    for f in &generated.foreign {
        assert!(after.contains_key(f), "foreign object {f} deleted");
    }
    let manifests: Vec<_> =
        after.keys().filter(|k| k.starts_with("_compaction_state/manifests/")).collect();
    assert!(manifests.is_empty(), "manifests left: {manifests:?}");
    assert_eq!(watermark(&after).unwrap()["last_compacted_date"], "2026-07-20");
}

/// Crash at `point` (`return` = an error, `panic` = a crash), run cleanly
/// with the lease clock past the crashed run's lease, check the invariants.
async fn crash_then_recover(point: &str, action: &str, seed: u64) {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket(&format!("crash-{}", point.replace("::", "-")))
        .await
        .with_delete_batch_size(2)
        // Two waves of two DeleteObjects: a crash can fall between them.
        .with_delete_batches_in_flight(2);
    let generated = generate(&store, spec(seed));
    let cfg = config(&store, &[]);
    {
        let scenario = fail::FailScenario::setup();
        fail::cfg(point, action).unwrap();
        let crashed = run_catching(&store, &cfg, 0).await;
        match (action, &crashed) {
            ("panic", None) => {}
            ("return", Some(r)) => {
                assert_eq!(r.last_run_status, Status::Failure, "{point}: {:?}", r.errors);
                assert!(
                    r.errors.iter().any(|e| e.contains(point)),
                    "{point} did not fire: {:?}",
                    r.errors
                );
            }
            _ => panic!("{point}/{action}: unexpected outcome {crashed:?}"),
        }
        scenario.teardown();
    }
    let r = run(&store, &cfg, &options_after_leases(1)).await;
    assert_eq!(r.last_run_status, Status::Success, "{point}/{action}: {:?}", r.errors);
    assert_invariants(&store, &generated);
}

macro_rules! crash_tests {
    ($($name:ident: $point:literal,)*) => {
        mod on_error {
            $(#[tokio::test] async fn $name() { super::crash_then_recover($point, "return", 10).await })*
        }
        mod on_panic {
            $(#[tokio::test] async fn $name() { super::crash_then_recover($point, "panic", 20).await })*
        }
    };
}

crash_tests! {
    before_manifest_create: "commit::before-manifest-create",
    after_manifest_create: "commit::after-manifest-create",
    after_output_put: "commit::after-output-put",
    after_verify: "commit::after-verify",
    between_delete_batches: "commit::between-delete-batches",
    after_deletes: "commit::after-deletes",
    before_manifest_delete: "commit::before-manifest-delete",
    before_watermark_write: "run::before-watermark-write",
}

/// Crash during recovery itself: leave a manifest behind (crash after the
/// output was verified), crash again inside recovery, then recover cleanly.
async fn crash_in_recovery(point: &str, action: &str) {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket(&format!("crash-rec-{}", point.replace("::", "-")))
        .await
        .with_delete_batch_size(2)
        // Two waves of two DeleteObjects: a crash can fall between them.
        .with_delete_batches_in_flight(2);
    let generated = generate(&store, spec(30));
    let cfg = config(&store, &[]);
    for (laps, first) in ["commit::after-verify", point].into_iter().enumerate() {
        let scenario = fail::FailScenario::setup();
        fail::cfg(first, action).unwrap();
        let crashed = run_catching(&store, &cfg, laps as i64).await;
        match &crashed {
            None => assert_eq!(action, "panic"),
            Some(r) => assert!(
                r.errors.iter().any(|e| e.contains(first)),
                "{first} did not fire: {:?}",
                r.errors
            ),
        }
        scenario.teardown();
    }
    let r = run(&store, &cfg, &options_after_leases(2)).await;
    assert_eq!(r.last_run_status, Status::Success, "{point}/{action}: {:?}", r.errors);
    assert_invariants(&store, &generated);
}

#[tokio::test]
async fn crash_in_recovery_after_input_deletes() {
    crash_in_recovery("recovery::after-input-deletes", "panic").await;
    crash_in_recovery("recovery::after-input-deletes", "return").await;
}

#[tokio::test]
async fn crash_in_recovery_between_delete_batches() {
    crash_in_recovery("commit::between-delete-batches", "panic").await;
}

/// The real binary, SIGKILLed at seeded random instants during a multi-day
/// run, then one uninterrupted run: same invariants.
/// An input overwritten (new ETag) between read and the re-list survives
/// the delete and its newer row replaces the old one at once. ministack
/// honours the ETag in DeleteObjects; moto ignores it, so there the re-list
/// catches it (run this test with TEST_S3_SERVER=moto too). The overwrite
/// lands once the output is put, before the re-list starts: the re-list runs
/// beside the output's HEAD, so at `commit::after-verify` it has listed
/// already, and an overwrite from then on is the case of the test below.
#[tokio::test]
async fn an_input_overwritten_between_read_and_delete_survives_and_its_newer_row_wins() {
    overwritten_at("commit::after-output-put").await;
}

/// The same, with the overwrite after the re-list, just before DeleteObjects
/// (or while the output's HEAD or the lease's GET beside the re-list is
/// still out): only the ETag condition in DeleteObjects can save the newer
/// version. AWS
/// honours it and so does ministack; moto ignores it (it would delete the
/// newer version), so this one needs ministack.
#[tokio::test]
async fn an_input_overwritten_just_before_delete_objects_survives_by_the_etag_condition() {
    if s3_kind() != "ministack" {
        eprintln!("skipped: needs ministack (moto ignores the ETag in DeleteObjects, unlike AWS)");
        return;
    }
    overwritten_at("commit::before-delete-batch").await;
}

async fn overwritten_at(point: &'static str) {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket(&format!("overwritten-{}", point.replace("::", "-"))).await;
    let generated =
        generate(&store, json!({"seed": 60, "days": [{"date": "2026-07-20", "flights": 5}]}));
    let victim = generated.index_keys["2026-07-20"][2].clone();
    let (s2, v2) = (store.clone(), victim.clone());
    let new_rows = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = new_rows.clone();
    let scenario = fail::FailScenario::setup();
    fail::cfg_callback(point, move || {
        let mut rows = sink.lock().unwrap();
        if rows.is_empty() {
            *rows = rewrite(&s2, &v2, "STITCHED");
        }
    })
    .unwrap();
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    scenario.teardown();
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.days[0].files_kept_newer, 1, "{:?}", r.days[0]);
    let new_row = new_rows.lock().unwrap()[0].clone();
    let mut expected: Vec<_> = generated.rows["2026-07-20"]
        .iter()
        .filter(|row| row["s3_key"] != new_row["s3_key"])
        .cloned()
        .collect();
    expected.push(new_row);
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-20", &expected);
}

/// A commit made to list an input the merge skipped (the
/// failpoint `commit::read-lists-skipped-input` records a per-flight file
/// pyarrow wrote with `military` as a string, which the merge refuses, as
/// read). The commit's proof finds its flight not in the output: nothing of
/// it is deleted, the run names it as an error, the day is not counted as
/// compacted and its manifest stays. The next run's recovery proves what is
/// left, keeps the file and quarantines the manifest; once the operator
/// deletes it the day is done. Every flight is in the day exactly once
/// throughout (pyarrow reads the kept file too).
#[tokio::test]
async fn a_commit_made_to_list_a_skipped_input_deletes_nothing_of_it() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("proof-skipped").await;
    let day = "2026-07-20";
    let generated = generate(&store, json!({"seed": 70, "days": [{"date": day, "flights": 6}]}));
    let v = archive_py(
        "variants",
        &store,
        json!({"date": day, "seed": 71, "variants": ["military_as_string"]}),
    );
    let skipped = v["military_as_string"]["key"].as_str().unwrap().to_string();
    let skipped_flight = v["military_as_string"]["flight"].as_str().unwrap().to_string();
    let etag = dump(&store, &skipped)[&skipped].etag.clone();
    let cfg = config(&store, &[]);
    let each_flight_once = |why: &str| {
        let after = dump(&store, "index/");
        let mut n: std::collections::BTreeMap<String, usize> = Default::default();
        for (k, d) in &after {
            if archive_compaction::data::keys::is_index_input(k) {
                for r in d.rows.clone().unwrap_or_default() {
                    *n.entry(r["s3_key"].as_str().unwrap().to_string()).or_insert(0) += 1;
                }
            }
        }
        let mut want: Vec<String> =
            generated.rows[day].iter().map(|r| r["s3_key"].as_str().unwrap().to_string()).collect();
        want.push(skipped_flight.clone());
        want.sort();
        assert_eq!(n.keys().cloned().collect::<Vec<_>>(), want, "{why}: flights lost or added");
        assert!(n.values().all(|c| *c == 1), "{why}: a flight twice: {n:?}");
        assert_eq!(
            after.get(&skipped).map(|d| d.etag.clone()),
            Some(etag.clone()),
            "{why}: the skipped input was deleted"
        );
    };

    let scenario = fail::FailScenario::setup();
    fail::cfg("commit::read-lists-skipped-input", "return").unwrap();
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    scenario.teardown();
    assert_eq!(r.last_run_status, Status::Failure, "{:?}", r.errors);
    assert!(
        r.errors.iter().any(|e| e.contains(&skipped) && e.contains("not proven")),
        "the kept input is not named: {:?}",
        r.errors
    );
    let d = r.days.iter().find(|d| d.date.to_string() == day).unwrap();
    assert_eq!(d.action.to_string(), "failed", "{d:?}");
    assert!(d.reason.contains(&skipped), "{d:?}");
    let manifests = dump(&store, "_compaction_state/manifests/");
    assert_eq!(manifests.len(), 1, "the manifest stays: {manifests:?}");
    let manifest: archive_compaction::data::state::Manifest =
        serde_json::from_value(manifests.values().next().unwrap().json.clone().unwrap()).unwrap();
    assert!(
        manifest.inputs.iter().any(|i| i.key == skipped),
        "the failpoint did not plant the hole"
    );
    assert_ne!(
        watermark(&dump(&store, "_compaction_state/")).map(|w| w["last_compacted_date"].clone()),
        Some(json!(day)),
        "the day was counted as compacted"
    );
    each_flight_once("after the commit");

    let r = run(&store, &cfg, &options_after_leases(1)).await;
    let e = &r.recovered[0];
    assert_eq!(e.action, "quarantined", "{:?}", r.recovered);
    assert!(e.detail.contains("rule input_not_in_output:") && e.detail.contains(&skipped), "{e:?}");
    each_flight_once("after recovery");

    let quarantined = dump(&store, "_compaction_state/quarantine/");
    for k in quarantined.keys() {
        store.delete(k, None).await.unwrap();
    }
    let r = run(&store, &cfg, &options_after_leases(2)).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    each_flight_once("after the operator");
    let after = dump(&store, "");
    assert_eq!(watermark(&after).unwrap()["last_compacted_date"], day);
    assert!(!after.keys().any(|k| k.starts_with("_compaction_state/manifests/")), "manifests left");
}

#[tokio::test]
async fn sigkill_at_random_instants_then_one_clean_run() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let store = bucket("sigkill").await;
    let twin = bucket("sigkill-twin").await;
    let spec = |s: &S3Store| {
        generate(
            s,
            json!({"seed": 40, "days": [
                {"date": "2026-07-15", "flights": 30}, {"date": "2026-07-16", "flights": 30},
                {"date": "2026-07-17", "flights": 30}, {"date": "2026-07-18", "flights": 30},
                {"date": "2026-07-19", "flights": 30}, {"date": "2026-07-20", "flights": 30}
            ]}),
        )
    };
    let generated = spec(&store);
    spec(&twin);
    let bin = env!("CARGO_BIN_EXE_archive-compaction");
    let spawn_for = |store: &S3Store| {
        // A 3 s lease: long enough that a loaded machine (the suite runs 8
        // tests at once) does not let it lapse between two steps of a run,
        // short enough that a killed run's lease is waited out quickly.
        let env = env_for(store, &[("LEASE_SECONDS", "3"), ("LOG_LEVEL", "warn")]);
        std::process::Command::new(bin)
            .args(["run", "--now", NOW])
            .envs(&env)
            .env("AWS_ENDPOINT_URL", endpoint())
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env_remove("AWS_LAMBDA_RUNTIME_API")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    // The kill instants are fractions of how long one whole run takes here
    // (timed on a twin bucket), so that runs are cut on a fast machine too.
    let t0 = std::time::Instant::now();
    assert_eq!(spawn_for(&twin).wait().unwrap().code(), Some(0));
    let whole_ms = t0.elapsed().as_millis().max(50) as u64;
    let spawn = || spawn_for(&store);
    let mut seed: u64 = 0x5eed;
    let mut kills = 0;
    for i in 0..8 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        // The first instant within the first 45% of the twin's time: the
        // twin runs cold (1.3 to 1.6 times a warm whole run, measured here),
        // and a first run left uncut leaves nothing for the others to cut.
        let span = if i == 0 { whole_ms * 2 / 5 } else { whole_ms * 9 / 10 };
        let delay = Duration::from_millis(whole_ms / 20 + (seed >> 33) % span);
        let mut child = spawn();
        tokio::time::sleep(delay).await;
        let killed = child.try_wait().unwrap().is_none();
        if killed {
            child.kill().unwrap();
            kills += 1;
        }
        child.wait().unwrap();
        if killed {
            // The killed run's lease lapses (the CLI reads the system clock).
            tokio::time::sleep(Duration::from_millis(3100)).await;
        }
    }
    assert!(kills > 0, "no run was killed: the archive is too small for the delays");
    let status = spawn().wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_all_compacted(&store, &generated, "2026-07-20", "after the SIGKILLs");
}
