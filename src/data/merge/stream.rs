//! The bounded-memory merge: rows go to the Parquet writer as they arrive.
//!
//! A day's inputs are almost always regular: per-flight files listed in key order, which is uuid
//! order (S3 lists in UTF-8 binary order, and a lowercase hyphenated uuid sorts as its 128-bit
//! value), plus a few compacted files, which this job wrote sorted by uuid, uuid-less rows last.
//! Over those the merge is a k-way merge holding the reads in flight, the compacted runs, one
//! batch, the open row group and the encoded output. Anything irregular is
//! [`StreamError::NotStreamable`]: rows written cannot be taken back.

use super::MergeError;
use super::{
    ArrowWriter, BatchCoalescer, Bytes, DateTime, Decoded, ExtraColumns, Rank, RecordBatch,
    SchemaRef, Source, Utc, Uuid, WRITE_BATCH_ROWS, props, rank, row_flights, target_schema,
    to_union_schema,
};

/// Why [`StreamMerger`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The inputs are not regular: merge the day with [`super::Merger`] instead.
    #[error("not streamable: {0}")]
    NotStreamable(String),
    /// The merge failed or refused one input ([`MergeError::Input`]), as the held merge would.
    #[error(transparent)]
    Failed(MergeError),
}

fn failed(e: impl Into<MergeError>) -> StreamError {
    StreamError::Failed(e.into())
}

/// The encoded result of a merge, streamed or not.
#[derive(Debug, Clone, Default)]
pub struct MergedOutput {
    /// The Parquet file; `None` when there are no rows.
    pub encoded: Option<Bytes>,
    /// Rows in it.
    pub rows: u64,
    /// Rows dropped because a newer version of the same flight was kept.
    pub duplicates_removed: u64,
    /// Extra (non-target) columns kept, in first-seen order.
    pub extra_columns: Vec<String>,
}

/// One compacted input: a sorted run, consumed from `pos`.
#[derive(Debug)]
struct Run {
    batch: RecordBatch,
    uuids: Vec<Uuid>,
    pos: usize,
    rank: Rank,
}

impl Run {
    fn head(&self) -> Option<Uuid> {
        self.uuids.get(self.pos).copied()
    }
}

/// Push every multi-row input ([`StreamMerger::push_multi_row`]) before the first per-flight one
/// ([`StreamMerger::push_per_flight`]), each kind in key order, then [`StreamMerger::finish`]: the
/// rows [`super::Merger`] gives, byte for byte.
pub struct StreamMerger {
    row_group_rows: usize,
    schema: SchemaRef,
    extras: ExtraColumns,
    /// Set once the first row is emitted: the schema is fixed from then on.
    coalescer: Option<BatchCoalescer>,
    writer: Option<ArrowWriter<Vec<u8>>>,
    runs: Vec<Run>,
    anonymous: Vec<RecordBatch>,
    per_flight_started: bool,
    last: Option<Uuid>,
    rows_written: u64,
    duplicates_removed: u64,
}

impl StreamMerger {
    /// An empty merge writing row groups of at most `row_group_rows` rows.
    pub fn new(row_group_rows: usize) -> StreamMerger {
        StreamMerger {
            row_group_rows,
            schema: target_schema(),
            extras: ExtraColumns::default(),
            coalescer: None,
            writer: None,
            runs: Vec::new(),
            anonymous: Vec::new(),
            per_flight_started: false,
            last: None,
            rows_written: 0,
            duplicates_removed: 0,
        }
    }

