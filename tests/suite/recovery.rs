//! Recovery acts only on what a manifest's own commit wrote,
//! against a real S3-protocol server (ministack, or moto with
//! `TEST_S3_SERVER=moto`; `make test` runs this binary on both).
//!
//! Manifests that parse but name what their commit did not write (another
//! commit's output, their own output as an input, a state file as the
//! output, ...) are quarantined and reported with the rule they break; the
//! bucket is read back with pyarrow to check that every flight is still in
//! its day exactly once, and the watermark and the lease are untouched.
//! Version-1 manifests (outputs not named after the job) still recover.

use std::collections::BTreeMap;

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::input::Budget;
use archive_compaction::data::keys::{
    COMPACTED_PREFIX, LOCK_KEY, MANIFESTS_ROOT, QUARANTINE_ROOT, WATERMARK_KEY, compacted_key,
    index_prefix, manifest_key,
};
use archive_compaction::data::report::{RunReport, Status, StopReason};
use archive_compaction::data::state::{
    MANIFEST_VERSION, MANIFEST_VERSION_1, Manifest, ManifestInput, ManifestOutput,
};
use archive_compaction::infra::storage::{JOB_ID_METADATA, PutMode, S3Store, sha256_b64};
use archive_compaction::protocol::commit;
use archive_compaction::protocol::lease::Fence;
use archive_compaction::protocol::lease::LeaseGuard;
use archive_compaction::protocol::plan::{self, PlannedInput};
use archive_compaction::protocol::read;
use archive_compaction::protocol::recovery::{self, Recovery};
use serde_json::{Value, json};
use uuid::Uuid;

const NOW: &str = "2026-07-22T04:50:00Z";
/// A run at this time stops at 2026-07-19 (LAG_DAYS 2).
const NOW_EARLIER: &str = "2026-07-21T04:50:00Z";
const D19: &str = "2026-07-19";
const D20: &str = "2026-07-20";

/// Two days (5 and 12 flights, 07-20 with foreign objects), compacted by a
/// clean run at `NOW`: each day holds one compacted file, the watermark is 07-20.
async fn compacted_world(hint: &str, seed: u64) -> (S3Store, Generated) {
    let store = bucket(hint).await;
    let generated = generate(
        &store,
        json!({"seed": seed, "days": [
            {"date": D19, "flights": 5},
            {"date": D20, "flights": 12, "foreign": true}
        ]}),
    );
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    (store, generated)
}

/// The one compacted file of `day`, and its job id (its name).
fn compacted_of(objects: &BTreeMap<String, Dumped>, day: &str) -> (String, Dumped, Uuid) {
    let prefix = index_prefix(date(day));
    let found: Vec<_> = objects
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{prefix}{COMPACTED_PREFIX}")))
        .collect();
    assert_eq!(found.len(), 1, "{day}: {found:?}");
    let (key, d) = found[0];
    let id = key
        .strip_prefix(&format!("{prefix}{COMPACTED_PREFIX}"))
        .and_then(|n| n.strip_suffix(".parquet"))
        .unwrap();
    (key.clone(), d.clone(), Uuid::parse_str(id).unwrap())
}

fn manifest(
    version: u32,
    job_id: Uuid,
    day: &str,
    output: Option<ManifestOutput>,
    inputs: Vec<ManifestInput>,
) -> Manifest {
    Manifest {
        schema_version: version,
        job_id,
        date: date(day),
        output,
        inputs,
        created_at: at(NOW),
        invocation_id: "hand-made".into(),
    }
}

fn output(key: &str, size: u64, sha256: &str, rows: u64) -> Option<ManifestOutput> {
    Some(ManifestOutput { key: key.into(), size, sha256: sha256.into(), rows })
}

fn input(key: &str, etag: &str) -> ManifestInput {
    ManifestInput { key: key.into(), etag: etag.into(), size: 100 }
}

/// A UUIDv7 `secs` seconds after `id`'s timestamp (0: the same
/// millisecond, other random bits).
fn minted_after(id: Uuid, secs: u64) -> Uuid {
    let (s, n) = id.get_timestamp().unwrap().to_unix();
    loop {
        let u = Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, s + secs, n));
        if u != id {
            return u;
        }
    }
}

async fn put_json(store: &S3Store, key: &str, v: &impl serde::Serialize) -> Value {
    let body = serde_json::to_vec_pretty(v).unwrap();
    store.put(key, body.into(), PutMode::Create, None).await.unwrap();
    serde_json::to_value(v).unwrap()
}

/// Every row in `day`'s partition (compacted and per-flight files alike)
/// equals `expected`, each flight exactly once.
fn assert_each_flight_once(objects: &BTreeMap<String, Dumped>, day: &str, expected: &[Value]) {
    let prefix = index_prefix(date(day));
    let mut got: Vec<String> = objects
        .iter()
        .filter(|(k, _)| {
            k.starts_with(&prefix) && archive_compaction::data::keys::is_index_input(k)
        })
        .flat_map(|(_, d)| d.rows.clone().unwrap_or_default())
        .map(|r| r.to_string())
        .collect();
    let mut want: Vec<String> = expected.iter().map(|r| r.to_string()).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{day}: rows differ (lost or doubled)");
}

