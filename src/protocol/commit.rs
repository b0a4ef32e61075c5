//! The commit protocol, one function a phase (each phase's invariant: docs/ARCHITECTURE.md, "Commit
//! protocol"), run for one part by `commit_part`: 1. [`read_inputs`] and the own-row check, 2.
//! [`prepare`] then [`prove_inputs`], 3. [`create_manifest`], 4. [`put_output`], 5.-6.
//! [`verify_and_delete_inputs`] ([`verify_output`], then the deletes; recovery's
//! [`delete_inputs`]), 7. [`delete_manifest`].
//!
//! The lease is confirmed ([`Fence`]) before each destructive step: 4, each wave of 6, the
//! watermark write. Between 4 and 6 a reader may see a row twice; whatever happens, the manifest
//! lets the next invocation finish or undo the commit ([`crate::protocol::recovery`]).
//!
//! Failpoints (feature `failpoints`): the `commit::` names in this file; `commit::proof-off`
//! switches the proof off.

use std::collections::HashMap;

use bytes::Bytes;
use chrono::{DateTime, NaiveDate, Utc};
use uuid::Uuid;

use crate::data::input::OWN_OUTPUT_BUDGET;
use crate::data::keys::{compacted_key, index_prefix, manifest_key};
use crate::data::report::UnreadFile;
use crate::data::spill::UuidSet;
use crate::data::state::{MANIFEST_VERSION, Manifest, ManifestInput, ManifestOutput};
use crate::failpoint;
use crate::infra::error::{Error, Result};
use crate::infra::storage::{
    DeleteFailure, Head, JOB_ID_METADATA, PutMode, PutRequest, Store, etag_eq, sha256_b64,
};
use crate::protocol::lease::Fence;
use crate::protocol::partition::{nothing_to_merge, unread_rows, without_own_row};
use crate::protocol::plan::PlannedInput;
use crate::protocol::proof::{OutputFlights, ReadRows, Unproven};
use crate::protocol::read::{Prefetched, ReadInputs, ReadSettings, read_inputs};

/// A commit ready to be written.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The manifest to create.
    pub manifest: Manifest,
    /// Where the manifest goes.
    pub manifest_key: String,
    /// `None` when there are no rows.
    pub body: Option<Bytes>,
}

/// What one part's phases 2-6 did ([`commit_part`]).
#[derive(Debug)]
pub(crate) struct Committed {
    /// The manifest's key: complete unless [`Committed::failure`].
    pub manifest_key: String,
    /// `None`: the inputs held no row.
    pub output: Option<ManifestOutput>,
    pub inputs: Vec<String>,
    pub deleted: DeleteOutcome,
    pub duplicates_removed: u64,
    /// Columns the target schema does not know, kept after the known ones.
    pub extra_columns: Vec<String>,
    /// An unproven or undeletable input: the manifest is kept and the date is not compacted.
    pub failure: Option<Error>,
}

impl Committed {
    /// What leaves the manifest in place; `None` when complete.
    fn failed(&self, date: NaiveDate, bucket: &str) -> Option<Error> {
        let output = output_name(self.output.as_ref());
        if let Some(first) = self.deleted.unproven.first() {
            return Some(Error::Unproven {
                date,
                key: first.key.clone(),
                reason: first.reason.clone(),
                count: self.deleted.unproven.len(),
                output,
                manifest: self.manifest_key.clone(),
            });
        }
        let f = self.deleted.failed.first()?;
        Some(Error::s3(
            "DeleteObjects",
            bucket,
            &f.key,
            &f.code,
            format!(
                "{} input(s) of {date} could not be deleted ({}); manifest {} kept, the next run retries",
                self.deleted.failed.len(),
                f.message,
                self.manifest_key
            ),
            false,
        ))
    }
}

/// How an output is named in a report: its key, or that there is none.
pub(crate) fn output_name(output: Option<&ManifestOutput>) -> String {
    output.map_or_else(|| "no output (zero rows)".to_string(), |o| o.key.clone())
}

/// One part to commit ([`commit_part`]).
pub(crate) struct Part<'a> {
    pub date: NaiveDate,
    /// A [`crate::protocol::plan::PlannedPart`]'s inputs.
    pub inputs: &'a [PlannedInput],
    /// The date's flights, for the own-row check (empty in the sweep: none can be lost).
    pub flights: &'a UuidSet,
    pub settings: ReadSettings,
    /// The invocation time and id a manifest records; `None`: a dry run, nothing is written.
    pub write: Option<(DateTime<Utc>, &'a str)>,
}

/// How one part ended ([`commit_part`]).
#[derive(Debug)]
pub(crate) enum PartEnd {
    /// Phases 1-6 done; its manifest goes in phase 7 unless [`Committed::failure`].
    Committed(Box<Committed>),
    /// Read and checked, nothing to merge: nothing written, no row can be lost.
    NothingToMerge,
    /// A dry run's: read and checked, would be committed.
    Planned,
    /// Per-flight files without a row of their own flight: the date fails parity, nothing written.
    Lost(Vec<Uuid>),
    /// This compacted file is over an input limit: nothing of the date is merged.
    HeldBack(String),
}

/// What one part's commit did: how it ended, what was read (the manifest's inputs moved out), and
/// its unreadable per-flight files, which fail the date's parity once the rest is folded.
pub(crate) struct PartOutcome {
    pub end: PartEnd,
    pub read: ReadInputs,
    pub unread: Vec<UnreadFile>,
}

