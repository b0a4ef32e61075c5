//! Schema conformance: the target schema, and decoding an index file into it by column name.

use super::*;

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
/// `STRING`, `military` `BOOLEAN`, timestamps `TIMESTAMP(MICROS)`, nothing else): it reads straight
/// into [`target_schema`] with the values [`conform`] would give.
pub(super) fn has_target_layout(parquet: &SchemaDescriptor) -> bool {
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