/// A bad manifest and what recovery must say about it.
struct Bad {
    key: String,
    body: Value,
    rule: &'static str,
}

/// Writes `bad`, then: the dry run says each would be quarantined with its
/// rule; recovery, under a lease this test holds, quarantines each with its
/// rule, blocks its date, deletes nothing, and leaves every other object
/// (the watermark and the lease included) exactly as it was.
async fn assert_quarantined(store: &S3Store, generated: &Generated, bad: Vec<Bad>) -> Recovery {
    for b in &bad {
        store
            .put(&b.key, serde_json::to_vec(&b.body).unwrap().into(), PutMode::Create, None)
            .await
            .unwrap();
    }
    // `status` names the rule of every manifest it can judge from the
    // manifest alone (the rest need the bucket's objects: the run's).
    let cfg = config(store, &[]);
    let st = archive_compaction::commands::status::gather(
        store,
        &cfg,
        &archive_compaction::commands::status::StatusOptions {
            now: at(NOW),
            as_of: at(NOW),
            days: 1,
        },
    )
    .await
    .unwrap();
    for b in &bad {
        let m = st.manifests.iter().find(|m| m.key == b.key);
        if ["unreadable", "output_of_another_job", "only_copy"].contains(&b.rule) {
            continue;
        }
        let rule = m.and_then(|m| m.breaks_rule.as_deref()).unwrap_or_default();
        assert!(
            rule.starts_with(&format!("{}:", b.rule)),
            "status should say {} breaks rule {}: {m:?}",
            b.key,
            b.rule
        );
    }
    let dry = recovery::assess(store, Budget::DEFAULT).await.unwrap();
    for b in &bad {
        let e = dry
            .recovered
            .iter()
            .find(|e| e.key == b.key)
            .unwrap_or_else(|| panic!("{} not assessed: {:?}", b.key, dry.recovered));
        assert_eq!(e.action, "quarantined", "{e:?}");
        assert!(
            e.detail.contains("would") && e.detail.contains(&format!("rule {}:", b.rule)),
            "{} should say it would be quarantined by rule {}: {e:?}",
            b.key,
            b.rule
        );
    }
    let mut lease =
        LeaseGuard::acquire(store, "recovery-test", std::time::Duration::from_secs(300))
            .await
            .unwrap();
    let before = dump(store, "");
    assert!(before.contains_key(LOCK_KEY) && before.contains_key(WATERMARK_KEY));
    let r = recovery::recover(store, &mut Fence(Some(&mut lease)), Budget::DEFAULT).await.unwrap();
    let after = dump(store, "");
    lease.release().await.unwrap();

    assert_eq!(r.recovered.len(), bad.len(), "{:?}", r.recovered);
    assert_eq!((r.files_deleted, r.files_delete_failed), (0, 0));
    let mut expected = before.clone();
    for b in &bad {
        let e = r
            .recovered
            .iter()
            .find(|e| e.key == b.key)
            .unwrap_or_else(|| panic!("{} not reported: {:?}", b.key, r.recovered));
        assert_eq!(e.action, "quarantined", "{e:?}");
        assert!(
            e.detail.starts_with(&format!("rule {}:", b.rule)),
            "{}: expected rule {}: {e:?}",
            b.key,
            b.rule
        );
        let d = archive_compaction::data::keys::manifest_date(&b.key);
        assert_eq!(e.date, d);
        if let Some(d) = d {
            assert!(r.blocked.dates.contains_key(&d), "{d} not blocked: {:?}", r.blocked);
        }
        let moved = b.key.replacen(MANIFESTS_ROOT, QUARANTINE_ROOT, 1);
        let obj = expected.remove(&b.key).unwrap();
        expected.insert(moved, obj);
    }
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "objects deleted or added on the word of a bad manifest"
    );
    assert_eq!(after, expected, "objects changed on the word of a bad manifest");
    assert_eq!(after[LOCK_KEY], before[LOCK_KEY], "the lease was touched");
    assert_eq!(watermark(&after).unwrap()["last_compacted_date"], D20);
    for (d, rows) in &generated.rows {
        assert_compacted(&after, d, rows);
        assert_each_flight_once(&after, d, rows);
    }
    for f in &generated.foreign {
        assert!(after.contains_key(f), "foreign object {f} deleted");
    }
    r
}

