//! The merge: decode index files, conform them to the target schema ([`conform`]; lossless only,
//! else that file is [`Unmergeable`] and the day goes on), keep one row per flight (by [`Source`],
//! then LastModified) in uuid order, encode one compacted Parquet file. [`StreamMerger`], tried
//! first, writes rows in bounded memory but needs regular inputs; [`Merger`], the fallback, holds
//! the day's rows once. Both give the same output.
//!
//! ```
//! use archive_compaction::data::merge::{target_schema, encode, decode};
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
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::basic::{Compression, ZstdLevel};
use parquet::basic::{LogicalType, TimeUnit as ParquetTimeUnit, Type as PhysicalType};
use parquet::file::metadata::{
    ParquetMetaData, ParquetMetaDataOptions, ParquetMetaDataReader, ParquetStatisticsPolicy,
};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::SchemaDescriptor;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::data::keys::flight_uuid;

mod encode;
mod held;
mod other_days;
mod schema;
pub mod stream;
pub mod widen;

pub(crate) use encode::WRITE_BATCH_ROWS;
pub use encode::encode;
use encode::props;
pub use held::{COALESCE_ROWS, MergeInput, MergedRows, Merger, Source};
use held::{Rank, rank, to_union_schema};
pub use other_days::{OTHER_DAYS_UUIDS_SHOWN, OtherDays, first_message_at, is_other_day};
use schema::row_flights;
pub use schema::{Decoded, arrow_metadata, conform, decode, rows_without_flight};
pub(crate) use schema::{decode_parsed, decoded_from, footer_options, holds_flight};
pub use stream::{MergedOutput, StreamError, StreamMerger};
pub use widen::{ExtraColumns, convert};

/// Why a merge failed. An input that cannot be decoded or conformed is not one: it is
/// [`Unmergeable`].
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // a field is what its name and the message say
pub enum MergeError {
    /// An input with an extra column that has no type in common with the day's ([`widen`]):
    /// nothing of it was merged; the caller leaves it in place and goes on.
    #[error("{0}")]
    Input(Unmergeable),
    /// An extra column's values did not convert to the day's type although
    /// the join chose it (a defect: the join and [`convert`] disagree).
    #[error("extra column {column}: {reason}")]
    ExtraColumn { column: String, reason: String },
    /// Arrow failed building, coalescing or concatenating batches.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// The Parquet writer failed.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
}

/// The Glue table's columns, in order (specs/index-schema.md).
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

/// Why one file cannot be merged: it is left in place and reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Unmergeable {
    /// The column involved, when one is.
    pub column: Option<String>,
    /// What is wrong, e.g. "not a Parquet file: bad magic".
    pub reason: String,
    /// The input limit broken, if that is what is wrong: nothing was decoded.
    pub limit: Option<LimitBroken>,
}

impl Unmergeable {
    /// A file that cannot be merged for `reason` (about `column`, when one).
    pub fn new(column: Option<&str>, reason: impl Into<String>) -> Unmergeable {
        Unmergeable { column: column.map(str::to_string), reason: reason.into(), limit: None }
    }

    /// A file that breaks an input limit ([`crate::data::input`]).
    pub fn over_limit(limit: LimitBroken) -> Unmergeable {
        Unmergeable {
            column: None,
            reason: format!("left in place unread: {limit}"),
            limit: Some(limit),
        }
    }
}

/// A column name as every comparison matches it: without case, as Glue, Athena and Spark do.
pub fn column_key(name: &str) -> String {
    name.to_lowercase()
}

/// Whether `a` and `b` name one column ([`column_key`]).
pub(crate) fn same_column(a: &str, b: &str) -> bool {
    a == b || column_key(a) == column_key(b)
}

/// A per-input limit, checked from the listing and footer before any decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Limit {
    /// The footer's declared length in bytes ([`crate::data::input::FOOTER_SHARE`]).
    FooterBytes,
    /// Leaf columns in the file's schema ([`crate::data::input::COLUMNS_MAX`]).
    Columns,
    /// The decoded size the footer declares for the columns read, in bytes.
    DecodedBytes,
}

named_enum!(Limit);

/// Which [`Limit`] an input broke, in the limit's unit (bytes or columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error(
    "over the {limit} limit: {found} where at most {allowed} is allowed (INPUT_BUDGET_MB sets it)"
)]
pub struct LimitBroken {
    /// The limit.
    pub limit: Limit,
    /// The input's value.
    pub found: u64,
    /// The largest value allowed.
    pub allowed: u64,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::schema::has_target_layout;
    use super::*;

