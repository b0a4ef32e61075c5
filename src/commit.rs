//! The commit protocol for one partition, one short function per phase, in
//! the order of docs/ARCHITECTURE.md, "Commit protocol":
//!
//! 1. [`read_inputs`]: GET every input, remember the ETag of the version read.
//! 2. [`prepare`]: checksum the output [`read_inputs`] merged and encoded as
//!    the inputs arrived, build the [`Manifest`].
//! 3. [`create_manifest`]: conditional create of the manifest.
//! 4. [`put_output`]: conditional create of `compacted-{job_id}.parquet` with a
//!    SHA-256 flexible checksum and the job id in its metadata.
//! 5. [`verify_output`]: HEAD ([`check_output`]); size and checksum must
//!    equal the manifest's.
//! 6. [`delete_inputs`]: re-list, then DeleteObjects each input conditional
//!    on its ETag (a changed input survives as a newer version). Only an
//!    input proven to be in the output is deleted ([`prove_inputs`], the
//!    rule of [`crate::proof`], checked once the output is encoded, before
//!    3); an unproven one is kept and so is the manifest.
//! 7. [`delete_manifest`]: once every input is gone or proven newer.
//!
//! 5's HEAD and 6's re-list run at once ([`verify_and_delete_inputs`]),
//! once the output's PUT has returned (when the output must be read back
//! and hashed, the re-list is taken again after that).
//!
//! The lease is confirmed before each destructive step (4, each wave of 6,
//! and the watermark write). Its GET goes beside the request before that
//! step ([`Fence::beside`]: beside 3, beside 5 and the re-list, beside each
//! wave), so the step itself only checks the lease's expiry on the clock:
//! three fewer round trips a date. The walk deletes the manifest (7) beside
//! the watermark write (`run::write_watermark`): one more.
//!
//! The walker ([`crate::run`]) then advances the watermark. Between 4 and 6 a
//! reader may see a row twice; whatever happens, the manifest lets the next
//! invocation finish or undo the commit ([`crate::recovery`]).
//!
//! Failpoints (feature `failpoints`): `commit::before-manifest-create`,
//! `commit::after-manifest-create`, `commit::after-output-put`,
//! `commit::after-verify`, `commit::before-delete-batch`, `commit::between-delete-batches`,
//! `commit::after-deletes`, `commit::before-manifest-delete`; and one that
//! plants a bug instead of an error: `commit::read-lists-skipped-input`
//! (any action but `off`) records an input the merge skipped as read, so
//! the manifest lists it (the hole [`prove_inputs`] closes; the crash tests
//! and the simulation plant it); `commit::proof-off` switches the proof
//! off (the simulation shows that it then fails).

use std::collections::HashMap;

use bytes::Bytes;
use chrono::{DateTime, NaiveDate, Utc};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::failpoint;
use crate::keys::{compacted_key, index_prefix, manifest_key};
use crate::lease::Confirm;
use crate::merge::{
    self, Decoded, MergeInput, MergedOutput, Merger, Source, StreamError, StreamMerger,
};
use crate::plan::PlannedInput;
use crate::proof::{OutputFlights, ReadRows, Unproven};
use crate::report::SkippedFile;
use crate::state::{MANIFEST_VERSION, Manifest, ManifestInput, ManifestOutput};
use crate::storage::{
    DeleteFailure, Fetched, Head, JOB_ID_METADATA, PutMode, PutRequest, Store, etag_eq,
};

/// Confirms the lease (when there is one) before each destructive step.
#[derive(Debug)]
pub struct Fence<'a>(pub Option<&'a mut dyn Confirm>);

impl Fence<'_> {
    /// [`crate::lease::LeaseGuard::confirm`], or nothing without a lease.
    pub async fn check(&mut self) -> Result<()> {
        match self.0.as_deref_mut() {
            Some(l) => l.confirm_boxed().await,
            None => Ok(()),
        }
    }

    /// Runs `step` while the lease is confirmed beside it
    /// ([`crate::lease::LeaseGuard::confirm_ahead`]), so the next
    /// [`Fence::check`] costs no round trip. `step` must be a request the
    /// lease does not guard: a read, a re-list, the manifest's create (which
    /// recovery undoes when no output follows) or its delete once the inputs
    /// are gone, or a destructive step already checked.
    ///
    /// Errors: [`crate::error::Error::LeaseLost`] when the confirmation
    /// fails (it wins over `step`'s own result), else `step`'s error.
    pub async fn beside<T>(&mut self, step: impl Future<Output = Result<T>>) -> Result<T> {
        match self.0.as_deref_mut() {
            Some(l) => {
                // Asked to stop: `step` does not start (`crate::stop`).
                l.check_stop()?;
                // Boxed: beside a re-list, the pair is kilobytes of future,
                // too much for a 2 MB test thread's stack in debug builds.
                let (out, confirmed) = futures::join!(Box::pin(step), l.confirm_ahead_boxed());
                confirmed?;
                out
            }
            None => step.await,
        }
    }
}

