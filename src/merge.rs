//! The merge: decode index files, conform them to the target schema, keep one
//! row per flight, encode one compacted Parquet file.
//!
//! Inputs are matched to [`target_schema`] **by column name**. Conversions are
//! applied only when they are lossless (string encodings, timestamp units
//! that hold the same instant exactly, nullable columns without nulls into
//! required ones); anything else makes that one file [`Unmergeable`] with the
//! column and reason, and the rest of the day goes on. Columns the target does
//! not know are kept after the known ones (nullable) and reported.
//!
//! One row per flight: the flight is the uuid in `s3_key` (or, for a
//! per-flight file, the uuid of its file name). Between two rows of the same
//! flight a per-flight file beats a multi-row file (compacted, or another
//! multi-row index file such as a legacy migration's), and between two
//! per-flight files, or two multi-row files, the later LastModified wins.
//! Output rows are in uuid (= key) order.
//!
//! Two merges give the same output:
//!
//! - [`StreamMerger`] ([`stream`]), used first for every day: compacted
//!   inputs as sorted runs, then per-flight files in key order, each row
//!   written to the Parquet writer as soon as its place is known. Memory is
//!   the reads in flight, one write batch, the open row group and the
//!   encoded output, whatever the day's size. It needs regular inputs (one
//!   row per per-flight file, of that flight; compacted files in uuid
//!   order) and says [`StreamError::NotStreamable`] otherwise.
//! - [`Merger`], the fallback for irregular days: it takes inputs one at a
//!   time, copies their rows into coalesced chunks of [`COALESCE_ROWS`]
//!   rows, keeps one small dedup entry per flight and drops the input;
//!   [`MergedRows::encode`] then writes the kept rows in output order. It
//!   holds the day's rows once (about 150 B a row of Arrow buffers plus
//!   about 40 B of bookkeeping), never a set of arrays per file. [`merge`]
//!   is the same over a slice, into one batch.
//!
//! ```
//! use archive_compaction::merge::{target_schema, encode, decode};
//! use arrow_array::RecordBatch;
//! let empty = RecordBatch::new_empty(target_schema());
//! let bytes = encode(&[empty], 1024).unwrap();
//! let back = decode(bytes::Bytes::from(bytes)).unwrap();
//! assert_eq!(back.batch.num_rows(), 0);
//! assert_eq!(back.batch.schema(), target_schema());
//! ```

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, RecordBatch, RecordBatchReader, StringArray, TimestampMicrosecondArray,
    new_null_array,
};
use arrow_cast::cast;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow_select::coalesce::BatchCoalescer;
use arrow_select::interleave::interleave_record_batch;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use parquet::arrow::ArrowWriter;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::basic::{Compression, ZstdLevel};
use parquet::basic::{LogicalType, TimeUnit as ParquetTimeUnit, Type as PhysicalType};
use parquet::file::metadata::{
    ParquetMetaDataOptions, ParquetMetaDataReader, ParquetStatisticsPolicy,
};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::SchemaDescriptor;
use uuid::Uuid;

use crate::keys::flight_uuid;

pub mod stream;
pub use stream::{MergedOutput, StreamError, StreamMerger};

/// The Glue table's columns, in order (docs/ARCHITECTURE.md, "Bucket layout";
/// specs/index-schema.md).
pub fn target_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
            Arc::new(Schema::new(vec![
                Field::new("icao_hex", DataType::Utf8, true),
                Field::new("registration", DataType::Utf8, true),
                Field::new("type_designator", DataType::Utf8, true),
                Field::new("military", DataType::Boolean, false),
                Field::new("operator_designator", DataType::Utf8, true),
                Field::new("ident", DataType::Utf8, true),
                Field::new("first_message", ts.clone(), true),
                Field::new("last_message", ts, true),
                Field::new("s3_key", DataType::Utf8, true),
            ]))
        })
        .clone()
}

/// Why one file cannot be merged. The file is left in place and reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Unmergeable {
    /// The column involved, when one is.
    pub column: Option<String>,
    /// What is wrong, e.g. "not a Parquet file: bad magic".
    pub reason: String,
}

fn unmergeable(column: Option<&str>, reason: impl Into<String>) -> Unmergeable {
    Unmergeable {
        column: column.map(str::to_string),
        reason: reason.into(),
    }
}

/// A decoded input, conformed to the target schema (known columns first,
/// then any extra columns it had).
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The rows.
    pub batch: RecordBatch,
    /// Names of columns the target schema does not know (kept).
    pub extra_columns: Vec<String>,
}

/// A Parquet file starts and ends with the magic `PAR1` (Parquet format
/// specification); the footer-only reader does not look at the first one.
fn check_magic(bytes: &[u8]) -> Result<(), Unmergeable> {
    const MAGIC: &[u8] = b"PAR1";
    if bytes.len() < 12 || &bytes[..4] != MAGIC || &bytes[bytes.len() - 4..] != MAGIC {
        return Err(unmergeable(
            None,
            format!(
                "not a Parquet file: bad magic or truncated ({} bytes)",
                bytes.len()
            ),
        ));
    }
    Ok(())
}

