//! The one deadline rule of every command (docs/configuration.md,
//! "Deadline"): the walk, `--date`, a repair range, the straggler sweep and
//! `audit`, on the command line (`--max-duration`) and in Lambda (the
//! runtime's deadline) alike.
//!
//! - Every S3 call ends [`crate::infra::storage::S3_DEADLINE_MARGIN`] (8 s) before
//!   the deadline ([`Deadline::s3`]), so the lease's release and the report
//!   still fit.
//! - A new unit of work (a date to compact, sweep or audit) starts only
//!   with more than `DEADLINE_MARGIN_SECONDS`, and more than twice the
//!   slowest date so far, left ([`Deadline::near`]); every finished date is
//!   timed into that figure ([`Deadline::record`]), whichever pass did it.
//! - A part of a date, the first one included, is sized to the time left
//!   ([`Deadline::part_fit`]): it starts only with more than the margin
//!   left (and twice the date's slowest part, until a pace is measured),
//!   and its files, at twice the slowest pace measured on a large part this
//!   run ([`Deadline::record_part`]) or at [`UNMEASURED_SECONDS_PER_FILE`]
//!   before one was, must be done before the S3 calls end.
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

/// A command's deadline, its margin and the slowest date so far. Shared by
/// reference between the passes of one invocation (the slowest date is
/// kept atomically: audit's dates run concurrently).
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

/// What a part's file is taken to cost before this run has timed a large
/// part ([`Deadline::near_part`]), in seconds: 2 ms, twice the ~1 ms a
/// file a 512 MB Lambda (~0.29 of a vCPU) spends at the job's measured
/// 0.27-0.30 ms of CPU a file (docs/performance.md, the job's rows).
pub const UNMEASURED_SECONDS_PER_FILE: f64 = 0.002;

/// The fewest files a part must have for its pace to count
/// ([`Deadline::record_part`]): below it the part's fixed requests
/// (manifest, output PUT, HEAD, re-list, lease) weigh more than its files,
/// and a pace taken from it would overstate a large part many times over.
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
    /// `Some` when a part of weight `files` does not fit: less is left
    /// than the floor ([`Deadline::part_fit`]), or than the part's estimate
    /// at the pace before the S3 calls end.
    pub fn near(&self, files: u64) -> Option<Near> {
        let paced = Duration::from_secs_f64(files as f64 * self.seconds_per_file);
        let needed = self
            .floor
            .max(paced + crate::infra::storage::S3_DEADLINE_MARGIN);
        (self.left < needed).then_some(Near {
            left: self.left,
            needed,
        })
    }
}

/// Why a date or a part is not started: `left` before the deadline,
/// `needed` to start one ([`Deadline::near`], [`Deadline::near_part`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Near {
    /// Time left before the deadline.
    pub left: Duration,
    /// Time a new date (or part) needs.
    pub needed: Duration,
}

impl Near {
    /// What to change when a part of weight `files` needs more than the
    /// command's whole time (`given`, [`Deadline::given`]): give the
    /// function more time or memory (a faster vCPU). Led by "; " for the
    /// end of a reason; empty when the part fits a whole invocation, or
    /// without a deadline.
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
    /// A deadline `at` (`None`: none) for a command starting now, keeping
    /// `margin` (`DEADLINE_MARGIN_SECONDS`) free before each new date.
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

    /// The deadline itself.
    pub fn at(&self) -> Option<Instant> {
        self.at
    }

    /// When the command's S3 calls end ([`s3_deadline`]); `None` without a
    /// deadline.
    pub fn s3(&self) -> Option<Instant> {
        self.at.map(|d| s3_deadline(d, self.started))
    }