/// A part's phases 1-6 in the module's order (bodies in `prefetched` used and dropped; 2-6 only
/// with something to merge and `part.write`), each phase's time logged (debug, seconds). Phase 7 is
/// the caller's once the date's step allows (in the walk, beside the watermark write).
pub(crate) async fn commit_part(
    store: &impl Store,
    fence: &mut Fence<'_>,
    part: Part<'_>,
    prefetched: &mut Prefetched,
) -> Result<PartOutcome> {
    let (date, t) = (part.date, std::time::Instant::now());
    let mut read = read_inputs(store, date, part.inputs, part.settings, prefetched).await?;
    part.inputs.iter().for_each(|i| drop(prefetched.remove(&i.meta.key)));
    let lost = without_own_row(&read, part.flights)?;
    let unread = unread_rows(&read, part.flights)?;
    let end = match (&read.held_back, part.write) {
        (Some(key), _) => PartEnd::HeldBack(key.clone()),
        _ if !lost.is_empty() => PartEnd::Lost(lost),
        _ if nothing_to_merge(&read) => PartEnd::NothingToMerge,
        (None, None) => PartEnd::Planned,
        (None, Some((now, id))) => {
            tracing::debug!(%date, phase = "read", files = part.inputs.len(), seconds = crate::infra::text::millis(t.elapsed().as_secs_f64()), "inputs read and merged");
            let mut committed = write_part(store, fence, date, &mut read, now, id).await?;
            committed.failure = committed.failed(date, store.bucket());
            PartEnd::Committed(Box::new(committed))
        }
    };
    Ok(PartOutcome { end, read, unread })
}

/// Phases 2-6 for one part read into `read`.
async fn write_part(
    store: &impl Store,
    fence: &mut Fence<'_>,
    date: NaiveDate,
    read: &mut ReadInputs,
    now: DateTime<Utc>,
    invocation_id: &str,
) -> Result<Committed> {
    let prepared = prepare(date, read, now, invocation_id)?;
    let m = &prepared.manifest;
    let t = std::time::Instant::now();
    let unproven = prove_inputs(store, m, &read.rows, prepared.body.as_ref()).await?;
    tracing::debug!(%date, phase = "prove", files = m.inputs.len(), seconds = crate::infra::text::millis(t.elapsed().as_secs_f64()), "inputs proven to be in the output");
    let t = std::time::Instant::now();
    fence.beside(create_manifest(store, &prepared.manifest_key, m)).await?;
    if let (Some(output), Some(body)) = (&m.output, prepared.body.clone()) {
        put_output(store, fence, m.job_id, output, body).await?;
    }
    tracing::debug!(%date, phase = "write", seconds = crate::infra::text::millis(t.elapsed().as_secs_f64()), "manifest and output written");
    let t = std::time::Instant::now();
    let deleted = verify_and_delete_inputs(store, fence, m, &unproven).await?;
    tracing::debug!(%date, phase = "delete", files = m.inputs.len(), seconds = crate::infra::text::millis(t.elapsed().as_secs_f64()), "output verified, partition re-listed, inputs deleted");
    Ok(Committed {
        inputs: m.inputs.iter().map(|i| i.key.clone()).collect(),
        output: m.output.clone(),
        manifest_key: prepared.manifest_key,
        deleted,
        duplicates_removed: read.output.duplicates_removed,
        extra_columns: read.output.extra_columns.clone(),
        failure: None,
    })
}

/// Phase 2: the manifest, recording the encoded output's size and checksum (no output without rows)
/// before the PUT. Output and manifest are named after the job id ([`compacted_key`]): how recovery
/// tells a manifest's own output from another commit's. `read.read` moves into the manifest (left
/// empty), not held twice. Never fails today.
pub fn prepare(
    date: NaiveDate,
    read: &mut ReadInputs,
    now: DateTime<Utc>,
    invocation_id: &str,
) -> Result<Prepared> {
    let merged = &read.output;
    let job_id = Uuid::now_v7();
    let body = merged.encoded.clone();
    let output = body.as_ref().map(|bytes| ManifestOutput {
        key: compacted_key(date, job_id),
        size: bytes.len() as u64,
        sha256: sha256_b64(bytes),
        rows: merged.rows,
    });
    let manifest = Manifest {
        schema_version: MANIFEST_VERSION,
        job_id,
        date,
        output,
        inputs: std::mem::take(&mut read.read),
        created_at: now,
        invocation_id: invocation_id.to_string(),
    };
    Ok(Prepared { manifest_key: manifest_key(date, job_id), manifest, body })
}

/// Phase 3 (`If-None-Match: *`).
pub async fn create_manifest(store: &impl Store, key: &str, manifest: &Manifest) -> Result<()> {
    failpoint!("commit::before-manifest-create");
    // Compact, not pretty: a manifest names every input.
    let body = serde_json::to_vec(manifest).expect("manifest serialises");
    crate::data::state::put_settled(store, key, body, PutMode::Create).await?;
    failpoint!("commit::after-manifest-create");
    Ok(())
}

/// Phase 4: creates the output (`If-None-Match: *`) with its SHA-256 and the manifest's `job_id` in
/// its metadata ([`JOB_ID_METADATA`]), which recovery checks before it deletes an output.
pub async fn put_output(
    store: &impl Store,
    fence: &mut Fence<'_>,
    job_id: Uuid,
    output: &ManifestOutput,
    body: Bytes,
) -> Result<()> {
    fence.check().await?;
    let mut request = PutRequest::new(PutMode::Create);
    request.sha256_b64 = Some(output.sha256.clone());
    request.metadata.insert(JOB_ID_METADATA.to_string(), job_id.to_string());
    let attempt = store.put_object(&output.key, body, request).await;
    settle_output(store, job_id, output, attempt).await?;
    failpoint!("commit::after-output-put");
    Ok(())
}

