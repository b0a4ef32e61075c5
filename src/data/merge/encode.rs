//! Encoding: the Parquet writer settings of a compacted file ([`encode()`]).

use super::*;

/// Rows per batch handed to the Parquet writer by [`super::MergedRows::encode`] and the streaming merge.
pub(crate) const WRITE_BATCH_ROWS: usize = 8192;

pub(super) fn props(row_group_rows: usize) -> WriterProperties {
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
    let schema = batches.first().map(|b| b.schema()).unwrap_or_else(target_schema);
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, schema, Some(props(row_group_rows)))?;
    for b in batches {
        w.write(b)?;
    }
    w.close()?;
    Ok(buf)
}
