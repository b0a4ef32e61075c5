//! The clock seam: where the job reads wall-clock time (the lease, the watermark's `updated_at`,
//! the checks that the invocation time and the watermark are not ahead of it). The cutoff comes
//! from the invocation time ([`crate::commands::run::RunOptions::now`]). Tests share a
//! [`ManualClock`] with [`crate::infra::storage::MemoryStore`].
//!
//! ```
//! use archive_compaction::infra::clock::{Clock, ManualClock};
//! let t0 = chrono::DateTime::parse_from_rfc3339("2026-07-06T03:00:00Z").unwrap().to_utc();
//! let clock = ManualClock::new(t0);
//! clock.advance(std::time::Duration::from_secs(961));
//! assert_eq!((clock.now() - t0).num_seconds(), 961);
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A source of the current time (UTC).
pub trait Clock: std::fmt::Debug + Send + Sync {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock ([`Utc::now`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that stands still until moved. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: DateTime<Utc>) -> ManualClock {
        ManualClock(Arc::new(Mutex::new(start)))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut t = self.0.lock().expect("clock lock");
        *t += chrono::Duration::from_std(by).unwrap_or(chrono::Duration::MAX);
    }

    /// Sets the clock to `to` (backwards too).
    pub fn set(&self, to: DateTime<Utc>) {
        *self.0.lock().expect("clock lock") = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock lock")
    }
}

/// [`SystemClock`] as a shared handle.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}
