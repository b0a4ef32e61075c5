//! The read phase of a commit: every input of a day read within the
//! budget, decoded and merged into one encoded output as the bodies arrive.
//!
//! What it guarantees:
//!
//! - **Bounded memory**: at most `READ_CONCURRENCY` bodies in flight, one
//!   input decoded at a time within `INPUT_BUDGET_MB` ([`crate::data::input`]),
//!   the day merged as a stream ([`StreamMerger`]) unless an input is
//!   irregular, then read again and merged in memory ([`Merger`]).
//! - **What was read is what is recorded**: each input taken by the merge
//!   is recorded with the ETag of the version read ([`ReadInputs::read`],
//!   the manifest's inputs) and the flights of its rows
//!   ([`ReadInputs::rows`], what [`crate::protocol::proof`] checks the manifest
//!   against); an input the merge leaves in place is recorded as skipped,
//!   never as read.
//! - **Nothing written**: this module only reads; the commit protocol
//!   ([`crate::protocol::commit`]) writes. The parity gate ([`crate::protocol::partition`])
//!   reads through it too, so the rows it counts are the rows committed.
//!
//! Failpoint (feature `failpoints`): `commit::read-lists-skipped-input`
//! (any action but `off`) records an input the merge skipped as read, so
//! the manifest lists it (the hole [`crate::protocol::commit::prove_inputs`] closes;
//! the crash tests and the simulation plant it).

use std::collections::HashMap;

use bytes::Bytes;
use chrono::{DateTime, NaiveDate, Utc};
use uuid::Uuid;

use crate::data::merge::{
    self, Decoded, MergeInput, MergedOutput, Merger, Source, StreamError, StreamMerger,
};
use crate::data::report::SkippedFile;
use crate::data::state::ManifestInput;
use crate::infra::error::{Error, Result};
use crate::infra::storage::{Fetched, Store};
use crate::protocol::plan::PlannedInput;
use crate::protocol::proof::ReadRows;

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
    /// [`crate::protocol::commit::prepare`] to checksum.
    pub output: MergedOutput,
    /// The rows of each input whose rows went into `output`, recorded as
    /// its body was decoded (by key; what [`crate::protocol::commit::prove_inputs`] checks the
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
    /// ([`crate::protocol::partition::without_own_row`]).
    pub keyless_flights: Vec<Uuid>,
    /// Per-flight files whose bytes could not be decoded (not Parquet,
    /// truncated, a footer or page that does not decode; a file that
    /// decodes but cannot be conformed losslessly names its column and is
    /// not here): their flight's row is in no readable file. Each is also
    /// in `skipped`, left in place. The parity gate counts such a flight as
    /// missing ([`crate::protocol::partition::unread_rows`]).
    pub unread: Vec<crate::data::report::UnreadFile>,
    /// Multi-row inputs merged with rows whose `s3_key` is null, empty or
    /// names no flight (key, rows): those rows are kept, after the rows of
    /// flights, and counted in the report.
    pub rows_without_flight: Vec<(String, u64)>,
    /// Rows of the multi-row inputs whose `first_message` falls on another
    /// UTC date than the partition's: merged where they are, reported.
    pub other_days: merge::OtherDays,
    /// A compacted input over an input limit ([`crate::data::input`]), when one
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
    pub budget: crate::data::input::Budget,
    /// A date's inputs are read in parts of this weight (`PART_FILES`,
    /// [`crate::protocol::plan::parts`]).
    pub part_files: u64,
    /// Past how many uuids a date's sets spill to disk (`FLIGHTS_IN_MEMORY`).
    pub spill: crate::data::spill::SpillSettings,
}

