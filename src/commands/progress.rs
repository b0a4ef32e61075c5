//! A run's [`Progress`] events and the CLI's progress bar over dates (on a terminal only).
//!
//! ```
//! use archive_compaction::commands::progress::{bar_sink, Progress};
//! use archive_compaction::data::report::DayAction;
//! use indicatif::{ProgressBar, ProgressDrawTarget};
//! let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
//! let sink = bar_sink(bar.clone());
//! sink.send(Progress::Dates { count: 2 });
//! sink.send(Progress::DateDone { date: "2026-07-20".parse().unwrap(), action: DayAction::Compacted,
//!     files: 3, bytes_read: 900, rows: 3, bytes: 600 });
//! assert_eq!((bar.position(), bar.length()), (1, Some(2)));
//! ```

use std::fmt;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDate;
use indicatif::{ProgressBar, ProgressStyle};
use tracing_subscriber::fmt::MakeWriter;

use crate::data::report::DayAction;

/// What a run reports as it goes.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // a field is what its name says
pub enum Progress {
    /// The walk (or repair range) will go through `count` dates.
    Dates { count: u64 },
    /// One date is done (walk, sweep or repair).
    DateDone {
        date: NaiveDate,
        action: DayAction,
        files: u64,
        bytes_read: u64,
        rows: u64,
        bytes: u64,
    },
    /// The run is over.
    Finished,
}

/// Where a run's [`Progress`] goes: a shared callback (cheap to clone).
#[derive(Clone)]
pub struct ProgressSink(Arc<dyn Fn(&Progress) + Send + Sync>);

impl ProgressSink {
    /// A sink calling `f` for every event.
    pub fn new(f: impl Fn(&Progress) + Send + Sync + 'static) -> ProgressSink {
        ProgressSink(Arc::new(f))
    }

    /// Reports one event.
    pub fn send(&self, p: Progress) {
        (self.0)(&p)
    }
}

impl fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProgressSink")
    }
}

/// A bar over dates, for [`bar_sink`].
pub fn date_bar() -> ProgressBar {
    let bar = ProgressBar::no_length();
    let template = "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} dates {msg}";
    bar.set_style(ProgressStyle::with_template(template).expect("valid template"));
    bar.set_message("listing and recovering");
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A sink that drives `bar`, one step a [`Progress::DateDone`].
pub fn bar_sink(bar: ProgressBar) -> ProgressSink {
    ProgressSink::new(move |p| match p {
        Progress::Dates { count } => {
            bar.set_length(*count);
            bar.set_position(0);
            bar.set_message("");
        }
        Progress::DateDone { date, action, files, bytes_read, rows, bytes } => {
            let next = bar.position() + 1;
            if bar.length().is_none_or(|l| next > l) {
                bar.set_length(next);
            }
            bar.inc(1);
            bar.set_message(format!(
                "{date} {action}: {files} files, {bytes_read} bytes read, {rows} rows, {bytes} bytes written"
            ));
        }
        Progress::Finished => bar.finish_and_clear(),
    })
}

/// Writes log lines to stderr above the bar.
#[derive(Debug, Clone)]
pub struct BarWriter(ProgressBar);

impl BarWriter {
    /// A writer that keeps clear of `bar`.
    pub fn new(bar: ProgressBar) -> Self {
        BarWriter(bar)
    }
}

impl Write for BarWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.suspend(|| io::stderr().write_all(buf))?;
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

    fn hidden() -> ProgressBar {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden())
    }

    fn done(date: &str) -> Progress {
        Progress::DateDone {
            date: date.parse().unwrap(),
            action: DayAction::Compacted,
            files: 4,
            bytes_read: 4000,
            rows: 4,
            bytes: 1000,
        }
    }

    #[test]
    fn follows_the_walk_and_the_sweep_then_clears() {
        let bar = hidden();
        let sink = bar_sink(bar.clone());
        sink.send(Progress::Dates { count: 2 });
        assert_eq!((bar.position(), bar.length()), (0, Some(2)));
        for day in ["2026-07-19", "2026-07-20", "2026-07-10"] {
            sink.send(done(day));
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
        sink.send(Progress::Finished);
        assert!(bar.is_finished());
    }

    #[test]
    fn a_date_done_before_the_count_is_counted() {
        let bar = hidden();
        bar_sink(bar.clone()).send(done("2026-07-20"));
        assert_eq!((bar.position(), bar.length()), (1, Some(1)));
    }
}
