//! Phase 1 of a commit: a day's inputs read within the budget, merged and encoded as the bodies
//! arrive. Only reads; the parity gate reads through it too, so the rows it counts are the rows
//! committed. An input is recorded as read ([`ReadInputs::read`], [`ReadInputs::rows`]) only once
//! the merge took it; one left in place is recorded as skipped.
//!
//! Failpoint (feature `failpoints`): `commit::read-lists-skipped-input` records a skipped input as
//! read: the hole [`crate::protocol::commit::prove_inputs`] closes.

use std::collections::HashMap;

use bytes::Bytes;
use chrono::NaiveDate;
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

/// Inputs as read, and the merged output.
#[derive(Debug, Default)]
pub struct ReadInputs {
    /// The kind of each input merged, in the order read.
    pub merge_inputs: Vec<Source>,
    /// The merged rows, encoded: deduplicated, in flight order.
    pub output: MergedOutput,
    /// The flights of each merged input's rows, by key: what
    /// [`crate::protocol::commit::prove_inputs`] checks.
    pub rows: ReadRows,
    /// Merged as a stream, not in memory.
    pub streamed: bool,
    /// The version of each merged input read: the manifest's inputs.
    pub read: Vec<ManifestInput>,
    /// Inputs left in place, with the reason.
    pub skipped: Vec<SkippedFile>,
    /// Bytes read, both passes.
    pub bytes_read: u64,
    /// Flights whose per-flight file holds no row of theirs
    /// ([`crate::protocol::partition::without_own_row`]).
    pub without_own_row: Vec<Uuid>,
    /// The flights of `without_own_row` whose file was left in place for a null, empty or
    /// flightless `s3_key`.
    pub keyless_flights: Vec<Uuid>,
    /// Per-flight files whose bytes do not decode (one that decodes but cannot be conformed names
    /// its column and is not here); also in `skipped`
    /// ([`crate::protocol::partition::unread_rows`]).
    pub unread: Vec<crate::data::report::UnreadFile>,
    /// Multi-row inputs merged with rows whose `s3_key` names no flight (key, rows): kept after the
    /// flights' rows.
    pub rows_without_flight: Vec<(String, u64)>,
    /// Multi-row rows whose `first_message` falls on another UTC date than the partition's: merged
    /// where they are.
    pub other_days: merge::OtherDays,
    /// A compacted input over an input limit: the read stopped there and nothing of the day is
    /// merged (`hold_back`).
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
                let encoded =
                    rows.encode(row_group_rows).map_err(|e| StreamError::Failed(e.into()))?;
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
    /// `FLIGHTS_IN_MEMORY`.
    pub spill: crate::data::spill::SpillSettings,
}

impl ReadSettings {
    /// The settings of `config`.
    pub fn of(config: &crate::data::config::Config) -> ReadSettings {
        ReadSettings {
            concurrency: config.read_concurrency,
            row_group_rows: config.row_group_rows,
            budget: config.input_budget,
            spill: crate::data::spill::SpillSettings {
                limit: crate::protocol::sizing::MemoryFit::of(config).in_memory() as usize,
            },
        }
    }
}

/// Bodies the parity gate already read, by key, so [`read_inputs`] makes no second GET.
pub type Prefetched = HashMap<String, Fetched>;

/// Phase 1: reads every input, `settings.concurrency` GETs ahead in order, and merges each as it
/// arrives. An input that vanished since the listing is dropped; one that cannot be decoded, breaks
/// an input limit ([`crate::data::input`]) or cannot join the day's columns is left in place and
/// reported; a compacted one over a limit stops the read ([`ReadInputs::held_back`]).
///
/// The day is first merged as a stream ([`StreamMerger`]: multi-row inputs first), so memory does
/// not grow with the number of files; when an input is irregular ([`crate::data::merge::stream`])
/// the day is read again and merged in memory ([`Merger`]).
///
/// Errors: any other S3 error (after the SDK's retries); [`Error::Encode`] when the merge or the
/// encoder fails.
pub async fn read_inputs(
    store: &impl Store,
    date: NaiveDate,
    inputs: &[PlannedInput],
    settings: ReadSettings,
    prefetched: &Prefetched,
) -> Result<ReadInputs> {
    let ReadSettings { concurrency, row_group_rows, budget, .. } = settings;
    let stream_order: Vec<&PlannedInput> = inputs
        .iter()
        .filter(|i| i.flight().is_none())
        .chain(inputs.iter().filter(|i| i.flight().is_some()))
        .collect();
    let sink = Sink::Stream(StreamMerger::new(row_group_rows));
    let first =
        read_pass(store, date, &stream_order, concurrency, sink, prefetched, budget).await?;
    let first_bytes = match first {
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
    // Lazy: an unstarted GET future is as large as the SDK's send path, so one is made only when
    // `buffered` has room. Boxed: unboxed, the `map` closure makes the caller's future fail `Send`
    // (rust-lang/rust#102211).
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
                    return Ok(Pass::NotStreamable { reason, bytes_read: out.bytes_read });
                }
            }
            Err(u) if u.limit.is_some() && input.source == Source::Compacted => {
                hold_back(&mut out, date, input, u);
                return Ok(Pass::Done(Box::new(out)));
            }
            Err(u) => {
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
    out.output = sink.finish().map_err(|e| Error::Encode { date, reason: e.to_string() })?;
    Ok(Pass::Done(Box::new(out)))
}