    /// Records a finished date's duration (the slowest counts).
    pub fn record(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.slowest_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Runs `date` (one date's work) and records how long it took
    /// ([`Deadline::record`]).
    pub async fn timed<T>(&self, date: impl std::future::Future<Output = T>) -> T {
        let t0 = Instant::now();
        let out = date.await;
        self.record(t0.elapsed());
        out
    }

    /// The slowest date recorded so far.
    pub fn slowest(&self) -> Duration {
        Duration::from_nanos(self.slowest_ns.load(Ordering::Relaxed))
    }

    /// `Some` when a new date must not start: less than the margin, or
    /// twice the slowest date so far, is left. `None` with time enough, or
    /// no deadline.
    pub fn near(&self) -> Option<Near> {
        let left = self.at?.saturating_duration_since(Instant::now());
        let needed = self.margin.max(self.slowest() * 2);
        (left < needed).then_some(Near { left, needed })
    }

    /// Records a committed part of weight `files` that took `took`; its
    /// pace counts from [`PACE_MIN_FILES`].
    pub fn record_part(&self, files: u64, took: Duration) {
        if files >= PACE_MIN_FILES {
            let ns = u64::try_from(took.as_nanos() / u128::from(files)).unwrap_or(u64::MAX);
            self.slowest_part_ns_per_file
                .fetch_max(ns, Ordering::Relaxed);
        }
    }

    /// `Some` when a part of weight `files` ([`crate::protocol::plan::input_weight`])
    /// must not start: [`PartFit::near`] of [`Deadline::part_fit`]. `None`
    /// with time enough, or no deadline.
    ///
    /// ```
    /// use archive_compaction::infra::deadline::Deadline;
    /// use std::time::{Duration, Instant};
    /// let d = Deadline::new(Some(Instant::now() + Duration::from_secs(100)), Duration::from_secs(30));
    /// assert!(d.near_part(10_000, Duration::from_secs(40)).is_none());
    /// assert_eq!(d.near_part(10_000, Duration::from_secs(60)).unwrap().needed, Duration::from_secs(120));
    /// // Before any large part: 2 ms a file, 50,000 files in 100 s, done
    /// // 8 s before the deadline.
    /// assert_eq!(d.near_part(50_000, Duration::ZERO).unwrap().needed, Duration::from_secs(108));
    /// // 10 s for 2,000 files: 5 ms a file, twice that for the next part.
    /// d.record_part(2_000, Duration::from_secs(10));
    /// assert_eq!(d.near_part(20_000, Duration::ZERO).unwrap().needed, Duration::from_secs(208));
    /// assert!(d.near_part(2_000, Duration::ZERO).is_none());
    /// // A part under PACE_MIN_FILES files sets no pace (its fixed requests).
    /// d.record_part(10, Duration::from_secs(100));
    /// assert!(d.near_part(2_000, Duration::ZERO).is_none());
    /// ```
    pub fn near_part(&self, files: u64, slowest: Duration) -> Option<Near> {
        self.part_fit(slowest)?.near(files)
    }

    /// What a part started now may weigh: its files, at twice the slowest
    /// pace [`Deadline::record_part`] measured (else at
    /// [`UNMEASURED_SECONDS_PER_FILE`]), done before the S3 calls end
    /// ([`crate::infra::storage::S3_DEADLINE_MARGIN`] before the deadline);
    /// nothing when less than the margin is left, or, until a pace is
    /// measured, less than twice `slowest` (the date's slowest part so far).
    /// `None` without a deadline.
    ///
    /// ```
    /// use archive_compaction::infra::deadline::Deadline;
    /// use std::time::{Duration, Instant};
    /// let d = Deadline::new(Some(Instant::now() + Duration::from_secs(28)), Duration::from_secs(10));
    /// // A cautious first part: 2 ms a file, done 8 s before the deadline.
    /// let fit = d.part_fit(Duration::ZERO).unwrap();
    /// assert!((9_000..=10_000).contains(&fit.weight), "{}", fit.weight);
    /// assert!(fit.near(fit.weight).is_none() && fit.near(fit.weight + 100).is_some());
    /// // The pace measured sizes the next: 0.4 ms a file, twice that; twice
    /// // the slowest part (11.2 s) no longer holds it back.
    /// d.record_part(14_000, Duration::from_millis(5_600));
    /// let fit = d.part_fit(Duration::from_millis(5_600)).unwrap();
    /// assert!((23_000..=25_000).contains(&fit.weight), "{}", fit.weight);
    /// // Less than the margin left: nothing starts.
    /// let late = Deadline::new(Some(Instant::now() + Duration::from_secs(9)), Duration::from_secs(10));
    /// assert_eq!(late.part_fit(Duration::ZERO).unwrap().weight, 0);
    /// // Before a pace is measured, twice the slowest part must be left too.
    /// assert_eq!(Deadline::new(Some(Instant::now() + Duration::from_secs(28)), Duration::from_secs(10))
    ///     .part_fit(Duration::from_secs(15)).unwrap().weight, 0);
    /// assert!(Deadline::none().part_fit(Duration::ZERO).is_none());
    /// ```
    pub fn part_fit(&self, slowest: Duration) -> Option<PartFit> {
        let left = self.at?.saturating_duration_since(Instant::now());
        let (seconds_per_file, floor) = match self.slowest_part_ns_per_file.load(Ordering::Relaxed)
        {
            0 => (UNMEASURED_SECONDS_PER_FILE, self.margin.max(slowest * 2)),
            ns => (2.0 * ns as f64 / 1e9, self.margin),
        };
        let before_s3 = left.saturating_sub(crate::infra::storage::S3_DEADLINE_MARGIN);
        let weight = match left >= floor {
            true => (before_s3.as_secs_f64() / seconds_per_file) as u64,
            false => 0,
        };
        Some(PartFit {
            weight,
            left,
            floor,
            seconds_per_file,
        })
    }

    /// The whole time this command was given, from its start to its
    /// deadline; `None` without one.
    pub fn given(&self) -> Option<Duration> {
        Some(self.at?.saturating_duration_since(self.started))
    }
}

/// When the S3 calls of a command `started` then end:
/// [`crate::infra::storage::S3_DEADLINE_MARGIN`] (8 s) before its `deadline`
/// (docs/configuration.md, "Deadline"), but not before 8 s after its start:
/// a run given less than 16 s still takes the lease, recovers and reads the
/// watermark, and says where the next run goes on.
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
    deadline
        .checked_sub(margin)
        .unwrap_or(deadline)
        .max(started + margin)
}