impl ReadSettings {
    /// The settings of `config`.
    pub fn of(config: &crate::data::config::Config) -> ReadSettings {
        ReadSettings {
            concurrency: config.read_concurrency,
            row_group_rows: config.row_group_rows,
            budget: config.input_budget,
            part_files: config.part_files,
            spill: crate::data::spill::SpillSettings {
                limit: crate::protocol::sizing::MemoryFit::of(config).in_memory() as usize,
            },
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
/// irregular (see [`crate::data::merge::stream`]), the streamed pass stops, is
/// logged, and the day is read again and merged in memory ([`Merger`]:
/// about 200 B a row); only such days pay a second set of GETs.
///
/// Each input is read within the budget (`settings.budget`, [`crate::data::input`]): one that breaks
/// an input limit is left in place unread and reported with the limit; a
/// compacted one stops the read ([`ReadInputs::held_back`]). Inputs over
/// [`crate::data::input::SMALL_INPUT_BYTES`] are not read ahead: each is read by
/// ranges when its turn comes, so at most one is decoded at a time.
///
/// An input whose extra column joins no type of the day's
/// ([`crate::data::merge::widen`]), and a per-flight file with rows whose `s3_key`
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
        ..
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
    budget: crate::data::input::Budget,
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
        let Some(read) = read_one(store, input, res?, budget, &mut out.bytes_read).await? else {
            continue;
        };
        match read.outcome {
            Ok(decoded) => {
                let version = (read.etag, read.size);
                if let Taken::NotStreamable(reason) =
                    take(&mut out, &mut sink, date, input, decoded, version)?
                {
                    return Ok(Pass::NotStreamable {
                        reason,
                        bytes_read: out.bytes_read,
                    });
                }
            }
            Err(u) if u.limit.is_some() && input.source == Source::Compacted => {
                hold_back(&mut out, date, input, u);
                return Ok(Pass::Done(Box::new(out)));
            }
            Err(u) => {
                // The hole the proof closes, planted on purpose (tests only):
                // the skipped input recorded as read, so the manifest lists it.
                #[cfg(feature = "failpoints")]
                if fail::eval("commit::read-lists-skipped-input", |_| ()).is_some() {
                    out.read.push(ManifestInput {
                        key: input.meta.key.clone(),
                        etag: read.etag.clone(),
                        size: read.size,
                    });
                }
                leave_unmergeable(&mut out, date, input, u);
            }
        }
    }
    out.output = sink.finish().map_err(|e| Error::Encode {
        date,
        reason: e.to_string(),
    })?;
    Ok(Pass::Done(Box::new(out)))
}

/// Reads `input` within `budget` (one decoded at a time: `crate::data::input`),
/// adding the bytes received to `bytes_read`; `None` when it vanished since
/// the listing.
async fn read_one(
    store: &impl Store,
    input: &PlannedInput,
    ahead: Ahead,
    budget: crate::data::input::Budget,
    bytes_read: &mut u64,
) -> Result<Option<crate::data::input::InputRead>> {
    let body = match ahead {
        Ahead::Body(f) => Some(f),
        Ahead::Later => None,
        Ahead::Vanished => {
            tracing::info!(key = %input.meta.key, "input vanished since the listing; not an input any more");
            return Ok(None);
        }
    };
    let fetched_bytes = body.as_ref().map_or(0, |f| f.body.len() as u64);
    let Some(read) = crate::data::input::read_input(store, &input.meta, body, budget).await? else {
        tracing::info!(key = %input.meta.key, "input vanished since the listing; not an input any more");
        return Ok(None);
    };
    *bytes_read += fetched_bytes + read.bytes_read;
    Ok(Some(read))
}

/// What [`take`] did with a decoded input.
enum Taken {
    /// Merged and recorded, or left in place and reported.
    Done,
    /// The sink cannot merge the day as a stream (why): the pass stops.
    NotStreamable(String),
}

/// Pushes one decoded input into `sink` and records it in `out` (its
/// version, `(etag, size)`, in [`ReadInputs::read`]), or leaves it in place
/// and reports it: a per-flight file with rows whose `s3_key` names no
/// flight, or an input whose columns cannot join the day's.
///
/// Errors: [`Error::Encode`] when the merge fails otherwise.
fn take(
    out: &mut ReadInputs,
    sink: &mut Sink,
    date: NaiveDate,
    input: &PlannedInput,
    decoded: Decoded,
    (etag, size): (String, u64),
) -> Result<Taken> {
    let keyless = merge::rows_without_flight(&decoded);
    if let Some(flight) = input.flight()
        && !check_own_row(out, date, input, flight, &decoded, keyless)
    {
        return Ok(Taken::Done);
    }
    let rows = decoded.batch.num_rows();
    // Recorded only once the merge took the input: one it
    // leaves in place is no input of the manifest.
    let flights = crate::protocol::proof::RowFlights::of_batch(&decoded.batch);
    let mut other_days = merge::OtherDays::default();
    if input.flight().is_none() {
        other_days.count(&decoded, date);
    }
    match sink.push(input, decoded) {
        Ok(()) => {}
        Err(StreamError::NotStreamable(reason)) => return Ok(Taken::NotStreamable(reason)),
        Err(StreamError::Failed(merge::MergeError::Input(u))) => {
            tracing::warn!(key = %input.meta.key, column = ?u.column, reason = %u.reason, "input cannot join the day's columns; left in place");
            out.skipped
                .push(SkippedFile::unmergeable(&input.meta.key, date, u));
            return Ok(Taken::Done);
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
        etag,
        size,
    });
    Ok(Taken::Done)
}

/// Checks a per-flight file of `flight` before its merge: one without a row
/// of its flight goes into [`ReadInputs::without_own_row`]; one with
/// `keyless` rows (whose `s3_key` names no flight) is left in place and
/// reported. Returns whether the file may be merged.
fn check_own_row(
    out: &mut ReadInputs,
    date: NaiveDate,
    input: &PlannedInput,
    flight: Uuid,
    decoded: &Decoded,
    keyless: usize,
) -> bool {
    let own_row = merge::holds_flight(decoded, flight);
    if !own_row {
        tracing::warn!(key = %input.meta.key, %flight, rows = decoded.batch.num_rows(),
            "per-flight file holds no row of its flight");
        out.without_own_row.push(flight);
    }
    if keyless == 0 {
        return true;
    }
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
    false
}

/// A compacted input over an input limit: left in place, and the pass stops
/// with [`ReadInputs::held_back`] set. Merging the rest would write a second
/// compacted file beside this one; the day's stragglers wait instead.
fn hold_back(out: &mut ReadInputs, date: NaiveDate, input: &PlannedInput, u: merge::Unmergeable) {
    tracing::warn!(key = %input.meta.key, reason = %u.reason,
        "compacted file over an input limit: left in place, and the day's other inputs are not merged");
    out.held_back = Some(input.meta.key.clone());
    let reason = format!(
        "compacted file {}; the day's other inputs are left unmerged beside it (a person decides: see docs/runbook.md)",
        u.reason
    );
    let u = merge::Unmergeable { reason, ..u };
    out.skipped
        .push(SkippedFile::unmergeable(&input.meta.key, date, u));
}

/// An input that cannot be merged: left in place and reported; a per-flight
/// file whose bytes do not decode (no column named) is also
/// [`ReadInputs::unread`].
fn leave_unmergeable(
    out: &mut ReadInputs,
    date: NaiveDate,
    input: &PlannedInput,
    u: merge::Unmergeable,
) {
    tracing::warn!(key = %input.meta.key, column = ?u.column, reason = %u.reason, "input cannot be merged; left in place");
    if let (Some(flight), None) = (input.flight(), &u.column) {
        out.unread.push(crate::data::report::UnreadFile {
            key: input.meta.key.clone(),
            flight,
            reason: u.reason.clone(),
        });
    }
    out.skipped
        .push(SkippedFile::unmergeable(&input.meta.key, date, u));
}

/// What the read-ahead fetched of one input.
enum Ahead {
    /// Its whole body (a small object, or one the gate read).
    Body(Fetched),
    /// Nothing yet: a big object, read by ranges when its turn comes
    /// ([`crate::data::input`]), one at a time.
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
    if input.meta.size > crate::data::input::SMALL_INPUT_BYTES {
        return (input, Ok(Ahead::Later));
    }
    let got = store.get_opt(&input.meta.key).await;
    (input, got.map(|f| f.map_or(Ahead::Vanished, Ahead::Body)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::keys::index_prefix;
    use crate::data::merge::tests::{row, uuid_n};
    use crate::infra::storage::MemoryStore;

    fn parquet(batch: &arrow_array::RecordBatch) -> Bytes {
        let mut out = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), None).unwrap();
        w.write(batch).unwrap();
        w.close().unwrap();
        out.into()
    }

