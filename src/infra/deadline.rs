//! The one deadline rule of every command, on the command line (`--max-duration`) and in Lambda
//! alike (docs/configuration.md, "Deadline"): S3 calls end early enough for the lease's release and
//! the report ([`Deadline::s3`]); a new date starts only with time enough ([`Deadline::near`]); a
//! part is sized to the time left ([`Deadline::part_fit`]).
//!
//! ```
//! use archive_compaction::infra::deadline::Deadline;
//! use std::time::{Duration, Instant};
//! let d = Deadline::new(Some(Instant::now() + Duration::from_secs(100)), Duration::from_secs(60));
//! assert!(d.near().is_none(), "100 s left, 60 s needed");
//! d.record(Duration::from_secs(55));
//! let near = d.near().expect("twice the slowest date (110 s) is more than is left");
//! assert_eq!(near.needed, Duration::from_secs(110));
//! assert!(Deadline::none().near().is_none() && Deadline::none().s3().is_none());
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A command's deadline, its margin and the slowest date so far, shared by
/// the passes of one invocation (atomics: audit's dates run concurrently).
#[derive(Debug)]
pub struct Deadline {
    at: Option<Instant>,
    started: Instant,
    margin: Duration,
    slowest_ns: AtomicU64,
    /// The slowest pace of a part of at least [`PACE_MIN_FILES`] files,
    /// in nanoseconds a file (0: none measured yet).
    slowest_part_ns_per_file: AtomicU64,
}

/// What a part's file is taken to cost, in seconds, before this run has timed a large part: twice
/// what a 512 MB Lambda spends on one (docs/performance.md, the job's rows).
pub const UNMEASURED_SECONDS_PER_FILE: f64 = 0.002;

/// The fewest files a part must have for its pace to count: a smaller part's fixed requests would
/// overstate the pace.
pub const PACE_MIN_FILES: u64 = 1_000;

/// What a part started now may weigh ([`Deadline::part_fit`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartFit {
    /// The most weight ([`crate::protocol::plan::input_weight`]) that fits.
    pub weight: u64,
    /// Time left before the deadline.
    pub left: Duration,
    floor: Duration,
    seconds_per_file: f64,
}

impl PartFit {
    /// `Some` when a part of weight `files` does not fit ([`Deadline::part_fit`]).
    pub fn near(&self, files: u64) -> Option<Near> {
        let paced = Duration::from_secs_f64(files as f64 * self.seconds_per_file);
        let needed = self.floor.max(paced + crate::infra::storage::S3_DEADLINE_MARGIN);
        (self.left < needed).then_some(Near { left: self.left, needed })
    }
}

/// Why a date or a part is not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Near {
    /// Time left before the deadline.
    pub left: Duration,
    /// Time a new date (or part) needs.
    pub needed: Duration,
}

impl Near {
    /// What to change when a part needs more than the command's whole time
    /// (`given`), led by "; " for the end of a reason; else empty.
    ///
    /// ```
    /// use archive_compaction::infra::deadline::Near;
    /// use std::time::Duration;
    /// let s = Duration::from_secs;
    /// let near = Near { left: s(30), needed: s(1_000) };
    /// let hint = near.part_hint(Some(s(900)), 1_000);
    /// assert!(hint.starts_with("; ") && hint.contains("(900 s)") && hint.contains("1000"), "{hint}");
    /// assert_eq!(near.part_hint(Some(s(1_200)), 1_000), "");
    /// assert_eq!(near.part_hint(None, 1_000), "");
    /// ```
    pub fn part_hint(&self, given: Option<Duration>, files: u64) -> String {
        match given {
            Some(given) if self.needed > given => format!(
                "; at this pace a part of {files} file(s) needs more than a whole invocation ({} s): give the function more time (Timeout) or memory (MemorySize, which brings more vCPU)",
                given.as_secs()
            ),
            _ => String::new(),
        }
    }
}

impl Deadline {
    /// `margin` is `DEADLINE_MARGIN_SECONDS`, kept free before each new date.
    pub fn new(at: Option<Instant>, margin: Duration) -> Deadline {
        Deadline {
            at,
            started: Instant::now(),
            margin,
            slowest_ns: AtomicU64::new(0),
            slowest_part_ns_per_file: AtomicU64::new(0),
        }
    }

    /// No deadline: every date starts, no S3 call is cut.
    pub fn none() -> Deadline {
        Deadline::new(None, Duration::ZERO)
    }

    /// When the command's S3 calls end ([`s3_deadline`]).
    pub fn s3(&self) -> Option<Instant> {
        self.at.map(|d| s3_deadline(d, self.started))
    }