/// An output PUT whose answer may have been lost ([`crate::data::state::settles`]) took effect when
/// the object read back is this commit's output (size, SHA-256, `job_id`); otherwise the attempt's
/// error stands.
async fn settle_output(
    store: &impl Store,
    job_id: Uuid,
    output: &ManifestOutput,
    attempt: Result<String>,
) -> Result<()> {
    let e = match attempt {
        Ok(_) => return Ok(()),
        Err(e) if crate::data::state::settles(&e) => e,
        Err(e) => return Err(e),
    };
    let job = job_id.to_string();
    match inspect_output_read(store, output).await {
        Ok((OutputCheck::Verified, Some(head), _)) if head.job_id() == Some(job.as_str()) => {
            tracing::warn!(key = %output.key, error = %e, "the output PUT's answer was lost and its retry failed; read back, it is this commit's output (size, SHA-256, job id): done");
            Ok(())
        }
        Ok(_) => Err(e),
        Err(read) => {
            tracing::warn!(key = %output.key, error = %read, "a failed output PUT could not be read back to see whether it took effect");
            Err(e)
        }
    }
}

/// Result of [`check_output`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputCheck {
    /// Size and checksum match the manifest.
    Verified,
    /// The output does not exist.
    Missing,
    /// It exists but differs (the reason says how); its ETag is given.
    Differs(String, String),
}

/// Size and SHA-256 against the manifest. When the server keeps no equal
/// checksum (a multipart object's composite one: `{b64}-{parts}` on AWS,
/// bare on some S3-compatible servers), the object is read back and hashed.
pub async fn check_output(store: &impl Store, output: &ManifestOutput) -> Result<OutputCheck> {
    Ok(inspect_output_read(store, output).await?.0)
}

/// [`check_output`], plus the HEAD (`None` when missing, for its job id) and the body when it was
/// read back, so recovery reads the output's flights without a second GET.
pub(crate) async fn inspect_output_read(
    store: &impl Store,
    output: &ManifestOutput,
) -> Result<(OutputCheck, Option<Head>, Option<Bytes>)> {
    match judge_head(output, store.head(&output.key).await?) {
        HeadVerdict::Settled(check, head) => Ok((check, head, None)),
        HeadVerdict::ReadBack(head) => read_back(store, output, head).await,
    }
}

enum HeadVerdict {
    /// Missing, a size that differs, or the manifest's SHA-256 stored.
    Settled(OutputCheck, Option<Head>),
    /// The right size, but no comparable checksum stored: read it back.
    ReadBack(Head),
}

fn judge_head(output: &ManifestOutput, head: Option<Head>) -> HeadVerdict {
    let Some(head) = head else {
        return HeadVerdict::Settled(OutputCheck::Missing, None);
    };
    if head.size != output.size {
        let reason = format!("size {} != manifest {}", head.size, output.size);
        let etag = head.etag.clone();
        return HeadVerdict::Settled(OutputCheck::Differs(reason, etag), Some(head));
    }
    if head.checksum_sha256.as_deref() == Some(output.sha256.as_str()) {
        return HeadVerdict::Settled(OutputCheck::Verified, Some(head));
    }
    HeadVerdict::ReadBack(head)
}

async fn read_back(
    store: &impl Store,
    output: &ManifestOutput,
    head: Head,
) -> Result<(OutputCheck, Option<Head>, Option<Bytes>)> {
    let Some(f) = store.get_opt(&output.key).await? else {
        return Ok((OutputCheck::Missing, None, None));
    };
    let sum = sha256_b64(&f.body);
    if sum != output.sha256 {
        let reason = format!("sha256 {sum} != manifest {}", output.sha256);
        return Ok((OutputCheck::Differs(reason, head.etag.clone()), Some(head), None));
    }
    Ok((OutputCheck::Verified, Some(head), Some(f.body)))
}

/// Phase 5: `Ok` only for [`OutputCheck::Verified`], else [`Error::VerifyFailed`] naming the output
/// and why.
pub fn verify_output(
    store: &impl Store,
    output: &ManifestOutput,
    check: OutputCheck,
) -> Result<()> {
    let reason = match check {
        OutputCheck::Verified => {
            failpoint!("commit::after-verify");
            return Ok(());
        }
        OutputCheck::Missing => "not found after PUT".to_string(),
        OutputCheck::Differs(reason, _) => reason,
    };
    Err(Error::VerifyFailed { bucket: store.bucket().into(), key: output.key.clone(), reason })
}

/// What [`delete_inputs`] did.
#[derive(Debug, Default, Clone)]
pub struct DeleteOutcome {
    /// Inputs this call deleted: reported once, by the run that retires them.
    pub deleted: u64,
    /// Inputs an earlier attempt deleted; not in `deleted`.
    pub already_gone: u64,
    /// Inputs that changed since they were read: a newer version survives.
    pub kept_newer: Vec<String>,
    /// Inputs that could not be deleted (AccessDenied, ...): the manifest stays.
    pub failed: Vec<DeleteFailure>,
    /// Inputs kept unproven ([`prove_inputs`]): the manifest stays.
    pub unproven: Vec<Unproven>,
}