/// One input that was read and decoded; its rows went into
/// [`ReadInputs::output`].
#[derive(Debug, Clone)]
pub struct DecodedInput {
    /// Its source kind.
    pub source: Source,
    /// Its LastModified from the listing.
    pub last_modified: DateTime<Utc>,
    /// Rows it held.
    pub rows: usize,
}

/// Inputs as read, and the merged output.
#[derive(Debug, Default)]
pub struct ReadInputs {
    /// What was decoded, one entry per input in the order it was read
    /// (their rows are in `output`, not here).
    pub merge_inputs: Vec<DecodedInput>,
    /// The merged rows, encoded: deduplicated, in flight order, ready for
    /// [`prepare`] to checksum.
    pub output: MergedOutput,
    /// The rows of each input whose rows went into `output`, recorded as
    /// its body was decoded (by key; what [`prove_inputs`] checks the
    /// manifest's inputs against).
    pub rows: ReadRows,
    /// Whether the day was merged as a stream ([`StreamMerger`]) rather than
    /// in memory ([`Merger`], the fallback for irregular inputs).
    pub streamed: bool,
    /// The version of each decoded input that was read (key, ETag, size).
    pub read: Vec<ManifestInput>,
    /// Inputs left in place: unreadable or unmergeable, with the reason.
    pub skipped: Vec<SkippedFile>,
    /// Bytes read (both passes, when the day was read twice).
    pub bytes_read: u64,
    /// Flights whose per-flight file was read but holds no row of theirs
    /// (no row at all, or only other flights' rows): the parity gate counted
    /// them by the file's name, and merging that file would leave them
    /// without an index row. The commit does not go ahead with any.
    pub without_own_row: Vec<Uuid>,
    /// The flights of `without_own_row` whose per-flight file was left in
    /// place because its rows' `s3_key` is null, empty or names no flight:
    /// such a flight counts as missing even when nothing else is merged
    /// ([`crate::partition::without_own_row`]).
    pub keyless_flights: Vec<Uuid>,
    /// Per-flight files whose bytes could not be decoded (not Parquet,
    /// truncated, a footer or page that does not decode; a file that
    /// decodes but cannot be conformed losslessly names its column and is
    /// not here): their flight's row is in no readable file. Each is also
    /// in `skipped`, left in place. The parity gate counts such a flight as
    /// missing ([`crate::partition::unread_rows`]).
    pub unread: Vec<crate::report::UnreadFile>,
    /// Multi-row inputs merged with rows whose `s3_key` is null, empty or
    /// names no flight (key, rows): those rows are kept, after the rows of
    /// flights, and counted in the report.
    pub rows_without_flight: Vec<(String, u64)>,
    /// Rows of the multi-row inputs whose `first_message` falls on another
    /// UTC date than the partition's: merged where they are, reported.
    pub other_days: merge::OtherDays,
    /// A compacted input over an input limit ([`crate::input`]), when one
    /// was met: the read stopped there and nothing of the day is merged
    /// (merging the rest would put a second compacted file beside it).
    pub held_back: Option<String>,
}

/// Where decoded inputs go.
#[allow(clippy::large_enum_variant)] // one value per read pass, never moved in a loop
enum Sink {
    Stream(StreamMerger),
    Held(Merger, usize),
}

impl Sink {
    fn push(
        &mut self,
        input: &PlannedInput,
        decoded: Decoded,
    ) -> std::result::Result<(), StreamError> {
        match self {
            Sink::Stream(s) => match input.flight() {
                Some(flight) => s.push_per_flight(&input.meta.key, flight, decoded),
                None => s.push_multi_row(&input.meta.key, input.meta.last_modified, decoded),
            },
            Sink::Held(m, _) => m
                .push(MergeInput {
                    source: input.source,
                    last_modified: input.meta.last_modified,
                    decoded,
                })
                .map_err(StreamError::Failed),
        }
    }

    fn finish(self) -> std::result::Result<MergedOutput, StreamError> {
        match self {
            Sink::Stream(s) => s.finish(),
            Sink::Held(m, row_group_rows) => {
                let rows = m.finish().map_err(StreamError::Failed)?;
                let encoded = rows
                    .encode(row_group_rows)
                    .map_err(|e| StreamError::Failed(e.into()))?;
                Ok(MergedOutput {
                    encoded: encoded.map(Bytes::from),
                    rows: rows.num_rows() as u64,
                    duplicates_removed: rows.duplicates_removed(),
                    extra_columns: rows.extra_columns().to_vec(),
                })
            }
        }
    }
}

/// How [`read_inputs`] reads a day.
#[derive(Debug, Clone, Copy)]
pub struct ReadSettings {
    /// GETs in flight at once (`READ_CONCURRENCY`).
    pub concurrency: usize,
    /// Rows per row group of the output (`ROW_GROUP_ROWS`).
    pub row_group_rows: usize,
    /// The per-input budget (`INPUT_BUDGET_MB`).
    pub budget: crate::input::Budget,
}

impl ReadSettings {
    /// The settings of `config`.
    pub fn of(config: &crate::config::Config) -> ReadSettings {
        ReadSettings {
            concurrency: config.read_concurrency,
            row_group_rows: config.row_group_rows,
            budget: config.input_budget,
        }
    }
}

