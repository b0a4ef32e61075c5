//! Bounded reads of index inputs: every Parquet input any command reads goes through
//! [`ObjectReader`], and nothing is decoded before its [`Limit`]s pass, checked from the listed
//! size and the footer alone against the [`Budget`]; over one, the input is
//! [`Unmergeable::over_limit`] and left in place. Later GETs carry `If-Match` with the first's
//! ETag, so a rewrite is [`Error::PreconditionFailed`], never a mix.
//!
//! The push decoder, not `ParquetRecordBatchStreamBuilder`: that takes a `'static` reader and the
//! stores here are borrowed.
//! ```
//! use archive_compaction::data::input::{Budget, ObjectReader};
//! use archive_compaction::data::merge::{encode, target_schema};
//! use archive_compaction::infra::storage::{MemoryStore, Store};
//! use arrow_array::RecordBatch;
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new("archive");
//! let body = encode(&[RecordBatch::new_empty(target_schema())], 10).unwrap();
//! let size = body.len() as u64;
//! store.put_now("index/x.parquet", body.into());
//! let mut r = ObjectReader::new(&store, "index/x.parquet", size, None);
//! let footer = r.footer(Budget::default()).await.unwrap().unwrap();
//! assert_eq!(footer.file_metadata().schema_descr().num_columns(), 9);
//! # });
//! ```

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_cast::cast;
use arrow_schema::{DataType, TimeUnit};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use parquet::DecodeResult;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::push_decoder::ParquetPushDecoderBuilder;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use tokio::sync::Semaphore;

use crate::data::keys::flight_uuid;
use crate::data::merge::{self, Decoded, Unmergeable};
use crate::data::merge::{Limit, LimitBroken};
use crate::infra::error::{Error, Result};
use crate::infra::storage::{Fetched, ObjectMeta, Store};
use crate::protocol::proof::RowFlights;

/// Objects of at most this many bytes are fetched whole (one GET): a per-flight file is a few KB.
pub const SMALL_INPUT_BYTES: u64 = 256 * 1024;

/// The tail a bigger object's first GET reads: it holds any footer pyarrow or this job writes.
pub(crate) const TAIL_READ_BYTES: u64 = 64 * 1024;

/// At most this many leaf columns (the index schema has 9).
pub const COLUMNS_MAX: u64 = 1_000;

/// A footer may take 1/this of the budget at most: it is parsed whole, into several times its size.
pub const FOOTER_SHARE: u64 = 32;

/// Decoded bytes counted per value of a read column, on top of the chunk's
/// declared uncompressed bytes (offsets, validity): what bounds a
/// dictionary-encoded column, whose pages are small whatever they decode to.
pub const DECODED_BYTES_PER_VALUE: u64 = 24;

/// Ranges of one object closer than this (256 KiB) are fetched in one GET.
pub const COALESCE_GAP_BYTES: u64 = 256 * 1024;

/// The budget without `INPUT_BUDGET_MB` or `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`
/// (a quarter of the deployed 512 MB).
pub const BUDGET_MB_DEFAULT: u64 = 128;

/// Rows a decoded batch holds at most (the reader's batch size).
pub const BATCH_ROWS: usize = 8192;

const MAGIC: &[u8] = b"PAR1";

/// What an input yields, or why it is left in place.
pub type Readable<T> = std::result::Result<T, Unmergeable>;

/// The memory one input may take once decoded, in bytes (`INPUT_BUDGET_MB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    bytes: u64,
}

impl Budget {
    pub(crate) fn from_mb(mb: u64) -> Budget {
        Budget { bytes: mb.saturating_mul(1024 * 1024) }
    }

    /// The budget in bytes.
    pub fn bytes(self) -> u64 {
        self.bytes
    }

    /// The longest footer allowed, in bytes (the budget / [`FOOTER_SHARE`]).
    pub fn footer_bytes(self) -> u64 {
        self.bytes / FOOTER_SHARE
    }

