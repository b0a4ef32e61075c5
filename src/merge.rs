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
//! flight a per-flight file beats a compacted file, and between per-flight
//! files the later LastModified wins. Output rows are in uuid (= key) order.
//!
//! Memory: the day's decoded rows are held once (about 200 bytes a row) plus
//! the encoded output; row groups are cut every `row_group_rows` rows.
//!
//! ```
//! use archive_compaction::merge::{target_schema, encode, decode};
//! use arrow::array::RecordBatch;
//! let empty = RecordBatch::new_empty(target_schema());
//! let bytes = encode(&[empty], 1024).unwrap();
//! let back = decode(bytes::Bytes::from(bytes)).unwrap();
//! assert_eq!(back.batch.num_rows(), 0);
//! assert_eq!(back.batch.schema(), target_schema());
//! ```

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, RecordBatch, RecordBatchReader, StringArray,
    TimestampMicrosecondArray, new_null_array,
};
use arrow::compute::{cast, interleave_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use parquet::arrow::ArrowWriter;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use uuid::Uuid;

use crate::keys::flight_uuid;

/// The Glue table's columns, in order (DESIGN.md, "Bucket layout").
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

/// Decodes one Parquet file and conforms it to [`target_schema`].
///
/// Errors: [`Unmergeable`] for bytes that are not Parquet (bad magic,
/// truncated footer), a missing required column, or a value that cannot be
/// represented exactly in the target type.
pub fn decode(bytes: Bytes) -> Result<Decoded, Unmergeable> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| unmergeable(None, format!("not a readable Parquet file: {e}")))?;
    let reader = builder
        .build()
        .map_err(|e| unmergeable(None, format!("cannot read: {e}")))?;
    let schema = reader.schema();
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unmergeable(None, format!("cannot decode: {e}")))?;
    let batch = arrow::compute::concat_batches(&schema, &batches)
        .map_err(|e| unmergeable(None, format!("cannot decode: {e}")))?;
    conform(&batch)
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
            let values = col.as_primitive_opt::<arrow::datatypes::Int64Type>();
            let raw: Vec<Option<i64>> = match values {
                Some(v) => v.iter().collect(),
                None => {
                    let as_i64 = cast(col, &DataType::Int64)
                        .map_err(|e| unmergeable(Some(name), e.to_string()))?;
                    as_i64
                        .as_primitive::<arrow::datatypes::Int64Type>()
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

/// Where an input comes from, which decides who wins between duplicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// A `compacted-*.parquet` file (loses to any per-flight file).
    Compacted,
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

/// The merged rows of a day.
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
pub fn merge(inputs: &[MergeInput]) -> Result<Merged, String> {
    // Union schema: target columns, then extra columns in first-seen order.
    let target = target_schema();
    let mut fields: Vec<Field> = target.fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut extra_columns: Vec<String> = Vec::new();
    for i in inputs {
        for f in i
            .decoded
            .batch
            .schema()
            .fields()
            .iter()
            .skip(target.fields().len())
        {
            if !extra_columns.contains(f.name()) {
                extra_columns.push(f.name().clone());
                fields.push(f.as_ref().clone());
            }
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let mut batches = Vec::with_capacity(inputs.len());
    for i in inputs {
        let b = &i.decoded.batch;
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
        batches.push(RecordBatch::try_new(schema.clone(), cols).map_err(|e| e.to_string())?);
    }

    // Pick one winner per flight.
    let rank = |i: &MergeInput| match i.source {
        Source::Compacted => (0u8, i.last_modified),
        Source::PerFlight(_) => (1u8, i.last_modified),
    };
    let mut winners: HashMap<Uuid, (usize, usize)> = HashMap::new();
    let mut anonymous: Vec<(usize, usize)> = Vec::new();
    let mut total = 0u64;
    for (bi, (input, batch)) in inputs.iter().zip(&batches).enumerate() {
        let keys = batch
            .column(target.index_of("s3_key").expect("s3_key"))
            .as_string::<i32>()
            .clone();
        for row in 0..batch.num_rows() {
            total += 1;
            let id = keys
                .is_valid(row)
                .then(|| flight_uuid(keys.value(row)))
                .flatten()
                .or(match input.source {
                    Source::PerFlight(u) if batch.num_rows() == 1 => Some(u),
                    _ => None,
                });
            match id {
                None => anonymous.push((bi, row)),
                Some(u) => {
                    let e = winners.entry(u).or_insert((bi, row));
                    // `>=` so that, at equal rank, the later input in key order wins.
                    if rank(input) >= rank(&inputs[e.0]) {
                        *e = (bi, row);
                    }
                }
            }
        }
    }
    let mut order: Vec<(Uuid, (usize, usize))> = winners.into_iter().collect();
    order.sort_by_key(|(u, _)| *u);
    let indices: Vec<(usize, usize)> = order
        .into_iter()
        .map(|(_, ix)| ix)
        .chain(anonymous)
        .collect();
    let kept = indices.len() as u64;
    let batch = if indices.is_empty() {
        None
    } else {
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        Some(interleave_record_batch(&refs, &indices).map_err(|e| e.to_string())?)
    };
    Ok(Merged {
        batch,
        duplicates_removed: total - kept,
        extra_columns,
    })
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
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(Some(row_group_rows.max(1)))
        .set_created_by(format!("archive-compaction {}", env!("CARGO_PKG_VERSION")))
        .build();
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, schema, Some(props))?;
    for b in batches {
        w.write(b)?;
    }
    w.close()?;
    Ok(buf)
}

/// The flight uuids in a compacted file's `s3_key` column (reads only that column).
///
/// Errors: [`Unmergeable`] when the bytes are not Parquet or have no `s3_key`.
pub fn flight_uuids_in(bytes: Bytes) -> Result<Vec<Uuid>, Unmergeable> {
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

#[allow(dead_code)]
fn _assert_types(_: &BooleanArray) {}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        BooleanArray, StringArray, TimestampMillisecondArray, TimestampNanosecondArray,
    };

    fn row(uuid: &str, ident: &str) -> RecordBatch {
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
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
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

    #[test]
    fn encode_decode_round_trip_keeps_schema() {
        let b = row(U1, "X");
        let bytes = encode(&[b.clone()], 10).unwrap();
        let back = decode(Bytes::from(bytes.clone())).unwrap();
        assert_eq!(back.batch, b);
        assert_eq!(
            flight_uuids_in(Bytes::from(bytes)).unwrap(),
            vec![Uuid::parse_str(U1).unwrap()]
        );
        assert!(decode(Bytes::from_static(b"PAR1 not really")).is_err());
    }
}