/// Bodies already read this run (by the parity gate: the multi-row inputs
/// whose rows it counted), by key. [`read_inputs`] takes an input's body
/// from here instead of a second GET of the same version.
pub type Prefetched = HashMap<String, Fetched>;

/// Phase 1: reads every input, at most `settings.concurrency` GETs at once (in order:
/// the next bodies arrive while one is decoded; an input in `prefetched` is
/// taken from there, with the ETag it was read with, and costs no GET),
/// decodes each body as it
/// arrives and merges it into the output, which is encoded as it grows
/// (row groups of `row_group_rows` rows). An input that vanished since the
/// listing is dropped; one that cannot be decoded is skipped (left in
/// place, reported).
///
/// The day is first merged as a stream ([`StreamMerger`]: multi-row inputs
/// first, as sorted runs, then the per-flight files in key order), so memory
/// stays bounded by the reads in flight, the multi-row runs, one row group
/// and the encoded output, whatever the number of files. When an input is
/// irregular (see [`crate::merge::stream`]), the streamed pass stops, is
/// logged, and the day is read again and merged in memory ([`Merger`]:
/// about 200 B a row); only such days pay a second set of GETs.
///
/// Each input is read within the budget (`settings.budget`, [`crate::input`]): one that breaks
/// an input limit is left in place unread and reported with the limit; a
/// compacted one stops the read ([`ReadInputs::held_back`]). Inputs over
/// [`crate::input::SMALL_INPUT_BYTES`] are not read ahead: each is read by
/// ranges when its turn comes, so at most one is decoded at a time.
///
/// An input whose extra column joins no type of the day's
/// ([`crate::merge::widen`]), and a per-flight file with rows whose `s3_key`
/// is null, empty or names no flight, are skipped too (left in place,
/// reported; such a file's flight is in [`ReadInputs::without_own_row`]).
///
/// Errors: any other S3 error (after the SDK's retries); [`Error::Encode`]
/// when the merge or the encoder fails.
pub async fn read_inputs(
    store: &impl Store,
    date: NaiveDate,
    inputs: &[PlannedInput],
    settings: ReadSettings,
    prefetched: &Prefetched,
) -> Result<ReadInputs> {
    let ReadSettings {
        concurrency,
        row_group_rows,
        budget,
    } = settings;
    let stream_order: Vec<&PlannedInput> = inputs
        .iter()
        .filter(|i| i.flight().is_none())
        .chain(inputs.iter().filter(|i| i.flight().is_some()))
        .collect();
    let sink = Sink::Stream(StreamMerger::new(row_group_rows));
    let first_bytes = match read_pass(
        store,
        date,
        &stream_order,
        concurrency,
        sink,
        prefetched,
        budget,
    )
    .await?
    {
        Pass::Done(mut out) => {
            out.streamed = true;
            return Ok(*out);
        }
        Pass::NotStreamable { reason, bytes_read } => {
            tracing::info!(%date, %reason, inputs = inputs.len(),
                "the day cannot be merged as a stream; reading its inputs again and merging them in memory");
            bytes_read
        }
    };
    let all: Vec<&PlannedInput> = inputs.iter().collect();
    let sink = Sink::Held(Merger::new(), row_group_rows);
    match read_pass(store, date, &all, concurrency, sink, prefetched, budget).await? {
        Pass::Done(mut out) => {
            out.bytes_read += first_bytes;
            Ok(*out)
        }
        Pass::NotStreamable { reason, .. } => Err(Error::Encode { date, reason }),
    }
}

enum Pass {
    Done(Box<ReadInputs>),
    NotStreamable { reason: String, bytes_read: u64 },
}