/// Decodes one Parquet file and conforms it to [`target_schema`].
///
/// Per file this parses the footer (without the column and size statistics,
/// which a full read does not use) and reads the columns; an index file laid
/// out exactly as the writer writes it ([`has_target_layout`]) is read
/// straight into [`target_schema`], without decoding the Arrow schema pyarrow
/// embeds in every footer and without a conform step. Any other file goes
/// the general way: the embedded Arrow schema, then [`conform`]. Both give
/// the same rows.
///
/// Errors: [`Unmergeable`] for bytes that are not Parquet (bad magic,
/// truncated footer), a missing required column, or a value that cannot be
/// represented exactly in the target type.
pub fn decode(bytes: Bytes) -> Result<Decoded, Unmergeable> {
    check_magic(&bytes)?;
    let metadata = ParquetMetaDataReader::new()
        .with_metadata_options(Some(
            ParquetMetaDataOptions::new()
                .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
                .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll),
        ))
        .parse_and_finish(&bytes)
        .map(Arc::new)
        .map_err(|e| unmergeable(None, format!("not a readable Parquet file: {e}")))?;
    let direct = has_target_layout(metadata.file_metadata().schema_descr())
        .then(|| {
            let options = ArrowReaderOptions::new().with_schema(target_schema());
            ArrowReaderMetadata::try_new(metadata.clone(), options).ok()
        })
        .flatten();
    let conformed = direct.is_some();
    let arrow_metadata = match direct {
        Some(m) => m,
        None => ArrowReaderMetadata::try_new(metadata, ArrowReaderOptions::new())
            .map_err(|e| unmergeable(None, format!("not a readable Parquet file: {e}")))?,
    };
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(bytes, arrow_metadata)
        .build()
        .map_err(|e| unmergeable(None, format!("cannot read: {e}")))?;
    let schema = reader.schema();
    let mut batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unmergeable(None, format!("cannot decode: {e}")))?;
    let batch = if batches.len() == 1 {
        batches.pop().expect("one batch")
    } else {
        arrow_select::concat::concat_batches(&schema, &batches)
            .map_err(|e| unmergeable(None, format!("cannot decode: {e}")))?
    };
    if conformed {
        // Read as the target schema (the reader checked names, types and
        // nullability against the footer); the batch takes the shared
        // schema itself, so later schema comparisons are pointer compares.
        if let Ok(batch) = batch.clone().with_schema(target_schema()) {
            return Ok(Decoded {
                batch,
                extra_columns: Vec::new(),
            });
        }
    }
    conform(&batch)
}

/// Whether a file's Parquet schema is the index schema exactly as the
/// archive writer (pyarrow) writes it: the [`target_schema`] columns in
/// order, strings as `BYTE_ARRAY` annotated `STRING`, `military` a
/// `BOOLEAN`, the timestamps `INT64` annotated `TIMESTAMP(MICROS)`, no
/// other column. Such a file reads into [`target_schema`] with the same
/// values [`conform`] would give (a UTC-adjusted or local `TIMESTAMP(MICROS)`
/// holds the same epoch microseconds either way). Anything else (another
/// unit, `INT96`, unannotated binary, extra or missing columns) goes through
/// the embedded Arrow schema and [`conform`], which decides what is lossless.
fn has_target_layout(parquet: &SchemaDescriptor) -> bool {
    let target = target_schema();
    parquet.num_columns() == target.fields().len()
        && parquet.root_schema().get_fields().len() == target.fields().len()
        && target.fields().iter().zip(parquet.columns()).all(|(f, c)| {
            let leaf = c.self_type();
            leaf.is_primitive()
                && c.max_rep_level() == 0
                && c.path().parts().len() == 1
                && leaf.name() == f.name()
                && match f.data_type() {
                    DataType::Utf8 => {
                        c.physical_type() == PhysicalType::BYTE_ARRAY
                            && matches!(c.logical_type_ref(), Some(LogicalType::String))
                    }
                    DataType::Boolean => c.physical_type() == PhysicalType::BOOLEAN,
                    DataType::Timestamp(TimeUnit::Microsecond, _) => {
                        c.physical_type() == PhysicalType::INT64
                            && matches!(
                                c.logical_type_ref(),
                                Some(LogicalType::Timestamp(t)) if t.unit == ParquetTimeUnit::MICROS
                            )
                    }
                    _ => false,
                }
        })
}