    /// Adds a multi-row input as a run: its rows with a flight uuid in uuid order, then any rows
    /// without one. Files not in that order (ours are) are sorted here, stably, and a flight twice
    /// in one file keeps its later row (as in [`super::Merger`]). The run is held decoded until its
    /// rows are written.
    ///
    /// Errors: [`StreamError::NotStreamable`] when it comes after a per-flight input.
    pub fn push_multi_row(
        &mut self,
        key: &str,
        last_modified: DateTime<Utc>,
        decoded: Decoded,
    ) -> Result<(), StreamError> {
        if self.per_flight_started {
            return Err(StreamError::NotStreamable(format!(
                "multi-row file {key} came after per-flight files"
            )));
        }
        let batch = self.align(key, &decoded.batch)?;
        let ids: Vec<Option<Uuid>> = row_flights(&batch).expect("s3_key").collect();
        // Already a run (our compacted files): no copy.
        let first_anonymous = ids.iter().position(Option::is_none).unwrap_or(ids.len());
        let sorted = ids[..first_anonymous].windows(2).all(|w| w[0] < w[1])
            && ids[first_anonymous..].iter().all(Option::is_none);
        let (run, uuids, anonymous) = if sorted {
            let uuids: Vec<Uuid> = ids[..first_anonymous].iter().flatten().copied().collect();
            let anonymous = batch.slice(first_anonymous, batch.num_rows() - first_anonymous);
            (batch.slice(0, first_anonymous), uuids, anonymous)
        } else {
            let mut keyed: Vec<(Uuid, u32)> =
                (ids.iter().zip(0..)).filter_map(|(id, row)| id.map(|u| (u, row))).collect();
            // A flight's later row first, kept by the dedup.
            keyed.sort_unstable_by_key(|&(u, row)| (u, std::cmp::Reverse(row)));
            let rows = keyed.len();
            keyed.dedup_by_key(|(u, _)| *u);
            self.duplicates_removed += (rows - keyed.len()) as u64;
            let (uuids, take): (Vec<Uuid>, Vec<u32>) = keyed.into_iter().unzip();
            let anon: Vec<u32> =
                (ids.iter().zip(0..)).filter(|(id, _)| id.is_none()).map(|(_, row)| row).collect();
            let pick = |rows: Vec<u32>| {
                arrow_select::take::take_record_batch(&batch, &arrow_array::UInt32Array::from(rows))
                    .map_err(failed)
            };
            (pick(take)?, uuids, pick(anon)?)
        };
        if anonymous.num_rows() > 0 {
            self.anonymous.push(anonymous);
        }
        self.runs.push(Run {
            batch: run,
            uuids,
            pos: 0,
            rank: rank(Source::Compacted, last_modified),
        });
        Ok(())
    }

    /// Adds a per-flight file `{flight}.parquet` and writes every row whose
    /// place is now known (this one and the compacted rows before it).
    ///
    /// Errors: [`StreamError::NotStreamable`] when the file holds more than one row, a row of
    /// another flight, or comes out of uuid order; [`StreamError::Failed`] on an encoder error.
    pub fn push_per_flight(
        &mut self,
        key: &str,
        flight: Uuid,
        decoded: Decoded,
    ) -> Result<(), StreamError> {
        self.per_flight_started = true;
        let rows = decoded.batch.num_rows();
        if rows == 0 {
            return Ok(());
        }
        if rows > 1 {
            return Err(StreamError::NotStreamable(format!("{key} holds {rows} rows, not one")));
        }
        let batch = self.align(key, &decoded.batch)?;
        let id = row_flights(&batch).expect("s3_key").next().flatten().unwrap_or(flight);
        if id != flight {
            return Err(StreamError::NotStreamable(format!("{key} holds the row of flight {id}")));
        }
        if self.last.is_some_and(|l| l >= id) {
            return Err(StreamError::NotStreamable(format!("{key} is out of flight order")));
        }
        self.last = Some(id);
        self.emit_runs_below(Some(id))?;
        // A per-flight row beats every compacted row of its flight.
        for run in &mut self.runs {
            if run.head() == Some(id) {
                run.pos += 1;
                self.duplicates_removed += 1;
            }
        }
        self.emit(&batch)
    }

