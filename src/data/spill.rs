//! Sorted sets of uuids (or of a uuid and numbers: [`Record`]) that spill past a memory limit to
//! anonymous files in `TMPDIR` (on Lambda `/tmp`), gone when the set is dropped or the process
//! dies, read back with `pread` (no mapping: nothing counts against `ulimit -v`).
//!
//! ```
//! use archive_compaction::data::spill::{SpillSettings, UuidSetBuilder};
//! let settings = SpillSettings { limit: 2 };
//! let mut b = UuidSetBuilder::new(settings);
//! for n in [5u128, 1, 3, 1, 4] {
//!     b.push(uuid::Uuid::from_u128(n)).unwrap();
//! }
//! let set = b.finish().unwrap();
//! assert!(set.spilled());
//! assert_eq!(set.len(), 4);
//! let all: Vec<u128> = set.iter().map(|u| u.unwrap().as_u128()).collect();
//! assert_eq!(all, [1, 3, 4, 5]);
//! assert!(set.contains(&uuid::Uuid::from_u128(4)).unwrap());
//! assert!(!set.contains(&uuid::Uuid::from_u128(2)).unwrap());
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use uuid::Uuid;

use crate::infra::error::{Error, Result};

/// What a [`SortedSet`] holds: a fixed-size record whose bytes, compared
/// as bytes, are in its order (so runs on disk sort like the values).
pub trait Record: Copy + Ord + Default + Send + Sync + std::fmt::Debug + 'static {
    /// Its size on disk, in bytes.
    const SIZE: usize;
    /// Its bytes (`SIZE` of them) appended to `out`.
    fn put(&self, out: &mut Vec<u8>);
    /// The record of `b` (`SIZE` bytes).
    fn get(b: &[u8]) -> Self;
}

impl Record for Uuid {
    const SIZE: usize = 16;
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
    fn get(b: &[u8]) -> Uuid {
        Uuid::from_slice(&b[..16]).unwrap_or_default()
    }
}

impl Record for (Uuid, u32) {
    const SIZE: usize = 20;
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.0.as_bytes());
        out.extend_from_slice(&self.1.to_be_bytes());
    }
    fn get(b: &[u8]) -> (Uuid, u32) {
        let n = u32::from_be_bytes([b[16], b[17], b[18], b[19]]);
        (Uuid::get(b), n)
    }
}

impl Record for (Uuid, u32, u32) {
    const SIZE: usize = 24;
    fn put(&self, out: &mut Vec<u8>) {
        (self.0, self.1).put(out);
        out.extend_from_slice(&self.2.to_be_bytes());
    }
    fn get(b: &[u8]) -> (Uuid, u32, u32) {
        let (u, n) = <(Uuid, u32)>::get(b);
        (u, n, u32::from_be_bytes([b[20], b[21], b[22], b[23]]))
    }
}

/// What one run's reader holds while a set is iterated, in bytes.
const READ_BUFFER: usize = 64 * 1024;

/// The default of [`SpillSettings::limit`] (`FLIGHTS_IN_MEMORY`): 2^19 uuids, 8 MiB a set.
pub const DEFAULT_IN_MEMORY: usize = 1 << 19;

/// Past how many records a [`SortedSetBuilder`] spills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillSettings {
    /// The most records a set holds in memory (at least 1); past it, runs on disk.
    pub limit: usize,
}

impl Default for SpillSettings {
    fn default() -> SpillSettings {
        SpillSettings { limit: DEFAULT_IN_MEMORY }
    }
}

/// One sorted run on disk: records in order, each once.
#[derive(Debug)]
struct Run {
    file: File,
    len: u64,
}

impl Run {
    /// Whether `u` is in the run: a binary search, a `pread` a step.
    fn contains<T: Record>(&self, u: &T, dir: &std::path::Path) -> Result<bool> {
        let (mut lo, mut hi) = (0u64, self.len);
        let mut b = vec![0u8; T::SIZE];
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let at = mid * T::SIZE as u64;
            self.file.read_exact_at(&mut b, at).map_err(|e| spill_error(dir, e))?;
            match T::get(&b).cmp(u) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(true),
            }
        }
        Ok(false)
    }
}

/// What a date's sets may take on local disk, in bytes a flight (or index file)
/// past the in-memory limit: its flights (16 B), its per-flight files past the
/// listing window (16 B) and the parts' (flight, input) pairs (20 B).
pub(crate) const DISK_BYTES_PER_FLIGHT: u64 = 52;

