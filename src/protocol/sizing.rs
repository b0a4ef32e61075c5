//! How big a date's parts, listing window and uuid sets may be ([`MemoryFit`]). The constants are
//! estimates from docs/performance.md's measured rows, rounded up.

use chrono::NaiveDate;

use crate::infra::error::{Error, Result};

/// How many parts of per-flight files one listing window holds
/// ([`crate::protocol::day::Day::list_window`]).
pub const WINDOW_PARTS: u64 = 4;

/// The smallest part worth a commit, in weight ([`crate::protocol::plan::input_weight`]): below it
/// a part's fixed requests cost more than its files. A date is refused for its memory, and a part
/// for the time left, only below this.
pub const MIN_PART_FILES: u64 = 1_000;

/// The process's peak memory before any date (runtime, SDK, lease, recovery), in MB.
pub const BASE_MEMORY_MB: u64 = 60;

/// What one index file of a part adds to the peak while the part is committed, in bytes.
pub const MEMORY_PER_FILE_BYTES: u64 = 1_536;

/// What one index file of the listing window adds to the peak while the window is worked on,
/// whichever part it is in, in bytes.
pub const DAY_BYTES_PER_FILE: u64 = 512;

/// The uuid sets a date holds at once: its flights, those past the listing window, and during the
/// parity gate those named by no file and a batch found in multi-row inputs (or
/// [`crate::protocol::partition::plan_date`]'s smaller pairs).
pub const SPILL_SETS: u64 = 4;

/// The estimated peak memory, in MB, of a date of `files` index files and `flights` flight objects
/// in parts of at most `part_files`, its uuid sets spilling past `in_memory` uuids (16 B each).
pub fn peak_memory_mb(files: u64, flights: u64, part_files: u64, in_memory: u64) -> u64 {
    let window = part_files.saturating_mul(WINDOW_PARTS);
    let bytes = files.min(window) * DAY_BYTES_PER_FILE
        + files.min(part_files) * MEMORY_PER_FILE_BYTES
        + files.max(flights).min(in_memory) * 16 * SPILL_SETS;
    BASE_MEMORY_MB + bytes.div_ceil(1 << 20)
}

/// The fewest uuids a set holds in memory however tight the memory: 64 KiB a set.
pub const MIN_IN_MEMORY: u64 = 4_096;

/// The largest parts and uuid sets that keep [`peak_memory_mb`] within 90% of the memory a run is
/// told (`MEMORY_LIMIT_MB`, else Lambda's `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`), below the ceilings
/// `PART_FILES` and `FLIGHTS_IN_MEMORY`: the one sizing rule of the run, the dry run and `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryFit {
    limit_mb: Option<u64>,
    part_files: u64,
    in_memory: u64,
}

impl MemoryFit {
    /// `limit_mb` in MB (`None`: no limit). The uuid sets take at most a quarter of what it leaves
    /// above [`BASE_MEMORY_MB`].
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
        MemoryFit { limit_mb, part_files: part_files.max(1), in_memory }
    }

    /// The fit of `config`'s settings.
    pub fn of(config: &crate::data::config::Config) -> MemoryFit {
        MemoryFit::new(config.memory_limit_mb, config.part_files, config.spill.limit as u64)
    }

    /// Uuids each of a date's sets holds in memory before it spills.
    pub fn in_memory(&self) -> u64 {
        self.in_memory
    }

    fn fits(&self, mb: u64) -> bool {
        self.limit_mb.is_none_or(|limit| mb * 10 <= limit * 9)
    }

    /// The largest part weight that fits; 0 when not even 1 does.
    pub fn largest_part(&self, files: u64, flights: u64) -> u64 {
        let fits = |p| self.fits(peak_memory_mb(files, flights, p, self.in_memory));
        let (mut lo, mut hi) = (0, self.part_files);
        // A binary search: the estimate grows with the part.
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) { lo = mid } else { hi = mid - 1 }
        }
        lo
    }

    /// Per-flight files a listing window holds, before the date's size is known.
    pub fn window(&self) -> u64 {
        let smallest = MIN_PART_FILES.min(self.part_files);
        (self.largest_part(u64::MAX, u64::MAX).max(smallest)).saturating_mul(WINDOW_PARTS)
    }

    /// [`MemoryFit::largest_part`] once `date` is listed. Errors: [`Error::DayTooBig`] when not
    /// even a part of [`MIN_PART_FILES`] (or of the whole date, if smaller) fits.
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

impl MemoryFit {
    /// [`MemoryFit::part_files`] as the planner's [`PartSizing`]. Errors: as it.
    pub fn sizing(&self, date: NaiveDate, files: u64, flights: u64) -> Result<PartSizing> {
        let part_weight = self.part_files(date, files, flights)?;
        Ok(PartSizing { part_weight, files, flights, in_memory: self.in_memory })
    }
}

/// What the planner needs of the memory: the part weight it allows and what a part is estimated to
/// take ([`MemoryFit::sizing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartSizing {
    /// The heaviest part, in [`crate::protocol::plan::input_weight`] units, unless one group of inputs is heavier.
    pub part_weight: u64,
    /// Index files and flights of the date, and uuids a set holds in memory, for the estimate.
    pub files: u64,
    /// See `files`.
    pub flights: u64,
    /// See `files`.
    pub in_memory: u64,
}

