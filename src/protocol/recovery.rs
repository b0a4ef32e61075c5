//! Recovery: resolve every manifest a crashed run left, before anything else, as
//! docs/ARCHITECTURE.md's "Recovery table" says (with why each row is safe). Nothing is deleted on
//! the word of a manifest that does not prove the data its own commit's or held elsewhere: it is
//! quarantined ([`ManifestRule`]). Manifests never expire; an error listing or reading them fails
//! the run (never "no manifests"). Each gets one plan before anything is written: [`recover`]
//! carries it out, [`assess`] reports it.
//!
//! Failpoints (feature `failpoints`): `recovery::before-output-delete`,
//! `recovery::after-input-deletes`, `recovery::proof-off`.

use std::collections::HashSet;

use chrono::NaiveDate;

use crate::data::input::{self, Budget};
use crate::data::keys::{manifest_date, stuck_key};
use crate::data::report::{RecoveredManifest, RecoveryAction};
use crate::data::state::{Manifest, ManifestOutput};
use crate::failpoint;
use crate::infra::error::{Error, Result};
use crate::infra::storage::{ObjectMeta, PutMode, Store, sha256_b64};
use crate::protocol::commit::{self, InputState, OutputCheck};
use crate::protocol::day::{BlockReason, Blocked, StateListing};
use crate::protocol::lease::Fence;
use crate::protocol::manifest::ManifestRule;
use crate::protocol::manifest::{quarantine_key, quarantined_date};
use crate::protocol::proof::{InputRows, OutputFlights, Unproven};

#[derive(Debug)]
struct ManifestPlan {
    key: String,
    /// The date in its key (`None` when the key names none).
    date: Option<NaiveDate>,
    /// Its body as read: what a quarantine moves.
    body: bytes::Bytes,
    decision: Decision,
}

/// `None` when the manifest is gone.
async fn plan_manifest(
    store: &impl Store,
    key: &str,
    budget: Budget,
) -> Result<Option<ManifestPlan>> {
    let Some(body) = store.get_opt(key).await? else {
        return Ok(None);
    };
    let decision = decide(store, key, &body.body, budget).await?;
    Ok(Some(ManifestPlan {
        key: key.to_string(),
        date: manifest_date(key),
        body: body.body,
        decision,
    }))
}

/// What recovery does with one manifest, decided without writing anything.
#[derive(Debug)]
enum Decision {
    /// Move it aside; nothing is done on its word.
    Quarantine(ManifestRule),
    /// Act on it as the recovery table says.
    Act(Box<Manifest>, Step),
}

/// The recovery table's rows for a manifest that may be acted on.
#[derive(Debug)]
enum Step {
    /// No output (zero rows) or output verified: finish the commit, keeping unproven inputs.
    Complete { unproven: Vec<Unproven> },
    /// The output was never written: drop the manifest.
    OutputMissing(String),
    /// The output differs, every input is in its version: delete the output.
    OutputMismatch { key: String, reason: String, etag: String },
}

async fn decide(store: &impl Store, key: &str, body: &[u8], budget: Budget) -> Result<Decision> {
    let manifest = match crate::protocol::manifest::parse(key, body) {
        Ok((m, None)) => m,
        Ok((_, Some(rule))) | Err(rule) => return Ok(Decision::Quarantine(rule)),
    };
    let Some(output) = &manifest.output else {
        let unproven =
            prove_still_listed(store, &manifest, &OutputFlights::default(), budget).await?;
        return Ok(Decision::Act(Box::new(manifest), Step::Complete { unproven }));
    };
    let (check, head, body) = commit::inspect_output_read(store, output).await?;
    if let Some(found) = head.as_ref().and_then(|h| h.job_id())
        && found != manifest.job_id.to_string()
    {
        return Ok(Decision::Quarantine(ManifestRule::OutputOfAnotherJob {
            key: output.key.clone(),
            found: found.to_string(),
            job_id: manifest.job_id,
        }));
    }
    let step = match check {
        OutputCheck::Verified => Step::Complete {
            unproven: prove_against_output(store, &manifest, output, body, budget).await?,
        },
        OutputCheck::Missing => Step::OutputMissing(output.key.clone()),
        OutputCheck::Differs(reason, etag) => {
            let listed = commit::listed_etags(store, &manifest).await?;
            let lost = manifest.inputs.iter().find_map(|i| match commit::input_state(i, &listed) {
                InputState::Gone => Some((i, "gone")),
                InputState::Newer => Some((i, "in another version")),
                InputState::ToDelete => None,
            });
            if let Some((input, state)) = lost {
                return Ok(Decision::Quarantine(ManifestRule::OnlyCopy {
                    output: output.key.clone(),
                    reason,
                    input: input.key.clone(),
                    state,
                }));
            }
            Step::OutputMismatch { key: output.key.clone(), reason, etag }
        }
    };
    Ok(Decision::Act(Box::new(manifest), step))
}

/// [`prove_still_listed`] against the verified output's `s3_key` column, read once (from `body` if
/// the verify kept it). An output that cannot be read proves nothing.
/// Errors: an S3 error reading the output or an input.
async fn prove_against_output(
    store: &impl Store,
    manifest: &Manifest,
    output: &ManifestOutput,
    body: Option<bytes::Bytes>,
    budget: Budget,
) -> Result<Vec<Unproven>> {
    let body = match body {
        Some(b) => Some(b),
        None => store.get_opt(&output.key).await?.map(|f| f.body),
    };
    let why = match body {
        None => "the output vanished after it was verified".to_string(),
        Some(b) if sha256_b64(&b) != output.sha256 => {
            "the output read for the proof is not the one verified".to_string()
        }
        Some(b) => {
            let read = input::row_flights_of_body(store, &output.key, b, input::OWN_OUTPUT_BUDGET);
            match read.await? {
                Ok(flights) => {
                    let flights = OutputFlights::new(flights);
                    return prove_still_listed(store, manifest, &flights, budget).await;
                }
                Err(u) => format!("the output's s3_key column cannot be read: {}", u.reason),
            }
        }
    };
    Ok((manifest.inputs.iter())
        .map(|i| Unproven { key: i.key.clone(), reason: why.clone() })
        .collect())
}