async fn read_pass(
    store: &impl Store,
    date: NaiveDate,
    inputs: &[&PlannedInput],
    concurrency: usize,
    mut sink: Sink,
    prefetched: &Prefetched,
    budget: crate::input::Budget,
) -> Result<Pass> {
    use futures::StreamExt;
    let mut out = ReadInputs::default();
    // Lazy: each GET's future is made when `buffered` has room for it. An
    // unstarted future is as large as its whole state machine (the SDK's
    // send path: kilobytes), so collecting one per input first cost ~4 KB a
    // file, 200 MB at 50,000 files (`make bench`). Boxed as a `Send` stream:
    // held across the awaits below, the unboxed `map` closure makes the
    // caller's future fail `Send` for `tokio::spawn` ("implementation of
    // `Send` is not general enough", rust-lang/rust#102211).
    let mut fetched: futures::stream::BoxStream<'_, _> =
        futures::stream::iter(inputs.iter().copied())
            .map(move |i| fetch(store, i, prefetched))
            .buffered(concurrency.max(1))
            .boxed();
    while let Some((input, res)) = fetched.next().await {
        let body = match res? {
            Ahead::Body(f) => Some(f),
            Ahead::Later => None,
            Ahead::Vanished => {
                tracing::info!(key = %input.meta.key, "input vanished since the listing; not an input any more");
                continue;
            }
        };
        let fetched_bytes = body.as_ref().map_or(0, |f| f.body.len() as u64);
        // One input decoded at a time, within the budget (`crate::input`).
        let Some(f) = crate::input::read_input(store, &input.meta, body, budget).await? else {
            tracing::info!(key = %input.meta.key, "input vanished since the listing; not an input any more");
            continue;
        };
        out.bytes_read += fetched_bytes + f.bytes_read;
        let size = f.size;
        match f.outcome {
            Ok(decoded) => {
                let keyless = merge::rows_without_flight(&decoded);
                if let Some(flight) = input.flight() {
                    let own_row = merge::holds_flight(&decoded, flight);
                    if !own_row {
                        tracing::warn!(key = %input.meta.key, %flight, rows = decoded.batch.num_rows(),
                            "per-flight file holds no row of its flight");
                        out.without_own_row.push(flight);
                    }
                    if keyless > 0 {
                        if !own_row {
                            out.keyless_flights.push(flight);
                        }
                        // Merged, the row would lose its flight's uuid
                        // (the name says it; the compacted file would not).
                        tracing::warn!(key = %input.meta.key, %flight, rows = keyless,
                            "per-flight file with rows whose s3_key is null or empty; left in place");
                        out.skipped.push(SkippedFile {
                            key: input.meta.key.clone(),
                            date: Some(date),
                            column: Some("s3_key".into()),
                            reason: format!(
                                "{keyless} row(s) whose s3_key is null, empty or names no flight: merged, they would lose flight {flight}'s uuid; left in place, and the flight counts as missing until s3_key holds its flight object's key"
                            ),
                            limit: None,
                        });
                        continue;
                    }
                }
                let rows = decoded.batch.num_rows();
                // Recorded only once the merge took the input: one it
                // leaves in place is no input of the manifest.
                let flights = crate::proof::RowFlights::of_batch(&decoded.batch);
                let mut other_days = merge::OtherDays::default();
                if input.flight().is_none() {
                    other_days.count(&decoded, date);
                }
                match sink.push(input, decoded) {
                    Ok(()) => {}
                    Err(StreamError::NotStreamable(reason)) => {
                        return Ok(Pass::NotStreamable {
                            reason,
                            bytes_read: out.bytes_read,
                        });
                    }
                    Err(StreamError::Failed(merge::MergeError::Input(u))) => {
                        tracing::warn!(key = %input.meta.key, column = ?u.column, reason = %u.reason, "input cannot join the day's columns; left in place");
                        out.skipped.push(SkippedFile {
                            key: input.meta.key.clone(),
                            date: Some(date),
                            column: u.column,
                            reason: u.reason,
                            limit: u.limit,
                        });
                        continue;
                    }
                    Err(StreamError::Failed(e)) => {
                        return Err(Error::Encode {
                            date,
                            reason: e.to_string(),
                        });
                    }
                }
                if keyless > 0 {
                    out.rows_without_flight
                        .push((input.meta.key.clone(), keyless as u64));
                }
                out.merge_inputs.push(DecodedInput {
                    source: input.source,
                    last_modified: input.meta.last_modified,
                    rows,
                });
                out.rows.insert(&input.meta.key, flights);
                out.other_days.add(other_days);
                out.read.push(ManifestInput {
                    key: input.meta.key.clone(),
                    etag: f.etag,
                    size,
                });
            }
            Err(u) if u.limit.is_some() && input.source == Source::Compacted => {
                // Merging the rest would write a second compacted file
                // beside this one; the day's stragglers wait instead.
                tracing::warn!(key = %input.meta.key, reason = %u.reason,
                    "compacted file over an input limit: left in place, and the day's other inputs are not merged");
                out.held_back = Some(input.meta.key.clone());
                out.skipped.push(SkippedFile {
                    key: input.meta.key.clone(),
                    date: Some(date),
                    column: u.column,
                    reason: format!(
                        "compacted file {}; the day's other inputs are left unmerged beside it (a person decides: see docs/runbook.md)",
                        u.reason
                    ),
                    limit: u.limit,
                });
                return Ok(Pass::Done(Box::new(out)));
            }
            Err(u) => {
                tracing::warn!(key = %input.meta.key, column = ?u.column, reason = %u.reason, "input cannot be merged; left in place");
                // The hole the proof closes, planted on purpose (tests only):
                // the skipped input recorded as read, so the manifest lists it.
                #[cfg(feature = "failpoints")]
                if fail::eval("commit::read-lists-skipped-input", |_| ()).is_some() {
                    out.read.push(ManifestInput {
                        key: input.meta.key.clone(),
                        etag: f.etag.clone(),
                        size,
                    });
                }
                if let (Some(flight), None) = (input.flight(), &u.column) {
                    out.unread.push(crate::report::UnreadFile {
                        key: input.meta.key.clone(),
                        flight,
                        reason: u.reason.clone(),
                    });
                }
                out.skipped.push(SkippedFile {
                    key: input.meta.key.clone(),
                    date: Some(date),
                    column: u.column,
                    reason: u.reason,
                    limit: u.limit,
                });
            }
        }
    }
    out.output = match sink.finish() {
        Ok(o) => o,
        Err(e) => {
            return Err(Error::Encode {
                date,
                reason: e.to_string(),
            });
        }
    };
    Ok(Pass::Done(Box::new(out)))
}