    /// [`BUDGET_MB_DEFAULT`] MiB.
    pub const DEFAULT: Budget = Budget { bytes: BUDGET_MB_DEFAULT * 1024 * 1024 };
}

/// The budget for reading back this job's own output (to prove inputs by its
/// `s3_key`): the largest `INPUT_BUDGET_MB` takes, so a big day never fails
/// its commit; memory stays bounded (one row group of one column at a time).
pub const OWN_OUTPUT_BUDGET: Budget = Budget { bytes: 1024 * 1024 * 1024 * 1024 };

impl Default for Budget {
    fn default() -> Self {
        Budget::DEFAULT
    }
}

fn over(limit: Limit, found: u64, allowed: u64) -> Readable<()> {
    if found > allowed {
        Err(Unmergeable::over_limit(LimitBroken { limit, found, allowed }))
    } else {
        Ok(())
    }
}

/// The decoded size the footer declares for `leaves`, in bytes ([`DECODED_BYTES_PER_VALUE`]).
pub fn decoded_bytes(metadata: &ParquetMetaData, leaves: &[usize]) -> u64 {
    let mut total = 0u64;
    for rg in metadata.row_groups() {
        let rows = rg.num_rows().max(0) as u64;
        for &c in leaves {
            let declared = rg.column(c).uncompressed_size().max(0) as u64;
            total = total
                .saturating_add(declared)
                .saturating_add(rows.saturating_mul(DECODED_BYTES_PER_VALUE));
        }
    }
    total
}

/// The top-level leaf columns named one of `names` (without case), in file order.
pub(crate) fn leaves_named(metadata: &ParquetMetaData, names: &[&str]) -> Vec<usize> {
    let descr = metadata.file_metadata().schema_descr();
    (descr.columns().iter().enumerate())
        .filter(|(_, c)| {
            let parts = c.path().parts();
            parts.len() == 1 && names.iter().any(|n| merge::same_column(&parts[0], n))
        })
        .map(|(i, _)| i)
        .collect()
}

/// One S3 object read as Parquet, each GET within a permit of `gets` when given.
#[derive(Debug)]
pub struct ObjectReader<'a, S> {
    store: &'a S,
    key: &'a str,
    size: u64,
    /// The version read (once something was read), or to read (`if_match`).
    etag: Option<String>,
    whole: Option<Bytes>,
    /// The tail read first (offset, bytes): ranges in it are not fetched again.
    tail: Option<(u64, Bytes)>,
    /// Objects of at most this many bytes ([`SMALL_INPUT_BYTES`] unless set) are read whole.
    whole_up_to: u64,
    gets: Option<&'a Semaphore>,
    requests: AtomicU64,
    bytes_read: AtomicU64,
}

impl<'a, S: Store> ObjectReader<'a, S> {
    /// A reader of `key` (`size` bytes as listed), only in version `if_match` when given.
    pub fn new(store: &'a S, key: &'a str, size: u64, if_match: Option<&str>) -> Self {
        ObjectReader {
            store,
            key,
            size,
            etag: if_match.map(str::to_string),
            whole: None,
            tail: None,
            whole_up_to: SMALL_INPUT_BYTES,
            gets: None,
            requests: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
        }
    }

    /// The object's whole body, already read (no GET at all).
    pub(crate) fn with_body(mut self, f: Fetched) -> Self {
        self.size = f.body.len() as u64;
        self.etag = Some(f.etag);
        self.whole = Some(f.body);
        self
    }