/// The inputs still there in their manifest version not proven to be in `output`; one over `budget`
/// (the commit's) or unreadable is unproven. Errors: an S3 error reading an input.
async fn prove_still_listed(
    store: &impl Store,
    manifest: &Manifest,
    output: &OutputFlights,
    budget: Budget,
) -> Result<Vec<Unproven>> {
    let mut rows: std::collections::HashMap<&str, InputRows> = Default::default();
    let mut there = Vec::new();
    let mut unreadable = Vec::new();
    for i in &manifest.inputs {
        // Gone, or there in another version: not deleted, no proof needed.
        let read = input::row_flights(store, &i.key, i.size, Some(&i.etag), budget).await;
        let read = match read {
            Err(e) if e.is_not_found() || matches!(e, Error::PreconditionFailed { .. }) => {
                continue;
            }
            r => r?,
        };
        match read {
            Ok(r) => {
                rows.insert(&i.key, InputRows::Rows(r));
                there.push(i.key.as_str());
            }
            Err(u) => unreadable.push(Unproven {
                key: i.key.clone(),
                reason: format!("it cannot be read to prove its rows: {}", u.reason),
            }),
        }
    }
    let mut out = crate::protocol::proof::unproven(there, |k| rows.get(k).cloned(), output);
    out.extend(unreadable);
    #[cfg(feature = "failpoints")]
    if fail::eval("recovery::proof-off", |_| ()).is_some() {
        out.clear();
    }
    for u in &out {
        tracing::error!(date = %manifest.date, key = %u.key, reason = %u.reason,
            "input of a verified manifest not proven to be in its output: kept");
    }
    Ok(out)
}

/// What recovery did.
#[derive(Debug, Default)]
pub struct Recovery {
    /// One entry per manifest found (and per quarantined one still there).
    pub recovered: Vec<RecoveredManifest>,
    /// Dates the walk must not touch, with why.
    pub blocked: Blocked,
    /// Keys the walk must leave out: inputs of a stuck manifest, or (dry run) what recovery would
    /// delete.
    pub claimed: HashSet<String>,
    /// Inputs deleted while finishing commits.
    pub files_deleted: u64,
    /// Inputs that could not be deleted.
    pub files_delete_failed: u64,
}

/// Resolves every manifest. `budget` is the one the commit read within, so recovery proves what it
/// proved. Errors: listing or reading a manifest, or any S3 error acting on one.
pub async fn recover(
    store: &impl Store,
    fence: &mut Fence<'_>,
    budget: Budget,
) -> Result<Recovery> {
    let mut out = Recovery::default();
    let state = StateListing::read(store).await.map_err(|(_, e)| e)?;
    still_quarantined(state.quarantined, &mut out);
    for m in state.manifests {
        let Some(plan) = plan_manifest(store, &m.key, budget).await? else {
            continue;
        };
        let effect = execute(store, fence, &plan, &mut out).await?;
        out.record(&plan, &effect, Tense::Did);
    }
    unmark_resolved(store, fence, &state.stuck, &out).await?;
    Ok(out)
}

/// Deletes the stuck marks of manifests this recovery did not find stuck (a crash can leave one
/// behind its manifest's delete), so `stuck/` does not grow.
/// Errors: the lease lost, or the DeleteObject refused.
async fn unmark_resolved(
    store: &impl Store,
    fence: &mut Fence<'_>,
    marks: &[ObjectMeta],
    out: &Recovery,
) -> Result<()> {
    let still_stuck: HashSet<String> = (out.blocked.dates.values())
        .flatten()
        .filter_map(|r| match r {
            BlockReason::Stuck(key) => Some(stuck_key(key)),
            _ => None,
        })
        .collect();
    let stale: Vec<&ObjectMeta> =
        (marks.iter()).filter(|m| !still_stuck.contains(&m.key)).collect();
    if stale.is_empty() {
        return Ok(());
    }
    fence.check().await?;
    for m in stale {
        tracing::info!(key = %m.key, "stuck mark removed: its manifest is resolved");
        store.delete(&m.key, None).await?;
    }
    Ok(())
}

fn still_quarantined(quarantined: Vec<ObjectMeta>, out: &mut Recovery) {
    for q in quarantined {
        let date = quarantined_date(&q.key);
        if let Some(d) = date {
            out.blocked.add(d, BlockReason::Quarantined(q.key.clone()));
        }
        out.recovered.push(RecoveredManifest {
            key: q.key.clone(),
            date,
            action: RecoveryAction::QuarantinedEarlier,
            detail: "still in quarantine: inspect it, then delete it to unblock the date".into(),
        });
    }
}

/// Why a quarantine blocks a date (`done`: "moved", or "would be moved").
fn blocked_reason(
    store: &impl Store,
    key: &str,
    target: &str,
    rule: &ManifestRule,
    done: &str,
) -> String {
    match rule {
        ManifestRule::Unreadable(_) => {
            format!("unreadable manifest s3://{}/{key} {done} to {target}", store.bucket())
        }
        _ => format!(
            "manifest s3://{}/{key} breaks rule {} ({rule}) and {done} to {target}",
            store.bucket(),
            rule.code()
        ),
    }
}

/// The dry run's [`quarantine`]: blocks `date` in `out`.
fn would_quarantine(
    store: &impl Store,
    key: &str,
    date: Option<NaiveDate>,
    rule: &ManifestRule,
    out: &mut Recovery,
) {
    let target = quarantine_key(key);
    if let Some(d) = date {
        tracing::warn!(key, %target, reason = %blocked_reason(store, key, &target, rule, "would be moved"), "manifest would be quarantined");
        out.blocked.add(d, BlockReason::Quarantined(target));
    }
}

/// What [`recover`] would do, writing nothing (the dry run), in the same shape, so the walk plans
/// as the real run would. A failing delete cannot be foreseen: a manifest marked stuck earlier that
/// still has inputs to delete shows as `stuck`, any other as `completed`.
///
/// Errors: listing or reading manifests, HEAD/GET of outputs, or listing a partition.
pub async fn assess(store: &impl Store, budget: Budget) -> Result<Recovery> {
    let state = StateListing::read(store).await.map_err(|(_, e)| e)?;
    assess_listed(store, state, budget).await
}

