//! Stopping a run cleanly on SIGTERM (Lambda's shutdown too) or SIGINT. Once a [`Stop`] is
//! requested the run starts no new date, and the lease refuses every confirmation
//! ([`crate::protocol::lease::LeaseGuard::stop_on`]), so no destructive step starts: the date under
//! way is left as at a crash, for the next run's recovery. Requests in flight are not cut off.
//!
//! ```
//! use archive_compaction::infra::stop::Stop;
//! let stop = Stop::new();
//! assert_eq!(stop.requested(), None);
//! stop.clone().request("SIGTERM");
//! assert_eq!(stop.requested(), Some("SIGTERM"));
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Shared by clones: the first signal's name, and how many runs are under way.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<(OnceLock<&'static str>, AtomicUsize)>);

/// A run under way ([`Stop::enter`]), until dropped.
#[derive(Debug)]
pub struct Running(Stop);

impl Drop for Running {
    fn drop(&mut self) {
        (self.0).0.1.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Stop {
    /// A stop nobody asked for yet.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// A second request keeps the first name.
    pub fn request(&self, signal: &'static str) {
        let _ = self.0.0.set(signal);
    }

    /// The signal that asked the run to stop.
    pub fn requested(&self) -> Option<&'static str> {
        self.0.0.get().copied()
    }

    /// Marks a run under way until the guard is dropped: a signal while none
    /// is makes [`Stop::listen`] exit at once.
    pub fn enter(&self) -> Running {
        self.0.1.fetch_add(1, Ordering::SeqCst);
        Running(self.clone())
    }

    fn busy(&self) -> bool {
        self.0.1.load(Ordering::SeqCst) > 0
    }

    /// Listens for SIGTERM and SIGINT on a task: while a run is under way the
    /// first signal requests the stop; with none, or on a second signal,
    /// `exit` is called (the run's lease then lapses, as at a crash).
    /// Errors: the signal handlers could not be installed.
    #[cfg(unix)]
    pub fn listen(&self, exit: impl Fn(&'static str) + Send + 'static) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let stop = self.clone();
        tokio::spawn(async move {
            loop {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                if !stop.busy() {
                    tracing::info!(signal = name, "no run under way: exiting");
                    exit(name);
                } else if stop.requested().is_some() {
                    tracing::warn!(
                        signal = name,
                        "second signal: exiting now; the lease lapses on its own"
                    );
                    exit(name);
                } else {
                    tracing::warn!(
                        signal = name,
                        "stop requested: no new date or destructive step starts; the lease is released and the report printed (a second signal stops at once)"
                    );
                    stop.request(name);
                }
            }
        });
        Ok(())
    }
}

/// 128 + the signal's number, as a shell reports it.
pub fn exit_code(signal: &str) -> u8 {
    if signal == "SIGINT" { 130 } else { 143 }
}