/// Where one input of a manifest stands against a listing of its partition
/// (key → ETag): one rule for the delete phase, recovery and the dry run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InputState {
    /// Listed in the version the manifest names: delete it (ETag-conditional).
    ToDelete,
    /// Rewritten since it was read: keep it; it is folded in later.
    Newer,
    /// Not listed: already deleted.
    Gone,
}

/// Where `input` stands in `listed`, ETags compared by [`etag_eq`].
pub(crate) fn input_state(input: &ManifestInput, listed: &HashMap<String, String>) -> InputState {
    match listed.get(&input.key) {
        None => InputState::Gone,
        Some(etag) if !etag_eq(etag, &input.etag) => InputState::Newer,
        Some(_) => InputState::ToDelete,
    }
}

/// Phase 6: deletes the manifest's inputs except `unproven`, each only in
/// the version read. The partition is re-listed first and a key whose ETag
/// changed is kept (for servers that ignore the ETag in DeleteObjects); the
/// rest go to DeleteObjects with each key's ETag (S3 refuses a changed one).
pub async fn delete_inputs(
    store: &impl Store,
    fence: &mut Fence<'_>,
    manifest: &Manifest,
    unproven: &[Unproven],
) -> Result<DeleteOutcome> {
    let listed = fence.beside(listed_etags(store, manifest)).await?;
    delete_listed_inputs(store, fence, manifest, &listed, unproven).await
}

/// The manifest's inputs not proven ([`crate::protocol::proof`]) to be in the encoded `body`, read
/// within [`OWN_OUTPUT_BUDGET`] (nothing is fetched); each is logged as an error. Errors:
/// [`Error::Encode`] when the encoded output cannot be read back (then nothing may be deleted).
pub async fn prove_inputs(
    store: &impl Store,
    manifest: &Manifest,
    read: &ReadRows,
    body: Option<&Bytes>,
) -> Result<Vec<Unproven>> {
    let output = match body {
        None => OutputFlights::default(),
        Some(b) => {
            let key = manifest.output.as_ref().map_or("", |o| o.key.as_str());
            let flights =
                crate::data::input::row_flights_of_body(store, key, b.clone(), OWN_OUTPUT_BUDGET)
                    .await?;
            OutputFlights::new(flights.map_err(|u| Error::Encode {
                date: manifest.date,
                reason: format!(
                    "the encoded output's s3_key column cannot be read back: {}",
                    u.reason
                ),
            })?)
        }
    };
    let unproven = crate::protocol::proof::unproven(
        manifest.inputs.iter().map(|i| i.key.as_str()),
        |k| read.get(k),
        &output,
    );
    #[cfg(feature = "failpoints")]
    let unproven = match fail::eval("commit::proof-off", |_| ()) {
        Some(()) => Vec::new(),
        None => unproven,
    };
    for u in &unproven {
        tracing::error!(date = %manifest.date, key = %u.key, reason = %u.reason,
            "input not proven to be in the output: kept, and its manifest with it");
    }
    Ok(unproven)
}

/// Phases 5 and 6, the lease confirmed beside their reads. Both reads start only once the output's
/// PUT has returned: a listing stalled past the lease's expiry while the PUT is out lets the PUT
/// land after another invocation's recovery found the output missing and compacted the inputs again
/// (two compacted files with the same rows). The re-list runs beside the HEAD, and again after an
/// output read back and hashed, so that a server that ignores the ETag in DeleteObjects has no long
/// window to delete a version written meanwhile.
///
/// Errors: [`Error::VerifyFailed`] (nothing is deleted), the lease lost, or an S3 error.
pub async fn verify_and_delete_inputs(
    store: &impl Store,
    fence: &mut Fence<'_>,
    manifest: &Manifest,
    unproven: &[Unproven],
) -> Result<DeleteOutcome> {
    let Some(output) = &manifest.output else {
        return delete_inputs(store, fence, manifest, unproven).await;
    };
    let (head, listed) = fence
        .beside(async { tokio::try_join!(store.head(&output.key), listed_etags(store, manifest)) })
        .await?;
    let listed = match judge_head(output, head) {
        HeadVerdict::Settled(check, _) => {
            verify_output(store, output, check)?;
            listed
        }
        HeadVerdict::ReadBack(head) => {
            let (check, _, _) = read_back(store, output, head).await?;
            verify_output(store, output, check)?;
            fence.beside(listed_etags(store, manifest)).await?
        }
    };
    delete_listed_inputs(store, fence, manifest, &listed, unproven).await
}

/// The ETag of each of `manifest`'s inputs still in its partition, by key
/// ([`crate::infra::storage::ranges::relist_through`]). Errors: an S3 error listing a page.
pub(crate) async fn listed_etags(
    store: &impl Store,
    manifest: &Manifest,
) -> Result<HashMap<String, String>> {
    let known: std::collections::HashSet<&str> =
        manifest.inputs.iter().map(|i| i.key.as_str()).collect();
    let keys: Vec<&str> = known.iter().copied().collect();
    // Page by page: only the inputs are held, not the keys between them.
    let known = &known;
    let input = move |o: crate::infra::storage::ObjectMeta| {
        Ok(known.contains(o.key.as_str()).then_some((o.key, o.etag)))
    };
    let prefix = index_prefix(manifest.date);
    let listed =
        crate::infra::storage::ranges::relist_through(store, &prefix, &keys, input).await?;
    Ok(listed.into_iter().collect())
}