/// [`assess`] over a state listing the caller already took.
/// Errors: as [`assess`], less the listings.
pub async fn assess_listed(
    store: &impl Store,
    state: StateListing,
    budget: Budget,
) -> Result<Recovery> {
    let mut out = Recovery::default();
    let marked: HashSet<String> =
        (state.stuck_manifests().into_iter()).map(str::to_string).collect();
    still_quarantined(state.quarantined, &mut out);
    for m in state.manifests {
        let Some(plan) = plan_manifest(store, &m.key, budget).await? else {
            continue;
        };
        let marked = marked.contains(&plan.key);
        let effect = forecast(store, &plan, marked, &mut out).await?;
        out.record(&plan, &effect, Tense::Would);
    }
    Ok(out)
}

/// What [`execute`] would make of `plan`, without writing. `marked` (a stuck mark is listed)
/// forecasts that deletes left to do fail again. Errors: listing the manifest's partition.
async fn forecast(
    store: &impl Store,
    plan: &ManifestPlan,
    marked: bool,
    out: &mut Recovery,
) -> Result<Effect> {
    let (manifest, unproven) = match &plan.decision {
        Decision::Quarantine(rule) => {
            would_quarantine(store, &plan.key, plan.date, rule, out);
            return Ok(Effect::Quarantined { rule: rule.clone(), proven: None });
        }
        Decision::Act(_, Step::OutputMissing(key)) => {
            return Ok(Effect::OutputMissing(key.clone()));
        }
        Decision::Act(_, Step::OutputMismatch { key, reason, .. }) => {
            out.claimed.insert(key.clone());
            return Ok(Effect::OutputMismatch { key: key.clone(), reason: reason.clone() });
        }
        Decision::Act(manifest, Step::Complete { unproven }) => (manifest, unproven),
    };
    let kept: HashSet<&str> = unproven.iter().map(|u| u.key.as_str()).collect();
    let listed = commit::listed_etags(store, manifest).await?;
    let (mut deleted, mut newer, mut gone) = (0, 0, 0);
    for i in &manifest.inputs {
        match commit::input_state(i, &listed) {
            InputState::Gone => gone += 1,
            InputState::Newer => newer += 1,
            InputState::ToDelete if kept.contains(i.key.as_str()) => {}
            InputState::ToDelete => {
                deleted += 1;
                out.claimed.insert(i.key.clone());
            }
        }
    }
    if marked && deleted > 0 {
        out.stuck(&plan.key, manifest);
        return Ok(Effect::Stuck(format!(
            "stuck manifest {}: an earlier run could not delete its inputs (mark {}); would try the {deleted} left again; until the cause is fixed the date stays blocked",
            plan.key,
            stuck_key(&plan.key)
        )));
    }
    if let Some(rule) = not_in_output(manifest, unproven) {
        would_quarantine(store, &plan.key, plan.date, &rule, out);
        return Ok(Effect::Quarantined { rule, proven: Some((deleted, unproven.len())) });
    }
    Ok(Effect::Completed { deleted, newer, gone })
}

/// Moves the manifest at `key` to `quarantine/`, blocking its date; deletes nothing else.
async fn quarantine(
    store: &impl Store,
    key: &str,
    body: bytes::Bytes,
    rule: &ManifestRule,
    out: &mut Recovery,
    date: Option<NaiveDate>,
) -> Result<()> {
    let target = quarantine_key(key);
    tracing::error!(key, quarantine = %target, rule = rule.code(), %rule,
        "manifest not acted on; moved aside, nothing deleted on its word");
    match store.put(&target, body, PutMode::Create, None).await {
        Ok(_) | Err(crate::infra::error::Error::PreconditionFailed { .. }) => {}
        Err(e) => return Err(e),
    }
    store.delete(key, None).await?;
    if let Some(d) = date {
        tracing::warn!(key, %target, reason = %blocked_reason(store, key, &target, rule, "was moved"), "manifest quarantined");
        out.blocked.add(d, BlockReason::Quarantined(target.to_string()));
    }
    Ok(())
}

/// Carries out `plan`; returns what came of it. Errors: the lease lost, or an S3 error.
async fn execute(
    store: &impl Store,
    fence: &mut Fence<'_>,
    plan: &ManifestPlan,
    out: &mut Recovery,
) -> Result<Effect> {
    let effect = match &plan.decision {
        Decision::Quarantine(rule) => Effect::Quarantined { rule: rule.clone(), proven: None },
        Decision::Act(manifest, step) => {
            tracing::info!(key = %plan.key, date = %manifest.date, inputs = manifest.inputs.len(), "recovering manifest");
            resolve(store, fence, &plan.key, manifest, step, out).await?
        }
    };
    if let Effect::Quarantined { rule, .. } = &effect {
        fence.check().await?;
        quarantine(store, &plan.key, plan.body.clone(), rule, out, plan.date).await?;
    }
    Ok(effect)
}

/// Carries out `step` for the manifest at `key`; unproven inputs come back as
/// [`Effect::Quarantined`], for [`execute`] to move aside.
async fn resolve(
    store: &impl Store,
    fence: &mut Fence<'_>,
    key: &str,
    manifest: &Manifest,
    step: &Step,
    out: &mut Recovery,
) -> Result<Effect> {
    let unproven = match step {
        Step::OutputMissing(output) => {
            fence.check().await?;
            commit::delete_manifest(store, key).await?;
            return Ok(Effect::OutputMissing(output.clone()));
        }
        Step::OutputMismatch { key: output, reason, etag } => {
            fence.check().await?;
            failpoint!("recovery::before-output-delete");
            store.delete(output, Some(etag)).await?;
            commit::delete_manifest(store, key).await?;
            return Ok(Effect::OutputMismatch { key: output.clone(), reason: reason.clone() });
        }
        Step::Complete { unproven } => unproven,
    };
    let deleted = commit::delete_inputs(store, fence, manifest, unproven).await?;
    failpoint!("recovery::after-input-deletes");
    out.files_deleted += deleted.deleted;
    if !deleted.failed.is_empty() {
        out.files_delete_failed += deleted.failed.len() as u64;
        out.stuck(key, manifest);
        let first = &deleted.failed[0];
        let why = format!(
            "stuck manifest {key}: {} input(s) cannot be deleted (first: {} {}: {}); fix the permission or object, the next run retries",
            deleted.failed.len(),
            first.key,
            first.code,
            first.message
        );
        return Ok(Effect::Stuck(why));
    }
    if let Some(rule) = not_in_output(manifest, &deleted.unproven) {
        return Ok(Effect::Quarantined {
            rule,
            proven: Some((deleted.deleted, deleted.unproven.len())),
        });
    }
    commit::delete_manifest(store, key).await?;
    Ok(Effect::Completed {
        deleted: deleted.deleted,
        newer: deleted.kept_newer.len() as u64,
        gone: deleted.already_gone,
    })
}