/// `None` when `input` vanished since the listing.
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

enum Taken {
    /// Merged and recorded, or left in place and reported.
    Done,
    /// The sink cannot merge the day as a stream (why): the pass stops.
    NotStreamable(String),
}

/// Merges one decoded input and records it, or leaves it in place and reports it.
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
            out.skipped.push(SkippedFile::unmergeable(&input.meta.key, date, u));
            return Ok(Taken::Done);
        }
        Err(StreamError::Failed(e)) => {
            return Err(Error::Encode { date, reason: e.to_string() });
        }
    }
    if keyless > 0 {
        out.rows_without_flight.push((input.meta.key.clone(), keyless as u64));
    }
    out.merge_inputs.push(input.source);
    out.rows.insert(&input.meta.key, flights);
    out.other_days.add(other_days);
    out.read.push(ManifestInput { key: input.meta.key.clone(), etag, size });
    Ok(Taken::Done)
}

/// Whether a per-flight file may be merged: not with `keyless` rows.
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
    // Merged, the row would lose its flight's uuid (only the name says it).
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

/// Merging the rest would write a second compacted file beside this one; the day's stragglers wait
/// instead.
fn hold_back(out: &mut ReadInputs, date: NaiveDate, input: &PlannedInput, u: merge::Unmergeable) {
    tracing::warn!(key = %input.meta.key, reason = %u.reason,
        "compacted file over an input limit: left in place, and the day's other inputs are not merged");
    out.held_back = Some(input.meta.key.clone());
    let reason = format!(
        "compacted file {}; the day's other inputs are left unmerged beside it (a person decides: see docs/runbook.md)",
        u.reason
    );
    let u = merge::Unmergeable { reason, ..u };
    out.skipped.push(SkippedFile::unmergeable(&input.meta.key, date, u));
}

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
    out.skipped.push(SkippedFile::unmergeable(&input.meta.key, date, u));
}