/// Refuses a date of `uuids` flights (or index files, the more) whose sets would not fit the spill
/// directory's free space. Called after the date's listing, it spares the gate's and the parts'
/// sets failing part way (the need counts all).
///
/// Errors: [`Error::DiskTooSmall`] with the need and the free space; [`Error::Spill`] when the
/// directory cannot be read.
///
/// ```
/// use archive_compaction::data::spill::{check_room, SpillSettings};
/// let date = chrono::NaiveDate::from_ymd_opt(2026, 7, 18).unwrap();
/// let settings = SpillSettings { limit: 1_000 };
/// assert!(check_room(date, 1_000, settings).is_ok(), "held in memory");
/// assert!(check_room(date, 2_000, settings).is_ok());
/// let e = check_room(date, u64::MAX / 64, settings).unwrap_err().to_string();
/// assert!(e.contains("ephemeral storage") && e.contains("MB is free"), "{e}");
/// ```
pub fn check_room(date: chrono::NaiveDate, uuids: u64, settings: SpillSettings) -> Result<()> {
    if uuids <= settings.limit as u64 {
        return Ok(());
    }
    let dir = std::env::temp_dir();
    let vfs = rustix::fs::statvfs(&dir).map_err(|e| spill_error(&dir, e.into()))?;
    let free = vfs.f_bavail.saturating_mul(vfs.f_frsize);
    let needed = uuids.saturating_mul(DISK_BYTES_PER_FLIGHT);
    if needed <= free {
        return Ok(());
    }
    Err(Error::DiskTooSmall {
        date,
        dir: dir.display().to_string(),
        needed_mb: needed.div_ceil(1 << 20),
        free_mb: free >> 20,
    })
}

fn spill_error(dir: &std::path::Path, source: std::io::Error) -> Error {
    Error::Spill { dir: dir.display().to_string(), source }
}

/// A sorted set of records, each once: in memory, or runs on disk. Cloning shares the runs.
#[derive(Debug, Clone, Default)]
pub struct SortedSet<T: Record> {
    memory: Vec<T>,
    runs: Arc<Vec<Run>>,
    dir: PathBuf,
    /// Distinct records (the runs' together).
    len: u64,
}

/// A set of uuids (a date's flights, the gate's sets).
pub type UuidSet = SortedSet<Uuid>;

/// The builder of a [`UuidSet`].
pub type UuidSetBuilder = SortedSetBuilder<Uuid>;

impl<T: Record> PartialEq for SortedSet<T> {
    /// Same records, in memory or spilled; a set that cannot be read back equals nothing.
    fn eq(&self, other: &SortedSet<T>) -> bool {
        self.len == other.len
            && self
                .iter()
                .zip(other.iter())
                .all(|(a, b)| matches!((a, b), (Ok(a), Ok(b)) if a == b))
    }
}

impl<T: Record> SortedSet<T> {
    /// How many records.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the set is on disk (more than [`SpillSettings::limit`] were pushed).
    pub fn spilled(&self) -> bool {
        !self.runs.is_empty()
    }

    /// How many runs (open files) it is on disk: 0 in memory.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The bytes its runs take on disk (0 in memory).
    pub fn disk_bytes(&self) -> u64 {
        self.runs.iter().map(|r| r.len * T::SIZE as u64).sum()
    }

    /// Whether `u` is in the set. Errors: [`Error::Spill`] when a run cannot be read back.
    pub fn contains(&self, u: &T) -> Result<bool> {
        if !self.spilled() {
            return Ok(self.memory.binary_search(u).is_ok());
        }
        // Runs past the first that holds it are not read.
        self.runs.iter().try_fold(false, |found, run| Ok(found || run.contains(u, &self.dir)?))
    }