    /// Writes the rest (compacted rows after the last per-flight one, then
    /// rows without a flight uuid) and closes the file.
    ///
    /// Errors: [`StreamError::Failed`] on an encoder error.
    pub fn finish(mut self) -> Result<MergedOutput, StreamError> {
        self.emit_runs_below(None)?;
        for b in std::mem::take(&mut self.anonymous) {
            let b = self.pad(&b)?;
            self.emit(&b)?;
        }
        if let Some(c) = &mut self.coalescer {
            c.finish_buffered_batch().map_err(failed)?;
            self.write_completed()?;
        }
        let encoded = self.writer.map(|w| w.into_inner().map(Bytes::from)).transpose();
        Ok(MergedOutput {
            encoded: encoded.map_err(failed)?,
            rows: self.rows_written,
            duplicates_removed: self.duplicates_removed,
            extra_columns: self.extras.names(),
        })
    }

    /// Writes, in uuid order, every compacted row below `bound` (all when `None`): among runs at
    /// the same uuid the highest rank wins, at equal rank the later run.
    fn emit_runs_below(&mut self, bound: Option<Uuid>) -> Result<(), StreamError> {
        loop {
            let min = self.runs.iter().filter_map(Run::head).min();
            let Some(min) = min.filter(|m| bound.is_none_or(|b| *m < b)) else {
                return Ok(());
            };
            // The last of equal ranks.
            let (w, _) = (self.runs.iter().enumerate())
                .filter(|(_, run)| run.head() == Some(min))
                .max_by_key(|(_, run)| run.rank)
                .expect("a run holds the minimum");
            let row = self.runs[w].batch.slice(self.runs[w].pos, 1);
            for (i, run) in self.runs.iter_mut().enumerate() {
                if run.head() == Some(min) {
                    run.pos += 1;
                    if i != w {
                        self.duplicates_removed += 1;
                    }
                }
            }
            let row = self.pad(&row)?;
            self.emit(&row)?;
        }
    }

    /// Converts a conformed batch to the union schema, which takes in its extra columns (new ones,
    /// or a wider type for its values: [`super::widen`]) while nothing has been written.
    ///
    /// Errors: [`StreamError::Failed`] with [`MergeError::Input`], as the held merge would decide;
    /// [`StreamError::NotStreamable`] when the schema would change after rows were written.
    fn align(&mut self, key: &str, b: &RecordBatch) -> Result<RecordBatch, StreamError> {
        let next = self.extras.with(b).map_err(|u| StreamError::Failed(MergeError::Input(u)))?;
        if self.extras.schema_differs(&next) {
            if self.coalescer.is_some() {
                return Err(StreamError::NotStreamable(format!(
                    "{key} changes the extra columns ({:?}) after rows were written",
                    next.names()
                )));
            }
            self.schema = next.schema();
        }
        self.extras = next;
        self.pad(b)
    }

    /// `b` in the current schema ([`to_union_schema`]).
    fn pad(&self, b: &RecordBatch) -> Result<RecordBatch, StreamError> {
        to_union_schema(b, &self.schema).map_err(StreamError::Failed)
    }

    fn emit(&mut self, b: &RecordBatch) -> Result<(), StreamError> {
        if b.num_rows() == 0 {
            return Ok(());
        }
        let c = self
            .coalescer
            .get_or_insert_with(|| BatchCoalescer::new(self.schema.clone(), WRITE_BATCH_ROWS));
        c.push_batch(b.clone()).map_err(failed)?;
        self.rows_written += b.num_rows() as u64;
        self.write_completed()
    }