/// [`delete_inputs`] against `listed` (key → ETag), in waves of [`Store::delete_batches_in_flight`]
/// batches. Errors: the lease lost, or an S3 error after the SDK's retries (keys refused one by one
/// are in [`DeleteOutcome::failed`], not errors).
async fn delete_listed_inputs(
    store: &impl Store,
    fence: &mut Fence<'_>,
    manifest: &Manifest,
    listed: &HashMap<String, String>,
    unproven: &[Unproven],
) -> Result<DeleteOutcome> {
    let mut outcome = DeleteOutcome::default();
    let mut to_delete = Vec::new();
    let keep: HashMap<&str, &Unproven> = unproven.iter().map(|u| (u.key.as_str(), u)).collect();
    for input in &manifest.inputs {
        match input_state(input, listed) {
            InputState::Gone => outcome.already_gone += 1,
            InputState::Newer => {
                tracing::info!(key = %input.key, "input changed since it was read; the newer version is kept");
                outcome.kept_newer.push(input.key.clone());
            }
            InputState::ToDelete => match keep.get(input.key.as_str()) {
                Some(u) => outcome.unproven.push((*u).clone()),
                None => to_delete.push((input.key.clone(), input.etag.clone())),
            },
        }
    }
    let mut failures = Vec::new();
    let batches: Vec<&[(String, String)]> = to_delete.chunks(store.delete_batch_size()).collect();
    for (i, wave) in batches.chunks(store.delete_batches_in_flight().max(1)).enumerate() {
        if i > 0 {
            failpoint!("commit::between-delete-batches");
        }
        fence.check().await?;
        failpoint!("commit::before-delete-batch");
        // Beside each wave, the lease's GET for the next destructive step:
        // the next wave, or the watermark write after the last.
        let sent = futures::future::try_join_all(wave.iter().map(|b| store.delete_batch(b)));
        let done = fence.beside(sent).await?;
        failures.extend(done.into_iter().flatten());
    }
    for f in failures {
        if f.is_newer_version() {
            outcome.kept_newer.push(f.key);
        } else {
            tracing::error!(key = %f.key, code = %f.code, message = %f.message, "input could not be deleted");
            outcome.failed.push(f);
        }
    }
    outcome.deleted += (to_delete.len() - outcome.failed.len()) as u64
        - outcome.kept_newer.iter().filter(|k| to_delete.iter().any(|(d, _)| d == *k)).count()
            as u64;
    // The one place a commit's or recovery's deletes fail.
    crate::protocol::manifest::mark_stuck(store, manifest, &outcome.failed).await;
    failpoint!("commit::after-deletes");
    Ok(outcome)
}

/// Phase 7.
pub async fn delete_manifest(store: &impl Store, key: &str) -> Result<()> {
    failpoint!("commit::before-manifest-delete");
    store.delete(key, None).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_states_against_a_listing() {
        let input =
            |key: &str, etag: &str| ManifestInput { key: key.into(), etag: etag.into(), size: 1 };
        let listed: HashMap<String, String> =
            [("a".to_string(), "\"e1\"".to_string()), ("b".to_string(), "\"e2\"".to_string())]
                .into();
        assert_eq!(input_state(&input("a", "\"e1\""), &listed), InputState::ToDelete);
        // S3 quotes ETags; a manifest may not have: still the same version.
        assert_eq!(input_state(&input("a", "e1"), &listed), InputState::ToDelete);
        assert_eq!(input_state(&input("b", "\"e1\""), &listed), InputState::Newer);
        assert_eq!(input_state(&input("c", "\"e1\""), &listed), InputState::Gone);
    }
}

#[cfg(test)]
mod verify_tests {
    use super::*;
    use crate::infra::storage::MemoryStore;

    /// A manifest of two inputs and an output of `body`, all in `store`;
    /// the output is stored with its SHA-256 when `with_checksum`.
    async fn committed(store: &MemoryStore, with_checksum: bool) -> Manifest {
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let job_id = Uuid::now_v7();
        let inputs = (0..2)
            .map(|i| {
                let key = format!("{}{}.parquet", index_prefix(date), Uuid::now_v7());
                let etag = store.put_now(&key, Bytes::from(vec![i; 8]));
                ManifestInput { key, etag, size: 8 }
            })
            .collect();
        let body = Bytes::from_static(b"PAR1 output PAR1");
        let output = ManifestOutput {
            key: compacted_key(date, job_id),
            size: body.len() as u64,
            sha256: sha256_b64(&body),
            rows: 2,
        };
        if with_checksum {
            let mut request = PutRequest::new(PutMode::Create);
            request.sha256_b64 = Some(output.sha256.clone());
            store.put_object(&output.key, body, request).await.unwrap();
        } else {
            store.put_now(&output.key, body);
        }
        Manifest {
            schema_version: MANIFEST_VERSION,
            job_id,
            date,
            output: Some(output),
            inputs,
            created_at: Utc::now(),
            invocation_id: "test".into(),
        }
    }

