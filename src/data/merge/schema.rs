//! Schema conformance: the target schema, and decoding an index file into it by column name.

use super::*;
use arrow_array::BooleanArray;
use parquet::column::reader::{ColumnReader, ColumnReaderImpl, get_column_reader};
use parquet::data_type::DataType as ParquetType;
use parquet::file::serialized_reader::SerializedPageReader;

/// A decoded input, conformed to the target schema (known columns, then extra ones).
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The rows.
    pub batch: RecordBatch,
    /// Names of columns the target schema does not know (kept).
    pub extra_columns: Vec<String>,
}

/// A Parquet file starts and ends with `PAR1` (Parquet format spec); the
/// footer-only reader does not check the first.
fn check_magic(bytes: &[u8]) -> Result<(), Unmergeable> {
    const MAGIC: &[u8] = b"PAR1";
    if bytes.len() < 12 || &bytes[..4] != MAGIC || &bytes[bytes.len() - 4..] != MAGIC {
        return Err(Unmergeable::new(
            None,
            format!("not a Parquet file: bad magic or truncated ({} bytes)", bytes.len()),
        ));
    }
    Ok(())
}

/// Decodes one Parquet file and conforms it to [`target_schema`].
///
/// Errors: [`Unmergeable`] for bytes that are not Parquet, a missing required
/// column, or a value without an exact target value.
pub fn decode(bytes: Bytes) -> Result<Decoded, Unmergeable> {
    check_magic(&bytes)?;
    let metadata = ParquetMetaDataReader::new()
        .with_metadata_options(Some(footer_options()))
        .parse_and_finish(&bytes)
        .map(Arc::new)
        .map_err(|e| Unmergeable::new(None, format!("not a readable Parquet file: {e}")))?;
    decode_parsed(bytes, metadata)
}

/// The footer options of every read: no column or size statistics (unused).
pub(crate) fn footer_options() -> ParquetMetaDataOptions {
    ParquetMetaDataOptions::new()
        .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll)
}

/// [`decode`] of a whole file whose footer is already parsed.
pub fn decode_parsed(bytes: Bytes, metadata: Arc<ParquetMetaData>) -> Result<Decoded, Unmergeable> {
    if let Some(batch) = decode_flat(&bytes, &metadata) {
        return Ok(Decoded { batch, extra_columns: Vec::new() });
    }
    // Up to the footer's row count (the reader's batch size is at most that): a read past the last
    // row decodes an empty batch of every column, ~20 k instructions (`make bench-instructions`).
    let rows = metadata.file_metadata().num_rows() as usize;
    let (arrow_metadata, conformed) = arrow_metadata(metadata)?;
    let mut reader = ParquetRecordBatchReaderBuilder::new_with_metadata(bytes, arrow_metadata)
        .build()
        .map_err(|e| Unmergeable::new(None, format!("cannot read: {e}")))?;
    let mut batches: Vec<RecordBatch> = Vec::new();
    while batches.iter().map(RecordBatch::num_rows).sum::<usize>() < rows
        && let Some(batch) = reader.next()
    {
        batches.push(batch.map_err(|e| Unmergeable::new(None, format!("cannot decode: {e}")))?);
    }
    decoded_from(&reader.schema(), batches, conformed)
}

/// Rows up to which a file in the writer's layout is read by [`decode_flat`].
const FLAT_ROWS: usize = 64;

/// A file of [`has_target_layout`] and one row group of at most [`FLAT_ROWS`] rows, read by the
/// parquet crate's column readers into the values the Arrow reader gives (the tests), without its
/// per-file setup: a one-row file's decode 201 → 175 k instructions (docs/performance.md). `None`
/// for any other file and on any failure: the Arrow reader reads it, or words the error.
fn decode_flat(bytes: &Bytes, metadata: &ParquetMetaData) -> Option<RecordBatch> {
    let (target, [group]) = (target_schema(), metadata.row_groups()) else { return None };
    let file = metadata.file_metadata();
    let rows = usize::try_from(file.num_rows()).ok().filter(|&r| r <= FLAT_ROWS)?;
    (group.num_rows() == file.num_rows() && has_target_layout(file.schema_descr())).then_some(())?;
    let chunk = Arc::new(bytes.clone());
    let columns = (target.fields().iter().zip(group.columns())).map(|(f, c)| {
        let pages = Box::new(SerializedPageReader::new(chunk.clone(), c, rows, None).ok()?);
        Some(match get_column_reader(c.column_descr_ptr(), pages) {
            ColumnReader::ByteArrayColumnReader(r) => {
                let values = read_flat(r, rows)?;
                // Sized to the values: collecting reserves 1 KB a column, which a held row keeps
                // (peak RSS +45 MB at 10,000 files, `bench/bench.py`).
                let len = values.iter().flatten().map(|v| v.len()).sum();
                let mut strings = arrow_array::builder::StringBuilder::with_capacity(rows, len);
                for v in &values {
                    strings.append_option(v.as_ref().map(|s| s.as_utf8()).transpose().ok()?);
                }
                Arc::new(strings.finish()) as ArrayRef
            }
            ColumnReader::BoolColumnReader(r) => Arc::new(BooleanArray::from(read_flat(r, rows)?)),
            ColumnReader::Int64ColumnReader(r) => Arc::new(
                TimestampMicrosecondArray::from(read_flat(r, rows)?)
                    .with_data_type(f.data_type().clone()),
            ),
            _ => return None,
        })
    });
    let columns = columns.collect::<Option<_>>()?;
    RecordBatch::try_new(target, columns).ok()
}

