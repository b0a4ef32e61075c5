//! CPU cost per index file of the merge path, on in-memory inputs (no S3):
//! `decode` alone, and a whole day (decode + [`Merger::push`] + finish +
//! [`MergedRows::encode`]) reported per file.
//!
//! `cargo bench --bench merge` (divan; it prints the time per iteration and
//! files per second). The inputs
//! are single-row Parquet files with the index schema, written with the
//! parquet crate's default properties (snappy, dictionary, statistics), which
//! is what pyarrow's defaults amount to for one row.

use std::hint::black_box;
use std::sync::Arc;

use archive_compaction::data::merge::{MergeInput, Merger, Source, decode, target_schema};
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, StringArray, TimestampMicrosecondArray};
use bytes::Bytes;
use chrono::DateTime;
use divan::counter::ItemsCount;
use parquet::arrow::ArrowWriter;
use uuid::Uuid;

fn uuid7(i: u64) -> Uuid {
    let ms = 1_784_505_600_000u64 + i * 1_700;
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    b[6] = 0x70 | (i % 16) as u8;
    b[8] = 0x80;
    b[10..16].copy_from_slice(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes()[2..]);
    Uuid::from_bytes(b)
}

/// One index file as the archive writer writes it: one row, the index schema.
fn index_file(i: u64) -> (Uuid, Bytes) {
    let u = uuid7(i);
    let s = |v: String| Arc::new(StringArray::from(vec![Some(v)])) as ArrayRef;
    let t = 1_784_505_600_000_000 + i as i64 * 1_700_000;
    let ts = |v: i64| {
        Arc::new(TimestampMicrosecondArray::from(vec![Some(v)]).with_timezone("UTC")) as ArrayRef
    };
    let batch = RecordBatch::try_new(
        target_schema(),
        vec![
            s(format!("{:06X}", i * 7919 % 0xFFFFFF)),
            s(format!("N{}", 100 + i % 9000)),
            s("B738".into()),
            Arc::new(BooleanArray::from(vec![i.is_multiple_of(10)])),
            s("UAL".into()),
            s(format!("UAL{}", i % 9999)),
            ts(t),
            ts(t + 3_600_000_000),
            s(format!("flights/2026/07/20/{:06X}_UAL{}_{u}.json.gz", i, i % 9999)),
        ],
    )
    .unwrap();
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    (u, Bytes::from(buf))
}

fn day(files: &[(Uuid, Bytes)]) -> usize {
    let mut m = Merger::new();
    for (u, body) in files {
        let decoded = decode(body.clone()).unwrap();
        m.push(MergeInput {
            source: Source::PerFlight(*u),
            last_modified: DateTime::from_timestamp(1_784_600_000, 0).unwrap(),
            decoded,
        })
        .unwrap();
    }
    let rows = m.finish().unwrap();
    rows.encode(131_072).unwrap().map(|b| b.len()).unwrap_or(0)
}

fn main() {
    divan::main();
}

/// `decode` of one single-row index file (footer, 9 columns, conform).
#[divan::bench]
fn decode_one_file(bencher: divan::Bencher) {
    let one = index_file(1).1;
    bencher.counter(ItemsCount::new(1usize)).bench(|| decode(black_box(one.clone())).unwrap());
}

/// A day of 1,000 files: decode + merge + encode, counted per file.
#[divan::bench(sample_count = 20)]
fn day_of_1000_files(bencher: divan::Bencher) {
    const N: u64 = 1_000;
    let files: Vec<(Uuid, Bytes)> = (0..N).map(index_file).collect();
    bencher.counter(ItemsCount::new(N)).bench(|| day(black_box(&files)));
}