    fn count(&self, bytes: usize) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes_read.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    async fn permit(&self) -> Option<tokio::sync::SemaphorePermit<'a>> {
        let permit = futures::future::OptionFuture::from(self.gets.map(Semaphore::acquire)).await;
        permit.map(|p| p.expect("the semaphore is never closed"))
    }

    /// Bytes `range` of the object, clipped to its end. Errors: S3 errors;
    /// [`Error::PreconditionFailed`] when no longer the version read first (another ETag, shorter).
    async fn get(&self, range: Range<u64>) -> Result<Bytes> {
        let (start, end) = (range.start.min(self.size), range.end.min(self.size));
        if let Some(b) = &self.whole {
            return Ok(b.slice(start as usize..end as usize));
        }
        Ok(self.fetch(start..end).await?.body)
    }

    /// One ranged GET of the version read first, within a permit.
    async fn fetch(&self, range: Range<u64>) -> Result<Fetched> {
        let _permit = self.permit().await;
        let f = (self.store).get_range(self.key, range.clone(), self.etag.as_deref()).await?;
        self.count(f.body.len());
        if (f.body.len() as u64) < range.end - range.start {
            return Err(self.changed());
        }
        Ok(f)
    }

    fn changed(&self) -> Error {
        Error::PreconditionFailed {
            op: "GetObject",
            bucket: self.store.bucket().to_string(),
            key: self.key.to_string(),
        }
    }

    /// The whole object when small, else its tail; it fixes the version read.
    async fn first_read(&mut self) -> Result<Bytes> {
        if let Some(b) = &self.whole {
            return Ok(b.clone());
        }
        if self.size <= self.whole_up_to.max(TAIL_READ_BYTES) {
            let _permit = self.permit().await;
            let f = self.store.get(self.key).await?;
            drop(_permit);
            self.count(f.body.len());
            if let Some(want) = &self.etag
                && !crate::infra::storage::etag_eq(want, &f.etag)
            {
                return Err(self.changed());
            }
            self.size = f.body.len() as u64;
            self.etag = Some(f.etag);
            self.whole = Some(f.body.clone());
            return Ok(f.body);
        }
        let start = self.size - TAIL_READ_BYTES;
        let f = self.fetch(start..self.size).await?;
        self.etag = Some(f.etag);
        self.tail = Some((start, f.body.clone()));
        Ok(f.body)
    }

    /// Many ranges, coalesced ([`COALESCE_GAP_BYTES`]; up to 10 GETs at once).
    pub(crate) async fn get_ranges(&self, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let Some((tail_at, tail)) = &self.tail else {
            return object_store::coalesce_ranges(ranges, |r| self.get(r), COALESCE_GAP_BYTES)
                .await;
        };
        let tail_at = *tail_at;
        let heads: Vec<Range<u64>> = (ranges.iter())
            .filter(|r| r.start < tail_at)
            .map(|r| r.start..r.end.min(tail_at))
            .collect();
        let fetched =
            object_store::coalesce_ranges(&heads, |r| self.get(r), COALESCE_GAP_BYTES).await?;
        let mut fetched = fetched.into_iter();
        let in_tail = |start: u64, end: u64| {
            let end = end.min(self.size).max(start);
            tail.slice((start - tail_at) as usize..(end - tail_at) as usize)
        };
        Ok((ranges.iter())
            .map(|r| {
                if r.start >= tail_at {
                    return in_tail(r.start, r.end);
                }
                let head = fetched.next().expect("one fetched range per head");
                if r.end <= tail_at {
                    return head;
                }
                Bytes::from([&head[..], &in_tail(tail_at, r.end)[..]].concat())
            })
            .collect())
    }

    /// Reads and parses the footer within `budget`.
    ///
    /// Errors: S3 errors (a missing key: [`Error::is_not_found`]). Not Parquet (under 12 bytes, no
    /// `PAR1` magic, a footer length that does not fit) or over a limit is `Ok(Err(_))`.
    pub async fn footer(&mut self, budget: Budget) -> Result<Readable<Arc<ParquetMetaData>>> {
        let tail = self.first_read().await?;
        let (size, n) = (self.size, tail.len());
        let footer_len = match footer_len(&tail, size, self.whole.is_some(), budget) {
            Ok(len) => len,
            Err(u) => return Ok(Err(u)),
        };
        let footer: Bytes = if footer_len + 8 <= n as u64 {
            tail.slice(n - 8 - footer_len as usize..n - 8)
        } else {
            let head = self.get(size - 8 - footer_len..size - n as u64).await?;
            Bytes::from([&head[..], &tail[..n - 8]].concat())
        };
        Ok(parse_footer(&footer))
    }

    /// Decodes the columns of `mask` in batches of at most [`BATCH_ROWS`] rows into `each` (which
    /// may stop with an [`Unmergeable`]). Errors: S3 errors; an undecodable file is `Ok(Err(_))`.
    pub(crate) async fn read_batches(
        &self,
        arrow: ArrowReaderMetadata,
        mask: ProjectionMask,
        mut each: impl FnMut(RecordBatch) -> Readable<()>,
    ) -> Result<Readable<()>> {
        let cannot = |e: parquet::errors::ParquetError| {
            Unmergeable::new(None, format!("cannot decode: {e}"))
        };
        let mut decoder = match ParquetPushDecoderBuilder::new_with_metadata(arrow)
            .with_projection(mask)
            .with_batch_size(BATCH_ROWS)
            .build()
        {
            Ok(d) => d,
            Err(e) => return Ok(Err(Unmergeable::new(None, format!("cannot read: {e}")))),
        };
        loop {
            match decoder.try_decode() {
                Ok(DecodeResult::NeedsData(ranges)) => {
                    if let Some(r) = ranges.iter().find(|r| r.end > self.size) {
                        return Ok(Err(Unmergeable::new(
                            None,
                            format!(
                                "column chunk {}..{} lies outside the file ({} bytes)",
                                r.start, r.end, self.size
                            ),
                        )));
                    }
                    let data = self.get_ranges(&ranges).await?;
                    if let Err(e) = decoder.push_ranges(ranges, data) {
                        return Ok(Err(cannot(e)));
                    }
                }
                Ok(DecodeResult::Data(batch)) => {
                    if let Err(u) = each(batch) {
                        return Ok(Err(u));
                    }
                }
                Ok(DecodeResult::Finished) => return Ok(Ok(())),
                Err(e) => return Ok(Err(cannot(e))),
            }
        }
    }
}