    /// The records in order, each once; an unreadable run ends it with [`Error::Spill`].
    pub fn iter(&self) -> Iter<'_, T> {
        let mut it = Iter {
            memory: self.memory.iter(),
            readers: self
                .runs
                .iter()
                .map(|run| RunReader { run, next: 0, buf: Vec::new(), at: 0 })
                .collect(),
            heads: BinaryHeap::new(),
            last: None,
            dir: &self.dir,
            failed: None,
        };
        it.failed = (0..it.readers.len()).try_for_each(|i| it.refill(i)).err();
        it
    }

    /// The records `keep` keeps, as a set of the same settings (in place in
    /// memory). Errors: [`Error::Spill`] reading this set or writing the new one.
    pub fn retain(
        self,
        settings: SpillSettings,
        mut keep: impl FnMut(&T) -> bool,
    ) -> Result<SortedSet<T>> {
        if !self.spilled() {
            let mut set = self;
            set.memory.retain(|u| keep(u));
            set.len = set.memory.len() as u64;
            return Ok(set);
        }
        let mut b = SortedSetBuilder::new(settings);
        for u in self.iter() {
            let u = u?;
            if keep(&u) {
                b.push(u)?;
            }
        }
        b.finish()
    }

    /// This set without the records of `other` (in order), in one merge pass, spilling past
    /// `settings`' limit. Errors: [`Error::Spill`] reading or writing a set; `other`'s first.
    pub fn difference(
        &self,
        other: impl Iterator<Item = Result<T>>,
        settings: SpillSettings,
    ) -> Result<SortedSet<T>> {
        let mut out = SortedSetBuilder::new(settings);
        let mut others = other.peekable();
        for u in self.iter() {
            let u = u?;
            let taken = loop {
                match others.peek() {
                    Some(Ok(o)) if *o < u => _ = others.next(),
                    Some(Ok(o)) => break *o == u,
                    Some(Err(_)) => {
                        return Err(others.next().and_then(Result::err).expect("an error"));
                    }
                    None => break false,
                }
            };
            if !taken {
                out.push(u)?;
            }
        }
        out.finish()
    }

    /// The first `n` records (a report's examples); [`Error::Spill`] when a run cannot be read.
    pub fn first(&self, n: usize) -> Result<Vec<T>> {
        self.iter().take(n).collect()
    }
}

impl<T: Record> From<Vec<T>> for SortedSet<T> {
    /// An in-memory set of `uuids` (sorted and deduplicated here).
    fn from(mut uuids: Vec<T>) -> SortedSet<T> {
        uuids.sort_unstable();
        uuids.dedup();
        uuids.shrink_to_fit();
        SortedSet { len: uuids.len() as u64, memory: uuids, ..SortedSet::default() }
    }
}

impl<T: Record> FromIterator<T> for SortedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(uuids: I) -> SortedSet<T> {
        SortedSet::from(uuids.into_iter().collect::<Vec<_>>())
    }
}

/// Writes `records` (in order, each once) as a run in `dir`; errors:
/// [`Error::Spill`], or a record's.
fn write_run<T: Record>(
    dir: &std::path::Path,
    records: impl Iterator<Item = Result<T>>,
) -> Result<Run> {
    let file = tempfile::tempfile_in(dir).map_err(|e| spill_error(dir, e))?;
    let mut w = BufWriter::with_capacity(READ_BUFFER, file);
    let (mut bytes, mut len) = (Vec::with_capacity(T::SIZE), 0u64);
    for r in records {
        bytes.clear();
        r?.put(&mut bytes);
        w.write_all(&bytes).map_err(|e| spill_error(dir, e))?;
        len += 1;
    }
    let file = w.into_inner().map_err(|e| spill_error(dir, e.into_error()))?;
    Ok(Run { file, len })
}

/// A run read in order, [`READ_BUFFER`] bytes at a time.
struct RunReader<'a> {
    run: &'a Run,
    /// The next record to read from the file.
    next: u64,
    buf: Vec<u8>,
    /// The next record in `buf`, in bytes.
    at: usize,
}

impl RunReader<'_> {
    fn pop<T: Record>(&mut self, dir: &std::path::Path) -> Result<Option<T>> {
        if self.at >= self.buf.len() {
            let left = self.run.len - self.next;
            if left == 0 {
                return Ok(None);
            }
            let n = left.min((READ_BUFFER / T::SIZE) as u64);
            self.buf.resize(n as usize * T::SIZE, 0);
            (self.run.file.read_exact_at(&mut self.buf, self.next * T::SIZE as u64))
                .map_err(|e| spill_error(dir, e))?;
            self.next += n;
            self.at = 0;
        }
        let r = T::get(&self.buf[self.at..self.at + T::SIZE]);
        self.at += T::SIZE;
        Ok(Some(r))
    }
}