/// `rows` values of one flat column, nulls where its definition level says so.
fn read_flat<T: ParquetType>(mut r: ColumnReaderImpl<T>, rows: usize) -> Option<Vec<Option<T::T>>> {
    let (mut defs, mut values) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
    let (read, ..) = r.read_records(rows, Some(&mut defs), None, &mut values).ok()?;
    defs.resize(read, 1); // none in a required column
    let mut values = values.into_iter();
    (read == rows).then(|| defs.iter().map(|&d| if d > 0 { values.next() } else { None }).collect())
}

/// How to read a file's columns into Arrow: straight into [`target_schema`]
/// (`true`, the writer's layout), else by its embedded Arrow schema through [`conform`].
///
/// Errors: [`Unmergeable`] when the footer's schema has no Arrow reading.
pub fn arrow_metadata(
    metadata: Arc<ParquetMetaData>,
) -> Result<(ArrowReaderMetadata, bool), Unmergeable> {
    if has_target_layout(metadata.file_metadata().schema_descr()) {
        let options = ArrowReaderOptions::new().with_schema(target_schema());
        if let Ok(m) = ArrowReaderMetadata::try_new(metadata.clone(), options) {
            return Ok((m, true));
        }
    }
    ArrowReaderMetadata::try_new(metadata, ArrowReaderOptions::new())
        .map(|m| (m, false))
        .map_err(|e| Unmergeable::new(None, format!("not a readable Parquet file: {e}")))
}

/// One [`Decoded`] from a file's batches read by [`arrow_metadata`]; errors as [`conform`].
pub(crate) fn decoded_from(
    schema: &SchemaRef,
    mut batches: Vec<RecordBatch>,
    conformed: bool,
) -> Result<Decoded, Unmergeable> {
    let batch = if batches.len() == 1 {
        batches.pop().expect("one batch")
    } else {
        arrow_select::concat::concat_batches(schema, &batches)
            .map_err(|e| Unmergeable::new(None, format!("cannot decode: {e}")))?
    };
    drop(batches);
    // The reader checked the footer; the shared schema makes later comparisons pointer compares.
    if conformed && let Ok(batch) = batch.clone().with_schema(target_schema()) {
        return Ok(Decoded { batch, extra_columns: Vec::new() });
    }
    conform(&batch)
}