#[tokio::test]
async fn the_three_manifests_of_the_issue_are_quarantined_and_every_flight_stays() {
    init_logs();
    let (store, generated) = compacted_world("rec-issue", 181).await;
    let objects = dump(&store, "");
    let (c20, c20d, c20_job) = compacted_of(&objects, D20);
    let body = store.get(&c20).await.unwrap();
    let sha = sha256_b64(&body.body);
    let wm = &objects[WATERMARK_KEY];
    let gone_inputs: Vec<ManifestInput> =
        generated.index_keys[D20].iter().map(|k| input(k, "\"long-gone\"")).collect();
    let mut bad = Vec::new();
    let mut add = |m: Manifest, rule: &'static str| {
        bad.push(Bad {
            key: manifest_key(m.date, m.job_id),
            body: serde_json::to_value(&m).unwrap(),
            rule,
        });
    };
    // 1. Output: another commit's compacted file (the day's only one), size off by one.
    add(
        manifest(
            MANIFEST_VERSION,
            Uuid::now_v7(),
            D20,
            output(&c20, c20d.size + 1, &sha, 12),
            gone_inputs.clone(),
        ),
        "output_not_derived",
    );
    //    The same as a version-1 manifest (no key to derive): its output id
    //    was not minted with its job id (an hour apart).
    add(
        manifest(
            MANIFEST_VERSION_1,
            minted_after(c20_job, 3600),
            D20,
            output(&c20, c20d.size + 1, &sha, 12),
            gone_inputs.clone(),
        ),
        "output_not_minted_with_job",
    );
    //    ... and one forged to pass that (same millisecond): the output's
    //    metadata names the job that wrote it.
    add(
        manifest(
            MANIFEST_VERSION_1,
            minted_after(c20_job, 0),
            D20,
            output(&c20, c20d.size + 1, &sha, 12),
            gone_inputs.clone(),
        ),
        "output_of_another_job",
    );
    // 2. Inputs: [its own output], output verified (the real commit's job id,
    //    so the output is the one that id names and carries it).
    add(
        manifest(
            MANIFEST_VERSION,
            c20_job,
            D20,
            output(&c20, c20d.size, &sha, 12),
            vec![input(&c20, &c20d.etag)],
        ),
        "input_is_output",
    );
    // 3. Output: the watermark, size off by one; and the lease likewise.
    add(
        manifest(
            MANIFEST_VERSION,
            Uuid::now_v7(),
            D20,
            output(WATERMARK_KEY, wm.size + 1, "x", 1),
            vec![input(&c20, &c20d.etag)],
        ),
        "state_file",
    );
    add(
        manifest(
            MANIFEST_VERSION,
            Uuid::now_v7(),
            D19,
            output(LOCK_KEY, 1, "x", 1),
            vec![input(&c20, &c20d.etag)],
        ),
        "state_file",
    );
    let r = assert_quarantined(&store, &generated, bad).await;
    assert_eq!(r.blocked.dates.keys().copied().collect::<Vec<_>>(), [date(D19), date(D20)]);
    // The output's metadata, read back at HEAD, is what caught the forged one.
    let head = store.head(&c20).await.unwrap().unwrap();
    assert_eq!(head.job_id(), Some(c20_job.to_string().as_str()));
}

#[tokio::test]
async fn every_validation_rule_quarantines_the_manifest_and_deletes_nothing() {
    init_logs();
    let (store, generated) = compacted_world("rec-rules", 182).await;
    let objects = dump(&store, "");
    let (c19, c19d, _) = compacted_of(&objects, D19);
    let (c20, c20d, _) = compacted_of(&objects, D20);
    let mine = input(&c20, &c20d.etag);
    let flight = generated.flights[D20][0].clone();
    let foreign = format!("{}notes.json", index_prefix(date(D20)));
    let mut bad = Vec::new();
    let mut add = |key: Option<String>, m: Manifest, rule: &'static str| {
        bad.push(Bad {
            key: key.unwrap_or_else(|| manifest_key(m.date, m.job_id)),
            body: serde_json::to_value(&m).unwrap(),
            rule,
        });
    };
    // Zero-row commits (no output) finish by deleting their inputs: each of
    // these would delete the day's only compacted file, or worse.
    let zero_row =
        |inputs: Vec<ManifestInput>| manifest(MANIFEST_VERSION, Uuid::now_v7(), D20, None, inputs);
    let m = zero_row(vec![mine.clone()]);
    add(Some(manifest_key(m.date, Uuid::now_v7())), m, "name_not_job_id");
    let m = zero_row(vec![mine.clone()]);
    add(Some(format!("{MANIFESTS_ROOT}{D19}/{}.json", m.job_id)), m, "date_not_key_date");
    let mut m = zero_row(vec![mine.clone()]);
    m.schema_version = MANIFEST_VERSION + 1;
    add(None, m, "unknown_version");
    add(None, zero_row(vec![input(&flight, "\"e\"")]), "outside_index");
    add(None, zero_row(vec![input(WATERMARK_KEY, "\"e\"")]), "state_file");
    add(None, zero_row(vec![input(&c19, &c19d.etag)]), "not_in_partition");
    add(None, zero_row(vec![input(&foreign, "\"e\"")]), "input_not_index_file");
    add(None, zero_row(vec![mine.clone(), mine.clone()]), "input_twice");
    // With an output that does not exist: today's table would only drop the
    // manifest, but it is not acted on at all.
    let job = Uuid::now_v7();
    add(
        None,
        manifest(
            MANIFEST_VERSION,
            job,
            D20,
            output(&compacted_key(date(D20), job), 10, "x", 1),
            vec![],
        ),
        "output_without_inputs",
    );
    let job = Uuid::now_v7();
    add(
        None,
        manifest(
            MANIFEST_VERSION,
            job,
            D20,
            output(&format!("{}{job}.parquet", index_prefix(date(D20))), 10, "x", 1),
            vec![mine.clone()],
        ),
        "output_not_compacted",
    );
    let job = Uuid::now_v7();
    add(
        None,
        manifest(
            MANIFEST_VERSION,
            job,
            D20,
            output(&c19, c19d.size + 1, "x", 1),
            vec![mine.clone()],
        ),
        "not_in_partition",
    );
    assert_quarantined(&store, &generated, bad).await;

    // The next run reports them as still quarantined and leaves both days
    // alone, and fails on them (compacted dates, but blocked), naming each.
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Failure, "{:?}", r.errors);
    assert_eq!(r.errors.len(), 2, "{:?}", r.errors);
    assert!(r.errors[0].starts_with("2026-07-19 is blocked: quarantined manifest"));
    assert!(r.errors[1].starts_with("2026-07-20 is blocked: quarantined manifest"));
    assert_eq!(r.recovered.iter().filter(|e| e.action == "quarantined_earlier").count(), 11);
    let after = dump(&store, "");
    for (d, rows) in &generated.rows {
        assert_compacted(&after, d, rows);
    }
}