    /// The delete phase's outcome, input by input: each counted once, by
    /// what became of it (gone, newer before or at the delete, unproven,
    /// deleted), over one DeleteObjects per key.
    #[tokio::test]
    async fn each_input_is_counted_once_by_what_became_of_it() {
        let store = MemoryStore::new("b").with_delete_batch_size(1);
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let inputs: Vec<ManifestInput> = (0..6u8)
            .map(|i| {
                let key = format!("{}{}.parquet", index_prefix(date), Uuid::now_v7());
                let etag = store.put_now(&key, Bytes::from(vec![i; 8]));
                ManifestInput { key, etag, size: 8 }
            })
            .collect();
        let key = |i: usize| inputs[i].key.clone();
        let m = Manifest {
            schema_version: MANIFEST_VERSION,
            job_id: Uuid::now_v7(),
            date,
            output: None,
            inputs: inputs.clone(),
            created_at: Utc::now(),
            invocation_id: "test".into(),
        };
        // 0 gone and 1 rewritten before the re-list; 2 unproven; 3
        // rewritten after it (the ETag-conditional delete refuses it); 4
        // and 5 deleted.
        store.remove_now(&key(0));
        store.put_now(&key(1), Bytes::from_static(b"newer"));
        let listed = listed_etags(&store, &m).await.unwrap();
        store.put_now(&key(3), Bytes::from_static(b"newer"));
        let unproven = [Unproven { key: key(2), reason: "test".into() }];
        let out =
            delete_listed_inputs(&store, &mut Fence(None), &m, &listed, &unproven).await.unwrap();
        assert_eq!(out.already_gone, 1);
        assert_eq!(out.kept_newer, vec![key(1), key(3)]);
        assert_eq!(out.unproven, unproven.to_vec());
        assert!(out.failed.is_empty(), "{:?}", out.failed);
        assert_eq!(out.deleted, 2, "4 and 5 only: {out:?}");
        assert_eq!(store.requests("DeleteObjects"), 3, "3, 4 and 5, one key each");
        let left = store.snapshot();
        for i in [1, 2, 3] {
            assert!(left.contains_key(&key(i)), "input {i} kept");
        }
        for i in [0, 4, 5] {
            assert!(!left.contains_key(&key(i)), "input {i} gone");
        }
    }

    /// An input S3 refuses to delete leaves the manifest marked stuck
    /// (the mark `status` and the next run's recovery read), naming it; a
    /// commit whose deletes all went through marks nothing.
    #[tokio::test]
    async fn an_input_s3_refuses_to_delete_marks_its_manifest_stuck() {
        let store = MemoryStore::new("b");
        let m = committed(&store, true).await;
        store.deny_deletes(&m.inputs[0].key);
        let done = verify_and_delete_inputs(&store, &mut Fence(None), &m, &[]).await.unwrap();
        assert_eq!(done.failed.len(), 1, "{done:?}");
        assert_eq!(done.deleted, 1, "the refused input is not counted deleted");
        let mark = crate::data::keys::stuck_key(&manifest_key(m.date, m.job_id));
        let body = store.get(&mark).await.expect("the stuck mark").body;
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["first_key"], m.inputs[0].key.as_str());
        assert_eq!(body["code"], "AccessDenied");
        assert_eq!(body["inputs_not_deleted"], 1);

        let clean = MemoryStore::new("b");
        let m = committed(&clean, true).await;
        verify_and_delete_inputs(&clean, &mut Fence(None), &m, &[]).await.unwrap();
        let mark = crate::data::keys::stuck_key(&manifest_key(m.date, m.job_id));
        assert!(clean.get_opt(&mark).await.unwrap().is_none(), "no mark");
    }

    #[tokio::test]
    async fn a_head_that_settles_the_check_goes_beside_the_one_re_list() {
        let store = MemoryStore::new("b");
        let m = committed(&store, true).await;
        let done = verify_and_delete_inputs(&store, &mut Fence(None), &m, &[]).await.unwrap();
        assert_eq!(done.deleted, 2);
        assert_eq!(store.requests("HeadObject"), 1);
        assert_eq!(store.requests("GetObject"), 0, "no read-back");
        assert_eq!(store.requests("ListObjectsV2"), 1);
    }

    #[tokio::test]
    async fn a_read_back_verify_is_followed_by_a_re_list_of_its_own() {
        let store = MemoryStore::new("b");
        let m = committed(&store, false).await;
        let done = verify_and_delete_inputs(&store, &mut Fence(None), &m, &[]).await.unwrap();
        assert_eq!(done.deleted, 2);
        assert_eq!(store.requests("HeadObject"), 1, "the HEAD is not repeated");
        assert_eq!(store.requests("GetObject"), 1, "read back and hashed");
        assert_eq!(store.requests("ListObjectsV2"), 2, "re-listed again after the read-back");
    }

    #[tokio::test]
    async fn an_output_that_differs_deletes_nothing() {
        let store = MemoryStore::new("b");
        let mut m = committed(&store, false).await;
        m.output.as_mut().unwrap().sha256 = sha256_b64(b"another body");
        let e = verify_and_delete_inputs(&store, &mut Fence(None), &m, &[]).await.unwrap_err();
        assert!(matches!(e, Error::VerifyFailed { .. }), "{e}");
        assert_eq!(store.requests("DeleteObjects"), 0);
    }
}