/// What came of a [`ManifestPlan`] (dry run: what would), for [`describe`].
#[derive(Debug)]
enum Effect {
    /// Moved aside for `rule`; `proven`: (inputs deleted, inputs kept) first.
    Quarantined { rule: ManifestRule, proven: Option<(u64, usize)> },
    /// The manifest dropped: its output (this key) was never written.
    OutputMissing(String),
    /// The output `key` deleted (it differs: `reason`), then the manifest.
    OutputMismatch { key: String, reason: String },
    /// The commit completed (inputs deleted, newer, gone), manifest deleted.
    Completed { deleted: u64, newer: u64, gone: u64 },
    /// Inputs could not be deleted (why): the manifest is kept.
    Stuck(String),
}

#[derive(Debug, Clone, Copy)]
enum Tense {
    Would,
    Did,
}

/// The only place recovery details are worded, dry run and real run alike.
fn describe(effect: &Effect, tense: Tense, key: &str) -> (RecoveryAction, String) {
    use Tense::{Did, Would};
    let target = quarantine_key(key);
    let detail = match (effect, tense) {
        (Effect::Quarantined { rule, proven: None }, Would) => format!(
            "would move it to {target}: rule {}: {rule}; nothing would be deleted on its word; the date would stay blocked until an operator deletes it",
            rule.code()
        ),
        (Effect::Quarantined { rule, proven: Some((deleted, kept)) }, Would) => format!(
            "would delete {deleted} proven input(s) (ETag-conditional), keep the {kept} not proven, and move it to {target}: rule {}: {rule}; the date would stay blocked until an operator deletes it",
            rule.code()
        ),
        (Effect::Quarantined { rule, .. }, Did) => format!(
            "rule {}: {rule}; moved to {target}, nothing deleted on its word; inspect it, then delete it to unblock the date",
            rule.code()
        ),
        (Effect::OutputMissing(output), Would) => format!(
            "would delete the manifest: {output} was never written; inputs intact, the date is compacted again"
        ),
        (Effect::OutputMissing(output), Did) => {
            format!("{output} was never written; inputs intact, date compacted again")
        }
        (Effect::OutputMismatch { key, reason }, Would) => format!(
            "would delete {key} ({reason}), then the manifest; every input is still in the version it names"
        ),
        (Effect::OutputMismatch { key, reason }, Did) => {
            format!("{key} deleted ({reason}); every input is still in the version it names")
        }
        (Effect::Completed { deleted, newer, gone }, Would) => format!(
            "output verified; would delete {deleted} input(s) (ETag-conditional), keep {newer} newer version(s) ({gone} already gone), then the manifest"
        ),
        (Effect::Completed { deleted, newer, gone }, Did) => format!(
            "output verified; {deleted} input(s) deleted, each proven to be in it, {gone} already gone, {newer} kept as newer versions"
        ),
        (Effect::Stuck(why), _) => why.clone(),
    };
    let action = match effect {
        Effect::Quarantined { .. } => RecoveryAction::Quarantined,
        Effect::OutputMissing(_) => RecoveryAction::OutputMissing,
        Effect::OutputMismatch { .. } => RecoveryAction::OutputMismatch,
        Effect::Completed { .. } => RecoveryAction::Completed,
        Effect::Stuck(_) => RecoveryAction::Stuck,
    };
    (action, detail)
}

impl Recovery {
    /// Blocks the date of the manifest at `key` as stuck and claims all its inputs.
    fn stuck(&mut self, key: &str, manifest: &Manifest) {
        self.claimed.extend(manifest.inputs.iter().map(|i| i.key.clone()));
        self.blocked.add(manifest.date, BlockReason::Stuck(key.to_string()));
    }

    fn record(&mut self, plan: &ManifestPlan, effect: &Effect, tense: Tense) {
        let (action, detail) = describe(effect, tense, &plan.key);
        self.recovered.push(RecoveredManifest {
            key: plan.key.clone(),
            date: plan.date,
            action,
            detail,
        });
    }
}