/// Runs the commit phases for every per-flight file of `day` up to a
/// verified output, as `version` would have written them (version 1: the
/// output named by a second UUIDv7, no metadata); returns the manifest key
/// and the manifest (not yet written).
async fn committed_output(store: &S3Store, day: &str, version: u32) -> (String, Manifest) {
    let d = date(day);
    let listing = plan::classify_partition(store.list(&index_prefix(d)).await.unwrap());
    let inputs: Vec<PlannedInput> = listing
        .per_flight
        .iter()
        .map(|(u, m)| PlannedInput {
            meta: m.clone(),
            source: archive_compaction::data::merge::Source::PerFlight(*u),
        })
        .collect();
    let mut read =
        read::read_inputs(store, d, &inputs, settings(), &Default::default()).await.unwrap();
    let mut p = commit::prepare(d, &mut read, at(NOW), "crashed-run").unwrap();
    let body = p.body.clone().unwrap();
    let out = p.manifest.output.clone().unwrap();
    assert_eq!(out.key, compacted_key(d, p.manifest.job_id));
    if version == MANIFEST_VERSION_1 {
        let out = p.manifest.output.as_mut().unwrap();
        out.key = compacted_key(d, Uuid::now_v7());
        p.manifest.schema_version = MANIFEST_VERSION_1;
        store.put(&out.key, body, PutMode::Create, Some(&out.sha256)).await.unwrap();
    } else {
        commit::put_output(store, &mut Fence(None), p.manifest.job_id, &out, body).await.unwrap();
    }
    let out = p.manifest.output.clone().unwrap();
    assert_eq!(commit::check_output(store, &out).await.unwrap(), commit::OutputCheck::Verified);
    (p.manifest_key, p.manifest)
}