/// What the read-ahead fetched of one input.
enum Ahead {
    /// Its whole body (a small object, or one the gate read).
    Body(Fetched),
    /// Nothing yet: a big object, read by ranges when its turn comes
    /// ([`crate::input`]), one at a time.
    Later,
    /// It vanished since the listing.
    Vanished,
}

async fn fetch<'a>(
    store: &impl Store,
    input: &'a PlannedInput,
    prefetched: &Prefetched,
) -> (&'a PlannedInput, Result<Ahead>) {
    if let Some(f) = prefetched.get(&input.meta.key) {
        return (input, Ok(Ahead::Body(f.clone())));
    }
    if input.meta.size > crate::input::SMALL_INPUT_BYTES {
        return (input, Ok(Ahead::Later));
    }
    let got = store.get_opt(&input.meta.key).await;
    (input, got.map(|f| f.map_or(Ahead::Vanished, Ahead::Body)))
}

/// A commit ready to be written.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The manifest to create.
    pub manifest: Manifest,
    /// Where the manifest goes.
    pub manifest_key: String,
    /// The encoded output (`None` when there are no rows).
    pub body: Option<Bytes>,
    /// Rows dropped as older duplicates.
    pub duplicates_removed: u64,
    /// Extra columns kept.
    pub extra_columns: Vec<String>,
}

pub use crate::storage::sha256_b64;

/// Phase 2: checksums the output [`read_inputs`] encoded (no file at all
/// when there are no rows) and builds the manifest.
///
/// The output is held in memory and hashed before the manifest is written
/// (docs/ARCHITECTURE.md: the manifest records the output's size and checksum before
/// the PUT). A day of 50,000 flights encodes to about 2.6 MB (docs/performance.md,
/// "Performance"); outputs from `MULTIPART_THRESHOLD_BYTES` go up as a
/// multipart upload ([`crate::storage::S3Store::put`]).
///
/// The output is named after the job id ([`compacted_key`]`(date, job_id)`,
/// the manifest being `{job_id}.json`): that is how recovery knows a
/// manifest's own output from another commit's ([`crate::recovery`]).
///
/// The inputs read move into the manifest (`read.read` is left empty): at
/// 200,000 inputs a second copy of every key and ETag was ~37 MB.
///
/// Errors: none today; kept fallible for the encoder settings it may check.
pub fn prepare(
    date: NaiveDate,
    read: &mut ReadInputs,
    now: DateTime<Utc>,
    invocation_id: &str,
) -> Result<Prepared> {
    let merged = &read.output;
    let job_id = Uuid::now_v7();
    let (output, body) = match &merged.encoded {
        None => (None, None),
        Some(bytes) => {
            let out = ManifestOutput {
                key: compacted_key(date, job_id),
                size: bytes.len() as u64,
                sha256: sha256_b64(bytes),
                rows: merged.rows,
            };
            (Some(out), Some(bytes.clone()))
        }
    };
    let manifest = Manifest {
        schema_version: MANIFEST_VERSION,
        job_id,
        date,
        output,
        inputs: std::mem::take(&mut read.read),
        created_at: now,
        invocation_id: invocation_id.to_string(),
    };
    Ok(Prepared {
        manifest_key: manifest_key(date, job_id),
        manifest,
        body,
        duplicates_removed: merged.duplicates_removed,
        extra_columns: merged.extra_columns.clone(),
    })
}

/// Phase 3: creates the manifest (`If-None-Match: *`).
pub async fn create_manifest(store: &impl Store, key: &str, manifest: &Manifest) -> Result<()> {
    failpoint!("commit::before-manifest-create");
    // Compact: at 200,000 inputs the pretty form was 34 MB, this ~29 MB.
    let body = serde_json::to_vec(manifest).expect("manifest serialises");
    let attempt = store
        .put(key, body.clone().into(), PutMode::Create, None)
        .await;
    crate::state::settle_write(store, key, attempt, &body).await?;
    failpoint!("commit::after-manifest-create");
    Ok(())
}

/// Phase 4: writes the output under its fresh key (`If-None-Match: *`, so an
/// existing object is never overwritten), with its SHA-256 checksum and
/// `job_id` (the manifest's) in its metadata ([`JOB_ID_METADATA`]), which
/// recovery checks before it deletes an output.
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
    request
        .metadata
        .insert(JOB_ID_METADATA.to_string(), job_id.to_string());
    let attempt = store.put_object(&output.key, body, request).await;
    settle_output(store, job_id, output, attempt).await?;
    failpoint!("commit::after-output-put");
    Ok(())
}