enum Ahead {
    Body(Fetched),
    /// Over [`crate::data::input::SMALL_INPUT_BYTES`]: read by ranges in its turn, so at most one
    /// is decoded at a time.
    Later,
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
                let u = meta.key.rsplit('/').next().unwrap().trim_end_matches(".parquet");
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
        let read =
            read_inputs(&store, date, &inputs, settings(), &Prefetched::new()).await.unwrap();
        assert_eq!(read.without_own_row, [flight]);
        assert_eq!(read.keyless_flights, [flight]);
        assert_eq!(read.rows_without_flight, [(mr_key, 1)]);
    }

    /// An input that is not Parquet is left in place: a skipped file with the reason, and, a
    /// per-flight one, an unread file of its flight (which fails the date's parity).
    #[tokio::test]
    async fn an_unmergeable_per_flight_file_is_skipped_and_unread() {
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let mut inputs = per_flight_files(&store, date, 2).await;
        let bad = &inputs[0];
        store.put_now(&bad.meta.key, Bytes::from_static(b"not parquet at all"));
        inputs[0].meta = store.list(&bad.meta.key).await.unwrap().remove(0);
        let read =
            read_inputs(&store, date, &inputs, settings(), &Prefetched::new()).await.unwrap();
        let key = &inputs[0].meta.key;
        assert_eq!(read.skipped.iter().map(|f| &f.key).collect::<Vec<_>>(), [key]);
        assert!(read.skipped[0].reason.contains("not a Parquet file"), "{:?}", read.skipped);
        let unread: Vec<_> = read.unread.iter().map(|f| (&f.key, Some(f.flight))).collect();
        assert_eq!(unread, [(key, inputs[0].flight())]);
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
        assert!(got < size && got + 1024 > size, "{got} of {size}");
        let small = ReadSettings { budget: crate::data::input::Budget::from_mb(1), ..settings() };
        let read =
            read_inputs(&store, date, std::slice::from_ref(&per_flight), small, &Prefetched::new())
                .await
                .unwrap();
        assert_eq!(read.held_back, None, "a per-flight file over the budget is skipped");
        let read = read_inputs(&store, date, &[compacted, per_flight], small, &Prefetched::new())
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
        let read =
            read_inputs(&store, date, &inputs, settings(), &Prefetched::new()).await.unwrap();
        assert_eq!(read.read.len(), 3);
        assert!(read.streamed);
        assert_eq!(read.bytes_read, total, "each file read whole, once");
        assert_eq!(store.requests("GetObject"), 3);
        // A body the parity gate read is reused: no GET for it.
        let first = store.get(&inputs[0].meta.key).await.unwrap();
        let mut prefetched = Prefetched::new();
        prefetched.insert(inputs[0].meta.key.clone(), first);
        let gets = store.requests("GetObject");
        let again = read_inputs(&store, date, &inputs, settings(), &prefetched).await.unwrap();
        assert_eq!(store.requests("GetObject"), gets + 2);
        assert_eq!(again.read.len(), 3);
        assert_eq!(again.bytes_read, total);
    }

    /// A day whose per-flight files come out of flight order cannot be
    /// merged as a stream: it is read again and merged in memory, and its
    /// bytes read are both passes' (here each file whole, twice).
    #[tokio::test]
    async fn a_day_merged_in_memory_after_the_stream_failed_counts_the_bytes_of_both_passes() {
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let mut inputs = per_flight_files(&store, date, 2).await;
        inputs.reverse();
        let total: u64 = inputs.iter().map(|i| i.meta.size).sum();
        let read =
            read_inputs(&store, date, &inputs, settings(), &Prefetched::new()).await.unwrap();
        assert!(!read.streamed, "merged in memory");
        assert_eq!(read.read.len(), 2);
        assert_eq!(read.bytes_read, 2 * total, "the streaming pass's bytes and the second's");
    }

    /// An input under `SMALL_INPUT_BYTES` is fetched whole ahead (one over it
    /// is read by ranges, short of its size:
    /// `a_large_input_is_counted_once_and_only_a_compacted_one_over_the_budget_holds_the_day_back`).
    #[tokio::test]
    async fn an_input_under_the_small_size_is_read_whole() {
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let small = uuid_n(2);
        store
            .put_now(&format!("{}{small}.parquet", index_prefix(date)), parquet(&row(&small, "X")));
        let meta = store.list(&index_prefix(date)).await.unwrap().remove(0);
        assert!(meta.size <= crate::data::input::SMALL_INPUT_BYTES);
        let input = PlannedInput { source: Source::PerFlight(small.parse().unwrap()), meta };
        let one = std::slice::from_ref(&input);
        let read = read_inputs(&store, date, one, settings(), &Prefetched::new()).await.unwrap();
        assert_eq!(read.read.len(), 1);
        assert_eq!(read.bytes_read, input.meta.size, "whole");
    }

    /// [`crate::protocol::partition::plan_date`] reads a multi-row input's
    /// flights to keep it with the files sharing one; one that vanished
    /// since the listing shares none (planned alone, the date goes on), one
    /// whose GET fails stops the plan with the error (never planned alone:
    /// its rows could land in another part than their flight's file).
    #[tokio::test]
    async fn a_multi_row_input_goes_with_its_flights_alone_when_gone_and_a_failing_one_stops_the_plan()
     {
        use crate::protocol::plan::{DayAction, DayPlan, PartSizing};
        async fn parts_of(
            store: &MemoryStore,
            inputs: Vec<PlannedInput>,
            settings: ReadSettings,
            prefetched: &mut Prefetched,
        ) -> Result<crate::protocol::plan::DatePlan> {
            let action = DayAction::Compact { inputs };
            let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
            let day = DayPlan { date, action, reason: String::new(), claimed: 0 };
            let sizing = PartSizing { part_weight: 1, files: 4, flights: 4, in_memory: 1_000 };
            crate::protocol::partition::plan_date(store, day, &sizing, settings, prefetched).await
        }
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let mut inputs = per_flight_files(&store, date, 3).await;
        let mr = format!("{}export.parquet", index_prefix(date));
        store.put_now(&mr, parquet(&row(&uuid_n(1), "M")));
        let listed = store.list(&index_prefix(date)).await.unwrap();
        let meta = listed.into_iter().find(|m| m.key == mr).unwrap();
        inputs.push(PlannedInput { meta, source: Source::MultiRow });
        let one = settings();
        let with_mr = |q: crate::protocol::plan::DatePlan| {
            let parts = q.parts.iter().map(|p| p.inputs.iter().map(|i| i.meta.key.clone()));
            parts.map(Vec::from_iter).find(|p: &Vec<String>| p.contains(&mr)).unwrap()
        };
        let flight_1 = format!("{}{}.parquet", index_prefix(date), uuid_n(1));
        let q = parts_of(&store, inputs.clone(), one, &mut Prefetched::new()).await.unwrap();
        assert_eq!(with_mr(q), [flight_1, mr.clone()]);

        store.remove_now(&mr);
        let q = parts_of(&store, inputs.clone(), one, &mut Prefetched::new()).await.unwrap();
        assert_eq!(with_mr(q), std::slice::from_ref(&mr), "gone since the listing: alone");

        store.put_now(&mr, parquet(&row(&uuid_n(1), "M")));
        store.fail_gets(&mr);
        let failed = parts_of(&store, inputs, one, &mut Prefetched::new()).await;
        assert!(failed.is_err(), "a failing GET is not a file that shares no flight");
    }
}