#[tokio::test]
async fn an_output_that_differs_is_deleted_only_while_every_input_is_in_its_version() {
    init_logs();
    let store = bucket("rec-only-copy").await;
    let generated = generate(
        &store,
        json!({"seed": 183, "days": [
            {"date": "2026-07-18", "flights": 4},
            {"date": D19, "flights": 6},
            {"date": D20, "flights": 5}
        ]}),
    );
    // 07-18: the commit deleted its inputs, then its manifest's size was
    // edited: the output holds the only copy of the day's rows.
    let (k18, mut m18) = committed_output(&store, "2026-07-18", MANIFEST_VERSION).await;
    let deleted = commit::delete_inputs(&store, &mut Fence(None), &m18, &[]).await.unwrap();
    assert_eq!(deleted.deleted, 4);
    m18.output.as_mut().unwrap().size += 1;
    put_json(&store, &k18, &m18).await;
    // 07-19: one input was rewritten since it was read (a newer version).
    let (k19, mut m19) = committed_output(&store, D19, MANIFEST_VERSION).await;
    rewrite(&store, &m19.inputs[2].key, "REWRITTEN");
    m19.output.as_mut().unwrap().size += 1;
    put_json(&store, &k19, &m19).await;
    // 07-20: every input is still there as read: the output may go.
    let (k20, mut m20) = committed_output(&store, D20, MANIFEST_VERSION).await;
    m20.output.as_mut().unwrap().size += 1;
    put_json(&store, &k20, &m20).await;

    let before = dump(&store, "");
    let r = recovery::recover(&store, &mut Fence(None), Budget::DEFAULT).await.unwrap();
    let after = dump(&store, "");
    let by_key: BTreeMap<_, _> = r.recovered.iter().map(|e| (e.key.as_str(), e)).collect();
    assert_eq!(by_key[k18.as_str()].action, "quarantined");
    assert!(
        by_key[k18.as_str()].detail.starts_with("rule only_copy:")
            && by_key[k18.as_str()].detail.contains("is gone"),
        "{:?}",
        by_key[k18.as_str()]
    );
    assert_eq!(by_key[k19.as_str()].action, "quarantined");
    assert!(
        by_key[k19.as_str()].detail.contains("is in another version"),
        "{:?}",
        by_key[k19.as_str()]
    );
    assert_eq!(by_key[k20.as_str()].action, "output_mismatch");
    assert!(
        r.blocked.dates.contains_key(&date("2026-07-18"))
            && r.blocked.dates.contains_key(&date(D19))
    );
    assert!(!r.blocked.dates.contains_key(&date(D20)));
    // The only copy is kept: 07-18's flights are all still there, once.
    let o18 = m18.output.unwrap().key;
    assert_eq!(after.get(&o18), before.get(&o18));
    assert_compacted(&after, "2026-07-18", &generated.rows["2026-07-18"]);
    // 07-19: nothing deleted (its output and per-flight files are as they were).
    let p19 = index_prefix(date(D19));
    let in19 = |m: &BTreeMap<String, Dumped>| {
        m.iter()
            .filter(|(k, _)| k.starts_with(&p19))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(in19(&after), in19(&before));
    // 07-20: the differing output is gone, the inputs intact, the manifest gone.
    let o20 = m20.output.unwrap().key;
    assert!(!after.contains_key(&o20) && !after.contains_key(&k20));
    assert_each_flight_once(&after, D20, &generated.rows[D20]);
}

#[tokio::test]
async fn version_1_manifests_still_recover_as_before() {
    init_logs();
    let store = bucket("rec-v1").await;
    let generated = generate(
        &store,
        json!({"seed": 184, "days": [
            {"date": "2026-07-18", "flights": 4},
            {"date": D19, "flights": 6},
            {"date": D20, "flights": 5}
        ]}),
    );
    // 07-18: crashed after the output was verified: the commit is finished.
    let (k18, m18) = committed_output(&store, "2026-07-18", MANIFEST_VERSION_1).await;
    assert_ne!(m18.output.as_ref().unwrap().key, compacted_key(m18.date, m18.job_id));
    let o18 = store.head(&m18.output.as_ref().unwrap().key).await.unwrap().unwrap();
    assert_eq!(o18.job_id(), None, "a version-1 output carries no metadata");
    put_json(&store, &k18, &m18).await;
    // 07-19: crashed before the output PUT: only the manifest goes.
    let listing = plan::classify_partition(store.list(&index_prefix(date(D19))).await.unwrap());
    let job = Uuid::now_v7();
    let m19 = manifest(
        MANIFEST_VERSION_1,
        job,
        D19,
        output(&compacted_key(date(D19), Uuid::now_v7()), 1000, "x", 6),
        listing.per_flight.iter().map(|(_, m)| input(&m.key, &m.etag)).collect(),
    );
    let k19 = manifest_key(date(D19), job);
    put_json(&store, &k19, &m19).await;
    // 07-20: its output differs, every input is intact: the output goes.
    let (k20, mut m20) = committed_output(&store, D20, MANIFEST_VERSION_1).await;
    m20.output.as_mut().unwrap().size += 1;
    put_json(&store, &k20, &m20).await;

    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let actions: BTreeMap<_, _> =
        r.recovered.iter().map(|e| (e.key.clone(), e.action.to_string())).collect();
    assert_eq!(
        actions,
        BTreeMap::from([
            (k18, "completed".to_string()),
            (k19, "output_missing".to_string()),
            (k20, "output_mismatch".to_string()),
        ])
    );
    let after = dump(&store, "");
    assert!(after.contains_key(&m18.output.unwrap().key), "the verified v1 output is kept");
    for (d, rows) in &generated.rows {
        assert_compacted(&after, d, rows);
    }
    assert!(!after.keys().any(|k| k.starts_with("_compaction_state/manifests/")
        || k.starts_with("_compaction_state/quarantine/")));
    assert_eq!(watermark(&after).unwrap()["last_compacted_date"], D20);
}

#[tokio::test]
async fn outputs_carry_their_job_id_single_part_and_multipart() {
    init_logs();
    let store = bucket("rec-metadata").await;
    generate(
        &store,
        json!({"seed": 185, "days": [{"date": D19, "flights": 3}, {"date": D20, "flights": 3}]}),
    );
    let single = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW_EARLIER))).await;
    assert_eq!(single.last_run_status, Status::Success, "{:?}", single.errors);
    let multi = run(
        &store,
        &config(&store, &[("MULTIPART_THRESHOLD_BYTES", "0")]),
        &RunOptions::at(at(NOW)),
    )
    .await;
    assert_eq!(multi.last_run_status, Status::Success, "{:?}", multi.errors);
    for (r, day) in [(&single, D19), (&multi, D20)] {
        let compacted = r.days.iter().find(|x| x.date == date(day)).unwrap();
        let key = compacted.output_key.clone().unwrap();
        let (_, _, job) = compacted_of(&dump(&store, &index_prefix(date(day))), day);
        assert_eq!(key, compacted_key(date(day), job));
        let head = store.head(&key).await.unwrap().unwrap();
        assert_eq!(
            head.metadata.get(JOB_ID_METADATA).map(String::as_str),
            Some(job.to_string().as_str()),
            "{day}: {:?}",
            head.metadata
        );
    }
}