/// Conforms a batch to [`target_schema`] by column name (see module docs).
pub fn conform(batch: &RecordBatch) -> Result<Decoded, Unmergeable> {
    let target = target_schema();
    let rows = batch.num_rows();
    let mut fields: Vec<Field> = Vec::with_capacity(target.fields().len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(target.fields().len());
    for f in target.fields() {
        let col = match batch.schema().index_of(f.name()) {
            Ok(i) => conform_column(f, batch.column(i))?,
            Err(_) if f.is_nullable() => new_null_array(f.data_type(), rows),
            Err(_) => return Err(unmergeable(Some(f.name()), "required column is missing")),
        };
        fields.push(f.as_ref().clone());
        columns.push(col);
    }
    let mut extra_columns = Vec::new();
    for (i, f) in batch.schema().fields().iter().enumerate() {
        if target.index_of(f.name()).is_err() {
            extra_columns.push(f.name().clone());
            fields.push(
                f.as_ref()
                    .clone()
                    .with_nullable(true)
                    .with_metadata(HashMap::<String, String>::new()),
            );
            columns.push(batch.column(i).clone());
        }
    }
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| unmergeable(None, e.to_string()))?;
    Ok(Decoded {
        batch,
        extra_columns,
    })
}

fn conform_column(target: &Field, col: &ArrayRef) -> Result<ArrayRef, Unmergeable> {
    let name = target.name();
    if !target.is_nullable() && col.null_count() > 0 {
        return Err(unmergeable(
            Some(name),
            format!("{} null value(s) in a required column", col.null_count()),
        ));
    }
    match (target.data_type(), col.data_type()) {
        (t, s) if t == s => Ok(col.clone()),
        (DataType::Utf8, DataType::LargeUtf8 | DataType::Utf8View) => {
            cast(col, &DataType::Utf8).map_err(|e| unmergeable(Some(name), e.to_string()))
        }
        (DataType::Utf8, DataType::Dictionary(_, v))
            if matches!(
                v.as_ref(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) =>
        {
            cast(col, &DataType::Utf8).map_err(|e| unmergeable(Some(name), e.to_string()))
        }
        (DataType::Timestamp(TimeUnit::Microsecond, tz), DataType::Timestamp(unit, _)) => {
            // Timezone-aware and naive timestamps both store the instant as
            // UTC-based epoch values in Arrow/Parquet; only the unit changes.
            let values = col.as_primitive_opt::<arrow_array::types::Int64Type>();
            let raw: Vec<Option<i64>> = match values {
                Some(v) => v.iter().collect(),
                None => {
                    let as_i64 = cast(col, &DataType::Int64)
                        .map_err(|e| unmergeable(Some(name), e.to_string()))?;
                    as_i64
                        .as_primitive::<arrow_array::types::Int64Type>()
                        .iter()
                        .collect()
                }
            };
            let mut out = Vec::with_capacity(raw.len());
            for v in raw {
                out.push(match v {
                    None => None,
                    Some(v) => Some(to_micros(v, *unit).ok_or_else(|| {
                        unmergeable(
                            Some(name),
                            format!("timestamp {v} ({unit:?}) has no exact microsecond value"),
                        )
                    })?),
                });
            }
            let arr = TimestampMicrosecondArray::from(out).with_timezone_opt(tz.clone());
            Ok(Arc::new(arr))
        }
        (t, s) => Err(unmergeable(
            Some(name),
            format!("type {s} cannot be converted to {t} without loss"),
        )),
    }
}

fn to_micros(v: i64, unit: TimeUnit) -> Option<i64> {
    match unit {
        TimeUnit::Second => v.checked_mul(1_000_000),
        TimeUnit::Millisecond => v.checked_mul(1_000),
        TimeUnit::Microsecond => Some(v),
        TimeUnit::Nanosecond => (v % 1_000 == 0).then_some(v / 1_000),
    }
}

/// Where an input comes from, which decides who wins between duplicates:
/// a per-flight file beats any multi-row file (compacted or other); between
/// two per-flight files, and between two multi-row files, the later
/// LastModified wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// A `compacted-*.parquet` file, ours or the Python job's (loses to any
    /// per-flight file).
    Compacted,
    /// Another multi-row index file (a legacy migration's
    /// `legacy-migration.parquet`, an export): ranked as a compacted file.
    MultiRow,
    /// A per-flight `{uuid}.parquet` file named after this flight.
    PerFlight(Uuid),
}

/// One decoded input with what the dedup rule needs.
#[derive(Debug, Clone)]
pub struct MergeInput {
    /// Its source kind.
    pub source: Source,
    /// Its LastModified (later per-flight versions win).
    pub last_modified: DateTime<Utc>,
    /// The rows, conformed.
    pub decoded: Decoded,
}

/// The merged rows of a day, as one batch (see [`merge`]).
#[derive(Debug, Clone)]
pub struct Merged {
    /// The rows in output order; `None` when there are no rows.
    pub batch: Option<RecordBatch>,
    /// Rows dropped because a newer version of the same flight was kept.
    pub duplicates_removed: u64,
    /// Extra (non-target) columns kept in the output.
    pub extra_columns: Vec<String>,
}