impl PartSizing {
    /// [`peak_memory_mb`] of a part of `weight`.
    pub fn estimate_mb(&self, weight: u64) -> u64 {
        peak_memory_mb(self.files, self.flights, weight, self.in_memory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    /// The memory estimate, term by term, and the refusal over 90% of the
    /// limit.
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
        // A planned part's estimate is the same sum at the part's weight.
        let sizing =
            PartSizing { part_weight: 50_000, files: 150_000, flights: 10, in_memory: 1000 };
        assert_eq!(sizing.estimate_mb(50_000), peak_memory_mb(150_000, 10, 50_000, 1000));
        // Past the window of 4 parts of 10,000 and the sets' limit: nothing
        // more, whatever the size.
        let past = BASE_MEMORY_MB
            + mb(40_000 * DAY_BYTES_PER_FILE + 10_000 * MEMORY_PER_FILE_BYTES + sets(100_000));
        for files in [140_000, 10_000_000, u64::MAX / 1024] {
            assert_eq!(peak_memory_mb(files, files, 10_000, 100_000), past, "{files}");
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
        assert!(peak_memory_mb(files, 0, part, 1000) * 10 <= 256 * 9, "{part}");
        assert!(peak_memory_mb(files, 0, part + 1, 1000) * 10 > 256 * 9, "{part}");
        assert_eq!(MemoryFit::new(None, files, 1000).part_files(date, files, 0).unwrap(), files);
        // Refused only when the smallest useful part does not fit.
        let needed = peak_memory_mb(files, 0, MIN_PART_FILES, 1000);
        let at = |limit: u64| MemoryFit::new(Some(limit), files, 1000).part_files(date, files, 0);
        assert!(at(needed * 10 / 9 + 1).is_ok());
        assert!(at(needed * 10 / 9 - 1).is_err());
        match at(needed) {
            Err(Error::DayTooBig { needed_mb, limit_mb, suggest_mb, part_files, .. }) => {
                assert_eq!((needed_mb, limit_mb, part_files), (needed, needed, MIN_PART_FILES));
                assert!(suggest_mb * 9 >= needed * 10 && suggest_mb % 64 == 0, "{suggest_mb}");
            }
            other => panic!("{other:?}"),
        }
        // A date smaller than the smallest part: the date whole.
        let small = MemoryFit::new(Some(64), 50_000, 1000).part_files(date, 5, 5);
        assert!(
            matches!(small, Err(Error::DayTooBig { part_files: 5, needed_mb: 61, .. })),
            "{small:?}"
        );
        // Tight memory shrinks the sets, never below MIN_IN_MEMORY.
        assert_eq!(MemoryFit::new(Some(64), 1, 1 << 19).in_memory(), MIN_IN_MEMORY);
        assert_eq!(MemoryFit::new(Some(64), 1, 10).in_memory(), 10);
    }

    /// The estimate and the fit at the default ceilings (`PART_FILES`
    /// 50,000, `FLIGHTS_IN_MEMORY` 524,288).
    #[test]
    fn the_estimate_and_the_fit_at_the_default_ceilings() {
        assert_eq!(peak_memory_mb(0, 0, 50_000, 524_288), 60);
        assert_eq!(peak_memory_mb(200_000, 200_000, 50_000, 524_288), 244);
        assert_eq!(peak_memory_mb(500_000, 500_000, 50_000, 524_288), 262);
        // Past the window and FLIGHTS_IN_MEMORY, nothing more.
        assert_eq!(peak_memory_mb(1_000_000, 1_000_000, 50_000, 524_288), 263);
        assert_eq!(peak_memory_mb(100_000_000, 100_000_000, 50_000, 524_288), 263);
        // A date of many flights and few index files: its flights' set counts.
        assert_eq!(peak_memory_mb(10, 1_000_000, 50_000, 524_288), 93);
        assert_eq!(peak_memory_mb(200_000, 200_000, 200_000, 524_288), 463);
        // 512 MB: the ceilings themselves.
        let fit = MemoryFit::new(Some(512), 50_000, 524_288);
        assert_eq!((fit.in_memory(), fit.window()), (524_288, 200_000));
        // 128 MB: smaller sets, and parts that fit beside them.
        let fit = MemoryFit::new(Some(128), 50_000, 524_288);
        assert_eq!(fit.in_memory(), 225_280);
        let part = fit.largest_part(30_000, 30_000);
        assert!((20_000..30_000).contains(&part), "{part}");
        assert!(peak_memory_mb(30_000, 30_000, part, fit.in_memory()) * 10 <= 128 * 9);
        // No limit: the ceiling.
        assert_eq!(MemoryFit::new(None, 50_000, 524_288).largest_part(u64::MAX, 0), 50_000);
    }

    /// A part of exactly the smallest useful weight that fits is sized,
    /// not refused: the refusal is for less than it. The smallest is
    /// `PART_FILES` when that is set below [`MIN_PART_FILES`], so memory
    /// that fits the configured part compacts the date in such parts.
    #[test]
    fn a_date_whose_smallest_useful_part_just_fits_is_sized_not_refused() {
        let date = d("2026-07-20");
        let files = 300_000;
        for part_files in [MIN_PART_FILES, 500] {
            let fit = MemoryFit::new(Some(512), part_files, 1000);
            assert_eq!(fit.largest_part(files, 0), part_files);
            assert_eq!(fit.part_files(date, files, 0).unwrap(), part_files, "{part_files}");
        }
    }
}