    fn settings() -> ReadSettings {
        ReadSettings {
            concurrency: 4,
            row_group_rows: 1000,
            budget: crate::data::input::Budget::default(),
            part_files: 50_000,
            spill: Default::default(),
        }
    }

    /// `n` per-flight files of the date, listed as the plan lists them.
    async fn per_flight_files(store: &MemoryStore, date: NaiveDate, n: u32) -> Vec<PlannedInput> {
        for i in 0..n {
            let u = uuid_n(i);
            let key = format!("{}{u}.parquet", index_prefix(date));
            store.put_now(&key, parquet(&row(&u, "X")));
        }
        (store.list(&index_prefix(date)).await.unwrap().into_iter())
            .map(|meta| {
                let u = meta
                    .key
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .trim_end_matches(".parquet");
                let source = Source::PerFlight(u.parse().unwrap());
                PlannedInput { meta, source }
            })
            .collect()
    }

    /// Rows whose `s3_key` names no flight: a multi-row input's are counted
    /// by input (merged after the flights' rows); a per-flight file made of
    /// such rows holds no row of its flight and is named as keyless (its
    /// name was the only trace of the flight), not counted as a merged one.
    #[tokio::test]
    async fn rows_naming_no_flight_are_counted_and_a_per_flight_file_of_them_is_named() {
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let ip = index_prefix(date);
        let u = uuid_n(1);
        let flight: uuid::Uuid = u.parse().unwrap();
        let pf_key = format!("{ip}{u}.parquet");
        store.put_now(&pf_key, parquet(&row("no-flight", "K")));
        let mr_key = format!("{ip}export.parquet");
        store.put_now(&mr_key, parquet(&row("no-flight", "M")));
        // And one of its own flight's row, which counts no such row.
        let (u2, ok_key) = (uuid_n(2), format!("{ip}{}.parquet", uuid_n(2)));
        store.put_now(&ok_key, parquet(&row(&u2, "OK")));
        let inputs: Vec<PlannedInput> = (store.list(&ip).await.unwrap().into_iter())
            .map(|meta| {
                let source = if meta.key == pf_key {
                    Source::PerFlight(flight)
                } else if meta.key == ok_key {
                    Source::PerFlight(u2.parse().unwrap())
                } else {
                    Source::MultiRow
                };
                PlannedInput { meta, source }
            })
            .collect();
        let read = read_inputs(&store, date, &inputs, settings(), &Prefetched::new())
            .await
            .unwrap();
        assert_eq!(read.without_own_row, [flight]);
        assert_eq!(read.keyless_flights, [flight]);
        assert_eq!(read.rows_without_flight, [(mr_key, 1)]);
    }