    /// Writes the coalescer's completed batches, opening the writer at the first.
    fn write_completed(&mut self) -> Result<(), StreamError> {
        let Some(c) = &mut self.coalescer else { return Ok(()) };
        while let Some(done) = c.next_completed_batch() {
            let w = match &mut self.writer {
                Some(w) => w,
                none => {
                    let props = Some(props(self.row_group_rows));
                    let w = ArrowWriter::try_new(Vec::new(), self.schema.clone(), props);
                    none.insert(w.map_err(failed)?)
                }
            };
            w.write(&done).map_err(failed)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{row, uuid_n, with_int_column};
    use super::super::{AsArray, MergeInput, Merger, conform, decode};
    use super::*;
    use std::sync::Arc;

    impl StreamMerger {
        /// Approximate heap bytes held besides the encoded output: the compacted runs, held uuid-less
        /// rows and the open row group; it does not grow with the number of per-flight files pushed.
        fn memory_bytes(&self) -> usize {
            self.runs
                .iter()
                .map(|r| r.batch.get_array_memory_size() + r.uuids.capacity() * 16)
                .chain(self.anonymous.iter().map(RecordBatch::get_array_memory_size))
                .sum::<usize>()
                + self.writer.as_ref().map_or(0, ArrowWriter::memory_size)
        }

        /// Bytes of encoded output so far (flushed row groups).
        fn output_bytes(&self) -> usize {
            self.writer.as_ref().map_or(0, ArrowWriter::bytes_written)
        }
    }

    /// A tiny deterministic generator (xorshift64*) for test scenarios.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    fn with_s3_key(b: RecordBatch, key: Option<&str>) -> RecordBatch {
        let mut cols = b.columns().to_vec();
        cols[8] = Arc::new(arrow_array::StringArray::from(vec![key]));
        RecordBatch::try_new(b.schema(), cols).unwrap()
    }

    fn with_ident(b: RecordBatch, ident: &str) -> RecordBatch {
        let mut cols = b.columns().to_vec();
        cols[5] = Arc::new(arrow_array::StringArray::from(vec![ident]));
        RecordBatch::try_new(b.schema(), cols).unwrap()
    }

    fn with_extra(b: RecordBatch, name: &str, v: i32) -> RecordBatch {
        with_int_column(b, name, vec![Some(v)])
    }

    fn concat(parts: &[RecordBatch]) -> RecordBatch {
        arrow_select::concat::concat_batches(&parts[0].schema(), parts).unwrap()
    }

    struct Day {
        /// (key, last modified secs, rows), in key order.
        compacted: Vec<(String, i64, RecordBatch)>,
        /// (flight, rows), in key (= uuid) order.
        per_flight: Vec<(Uuid, RecordBatch)>,
    }

    /// A regular day: per-flight files for a random subset of flights, and
    /// up to three compacted runs over other random subsets (overlapping,
    /// equal LastModified sometimes, rows without a flight uuid at the end,
    /// an extra column in the first).
    fn regular_day(seed: u64) -> Day {
        let mut rng = Rng(seed | 1);
        let n = 1 + rng.below(300) as u32;
        let mut compacted = Vec::new();
        for c in 0..rng.below(4) {
            let mut rows: Vec<RecordBatch> = (0..n)
                .filter(|_| rng.below(3) == 0)
                .map(|i| row(&uuid_n(i), &format!("C{c}-{i}")))
                .collect();
            if rng.below(3) == 0 {
                rows.push(with_s3_key(row(&uuid_n(0), &format!("ANON{c}")), None));
            }
            if rows.is_empty() {
                continue;
            }
            // A legacy migration's file: rows in no particular order, now
            // and then a flight twice (the later row wins).
            if rng.below(3) == 0 {
                for i in (1..rows.len()).rev() {
                    rows.swap(i, rng.below(i as u64 + 1) as usize);
                }
                if rng.below(2) == 0 {
                    let again = rows[rng.below(rows.len() as u64) as usize].clone();
                    let ident = format!("DUP{c}");
                    rows.push(with_ident(again, &ident));
                }
            }
            let mut b = concat(&rows);
            if c == 0 && rng.below(2) == 0 {
                let n = b.num_rows() as i32;
                b = with_int_column(b, "squawk", (0..n).map(Some).collect());
            }
            compacted.push((format!("compacted-{c}.parquet"), 100 * (1 + rng.below(2) as i64), b));
        }
        let mut per_flight = Vec::new();
        for i in 0..n {
            if rng.below(2) == 0 {
                continue;
            }
            let u = Uuid::parse_str(&uuid_n(i)).unwrap();
            let b = row(&uuid_n(i), &format!("P{i}"));
            // Some writers leave s3_key empty: the file name says the flight.
            let b = if rng.below(10) == 0 { with_s3_key(b, None) } else { b };
            per_flight.push((u, b));
        }
        Day { compacted, per_flight }
    }

    fn held(day: &Day, row_group_rows: usize) -> (Option<RecordBatch>, u64, Vec<String>) {
        // Plan (key) order: `{uuid}.parquet` sorts before `compacted-*`.
        let mut m = Merger::new();
        for (u, b) in &day.per_flight {
            m.push(MergeInput {
                source: Source::PerFlight(*u),
                last_modified: at(50),
                decoded: conform(b).unwrap(),
            })
            .unwrap();
        }
        for (_, lm, b) in &day.compacted {
            m.push(MergeInput {
                source: Source::Compacted,
                last_modified: at(*lm),
                decoded: conform(b).unwrap(),
            })
            .unwrap();
        }
        let rows = m.finish().unwrap();
        let bytes = rows.encode(row_group_rows).unwrap();
        (
            bytes.map(|b| decode(b.into()).unwrap().batch),
            rows.duplicates_removed(),
            rows.extra_columns().to_vec(),
        )
    }

    fn streamed(day: &Day, row_group_rows: usize) -> Result<MergedOutput, StreamError> {
        let mut s = StreamMerger::new(row_group_rows);
        for (key, lm, b) in &day.compacted {
            s.push_multi_row(key, at(*lm), conform(b).unwrap())?;
        }
        for (u, b) in &day.per_flight {
            s.push_per_flight(&format!("{u}.parquet"), *u, conform(b).unwrap())?;
        }
        s.finish()
    }

    #[test]
    fn streamed_output_equals_the_in_memory_merge_on_regular_days() {
        for seed in 0..300u64 {
            let day = regular_day(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) + 7);
            let rg = 1 + (seed as usize % 7) * 40;
            let (want, dups, extra) = held(&day, rg);
            let got = streamed(&day, rg).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!(got.duplicates_removed, dups, "seed {seed}");
            assert_eq!(got.extra_columns, extra, "seed {seed}");
            match (want, got.encoded) {
                (None, None) => assert_eq!(got.rows, 0),
                (Some(w), Some(g)) => {
                    let g = decode(g).unwrap().batch;
                    assert_eq!(g.num_rows() as u64, got.rows, "seed {seed}");
                    assert_eq!(g, w, "seed {seed}: streamed rows differ");
                }
                (w, g) => panic!(
                    "seed {seed}: held {:?} rows, streamed {:?} bytes",
                    w.map(|b| b.num_rows()),
                    g.map(|b| b.len())
                ),
            }
        }
    }