#[tokio::test]
async fn a_run_reports_the_manifest_and_its_rule_and_stops_at_its_date() {
    init_logs();
    let store = bucket("rec-run").await;
    let generated = generate(
        &store,
        json!({"seed": 186, "days": [{"date": D19, "flights": 5}, {"date": D20, "flights": 7}]}),
    );
    let cfg = config(&store, &[]);
    let first = run(&store, &cfg, &RunOptions::at(at(NOW_EARLIER))).await;
    assert_eq!(first.last_run_status, Status::Success, "{:?}", first.errors);
    // 07-20 not compacted yet; a manifest says its output is the watermark
    // (size off by one) and its inputs are the day's files.
    let wm_before = dump(&store, "_compaction_state/");
    let listing = plan::classify_partition(store.list(&index_prefix(date(D20))).await.unwrap());
    let job = Uuid::now_v7();
    let m = manifest(
        MANIFEST_VERSION,
        job,
        D20,
        output(WATERMARK_KEY, wm_before[WATERMARK_KEY].size + 1, "x", 7),
        listing.per_flight.iter().map(|(_, o)| input(&o.key, &o.etag)).collect(),
    );
    let key = manifest_key(date(D20), job);
    let written = put_json(&store, &key, &m).await;

    let mut dry_opts = RunOptions::at(at(NOW));
    dry_opts.dry_run = true;
    let dry = run(&store, &cfg, &dry_opts).await;
    let r: RunReport = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    for report in [&dry, &r] {
        assert_valid("run-report.schema.json", &serde_json::to_value(report).unwrap());
        assert_eq!(report.last_run_status, Status::Failure, "{:?}", report.errors);
        assert_eq!(report.stop_reason, StopReason::BlockedByManifest);
        assert_eq!(report.recovered.len(), 1, "{:?}", report.recovered);
        let e = &report.recovered[0];
        assert_eq!((e.key.as_str(), e.action.as_str()), (key.as_str(), "quarantined"));
        assert!(e.detail.contains("rule state_file:") && e.detail.contains(WATERMARK_KEY), "{e:?}");
        assert!(
            report.errors[0].contains("2026-07-20 is blocked")
                && report.errors[0].contains("state_file"),
            "{:?}",
            report.errors
        );
    }
    let after = dump(&store, "");
    assert_eq!(after[WATERMARK_KEY], wm_before[WATERMARK_KEY], "watermark touched");
    assert_eq!(r.last_compacted_date, Some(date(D19)));
    assert_eq!(after[&key.replacen(MANIFESTS_ROOT, QUARANTINE_ROOT, 1)].json, Some(written));
    assert!(!after.contains_key(LOCK_KEY), "the run's own lease is released");
    assert_compacted(&after, D19, &generated.rows[D19]);
    assert_each_flight_once(&after, D20, &generated.rows[D20]);
}

/// How many rows each flight (its `s3_key`) has in `day`'s index inputs,
/// read back with pyarrow (any file: compacted, per-flight, multi-row).
fn rows_per_flight(objects: &BTreeMap<String, Dumped>, day: &str) -> BTreeMap<String, usize> {
    let prefix = index_prefix(date(day));
    let mut n = BTreeMap::new();
    for (_, d) in objects.iter().filter(|(k, _)| {
        k.starts_with(&prefix) && archive_compaction::data::keys::is_index_input(k)
    }) {
        for r in d.rows.clone().unwrap_or_default() {
            *n.entry(r["s3_key"].as_str().unwrap().to_string()).or_insert(0) += 1;
        }
    }
    n
}

/// The proof tests' world: [`compacted_world`] (logs set up), then a
/// straggler, a new flight's per-flight file put into 07-20 beside its
/// compacted file by `archive.py put-row` (seed `straggler_seed`).
struct Straggled {
    store: S3Store,
    generated: Generated,
    /// 07-20's compacted file: its key, as pyarrow read it back before the
    /// straggler came, and its job id.
    out_key: String,
    out_dumped: Dumped,
    job: Uuid,
    /// 07-20's index prefix.
    prefix: String,
    /// put-row's answer (`key`, `row`) and the straggler's key.
    straggler: Value,
    straggler_key: String,
}

impl Straggled {
    async fn new(hint: &str, seed: u64, straggler_seed: u64) -> Straggled {
        init_logs();
        let (store, generated) = compacted_world(hint, seed).await;
        let (out_key, out_dumped, job) = compacted_of(&dump(&store, ""), D20);
        let straggler = archive_py("put-row", &store, json!({"date": D20, "seed": straggler_seed}));
        let straggler_key = straggler["key"].as_str().unwrap().to_string();
        Straggled {
            prefix: index_prefix(date(D20)),
            store,
            generated,
            out_key,
            out_dumped,
            job,
            straggler,
            straggler_key,
        }
    }
}

/// Writes the manifest a commit of 07-20's compacted file `out_key` (job
/// `job`) would have written: version 2, the output's size and SHA-256 as
/// stored, 12 rows, listing `inputs`; asserted to pass every ownership
/// rule. Returns its key and its JSON.
async fn plant_manifest(
    store: &S3Store,
    out_key: &str,
    job: Uuid,
    inputs: Vec<ManifestInput>,
) -> (String, Value) {
    let body = store.get(out_key).await.unwrap().body;
    let m = manifest(
        MANIFEST_VERSION,
        job,
        D20,
        output(out_key, body.len() as u64, &sha256_b64(&body), 12),
        inputs,
    );
    let key = manifest_key(date(D20), job);
    assert_eq!(archive_compaction::protocol::manifest::validate_manifest(&key, &m), Ok(()));
    let written = put_json(store, &key, &m).await;
    (key, written)
}