/// The footer length `tail`, the end of an object of `size` bytes (all of it when `whole`),
/// declares; why it is left in place when not Parquet or the footer is over `budget`.
fn footer_len(tail: &[u8], size: u64, whole: bool, budget: Budget) -> Readable<u64> {
    let n = tail.len();
    if size < 12 || n < 8 || &tail[n - 4..] != MAGIC || (whole && &tail[..4] != MAGIC) {
        let reason = format!("not a Parquet file: bad magic or truncated ({size} bytes)");
        return Err(Unmergeable::new(None, reason));
    }
    let footer_len = u32::from_le_bytes(tail[n - 8..n - 4].try_into().expect("4 bytes")) as u64;
    if footer_len + 8 > size.saturating_sub(4) {
        return Err(Unmergeable::new(
            None,
            format!(
                "not a Parquet file: its footer's declared length ({footer_len} bytes) does not fit in the file ({size} bytes)"
            ),
        ));
    }
    over(Limit::FooterBytes, footer_len, budget.footer_bytes())?;
    Ok(footer_len)
}

fn parse_footer(footer: &[u8]) -> Readable<Arc<ParquetMetaData>> {
    let options = merge::footer_options();
    let metadata = ParquetMetaDataReader::decode_metadata_with_options(footer, Some(&options))
        .map_err(|e| Unmergeable::new(None, format!("not a readable Parquet file: {e}")))?;
    let columns = metadata.file_metadata().schema_descr().num_columns() as u64;
    over(Limit::Columns, columns, COLUMNS_MAX)?;
    Ok(Arc::new(metadata))
}

