//! How big a date's parts, listing window and uuid sets may be in the
//! memory a run is told: the estimate of a date's peak memory
//! ([`peak_memory_mb`]) and the largest sizes that keep it within 90% of
//! `MEMORY_LIMIT_MB` ([`MemoryFit`]). Pure: the run, the dry run and
//! `status` size by the same rule.

use chrono::NaiveDate;

use crate::infra::error::{Error, Result};

/// How many parts (`PART_FILES` each) of per-flight files one pass of the
/// run holds the listing of ([`crate::protocol::day::Day::list_window`]); a date with more is
/// compacted window by window, each pass re-listing what is left.
pub const WINDOW_PARTS: u64 = 4;

/// The smallest part worth a commit, in weight ([`crate::protocol::plan::input_weight`]):
/// below it a part's fixed requests (manifest, output PUT, HEAD, re-list,
/// lease) cost more than its files. A date is refused for its memory only
/// when a part this small (or the whole date, if smaller) does not fit, and
/// a part is started on the time left only when it fits this much.
pub const MIN_PART_FILES: u64 = 1_000;

/// The process's peak memory before any date (the runtime, the SDK, the
/// lease and recovery), in MB: docs/performance.md's job rows (71 MB at
/// 10,000 files, 131 MB at 50,000, peak RSS) less 1.5 KB a file, rounded up.
pub const BASE_MEMORY_MB: u64 = 60;

/// What one index file of a part adds to the peak while the part is
/// committed, in bytes: its plan and manifest entries, its flight in the
/// proof, its row in the merge and its entry in the re-list
/// (docs/performance.md: 60 MB more from 10,000 to 50,000 files, 1.5 KB a
/// file; 1.15 KB a file from 100,000 to 200,000).
pub const MEMORY_PER_FILE_BYTES: u64 = 1_536;

/// What one index file of a date's listing window ([`crate::protocol::day::Day::list_window`])
/// adds to the peak for as long as the window is worked on, whichever part
/// it is in, in bytes: its planned input (key,
/// ETag, size, ~200 B), its flight's uuid (16 B), and the listings' share
/// (docs/performance.md, "A day in parts", in parts of 50,000: 146 MB at
/// 100,000 files, 189 MB at 200,000, ~0.44 KB a file, before the listing
/// was held once; 294 MB at 500,000 after, ~0.33 KB a file over one
/// part's), rounded up: an estimate above what was measured.
pub const DAY_BYTES_PER_FILE: u64 = 512;

/// The uuid sets a date holds at once, each at most `FLIGHTS_IN_MEMORY`
/// uuids in memory ([`crate::data::spill`]): its flights, the flights of its
/// per-flight files past the listing window, and, during the parity gate,
/// its flights named by no file and a batch of flights found in its
/// multi-row inputs (or, while a pass is cut into parts, the (flight,
/// input) pairs of [`crate::protocol::partition::parts_of`], 20 B each: less).
pub const SPILL_SETS: u64 = 4;

/// The estimated peak memory of a run compacting a date of `files` index
/// files and `flights` flight objects in parts of at most `part_files`
/// (`PART_FILES`), its uuid sets spilling past `in_memory` uuids
/// (`FLIGHTS_IN_MEMORY`), in MB:
/// [`BASE_MEMORY_MB`], [`DAY_BYTES_PER_FILE`] for every file of the
/// listing window ([`WINDOW_PARTS`] parts), [`MEMORY_PER_FILE_BYTES`] for
/// those of one part, and 16 B for each uuid of [`SPILL_SETS`] sets of at
/// most `in_memory` uuids (the more of `files` and `flights`). Nothing grows with the files past the window
/// (their flights' uuids go to disk past `in_memory`), so the estimate,
/// like the peak, stops growing there, whatever the date's size.
///
/// ```
/// use archive_compaction::protocol::sizing::peak_memory_mb;
/// assert_eq!(peak_memory_mb(0, 0, 50_000, 524_288), 60);
/// assert_eq!(peak_memory_mb(200_000, 200_000, 50_000, 524_288), 244);
/// assert_eq!(peak_memory_mb(500_000, 500_000, 50_000, 524_288), 262);
/// // Past the window and FLIGHTS_IN_MEMORY, nothing more.
/// assert_eq!(peak_memory_mb(1_000_000, 1_000_000, 50_000, 524_288), 263);
/// assert_eq!(peak_memory_mb(100_000_000, 100_000_000, 50_000, 524_288), 263);
/// // A date of many flights and few index files: its flights' set counts.
/// assert_eq!(peak_memory_mb(10, 1_000_000, 50_000, 524_288), 93);
/// assert_eq!(peak_memory_mb(200_000, 200_000, 200_000, 524_288), 463);
/// ```
pub fn peak_memory_mb(files: u64, flights: u64, part_files: u64, in_memory: u64) -> u64 {
    let window = part_files.saturating_mul(WINDOW_PARTS);
    let bytes = files.min(window) * DAY_BYTES_PER_FILE
        + files.min(part_files) * MEMORY_PER_FILE_BYTES
        + files.max(flights).min(in_memory) * 16 * SPILL_SETS;
    BASE_MEMORY_MB + bytes.div_ceil(1 << 20)
}