    /// Records a finished date's duration (the slowest counts).
    pub fn record(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.slowest_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Runs one date's work and [`Deadline::record`]s it.
    pub async fn timed<T>(&self, date: impl std::future::Future<Output = T>) -> T {
        let t0 = Instant::now();
        let out = date.await;
        self.record(t0.elapsed());
        out
    }

    /// `Some` when a new date must not start: less than the margin, or
    /// twice the slowest date so far, is left.
    pub fn near(&self) -> Option<Near> {
        let left = self.at?.saturating_duration_since(Instant::now());
        let slowest = Duration::from_nanos(self.slowest_ns.load(Ordering::Relaxed));
        let needed = self.margin.max(slowest * 2);
        (left < needed).then_some(Near { left, needed })
    }

    /// Records a part's pace, committed or only read; `files`: its weight, from [`PACE_MIN_FILES`].
    pub fn record_part(&self, files: u64, took: Duration) {
        if files >= PACE_MIN_FILES {
            let ns = u64::try_from(took.as_nanos() / u128::from(files)).unwrap_or(u64::MAX);
            self.slowest_part_ns_per_file.fetch_max(ns, Ordering::Relaxed);
        }
    }

    /// [`PartFit::near`] of [`Deadline::part_fit`].
    pub fn near_part(&self, files: u64, slowest: Duration) -> Option<Near> {
        self.part_fit(slowest)?.near(files)
    }

    /// What a part started now may weigh: its files, at twice the slowest
    /// pace measured (else [`UNMEASURED_SECONDS_PER_FILE`]), done before the
    /// S3 calls end; nothing when less than the margin is left, or, until a
    /// pace is measured, less than twice `slowest` (the date's slowest part).
    pub fn part_fit(&self, slowest: Duration) -> Option<PartFit> {
        let left = self.at?.saturating_duration_since(Instant::now());
        let (seconds_per_file, floor) = match self.slowest_part_ns_per_file.load(Ordering::Relaxed)
        {
            0 => (UNMEASURED_SECONDS_PER_FILE, self.margin.max(slowest * 2)),
            ns => (2.0 * ns as f64 / 1e9, self.margin),
        };
        let before_s3 = left.saturating_sub(crate::infra::storage::S3_DEADLINE_MARGIN);
        let weight =
            if left >= floor { (before_s3.as_secs_f64() / seconds_per_file) as u64 } else { 0 };
        Some(PartFit { weight, left, floor, seconds_per_file })
    }

    /// The whole time this command was given.
    pub fn given(&self) -> Option<Duration> {
        Some(self.at?.saturating_duration_since(self.started))
    }
}

/// [`crate::infra::storage::S3_DEADLINE_MARGIN`] before `deadline`, but not
/// before that margin after `started`, so a run given very little time
/// still takes the lease, recovers and says where the next run goes on.
///
/// ```
/// use archive_compaction::infra::deadline::s3_deadline;
/// use std::time::{Duration, Instant};
/// let t0 = Instant::now();
/// assert_eq!(s3_deadline(t0 + Duration::from_secs(40), t0), t0 + Duration::from_secs(32));
/// assert_eq!(s3_deadline(t0, t0), t0 + Duration::from_secs(8));
/// ```
pub fn s3_deadline(deadline: Instant, started: Instant) -> Instant {
    let margin = crate::infra::storage::S3_DEADLINE_MARGIN;
    deadline.checked_sub(margin).unwrap_or(deadline).max(started + margin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(seconds: u64, margin: u64) -> Deadline {
        Deadline::new(
            Some(Instant::now() + Duration::from_secs(seconds)),
            Duration::from_secs(margin),
        )
    }

    #[test]
    fn a_part_that_does_not_fit_is_near() {
        let d = after(100, 30);
        assert!(d.near_part(10_000, Duration::from_secs(40)).is_none());
        assert_eq!(
            d.near_part(10_000, Duration::from_secs(60)).unwrap().needed,
            Duration::from_secs(120)
        );
        // Before any large part: 2 ms a file, 50,000 files in 100 s, done
        // 8 s before the deadline.
        assert_eq!(d.near_part(50_000, Duration::ZERO).unwrap().needed, Duration::from_secs(108));
        // 10 s for 2,000 files: 5 ms a file, twice that for the next part.
        d.record_part(2_000, Duration::from_secs(10));
        assert_eq!(d.near_part(20_000, Duration::ZERO).unwrap().needed, Duration::from_secs(208));
        assert!(d.near_part(2_000, Duration::ZERO).is_none());
        // A part under PACE_MIN_FILES files sets no pace (its fixed requests).
        d.record_part(10, Duration::from_secs(100));
        assert!(d.near_part(2_000, Duration::ZERO).is_none());
    }

    #[test]
    fn a_part_is_sized_to_the_time_left_at_the_pace_measured() {
        let d = after(28, 10);
        // A cautious first part: 2 ms a file, done 8 s before the deadline.
        let fit = d.part_fit(Duration::ZERO).unwrap();
        assert!((9_000..=10_000).contains(&fit.weight), "{}", fit.weight);
        assert!(fit.near(fit.weight).is_none() && fit.near(fit.weight + 100).is_some());
        // The pace measured sizes the next: 0.4 ms a file, twice that; twice
        // the slowest part (11.2 s) no longer holds it back.
        d.record_part(14_000, Duration::from_millis(5_600));
        let fit = d.part_fit(Duration::from_millis(5_600)).unwrap();
        assert!((23_000..=25_000).contains(&fit.weight), "{}", fit.weight);
        // Less than the margin left: nothing starts.
        assert_eq!(after(9, 10).part_fit(Duration::ZERO).unwrap().weight, 0);
        // Before a pace is measured, twice the slowest part must be left too.
        assert_eq!(after(28, 10).part_fit(Duration::from_secs(15)).unwrap().weight, 0);
        assert!(Deadline::none().part_fit(Duration::ZERO).is_none());
    }
}