    /// An input over `SMALL_INPUT_BYTES` is read later, not fetched ahead,
    /// and its bytes are counted once; under a budget it is over, a
    /// compacted input stops the day (`held_back`: a second compacted file
    /// beside it would follow), a per-flight file does not.
    #[tokio::test]
    async fn a_large_input_is_counted_once_and_only_a_compacted_one_over_the_budget_holds_the_day_back()
     {
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let ip = index_prefix(date);
        let big = "x".repeat(2 << 20);
        let u = uuid_n(1);
        let pf_key = format!("{ip}{u}.parquet");
        store.put_now(&pf_key, parquet(&row(&u, &big)));
        let c_key = format!("{ip}compacted-a.parquet");
        store.put_now(&c_key, parquet(&row(&uuid_n(2), &big)));
        let listed = store.list(&ip).await.unwrap();
        let input = |key: &str, source| PlannedInput {
            meta: listed.iter().find(|m| m.key == key).unwrap().clone(),
            source,
        };
        let per_flight = input(&pf_key, Source::PerFlight(u.parse().unwrap()));
        let compacted = input(&c_key, Source::Compacted);
        assert!(per_flight.meta.size > crate::data::input::SMALL_INPUT_BYTES);
        let read = read_inputs(
            &store,
            date,
            std::slice::from_ref(&per_flight),
            settings(),
            &Prefetched::new(),
        )
        .await
        .unwrap();
        // Read later by ranges (footer, then its column chunks): at most
        // its size, each byte once; the 4-byte magic at its start unread.
        let (got, size) = (read.bytes_read, per_flight.meta.size);
        assert!(got <= size && got + 1024 > size, "{got} of {size}");
        let small = ReadSettings {
            budget: crate::data::input::Budget::from_mb(1),
            ..settings()
        };
        let read = read_inputs(
            &store,
            date,
            std::slice::from_ref(&per_flight),
            small,
            &Prefetched::new(),
        )
        .await
        .unwrap();
        assert_eq!(
            read.held_back, None,
            "a per-flight file over the budget is skipped"
        );
        let read = read_inputs(
            &store,
            date,
            &[compacted, per_flight],
            small,
            &Prefetched::new(),
        )
        .await
        .unwrap();
        assert_eq!(read.held_back.as_ref(), Some(&c_key));
        // Reported with its limit and what it means for the day.
        let skipped = read.skipped.iter().find(|f| f.key == c_key).unwrap();
        assert!(skipped.limit.is_some(), "{skipped:?}");
        assert!(
            skipped.reason.starts_with("compacted file ")
                && skipped.reason.contains("left unmerged beside it"),
            "{skipped:?}"
        );
    }

    #[tokio::test]
    async fn every_byte_read_is_counted_once_streamed_or_prefetched() {
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let inputs = per_flight_files(&store, date, 3).await;
        let total: u64 = inputs.iter().map(|i| i.meta.size).sum();
        let read = read_inputs(&store, date, &inputs, settings(), &Prefetched::new())
            .await
            .unwrap();
        assert_eq!(read.read.len(), 3);
        assert!(read.streamed);
        assert_eq!(read.bytes_read, total, "each file read whole, once");
        assert_eq!(store.requests("GetObject"), 3);
        // A body the parity gate read is reused: no GET for it.
        let first = store.get(&inputs[0].meta.key).await.unwrap();
        let mut prefetched = Prefetched::new();
        prefetched.insert(inputs[0].meta.key.clone(), first);
        let gets = store.requests("GetObject");
        let again = read_inputs(&store, date, &inputs, settings(), &prefetched)
            .await
            .unwrap();
        assert_eq!(store.requests("GetObject"), gets + 2);
        assert_eq!(again.read.len(), 3);
        assert_eq!(again.bytes_read, total);
    }
}
