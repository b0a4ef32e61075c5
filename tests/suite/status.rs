//! `status` says what is true of a bucket and writes nothing, against a real
//! S3-protocol server (ministack, or moto with `TEST_S3_SERVER=moto`):
//!
//! - it re-checks a recorded mismatch with the run's own parity gate, so a
//!   zero-row per-flight file still shows as failing;
//! - it shows the mismatch, the live and quarantined manifests and the lease;
//! - a fresh bucket and an unreadable watermark each get a status;
//! - it and the dry run's recovery agree about each manifest: unreadable,
//!   breaking a rule, stuck, or quarantined earlier;
//! - it always prints a status (`--json`: valid against
//!   `specs/status.schema.json`), errors first.
//!
//! Runs and `status` can be spawned on a runtime (checked at compile time).

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::commands::status::{self, LeaseState, StatusOptions, StatusReport};
use archive_compaction::data::report::Status;
use archive_compaction::infra::storage::{PutMode, S3Store};
use archive_compaction::protocol::lease::LeaseGuard;
use serde_json::{Value, json};

#[tokio::test]
async fn status_predicts_the_zero_row_mismatch_the_run_keeps_stopping_on() {
    init_logs();
    let (store, v) =
        variants_bucket("tr-status-zero", 2705, "2026-07-20", &["zero_rows", "default", "default"])
            .await;
    let zero_uuid = flight_uuid(v["zero_rows"]["key"].as_str().unwrap());
    let cfg = config(&store, &[]);
    let now = "2026-07-22T04:50:00Z";
    for event in ["e1", "e2"] {
        let r = run(&store, &cfg, &opts_with_event(now, event)).await;
        assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
        assert_eq!(r.mismatch_uuids, [zero_uuid]);
    }
    let s = status::gather(&store, &cfg, &status_opts(now)).await.unwrap();
    assert_valid("status.schema.json", &serde_json::to_value(&s).unwrap());
    let m = s.mismatch.as_ref().expect("the recorded mismatch");
    assert_eq!(m.date, date("2026-07-20"));
    assert_eq!(m.mismatch_runs, 2);
    assert_eq!(m.missing_uuids, [zero_uuid], "status must say it still fails");
    assert_eq!(m.missing_uuid_count, 1);
    assert_eq!(
        m.cause,
        Some(archive_compaction::protocol::partition::ParityCause::PerFlightFileWithoutOwnRow)
    );
    let text = status::format_human(&s);
    assert!(
        text.contains("3 flights: 1 flight(s) whose per-flight file holds no row of theirs"),
        "{text}"
    );
    assert!(!text.contains("the next run passes it"), "{text}");
    // And the next run does stop there again.
    let r = run(&store, &cfg, &opts_with_event(now, "e3")).await;
    assert_eq!(r.last_run_status, Status::Mismatch);
    assert_eq!(r.mismatch_runs, 3);
}