/// Merges conformed inputs: one row per flight (see module docs), ordered by
/// flight uuid, rows without a flight uuid last in input order. Extra columns
/// are unioned (by name; later files whose extra column has another type have
/// it cast, or it is an error string).
///
/// This is [`Merger`] with every input pushed and the output gathered into
/// one batch; the commit path uses [`Merger`] and [`MergedRows::encode`]
/// instead, which never hold the inputs or the output rows whole.
pub fn merge(inputs: &[MergeInput]) -> Result<Merged, String> {
    let mut merger = Merger::new();
    for i in inputs {
        merger.push(i.clone())?;
    }
    let rows = merger.finish()?;
    let batch = if rows.num_rows() == 0 {
        None
    } else {
        let parts = rows
            .batches(rows.num_rows())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        Some(
            arrow_select::concat::concat_batches(&rows.schema(), &parts)
                .map_err(|e| e.to_string())?,
        )
    };
    Ok(Merged {
        batch,
        duplicates_removed: rows.duplicates_removed(),
        extra_columns: rows.extra_columns().to_vec(),
    })
}

/// Rows per coalesced chunk held by a [`Merger`]: single-row inputs are
/// copied into chunks of this many rows as they arrive, so a day costs its
/// rows' bytes (about 150 B a row) rather than one set of Arrow arrays per
/// file (several KB each).
pub const COALESCE_ROWS: usize = 4096;

/// Rows per batch handed to the Parquet writer by [`MergedRows::encode`].
pub const WRITE_BATCH_ROWS: usize = 8192;