    #[test]
    fn irregular_inputs_are_not_streamable() {
        let u = |i| Uuid::parse_str(&uuid_n(i)).unwrap();
        let not = |r: Result<(), StreamError>| {
            assert!(matches!(r, Err(StreamError::NotStreamable(_))), "{r:?}");
        };
        // Two rows in a per-flight file.
        let mut s = StreamMerger::new(10);
        not(s.push_per_flight(
            "a",
            u(1),
            conform(&concat(&[row(&uuid_n(1), "A"), row(&uuid_n(2), "B")])).unwrap(),
        ));
        // Another flight's row.
        let mut s = StreamMerger::new(10);
        not(s.push_per_flight("a", u(1), conform(&row(&uuid_n(2), "B")).unwrap()));
        // Out of uuid order.
        let mut s = StreamMerger::new(10);
        s.push_per_flight("b", u(2), conform(&row(&uuid_n(2), "B")).unwrap()).unwrap();
        not(s.push_per_flight("a", u(1), conform(&row(&uuid_n(1), "A")).unwrap()));
        // A multi-row file after per-flight files.
        let mut s = StreamMerger::new(10);
        s.push_per_flight("a", u(1), conform(&row(&uuid_n(1), "A")).unwrap()).unwrap();
        not(s.push_multi_row("c", at(1), conform(&row(&uuid_n(3), "C")).unwrap()));
        // An extra column first seen after rows were written.
        let mut s = StreamMerger::new(10);
        s.push_per_flight("a", u(1), conform(&row(&uuid_n(1), "A")).unwrap()).unwrap();
        not(s.push_per_flight(
            "b",
            u(2),
            conform(&with_extra(row(&uuid_n(2), "B"), "squawk", 1)).unwrap(),
        ));
        // Before any row is written it only widens the schema.
        let mut s = StreamMerger::new(10);
        s.push_per_flight(
            "a",
            u(1),
            conform(&with_extra(row(&uuid_n(1), "A"), "squawk", 1)).unwrap(),
        )
        .unwrap();
        s.push_per_flight("b", u(2), conform(&row(&uuid_n(2), "B")).unwrap()).unwrap();
        let out = s.finish().unwrap();
        assert_eq!(out.extra_columns, ["squawk".to_string()]);
        assert_eq!(out.rows, 2);
    }

