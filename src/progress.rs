//! A progress bar over a run's dates, for the command line when stderr is a
//! terminal. Never used by the Lambda function.
//!
//! The run knows nothing about it: [`ProgressLayer`] is a `tracing` layer
//! that follows the run's own log events (target `archive_compaction::run`):
//! `walking dates` (field `count`) sets the bar's length, every `date done`
//! (fields `date`, `action`, `files`, `bytes_read`, `rows`, `bytes`) advances it by one
//! date, and `run finished` clears it. Dates beyond `count` (the straggler
//! sweep's) lengthen the bar as they come. [`BarWriter`] writes the log
//! lines above the bar, so the two never garble each other.
//!
//! ```
//! use archive_compaction::progress::ProgressLayer;
//! use indicatif::{ProgressBar, ProgressDrawTarget};
//! use tracing_subscriber::layer::SubscriberExt;
//! let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
//! let subscriber = tracing_subscriber::registry().with(ProgressLayer::new(bar.clone()));
//! tracing::subscriber::with_default(subscriber, || {
//!     tracing::info!(target: "archive_compaction::run", count = 2u64, "walking dates");
//!     tracing::info!(target: "archive_compaction::run", date = "2026-07-20", action = "compacted", files = 3u64, rows = 3u64, bytes = 900u64, "date done");
//! });
//! assert_eq!((bar.position(), bar.length()), (1, Some(2)));
//! ```

use std::fmt;
use std::io::{self, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer};

/// The module whose events drive the bar.
const RUN_TARGET: &str = "archive_compaction::run";

/// A bar styled for dates: spinner, elapsed time, bar, `pos/len dates`, message.
pub fn date_bar() -> ProgressBar {
    let bar = ProgressBar::no_length();
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} dates {msg}",
        )
        .expect("valid template"),
    );
    bar.set_message("listing and recovering");
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Drives a [`ProgressBar`] from the run's log events (see the module docs).
#[derive(Debug, Clone)]
pub struct ProgressLayer {
    bar: ProgressBar,
}

impl ProgressLayer {
    /// A layer advancing `bar`.
    pub fn new(bar: ProgressBar) -> Self {
        ProgressLayer { bar }
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    count: Option<u64>,
    date: String,
    action: String,
    files: u64,
    rows: u64,
    bytes: u64,
    bytes_read: u64,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "count" => self.count = Some(value),
            "files" => self.files = value,
            "rows" => self.rows = value,
            "bytes" => self.bytes = value,
            "bytes_read" => self.bytes_read = value,
            _ => {}
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record_u64(field, value.max(0) as u64);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "date" => self.date = format!("{value:?}"),
            "action" => self.action = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S: Subscriber> Layer<S> for ProgressLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != RUN_TARGET {
            return;
        }
        let mut f = Fields::default();
        event.record(&mut f);
        match f.message.as_str() {
            "walking dates" => {
                if let Some(n) = f.count {
                    self.bar.set_length(n);
                    self.bar.set_position(0);
                    self.bar.set_message("");
                }
            }
            "date done" => {
                let next = self.bar.position() + 1;
                if self.bar.length().is_none_or(|l| next > l) {
                    self.bar.set_length(next);
                }
                self.bar.inc(1);
                self.bar.set_message(format!(
                    "{} {}: {} files, {} bytes read, {} rows, {} bytes written",
                    f.date, f.action, f.files, f.bytes_read, f.rows, f.bytes
                ));
            }
            "run finished" => self.bar.finish_and_clear(),
            _ => {}
        }
    }
}

/// Writes log lines to stderr above the bar (the bar is hidden while a line
/// is written, then redrawn).
#[derive(Debug, Clone)]
pub struct BarWriter {
    bar: ProgressBar,
}

impl BarWriter {
    /// A writer that keeps clear of `bar`.
    pub fn new(bar: ProgressBar) -> Self {
        BarWriter { bar }
    }
}

impl Write for BarWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bar.suspend(|| io::stderr().write_all(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl<'a> MakeWriter<'a> for BarWriter {
    type Writer = BarWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::ProgressDrawTarget;
    use tracing_subscriber::layer::SubscriberExt;

    fn hidden() -> ProgressBar {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden())
    }

    #[test]
    fn follows_the_walk_and_the_sweep_then_clears() {
        let bar = hidden();
        let sub = tracing_subscriber::registry().with(ProgressLayer::new(bar.clone()));
        tracing::subscriber::with_default(sub, || {
            tracing::info!(target: "archive_compaction::run", count = 2u64, "walking dates");
            assert_eq!((bar.position(), bar.length()), (0, Some(2)));
            for day in ["2026-07-19", "2026-07-20", "2026-07-10"] {
                tracing::info!(target: "archive_compaction::run", date = %day, action = "compacted", files = 4u64, bytes_read = 4000u64, rows = 4u64, bytes = 1000u64, seconds = 0.5, "date done");
            }
            assert_eq!(
                (bar.position(), bar.length()),
                (3, Some(3)),
                "a date past the count lengthens the bar"
            );
            assert_eq!(
                bar.message(),
                "2026-07-10 compacted: 4 files, 4000 bytes read, 4 rows, 1000 bytes written"
            );
            // Other modules' events and other messages do not move it.
            tracing::info!(target: "archive_compaction::commit", count = 9u64, "walking dates");
            tracing::info!(target: "archive_compaction::run", "something else");
            assert_eq!((bar.position(), bar.length()), (3, Some(3)));
            tracing::info!(target: "archive_compaction::run", status = "Success", "run finished");
        });
        assert!(bar.is_finished());
    }

    #[test]
    fn a_date_done_before_the_count_is_counted() {
        let bar = hidden();
        let sub = tracing_subscriber::registry().with(ProgressLayer::new(bar.clone()));
        tracing::subscriber::with_default(sub, || {
            tracing::info!(target: "archive_compaction::run", date = "2026-07-20", action = "planned", files = 1u64, rows = 0u64, bytes = 10u64, "date done");
        });
        assert_eq!((bar.position(), bar.length()), (1, Some(1)));
    }
}