    /// The merged rows of a day, as one batch (see [`merge`]).
    #[derive(Debug, Clone)]
    pub(crate) struct Merged {
        /// The rows in output order; `None` when there are no rows.
        pub batch: Option<RecordBatch>,
        /// Rows dropped because a newer version of the same flight was kept.
        pub duplicates_removed: u64,
    }

    /// Merges conformed inputs: one row per flight (see module docs), ordered by
    /// flight uuid, rows without a flight uuid last in input order. Extra columns
    /// are unioned by name without case, each with the day's type
    /// ([`super::widen`]); an input whose extra column joins no type is an error
    /// here ([`MergeError::Input`]; [`Merger::push`] lets the caller go on).
    ///
    /// This is [`Merger`] with every input pushed and the output gathered into
    /// one batch; the commit path uses [`Merger`] and [`MergedRows::encode`]
    /// instead, which never hold the inputs or the output rows whole.
    pub(crate) fn merge(inputs: &[MergeInput]) -> Result<Merged, MergeError> {
        let mut merger = Merger::new();
        for i in inputs {
            merger.push(i.clone())?;
        }
        let rows = merger.finish()?;
        let batch = if rows.num_rows() == 0 {
            None
        } else {
            let parts = rows.batches(rows.num_rows()).collect::<Result<Vec<_>, _>>()?;
            Some(arrow_select::concat::concat_batches(&rows.schema(), &parts)?)
        };
        Ok(Merged { batch, duplicates_removed: rows.duplicates_removed() })
    }

    /// The first row's timestamp in column 6 (µs since the Unix epoch, UTC).
    fn micros_in_column_6(b: &RecordBatch) -> i64 {
        b.column(6).as_primitive::<arrow_array::types::TimestampMicrosecondType>().value(0)
    }
    use arrow_array::{
        BooleanArray, StringArray, TimestampMillisecondArray, TimestampNanosecondArray,
    };

    pub(crate) fn row(uuid: &str, ident: &str) -> RecordBatch {
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
        with_column(b, name, Arc::new(arrow_array::Int32Array::from(values)))
    }