/// One input as the merge read it.
#[derive(Debug)]
pub(crate) struct InputRead {
    /// The ETag of the version read.
    pub etag: String,
    /// Its size in bytes (as listed, or as read when read whole).
    pub size: u64,
    /// Body bytes received (0 when the body was handed in).
    pub bytes_read: u64,
    /// Its rows conformed to [`merge::target_schema`], or why it is left in place.
    pub outcome: Readable<Decoded>,
}

/// Reads one input for the merge within `budget` (`body` when the caller holds it).
///
/// Errors: S3 errors; `Ok(None)` when the object vanished since the listing.
pub(crate) async fn read_input(
    store: &impl Store,
    meta: &ObjectMeta,
    body: Option<Fetched>,
    budget: Budget,
) -> Result<Option<InputRead>> {
    let mut reader = ObjectReader::new(store, &meta.key, meta.size, None);
    if let Some(f) = body {
        reader = reader.with_body(f);
    }
    let footer = match reader.footer(budget).await {
        Err(e) if e.is_not_found() => return Ok(None),
        r => r?,
    };
    let checked = footer.and_then(|metadata| {
        let all: Vec<usize> = (0..metadata.file_metadata().schema_descr().num_columns()).collect();
        over(Limit::DecodedBytes, decoded_bytes(&metadata, &all), budget.bytes()).map(|()| metadata)
    });
    let outcome = match (checked, reader.whole.clone()) {
        (Err(u), _) => Err(u),
        (Ok(metadata), Some(body)) => merge::decode_parsed(body, metadata),
        (Ok(metadata), None) => match decode_ranged(&reader, metadata).await {
            Err(e) if e.is_not_found() => return Ok(None),
            r => r?,
        },
    };
    Ok(Some(InputRead {
        etag: reader.etag.unwrap_or_default(),
        size: reader.size,
        bytes_read: reader.bytes_read.into_inner(),
        outcome,
    }))
}

async fn decode_ranged<S: Store>(
    reader: &ObjectReader<'_, S>,
    metadata: Arc<ParquetMetaData>,
) -> Result<Readable<Decoded>> {
    let (arrow, conformed) = match merge::arrow_metadata(metadata) {
        Ok(a) => a,
        Err(u) => return Ok(Err(u)),
    };
    let schema = arrow.schema().clone();
    let mut batches = Vec::new();
    let read = reader
        .read_batches(arrow, ProjectionMask::all(), |b| {
            batches.push(b);
            Ok(())
        })
        .await?;
    Ok(read.and_then(|()| merge::decoded_from(&schema, batches, conformed)))
}

/// What [`read_columns`] did.
#[derive(Debug)]
pub struct ColumnsRead {
    /// GET requests sent.
    pub requests: u64,
    /// Body bytes received.
    pub bytes_read: u64,
    /// The whole body, when small enough to be read whole (for reuse).
    pub whole: Option<Fetched>,
    /// `Ok` once every batch went to the caller; else why the file cannot be read.
    pub outcome: Readable<()>,
}

/// Reads the columns `names` (any case; `names[0]` required) of one
/// multi-row input, handing each batch to `each` (memory: one batch).
///
/// Errors: S3 errors ([`Error::PreconditionFailed`] when the object changed).
/// An unreadable input is `Ok`, its [`ColumnsRead::outcome`] `Err`.
pub async fn read_columns(
    store: &impl Store,
    meta: &ObjectMeta,
    if_match: Option<&str>,
    budget: Budget,
    gets: Option<&Semaphore>,
    names: &[&str],
    each: impl FnMut(RecordBatch) -> Readable<()>,
) -> Result<ColumnsRead> {
    // Whole only when the tail read would take it all (a few columns cost less).
    let mut reader = ObjectReader {
        whole_up_to: TAIL_READ_BYTES,
        gets,
        ..ObjectReader::new(store, &meta.key, meta.size, if_match)
    };
    let outcome = columns_of(&mut reader, budget, names, each).await?;
    Ok(ColumnsRead {
        requests: reader.requests.into_inner(),
        bytes_read: reader.bytes_read.into_inner(),
        whole: reader.whole.map(|body| Fetched { body, etag: reader.etag.unwrap_or_default() }),
        outcome,
    })
}