/// The records of a [`SortedSet`] in order, each once ([`SortedSet::iter`]).
pub struct Iter<'a, T: Record> {
    memory: std::slice::Iter<'a, T>,
    readers: Vec<RunReader<'a>>,
    /// Each run's next record, smallest first.
    heads: BinaryHeap<Reverse<(T, usize)>>,
    /// The last record given (one in two runs is given once).
    last: Option<T>,
    dir: &'a std::path::Path,
    failed: Option<Error>,
}

impl<T: Record> Iter<'_, T> {
    fn refill(&mut self, i: usize) -> Result<()> {
        if let Some(u) = self.readers[i].pop(self.dir)? {
            self.heads.push(Reverse((u, i)));
        }
        Ok(())
    }
}

impl<T: Record> Iterator for Iter<'_, T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        if let Some(e) = self.failed.take() {
            self.heads.clear();
            return Some(Err(e));
        }
        if self.readers.is_empty() {
            return self.memory.next().copied().map(Ok);
        }
        loop {
            let Reverse((u, i)) = self.heads.pop()?;
            if let Err(e) = self.refill(i) {
                self.heads.clear();
                return Some(Err(e));
            }
            if self.last != Some(u) {
                self.last = Some(u);
                return Some(Ok(u));
            }
        }
    }
}

/// Builds a [`SortedSet`] from records in any order (the module docs).
#[derive(Debug)]
pub struct SortedSetBuilder<T: Record> {
    settings: SpillSettings,
    dir: PathBuf,
    buf: Vec<T>,
    runs: Vec<Run>,
    /// Each run's level: 0 for a buffer's, one more for a merge ([`Self::merge_tail`]).
    levels: Vec<u32>,
}

/// How many runs of one level a builder merges into one of the next: its open
/// files (one a run; the process may open 1,024 on Lambda) grow with the
/// logarithm of `n / limit`, and each record is rewritten once a level.
pub const FAN_IN: usize = 16;

impl<T: Record> SortedSetBuilder<T> {
    /// An empty builder, spilling to the system's temporary directory.
    pub fn new(settings: SpillSettings) -> SortedSetBuilder<T> {
        SortedSetBuilder::in_dir(settings, std::env::temp_dir())
    }

    /// An empty builder, spilling to `dir`.
    fn in_dir(settings: SpillSettings, dir: PathBuf) -> SortedSetBuilder<T> {
        SortedSetBuilder {
            settings: SpillSettings { limit: settings.limit.max(1) },
            dir,
            buf: Vec::new(),
            runs: Vec::new(),
            levels: Vec::new(),
        }
    }

    /// Adds `u` (a duplicate is kept once); [`Error::Spill`] when a full buffer's run cannot be
    /// written.
    pub fn push(&mut self, u: T) -> Result<()> {
        if self.buf.len() >= self.settings.limit {
            self.spill()?;
        }
        self.buf.push(u);
        Ok(())
    }

    fn spill(&mut self) -> Result<()> {
        self.buf.sort_unstable();
        self.buf.dedup();
        let run = write_run(&self.dir, self.buf.iter().map(|u| Ok(*u)))?;
        self.runs.push(run);
        self.levels.push(0);
        self.buf.clear();
        self.merge_tail()
    }

    /// While the last [`FAN_IN`] runs are of one level, merges them into
    /// one run of the next (each record once; their files closed).
    fn merge_tail(&mut self) -> Result<()> {
        loop {
            let n = self.runs.len();
            let Some(tail) = n.checked_sub(FAN_IN) else {
                return Ok(());
            };
            let level = self.levels[n - 1];
            if self.levels[tail..].iter().any(|l| *l != level) {
                return Ok(());
            }
            let runs = Arc::new(self.runs.split_off(tail));
            let merging = SortedSet::<T> { runs, dir: self.dir.clone(), ..SortedSet::default() };
            self.levels.truncate(tail);
            let run = write_run(&self.dir, merging.iter())?;
            self.runs.push(run);
            self.levels.push(level + 1);
        }
    }