    /// `b` with one more nullable column `name` holding `col` (of its type).
    pub(super) fn with_column(b: RecordBatch, name: &str, col: ArrayRef) -> RecordBatch {
        let mut fields: Vec<Field> =
            b.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(name, col.data_type().clone(), true));
        let mut cols = b.columns().to_vec();
        cols.push(col);
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    }

    pub(crate) fn uuid_n(i: u32) -> String {
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
        assert_eq!(m.rows_pushed(), n as usize + 1 + n.div_ceil(10) as usize + 1);
        let rows = m.finish().unwrap();
        assert_eq!(rows.num_rows(), n as usize + 1);
        assert_eq!(rows.duplicates_removed(), 1 + n.div_ceil(10) as u64);
        assert_eq!(rows.extra_columns(), ["squawk".to_string()]);
        let out: Vec<RecordBatch> = rows.batches(1000).collect::<Result<_, _>>().unwrap();
        let all = arrow_select::concat::concat_batches(&rows.schema(), &out).unwrap();
        let keys = all.column(8).as_string::<i32>();
        let ident = all.column(5).as_string::<i32>();
        let squawk = all.column(9).as_primitive::<arrow_array::types::Int32Type>();
        for i in 0..n as usize {
            assert!(keys.value(i).ends_with(&format!("{}.json.gz", uuid_n(i as u32))));
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
            m.push(input(row(&uuid_n(i), "UAL123"), Source::PerFlight(u), 1)).unwrap();
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
            let mut fields: Vec<Field> =
                target_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
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
        assert_eq!(micros_in_column_6(&d.batch), 1_700_000_000_123_000);
        let exact_ns =
            Arc::new(TimestampNanosecondArray::from(vec![Some(1_700_000_000_123_456_000)]));
        assert!(conform(&mk(exact_ns)).is_ok());
        let lossy_ns =
            Arc::new(TimestampNanosecondArray::from(vec![Some(1_700_000_000_123_456_789)]));
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
        assert_eq!(conform(&no_mil).unwrap_err().column.as_deref(), Some("military"));
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
        let meta = ParquetMetaDataReader::new().parse_and_finish(&bytes).unwrap();
        assert!(has_target_layout(meta.file_metadata().schema_descr()));
        let d = decode(bytes).unwrap();
        assert!(Arc::ptr_eq(d.batch.schema_ref(), &target_schema()));
        assert_eq!(d.batch, b);
        assert!(d.extra_columns.is_empty());
    }

    #[test]
    fn other_layouts_still_go_through_conform() {
        // Millisecond timestamps: converted exactly, as conform does.
        let mut fields: Vec<Field> =
            target_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        let ms = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
        fields[6] = Field::new("first_message", ms, true);
        let mut cols = row(U1, "X").columns().to_vec();
        cols[6] = Arc::new(
            TimestampMillisecondArray::from(vec![Some(1_700_000_000_123)]).with_timezone("UTC"),
        );
        let b = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap();
        let bytes = parquet_of(&b);
        let meta = ParquetMetaDataReader::new().parse_and_finish(&bytes).unwrap();
        assert!(!has_target_layout(meta.file_metadata().schema_descr()));
        let d = decode(bytes).unwrap();
        assert_eq!(d.batch.schema(), target_schema());
        assert_eq!(micros_in_column_6(&d.batch), 1_700_000_000_123_000);
        // An extra column: kept, named.
        let extra = with_int_column(row(U1, "X"), "squawk", vec![Some(7700)]);
        let d = decode(parquet_of(&extra)).unwrap();
        assert_eq!(d.extra_columns, ["squawk".to_string()]);
        assert_eq!(d.batch.num_columns(), 10);
        // A plain INT64 where a timestamp belongs is not read as one.
        let mut fields: Vec<Field> =
            target_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields[7] = Field::new("last_message", DataType::Int64, true);
        let mut cols = row(U1, "X").columns().to_vec();
        cols[7] = Arc::new(arrow_array::Int64Array::from(vec![Some(1_700_000_000)]));
        let b = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap();
        let e = decode(parquet_of(&b)).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("last_message"));
    }

    /// `row(U1, ..)`'s columns under `names`, plus `extra` (name, column).
    fn renamed(names: &[(usize, &str)], extra: Vec<(&str, ArrayRef)>) -> RecordBatch {
        let b = row(U1, "UAL1");
        let mut fields: Vec<Field> =
            (b.schema().fields().iter()).map(|f| f.as_ref().clone()).collect();
        for (i, n) in names {
            fields[*i] = fields[*i].clone().with_name(*n);
        }
        let mut cols = b.columns().to_vec();
        for (n, c) in extra {
            fields.push(Field::new(n, c.data_type().clone(), true));
            cols.push(c);
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    }

    #[test]
    fn names_match_without_case_and_columns_equal_but_for_case_merge_only_where_they_agree() {
        let s = |v: Option<&str>| Arc::new(StringArray::from(vec![v])) as ArrayRef;
        // `Icao_Hex` alone is the known `icao_hex`.
        let d = conform(&renamed(&[(0, "Icao_Hex")], vec![])).unwrap();
        assert_eq!(d.batch.schema(), target_schema());
        assert_eq!(d.batch.column(0).as_string::<i32>().value(0), "abc123");
        // Beside it, agreeing (or null): one column.
        for v in [Some("abc123"), None] {
            let d = conform(&renamed(&[], vec![("Icao_Hex", s(v))])).unwrap();
            assert_eq!(d.batch.schema(), target_schema(), "{v:?}");
            assert_eq!(d.batch.column(0).as_string::<i32>().value(0), "abc123");
        }
        // The known one null, the other set: the value is kept.
        let mut b = renamed(&[], vec![("ICAO_HEX", s(Some("abc999")))]);
        let mut cols = b.columns().to_vec();
        cols[0] = s(None);
        b = RecordBatch::try_new(b.schema(), cols).unwrap();
        let d = conform(&b).unwrap();
        assert_eq!(d.batch.column(0).as_string::<i32>().value(0), "abc999");
        // Disagreeing: unmergeable, naming the column.
        let e = conform(&renamed(&[], vec![("Icao_Hex", s(Some("def456")))])).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("Icao_Hex"), "{e}");
        assert!(e.reason.contains("disagree"), "{e}");
        // `ident` twice, the same name: the same rules.
        let e = conform(&renamed(&[], vec![("ident", s(Some("OTHER")))])).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("ident"));
        let d = conform(&renamed(&[], vec![("ident", s(Some("UAL1")))])).unwrap();
        assert_eq!(d.batch.num_columns(), 9);
        // A required column twice: agreeing, then one null (kept: the other
        // holds the value), then disagreeing.
        let t = |v: Option<bool>| Arc::new(BooleanArray::from(vec![v])) as ArrayRef;
        assert!(conform(&renamed(&[], vec![("Military", t(Some(false)))])).is_ok());
        assert!(conform(&renamed(&[], vec![("Military", t(None))])).is_ok());
        let e = conform(&renamed(&[], vec![("MILITARY", t(Some(true)))])).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("MILITARY"));
        // Extra columns equal but for case: one column, in the type that
        // holds both, spelled as first written; or refused.
        let n = |v: i64| Arc::new(arrow_array::Int64Array::from(vec![v])) as ArrayRef;
        let d = conform(&renamed(&[], vec![("Source", n(2)), ("source", s(Some("2")))])).unwrap();
        assert_eq!(d.extra_columns, ["Source".to_string()]);
        assert_eq!(d.batch.column(9).as_string::<i32>().value(0), "2");
        let e =
            conform(&renamed(&[], vec![("Source", n(2)), ("source", s(Some("x")))])).unwrap_err();
        assert!(e.reason.contains("disagree"), "{e}");
        // Never two columns equal but for case.
        let names: Vec<String> =
            d.batch.schema().fields().iter().map(|f| column_key(f.name())).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
    }

    #[test]
    fn an_all_null_column_converts_to_any_target_type() {
        // fastparquet's all-None string column: plain binary; pyarrow's: null.
        let cols: Vec<ArrayRef> = vec![
            Arc::new(arrow_array::BinaryArray::from(vec![None::<&[u8]>])),
            Arc::new(arrow_array::NullArray::new(1)),
            Arc::new(arrow_array::Int64Array::from(vec![None])),
        ];
        for c in cols {
            for i in [1usize, 6] {
                let mut fields: Vec<Field> =
                    (target_schema().fields().iter()).map(|f| f.as_ref().clone()).collect();
                fields[i] = Field::new(fields[i].name(), c.data_type().clone(), true);
                let mut cols = row(U1, "X").columns().to_vec();
                cols[i] = c.clone();
                let b = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap();
                let d = conform(&b).unwrap_or_else(|e| panic!("{} as {i}: {e}", c.data_type()));
                assert_eq!(d.batch.schema(), target_schema());
                assert!(d.batch.column(i).is_null(0));
            }
        }
        // Binary holding UTF-8 is text; holding anything else it is refused.
        let bin = |v: &[u8]| Arc::new(arrow_array::BinaryArray::from(vec![v])) as ArrayRef;
        for (v, ok) in [(b"N12345".as_ref(), true), (&[0xff_u8, 0xfe][..], false)] {
            let mut fields: Vec<Field> =
                (target_schema().fields().iter()).map(|f| f.as_ref().clone()).collect();
            fields[1] = Field::new("registration", DataType::Binary, true);
            let mut cols = row(U1, "X").columns().to_vec();
            cols[1] = bin(v);
            let b = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap();
            match conform(&b) {
                Ok(d) => {
                    assert!(ok);
                    assert_eq!(d.batch.column(1).as_string::<i32>().value(0), "N12345");
                }
                Err(e) => {
                    assert!(!ok, "{e}");
                    assert_eq!(e.column.as_deref(), Some("registration"));
                }
            }
        }
    }

    #[test]
    fn encode_decode_round_trip_keeps_schema() {
        let b = row(U1, "X");
        let bytes = encode(std::slice::from_ref(&b), 10).unwrap();
        let back = decode(Bytes::from(bytes.clone())).unwrap();
        assert_eq!(back.batch, b);
        assert!(decode(Bytes::from_static(b"PAR1 not really")).is_err());
    }

    #[test]
    fn decode_reads_every_row_of_a_file_of_several_batches_and_row_groups() {
        let rows: Vec<RecordBatch> = (0..2_500).map(|i| row(&uuid_n(i), "X")).collect();
        let b = arrow_select::concat::concat_batches(&target_schema(), &rows).unwrap();
        let back = decode(Bytes::from(encode(std::slice::from_ref(&b), 1_000).unwrap())).unwrap();
        assert_eq!(back.batch, b);
    }
}