fn not_in_output(manifest: &Manifest, unproven: &[Unproven]) -> Option<ManifestRule> {
    let first = unproven.first()?;
    Some(ManifestRule::InputNotInOutput {
        output: commit::output_name(manifest.output.as_ref()),
        input: first.key.clone(),
        reason: first.reason.clone(),
        count: unproven.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::keys::{MANIFESTS_ROOT, compacted_key, index_prefix};
    use crate::data::state::{MANIFEST_VERSION, MANIFEST_VERSION_1};
    use crate::infra::storage::JOB_ID_METADATA;
    use crate::protocol::manifest::validate_manifest;
    use crate::protocol::manifest::{Role, V1_OUTPUT_ID_WINDOW_MS};
    use uuid::Uuid;

    use crate::data::keys::manifest_key;
    use crate::data::state::{ManifestInput, ManifestOutput};
    use uuid::{NoContext, Timestamp};

    const SEC: u64 = 1_784_500_000; // 2026-07-20

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    /// A UUIDv7 at `SEC` + `ms` milliseconds.
    fn v7(ms: u64) -> Uuid {
        let t = SEC * 1000 + ms;
        Uuid::new_v7(Timestamp::from_unix(NoContext, t / 1000, (t % 1000) as u32 * 1_000_000))
    }

    fn p(date: &str) -> String {
        index_prefix(d(date))
    }

    fn input(key: &str) -> ManifestInput {
        ManifestInput { key: key.into(), etag: "\"e\"".into(), size: 100 }
    }

    /// A consistent version-2 manifest of 2026-07-20 with two per-flight inputs.
    fn good() -> (String, Manifest) {
        let job_id = v7(0);
        let date = d("2026-07-20");
        let m = Manifest {
            schema_version: MANIFEST_VERSION,
            job_id,
            date,
            output: Some(ManifestOutput {
                key: compacted_key(date, job_id),
                size: 10,
                sha256: "x".into(),
                rows: 2,
            }),
            inputs: vec![
                input(&format!("{}{}.parquet", p("2026-07-20"), v7(1))),
                input(&format!("{}{}.parquet", p("2026-07-20"), v7(2))),
            ],
            created_at: chrono::DateTime::from_timestamp(SEC as i64, 0).unwrap(),
            invocation_id: "t".into(),
        };
        (manifest_key(date, job_id), m)
    }

    /// A verified manifest in `store`: two per-flight inputs (flights 1
    /// and 2, as [`input_key`]) and its compacted output holding both rows.
    fn verified_two_inputs(store: &crate::infra::storage::MemoryStore) -> (String, Manifest) {
        use crate::data::merge::tests::{row, uuid_n};
        let (mkey, mut m) = good();
        let body = |n: u32| {
            bytes::Bytes::from(crate::data::merge::encode(&[row(&uuid_n(n), "X")], 16).unwrap())
        };
        let out = bytes::Bytes::from(
            crate::data::merge::encode(&[row(&uuid_n(1), "X"), row(&uuid_n(2), "X")], 16).unwrap(),
        );
        m.output = Some(ManifestOutput {
            key: compacted_key(m.date, m.job_id),
            size: out.len() as u64,
            sha256: sha256_b64(&out),
            rows: 2,
        });
        store.put_now(&compacted_key(m.date, m.job_id), out);
        m.inputs = [1, 2]
            .map(|n| ManifestInput {
                key: input_key(n),
                etag: store.put_now(&input_key(n), body(n)),
                size: body(n).len() as u64,
            })
            .to_vec();
        store.put_now(&mkey, serde_json::to_vec(&m).unwrap().into());
        (mkey, m)
    }

    /// The key of flight `n`'s per-flight file on 2026-07-20.
    fn input_key(n: u32) -> String {
        format!("{}{}.parquet", p("2026-07-20"), crate::data::merge::tests::uuid_n(n))
    }

    fn with_output(m: &mut Manifest, key: &str) {
        m.output.as_mut().unwrap().key = key.into();
    }

    fn code(key: &str, m: &Manifest) -> &'static str {
        match validate_manifest(key, m) {
            Ok(()) => "ok",
            Err(r) => {
                let text = r.to_string();
                assert!(!text.is_empty());
                r.code()
            }
        }
    }

    #[test]
    fn consistent_manifests_pass() {
        let (k, m) = good();
        assert_eq!(validate_manifest(&k, &m), Ok(()));
        // No output (zero rows): inputs only.
        let mut none = m.clone();
        none.output = None;
        assert_eq!(validate_manifest(&k, &none), Ok(()));
        // A compacted file folded in as an input.
        let mut folded = m.clone();
        folded.inputs.push(input(&compacted_key(
            m.date,
            Uuid::parse_str("5f3c2a10-1b2c-4d3e-8f40-112233445566").unwrap(),
        )));
        assert_eq!(validate_manifest(&k, &folded), Ok(()));
    }

    #[test]
    fn a_manifest_naming_another_commits_output_its_own_or_the_watermark_is_refused() {
        let (k, m) = good();
        let other = format!("{}compacted-{}.parquet", p("2026-07-20"), v7(9_000));
        // Another commit's compacted file as its output.
        let mut a = m.clone();
        with_output(&mut a, &other);
        assert_eq!(
            validate_manifest(&k, &a),
            Err(ManifestRule::OutputNotDerived {
                key: other.clone(),
                expected: compacted_key(m.date, m.job_id)
            })
        );
        // Its own output as its only input.
        let mut b = m.clone();
        b.inputs = vec![input(&m.output.as_ref().unwrap().key)];
        assert_eq!(code(&k, &b), "input_is_output");
        // The watermark as its output.
        let mut c = m.clone();
        with_output(&mut c, "_compaction_state/watermark.json");
        assert_eq!(
            validate_manifest(&k, &c),
            Err(ManifestRule::StateFile {
                role: Role::Output,
                key: "_compaction_state/watermark.json".into()
            })
        );
        assert!(
            validate_manifest(&k, &c)
                .unwrap_err()
                .to_string()
                .contains("_compaction_state/watermark.json")
        );
    }

    #[test]
    fn each_rule_names_what_is_wrong() {
        let (k, m) = good();
        type Edit = Box<dyn Fn(&mut String, &mut Manifest)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("unknown_version", Box::new(|_, m| m.schema_version = 3)),
            ("unknown_version", Box::new(|_, m| m.schema_version = 0)),
            ("name_not_job_id", Box::new(|k, m| *k = manifest_key(m.date, v7(1)))),
            ("date_not_key_date", Box::new(|_, m| m.date = d("2026-07-19"))),
            (
                "date_not_key_date",
                Box::new(|k, m| *k = format!("{MANIFESTS_ROOT}{}.json", m.job_id)),
            ),
            ("state_file", Box::new(|_, m| with_output(m, "_compaction_state/lock.json"))),
            (
                "state_file",
                Box::new(|_, m| m.inputs[1].key = "_compaction_state/watermark.json".into()),
            ),
            (
                "outside_index",
                Box::new(|_, m| m.inputs[0].key = format!("flights/2026/07/20/{}.json.gz", v7(3))),
            ),
            ("outside_index", Box::new(|_, m| with_output(m, "compacted-x.parquet"))),
            (
                "not_in_partition",
                Box::new(|_, m| m.inputs[0].key = format!("{}{}.parquet", p("2026-07-19"), v7(3))),
            ),
            (
                "not_in_partition",
                Box::new(|_, m| {
                    m.inputs[0].key = format!("{}sub/{}.parquet", p("2026-07-20"), v7(3))
                }),
            ),
            (
                "not_in_partition",
                Box::new(|_, m| {
                    let o = compacted_key(d("2026-07-19"), m.job_id);
                    with_output(m, &o)
                }),
            ),
            (
                "output_not_compacted",
                Box::new(|_, m| {
                    let o = m.inputs[0].key.clone();
                    with_output(m, &o)
                }),
            ),
            (
                "output_not_derived",
                Box::new(|_, m| {
                    let o = compacted_key(m.date, v7(1));
                    with_output(m, &o)
                }),
            ),
            ("output_without_inputs", Box::new(|_, m| m.inputs.clear())),
            (
                "input_not_index_file",
                Box::new(|_, m| m.inputs[1].key = format!("{}_SUCCESS", p("2026-07-20"))),
            ),
            (
                "input_not_index_file",
                Box::new(|_, m| m.inputs[1].key = format!("{}notes.json", p("2026-07-20"))),
            ),
            (
                "input_is_output",
                Box::new(|_, m| {
                    let o = m.output.as_ref().unwrap().key.clone();
                    m.inputs.push(input(&o))
                }),
            ),
            (
                "input_twice",
                Box::new(|_, m| {
                    let again = m.inputs[0].clone();
                    m.inputs.push(ManifestInput { etag: "\"other\"".into(), ..again })
                }),
            ),
        ];
        for (want, edit) in cases {
            let (mut key, mut man) = (k.clone(), m.clone());
            edit(&mut key, &mut man);
            let got = validate_manifest(&key, &man);
            let rule = got.clone().expect_err(want);
            assert_eq!(rule.code(), want, "{rule}");
            let text = rule.to_string();
            let named = man
                .inputs
                .iter()
                .map(|i| i.key.as_str())
                .chain(man.output.as_ref().map(|o| o.key.as_str()))
                .any(|k| text.contains(k));
            assert!(
                named
                    || want == "unknown_version"
                    || want.ends_with("key_date")
                    || want == "name_not_job_id",
                "{want}: the message names no key: {text}"
            );
        }
        // The role and the foreign object's reason, in the words an
        // operator reads in `status`.
        let mut m2 = m.clone();
        m2.inputs[1].key = "_compaction_state/watermark.json".into();
        let text = validate_manifest(&k, &m2).unwrap_err().to_string();
        assert!(
            text.starts_with("its input _compaction_state/watermark.json is a state file"),
            "{text}"
        );
        m2.inputs[1].key = format!("{}notes.json", p("2026-07-20"));
        let text = validate_manifest(&k, &m2).unwrap_err().to_string();
        assert!(text.ends_with("is not an index input (not a .parquet file)"), "{text}");
    }

    #[test]
    fn version_1_output_ids_must_be_minted_with_the_job_id() {
        let (_, mut m) = good();
        m.schema_version = MANIFEST_VERSION_1;
        let k = manifest_key(m.date, m.job_id);
        // As v1's prepare wrote it: a second UUIDv7, the same millisecond or the next.
        for ms in [0, 1, V1_OUTPUT_ID_WINDOW_MS] {
            let o = compacted_key(m.date, v7(ms));
            with_output(&mut m, &o);
            assert_eq!(validate_manifest(&k, &m), Ok(()), "{ms} ms");
        }
        // The derived key is fine in v1 too (same timestamp).
        let o = compacted_key(m.date, m.job_id);
        with_output(&mut m, &o);
        assert_eq!(validate_manifest(&k, &m), Ok(()));
        // Another commit's output: minted later, or not a UUIDv7 at all.
        for other in [
            compacted_key(m.date, v7(V1_OUTPUT_ID_WINDOW_MS + 1)),
            compacted_key(m.date, v7(3_600_000)),
            compacted_key(m.date, Uuid::parse_str("5f3c2a10-1b2c-4d3e-8f40-112233445566").unwrap()),
            format!("{}compacted-2026-07-20.parquet", p("2026-07-20")),
        ] {
            with_output(&mut m, &other);
            assert_eq!(
                validate_manifest(&k, &m),
                Err(ManifestRule::OutputNotMintedWithJob { key: other.clone(), job_id: m.job_id }),
                "{other}"
            );
        }
        // The other rules apply to v1 as they do to v2.
        let o = compacted_key(m.date, v7(1));
        with_output(&mut m, &o);
        m.inputs = vec![input(&o)];
        assert_eq!(code(&k, &m), "input_is_output");
        with_output(&mut m, "_compaction_state/watermark.json");
        assert_eq!(code(&k, &m), "state_file");
    }

    /// A manifest without an output (zero rows): a zero-row input is proven
    /// (nothing to lose) and deleted; an input with a row is kept and the
    /// manifest quarantined.
    #[tokio::test]
    async fn without_an_output_only_inputs_without_rows_are_deleted() {
        use crate::infra::storage::MemoryStore;
        for (rows, deleted) in [(0, true), (1, false)] {
            let store = MemoryStore::new("b");
            let (_, mut m) = good();
            m.output = None;
            let flight = v7(1);
            let key = format!("{}{flight}.parquet", p("2026-07-20"));
            let batch = crate::data::merge::tests::row(&flight.to_string(), "X").slice(0, rows);
            let body = bytes::Bytes::from(crate::data::merge::encode(&[batch], 16).unwrap());
            let etag = store.put_now(&key, body);
            m.inputs = vec![ManifestInput { key: key.clone(), etag, size: 1 }];
            let mkey = manifest_key(m.date, m.job_id);
            store.put_now(&mkey, serde_json::to_vec(&m).unwrap().into());
            let r = recover(&store, &mut Fence(None), Budget::DEFAULT).await.unwrap();
            let e = &r.recovered[0];
            let there = store.snapshot().contains_key(&key);
            assert_eq!(there, !deleted, "{rows} row(s): {e:?}");
            if deleted {
                assert_eq!(e.action, RecoveryAction::Completed, "{e:?}");
            } else {
                assert_eq!(e.action, RecoveryAction::Quarantined, "{e:?}");
                assert!(e.detail.contains("rule input_not_in_output:"), "{e:?}");
                assert!(e.detail.contains("no output (zero rows)"), "{e:?}");
                assert!(r.blocked.dates.contains_key(&m.date));
            }
        }
    }

    /// The output is hashed again when it is read for the proof: a body
    /// that is not the one the manifest names (another object written at
    /// the output's key since the verify), even one holding every input's
    /// flight, proves nothing, and every input is kept.
    #[tokio::test]
    async fn an_output_that_is_not_the_verified_one_proves_no_input() {
        use crate::infra::storage::MemoryStore;
        let store = MemoryStore::new("b");
        let (_, mut m) = good();
        let flight = v7(1);
        let key = format!("{}{flight}.parquet", p("2026-07-20"));
        let batch = crate::data::merge::tests::row(&flight.to_string(), "X");
        let body = bytes::Bytes::from(crate::data::merge::encode(&[batch], 16).unwrap());
        let etag = store.put_now(&key, body.clone());
        m.inputs = vec![ManifestInput { key, etag, size: body.len() as u64 }];
        // The output here holds the same row as the input.
        let mut output = m.output.clone().unwrap();
        output.sha256 = sha256_b64(&body);
        let prove = |output: ManifestOutput| {
            let (store, m, body) = (&store, &m, body.clone());
            async move { prove_against_output(store, m, &output, Some(body), Budget::DEFAULT).await }
        };
        assert_eq!(prove(output.clone()).await.unwrap(), vec![]);
        output.sha256 = sha256_b64(b"another body");
        let kept = prove(output).await.unwrap();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].reason, "the output read for the proof is not the one verified");
    }

    /// The dry run (`assess`) foresees the real recovery (`recover`) of a
    /// verified commit input by input: of three inputs, one proven and
    /// there is deleted (the only one claimed), one gone is counted, one
    /// overwritten since is kept as newer. With a fourth whose row is not
    /// in the output, that one is kept too (not claimed) and the manifest
    /// quarantined, its date blocked. A stuck mark makes the dry run
    /// foresee `stuck`, and the real run, whose deletes succeed, removes
    /// the mark.
    #[tokio::test]
    async fn the_dry_run_foresees_what_recovery_deletes_keeps_and_blocks() {
        use crate::data::merge::tests::uuid_n;
        use crate::infra::storage::MemoryStore;
        let row = |n: u32, ident: &str| crate::data::merge::tests::row(&uuid_n(n), ident);
        let key = |n: u32| format!("{}{}.parquet", p("2026-07-20"), uuid_n(n));
        let body = |n: u32, ident: &str| {
            bytes::Bytes::from(crate::data::merge::encode(&[row(n, ident)], 16).unwrap())
        };
        for (with_unproven, marked) in [(false, false), (true, false), (false, true)] {
            let store = MemoryStore::new("b");
            let (mkey, mut m) = good();
            let out = bytes::Bytes::from(
                crate::data::merge::encode(&[row(1, "X"), row(2, "X"), row(3, "X")], 16).unwrap(),
            );
            let output = ManifestOutput {
                key: compacted_key(m.date, m.job_id),
                size: out.len() as u64,
                sha256: sha256_b64(&out),
                rows: 3,
            };
            store.put_now(&output.key, out);
            m.output = Some(output);
            let inputs: &[u32] = if with_unproven { &[1, 2, 3, 4] } else { &[1, 2, 3] };
            m.inputs = (inputs.iter())
                .map(|n| ManifestInput {
                    key: key(*n),
                    etag: store.put_now(&key(*n), body(*n, "X")),
                    size: body(*n, "X").len() as u64,
                })
                .collect();
            store.remove_now(&key(2));
            store.put_now(&key(3), body(3, "NEWER"));
            store.put_now(&mkey, serde_json::to_vec(&m).unwrap().into());
            if marked {
                store.put_now(&stuck_key(&mkey), "{}".into());
            }
            let dry = assess(&store, Budget::DEFAULT).await.unwrap();
            let d = &dry.recovered[0];
            let real = recover(&store, &mut Fence(None), Budget::DEFAULT).await.unwrap();
            let r = &real.recovered[0];
            let there = store.snapshot();
            assert!(
                !there.contains_key(&key(1)) && there.contains_key(&key(3)),
                "{with_unproven} {marked}: {d:?} {r:?}"
            );
            assert_eq!(real.files_deleted, 1);
            match (with_unproven, marked) {
                (false, false) => {
                    assert_eq!(dry.claimed, HashSet::from([key(1)]));
                    assert_eq!(
                        (d.action, r.action),
                        (RecoveryAction::Completed, RecoveryAction::Completed)
                    );
                    assert!(d.detail.contains("would delete 1 input(s) (ETag-conditional), keep 1 newer version(s) (1 already gone)"), "{}", d.detail);
                    assert!(r.detail.contains("1 input(s) deleted, each proven to be in it, 1 already gone, 1 kept as newer versions"), "{}", r.detail);
                    assert!(dry.blocked.dates.is_empty() && real.blocked.dates.is_empty());
                }
                (true, _) => {
                    assert_eq!(dry.claimed, HashSet::from([key(1)]));
                    assert_eq!(
                        (d.action, r.action),
                        (RecoveryAction::Quarantined, RecoveryAction::Quarantined)
                    );
                    assert!(d.detail.contains("would delete 1 proven input(s) (ETag-conditional), keep the 1 not proven"), "{}", d.detail);
                    assert!(
                        dry.blocked.dates.contains_key(&m.date)
                            && real.blocked.dates.contains_key(&m.date)
                    );
                    assert!(there.contains_key(&key(4)), "the unproven input is kept");
                    let output = &m.output.as_ref().unwrap().key;
                    assert!(
                        d.detail.contains(output) && d.detail.contains(&key(4)),
                        "{}",
                        d.detail
                    );
                }
                (false, true) => {
                    assert_eq!(d.action, RecoveryAction::Stuck, "{d:?}");
                    assert!(dry.claimed.contains(&key(1)) && dry.claimed.contains(&key(3)));
                    assert!(dry.blocked.dates.contains_key(&m.date));
                    assert_eq!(r.action, RecoveryAction::Completed, "{r:?}");
                    assert!(real.blocked.dates.is_empty());
                    assert!(
                        !there.contains_key(&stuck_key(&mkey)),
                        "the resolved manifest's mark is removed"
                    );
                }
            }
        }
        // A stuck mark whose manifest has nothing left to delete: the dry
        // run foresees it completed, its date not blocked.
        let store = MemoryStore::new("b");
        let (mkey, mut m) = good();
        m.output = None;
        store.put_now(&mkey, serde_json::to_vec(&m).unwrap().into());
        store.put_now(&stuck_key(&mkey), "{}".into());
        let dry = assess(&store, Budget::DEFAULT).await.unwrap();
        assert_eq!(dry.recovered[0].action, RecoveryAction::Completed, "{dry:?}");
        assert!(dry.blocked.dates.is_empty());
    }

    /// An input that cannot be read for the proof (S3 answers 500) is not
    /// taken for gone: recovery fails, and deletes nothing, the proven
    /// input included; the next run tries again.
    #[tokio::test]
    async fn an_input_recovery_cannot_read_fails_it_and_nothing_is_deleted() {
        use crate::infra::storage::MemoryStore;
        let store = MemoryStore::new("b");
        let (mkey, _) = verified_two_inputs(&store);
        let key = input_key;
        store.fail_gets(&key(2));
        let r = recover(&store, &mut Fence(None), Budget::DEFAULT).await;
        assert!(matches!(&r, Err(Error::S3 { code, .. }) if code == "InternalError"), "{r:?}");
        let there = store.snapshot();
        assert!(
            there.contains_key(&key(1)) && there.contains_key(&key(2)) && there.contains_key(&mkey)
        );
    }

    /// A manifest whose input S3 still refuses to delete stays stuck: its
    /// date blocked and its mark kept (what `status` reads); a mark whose
    /// manifest is gone is removed.
    #[tokio::test]
    async fn a_still_stuck_manifest_keeps_its_mark_and_a_resolved_one_loses_it() {
        use crate::infra::storage::MemoryStore;
        let store = MemoryStore::new("b");
        let (mkey, m) = verified_two_inputs(&store);
        let key = input_key;
        store.deny_deletes(&key(2));
        let mark = stuck_key(&mkey);
        store.put_now(&mark, bytes::Bytes::from_static(b"{}"));
        let resolved = stuck_key("_compaction_state/manifests/2026-07-19-gone.json");
        store.put_now(&resolved, bytes::Bytes::from_static(b"{}"));
        let r = recover(&store, &mut Fence(None), Budget::DEFAULT).await.unwrap();
        let why = r.blocked.blocking_walk(m.date).map(ToString::to_string);
        assert!(why.is_some_and(|w| w.contains(&mkey)), "{:?}", r.blocked);
        let there = store.snapshot();
        assert!(there.contains_key(&mark), "the stuck manifest's mark kept");
        assert!(!there.contains_key(&resolved), "the resolved one's removed");
        assert!(there.contains_key(&key(2)) && !there.contains_key(&key(1)));
    }

    /// Recovery counts an input S3 refuses to delete as a failed delete,
    /// beside the one it deleted.
    #[tokio::test]
    async fn an_input_s3_refuses_to_delete_is_counted_as_a_failed_delete() {
        use crate::infra::storage::MemoryStore;
        let store = MemoryStore::new("b");
        verified_two_inputs(&store);
        store.deny_deletes(&input_key(2));
        let r = recover(&store, &mut Fence(None), Budget::DEFAULT).await.unwrap();
        assert_eq!((r.files_deleted, r.files_delete_failed), (1, 1), "{r:?}");
    }

    /// A quarantine's log line says an unreadable manifest is unreadable,
    /// and names the rule another one breaks; both say where it goes.
    #[test]
    fn a_quarantine_reason_names_an_unreadable_manifest_or_the_rule_broken() {
        let store = crate::infra::storage::MemoryStore::new("b");
        let rule = ManifestRule::Unreadable("EOF".into());
        assert_eq!(
            blocked_reason(&store, "m.json", "q.json", &rule, "was moved"),
            "unreadable manifest s3://b/m.json was moved to q.json"
        );
        let rule = ManifestRule::UnknownVersion(99);
        let why = blocked_reason(&store, "m.json", "q.json", &rule, "would be moved");
        assert_eq!(
            why,
            format!(
                "manifest s3://b/m.json breaks rule {} ({rule}) and would be moved to q.json",
                rule.code()
            )
        );
    }

    /// A quarantined manifest blocks its date in every run until an
    /// operator deletes it, in the real run and in the dry run alike.
    #[tokio::test]
    async fn a_quarantined_manifest_blocks_its_date_until_it_is_deleted() {
        use crate::infra::storage::MemoryStore;
        let store = MemoryStore::new("b");
        let (key, m) = good();
        let q = quarantine_key(&key);
        assert_eq!(quarantined_date(&q), Some(m.date));
        assert_eq!(quarantined_date("_compaction_state/quarantine/x.json"), None);
        store.put_now(&q, serde_json::to_vec(&m).unwrap().into());
        for run in 0..2 {
            let r = recover(&store, &mut Fence(None), Budget::DEFAULT).await.unwrap();
            let a = assess(&store, Budget::DEFAULT).await.unwrap();
            for r in [&r, &a] {
                let why = r.blocked.blocking_walk(m.date).map(ToString::to_string);
                assert!(
                    why.is_some_and(|w| w.contains(&q) && w.starts_with("quarantined manifest")),
                    "run {run}: {:?}",
                    r.blocked
                );
                assert_eq!(r.recovered.len(), 1, "{:?}", r.recovered);
                let e = &r.recovered[0];
                assert_eq!(
                    (e.key.as_str(), e.date, e.action),
                    (q.as_str(), Some(m.date), RecoveryAction::QuarantinedEarlier),
                    "{e:?}"
                );
            }
            assert!(store.snapshot().contains_key(&q), "left for the operator");
        }
        store.remove_now(&q);
        let r = recover(&store, &mut Fence(None), Budget::DEFAULT).await.unwrap();
        assert!(r.blocked.dates.is_empty() && r.recovered.is_empty(), "{r:?}");
    }

    /// The dry run and the real run word each effect with the same action,
    /// the dry run's saying "would".
    #[test]
    fn every_effect_is_worded_for_the_dry_run_and_the_real_run() {
        let (key, _) = good();
        let rule = ManifestRule::InputTwice("index/i".into());
        let effects = [
            Effect::Quarantined { rule: rule.clone(), proven: None },
            Effect::Quarantined { rule, proven: Some((1, 2)) },
            Effect::OutputMissing("index/o".into()),
            Effect::OutputMismatch { key: "index/o".into(), reason: "size 1 != manifest 2".into() },
            Effect::Completed { deleted: 1, newer: 2, gone: 3 },
        ];
        for e in &effects {
            let (would, would_text) = describe(e, Tense::Would, &key);
            let (did, did_text) = describe(e, Tense::Did, &key);
            assert_eq!(would, did, "{e:?}");
            assert!(would_text.contains("would "), "{would_text}");
            assert!(!did_text.contains("would"), "{did_text}");
        }
    }

    #[test]
    fn bucket_rules_have_codes_and_messages() {
        let r = ManifestRule::OnlyCopy {
            output: "index/o".into(),
            reason: "size 1 != manifest 2".into(),
            input: "index/i".into(),
            state: "gone",
        };
        assert_eq!(r.code(), "only_copy");
        assert!(r.to_string().contains("index/i is gone"), "{r}");
        let r = ManifestRule::OutputOfAnotherJob {
            key: "index/o".into(),
            found: "a".into(),
            job_id: v7(0),
        };
        assert!(r.to_string().contains(JOB_ID_METADATA), "{r}");
    }
}