/// Settles the output's PUT whose `attempt` failed its precondition or
/// failed transiently (its answer lost: [`crate::state::settles`]): the
/// object is read back ([`inspect_output`]: size and SHA-256, read back and
/// hashed when the server keeps no comparable checksum) and when it is this
/// commit's output, with `job_id` in its metadata ([`JOB_ID_METADATA`]),
/// the PUT took effect. Otherwise the attempt's error stands.
async fn settle_output(
    store: &impl Store,
    job_id: Uuid,
    output: &ManifestOutput,
    attempt: Result<String>,
) -> Result<()> {
    let e = match attempt {
        Ok(_) => return Ok(()),
        Err(e) if crate::state::settles(&e) => e,
        Err(e) => return Err(e),
    };
    let job = job_id.to_string();
    match inspect_output(store, output).await {
        Ok((OutputCheck::Verified, Some(head))) if head.job_id() == Some(job.as_str()) => {
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

/// HEADs the output and compares size and SHA-256 with the manifest.
///
/// The stored checksum settles it only when it equals the manifest's. When
/// the server keeps none, or keeps another kind (a multipart object's
/// composite checksum: `{b64}-{parts}` on AWS, bare on some S3-compatible
/// servers), the object is read back and hashed, and that hash decides.
pub async fn check_output(store: &impl Store, output: &ManifestOutput) -> Result<OutputCheck> {
    Ok(inspect_output(store, output).await?.0)
}

/// [`check_output`], plus the HEAD it was decided on (`None` when the output
/// is missing), for its metadata (the job id that wrote it).
pub async fn inspect_output(
    store: &impl Store,
    output: &ManifestOutput,
) -> Result<(OutputCheck, Option<Head>)> {
    let (check, head, _) = inspect_output_read(store, output).await?;
    Ok((check, head))
}

/// [`inspect_output`], plus the body when it was read back to be hashed
/// (`None` when the HEAD settled the check): recovery reads the output's
/// flights from it instead of a second GET.
pub async fn inspect_output_read(
    store: &impl Store,
    output: &ManifestOutput,
) -> Result<(OutputCheck, Option<Head>, Option<Bytes>)> {
    match judge_head(output, store.head(&output.key).await?) {
        HeadVerdict::Settled(check, head) => Ok((check, head, None)),
        HeadVerdict::ReadBack(head) => read_back(store, output, head).await,
    }
}

/// What a HEAD of an output says on its own ([`judge_head`]).
enum HeadVerdict {
    /// Missing, a size that differs, or the manifest's SHA-256 stored.
    Settled(OutputCheck, Option<Head>),
    /// The right size, but no comparable checksum stored: read it back.
    ReadBack(Head),
}

/// Judges `head` (the output's HEAD, `None` when missing) against the
/// manifest's size and SHA-256, without reading the body.
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

/// Reads the output back and hashes it against the manifest's SHA-256.
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
        return Ok((
            OutputCheck::Differs(reason, head.etag.clone()),
            Some(head),
            None,
        ));
    }
    Ok((OutputCheck::Verified, Some(head), Some(f.body)))
}

/// Phase 5: the output must be there with the manifest's size and
/// checksum. `check` is what [`check_output`] (or the HEAD and read-back
/// of [`verify_and_delete_inputs`]) found: `Ok` for
/// [`OutputCheck::Verified`].
///
/// Errors: [`Error::VerifyFailed`] otherwise, naming the output and why.
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
    Err(Error::VerifyFailed {
        bucket: store.bucket().into(),
        key: output.key.clone(),
        reason,
    })
}

/// What [`delete_inputs`] did.
#[derive(Debug, Default, Clone)]
pub struct DeleteOutcome {
    /// Inputs this call deleted (DeleteObjects removed them now): what the
    /// run that retires them reports, once.
    pub deleted: u64,
    /// Inputs not listed any more: deleted by an earlier attempt (a crashed
    /// commit, a stuck manifest retried), which counted them if it
    /// reported at all. Not counted again in `deleted`.
    pub already_gone: u64,
    /// Inputs that changed since they were read: a newer version survives.
    pub kept_newer: Vec<String>,
    /// Inputs that could not be deleted (AccessDenied, ...): the manifest stays.
    pub failed: Vec<DeleteFailure>,
    /// Inputs kept because their rows are not proven to be in the output
    /// ([`prove_inputs`]): the manifest stays.
    pub unproven: Vec<Unproven>,
}

/// Where one input of a manifest stands against a listing of its partition
/// (key → ETag). The one sorting the delete phase, recovery's decision and
/// the dry run share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputState {
    /// Listed in the version the manifest names: delete it (ETag-conditional).
    ToDelete,
    /// Listed in another version (rewritten since it was read): keep it; it
    /// is folded in later.
    Newer,
    /// Not listed: already deleted (by this commit, or a crashed attempt).
    Gone,
}

/// The [`InputState`] of `input` in `listed` (ETags compared as S3 quotes
/// them or not).
pub fn input_state(input: &ManifestInput, listed: &HashMap<String, String>) -> InputState {
    match listed.get(&input.key) {
        None => InputState::Gone,
        Some(etag) if !etag_eq(etag, &input.etag) => InputState::Newer,
        Some(_) => InputState::ToDelete,
    }
}

/// Phase 6: deletes the manifest's inputs, each only in the version read,
/// except the `unproven` ones (their rows are not proven to be in the
/// output: [`prove_inputs`]), which are kept and reported in
/// [`DeleteOutcome::unproven`].
///
/// The partition is re-listed first and any key whose ETag changed is kept
/// (for servers that ignore the ETag in DeleteObjects); the rest goes to
/// DeleteObjects with each key's ETag (S3 refuses to delete a changed one).
pub async fn delete_inputs(
    store: &impl Store,
    fence: &mut Fence<'_>,
    manifest: &Manifest,
    unproven: &[Unproven],
) -> Result<DeleteOutcome> {
    let listed = fence.beside(listed_etags(store, manifest)).await?;
    delete_listed_inputs(store, fence, manifest, &listed, unproven).await
}