#[cfg(test)]
mod fence_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::infra::clock::ManualClock;
    use crate::infra::stop::Stop;
    use crate::infra::storage::MemoryStore;
    use crate::protocol::lease::LeaseGuard;

    const LENGTH: Duration = Duration::from_secs(960);

    async fn held() -> (MemoryStore, ManualClock, LeaseGuard<MemoryStore>) {
        let clock = ManualClock::new("2026-07-22T04:50:00Z".parse().unwrap());
        let store = MemoryStore::with_clock("b", Arc::new(clock.clone()));
        let lease = LeaseGuard::acquire_with_clock(&store, Arc::new(clock.clone()), "a", LENGTH)
            .await
            .unwrap();
        (store, clock, lease)
    }

    fn output(date: NaiveDate, job_id: Uuid, body: &[u8]) -> ManifestOutput {
        ManifestOutput {
            key: compacted_key(date, job_id),
            size: body.len() as u64,
            sha256: sha256_b64(body),
            rows: 1,
        }
    }

    /// A confirmation taken beside the step before (the manifest's create)
    /// does not cover the output's PUT once the lease expired and another
    /// invocation took it over meanwhile (a write answered late, a paused
    /// process): the fence refuses the PUT, the delete waves and itself.
    #[tokio::test]
    async fn the_fence_refuses_a_step_once_the_lease_passed_to_another_holder() {
        let (store, clock, mut lease) = held().await;
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let job_id = Uuid::now_v7();
        let mut fence = Fence(Some(&mut lease));
        fence.beside(async { Ok(()) }).await.unwrap();
        fence.check().await.unwrap();
        fence.beside(async { Ok(()) }).await.unwrap();
        clock.advance(LENGTH + Duration::from_secs(1));
        let _other = LeaseGuard::acquire_with_clock(&store, Arc::new(clock.clone()), "b", LENGTH)
            .await
            .unwrap();
        let body = Bytes::from_static(b"PAR1 output PAR1");
        let out = output(date, job_id, &body);
        let e = put_output(&store, &mut fence, job_id, &out, body).await.unwrap_err();
        assert!(matches!(e, Error::LeaseLost { .. }), "{e}");
        assert!(!store.snapshot().contains_key(&out.key), "no output put");
        // Nor a wave of deletes.
        let key = format!("{}{}.parquet", index_prefix(date), Uuid::now_v7());
        let etag = store.put_now(&key, Bytes::from_static(b"x"));
        let manifest = Manifest {
            schema_version: MANIFEST_VERSION,
            job_id,
            date,
            output: None,
            inputs: vec![ManifestInput { key: key.clone(), etag, size: 1 }],
            created_at: Utc::now(),
            invocation_id: "a".into(),
        };
        let listed: HashMap<String, String> =
            store.snapshot().into_iter().map(|(k, (_, e))| (k, e)).collect();
        let e =
            delete_listed_inputs(&store, &mut fence, &manifest, &listed, &[]).await.unwrap_err();
        assert!(matches!(e, Error::LeaseLost { .. }), "{e}");
        assert!(store.snapshot().contains_key(&key), "no input deleted");
        assert_eq!(store.requests("DeleteObjects"), 0);
    }

    /// Once a stop is asked for, a manifest's create through the fence
    /// does not start: nothing written.
    #[tokio::test]
    async fn a_stop_refuses_a_manifest_create_through_the_fence() {
        let (store, _clock, mut lease) = held().await;
        let stop = Stop::new();
        lease.stop_on(stop.clone());
        let mut fence = Fence(Some(&mut lease));
        stop.request("SIGTERM");
        let m = manifest_of(None);
        let key = manifest_key(m.date, m.job_id);
        let e = fence.beside(create_manifest(&store, &key, &m)).await.unwrap_err();
        assert!(matches!(e, Error::Interrupted { .. }), "{e}");
        assert!(!store.snapshot().contains_key(&key));
    }

    /// A manifest of 2026-07-20 with a new job id, no inputs and `output`,
    /// written by invocation "a".
    fn manifest_of(output: Option<ManifestOutput>) -> Manifest {
        Manifest {
            schema_version: MANIFEST_VERSION,
            job_id: Uuid::now_v7(),
            date: NaiveDate::from_ymd_opt(2026, 7, 20).unwrap(),
            output,
            inputs: vec![],
            created_at: Utc::now(),
            invocation_id: "a".into(),
        }
    }

    /// The proof reads our own output back whatever `INPUT_BUDGET_MB` is:
    /// a day whose `s3_key` column is over a small input budget still
    /// commits.
    #[tokio::test]
    async fn an_output_over_the_input_budget_is_still_read_back_for_the_proof() {
        let store = MemoryStore::new("b");
        let rows: Vec<_> = (0..20_000u128)
            .map(|i| crate::data::merge::tests::row(&Uuid::from_u128(i + 1).to_string(), "X"))
            .collect();
        let body = Bytes::from(crate::data::merge::encode(&rows, 100_000).unwrap());
        let small = crate::data::input::Budget::from_mb(1);
        let refused =
            crate::data::input::row_flights_of_body(&store, "k", body.clone(), small).await;
        assert!(matches!(&refused, Ok(Err(u)) if u.limit.is_some()), "{refused:?}");
        let m = manifest_of(None);
        let unproven = prove_inputs(&store, &m, &ReadRows::default(), Some(&body)).await;
        assert!(unproven.unwrap().is_empty());
    }

    #[tokio::test]
    async fn create_manifest_writes_it_once() {
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let mut m = manifest_of(None);
        m.output = Some(output(date, m.job_id, b"x"));
        let (job_id, key) = (m.job_id, manifest_key(date, m.job_id));
        create_manifest(&store, &key, &m).await.unwrap();
        let (body, _) = store.snapshot()[&key].clone();
        let back: Manifest = serde_json::from_slice(&body).unwrap();
        assert_eq!(back.job_id, job_id);
        assert_eq!(back.output, m.output);
        // If-None-Match: a second create of the same key with other
        // content is refused (another writer's manifest)...
        let other = Manifest { invocation_id: "b".into(), ..m.clone() };
        let e = create_manifest(&store, &key, &other).await.unwrap_err();
        assert!(matches!(e, Error::PreconditionFailed { .. }), "{e}");
        // ...while the same bytes read back are this run's own write (a
        // retry after a lost answer): settled, not refused.
        create_manifest(&store, &key, &m).await.unwrap();
        assert_eq!(store.snapshot()[&key].0, body);
    }
}