    /// The set: in memory when no run was written, else its runs, counted once
    /// through. Errors: [`Error::Spill`] writing the last run or reading the runs.
    pub fn finish(mut self) -> Result<SortedSet<T>> {
        if self.runs.is_empty() {
            return Ok(SortedSet { dir: self.dir, ..SortedSet::from(self.buf) });
        }
        if !self.buf.is_empty() {
            self.spill()?;
        }
        // Freed before the runs are counted through.
        drop(std::mem::take(&mut self.buf));
        let mut set =
            SortedSet { runs: Arc::new(self.runs), dir: self.dir, ..SortedSet::default() };
        set.len = set.iter().try_fold(0, |n, u| u.map(|_| n + 1))?;
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test-only: a set literal.
    impl<T: Record, const N: usize> From<[T; N]> for SortedSet<T> {
        fn from(uuids: [T; N]) -> SortedSet<T> {
            SortedSet::from(uuids.to_vec())
        }
    }

    fn u(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn settings(limit: usize) -> SpillSettings {
        SpillSettings { limit }
    }

    fn build(limit: usize, uuids: impl IntoIterator<Item = u128>) -> UuidSet {
        let mut b = UuidSetBuilder::new(settings(limit));
        for n in uuids {
            b.push(u(n)).unwrap();
        }
        b.finish().unwrap()
    }

    fn all(set: &UuidSet) -> Vec<u128> {
        set.iter().map(|u| u.unwrap().as_u128()).collect()
    }

    #[test]
    fn a_set_is_the_same_sorted_distinct_uuids_in_memory_or_in_runs() {
        // A scrambled order with repeats, within and across runs.
        let input: Vec<u128> = (0..1000u128).map(|i| (i * 7919) % 613).collect();
        let mut want: Vec<u128> = input.clone();
        want.sort_unstable();
        want.dedup();
        for limit in [1, 2, 3, 64, 613, 1000, 5000] {
            let set = build(limit, input.iter().copied());
            assert_eq!(set.spilled(), limit < 1000, "limit {limit}");
            assert_eq!(set.len(), want.len() as u64, "limit {limit}");
            assert_eq!(all(&set), want, "limit {limit}");
            for n in [0u128, 1, 300, 612, 613, 10_000] {
                assert_eq!(
                    set.contains(&u(n)).unwrap(),
                    want.binary_search(&n).is_ok(),
                    "limit {limit}, {n}"
                );
            }
            let same: UuidSet = want.iter().map(|n| u(*n)).collect();
            assert_eq!(set, same, "limit {limit}");
            assert_ne!(set, want.iter().skip(1).map(|n| u(*n)).collect::<UuidSet>());
            assert_ne!(set, want.iter().map(|n| u(*n + 1)).collect::<UuidSet>());
            // On disk: a run's 16 B a uuid, each run's uuids once.
            match set.spilled() {
                true => assert!(set.disk_bytes() >= 16 * set.len() && set.disk_bytes() % 16 == 0),
                false => assert_eq!(set.disk_bytes(), 0),
            }
        }
    }

    #[test]
    fn a_run_longer_than_the_read_buffer_is_read_across_refills() {
        let n = (READ_BUFFER / 16) as u128 * 2 + 5;
        // Runs of 5,000 uuids: longer than one read of the buffer (4,096).
        let set = build(5000, (0..n).rev());
        assert!(set.spilled());
        // Distinct uuids in every run: exactly 16 B each on disk.
        assert_eq!(set.disk_bytes(), 16 * n as u64);
        assert_eq!(all(&set), (0..n).collect::<Vec<_>>());
        assert_eq!(set.first(3).unwrap(), [u(0), u(1), u(2)]);
    }

    #[test]
    fn retain_keeps_what_its_predicate_keeps_in_memory_or_on_disk() {
        for limit in [2, 100] {
            let set = build(limit, [9, 1, 4, 7, 2]);
            let odd = set.retain(settings(limit), |u| u.as_u128() % 2 == 1).unwrap();
            assert_eq!((all(&odd), odd.len()), (vec![1, 7, 9], 3), "limit {limit}");
        }
        assert!(build(2, []).is_empty());
    }

    /// A set of many runs is merged as it grows, [`FAN_IN`] runs of a
    /// level into one of the next: its open files grow with the logarithm
    /// of its size (10,000 runs of one uuid here, at most 15 a level), and
    /// what it holds is the same.
    #[test]
    fn runs_are_merged_a_level_at_a_time_so_open_files_stay_few() {
        let n = 5_000u128;
        // Each uuid twice, far apart: the copies meet only in merges.
        let set = build(1, (0..n).rev().chain(0..n));
        assert_eq!(set.len(), n as u64);
        // 10,000 runs of level 0, 0x2710 in base 16: 2 runs of level 3,
        // 7 of level 2 and 1 of level 1 are left.
        assert_eq!(set.runs(), 2 + 7 + 1);
        // 255 runs, 0xFF: 15 of level 1 and 15 of level 0 (a merge that
        // did not raise the level would keep merging into one run).
        assert_eq!(build(1, 0..255).runs(), 15 + 15);
        assert_eq!(all(&set), (0..n).collect::<Vec<_>>());
        assert!(set.contains(&u(1_234)).unwrap() && !set.contains(&u(n)).unwrap());
        assert_eq!(set.disk_bytes() % 16, 0);
    }

    /// Pairs of a uuid and a number sort by uuid, then number, on disk as
    /// in memory.
    #[test]
    fn pairs_sort_by_uuid_then_number_in_runs() {
        let pairs = [(3u128, 1u32), (1, 7), (3, 0), (1, 7), (2, u32::MAX), (1, 2)];
        let mut want: Vec<(Uuid, u32)> = pairs.iter().map(|(a, b)| (u(*a), *b)).collect();
        want.sort_unstable();
        want.dedup();
        for limit in [1, 2, 100] {
            let mut b = SortedSetBuilder::new(settings(limit));
            for (a, n) in pairs {
                b.push((u(a), n)).unwrap();
            }
            let set = b.finish().unwrap();
            let got: Vec<(Uuid, u32)> = set.iter().map(Result::unwrap).collect();
            assert_eq!((got, set.spilled()), (want.clone(), limit < 6), "limit {limit}");
            assert!(set.contains(&(u(2), u32::MAX)).unwrap() && !set.contains(&(u(2), 0)).unwrap());
        }
    }

    /// Triples sort by uuid, then each number, on disk as in memory.
    #[test]
    fn triples_sort_by_uuid_then_numbers_in_runs() {
        let triples =
            [(3u128, 1u32, 0u32), (1, 7, 2), (1, 7, 1), (3, 1, 0), (2, 0, u32::MAX), (1, 2, 9)];
        let mut want: Vec<(Uuid, u32, u32)> =
            triples.iter().map(|(a, b, c)| (u(*a), *b, *c)).collect();
        want.sort_unstable();
        want.dedup();
        for limit in [1, 2, 100] {
            let mut b = SortedSetBuilder::new(settings(limit));
            for (a, n, m) in triples {
                b.push((u(a), n, m)).unwrap();
            }
            let set = b.finish().unwrap();
            let got: Vec<(Uuid, u32, u32)> = set.iter().map(Result::unwrap).collect();
            assert_eq!((got, set.spilled()), (want.clone(), limit < 6), "limit {limit}");
        }
    }

    /// A difference taken in one merge pass equals the naive one, in
    /// memory and on disk, either set the larger.
    #[test]
    fn a_difference_equals_the_naive_one_in_memory_and_on_disk() {
        let a: Vec<u128> = (0..300).map(|i| i * 7 % 401).collect();
        let b: Vec<u128> = (0..200).map(|i| i * 11 % 389).collect();
        let want: std::collections::BTreeSet<u128> =
            (a.iter().copied()).filter(|x| !b.contains(x)).collect();
        for limit in [1, 16, 1_000] {
            let set = |v: &[u128]| {
                let mut bld = UuidSetBuilder::new(settings(limit));
                v.iter().for_each(|&n| bld.push(u(n)).unwrap());
                bld.finish().unwrap()
            };
            let (sa, sb) = (set(&a), set(&b));
            let got = sa.difference(sb.iter(), settings(limit)).unwrap();
            let got: Vec<Uuid> = got.iter().map(Result::unwrap).collect();
            assert_eq!(got, want.iter().map(|&n| u(n)).collect::<Vec<_>>(), "limit {limit}");
            let none = sb.difference(sb.iter(), settings(limit)).unwrap();
            assert!(none.is_empty(), "limit {limit}");
            assert_eq!(
                sb.difference(UuidSet::default().iter(), settings(limit)).unwrap().len(),
                sb.len()
            );
        }
    }

    #[test]
    fn a_missing_directory_is_a_spill_error_naming_it() {
        let mut b = UuidSetBuilder::in_dir(settings(1), "/nonexistent/spill".into());
        b.push(u(1)).unwrap();
        let e = b.push(u(2)).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/spill"), "{e}");
        assert!(e.contains("FLIGHTS_IN_MEMORY") && e.contains("EphemeralStorage"), "{e}");
    }
}