/// The fewest uuids a set holds in memory however tight the memory:
/// 64 KiB a set.
pub const MIN_IN_MEMORY: u64 = 4_096;

/// How big a date's parts and uuid sets may be in the memory a run is told
/// (`MEMORY_LIMIT_MB`, else Lambda's `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`):
/// the largest that keep [`peak_memory_mb`] within 90% of it, below the
/// ceilings an operator may set (`PART_FILES`, `FLIGHTS_IN_MEMORY`). The
/// one sizing rule of the run, the dry run and `status`.
///
/// ```
/// use archive_compaction::protocol::sizing::MemoryFit;
/// // 512 MB: the ceilings themselves.
/// let fit = MemoryFit::new(Some(512), 50_000, 524_288);
/// assert_eq!((fit.in_memory(), fit.window()), (524_288, 200_000));
/// // 128 MB: smaller sets, and parts that fit beside them.
/// let fit = MemoryFit::new(Some(128), 50_000, 524_288);
/// assert_eq!(fit.in_memory(), 225_280);
/// let part = fit.largest_part(30_000, 30_000);
/// assert!((20_000..30_000).contains(&part), "{part}");
/// assert!(archive_compaction::protocol::sizing::peak_memory_mb(30_000, 30_000, part, fit.in_memory()) * 10 <= 128 * 9);
/// // No limit: the ceiling.
/// assert_eq!(MemoryFit::new(None, 50_000, 524_288).largest_part(u64::MAX, 0), 50_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryFit {
    limit_mb: Option<u64>,
    part_files: u64,
    in_memory: u64,
}

impl MemoryFit {
    /// The fit in `limit_mb` (`None`: no limit) below the ceilings
    /// `part_files` (`PART_FILES`) and `in_memory` (`FLIGHTS_IN_MEMORY`).
    /// The uuid sets take at most a quarter of what the limit leaves above
    /// [`BASE_MEMORY_MB`], and never fewer than [`MIN_IN_MEMORY`] uuids.
    pub fn new(limit_mb: Option<u64>, part_files: u64, in_memory: u64) -> MemoryFit {
        let ceiling = in_memory.max(1);
        let in_memory = match limit_mb {
            Some(mb) => {
                let free = (mb * 9 / 10).saturating_sub(BASE_MEMORY_MB) << 20;
                let sized = free / 4 / (16 * SPILL_SETS);
                ceiling.min(sized.max(MIN_IN_MEMORY))
            }
            None => ceiling,
        };
        MemoryFit {
            limit_mb,
            part_files: part_files.max(1),
            in_memory,
        }
    }

    /// The fit of `config`'s settings.
    pub fn of(config: &crate::data::config::Config) -> MemoryFit {
        MemoryFit::new(
            config.memory_limit_mb,
            config.part_files,
            config.spill.limit as u64,
        )
    }

    /// How many uuids each of a date's sets holds in memory before it
    /// spills to disk.
    pub fn in_memory(&self) -> u64 {
        self.in_memory
    }

    fn fits(&self, mb: u64) -> bool {
        self.limit_mb.is_none_or(|limit| mb * 10 <= limit * 9)
    }