    /// A multi-row file in uuid order that holds one flight twice (a legacy
    /// migration run twice over a day, concatenated, then sorted) is not a
    /// sorted run as it stands: the flight keeps its later row only, as the
    /// in-memory merge keeps it.
    #[test]
    fn a_sorted_multi_row_file_holding_a_flight_twice_keeps_its_later_row() {
        let file = concat(&[
            row(&uuid_n(1), "A"),
            row(&uuid_n(2), "B-old"),
            row(&uuid_n(2), "B-new"),
            row(&uuid_n(3), "C"),
            with_s3_key(row(&uuid_n(0), "ANON"), None),
        ]);
        let mut s = StreamMerger::new(10);
        s.push_multi_row("legacy.parquet", at(1), conform(&file).unwrap()).unwrap();
        let out = s.finish().unwrap();
        assert_eq!((out.rows, out.duplicates_removed), (4, 1));
        let got = decode(out.encoded.unwrap()).unwrap().batch;
        let idents: Vec<&str> = got.column(5).as_string::<i32>().iter().flatten().collect();
        assert_eq!(idents, ["A", "B-new", "C", "ANON"]);
        let day = Day { compacted: vec![("legacy.parquet".into(), 1, file)], per_flight: vec![] };
        let (want, dups, _) = held(&day, 10);
        assert_eq!((want.unwrap(), dups), (got, 1));
    }

    #[test]
    fn no_rows_make_no_file() {
        let out = StreamMerger::new(10).finish().unwrap();
        assert!(out.encoded.is_none());
        assert_eq!(out.rows, 0);
    }

    #[test]
    fn memory_stays_flat_while_per_flight_files_stream_through() {
        // Row groups of 1,000 rows: what the merge holds besides the encoded
        // output is one open row group and one write batch, so it is the
        // same after 10,000 files as after 40,000.
        let mut s = StreamMerger::new(1000);
        let mut held_at = Vec::new();
        for i in 0..40_000u32 {
            let u = Uuid::parse_str(&uuid_n(i)).unwrap();
            s.push_per_flight("k", u, conform(&row(&uuid_n(i), "UAL123")).unwrap()).unwrap();
            if i == 9_999 || i == 39_999 {
                held_at.push(s.memory_bytes());
            }
        }
        assert!(s.output_bytes() > 0, "row groups are flushed as they fill");
        assert!(
            held_at[1] < 2 * held_at[0].max(64 * 1024) && held_at[1] < 4 << 20,
            "held bytes after 10,000 and 40,000 files: {held_at:?}"
        );
        let out = s.finish().unwrap();
        assert_eq!(out.rows, 40_000);
    }
}