async fn columns_of<S: Store>(
    reader: &mut ObjectReader<'_, S>,
    budget: Budget,
    names: &[&str],
    each: impl FnMut(RecordBatch) -> Readable<()>,
) -> Result<Readable<()>> {
    match reader.footer(budget).await?.and_then(|m| projection(m, names, budget)) {
        Ok((arrow, mask)) => reader.read_batches(arrow, mask, each).await,
        Err(u) => Ok(Err(u)),
    }
}

/// The decoder's view of the columns `names` (`names[0]` required), within `budget`.
fn projection(
    metadata: Arc<ParquetMetaData>,
    names: &[&str],
    budget: Budget,
) -> Readable<(ArrowReaderMetadata, ProjectionMask)> {
    let leaves = leaves_named(&metadata, names);
    if leaves_named(&metadata, &names[..1.min(names.len())]).is_empty() {
        return Err(Unmergeable::new(names.first().copied(), "column is missing"));
    }
    over(Limit::DecodedBytes, decoded_bytes(&metadata, &leaves), budget.bytes())?;
    let mask = ProjectionMask::leaves(metadata.file_metadata().schema_descr(), leaves);
    let arrow = ArrowReaderMetadata::try_new(metadata, ArrowReaderOptions::new())
        .map_err(|e| Unmergeable::new(None, format!("not a readable Parquet file: {e}")))?;
    Ok((arrow, mask))
}

/// The flights of one object's rows by its `s3_key` column, and how many rows
/// name none: what [`crate::protocol::proof`] checks by.
///
/// Errors: S3 errors ([`Error::PreconditionFailed`] when not version
/// `if_match`). Not Parquet, over a limit or no `s3_key`: `Ok(Err(_))`.
pub async fn row_flights(
    store: &impl Store,
    key: &str,
    size: u64,
    if_match: Option<&str>,
    budget: Budget,
) -> Result<Readable<RowFlights>> {
    let mut reader = ObjectReader {
        whole_up_to: TAIL_READ_BYTES,
        ..ObjectReader::new(store, key, size, if_match)
    };
    flights_of(&mut reader, budget).await
}

/// [`row_flights`] of a body in memory (no GET); `store` and `key` only name it in errors.
pub(crate) async fn row_flights_of_body(
    store: &impl Store,
    key: &str,
    body: Bytes,
    budget: Budget,
) -> Result<Readable<RowFlights>> {
    let f = Fetched { body, etag: String::new() };
    let mut reader = ObjectReader::new(store, key, 0, None).with_body(f);
    flights_of(&mut reader, budget).await
}

async fn flights_of<S: Store>(
    reader: &mut ObjectReader<'_, S>,
    budget: Budget,
) -> Result<Readable<RowFlights>> {
    let mut out = RowFlights::default();
    let read = columns_of(reader, budget, &["s3_key"], |b| {
        let keys = RowKeys::of(&b)?;
        for row in 0..keys.rows() {
            match keys.s3_key(row).and_then(flight_uuid) {
                Some(u) => out.flights.push(u),
                None => out.anonymous += 1,
            }
        }
        Ok(())
    })
    .await?;
    Ok(read.map(|()| out))
}

/// The `s3_key` and `first_message` of a batch's rows, by name without case. Of columns equal
/// but for case, a row's `s3_key` is the first not null; its `first_message` is the first column's.
#[derive(Debug)]
pub(crate) struct RowKeys {
    keys: Vec<ArrayRef>,
    first: Option<(ArrayRef, TimeUnit)>,
}

