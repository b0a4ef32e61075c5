//! The one deadline rule of every command (docs/configuration.md,
//! "Deadline"): the walk, `--date`, a repair range, the straggler sweep and
//! `audit`, on the command line (`--max-duration`) and in Lambda (the
//! runtime's deadline) alike.
//!
//! - Every S3 call ends [`crate::storage::S3_DEADLINE_MARGIN`] (8 s) before
//!   the deadline ([`Deadline::s3`]), so the lease's release and the report
//!   still fit.
//! - A new unit of work (a date to compact, sweep or audit) starts only
//!   with more than `DEADLINE_MARGIN_SECONDS`, and more than twice the
//!   slowest date so far, left ([`Deadline::near`]); every finished date is
//!   timed into that figure ([`Deadline::record`]), whichever pass did it.
//!
//! ```
//! use archive_compaction::deadline::Deadline;
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
}

/// Why a date is not started: `left` before the deadline, `needed` to start
/// one (the margin, or twice the slowest date so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Near {
    /// Time left before the deadline.
    pub left: Duration,
    /// Time a new date needs.
    pub needed: Duration,
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
        self.near_unit(self.slowest())
    }

    /// [`Deadline::near`] for a smaller unit of work than a date (a part of
    /// one, [`crate::plan::parts`]) whose slowest so far took `slowest`:
    /// `Some` when less than the margin, or twice `slowest`, is left.
    ///
    /// ```
    /// use archive_compaction::deadline::Deadline;
    /// use std::time::{Duration, Instant};
    /// let d = Deadline::new(Some(Instant::now() + Duration::from_secs(100)), Duration::from_secs(30));
    /// assert!(d.near_unit(Duration::from_secs(40)).is_none());
    /// assert_eq!(d.near_unit(Duration::from_secs(60)).unwrap().needed, Duration::from_secs(120));
    /// ```
    pub fn near_unit(&self, slowest: Duration) -> Option<Near> {
        let left = self.at?.saturating_duration_since(Instant::now());
        let needed = self.margin.max(slowest * 2);
        (left < needed).then_some(Near { left, needed })
    }
}

/// When the S3 calls of a command `started` then end:
/// [`crate::storage::S3_DEADLINE_MARGIN`] (8 s) before its `deadline`
/// (docs/configuration.md, "Deadline"), but not before 8 s after its start:
/// a run given less than 16 s still takes the lease, recovers and reads the
/// watermark, and says where the next run goes on.
///
/// ```
/// use archive_compaction::deadline::s3_deadline;
/// use std::time::{Duration, Instant};
/// let t0 = Instant::now();
/// assert_eq!(s3_deadline(t0 + Duration::from_secs(40), t0), t0 + Duration::from_secs(32));
/// assert_eq!(s3_deadline(t0, t0), t0 + Duration::from_secs(8));
/// ```
pub fn s3_deadline(deadline: Instant, started: Instant) -> Instant {
    let margin = crate::storage::S3_DEADLINE_MARGIN;
    deadline
        .checked_sub(margin)
        .unwrap_or(deadline)
        .max(started + margin)
}