#[tokio::test]
async fn status_always_prints_a_status_with_the_errors_first() {
    init_logs();
    let store = bucket("tr-status-errors").await;
    generate(&store, json!({"seed": 2710, "days": [{"date": "2026-07-18", "flights": 2}]}));
    // S3_BUCKET unset: a status, not a run report.
    let out = cli_command(&store, &["status", "--json"]).env_remove("S3_BUCKET").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
    });
    assert_valid("status.schema.json", &v);
    assert!(v.get("last_run_status").is_none(), "a run report: {v}");
    let s: StatusReport = serde_json::from_value(v).unwrap();
    assert!(s.errors[0].contains("S3_BUCKET"), "{:?}", s.errors);
    assert!(s.state_unreadable && s.bucket_unreadable);
    assert_eq!(s.lease.state, status::LeaseState::Unknown, "never \"free\"");
    let out = cli_command(&store, &["status"]).env_remove("S3_BUCKET").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("errors\n  setting S3_BUCKET"), "{text}");

    // An S3 error (a bucket that does not exist): a status too, one-line error.
    let out = cli_command(&store, &["status", "--json"])
        .env("S3_BUCKET", "tr-no-such-bucket-2710")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid("status.schema.json", &v);
    let e = v["errors"][0].as_str().unwrap();
    assert!(!e.contains('\n') && e.len() < 400, "{e}");

    // An invalid watermark: errors first, the watermark unknown, never "none".
    store.put(WATERMARK, b"{not json".to_vec().into(), PutMode::Create, None).await.unwrap();
    let out = cli_command(&store, &["status", "--now", "2026-07-22T04:50:00Z"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("errors\n  state file s3://"), "{text}");
    assert!(text.contains("watermark    unknown"), "{text}");
    assert!(!text.contains("nothing compacted yet"), "{text}");
    assert!(!text.contains("none due"), "{text}");
    let out = cli_command(&store, &["status", "--json"]).output().unwrap();
    assert_valid("status.schema.json", &serde_json::from_slice(&out.stdout).unwrap());
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
    store.put(quarantined, Vec::new().into(), PutMode::Create, None).await.unwrap();
    let lease = LeaseGuard::acquire(&store, "run-in-progress", std::time::Duration::from_secs(300))
        .await
        .unwrap();
    let before = dump(&store, "");

    // --now one day later: cutoff 2026-07-21.
    let later = "2026-07-23T04:50:00Z";
    let out = cli(&store, &["status", "--json", "--now", later, "--days", "5"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
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
    assert_eq!(m.output_key, manifest.output.as_ref().map(|o| o.key.clone()));
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
    // The next date's plan, by the run's planner: its 3 per-flight files in one part.
    let plan = s.next_days[0].plan.as_ref().expect("the next date's plan");
    let part = (plan.parts.iter()).map(|p| (p.pass, p.files, p.committed)).collect::<Vec<_>>();
    assert_eq!((part, plan.parts_planned), (vec![(1, 3, false)], 1));
    assert!(plan.parts[0].bytes > 0 && plan.parts[0].estimate_mb > 0, "{plan:?}");
    assert!(s.next_days[1..].iter().all(|d| d.plan.is_none()), "the first date's only");
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
        "mismatch     2026-07-19 (blocked 1 run(s)), 5 flights: 2 flight(s) without an index row; the next run stops here again:".into(),
        format!("  {}\n", generated.missing["2026-07-19"][0]),
        format!("  {manifest_key}  age "),
        format!("  {:<10}  {:>8}  {:>10}", "2026-07-21", 3, 3),
        format!("blocked: quarantined manifest {quarantined}"),
    ];
    for line in &lines {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }

    assert_eq!(dump(&store, ""), before, "status changed the bucket (_compaction_state/ included)");
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
    let opts = StatusOptions { now: at(NOW), as_of: at(NOW), days: 5 };
    let s = status::gather(&store, &cfg, &opts).await.unwrap();
    assert_eq!(s.watermark, None);
    // No watermark: the lag counts from the first date to compact (07-18,
    // 07-19, 07-20), as the run's WatermarkLagDays does.
    assert_eq!(s.watermark_lag_days, Some(3));
    assert_eq!(s.next_date, Some(date("2026-07-18")), "the earliest partition");
    assert_eq!(s.lease.state, LeaseState::Free);
    assert!(s.manifests.is_empty() && s.quarantined.is_empty() && s.mismatch.is_none());
    assert_eq!(
        s.next_days
            .iter()
            .map(|d| (d.date.to_string(), d.counts.flights, d.counts.per_flight_files))
            .collect::<Vec<_>>(),
        vec![
            ("2026-07-18".to_string(), 3, 3),
            ("2026-07-19".to_string(), 2, 2),
            ("2026-07-20".to_string(), 0, 0),
        ]
    );
    assert_valid("status.schema.json", &serde_json::to_value(&s).unwrap());
    let two =
        status::gather(&store, &cfg, &StatusOptions { days: 2, ..opts.clone() }).await.unwrap();
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
    assert!(s.errors[0].contains("_compaction_state/watermark.json"), "{:?}", s.errors);
    assert!(s.next_days.is_empty());
    let out = cli(&store, &["status", "--now", NOW]);
    assert_eq!(out.status.code(), Some(1), "errors make status exit 1");
    assert!(String::from_utf8_lossy(&out.stdout).contains("errors\n"));
}

/// A versioned bucket keeps every per-flight file compaction deletes:
/// `status` says so until the lifecycle rules of docs/deploying.md
/// ("Versioned buckets") are set, and flags a rule that would expire
/// current index objects. The rules are the doc's own JSON, put with the
/// SDK. Needs ministack: moto answers GetBucketVersioning with the root
/// element `GetBucketVersioningResponse` where AWS documents
/// `VersioningConfiguration`, and the SDK refuses it.
#[tokio::test]
async fn status_flags_a_versioned_bucket_without_its_lifecycle_rules() {
    if s3_kind() != "ministack" {
        eprintln!(
            "skipped: needs ministack (moto's GetBucketVersioning answer is not AWS's documented one)"
        );
        return;
    }
    init_logs();
    let store = bucket("op-status-versioned").await;
    let v = status::versioning(&store).await;
    assert_eq!(v.error, None);
    assert_eq!(v.versioning, None, "a new bucket is not versioned");
    assert_eq!(v.advice, None, "{v:?}");

    use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
    store
        .client()
        .put_bucket_versioning()
        .bucket(store.bucket())
        .versioning_configuration(
            VersioningConfiguration::builder().status(BucketVersioningStatus::Enabled).build(),
        )
        .send()
        .await
        .unwrap();
    let v = status::versioning(&store).await;
    assert_eq!(v.versioning.as_deref(), Some("Enabled"));
    assert_eq!(v.noncurrent_kept, ["index/", "_compaction_state/"]);
    assert_eq!(v.delete_markers_kept, ["index/", "_compaction_state/"]);
    let advice = v.advice.as_deref().unwrap();
    assert!(advice.contains("Versioned buckets"), "{advice}");
    // The CLI shows it, and --json is valid against the schema; not an error.
    let out = cli(&store, &["status", "--now", NOW]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("versioning   NEEDS A RULE: the bucket is versioned (Enabled)"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    let out = cli(&store, &["status", "--now", NOW, "--json"]);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid("status.schema.json", &json);
    assert_eq!(json["versioning"]["noncurrent_kept"], json!(["index/", "_compaction_state/"]));

    // The doc's rules, as written there.
    let doc = std::fs::read_to_string(root().join("docs/deploying.md")).unwrap();
    let section = &doc[doc.find("## Versioned buckets").unwrap()..];
    let rules_json = &section[section.find("```json\n").unwrap() + 8..];
    let rules_json: Value =
        serde_json::from_str(&rules_json[..rules_json.find("```").unwrap()]).unwrap();
    put_lifecycle(&store, &rules_json).await;
    let v = status::versioning(&store).await;
    assert_eq!(v.advice, None, "{v:?}");
    assert!(v.noncurrent_kept.is_empty() && v.delete_markers_kept.is_empty(), "{v:?}");
    let out = cli(&store, &["status", "--now", NOW]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("versioning   Enabled, noncurrent versions")
    );

    // Without the delete-marker action on the state prefix, and with a rule
    // that expires current objects under index/.
    let mut rules = rules_json.clone();
    rules["Rules"][1].as_object_mut().unwrap().remove("Expiration");
    rules["Rules"]
        .as_array_mut()
        .unwrap()
        .push(json!({"ID": "expire-all", "Status": "Enabled", "Filter": {"Prefix": "index/year=2020/"}, "Expiration": {"Days": 30}}));
    put_lifecycle(&store, &rules).await;
    let v = status::versioning(&store).await;
    assert!(v.noncurrent_kept.is_empty(), "{v:?}");
    assert_eq!(v.delete_markers_kept, ["_compaction_state/"]);
    assert_eq!(v.current_expired, ["index/"]);
    assert!(v.advice.unwrap().contains("expires current objects under index/"));
}

/// Puts `rules` (the JSON of `put-bucket-lifecycle-configuration`: `Rules`
/// with `ID`, `Status`, `Filter.Prefix`, `NoncurrentVersionExpiration`,
/// `Expiration`, `AbortIncompleteMultipartUpload`) on `store`'s bucket.
async fn put_lifecycle(store: &S3Store, rules: &Value) {
    use aws_sdk_s3::types::*;
    let mut config = BucketLifecycleConfiguration::builder();
    for r in rules["Rules"].as_array().unwrap() {
        let mut rule = LifecycleRule::builder()
            .id(r["ID"].as_str().unwrap())
            .status(ExpirationStatus::from(r["Status"].as_str().unwrap()))
            .filter(
                LifecycleRuleFilter::builder()
                    .prefix(r["Filter"]["Prefix"].as_str().unwrap())
                    .build(),
            );
        if let Some(days) = r["NoncurrentVersionExpiration"]["NoncurrentDays"].as_i64() {
            rule = rule.noncurrent_version_expiration(
                NoncurrentVersionExpiration::builder().noncurrent_days(days as i32).build(),
            );
        }
        let e = &r["Expiration"];
        if let Some(markers) = e["ExpiredObjectDeleteMarker"].as_bool() {
            rule = rule.expiration(
                LifecycleExpiration::builder().expired_object_delete_marker(markers).build(),
            );
        }
        if let Some(days) = e["Days"].as_i64() {
            rule = rule.expiration(LifecycleExpiration::builder().days(days as i32).build());
        }
        if let Some(days) = r["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"].as_i64() {
            rule = rule.abort_incomplete_multipart_upload(
                AbortIncompleteMultipartUpload::builder()
                    .days_after_initiation(days as i32)
                    .build(),
            );
        }
        config = config.rules(rule.build().unwrap());
    }
    store
        .client()
        .put_bucket_lifecycle_configuration()
        .bucket(store.bucket())
        .lifecycle_configuration(config.build().unwrap())
        .send()
        .await
        .unwrap();
}

/// Runs (dry or not) and `status` can be spawned once they own their inputs
/// (the crash tests spawn runs; a lazy iterator held across an await once
/// broke that with "`Send` is not general enough"). Checked at compile time.
#[allow(dead_code)]
fn runs_and_status_can_be_spawned(store: S3Store, cfg: archive_compaction::data::config::Config) {
    let (s, c) = (store.clone(), cfg.clone());
    tokio::spawn(async move {
        let mut opts = RunOptions::at(at(NOW));
        opts.dry_run = true;
        run(&s, &c, &opts).await
    });
    tokio::spawn(async move {
        let opts = StatusOptions { now: at(NOW), as_of: at(NOW), days: 1 };
        status::gather(&store, &cfg, &opts).await.ok()
    });
}

/// One bucket, two commands, one owner of what a manifest is
/// (`protocol::manifest`): `status` and the dry run's recovery
/// (`recovery::assess`) name the same verdict for an unreadable manifest,
/// one whose date is not its key's, a stuck one and one quarantined
/// earlier, and both block the stuck date.
#[tokio::test]
async fn status_and_the_dry_run_agree_about_each_manifest() {
    use archive_compaction::data::input::Budget;
    use archive_compaction::data::keys::stuck_key;
    use archive_compaction::protocol::manifest::StuckMark;
    use archive_compaction::protocol::recovery;
    use std::collections::BTreeMap;
    init_logs();
    let store = bucket("op-status-agree").await;
    generate(
        &store,
        json!({"seed": 84, "days": [
            {"date": "2026-07-18", "flights": 4},
            {"date": "2026-07-19", "flights": 4},
            {"date": "2026-07-20", "flights": 4}
        ]}),
    );
    let (stuck, m) = crashed_commit(&store, date("2026-07-18"), 0, 2, Crash::AfterVerify).await;
    let mark = StuckMark {
        code: "AccessDenied".into(),
        first_key: m.inputs[0].key.clone(),
        inputs_not_deleted: 2,
        manifest: stuck.clone(),
        message: "Access Denied".into(),
    };
    let put = |key: String, body: Vec<u8>| {
        let store = &store;
        async move { store.put(&key, body.into(), PutMode::Create, None).await.unwrap() }
    };
    put(stuck_key(&stuck), serde_json::to_vec(&mark).unwrap()).await;
    let unreadable =
        "_compaction_state/manifests/2026-07-19/019f0000-0000-7000-8000-000000000000.json";
    put(unreadable.into(), Vec::new()).await;
    // The stuck manifest's body under another date: a rule it breaks.
    let misdated = stuck.replace("/2026-07-18/", "/2026-07-20/");
    put(misdated.clone(), serde_json::to_vec(&m).unwrap()).await;
    let earlier =
        "_compaction_state/quarantine/2026-07-21/019f0000-0000-7000-8000-000000000002.json";
    put(earlier.into(), b"{}".to_vec()).await;
    let cfg = config(&store, &[]);
    let before = dump(&store, "");

    let s = status::gather(&store, &cfg, &status_opts(NOW)).await.unwrap();
    let r = recovery::assess(&store, Budget::DEFAULT).await.unwrap();
    assert_eq!(dump(&store, ""), before, "neither wrote");

    let mut by_status = BTreeMap::new();
    for m in &s.manifests {
        let verdict = match (&m.breaks_rule, m.stuck) {
            _ if !m.readable => "quarantine unreadable".to_string(),
            (Some(rule), _) => format!("quarantine {}", rule.split(':').next().unwrap()),
            (None, true) => "stuck".into(),
            (None, false) => "live".into(),
        };
        by_status.insert(m.key.clone(), verdict);
    }
    for q in &s.quarantined {
        by_status.insert(q.key.clone(), "quarantined_earlier".into());
    }
    let by_recovery: BTreeMap<String, String> = (r.recovered.iter())
        .map(|e| {
            let action = serde_json::to_value(e.action).unwrap();
            let verdict = match action.as_str().unwrap() {
                "quarantined" => {
                    let code = e.detail.split("rule ").nth(1).unwrap();
                    format!("quarantine {}", code.split(':').next().unwrap())
                }
                a @ ("stuck" | "quarantined_earlier") => a.to_string(),
                _ => "live".into(),
            };
            (e.key.clone(), verdict)
        })
        .collect();
    assert_eq!(by_status, by_recovery);
    assert_eq!(
        by_status,
        BTreeMap::from([
            (stuck.clone(), "stuck".to_string()),
            (unreadable.to_string(), "quarantine unreadable".into()),
            (misdated, "quarantine date_not_key_date".into()),
            (earlier.to_string(), "quarantined_earlier".into()),
        ])
    );
    let stuck_by = format!("stuck manifest {stuck}");
    let day = (s.next_days.iter()).find(|d| d.date == date("2026-07-18"));
    assert_eq!(day.unwrap().blocked_by.as_deref(), Some(stuck_by.as_str()));
    let reasons = &r.blocked.dates[&date("2026-07-18")];
    assert!(reasons.iter().any(|b| b.to_string() == stuck_by), "{reasons:?}");
}