/// As a new user tried it: a day compacted by this job, a
/// straggler landing for a new flight, then a manifest planted beside the
/// day's compacted file that passes every ownership rule (version 2, named
/// after the output's job id, the output's metadata its own, size and
/// SHA-256 right) and lists the straggler, and an export whose rows are all
/// in the output. Recovery proves the export (it reads it) and deletes it,
/// keeps the straggler, names it, quarantines the manifest; every flight is
/// still in the day exactly once. Once the operator deletes the quarantined
/// manifest, the sweep folds the straggler in.
#[tokio::test]
async fn a_verified_output_does_not_prove_an_input_it_does_not_hold() {
    let Straggled { store, generated, out_key, out_dumped, job, prefix, straggler, straggler_key } =
        Straggled::new("rec-proof", 231, 2301).await;
    let export = format!("{prefix}export.parquet");
    archive_py("multi-row", &store, json!({"from": [out_key], "key": export, "shuffle": true}));
    let objects = dump(&store, &prefix);
    let (key, written) = plant_manifest(
        &store,
        &out_key,
        job,
        vec![
            input(&export, &objects[&export].etag),
            input(&straggler_key, &objects[&straggler_key].etag),
        ],
    )
    .await;

    let dry = recovery::assess(&store, Budget::DEFAULT).await.unwrap();
    assert_eq!(dry.recovered.len(), 1, "{:?}", dry.recovered);
    let e = &dry.recovered[0];
    assert_eq!(e.action, "quarantined", "{e:?}");
    assert!(
        e.detail.contains("would delete 1 proven input")
            && e.detail.contains("rule input_not_in_output:")
            && e.detail.contains(&straggler_key),
        "{e:?}"
    );
    assert!(dry.blocked.dates.contains_key(&date(D20)), "{:?}", dry.blocked);
    assert_eq!(dump(&store, &prefix), objects, "the dry run changed something");

    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.recovered.len(), 1, "{:?}", r.recovered);
    let e = &r.recovered[0];
    assert_eq!((e.key.as_str(), e.action.as_str()), (key.as_str(), "quarantined"), "{e:?}");
    assert!(
        e.detail.contains("rule input_not_in_output:")
            && e.detail.contains(&straggler_key)
            && e.detail.contains("is not in the output"),
        "{e:?}"
    );
    let after = dump(&store, "");
    assert_eq!(
        after.get(&straggler_key).map(|d| &d.etag),
        Some(&objects[&straggler_key].etag),
        "the straggler was deleted on the word of the manifest"
    );
    assert!(!after.contains_key(&export), "the proven export is deleted");
    assert_eq!(after[&out_key], out_dumped, "the output was touched");
    assert_eq!(after[&key.replacen(MANIFESTS_ROOT, QUARANTINE_ROOT, 1)].json, Some(written));
    assert!(!after.contains_key(&key));
    let mut want = generated.rows[D20].clone();
    want.push(straggler["row"].clone());
    assert_each_flight_once(&after, D20, &want);
    assert!(rows_per_flight(&after, D20).values().all(|n| *n == 1));
    assert_compacted(&after, D19, &generated.rows[D19]);

    // The operator looks, deletes the quarantined manifest: the sweep folds
    // the straggler into the day's one compacted file.
    store.delete(&key.replacen(MANIFESTS_ROOT, QUARANTINE_ROOT, 1), None).await.unwrap();
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let after = dump(&store, "");
    assert_compacted(&after, D20, &want);
    assert_compacted(&after, D19, &generated.rows[D19]);
}

/// Recovery of a manifest whose output verifies, multi-row inputs: one
/// whose rows are all in the output is proven by reading it and deleted;
/// one with a single row of a flight the output lacks is kept, and so is a
/// file that cannot be read.
#[tokio::test]
async fn recovery_proves_each_input_by_its_rows() {
    let Straggled { store, out_key, job, prefix, straggler_key, .. } =
        Straggled::new("rec-proof-kinds", 232, 2321).await;
    let proven = format!("{prefix}backfill.parquet");
    archive_py("multi-row", &store, json!({"from": [out_key], "key": proven}));
    let one_more = format!("{prefix}export.parquet");
    archive_py("multi-row", &store, json!({"from": [out_key, straggler_key], "key": one_more}));
    let garbage = format!("{prefix}notes.parquet");
    store
        .put(&garbage, bytes::Bytes::from_static(b"not parquet"), PutMode::Create, None)
        .await
        .unwrap();
    let objects = dump(&store, &prefix);
    let etag = |k: &str| objects[k].etag.clone();
    plant_manifest(
        &store,
        &out_key,
        job,
        vec![
            input(&proven, &etag(&proven)),
            input(&one_more, &etag(&one_more)),
            input(&garbage, &etag(&garbage)),
        ],
    )
    .await;
    let mut lease = LeaseGuard::acquire(&store, "proof-test", std::time::Duration::from_secs(300))
        .await
        .unwrap();
    let r = recovery::recover(&store, &mut Fence(Some(&mut lease)), Budget::DEFAULT).await.unwrap();
    lease.release().await.unwrap();
    let e = &r.recovered[0];
    assert_eq!(e.action, "quarantined", "{e:?}");
    assert!(
        e.detail.contains("rule input_not_in_output:")
            && e.detail.contains("2 input(s)")
            && e.detail.contains(&one_more),
        "{e:?}"
    );
    assert_eq!(r.files_deleted, 1, "{:?}", r.recovered);
    let after = dump(&store, &prefix);
    assert!(!after.contains_key(&proven), "the proven input is deleted");
    for k in [&one_more, &garbage, &straggler_key] {
        assert_eq!(after.get(k).map(|d| &d.etag), Some(&etag(k)), "{k} not kept");
    }
}