/// Whether a file's Parquet schema is exactly pyarrow's writing of the index schema (strings
/// `STRING`, `military` `BOOLEAN`, timestamps `TIMESTAMP(MICROS)`, nothing else, nullable as the
/// target's): it reads straight into [`target_schema`] with the values [`conform`] would give.
pub(super) fn has_target_layout(parquet: &SchemaDescriptor) -> bool {
    let target = target_schema();
    parquet.num_columns() == target.fields().len()
        && parquet.root_schema().get_fields().len() == target.fields().len()
        && target.fields().iter().zip(parquet.columns()).all(|(f, c)| {
            let leaf = c.self_type();
            leaf.is_primitive()
                && c.max_rep_level() == 0
                && (c.max_def_level() > 0) == f.is_nullable()
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

/// Conforms a batch to [`target_schema`] by [`column_key`]. Columns equal but
/// for case are one, merged when their values agree, in the target's type or,
/// for an extra one, the type that holds both exactly ([`super::widen`]).
///
/// Errors: [`Unmergeable`] naming the column: a required column missing or
/// null, a value without an exact target value, or case-twins that disagree.
pub fn conform(batch: &RecordBatch) -> Result<Decoded, Unmergeable> {
    let target = target_schema();
    let rows = batch.num_rows();
    let schema = batch.schema();
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, f) in schema.fields().iter().enumerate() {
        let lower = column_key(f.name());
        match groups.iter_mut().find(|(l, _)| *l == lower) {
            Some((_, ixs)) => ixs.push(i),
            None => groups.push((lower, vec![i])),
        }
    }
    let mut fields: Vec<Field> = target.fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(fields.len());
    for f in target.fields() {
        columns.push(match groups.iter().find(|(l, _)| l == f.name()) {
            Some((_, ixs)) if ixs.len() == 1 => conform_column(f, batch.column(ixs[0]))?,
            Some((_, ixs)) => {
                let nullable = f.as_ref().clone().with_nullable(true);
                let cols = (ixs.iter())
                    .map(|&i| conform_column(&nullable, batch.column(i)))
                    .collect::<Result<Vec<_>, _>>()?;
                let merged = merge_agreeing(&schema, ixs, &cols)?;
                conform_column(f, &merged)?
            }
            None if f.is_nullable() => new_null_array(f.data_type(), rows),
            None => return Err(Unmergeable::new(Some(f.name()), "required column is missing")),
        });
    }
    let mut extra_columns = Vec::new();
    for (lower, ixs) in &groups {
        if target.fields().iter().any(|f| f.name() == lower) {
            continue;
        }
        let name = schema.field(ixs[0]).name();
        let col = if ixs.len() == 1 {
            batch.column(ixs[0]).clone()
        } else {
            // The type that holds every one of them exactly.
            let mut day = super::widen::ExtraColumns::default();
            for &i in ixs {
                day.add(name, batch.column(i)).map_err(|u| {
                    let reason =
                        format!("{} columns named {name:?} but for case: {}", ixs.len(), u.reason);
                    Unmergeable::new(Some(name), reason)
                })?;
            }
            let to = day.data_type(0).clone();
            let cols = (ixs.iter())
                .map(|&i| super::widen::convert(batch.column(i), &to))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Unmergeable::new(Some(name), e))?;
            merge_agreeing(&schema, ixs, &cols)?
        };
        extra_columns.push(name.clone());
        fields.push(Field::new(name, col.data_type().clone(), true));
        columns.push(col);
    }
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Unmergeable::new(None, e.to_string()))?;
    Ok(Decoded { batch, extra_columns })
}

/// Row by row the value the case-twin columns `ixs` agree on, else an [`Unmergeable`] naming the
/// first row where two differ.
fn merge_agreeing(
    schema: &Schema,
    ixs: &[usize],
    cols: &[ArrayRef],
) -> Result<ArrayRef, Unmergeable> {
    let names: Vec<&str> = ixs.iter().map(|&i| schema.field(i).name().as_str()).collect();
    let rows = cols[0].len();
    let mut pick: Vec<(usize, usize)> = Vec::with_capacity(rows);
    for row in 0..rows {
        let mut chosen: Option<usize> = None;
        for (c, col) in cols.iter().enumerate() {
            if col.is_null(row) {
                continue;
            }
            match chosen {
                None => chosen = Some(c),
                Some(k) if cols[k].slice(row, 1).to_data() == col.slice(row, 1).to_data() => {}
                Some(k) => {
                    return Err(Unmergeable::new(
                        Some(names[c]),
                        format!(
                            "columns {:?} and {:?} are one column to Glue, Athena and Spark (names equal but for case) and disagree in row {row}; the file is left in place",
                            names[k], names[c]
                        ),
                    ));
                }
            }
        }
        pick.push((chosen.unwrap_or(0), row));
    }
    let refs: Vec<&dyn Array> = cols.iter().map(|c| c.as_ref()).collect();
    arrow_select::interleave::interleave(&refs, &pick)
        .map_err(|e| Unmergeable::new(Some(names[0]), e.to_string()))
}