/// The check before phase 6: the manifest's inputs whose rows are not
/// proven to be in the output the commit wrote ([`crate::proof`]'s rule),
/// against the rows recorded as each input was read (`read`) and the
/// flights of the encoded output (`body`, `None` when it has no rows),
/// read back from its `s3_key` column. An input the merge skipped (or never
/// read) has no rows recorded and fails. Each failing input is logged as an
/// error.
///
/// Errors: [`Error::Encode`] when the encoded output cannot be read back
/// (then nothing may be deleted).
pub fn prove_inputs(
    manifest: &Manifest,
    read: &ReadRows,
    body: Option<&Bytes>,
) -> Result<Vec<Unproven>> {
    let output = match body {
        None => OutputFlights::default(),
        Some(b) => OutputFlights::read(b.clone()).map_err(|u| Error::Encode {
            date: manifest.date,
            reason: format!(
                "the encoded output's s3_key column cannot be read back: {}",
                u.reason
            ),
        })?,
    };
    let unproven = crate::proof::unproven(
        manifest.inputs.iter().map(|i| i.key.as_str()),
        |k| read.get(k),
        &output,
    );
    // The check switched off (tests only: the simulation shows it fails then).
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

/// Phases 5 and 6 of a commit: verifies the output ([`verify_output`], when
/// the manifest names one) and deletes the inputs against a re-list of the
/// partition. Both reads start only once the output's PUT has returned
/// (a listing taken while the PUT is out let the simulation put two
/// compacted files with the same rows), and the lease is confirmed beside
/// them.
///
/// When the HEAD settles the check (the server keeps the output's SHA-256,
/// as S3 does for a single PUT), the re-list runs beside it. When the output
/// must be read back and hashed (a multipart output, or a server that keeps
/// no comparable checksum), the re-list is taken again once that is done:
/// a listing taken while a long read-back runs would give a server that
/// ignores the ETag in DeleteObjects a wider window in which a version
/// written meanwhile is deleted.
///
/// The `unproven` inputs ([`prove_inputs`]) are kept, as in
/// [`delete_inputs`].
///
/// Errors: [`Error::VerifyFailed`] (nothing is deleted), the lease lost, or
/// an S3 error.
pub async fn verify_and_delete_inputs(
    store: &impl Store,
    fence: &mut Fence<'_>,
    manifest: &Manifest,
    unproven: &[Unproven],
) -> Result<DeleteOutcome> {
    let Some(output) = &manifest.output else {
        let listed = fence.beside(listed_etags(store, manifest)).await?;
        return delete_listed_inputs(store, fence, manifest, &listed, unproven).await;
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

/// The ETag of every object in the partition of `manifest`, by key: its
/// re-list, in key ranges cut between the manifest's inputs
/// ([`crate::storage::ranges::relist`], several ranges at once).
///
/// Errors: an S3 error listing a page.
pub async fn listed_etags(
    store: &impl Store,
    manifest: &Manifest,
) -> Result<HashMap<String, String>> {
    let known: Vec<&str> = manifest.inputs.iter().map(|i| i.key.as_str()).collect();
    Ok(
        crate::storage::ranges::relist(store, &index_prefix(manifest.date), &known)
            .await?
            .into_iter()
            .map(|o| (o.key, o.etag))
            .collect(),
    )
}

/// [`delete_inputs`] against its listing (key → ETag) of the partition,
/// taken once the output's PUT returned. DeleteObjects batches go out
/// [`Store::delete_batches_in_flight`] at a time; the lease is confirmed
/// before each wave (for a later wave, beside the wave before it; beside
/// the last, for the watermark write that follows).
///
/// Errors: the lease lost, or an S3 error after the SDK's retries (keys
/// refused one by one are in [`DeleteOutcome::failed`], not errors).
///
/// The listing is not taken while the output is being put: the simulation
/// (`tests/simulation.rs`) showed that then a listing stalled past the lease
/// expiry lets the PUT land after another invocation's recovery found the
/// output missing and compacted the inputs again: two compacted files with
/// the same rows.
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
    for (i, wave) in batches
        .chunks(store.delete_batches_in_flight().max(1))
        .enumerate()
    {
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
        - outcome
            .kept_newer
            .iter()
            .filter(|k| to_delete.iter().any(|(d, _)| d == *k))
            .count() as u64;
    failpoint!("commit::after-deletes");
    Ok(outcome)
}

/// Phase 7: deletes the manifest.
pub async fn delete_manifest(store: &impl Store, key: &str) -> Result<()> {
    failpoint!("commit::before-manifest-delete");
    store.delete(key, None).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_states_against_a_listing() {
        let input = |key: &str, etag: &str| ManifestInput {
            key: key.into(),
            etag: etag.into(),
            size: 1,
        };
        let listed: HashMap<String, String> = [
            ("a".to_string(), "\"e1\"".to_string()),
            ("b".to_string(), "\"e2\"".to_string()),
        ]
        .into();
        assert_eq!(
            input_state(&input("a", "\"e1\""), &listed),
            InputState::ToDelete
        );
        // S3 quotes ETags; a manifest may not have: still the same version.
        assert_eq!(
            input_state(&input("a", "e1"), &listed),
            InputState::ToDelete
        );
        assert_eq!(
            input_state(&input("b", "\"e1\""), &listed),
            InputState::Newer
        );
        assert_eq!(
            input_state(&input("c", "\"e1\""), &listed),
            InputState::Gone
        );
    }
}

#[cfg(test)]
mod verify_tests {
    use super::*;
    use crate::storage::MemoryStore;

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

    #[tokio::test]
    async fn a_head_that_settles_the_check_goes_beside_the_one_re_list() {
        let store = MemoryStore::new("b");
        let m = committed(&store, true).await;
        let done = verify_and_delete_inputs(&store, &mut Fence(None), &m, &[])
            .await
            .unwrap();
        assert_eq!(done.deleted, 2);
        assert_eq!(store.requests("HeadObject"), 1);
        assert_eq!(store.requests("GetObject"), 0, "no read-back");
        assert_eq!(store.requests("ListObjectsV2"), 1);
    }

    #[tokio::test]
    async fn a_read_back_verify_is_followed_by_a_re_list_of_its_own() {
        let store = MemoryStore::new("b");
        let m = committed(&store, false).await;
        let done = verify_and_delete_inputs(&store, &mut Fence(None), &m, &[])
            .await
            .unwrap();
        assert_eq!(done.deleted, 2);
        assert_eq!(store.requests("HeadObject"), 1, "the HEAD is not repeated");
        assert_eq!(store.requests("GetObject"), 1, "read back and hashed");
        assert_eq!(
            store.requests("ListObjectsV2"),
            2,
            "re-listed again after the read-back"
        );
    }

    #[tokio::test]
    async fn an_output_that_differs_deletes_nothing() {
        let store = MemoryStore::new("b");
        let mut m = committed(&store, false).await;
        m.output.as_mut().unwrap().sha256 = sha256_b64(b"another body");
        let e = verify_and_delete_inputs(&store, &mut Fence(None), &m, &[])
            .await
            .unwrap_err();
        assert!(matches!(e, Error::VerifyFailed { .. }), "{e}");
        assert_eq!(store.requests("DeleteObjects"), 0);
    }
}

#[cfg(test)]
mod fence_tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::lease::LeaseGuard;
    use crate::stop::Stop;
    use crate::storage::MemoryStore;

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
        let e = put_output(&store, &mut fence, job_id, &out, body)
            .await
            .unwrap_err();
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
            inputs: vec![ManifestInput {
                key: key.clone(),
                etag,
                size: 1,
            }],
            created_at: Utc::now(),
            invocation_id: "a".into(),
        };
        let listed: HashMap<String, String> = store
            .snapshot()
            .into_iter()
            .map(|(k, (_, e))| (k, e))
            .collect();
        let e = delete_listed_inputs(&store, &mut fence, &manifest, &listed, &[])
            .await
            .unwrap_err();
        assert!(matches!(e, Error::LeaseLost { .. }), "{e}");
        assert!(store.snapshot().contains_key(&key), "no input deleted");
        assert_eq!(store.requests("DeleteObjects"), 0);
    }

    /// Once a stop is asked for, a write that would go beside a
    /// confirmation (the manifest's create) does not start at all.
    #[tokio::test]
    async fn a_stop_refuses_a_write_beside_a_confirmation_before_it_starts() {
        let (store, _clock, mut lease) = held().await;
        let stop = Stop::new();
        lease.stop_on(stop.clone());
        let mut fence = Fence(Some(&mut lease));
        let started = AtomicBool::new(false);
        let step = || async {
            started.store(true, Ordering::SeqCst);
            Ok(())
        };
        fence.beside(step()).await.unwrap();
        assert!(started.swap(false, Ordering::SeqCst));
        stop.request("SIGTERM");
        let e = fence.beside(step()).await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::Interrupted {
                    signal: "SIGTERM",
                    ..
                }
            ),
            "{e}"
        );
        assert!(!started.load(Ordering::SeqCst), "the write started");
        let e = fence.check().await.unwrap_err();
        assert!(matches!(e, Error::Interrupted { .. }), "{e}");
        // A manifest's create through the fence: nothing written.
        let m = manifest_of(None);
        let key = manifest_key(m.date, m.job_id);
        let e = fence
            .beside(create_manifest(&store, &key, &m))
            .await
            .unwrap_err();
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
        let other = Manifest {
            invocation_id: "b".into(),
            ..m.clone()
        };
        let e = create_manifest(&store, &key, &other).await.unwrap_err();
        assert!(matches!(e, Error::PreconditionFailed { .. }), "{e}");
        // ...while the same bytes read back are this run's own write (a
        // retry after a lost answer): settled, not refused.
        create_manifest(&store, &key, &m).await.unwrap();
        assert_eq!(store.snapshot()[&key].0, body);
    }
}