#[cfg(test)]
mod settle_tests {
    use super::*;
    use crate::infra::storage::MemoryStore;

    const BODY: &[u8] = b"PAR1 output PAR1";

    fn output(job_id: Uuid) -> ManifestOutput {
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        ManifestOutput {
            key: compacted_key(date, job_id),
            size: BODY.len() as u64,
            sha256: sha256_b64(BODY),
            rows: 1,
        }
    }

    /// The output's bytes under its key, with its SHA-256 and `job_id` in
    /// its metadata, as [`put_output`] writes it.
    async fn written_by(store: &MemoryStore, out: &ManifestOutput, job_id: Uuid) {
        let mut request = PutRequest::new(PutMode::Create);
        request.sha256_b64 = Some(out.sha256.clone());
        (request.metadata).insert(JOB_ID_METADATA.to_string(), job_id.to_string());
        store.put_object(&out.key, Bytes::from_static(BODY), request).await.unwrap();
    }

    #[tokio::test]
    async fn an_output_put_whose_answer_was_lost_is_settled_by_its_job_id() {
        let store = MemoryStore::new("b");
        let job = Uuid::now_v7();
        let out = output(job);
        // Applied, the answer lost: the retry's PreconditionFailed is what
        // the commit sees. Read back, the object is this commit's.
        put_output(&store.lose_answers(), &mut Fence(None), job, &out, Bytes::from_static(BODY))
            .await
            .unwrap();
        assert_eq!(store.requests("HeadObject"), 1, "settled by a read-back");
    }

    #[tokio::test]
    async fn the_same_bytes_written_by_another_job_are_not_this_commits_output() {
        let store = MemoryStore::new("b");
        let (job, other) = (Uuid::now_v7(), Uuid::now_v7());
        let out = output(job);
        written_by(&store, &out, other).await;
        let e = put_output(&store, &mut Fence(None), job, &out, Bytes::from_static(BODY))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::PreconditionFailed { .. }), "{e}");
    }

    #[tokio::test]
    async fn a_failure_that_does_not_settle_stands_even_when_the_output_is_there() {
        let store = MemoryStore::new("b");
        let job = Uuid::now_v7();
        let out = output(job);
        written_by(&store, &out, job).await;
        // A deadline is not a lost answer (crate::data::state::settles): the
        // run stops; the next run's recovery reads the output.
        let deadline = Error::Deadline {
            op: "PutObject",
            bucket: "b".into(),
            key: out.key.clone(),
            margin_s: 8,
        };
        let e = settle_output(&store, job, &out, Err(deadline)).await.unwrap_err();
        assert!(matches!(e, Error::Deadline { .. }), "{e}");
        assert_eq!(store.requests("HeadObject"), 0, "not read back");
        // Succeeded: nothing to settle.
        settle_output(&store, job, &out, Ok("\"etag\"".into())).await.unwrap();
        assert_eq!(store.requests("HeadObject"), 0);
    }
}

#[cfg(test)]
mod part_tests {
    use super::*;
    use crate::data::merge::Source;
    use crate::data::merge::tests::{row, uuid_n};
    use crate::infra::storage::MemoryStore;

    fn parquet(batch: arrow_array::RecordBatch) -> Bytes {
        Bytes::from(crate::data::merge::encode(&[batch], 10).unwrap())
    }

    /// The gate's second half, in a part's commit: a per-flight file that holds no row of its own
    /// flight ends the part `Lost`, naming that flight, and nothing is written (no manifest, no
    /// compacted file, no input deleted), though the part's other file is sound.
    #[tokio::test]
    async fn a_per_flight_file_without_its_own_row_ends_the_part_lost_and_writes_nothing() {
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let ip = index_prefix(date);
        let (a, b) = (uuid_n(1), uuid_n(2));
        // `a`'s file holds a row of a flight the archive does not have.
        store.put_now(&format!("{ip}{a}.parquet"), parquet(row(&uuid_n(9), "stray")));
        store.put_now(&format!("{ip}{b}.parquet"), parquet(row(&b, "B")));
        let listed = store.list(&ip).await.unwrap();
        let inputs: Vec<PlannedInput> = (listed.iter().cloned())
            .map(|meta| {
                let u = meta.key.rsplit('/').next().unwrap().trim_end_matches(".parquet");
                PlannedInput { source: Source::PerFlight(u.parse().unwrap()), meta }
            })
            .collect();
        let flights: UuidSet = [a.parse().unwrap(), b.parse().unwrap()].into_iter().collect();
        let settings = ReadSettings {
            concurrency: 2,
            row_group_rows: 1000,
            budget: crate::data::input::Budget::default(),
            spill: Default::default(),
        };
        let part = Part {
            date,
            inputs: &inputs,
            flights: &flights,
            settings,
            write: Some((Utc::now(), "test")),
        };
        let outcome =
            commit_part(&store, &mut Fence(None), part, &mut Prefetched::new()).await.unwrap();
        let PartEnd::Lost(lost) = outcome.end else { panic!("{:?}", outcome.end) };
        assert_eq!(lost, [a.parse::<Uuid>().unwrap()]);
        let after: Vec<String> = store.list("").await.unwrap().into_iter().map(|m| m.key).collect();
        let before: Vec<String> = listed.into_iter().map(|m| m.key).collect();
        assert_eq!(after, before, "a lost part writes and deletes nothing");
    }
}
