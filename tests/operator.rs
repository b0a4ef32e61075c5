//! Operator commands against a real S3-protocol server (ministack, or moto
//! with `TEST_S3_SERVER=moto`): `run --dry-run` (and the Lambda event
//! `{"dry_run": true}`), `run --date` (and `{"date": ...}`), `status`, and
//! the progress bar's wiring to a real run, and the CLI's logs in a file
//! (plain text). The CLI binary itself is run for `status`, `--dry-run`,
//! `--date`, a whole run and a bad configuration.
//!
//! State that only a crash leaves (a live manifest) is made with the commit
//! protocol's own phases, stopped where a crash would stop them.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Output};

use archive_compaction::app::{Deps, handle};
use archive_compaction::commit;
use archive_compaction::keys::index_prefix;
use archive_compaction::lease::Fence;
use archive_compaction::lease::LeaseGuard;
use archive_compaction::plan::{self, PlannedInput};
use archive_compaction::progress::bar_sink;
use archive_compaction::read;
use archive_compaction::report::{DayReport, Parity, RunReport, Status, StopReason};
use archive_compaction::run::{RunOptions, run};
use archive_compaction::state::Manifest;
use archive_compaction::status::{self, LeaseState, StatusOptions, StatusReport};
use archive_compaction::storage::{PutMode, S3Store};
use chrono::NaiveDate;
use common::*;
use serde_json::{Value, json};

const NOW: &str = "2026-07-22T04:50:00Z";

/// The CLI binary against `store`'s bucket, run to its end.
fn cli(store: &S3Store, args: &[&str]) -> Output {
    cli_command(store, args)
        .output()
        .expect("run the archive-compaction binary")
}

fn stdout_json<T: serde::de::DeserializeOwned>(out: &Output) -> T {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not the expected JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Runs (dry or not) and `status` can be spawned once they own their inputs
/// (the crash tests spawn runs; a lazy iterator held across an await once
/// broke that with "`Send` is not general enough"). Checked at compile time.
#[allow(dead_code)]
fn runs_and_status_can_be_spawned(store: S3Store, cfg: archive_compaction::config::Config) {
    let (s, c) = (store.clone(), cfg.clone());
    tokio::spawn(async move {
        let mut opts = RunOptions::at(at(NOW));
        opts.dry_run = true;
        run(&s, &c, &opts).await
    });
    tokio::spawn(async move {
        let opts = StatusOptions {
            now: at(NOW),
            as_of: at(NOW),
            days: 1,
        };
        status::gather(&store, &cfg, &opts).await.ok()
    });
}

/// How a hand-made commit is left, as a crash would leave it.
enum Crash {
    /// After the manifest, before the output PUT.
    BeforeOutput,
    /// After the output PUT and its verification, before any input delete.
    AfterVerify,
    /// After the output PUT, with the output then replaced by other bytes.
    OutputDiffers,
}

/// Runs the commit phases for the first `n` per-flight files of `date`
/// (skipping `skip`), stopping as `crash` says; returns the manifest key and
/// the manifest.
async fn crashed_commit(
    store: &S3Store,
    date: NaiveDate,
    skip: usize,
    n: usize,
    crash: Crash,
) -> (String, Manifest) {
    let listing = plan::classify_partition(store.list(&index_prefix(date)).await.unwrap());
    let inputs: Vec<PlannedInput> = listing
        .per_flight
        .iter()
        .skip(skip)
        .take(n)
        .map(|(u, m)| PlannedInput {
            meta: m.clone(),
            source: archive_compaction::merge::Source::PerFlight(*u),
        })
        .collect();
    assert_eq!(inputs.len(), n);
    let mut read = read::read_inputs(store, date, &inputs, settings(), &Default::default())
        .await
        .unwrap();
    let p = commit::prepare(date, &mut read, at(NOW), "crashed-run").unwrap();
    commit::create_manifest(store, &p.manifest_key, &p.manifest)
        .await
        .unwrap();
    let output = p.manifest.output.clone().unwrap();
    match crash {
        Crash::BeforeOutput => {}
        Crash::AfterVerify | Crash::OutputDiffers => {
            commit::put_output(
                store,
                &mut Fence(None),
                p.manifest.job_id,
                &output,
                p.body.clone().unwrap(),
            )
            .await
            .unwrap();
            assert_eq!(
                commit::check_output(store, &output).await.unwrap(),
                commit::OutputCheck::Verified
            );
        }
    }
    if let Crash::OutputDiffers = crash {
        let etag = store.head(&output.key).await.unwrap().unwrap().etag;
        store
            .put(
                &output.key,
                b"not the bytes the manifest promised".to_vec().into(),
                PutMode::Update(etag),
                None,
            )
            .await
            .unwrap();
    }
    (p.manifest_key, p.manifest)
}

fn day<'a>(r: &'a RunReport, d: &str) -> &'a DayReport {
    r.days
        .iter()
        .find(|x| x.date == date(d))
        .unwrap_or_else(|| panic!("{d} not in {:?}", r.days))
}