/// A per-flight file is proven by its rows, as the commit proves it, not by
/// its name: the file named after a flight the output holds (A) but holding
/// another flight's row (B, whose own file is gone) is kept and the manifest
/// quarantined. Proven by its name, it was deleted and B's only row with it.
#[tokio::test]
async fn a_per_flight_file_is_proven_by_its_row_not_by_its_name() {
    let Straggled { store, generated, out_key, out_dumped, job, prefix, straggler, straggler_key } =
        Straggled::new("rec-proof-name", 233, 2331).await;
    let a = archive_compaction::data::keys::flight_uuid(
        generated.rows[D20][0]["s3_key"].as_str().unwrap(),
    )
    .unwrap();
    let named_a = format!("{prefix}{a}.parquet");
    archive_py("multi-row", &store, json!({"from": [straggler_key], "key": named_a}));
    store.delete(&straggler_key, None).await.unwrap();
    let objects = dump(&store, &prefix);
    let (key, _) =
        plant_manifest(&store, &out_key, job, vec![input(&named_a, &objects[&named_a].etag)]).await;

    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.recovered.len(), 1, "{:?}", r.recovered);
    let e = &r.recovered[0];
    assert_eq!((e.key.as_str(), e.action.as_str()), (key.as_str(), "quarantined"), "{e:?}");
    assert!(e.detail.contains("rule input_not_in_output:") && e.detail.contains(&named_a), "{e:?}");
    let after = dump(&store, &prefix);
    assert_eq!(
        after.get(&named_a).map(|d| &d.etag),
        Some(&objects[&named_a].etag),
        "the file holding the only row of flight B was deleted on its name"
    );
    assert_eq!(after[&out_key], out_dumped, "the output was touched");
    let mut want = generated.rows[D20].clone();
    want.push(straggler["row"].clone());
    assert_each_flight_once(&after, D20, &want);
}

/// Recovery reads inputs within the run's `INPUT_BUDGET_MB`, as the commit
/// did: a multi-row input of 6,000,000 rows of one flight the output holds
/// (its `s3_key` column decodes to 6,000,000 × 24 B, over the 128 MiB
/// default) is proven and deleted by a run given 1,024 MiB; within the
/// default it proved nothing, and the manifest was quarantined for good.
#[tokio::test]
async fn recovery_proves_within_the_runs_input_budget() {
    let Straggled { store, generated, out_key, job, prefix, straggler, .. } =
        Straggled::new("rec-proof-budget", 234, 2341).await;
    let s3_key = generated.rows[D20][0]["s3_key"].as_str().unwrap();
    let planted = support_py(
        "hostile.py",
        &["--endpoint", &endpoint(), "--bucket", store.bucket()],
        Some(
            &json!({"kind": "rows", "date": D20, "rows": 6_000_000, "s3_key": s3_key,
                    "name": "export-big.parquet"})
            .to_string(),
        ),
    );
    let planted: Value = serde_json::from_str(&planted).unwrap();
    let big = planted["key"].as_str().unwrap().to_string();
    let head = store.head(&big).await.unwrap().unwrap();
    let mut i = input(&big, &head.etag);
    i.size = planted["size"].as_u64().unwrap();
    let (key, _) = plant_manifest(&store, &out_key, job, vec![i]).await;

    let dry = recovery::assess(&store, Budget::DEFAULT).await.unwrap();
    assert_eq!(dry.recovered[0].action, "quarantined", "{:?}", dry.recovered);
    assert!(dry.recovered[0].detail.contains("decoded_bytes"), "{:?}", dry.recovered);

    let cfg = config(&store, &[("INPUT_BUDGET_MB", "1024")]);
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.recovered.len(), 1, "{:?}", r.recovered);
    assert_eq!(
        (r.recovered[0].key.as_str(), r.recovered[0].action.as_str()),
        (key.as_str(), "completed"),
        "{:?}",
        r.recovered
    );
    let after = dump(&store, &prefix);
    assert!(!after.contains_key(&big), "the proven input is not deleted");
    // The run's sweep then folded the straggler in: every flight once.
    let mut want = generated.rows[D20].clone();
    want.push(straggler["row"].clone());
    assert_each_flight_once(&after, D20, &want);
}

/// How the tests read a day: 4 GETs at once, row groups of 1,024 rows, the
/// default input budget.
fn settings() -> read::ReadSettings {
    read::ReadSettings {
        concurrency: 4,
        row_group_rows: 1024,
        budget: Default::default(),
        spill: Default::default(),
    }
}