fn conform_column(target: &Field, col: &ArrayRef) -> Result<ArrayRef, Unmergeable> {
    let fail = |reason: String| Unmergeable::new(Some(target.name()), reason);
    if !target.is_nullable() && col.null_count() > 0 {
        return Err(fail(format!("{} null value(s) in a required column", col.null_count())));
    }
    match (target.data_type(), col.data_type()) {
        (t, s) if t == s => Ok(col.clone()),
        // Nulls lose nothing in any type (fastparquet writes an all-None
        // string column as plain binary, pyarrow as the null type).
        (t, _) if col.null_count() == col.len() || col.data_type() == &DataType::Null => {
            Ok(new_null_array(t, col.len()))
        }
        (DataType::Utf8, s) if super::widen::is_string(s) => {
            cast(col, &DataType::Utf8).map_err(|e| fail(e.to_string()))
        }
        // Unannotated binary (fastparquet's `bytes` encoding) holding UTF-8.
        (DataType::Utf8, s @ (DataType::Binary | DataType::LargeBinary | DataType::BinaryView)) => {
            super::widen::convert(col, &DataType::Utf8).map_err(|e| {
                fail(format!("type {s} cannot be converted to Utf8 without loss: {e}"))
            })
        }
        (DataType::Timestamp(TimeUnit::Microsecond, tz), DataType::Timestamp(unit, _)) => {
            // Aware and naive timestamps both store UTC epoch values; only the unit changes.
            let raw = cast(col, &DataType::Int64).map_err(|e| fail(e.to_string()))?;
            let micros = |v: i64| {
                let inexact =
                    || fail(format!("timestamp {v} ({unit:?}) has no exact microsecond value"));
                to_micros(v, *unit).ok_or_else(inexact)
            };
            let out = (raw.as_primitive::<arrow_array::types::Int64Type>().iter())
                .map(|v| v.map(micros).transpose())
                .collect::<Result<Vec<_>, _>>()?;
            let arr = TimestampMicrosecondArray::from(out).with_timezone_opt(tz.clone());
            Ok(Arc::new(arr))
        }
        (t, s) => Err(fail(format!("type {s} cannot be converted to {t} without loss"))),
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

/// Whether a per-flight file holds a row whose `s3_key` carries `flight`:
/// only then could a compacted file keep its index row.
pub(crate) fn holds_flight(decoded: &Decoded, flight: Uuid) -> bool {
    row_flights(&decoded.batch).is_some_and(|mut ids| ids.any(|id| id == Some(flight)))
}

/// Rows whose `s3_key` is null, empty or carries no flight uuid.
pub fn rows_without_flight(decoded: &Decoded) -> usize {
    row_flights(&decoded.batch)
        .map_or(decoded.batch.num_rows(), |ids| ids.filter(Option::is_none).count())
}

/// Each row's flight by its `s3_key` (`None` when null or carrying none); `None` when `b` has no
/// `s3_key` string column.
pub(super) fn row_flights(b: &RecordBatch) -> Option<impl Iterator<Item = Option<Uuid>> + '_> {
    let keys = b.column(b.schema().index_of("s3_key").ok()?).as_string_opt::<i32>()?;
    Some(keys.iter().map(|k| k.and_then(flight_uuid)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::properties::WriterVersion;

    /// [`decode_parsed`] by the Arrow reader alone.
    fn decode_arrow(bytes: Bytes, metadata: Arc<ParquetMetaData>) -> Result<Decoded, Unmergeable> {
        let (arrow, conformed) = arrow_metadata(metadata)?;
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(bytes, arrow).build();
        let reader = reader.map_err(|e| Unmergeable::new(None, format!("cannot read: {e}")))?;
        let schema = reader.schema();
        let batches = reader.collect::<Result<Vec<_>, _>>();
        let batches = batches.map_err(|e| Unmergeable::new(None, format!("cannot decode: {e}")))?;
        decoded_from(&schema, batches, conformed)
    }

    /// Writes `b` with `props` (one row group) and parses its footer as the job does.
    fn written(b: &RecordBatch, props: WriterProperties) -> (Bytes, Arc<ParquetMetaData>) {
        let mut buf = Vec::new();
        let mut w = ArrowWriter::try_new(&mut buf, b.schema(), Some(props)).unwrap();
        w.write(b).unwrap();
        w.close().unwrap();
        let bytes = Bytes::from(buf);
        let metadata = ParquetMetaDataReader::new()
            .with_metadata_options(Some(footer_options()))
            .parse_and_finish(&bytes)
            .unwrap();
        (bytes, Arc::new(metadata))
    }

    /// `rows` rows of the target schema, values and nulls picked by `seed` (xorshift), edge values
    /// included: empty and non-ASCII strings, the extreme timestamps.
    fn generated(rows: usize, seed: u64) -> RecordBatch {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let long = "x".repeat(300);
        let texts = ["", "a", "N12345", "Zürich ✈", long.as_str()];
        let times = [i64::MIN, -1, 0, 1_700_000_000_123_456, i64::MAX];
        let columns = (target_schema().fields().iter())
            .map(|f| -> ArrayRef {
                let mut pick = |n: usize| (next() % (n as u64 + 1)) as usize;
                match f.data_type() {
                    DataType::Boolean => {
                        Arc::new(BooleanArray::from_iter((0..rows).map(|_| Some(pick(1) == 1))))
                    }
                    DataType::Utf8 => Arc::new(StringArray::from_iter(
                        (0..rows).map(|_| texts.get(pick(texts.len()))),
                    )),
                    t => Arc::new(
                        TimestampMicrosecondArray::from_iter(
                            (0..rows).map(|_| times.get(pick(times.len())).copied()),
                        )
                        .with_data_type(t.clone()),
                    ),
                }
            })
            .collect();
        RecordBatch::try_new(target_schema(), columns).unwrap()
    }

    #[test]
    fn flat_decode_reads_what_the_arrow_reader_reads() {
        let props = || WriterProperties::builder();
        let writers = [
            super::super::encode::props(1 << 20),
            props().build(),
            props().set_compression(Compression::SNAPPY).build(),
            props().set_dictionary_enabled(false).build(),
            props().set_writer_version(WriterVersion::PARQUET_2_0).build(),
            props().set_data_page_row_count_limit(1).set_write_batch_size(1).build(),
            props().set_statistics_enabled(EnabledStatistics::None).build(),
        ];
        let mut flat = 0;
        for (w, props) in writers.iter().enumerate() {
            for (rows, seed) in [(1, 1), (1, 2), (1, 3), (2, 4), (3, 5), (7, 6), (FLAT_ROWS, 7)] {
                let b = generated(rows, seed * 7919 + w as u64);
                let (bytes, metadata) = written(&b, props.clone());
                let read = decode_flat(&bytes, &metadata).expect("the writer's layout is flat");
                let arrow = decode_arrow(bytes, metadata).unwrap();
                assert_eq!(read, arrow.batch, "writer {w}, {rows} rows");
                assert_eq!(read, b, "writer {w}, {rows} rows");
                // A held row's memory: no more than the Arrow reader's (1 KB a string column was).
                let (flat_mb, arrow_mb) =
                    (read.get_array_memory_size(), arrow.batch.get_array_memory_size());
                assert!(
                    flat_mb <= arrow_mb,
                    "writer {w}, {rows} rows: {flat_mb} > {arrow_mb} bytes"
                );
                flat += 1;
            }
        }
        assert_eq!(flat, writers.len() * 7);
    }

    #[test]
    fn naive_timestamps_read_as_the_arrow_reader_reads_them() {
        let b = generated(5, 11);
        let naive = |f: &Field| match f.data_type() {
            DataType::Timestamp(unit, _) => {
                f.clone().with_data_type(DataType::Timestamp(*unit, None))
            }
            _ => f.clone(),
        };
        let schema = Schema::new(b.schema().fields().iter().map(|f| naive(f)).collect::<Vec<_>>());
        let columns = (b.columns().iter()).map(|c| {
            cast(c, naive(&Field::new("", c.data_type().clone(), true)).data_type()).unwrap()
        });
        let b = RecordBatch::try_new(Arc::new(schema), columns.collect()).unwrap();
        let (bytes, metadata) = written(&b, WriterProperties::builder().build());
        let read = decode_flat(&bytes, &metadata).expect("the writer's layout");
        assert_eq!(read, decode_arrow(bytes, metadata).unwrap().batch);
        assert_eq!(read, generated(5, 11));
    }

    #[test]
    fn other_files_are_left_to_the_arrow_reader_and_its_errors() {
        let none = |b: &RecordBatch, props| {
            let (bytes, metadata) = written(b, props);
            decode_flat(&bytes, &metadata).is_none()
        };
        let props = WriterProperties::builder().build();
        assert!(none(&generated(FLAT_ROWS + 1, 1), props.clone()));
        assert!(none(&generated(0, 1), props.clone()), "no row group");
        let two_groups = WriterProperties::builder().set_max_row_group_row_count(Some(1)).build();
        assert!(none(&generated(2, 1), two_groups));
        // `military` optional, as the target's is not.
        let b = generated(1, 1);
        let fields: Vec<Field> = target_schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let optional = Arc::new(Schema::new(fields));
        assert!(none(&b.clone().with_schema(optional).unwrap(), props.clone()));
        // A corrupt page: the Arrow reader's error, as before the flat read.
        let (bytes, metadata) = written(&b, props);
        let mut corrupt = bytes.to_vec();
        let page = metadata.row_group(0).column(0).byte_range().0 as usize;
        corrupt[page..page + 12].fill(0xff);
        let corrupt = Bytes::from(corrupt);
        assert!(decode_flat(&corrupt, &metadata).is_none());
        let err = decode_parsed(corrupt.clone(), metadata.clone()).unwrap_err();
        assert_eq!(err, decode_arrow(corrupt, metadata).unwrap_err());
        assert!(err.reason.starts_with("cannot"), "{err:?}");
    }
}