impl RowKeys {
    /// Errors: [`Unmergeable`] naming the column when `s3_key` is missing or not
    /// a string, or `first_message` is not a timestamp.
    pub fn of(batch: &RecordBatch) -> Readable<RowKeys> {
        let named = |n: &str| {
            (batch.schema_ref().fields().iter())
                .enumerate()
                .filter(|(_, f)| merge::same_column(f.name(), n))
                .map(|(i, _)| batch.column(i).clone())
                .collect::<Vec<_>>()
        };
        let keys = (named("s3_key").iter())
            .map(|c| cast(c, &DataType::Utf8))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Unmergeable::new(Some("s3_key"), e.to_string()))?;
        if keys.is_empty() {
            return Err(Unmergeable::new(Some("s3_key"), "column is missing"));
        }
        let first = match named("first_message").first().map(|c| (c, c.data_type())) {
            None | Some((_, DataType::Null)) => None,
            Some((c, DataType::Timestamp(unit, _))) => {
                let v = cast(c, &DataType::Int64)
                    .map_err(|e| Unmergeable::new(Some("first_message"), e.to_string()))?;
                Some((v, *unit))
            }
            Some((_, t)) => {
                let reason = format!("type {t} is not a timestamp");
                return Err(Unmergeable::new(Some("first_message"), reason));
            }
        };
        Ok(RowKeys { keys, first })
    }

    pub fn rows(&self) -> usize {
        self.keys[0].len()
    }

    /// Row `row`'s `s3_key` (`None` when null).
    pub fn s3_key(&self, row: usize) -> Option<&str> {
        (self.keys.iter())
            .map(|c| c.as_string::<i32>())
            .find(|c| c.is_valid(row))
            .map(|c| c.value(row))
    }

    /// Row `row`'s `first_message` ([`merge::first_message_at`]); `None` when unknown.
    pub fn first_message(&self, row: usize) -> Option<DateTime<Utc>> {
        let (v, unit) = self.first.as_ref()?;
        let v = v.as_primitive::<arrow_array::types::Int64Type>();
        v.is_valid(row).then(|| merge::first_message_at(v.value(row), *unit)).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::storage::MemoryStore;

    async fn meta(store: &MemoryStore, key: &str) -> ObjectMeta {
        store.list(key).await.unwrap().remove(0)
    }

    #[tokio::test]
    async fn a_footer_longer_than_the_file_is_not_parquet_before_any_limit() {
        let store = MemoryStore::new("b");
        // Ends in PAR1 and declares a footer of 4 GiB - 1.
        let mut body = vec![b'x'; 300 * 1024];
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        body.extend_from_slice(MAGIC);
        store.put_now("k.parquet", body.into());
        let m = meta(&store, "k.parquet").await;
        let r = read_input(&store, &m, None, Budget::from_mb(1)).await;
        let u = r.unwrap().unwrap().outcome.unwrap_err();
        assert!(u.limit.is_none(), "{u:?}");
        assert!(u.reason.starts_with("not a Parquet file"), "{u:?}");
    }

    #[tokio::test]
    async fn limits_name_what_they_found() {
        let store = MemoryStore::new("b");
        let rows: Vec<RecordBatch> = (0..2000)
            .map(|i| crate::data::merge::tests::row(&crate::data::merge::tests::uuid_n(i), "X"))
            .collect();
        let body = crate::data::merge::encode(&rows, 1000).unwrap();
        store.put_now("k.parquet", body.into());
        let m = meta(&store, "k.parquet").await;
        // 2,000 rows of 9 columns: at least 432,000 decoded bytes; the
        // footer (a few KB) is within 1/32 of the budget.
        let tiny = Budget { bytes: 300_000 };
        let u = (read_input(&store, &m, None, tiny).await.unwrap().unwrap()).outcome.unwrap_err();
        let l = u.limit.unwrap();
        assert_eq!(l.limit, Limit::DecodedBytes);
        assert!(l.found > 432_000 && l.allowed == 300_000, "{l:?}");
        // The s3_key column alone fits.
        let mut n = 0;
        let read = read_columns(&store, &m, None, tiny, None, &["s3_key"], |b| {
            n += RowKeys::of(&b)?.rows();
            Ok(())
        })
        .await
        .unwrap();
        read.outcome.unwrap();
        assert_eq!(n, 2000);
        let ok = read_input(&store, &m, None, Budget::default()).await;
        assert_eq!(ok.unwrap().unwrap().outcome.unwrap().batch.num_rows(), 2000);
    }

    #[tokio::test]
    async fn a_big_file_is_read_by_ranges_with_the_same_rows() {
        let store = MemoryStore::new("b");
        // Idents that do not compress: the file is over SMALL_INPUT_BYTES.
        let ident =
            |i: u32| format!("{:016x}", (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).repeat(4);
        let rows: Vec<RecordBatch> = (0..20_000)
            .map(|i| {
                crate::data::merge::tests::row(&crate::data::merge::tests::uuid_n(i), &ident(i))
            })
            .collect();
        let body = Bytes::from(crate::data::merge::encode(&rows, 1000).unwrap());
        assert!(body.len() as u64 > SMALL_INPUT_BYTES, "{}", body.len());
        store.put_now("k.parquet", body.clone());
        let m = meta(&store, "k.parquet").await;
        let got = (read_input(&store, &m, None, Budget::default()).await).unwrap().unwrap();
        let want = crate::data::merge::decode(body).unwrap();
        assert_eq!(got.outcome.unwrap().batch, want.batch);
    }

    const U1: &str = "019f7d73-f820-702f-b905-8c81d0944996";

    /// The proof's reading of a file: `s3_key` by name without case, and
    /// two such columns as one (the first value that is not null).
    #[tokio::test]
    async fn row_flights_match_s3_key_without_case() {
        use arrow_array::StringArray;
        use arrow_schema::{Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("S3_KEY", DataType::Utf8, true),
            Field::new("s3_Key", DataType::Utf8, true),
        ]));
        let key = format!("flights/2026/07/20/X_Y_{U1}.json.gz");
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![None, Some(key.as_str()), None])),
                Arc::new(StringArray::from(vec![Some(key.as_str()), None, None])),
            ],
        )
        .unwrap();
        let mut body = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut body, schema, None).unwrap();
        w.write(&b).unwrap();
        w.close().unwrap();
        let store = MemoryStore::new("b");
        let got = row_flights_of_body(&store, "k", Bytes::from(body), Budget::default()).await;
        let got = got.unwrap().unwrap();
        assert_eq!(got.flights, vec![uuid::Uuid::parse_str(U1).unwrap(); 2]);
        assert_eq!(got.anonymous, 1);
    }

    /// An encoded output's flights read back, from the store by ranges as
    /// from memory.
    #[tokio::test]
    async fn row_flights_of_an_encoded_file() {
        let store = MemoryStore::new("b");
        let b = crate::data::merge::tests::row(U1, "X");
        let bytes = Bytes::from(crate::data::merge::encode(std::slice::from_ref(&b), 10).unwrap());
        let want = vec![uuid::Uuid::parse_str(U1).unwrap()];
        let got = row_flights_of_body(&store, "k", bytes.clone(), Budget::default()).await;
        assert_eq!(got.unwrap().unwrap().flights, want);
        let etag = store.put_now("k.parquet", bytes.clone());
        let size = bytes.len() as u64;
        let got = row_flights(&store, "k.parquet", size, Some(&etag), Budget::default()).await;
        assert_eq!(got.unwrap().unwrap().flights, want);
        // Another version than the one asked for: refused, not read.
        store.put_now("k.parquet", Bytes::from_static(b"another version"));
        let e = row_flights(&store, "k.parquet", size, Some(&etag), Budget::default()).await;
        assert!(matches!(e, Err(Error::PreconditionFailed { .. })), "{e:?}");
    }
}
