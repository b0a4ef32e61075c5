//! The held merge ([`Merger`]): the fallback for days the streaming merge cannot take.

use super::*;

/// Where an input comes from: its part of the dedup rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// A `compacted-*.parquet` file, ours or the Python job's.
    Compacted,
    /// Another multi-row index file (exports, a migration's): ranked as compacted.
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

/// Rows per coalesced chunk held by a [`Merger`], so a day costs its rows'
/// bytes, not a set of Arrow arrays per file.
pub const COALESCE_ROWS: usize = 4096;

/// `b` in the union `schema` (target columns, then the day's extra ones), by name without case:
/// extra columns converted ([`super::widen::convert`]), missing ones null.
///
/// Errors: [`MergeError::ExtraColumn`], [`MergeError::Arrow`].
pub(super) fn to_union_schema(
    b: &RecordBatch,
    schema: &SchemaRef,
) -> Result<RecordBatch, MergeError> {
    if b.schema() == *schema {
        return Ok(b.clone());
    }
    let bs = b.schema();
    let target_len = target_schema().fields().len();
    let cols = (schema.fields().iter().enumerate())
        .map(|(i, f)| {
            let found = if i < target_len {
                bs.index_of(f.name()).ok()
            } else {
                (bs.fields().iter().enumerate().skip(target_len))
                    .find(|(_, g)| super::same_column(g.name(), f.name()))
                    .map(|(ix, _)| ix)
            };
            match found {
                Some(ix) => super::widen::convert(b.column(ix), f.data_type())
                    .map_err(|reason| MergeError::ExtraColumn { column: f.name().clone(), reason }),
                None => Ok(new_null_array(f.data_type(), b.num_rows())),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema.clone(), cols)?)
}

/// Which input wins between two rows of one flight: per-flight over
/// compacted, then the later LastModified; at equal rank the later input.
pub(super) type Rank = (u8, DateTime<Utc>);

pub(super) fn rank(source: Source, last_modified: DateTime<Utc>) -> Rank {
    match source {
        Source::Compacted | Source::MultiRow => (0, last_modified),
        Source::PerFlight(_) => (1, last_modified),
    }
}

/// The held merge: inputs pushed in plan (key) order, their rows copied into chunks of
/// [`COALESCE_ROWS`]; one small entry per flight keeps the dedup.
///
/// ```
/// use archive_compaction::data::merge::{Merger, MergeInput, Source, target_schema, conform};
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
    extras: ExtraColumns,
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
            extras: ExtraColumns::default(),
            coalescer: BatchCoalescer::new(schema.clone(), COALESCE_ROWS),
            schema,
            chunks: Vec::new(),
            rows: 0,
            winners: HashMap::new(),
            anonymous: Vec::new(),
        }
    }

    /// Adds one input's rows (in plan order; at equal rank the later wins). A new
    /// or widened extra column converts the rows held so far exactly.
    ///
    /// Errors: [`MergeError::Input`], an Arrow error.
    pub fn push(&mut self, input: MergeInput) -> Result<(), MergeError> {
        let b = input.decoded.batch;
        let next = self.extras.with(&b).map_err(MergeError::Input)?;
        if self.extras.schema_differs(&next) {
            self.flush_chunk()?;
            let schema = next.schema();
            self.chunks = (self.chunks.iter())
                .map(|c| to_union_schema(c, &schema))
                .collect::<Result<_, _>>()?;
            self.schema = schema;
            self.coalescer = BatchCoalescer::new(self.schema.clone(), COALESCE_ROWS);
        }
        self.extras = next;
        let batch = to_union_schema(&b, &self.schema)?;

        let r = rank(input.source, input.last_modified);
        let single = match input.source {
            Source::PerFlight(u) if batch.num_rows() == 1 => Some(u),
            _ => None,
        };
        for (row, id) in row_flights(&batch).expect("s3_key").enumerate() {
            let at = self.rows + row;
            match id.or(single) {
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
        self.coalescer.push_batch(batch)?;
        self.chunks.extend(std::iter::from_fn(|| self.coalescer.next_completed_batch()));
        Ok(())
    }

    fn flush_chunk(&mut self) -> Result<(), MergeError> {
        self.coalescer.finish_buffered_batch()?;
        self.chunks.extend(std::iter::from_fn(|| self.coalescer.next_completed_batch()));
        Ok(())
    }

    /// The kept rows in output order (by flight uuid, then rows without one in input order).
    ///
    /// Errors: an Arrow error while completing the last chunk.
    pub fn finish(mut self) -> Result<MergedRows, MergeError> {
        self.flush_chunk()?;
        // Chunks made before an extra column appeared lack it: pad with nulls.
        let chunks = (self.chunks.iter()).map(|c| to_union_schema(c, &self.schema));
        let chunks = chunks.collect::<Result<Vec<_>, MergeError>>()?;
        // Each chunk's first row.
        let starts: Vec<usize> =
            (chunks.iter()).scan(0, |n, c| Some(std::mem::replace(n, *n + c.num_rows()))).collect();
        let mut order: Vec<(Uuid, usize)> =
            self.winners.into_iter().map(|(u, (_, at))| (u, at)).collect();
        order.sort_unstable_by_key(|(u, _)| *u);
        let order: Vec<usize> = order.into_iter().map(|(_, at)| at).chain(self.anonymous).collect();
        Ok(MergedRows {
            duplicates_removed: (self.rows - order.len()) as u64,
            schema: self.schema,
            chunks,
            starts,
            order,
            extra_columns: self.extras.names(),
        })
    }
}

/// The result of a [`Merger`]: the coalesced rows and the order of the kept ones.
#[derive(Debug, Clone)]
pub struct MergedRows {
    schema: SchemaRef,
    chunks: Vec<RecordBatch>,
    starts: Vec<usize>,
    order: Vec<usize>,
    duplicates_removed: u64,
    extra_columns: Vec<String>,
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

    /// The output rows, in order, as batches of at most `batch_rows` rows.
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

    /// Encodes the output as one Parquet file ([`encode()`]'s settings); `None` when there are no
    /// rows. Memory besides this value: the output bytes and one row group's encoded pages.
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

#[cfg(test)]
mod tests {
    use super::*;

    impl Merger {
        /// Rows pushed so far (duplicates included).
        pub(crate) fn rows_pushed(&self) -> usize {
            self.rows
        }
    }

    impl MergedRows {
        /// Approximate heap bytes held (Arrow buffers plus bookkeeping).
        pub(crate) fn memory_bytes(&self) -> usize {
            self.chunks.iter().map(RecordBatch::get_array_memory_size).sum::<usize>()
                + self.order.capacity() * size_of::<usize>()
        }
    }
}
