//! Scenes the operator-facing tests share: the fixed invocation time `NOW`, a
//! bucket as an operator left it (`slip_world`), a commit stopped where a
//! crash stops it (`crashed_commit`), and readings of what a run, `status`
//! and the CLI said.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Output;

use super::*;
use archive_compaction::commands::run::RunOptions;
use archive_compaction::commands::status::{self, StatusOptions, StatusReport};
use archive_compaction::data::config::Config;
use archive_compaction::data::keys::index_prefix;
use archive_compaction::data::metrics::metrics;
use archive_compaction::data::report::{DayReport, RunReport};
use archive_compaction::data::state::Manifest;
use archive_compaction::infra::storage::{PutMode, S3Store};
use archive_compaction::protocol::commit;
use archive_compaction::protocol::lease::Fence;
use archive_compaction::protocol::plan::{self, PlannedInput};
use archive_compaction::protocol::read;
use chrono::{NaiveDate, Utc};
use serde_json::{Value, json};

pub const NOW: &str = "2026-07-22T04:50:00Z";

pub const WATERMARK: &str = "_compaction_state/watermark.json";

pub fn status_opts(now: &str) -> StatusOptions {
    StatusOptions { now: at(now), as_of: Utc::now(), days: 5 }
}

pub fn opts_with_event(now: &str, event: &str) -> RunOptions {
    let mut o = RunOptions::at(at(now));
    o.event_id = Some(event.into());
    o
}

pub fn day<'a>(r: &'a RunReport, d: &str) -> &'a DayReport {
    r.days.iter().find(|x| x.date == date(d)).unwrap_or_else(|| panic!("{d} not in {:?}", r.days))
}

pub fn recovered(r: &RunReport) -> BTreeSet<(String, String)> {
    r.recovered.iter().map(|m| (m.key.clone(), m.action.to_string())).collect()
}

pub fn metric(r: &RunReport, name: &str) -> Option<f64> {
    metrics(r).iter().find(|m| m.name == name).map(|m| m.value)
}

/// The CLI binary against `store`'s bucket, run to its end.
pub fn cli(store: &S3Store, args: &[&str]) -> Output {
    cli_command(store, args).output().expect("run the archive-compaction binary")
}

pub fn stdout_json<T: serde::de::DeserializeOwned>(out: &Output) -> T {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not the expected JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// How a hand-made commit is left, as a crash would leave it.
pub enum Crash {
    /// After the manifest, before the output PUT.
    BeforeOutput,
    /// After the output PUT and its verification, before any input delete.
    AfterVerify,
    /// After the output PUT, with the output then replaced by other bytes.
    OutputDiffers,
}

/// How the tests read a day: 4 GETs at once, row groups of 1,024 rows, the
/// default input budget.
pub fn settings() -> read::ReadSettings {
    read::ReadSettings {
        concurrency: 4,
        row_group_rows: 1024,
        budget: Default::default(),
        spill: Default::default(),
    }
}

/// Runs the commit phases for the first `n` per-flight files of `date`
/// (skipping `skip`), stopping as `crash` says; returns the manifest key and
/// the manifest.
pub async fn crashed_commit(
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
            source: archive_compaction::data::merge::Source::PerFlight(*u),
        })
        .collect();
    assert_eq!(inputs.len(), n);
    let mut read =
        read::read_inputs(store, date, &inputs, settings(), &Default::default()).await.unwrap();
    let p = commit::prepare(date, &mut read, at(NOW), "crashed-run").unwrap();
    commit::create_manifest(store, &p.manifest_key, &p.manifest).await.unwrap();
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

pub fn three_days(seed: u64) -> Value {
    json!({"seed": seed, "days": [
        {"date": "2026-07-18", "flights": 5},
        {"date": "2026-07-19", "flights": 4},
        {"date": "2026-07-20", "flights": 6}
    ]})
}

pub async fn put_state(store: &S3Store, key: &str, body: &str) {
    store.put(key, body.as_bytes().to_vec().into(), PutMode::Create, None).await.unwrap();
}

/// A fresh bucket (named after `hint`, logs set up) holding
/// [`three_days`]`(seed)` and the state files `state` (key, body) as an
/// operator left them; returns the store and the whole bucket as pyarrow
/// reads it back before the slip.
pub async fn slip_world(
    hint: &str,
    seed: u64,
    state: &[(&str, &str)],
) -> (S3Store, BTreeMap<String, Dumped>) {
    init_logs();
    let store = bucket(hint).await;
    generate(&store, three_days(seed));
    for (key, body) in state {
        put_state(&store, key, body).await;
    }
    let before = dump(&store, "");
    (store, before)
}

/// What `status` says of `store` at [`NOW`] (the wall clock at `NOW` too),
/// over the last three dates.
pub async fn status_at_now(store: &S3Store, cfg: &Config) -> StatusReport {
    let opts = StatusOptions { now: at(NOW), as_of: at(NOW), days: 3 };
    status::gather(store, cfg, &opts).await.unwrap()
}