/// `b` in the union `schema` (the target columns, then every extra column
/// seen so far), matched by name: a column of another type is cast to the
/// type the extra column had where it was first seen, a missing one is all
/// nulls. Shared by [`Merger`] and [`StreamMerger`].
///
/// Errors: an extra column whose values cannot be cast (the message names it).
fn to_union_schema(b: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, String> {
    if b.schema() == *schema {
        return Ok(b.clone());
    }
    let cols = schema
        .fields()
        .iter()
        .map(|f| match b.schema().index_of(f.name()) {
            Ok(ix) if b.column(ix).data_type() == f.data_type() => Ok(b.column(ix).clone()),
            Ok(ix) => cast(b.column(ix), f.data_type())
                .map_err(|e| format!("extra column {}: {e}", f.name())),
            Err(_) => Ok(new_null_array(f.data_type(), b.num_rows())),
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(schema.clone(), cols).map_err(|e| e.to_string())
}

/// Which input wins between two rows of one flight: per-flight over
/// compacted, then the later LastModified; at equal rank the later input.
type Rank = (u8, DateTime<Utc>);

fn rank(source: Source, last_modified: DateTime<Utc>) -> Rank {
    match source {
        Source::Compacted | Source::MultiRow => (0, last_modified),
        Source::PerFlight(_) => (1, last_modified),
    }
}

/// A streaming merge: inputs are pushed one at a time, in plan (key) order,
/// as they are read.
///
/// Each pushed input is cast to the union schema, its rows are copied into
/// coalesced chunks of [`COALESCE_ROWS`] rows (arrow's `BatchCoalescer`) and
/// the input itself is dropped; the dedup decision is kept as one small
/// entry per flight (uuid, rank, row number). Memory therefore grows with
/// the day's **rows** (their Arrow bytes, about 150 B a row for the index
/// schema, plus about 40 B of bookkeeping), not with the number of files, and
/// the caller holds at most its in-flight inputs besides.
///
/// ```
/// use archive_compaction::merge::{Merger, MergeInput, Source, target_schema, conform};
/// use arrow_array::RecordBatch;
/// let mut m = Merger::new();
/// let empty = conform(&RecordBatch::new_empty(target_schema())).unwrap();
/// m.push(MergeInput { source: Source::Compacted, last_modified: Default::default(), decoded: empty }).unwrap();
/// let rows = m.finish().unwrap();
/// assert_eq!(rows.num_rows(), 0);
/// assert!(rows.encode(1024).unwrap().is_none()); // never an empty output file
/// ```
#[derive(Debug)]
pub struct Merger {
    fields: Vec<Field>,
    extra_columns: Vec<String>,
    schema: SchemaRef,
    coalescer: BatchCoalescer,
    chunks: Vec<RecordBatch>,
    rows: usize,
    winners: HashMap<Uuid, (Rank, usize)>,
    anonymous: Vec<usize>,
}

impl Default for Merger {
    fn default() -> Self {
        Merger::new()
    }
}

impl Merger {
    /// An empty merge over [`target_schema`].
    pub fn new() -> Merger {
        let schema = target_schema();
        Merger {
            fields: schema.fields().iter().map(|f| f.as_ref().clone()).collect(),
            extra_columns: Vec::new(),
            coalescer: BatchCoalescer::new(schema.clone(), COALESCE_ROWS),
            schema,
            chunks: Vec::new(),
            rows: 0,
            winners: HashMap::new(),
            anonymous: Vec::new(),
        }
    }

    /// Rows pushed so far (duplicates included).
    pub fn rows_pushed(&self) -> usize {
        self.rows
    }

    /// Adds one input's rows. Inputs must be pushed in plan (key) order:
    /// at equal rank, the later one wins.
    ///
    /// Errors: an extra column whose type cannot be cast to the type it had
    /// in the first input that carried it.
    pub fn push(&mut self, input: MergeInput) -> Result<(), String> {
        let target_len = target_schema().fields().len();
        let b = input.decoded.batch;
        // Widen the union schema with extra columns seen for the first time.
        let mut widened = false;
        for f in b.schema().fields().iter().skip(target_len) {
            if !self.extra_columns.contains(f.name()) {
                self.extra_columns.push(f.name().clone());
                self.fields.push(f.as_ref().clone());
                widened = true;
            }
        }
        if widened {
            self.flush_chunk()?;
            self.schema = Arc::new(Schema::new(self.fields.clone()));
            self.coalescer = BatchCoalescer::new(self.schema.clone(), COALESCE_ROWS);
        }
        let batch = to_union_schema(&b, &self.schema)?;

        // Dedup: remember the winning row number of each flight.
        let r = rank(input.source, input.last_modified);
        let keys = batch
            .column(target_schema().index_of("s3_key").expect("s3_key"))
            .as_string::<i32>();
        for row in 0..batch.num_rows() {
            let at = self.rows + row;
            let id = keys
                .is_valid(row)
                .then(|| flight_uuid(keys.value(row)))
                .flatten()
                .or(match input.source {
                    Source::PerFlight(u) if batch.num_rows() == 1 => Some(u),
                    _ => None,
                });
            match id {
                None => self.anonymous.push(at),
                Some(u) => {
                    let e = self.winners.entry(u).or_insert((r, at));
                    if r >= e.0 {
                        *e = (r, at);
                    }
                }
            }
        }
        self.rows += batch.num_rows();
        self.coalescer
            .push_batch(batch)
            .map_err(|e| e.to_string())?;
        while let Some(c) = self.coalescer.next_completed_batch() {
            self.chunks.push(c);
        }
        Ok(())
    }

    fn flush_chunk(&mut self) -> Result<(), String> {
        self.coalescer
            .finish_buffered_batch()
            .map_err(|e| e.to_string())?;
        while let Some(c) = self.coalescer.next_completed_batch() {
            self.chunks.push(c);
        }
        Ok(())
    }

    /// Ends the merge: the kept rows, in output order (by flight uuid, then
    /// rows without a flight uuid in input order), ready to encode.
    ///
    /// Errors: an Arrow error while completing the last chunk.
    pub fn finish(mut self) -> Result<MergedRows, String> {
        self.flush_chunk()?;
        // Chunks made before an extra column appeared lack it: pad with nulls.
        let chunks = self
            .chunks
            .iter()
            .map(|c| to_union_schema(c, &self.schema))
            .collect::<Result<Vec<_>, String>>()?;
        let mut starts = Vec::with_capacity(chunks.len());
        let mut n = 0;
        for c in &chunks {
            starts.push(n);
            n += c.num_rows();
        }
        let mut order: Vec<(Uuid, usize)> = self
            .winners
            .into_iter()
            .map(|(u, (_, at))| (u, at))
            .collect();
        order.sort_unstable_by_key(|(u, _)| *u);
        let order: Vec<usize> = order
            .into_iter()
            .map(|(_, at)| at)
            .chain(self.anonymous)
            .collect();
        Ok(MergedRows {
            duplicates_removed: (self.rows - order.len()) as u64,
            schema: self.schema,
            chunks,
            starts,
            order,
            extra_columns: self.extra_columns,
        })
    }
}

/// The result of a [`Merger`]: the coalesced rows and the order in which the
/// kept ones are written. Holds no more than the [`Merger`] did.
#[derive(Debug, Clone)]
pub struct MergedRows {
    schema: SchemaRef,
    chunks: Vec<RecordBatch>,
    starts: Vec<usize>,
    order: Vec<usize>,
    duplicates_removed: u64,
    extra_columns: Vec<String>,
}

impl Default for MergedRows {
    fn default() -> Self {
        Merger::new().finish().expect("an empty merge finishes")
    }
}

impl MergedRows {
    /// The output schema: [`target_schema`], then any extra columns.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Rows in the output (one per flight, plus rows without a flight uuid).
    pub fn num_rows(&self) -> usize {
        self.order.len()
    }

    /// Rows dropped because a newer version of the same flight was kept.
    pub fn duplicates_removed(&self) -> u64 {
        self.duplicates_removed
    }

    /// Extra (non-target) columns kept in the output, in first-seen order.
    pub fn extra_columns(&self) -> &[String] {
        &self.extra_columns
    }

    /// Approximate heap bytes held (Arrow buffers plus bookkeeping).
    pub fn memory_bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(RecordBatch::get_array_memory_size)
            .sum::<usize>()
            + self.order.capacity() * size_of::<usize>()
    }

    /// The output rows, in order, as batches of at most `batch_rows` rows
    /// (each gathered from the chunks when it is asked for).
    pub fn batches(
        &self,
        batch_rows: usize,
    ) -> impl Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>> + '_ {
        let refs: Vec<&RecordBatch> = self.chunks.iter().collect();
        self.order.chunks(batch_rows.max(1)).map(move |part| {
            let ix: Vec<(usize, usize)> = part
                .iter()
                .map(|&at| {
                    let c = self.starts.partition_point(|&s| s <= at) - 1;
                    (c, at - self.starts[c])
                })
                .collect();
            interleave_record_batch(&refs, &ix)
        })
    }

    /// Encodes the output as one Parquet file (the settings of [`encode`]):
    /// batches of [`WRITE_BATCH_ROWS`] rows go to the writer, which cuts a
    /// row group every `row_group_rows` rows. `None` when there are no rows:
    /// an empty output file is never made.
    ///
    /// Memory: the output bytes and one row group's encoded pages, besides
    /// what this value holds.
    pub fn encode(
        &self,
        row_group_rows: usize,
    ) -> Result<Option<Vec<u8>>, parquet::errors::ParquetError> {
        if self.order.is_empty() {
            return Ok(None);
        }
        let mut buf = Vec::new();
        let mut w =
            ArrowWriter::try_new(&mut buf, self.schema.clone(), Some(props(row_group_rows)))?;
        for b in self.batches(WRITE_BATCH_ROWS) {
            w.write(&b?)?;
        }
        w.close()?;
        Ok(Some(buf))
    }
}

fn props(row_group_rows: usize) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(Some(row_group_rows.max(1)))
        .set_created_by(format!("archive-compaction {}", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Encodes batches into one Parquet file: zstd, statistics on, row groups of
/// at most `row_group_rows` rows, the Arrow schema embedded (as pyarrow does).
pub fn encode(
    batches: &[RecordBatch],
    row_group_rows: usize,
) -> Result<Vec<u8>, parquet::errors::ParquetError> {
    let schema = batches
        .first()
        .map(|b| b.schema())
        .unwrap_or_else(target_schema);
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, schema, Some(props(row_group_rows)))?;
    for b in batches {
        w.write(b)?;
    }
    w.close()?;
    Ok(buf)
}

/// The flight uuids in a multi-row index file's `s3_key` column (reads only
/// that column): the rows the parity gate counts.
///
/// Errors: [`Unmergeable`] when the bytes are not Parquet or have no `s3_key`.
pub fn flight_uuids_in(bytes: Bytes) -> Result<Vec<Uuid>, Unmergeable> {
    check_magic(&bytes)?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| unmergeable(None, format!("not a readable Parquet file: {e}")))?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), ["s3_key"]);
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|e| unmergeable(None, e.to_string()))?;
    let mut out = Vec::new();
    for b in reader {
        let b = b.map_err(|e| unmergeable(None, e.to_string()))?;
        let Ok(ix) = b.schema().index_of("s3_key") else {
            return Err(unmergeable(Some("s3_key"), "column is missing"));
        };
        let col = cast(b.column(ix), &DataType::Utf8)
            .map_err(|e| unmergeable(Some("s3_key"), e.to_string()))?;
        let s: &StringArray = col.as_string();
        out.extend(s.iter().flatten().filter_map(flight_uuid));
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use arrow_array::{
        BooleanArray, StringArray, TimestampMillisecondArray, TimestampNanosecondArray,
    };

    pub(super) fn row(uuid: &str, ident: &str) -> RecordBatch {
        let s = |v: &str| Arc::new(StringArray::from(vec![Some(v)])) as ArrayRef;
        let ts = Arc::new(
            TimestampMicrosecondArray::from(vec![Some(1_700_000_000_000_000)]).with_timezone("UTC"),
        );
        RecordBatch::try_new(
            target_schema(),
            vec![
                s("abc123"),
                s("N1"),
                s("B738"),
                Arc::new(BooleanArray::from(vec![false])),
                s("UAL"),
                s(ident),
                ts.clone(),
                ts,
                s(&format!("flights/2026/07/20/abc123_{ident}_{uuid}.json.gz")),
            ],
        )
        .unwrap()
    }

    const U1: &str = "019f7d73-f820-702f-b905-8c81d0944996";
    const U2: &str = "019f7dc0-c448-7e25-b944-852039292d22";

    fn input(b: RecordBatch, source: Source, secs: i64) -> MergeInput {
        MergeInput {
            source,
            last_modified: DateTime::from_timestamp(secs, 0).unwrap(),
            decoded: conform(&b).unwrap(),
        }
    }

    #[test]
    fn per_flight_beats_compacted_and_newer_beats_older() {
        let u1 = Uuid::parse_str(U1).unwrap();
        let u2 = Uuid::parse_str(U2).unwrap();
        let inputs = vec![
            input(row(U2, "OLD2"), Source::Compacted, 100),
            input(row(U1, "OLD1"), Source::Compacted, 100),
            input(row(U1, "NEW1"), Source::PerFlight(u1), 50),
            input(row(U2, "A"), Source::PerFlight(u2), 10),
            input(row(U2, "B"), Source::PerFlight(u2), 20),
        ];
        let m = merge(&inputs).unwrap();
        let b = m.batch.unwrap();
        assert_eq!(b.num_rows(), 2);
        assert_eq!(m.duplicates_removed, 3);
        let ident = b.column(5).as_string::<i32>();
        assert_eq!(ident.value(0), "NEW1");
        assert_eq!(ident.value(1), "B");
    }

    /// `b` with one more (nullable Int32) column.
    pub(super) fn with_int_column(
        b: RecordBatch,
        name: &str,
        values: Vec<Option<i32>>,
    ) -> RecordBatch {
        let mut fields: Vec<Field> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(name, DataType::Int32, true));
        let mut cols = b.columns().to_vec();
        cols.push(Arc::new(arrow_array::Int32Array::from(values)));
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    }

    pub(super) fn uuid_n(i: u32) -> String {
        format!("019f7d73-f820-702f-b905-{i:012x}")
    }

    #[test]
    fn streaming_merge_across_chunks_dedups_sorts_and_pads_extra_columns() {
        // More rows than one coalesced chunk, pushed in reverse uuid order,
        // with a newer duplicate of every 10th flight after the first chunk
        // and an extra column that first appears mid-stream.
        let n = (COALESCE_ROWS + 500) as u32;
        let mut m = Merger::new();
        let push = |m: &mut Merger, b: RecordBatch, i: u32, secs: i64| {
            let u = Uuid::parse_str(&uuid_n(i)).unwrap();
            m.push(input(b, Source::PerFlight(u), secs)).unwrap();
        };
        for i in (0..n).rev() {
            push(&mut m, row(&uuid_n(i), "OLD"), i, 10);
        }
        let with_extra = with_int_column(row(&uuid_n(3), "NEW"), "squawk", vec![Some(7700)]);
        push(&mut m, with_extra, 3, 20);
        for i in (0..n).step_by(10) {
            push(&mut m, row(&uuid_n(i), "NEW"), i, 30);
        }
        // A row without a flight uuid is kept, last.
        let anon = {
            let mut cols = row(U1, "ANON").columns().to_vec();
            cols[8] = Arc::new(StringArray::from(vec![None::<&str>]));
            RecordBatch::try_new(target_schema(), cols).unwrap()
        };
        m.push(input(anon, Source::Compacted, 5)).unwrap();
        assert_eq!(
            m.rows_pushed(),
            n as usize + 1 + n.div_ceil(10) as usize + 1
        );
        let rows = m.finish().unwrap();
        assert_eq!(rows.num_rows(), n as usize + 1);
        assert_eq!(rows.duplicates_removed(), 1 + n.div_ceil(10) as u64);
        assert_eq!(rows.extra_columns(), ["squawk".to_string()]);
        let out: Vec<RecordBatch> = rows.batches(1000).collect::<Result<_, _>>().unwrap();
        let all = arrow_select::concat::concat_batches(&rows.schema(), &out).unwrap();
        let keys = all.column(8).as_string::<i32>();
        let ident = all.column(5).as_string::<i32>();
        let squawk = all
            .column(9)
            .as_primitive::<arrow_array::types::Int32Type>();
        for i in 0..n as usize {
            assert!(
                keys.value(i)
                    .ends_with(&format!("{}.json.gz", uuid_n(i as u32)))
            );
            let want = if i % 10 == 0 || i == 3 { "NEW" } else { "OLD" };
            assert_eq!(ident.value(i), want, "row {i}");
            assert_eq!(squawk.is_valid(i), i == 3, "row {i}");
        }
        assert!(keys.is_null(n as usize));
        assert_eq!(ident.value(n as usize), "ANON");
        // The same inputs through `merge` give the same rows.
        let bytes = rows.encode(1000).unwrap().unwrap();
        let back = decode(Bytes::from(bytes)).unwrap();
        assert_eq!(back.batch.num_rows(), n as usize + 1);
    }

    #[test]
    fn memory_grows_with_rows_not_with_files() {
        // 20,000 single-row inputs: what the merge keeps is the rows' bytes
        // (coalesced), not a set of arrays per file.
        let mut m = Merger::new();
        let n = 20_000u32;
        for i in 0..n {
            let u = Uuid::parse_str(&uuid_n(i)).unwrap();
            m.push(input(row(&uuid_n(i), "UAL123"), Source::PerFlight(u), 1))
                .unwrap();
        }
        let rows = m.finish().unwrap();
        let per_row = rows.memory_bytes() / n as usize;
        assert!(per_row < 400, "{per_row} B a row held after the merge");
    }

    #[test]
    fn an_empty_merge_encodes_to_no_file() {
        let rows = Merger::new().finish().unwrap();
        assert_eq!(rows.num_rows(), 0);
        assert!(rows.encode(10).unwrap().is_none());
        assert!(merge(&[]).unwrap().batch.is_none());
    }

    #[test]
    fn timestamp_units_convert_only_when_exact() {
        let mk = |col: ArrayRef| {
            let mut fields: Vec<Field> = target_schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            fields[6] = Field::new("first_message", col.data_type().clone(), true);
            let mut cols = row(U1, "X").columns().to_vec();
            cols[6] = col;
            RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
        };
        let ms = Arc::new(
            TimestampMillisecondArray::from(vec![Some(1_700_000_000_123)]).with_timezone("UTC"),
        );
        let d = conform(&mk(ms)).unwrap();
        assert_eq!(d.batch.schema(), target_schema());
        let v = d
            .batch
            .column(6)
            .as_primitive::<arrow_array::types::TimestampMicrosecondType>()
            .value(0);
        assert_eq!(v, 1_700_000_000_123_000);
        let exact_ns = Arc::new(TimestampNanosecondArray::from(vec![Some(
            1_700_000_000_123_456_000,
        )]));
        assert!(conform(&mk(exact_ns)).is_ok());
        let lossy_ns = Arc::new(TimestampNanosecondArray::from(vec![Some(
            1_700_000_000_123_456_789,
        )]));
        let e = conform(&mk(lossy_ns)).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("first_message"));
    }

    #[test]
    fn missing_required_column_is_unmergeable_and_missing_nullable_is_null() {
        let b = row(U1, "X");
        let no_reg = b.project(&[0, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let d = conform(&no_reg).unwrap();
        assert_eq!(d.batch.column(1).null_count(), 1);
        let no_mil = b.project(&[0, 1, 2, 4, 5, 6, 7, 8]).unwrap();
        assert_eq!(
            conform(&no_mil).unwrap_err().column.as_deref(),
            Some("military")
        );
    }

    /// `b` written by the parquet crate with `schema` (its columns as given).
    fn parquet_of(b: &RecordBatch) -> Bytes {
        let mut buf = Vec::new();
        let mut w = ArrowWriter::try_new(&mut buf, b.schema(), None).unwrap();
        w.write(b).unwrap();
        w.close().unwrap();
        Bytes::from(buf)
    }

    #[test]
    fn a_file_in_the_writers_layout_is_read_straight_into_the_target_schema() {
        let b = row(U1, "X");
        let bytes = parquet_of(&b);
        let meta = ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .unwrap();
        assert!(has_target_layout(meta.file_metadata().schema_descr()));
        let d = decode(bytes).unwrap();
        assert!(Arc::ptr_eq(d.batch.schema_ref(), &target_schema()));
        assert_eq!(d.batch, b);
        assert!(d.extra_columns.is_empty());
    }

    #[test]
    fn other_layouts_still_go_through_conform() {
        // Millisecond timestamps: converted exactly, as conform does.
        let mut fields: Vec<Field> = target_schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let ms = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
        fields[6] = Field::new("first_message", ms, true);
        let mut cols = row(U1, "X").columns().to_vec();
        cols[6] = Arc::new(
            TimestampMillisecondArray::from(vec![Some(1_700_000_000_123)]).with_timezone("UTC"),
        );
        let b = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap();
        let bytes = parquet_of(&b);
        let meta = ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .unwrap();
        assert!(!has_target_layout(meta.file_metadata().schema_descr()));
        let d = decode(bytes).unwrap();
        assert_eq!(d.batch.schema(), target_schema());
        let v = d
            .batch
            .column(6)
            .as_primitive::<arrow_array::types::TimestampMicrosecondType>()
            .value(0);
        assert_eq!(v, 1_700_000_000_123_000);
        // An extra column: kept, named.
        let extra = with_int_column(row(U1, "X"), "squawk", vec![Some(7700)]);
        let d = decode(parquet_of(&extra)).unwrap();
        assert_eq!(d.extra_columns, ["squawk".to_string()]);
        assert_eq!(d.batch.num_columns(), 10);
        // A plain INT64 where a timestamp belongs is not read as one.
        let mut fields: Vec<Field> = target_schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields[7] = Field::new("last_message", DataType::Int64, true);
        let mut cols = row(U1, "X").columns().to_vec();
        cols[7] = Arc::new(arrow_array::Int64Array::from(vec![Some(1_700_000_000)]));
        let b = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap();
        let e = decode(parquet_of(&b)).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("last_message"));
    }

    #[test]
    fn encode_decode_round_trip_keeps_schema() {
        let b = row(U1, "X");
        let bytes = encode(std::slice::from_ref(&b), 10).unwrap();
        let back = decode(Bytes::from(bytes.clone())).unwrap();
        assert_eq!(back.batch, b);
        assert_eq!(
            flight_uuids_in(Bytes::from(bytes)).unwrap(),
            vec![Uuid::parse_str(U1).unwrap()]
        );
        assert!(decode(Bytes::from_static(b"PAR1 not really")).is_err());
    }
}