fn recovered(r: &RunReport) -> BTreeSet<(String, String)> {
    r.recovered
        .iter()
        .map(|m| (m.key.clone(), m.action.to_string()))
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
    let garbage = format!(
        "{}019f7d73-f820-702f-b905-8c81d0944996.parquet",
        index_prefix(date("2026-07-19"))
    );
    store
        .put(
            &garbage,
            b"PAR1 truncated".to_vec().into(),
            PutMode::Create,
            None,
        )
        .await
        .unwrap();
    // Multi-row index files that are not Parquet either: one on 07-19 (the
    // plan counts it as multi-row, but it is skipped, not read), one on the
    // mismatching 07-20 (the parity gate reads it for its rows, and skips it).
    let garbage_multi: Vec<String> = ["2026-07-19", "2026-07-20"]
        .iter()
        .map(|d| format!("{}part-0.parquet", index_prefix(date(d))))
        .collect();
    for key in &garbage_multi {
        store
            .put(
                key,
                b"PAR1 not parquet".to_vec().into(),
                PutMode::Create,
                None,
            )
            .await
            .unwrap();
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
    assert_valid(
        "run-report.schema.json",
        &serde_json::to_value(&dry).unwrap(),
    );
    assert_eq!(dry.last_run_status, Status::Mismatch, "{:?}", dry.errors);
    assert_eq!(dry.stop_reason, StopReason::Mismatch);
    // A dry run records no mismatch: its verdict is the day's.
    assert_eq!(dry.mismatch_date, None);
    assert_eq!(
        day(&dry, "2026-07-20").mismatch_uuids,
        generated.missing["2026-07-20"]
    );
    assert_eq!(
        (dry.files_compacted, dry.days_compacted, dry.rows_written),
        (0, 0, 0)
    );
    assert_eq!(
        dry.last_compacted_date, None,
        "a dry run moves no watermark"
    );
    assert_eq!(
        recovered(&dry),
        BTreeSet::from([(manifest_key.clone(), "completed".to_string())])
    );
    assert!(
        dry.recovered[0].detail.contains("would delete 2 input(s)"),
        "{:?}",
        dry.recovered
    );
    let d18 = day(&dry, "2026-07-18");
    assert_eq!(d18.action, "planned");
    assert_eq!(d18.parity, Some(Parity::Passed));
    assert_eq!(
        d18.files_claimed, 2,
        "the inputs recovery would delete first are not planned"
    );
    assert_eq!(
        d18.files_read,
        8 - 2 + 1,
        "6 per-flight files + the verified output"
    );
    assert_eq!(d18.foreign_objects, 5);
    assert!(d18.bytes_read > 0);
    let d19 = day(&dry, "2026-07-19");
    assert_eq!(
        (
            d19.action.as_str(),
            d19.files_read,
            d19.files_read_multi_row,
            d19.files_skipped
        ),
        ("planned", 6, 0, 2),
        "the unreadable multi-row file is skipped, not read"
    );
    assert_eq!(
        skipped_keys(&dry),
        all_garbage,
        "each unreadable file once, the one the parity gate read too"
    );
    let d20 = day(&dry, "2026-07-20");
    assert_eq!(
        (d20.action.as_str(), d20.parity),
        ("mismatch", Some(Parity::Mismatch))
    );
    assert_eq!(d20.flights, 5);
    assert_eq!(
        d20.files_skipped, 1,
        "the file the parity gate could not read"
    );

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
        real.days
            .iter()
            .map(|d| d.action.as_str())
            .collect::<Vec<_>>(),
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
    store
        .put(unreadable, Vec::new().into(), PutMode::Create, None)
        .await
        .unwrap();
    // Quarantined by an earlier run, for a date past the cutoff: reported, not in the way.
    let earlier =
        "_compaction_state/quarantine/2026-07-25/019f0000-0000-7000-8000-000000000002.json";
    store
        .put(earlier, b"{}".to_vec().into(), PutMode::Create, None)
        .await
        .unwrap();
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
    assert_valid(
        "run-report.schema.json",
        &serde_json::to_value(&dry).unwrap(),
    );
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
    assert_valid(
        "run-report.schema.json",
        &serde_json::to_value(&real).unwrap(),
    );
    assert_eq!(plan_view(&real), plan_view(&dry));
    let after = dump(&store, "");
    for d in ["2026-07-18", "2026-07-19"] {
        assert_compacted(&after, d, &generated.rows[d]);
    }
    assert!(!after.contains_key(&bad_output));
    assert!(after.contains_key(&unreadable.replace("/manifests/", "/quarantine/")));
}

#[tokio::test]
async fn status_shows_the_mismatch_manifests_quarantine_and_lease_and_writes_nothing() {
    init_logs();
    let store = bucket("op-status").await;
    let generated = generate(
        &store,
        json!({"seed": 83, "days": [
            {"date": "2026-07-18", "flights": 6},
            {"date": "2026-07-19", "flights": 5, "unindexed": 2},
            {"date": "2026-07-20", "flights": 4},
            {"date": "2026-07-21", "flights": 3, "foreign": true}
        ]}),
    );
    let cfg = config(&store, &[]);
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    let (manifest_key, manifest) =
        crashed_commit(&store, date("2026-07-20"), 0, 2, Crash::AfterVerify).await;
    let quarantined =
        "_compaction_state/quarantine/2026-07-21/019f0000-0000-7000-8000-000000000001.json";
    store
        .put(quarantined, Vec::new().into(), PutMode::Create, None)
        .await
        .unwrap();
    let lease = LeaseGuard::acquire(
        &store,
        "run-in-progress",
        std::time::Duration::from_secs(300),
    )
    .await
    .unwrap();
    let before = dump(&store, "");

    // --now one day later: cutoff 2026-07-21.
    let later = "2026-07-23T04:50:00Z";
    let out = cli(&store, &["status", "--json", "--now", later, "--days", "5"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = stdout_json(&out);
    assert_valid("status.schema.json", &json);
    let s: StatusReport = serde_json::from_value(json).unwrap();
    assert_eq!(s.bucket, store.bucket());
    assert_eq!(s.cutoff, Some(date("2026-07-21")));
    assert_eq!(s.watermark, Some(date("2026-07-18")));
    assert_eq!(s.watermark_lag_days, Some(3));
    assert_eq!(s.next_date, Some(date("2026-07-19")));
    assert_eq!(s.lease.state, LeaseState::Held);
    assert_eq!(s.lease.holder.as_deref(), Some("run-in-progress"));
    assert!(s.lease.expires_in_seconds.unwrap() > 200);
    assert_eq!(s.manifests.len(), 1);
    let m = &s.manifests[0];
    assert_eq!(m.key, manifest_key);
    assert_eq!(m.date, Some(date("2026-07-20")));
    assert!(m.readable);
    assert_eq!(m.job_id, Some(manifest.job_id));
    assert_eq!(m.inputs, 2);
    assert_eq!(
        m.output_key,
        manifest.output.as_ref().map(|o| o.key.clone())
    );
    assert!((0..600).contains(&m.age_seconds), "{m:?}");
    assert_eq!(s.quarantined.len(), 1);
    assert_eq!(s.quarantined[0].key, quarantined);
    assert_eq!(s.quarantined[0].date, Some(date("2026-07-21")));
    assert_eq!(s.quarantined[0].size, 0);
    let mm = s.mismatch.as_ref().expect("the mismatch is shown");
    assert_eq!(mm.date, date("2026-07-19"));
    assert_eq!(mm.mismatch_runs, 1);
    assert_eq!(mm.flights, 5);
    assert_eq!(mm.missing_uuids, generated.missing["2026-07-19"]);
    assert_eq!(mm.missing_uuid_count, 2);
    let counts: Vec<_> = s
        .next_days
        .iter()
        .map(|d| {
            (
                d.date.to_string(),
                d.counts.flights,
                d.counts.per_flight_files,
                d.counts.compacted_files,
                d.counts.foreign_objects,
                d.blocked_by.is_some(),
            )
        })
        .collect();
    assert_eq!(
        counts,
        vec![
            ("2026-07-19".to_string(), 5, 3, 0, 0, false),
            ("2026-07-20".to_string(), 4, 4, 1, 0, false),
            ("2026-07-21".to_string(), 3, 3, 0, 5, true),
        ],
        "up to --days dates, none past the cutoff"
    );
    assert!(s.errors.is_empty(), "{:?}", s.errors);

    // The same, for a person.
    let out = cli(&store, &["status", "--now", later]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<String> = vec![
        "watermark    2026-07-18".into(),
        "cutoff       2026-07-21 (now 2026-07-23T04:50:00Z, LAG_DAYS 2)".into(),
        "lag          3 days behind the cutoff".into(),
        "lease        held until ".into(),
        ", by run-in-progress: a run under way, or one that may have died".into(),
        "manifests    1 live".into(),
        "quarantined  1 ".into(),
        "mismatch     2026-07-19 (blocked 1 run(s)): 2 of 5 flights without an index row:".into(),
        format!("  {}\n", generated.missing["2026-07-19"][0]),
        format!("  {manifest_key}  age "),
        format!("  {:<10}  {:>8}  {:>10}", "2026-07-21", 3, 3),
        format!("blocked: quarantined manifest {quarantined}"),
    ];
    for line in &lines {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }

    assert_eq!(
        dump(&store, ""),
        before,
        "status changed the bucket (_compaction_state/ included)"
    );
    lease.release().await.unwrap();
}

#[tokio::test]
async fn status_of_a_fresh_bucket_and_of_an_unreadable_watermark() {
    init_logs();
    let store = bucket("op-status-fresh").await;
    generate(
        &store,
        json!({"seed": 84, "days": [
            {"date": "2026-07-18", "flights": 3},
            {"date": "2026-07-19", "flights": 2}
        ]}),
    );
    let cfg = config(&store, &[]);
    let opts = StatusOptions {
        now: at(NOW),
        as_of: at(NOW),
        days: 5,
    };
    let s = status::gather(&store, &cfg, &opts).await.unwrap();
    assert_eq!(s.watermark, None);
    // No watermark: the lag counts from the first date to compact (07-18,
    // 07-19, 07-20), as the run's WatermarkLagDays does.
    assert_eq!(s.watermark_lag_days, Some(3));
    assert_eq!(
        s.next_date,
        Some(date("2026-07-18")),
        "the earliest partition"
    );
    assert_eq!(s.lease.state, LeaseState::Free);
    assert!(s.manifests.is_empty() && s.quarantined.is_empty() && s.mismatch.is_none());
    assert_eq!(
        s.next_days
            .iter()
            .map(|d| (
                d.date.to_string(),
                d.counts.flights,
                d.counts.per_flight_files
            ))
            .collect::<Vec<_>>(),
        vec![
            ("2026-07-18".to_string(), 3, 3),
            ("2026-07-19".to_string(), 2, 2),
            ("2026-07-20".to_string(), 0, 0),
        ]
    );
    assert_valid("status.schema.json", &serde_json::to_value(&s).unwrap());
    let two = status::gather(
        &store,
        &cfg,
        &StatusOptions {
            days: 2,
            ..opts.clone()
        },
    )
    .await
    .unwrap();
    assert_eq!(two.next_days.len(), 2);

    store
        .put(
            "_compaction_state/watermark.json",
            b"{not json".to_vec().into(),
            PutMode::Create,
            None,
        )
        .await
        .unwrap();
    let s = status::gather(&store, &cfg, &opts).await.unwrap();
    assert!(
        s.errors[0].contains("_compaction_state/watermark.json"),
        "{:?}",
        s.errors
    );
    assert!(s.next_days.is_empty());
    let out = cli(&store, &["status", "--now", NOW]);
    assert_eq!(out.status.code(), Some(1), "errors make status exit 1");
    assert!(String::from_utf8_lossy(&out.stdout).contains("errors\n"));
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
    let late = generate(
        &store,
        json!({"seed": 86, "days": [{"date": "2026-07-18", "flights": 3}]}),
    );
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
    assert_eq!(
        dump(&store, wm_key),
        wm_before,
        "the watermark file was written"
    );
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
    assert_eq!(
        r.last_compacted_date,
        Some(date("2026-07-18")),
        "{:?}",
        r.errors
    );
    let wm_key = "_compaction_state/watermark.json";
    let wm_before = dump(&store, wm_key);

    // watermark + 1, and a date past the cutoff, through the binary.
    for d in ["2026-07-19", "2026-07-21"] {
        let out = cli(
            &store,
            &["run", "--date", d, "--now", "2026-07-20T04:50:00Z"],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: RunReport = stdout_json(&out);
        assert_eq!(r.days.len(), 1);
        assert_eq!(r.days[0].action, "compacted");
        assert_eq!(r.stop_reason, StopReason::EndOfRange, "--date {d}");
        assert_eq!(r.last_compacted_date, Some(date("2026-07-18")));
        assert_eq!(
            dump(&store, wm_key),
            wm_before,
            "--date {d} wrote the watermark"
        );
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
            (
                "2026-07-19".to_string(),
                "nothing_to_compact",
                Some(Parity::Passed)
            ),
            ("2026-07-20".to_string(), "compacted", Some(Parity::Passed)),
            (
                "2026-07-21".to_string(),
                "nothing_to_compact",
                Some(Parity::Passed)
            ),
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
    assert!(
        logs.contains("date done"),
        "per-date progress in the logs:\n{logs}"
    );
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

/// Logs written to a file (stderr redirected: not a terminal) are plain
/// text, without one escape byte (terminal colours are `ESC [ ... m`), for a
/// real run (INFO lines, one `date done` per date, the empty 2026-07-19
/// included) and for a bad configuration (an ERROR line). `NO_COLOR` is
/// removed from the environment so that only the terminal check decides.
#[tokio::test]
async fn logs_written_to_a_file_carry_no_escape_codes() {
    init_logs();
    let store = bucket("op-logs").await;
    generate(
        &store,
        json!({"seed": 89, "days": [
            {"date": "2026-07-18", "flights": 3},
            {"date": "2026-07-20", "flights": 2}
        ]}),
    );
    let dir = tempfile::tempdir().unwrap();
    let read_log = |name: &str, cmd: &mut Command| -> (Output, String) {
        let path = dir.path().join(name);
        let file = std::fs::File::create(&path).unwrap();
        let out = cmd
            .env_remove("NO_COLOR")
            .stderr(file)
            .output()
            .expect("run the archive-compaction binary");
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        assert!(
            !bytes.contains(&0x1b),
            "{name}: escape bytes in a log file:\n{}",
            text.escape_debug()
        );
        (out, text)
    };

    let (out, log) = read_log("run.log", &mut cli_command(&store, &["run", "--now", NOW]));
    assert_eq!(out.status.code(), Some(0), "run failed:\n{log}");
    let r: RunReport = stdout_json(&out);
    assert_eq!(r.days.len(), 3, "{r:?}");
    assert_eq!(
        log.matches("date done").count(),
        3,
        "one line per date:\n{log}"
    );
    assert!(log.contains(" INFO "), "plain level names:\n{log}");

    let mut bad = cli_command(&store, &["run", "--now", NOW]);
    bad.env_remove("S3_BUCKET");
    let (out, log) = read_log("bad-config.log", &mut bad);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        log.contains("ERROR") && log.contains("bad configuration") && log.contains("S3_BUCKET"),
        "the configuration error is logged:\n{log}"
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
        r.days
            .iter()
            .map(|d| (d.action.as_str(), d.files_read))
            .collect::<Vec<_>>(),
        [("planned", 4), ("planned", 3), ("nothing_to_compact", 0)]
    );
    assert_eq!(
        dump(&store, ""),
        before,
        "the dry-run event changed the bucket"
    );

    let r = handle(&deps, event(json!({"date": "2026-07-19", "now": NOW})))
        .await
        .unwrap_or_else(|e| panic!("{:?}", e.0));
    assert_eq!(r.days.len(), 1);
    assert_eq!(r.days[0].action, "compacted");
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-19", &generated.rows["2026-07-19"]);
    assert_eq!(
        watermark(&after),
        None,
        "the date event does not write the watermark"
    );
    for k in &generated.index_keys["2026-07-18"] {
        assert_eq!(after.get(k), before.get(k));
    }
}

#[tokio::test]
async fn the_progress_bar_follows_a_real_run() {
    let store = bucket("op-progress").await;
    generate(
        &store,
        json!({"seed": 90, "days": [
            {"date": "2026-07-18", "flights": 3},
            {"date": "2026-07-19", "flights": 2},
            {"date": "2026-07-20", "flights": 2}
        ]}),
    );
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::hidden());
    let mut opts = RunOptions::at(at(NOW));
    opts.progress = Some(bar_sink(bar.clone()));
    let r = run(&store, &config(&store, &[]), &opts).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!((bar.position(), bar.length()), (3, Some(3)));
    assert!(bar.is_finished(), "the end of the run clears the bar");
    assert!(
        bar.message().starts_with("2026-07-20 compacted: 2 files, "),
        "{}",
        bar.message()
    );
}

/// How the tests read a day: 4 GETs at once, row groups of 1,024 rows, the
/// default input budget.
fn settings() -> read::ReadSettings {
    read::ReadSettings {
        concurrency: 4,
        row_group_rows: 1024,
        budget: Default::default(),
    }
}

/// A per-flight index file cut in half, on a date not yet
/// compacted, is its flight's missing index row. The walk stops there as a
/// Mismatch naming the file and why (exit 2), the watermark stays before
/// the date, `--date`, a range and a dry run say the same, `status` names
/// the file, `audit` counts the flight missing and the file unreadable; the
/// date's readable flights are folded and nothing of the cut file is
/// merged or deleted. Rewritten readable (what the
/// archive writer does from the flight object), the next run passes it.
#[tokio::test]
async fn an_unreadable_per_flight_file_is_a_mismatch_until_it_is_rewritten() {
    init_logs();
    let store = bucket("op-unreadable").await;
    let generated = generate(
        &store,
        json!({"seed": 138, "days": [
            {"date": "2026-07-19", "flights": 3},
            {"date": "2026-07-20", "flights": 4}
        ]}),
    );
    let cut_key = generated.index_keys["2026-07-20"][0].clone();
    let flight = flight_uuid(&cut_key).to_string();
    let whole = store.get_opt(&cut_key).await.unwrap().unwrap();
    let half = whole.body.slice(..whole.body.len() / 2);
    store
        .put(
            &cut_key,
            half.clone(),
            PutMode::Update(whole.etag.clone()),
            None,
        )
        .await
        .unwrap();
    let before_20 = dump(&store, &index_prefix(date("2026-07-20")));

    let out = cli(&store, &["run", "--now", NOW]);
    assert_eq!(out.status.code(), Some(2), "a Mismatch, not a Success");
    let r: RunReport = stdout_json(&out);
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::Mismatch);
    assert_eq!(r.mismatch_date, Some(date("2026-07-20")));
    assert_eq!(r.mismatch_uuids, vec![flight.clone()]);
    assert_eq!(
        r.last_compacted_date,
        Some(date("2026-07-19")),
        "the watermark stays before the date"
    );
    let d20 = day(&r, "2026-07-20");
    assert_eq!(
        (d20.action.as_str(), d20.parity),
        ("mismatch", Some(Parity::Mismatch))
    );
    assert_eq!(d20.unread_files.len(), 1, "{d20:?}");
    assert_eq!(d20.unread_files[0].key, cut_key);
    assert_eq!(d20.unread_files[0].flight.to_string(), flight);
    assert!(!d20.unread_files[0].reason.is_empty());
    assert!(
        d20.reason.contains(&cut_key) && d20.reason.contains("cannot be read"),
        "{}",
        d20.reason
    );
    assert_valid("run-report.schema.json", &serde_json::to_value(&r).unwrap());
    // The other three flights are folded (they do not wait on the cut
    // file); the cut file stays as it was, never an input.
    let after_first = dump(&store, &index_prefix(date("2026-07-20")));
    assert_eq!(
        after_first.get(&cut_key),
        before_20.get(&cut_key),
        "the cut file stays as it was"
    );
    let compacted: Vec<&String> = (after_first.keys())
        .filter(|k| k.contains("/compacted-"))
        .collect();
    assert_eq!(after_first.len(), 2, "{after_first:?}");
    assert_eq!(compacted.len(), 1, "{after_first:?}");
    let rows = after_first[compacted[0]].rows.clone().unwrap();
    assert_eq!(rows.len(), 3, "the day's readable flights: {rows:?}");
    assert!(
        (rows.iter()).all(|r| !r["s3_key"].as_str().unwrap_or("").contains(&flight)),
        "the cut file's flight is not in the compacted file: {rows:?}"
    );

    // `--date`, a range and a dry run see the same.
    for args in [
        &["run", "--date", "2026-07-20", "--now", NOW][..],
        &[
            "run",
            "--from",
            "2026-07-20",
            "--to",
            "2026-07-20",
            "--now",
            NOW,
        ],
        &["run", "--dry-run", "--now", NOW],
    ] {
        let out = cli(&store, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let r: RunReport = stdout_json(&out);
        let d20 = day(&r, "2026-07-20");
        assert_eq!(d20.action, "mismatch", "{args:?}");
        assert_eq!(d20.mismatch_uuids, vec![flight.clone()], "{args:?}");
        assert_eq!(d20.unread_files[0].key, cut_key, "{args:?}");
    }
    assert_eq!(
        dump(&store, &index_prefix(date("2026-07-20"))),
        after_first,
        "{cut_key} and its date untouched"
    );

    // `status` names the file and says why the walk is blocked.
    let cfg = config(&store, &[]);
    let opts = StatusOptions {
        now: at(NOW),
        as_of: at(NOW),
        days: 2,
    };
    let s = status::gather(&store, &cfg, &opts).await.unwrap();
    let m = s.mismatch.as_ref().expect("the recorded mismatch");
    assert_eq!(m.date, date("2026-07-20"));
    assert_eq!(
        m.cause,
        Some(status::MismatchCause::UnreadablePerFlightFile)
    );
    assert_eq!(m.missing_uuids, vec![flight.clone()]);
    assert_eq!(m.unread_files[0].key, cut_key);
    assert_valid("status.schema.json", &serde_json::to_value(&s).unwrap());
    let text = status::format_human(&s);
    assert!(text.contains(&cut_key), "{text}");

    // `audit` reads the file: its flight is missing, the file unreadable.
    let a = archive_compaction::audit::audit(
        &store,
        &cfg,
        &archive_compaction::audit::AuditOptions::range(date("2026-07-20"), date("2026-07-20")),
    )
    .await
    .unwrap();
    let f = &a.totals.findings;
    assert_eq!(f.missing.count, 1, "{f:#?}");
    assert_eq!(f.missing.examples[0].flight.to_string(), flight);
    assert_eq!(f.unreadable_files.count, 1, "{f:#?}");
    assert_eq!(f.unreadable_files.examples[0].file, cut_key);
    assert!(
        f.unreadable_files
            .fix
            .as_deref()
            .unwrap()
            .contains("rewrites")
    );

    // The fix: the index file rewritten readable; the next run passes it.
    let now = store.head(&cut_key).await.unwrap().unwrap();
    store
        .put(
            &cut_key,
            whole.body.clone(),
            PutMode::Update(now.etag),
            None,
        )
        .await
        .unwrap();
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-20")));
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-20", &generated.rows["2026-07-20"]);
}

/// A migration's range dry run over months of empty dates lists
/// the one date with work first, not after 100 empty ones it cuts it from.
#[tokio::test]
async fn a_range_dry_run_lists_the_dates_with_work_first() {
    init_logs();
    let store = bucket("op-range-plan").await;
    generate(
        &store,
        json!({"seed": 139, "days": [{"date": "2026-07-20", "flights": 3}]}),
    );
    let out = cli(
        &store,
        &[
            "run",
            "--from",
            "2026-03-01",
            "--to",
            "2026-07-20",
            "--dry-run",
            "--now",
            NOW,
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let r: RunReport = stdout_json(&out);
    assert_eq!(r.days_total, 142);
    assert!(r.days_truncated);
    assert_eq!(
        (
            r.days[0].date,
            r.days[0].action.as_str(),
            r.days[0].files_read
        ),
        (date("2026-07-20"), "planned", 3),
        "{:?}",
        r.days.iter().take(3).collect::<Vec<_>>()
    );
    assert!(
        (r.days[1..].iter()).all(|d| d.action == "nothing_to_compact"),
        "then the empty ones"
    );
    assert_eq!(r.days[1].date, date("2026-03-01"), "in date order");
}