    /// The largest part weight, at most `PART_FILES`, whose date of `files`
    /// index files and `flights` flights fits; 0 when not even 1 does.
    pub fn largest_part(&self, files: u64, flights: u64) -> u64 {
        let fits = |p| self.fits(peak_memory_mb(files, flights, p, self.in_memory));
        let (mut lo, mut hi) = (0, self.part_files);
        // The estimate grows with the part: the largest that fits.
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) { lo = mid } else { hi = mid - 1 }
        }
        lo
    }

    /// How many per-flight files a date's listing window holds
    /// ([`crate::protocol::day::Day::list_window`]), before the date's size is known:
    /// [`WINDOW_PARTS`] parts of a date of any size.
    pub fn window(&self) -> u64 {
        let smallest = MIN_PART_FILES.min(self.part_files);
        (self.largest_part(u64::MAX, u64::MAX).max(smallest)).saturating_mul(WINDOW_PARTS)
    }

    /// The part weight for `date`, of `files` index files and `flights`
    /// flights once listed: [`MemoryFit::largest_part`].
    ///
    /// # Errors
    /// [`Error::DayTooBig`] when not even a part of [`MIN_PART_FILES`]
    /// (or of the whole date, if smaller) fits, with the estimate and the
    /// memory that would do (rounded up to 64 MB, Lambda's MemorySize
    /// being any MB from 128).
    pub fn part_files(&self, date: NaiveDate, files: u64, flights: u64) -> Result<u64> {
        let part = self.largest_part(files, flights);
        let smallest = MIN_PART_FILES.min(files).min(self.part_files).max(1);
        let (Some(limit_mb), true) = (self.limit_mb, part < smallest) else {
            return Ok(part);
        };
        let needed_mb = peak_memory_mb(files, flights, smallest, self.in_memory);
        Err(Error::DayTooBig {
            date: date.to_string(),
            files,
            flights,
            part_files: smallest,
            needed_mb,
            limit_mb,
            suggest_mb: (needed_mb * 10).div_ceil(9).div_ceil(64) * 64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    /// The memory estimate, term by term, and the refusal over 90% of the
    /// limit (the doc tests say the same; the mutation runs' fast set
    /// does not run doc tests).
    #[test]
    fn the_memory_estimate_adds_its_terms_and_refuses_over_nine_tenths() {
        let mb = |bytes: u64| bytes.div_ceil(1 << 20);
        let sets = |uuids: u64| uuids * 16 * SPILL_SETS;
        assert_eq!(peak_memory_mb(0, 0, 50_000, 1000), BASE_MEMORY_MB);
        // Within the window: 512 B a file, one part's 1.5 KB a file, and
        // the uuid sets.
        assert_eq!(
            peak_memory_mb(40_000, 0, 50_000, 1 << 20),
            BASE_MEMORY_MB
                + mb(40_000 * (DAY_BYTES_PER_FILE + MEMORY_PER_FILE_BYTES) + sets(40_000))
        );
        assert_eq!(
            peak_memory_mb(150_000, 10, 50_000, 1000),
            BASE_MEMORY_MB
                + mb(150_000 * DAY_BYTES_PER_FILE + 50_000 * MEMORY_PER_FILE_BYTES + sets(1000))
        );
        // Past the window of 4 parts of 10,000 and the sets' limit: nothing
        // more, whatever the size.
        let past = BASE_MEMORY_MB
            + mb(40_000 * DAY_BYTES_PER_FILE + 10_000 * MEMORY_PER_FILE_BYTES + sets(100_000));
        for files in [140_000, 10_000_000, u64::MAX / 1024] {
            assert_eq!(
                peak_memory_mb(files, files, 10_000, 100_000),
                past,
                "{files}"
            );
        }
        let date = d("2026-07-20");
        let huge = u64::MAX / 1024;
        let fit512 = MemoryFit::new(Some(512), 50_000, 1 << 19);
        assert_eq!(fit512.part_files(date, huge, huge).unwrap(), 50_000);
        // Flights beyond the index files count in the sets' term only.
        assert_eq!(
            peak_memory_mb(10, 5_000, 50_000, 100_000),
            BASE_MEMORY_MB + mb(10 * (DAY_BYTES_PER_FILE + MEMORY_PER_FILE_BYTES) + sets(5_000))
        );
        // Sized, not refused: the largest part that fits, one more does not.
        let files = 300_000;
        let fit = MemoryFit::new(Some(256), files, 1000);
        assert_eq!(fit.in_memory(), 1000);
        let part = fit.part_files(date, files, 0).unwrap();
        assert!(
            peak_memory_mb(files, 0, part, 1000) * 10 <= 256 * 9,
            "{part}"
        );
        assert!(
            peak_memory_mb(files, 0, part + 1, 1000) * 10 > 256 * 9,
            "{part}"
        );
        assert_eq!(
            MemoryFit::new(None, files, 1000)
                .part_files(date, files, 0)
                .unwrap(),
            files
        );
        // Refused only when the smallest useful part does not fit.
        let needed = peak_memory_mb(files, 0, MIN_PART_FILES, 1000);
        let at = |limit: u64| MemoryFit::new(Some(limit), files, 1000).part_files(date, files, 0);
        assert!(at(needed * 10 / 9 + 1).is_ok());
        assert!(at(needed * 10 / 9 - 1).is_err());
        match at(needed) {
            Err(Error::DayTooBig {
                needed_mb,
                limit_mb,
                suggest_mb,
                part_files,
                ..
            }) => {
                assert_eq!(
                    (needed_mb, limit_mb, part_files),
                    (needed, needed, MIN_PART_FILES)
                );
                assert!(
                    suggest_mb * 9 >= needed * 10 && suggest_mb % 64 == 0,
                    "{suggest_mb}"
                );
            }
            other => panic!("{other:?}"),
        }
        // A date smaller than the smallest part: the date whole.
        let small = MemoryFit::new(Some(64), 50_000, 1000).part_files(date, 5, 5);
        assert!(
            matches!(
                small,
                Err(Error::DayTooBig {
                    part_files: 5,
                    needed_mb: 61,
                    ..
                })
            ),
            "{small:?}"
        );
        // Tight memory shrinks the sets, never below MIN_IN_MEMORY.
        assert_eq!(
            MemoryFit::new(Some(64), 1, 1 << 19).in_memory(),
            MIN_IN_MEMORY
        );
        assert_eq!(MemoryFit::new(Some(64), 1, 10).in_memory(), 10);
    }
}
