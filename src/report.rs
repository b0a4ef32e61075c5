//! [`RunReport`]: the one value that describes a run.
//!
//! The same value is the Lambda response (Success) or the error message
//! (Mismatch, Failure), the CLI's JSON on stdout, and the source of every
//! CloudWatch metric and MQTT topic. Its JSON Schema is
//! `specs/run-report.schema.json`.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

/// Outcome of a run: exit code 0, 2, 1 respectively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Status {
    /// Everything up to the cutoff (or the deadline) is compacted.
    #[default]
    Success,
    /// The walk stopped at a date whose parity failed (flights without index rows).
    Mismatch,
    /// Something failed; see `errors`.
    Failure,
}

impl Status {
    /// The CLI exit code: 0 Success, 2 Mismatch, 1 Failure.
    pub fn exit_code(self) -> i32 {
        match self {
            Status::Success => 0,
            Status::Mismatch => 2,
            Status::Failure => 1,
        }
    }

    /// `Success`, `Mismatch` or `Failure`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Success => "Success",
            Status::Mismatch => "Mismatch",
            Status::Failure => "Failure",
        }
    }
}

/// Why the walk over dates stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Every date up to the cutoff is compacted.
    #[default]
    ReachedCutoff,
    /// The watermark is already at (or past) the cutoff.
    NothingToDo,
    /// No watermark, no `START_DATE` and no `index/` partition: nothing to start from.
    NoPartitions,
    /// Parity failed on `mismatch_date`.
    Mismatch,
    /// Less time was left than the deadline margin; the next run continues.
    Deadline,
    /// Another invocation holds the lease; this one did nothing.
    LeaseHeld,
    /// A date is blocked by a stuck or quarantined manifest.
    BlockedByManifest,
    /// A repair range (`--from`/`--to`), or the one date of `--date`, went
    /// through its last date.
    EndOfRange,
    /// An error stopped the run.
    Error,
}

/// Implements `as_str`, `Display` and comparison with `&str` for a unit
/// enum whose serde names are snake case, so logs, reports and tests use one
/// spelling (the one `specs/run-report.schema.json` lists).
macro_rules! named_enum {
    ($t:ident { $($v:ident => $s:literal),+ $(,)? }) => {
        impl $t {
            /// The name as in the report's JSON.
            pub fn as_str(&self) -> &'static str {
                match self { $($t::$v => $s),+ }
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }
    };
}

/// What was done with one date (`days[].action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DayAction {
    /// Merged into one new compacted file; the inputs retired.
    Compacted,
    /// Nothing to merge (no index input, or already one compacted file).
    #[default]
    NothingToCompact,
    /// Parity failed: flights without an index row.
    Mismatch,
    /// An error stopped the date (see `reason` and the run's `errors`).
    Failed,
    /// Dry run: what a run would merge.
    Planned,
    /// Straggler sweep: late or rewritten files folded into an
    /// already-compacted date.
    Swept,
    /// Dry run of the straggler sweep.
    SweepPlanned,
    /// A repair range's date held by a stuck or quarantined manifest.
    Blocked,
}

named_enum!(DayAction {
    Compacted => "compacted",
    NothingToCompact => "nothing_to_compact",
    Mismatch => "mismatch",
    Failed => "failed",
    Planned => "planned",
    Swept => "swept",
    SweepPlanned => "sweep_planned",
    Blocked => "blocked",
});

/// What recovery did with one manifest (`recovered[].action`): the row of
/// the recovery table (docs/ARCHITECTURE.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    /// The output was never written: manifest deleted, the date compacted again.
    OutputMissing,
    /// The output differed from the manifest: deleted, then the manifest.
    OutputMismatch,
    /// The output verified: the remaining inputs deleted, then the manifest.
    Completed,
    /// Moved aside to `quarantine/` now (unreadable or breaking a rule).
    Quarantined,
    /// Still under `quarantine/` from an earlier run: its date blocked.
    QuarantinedEarlier,
    /// Its inputs cannot be deleted: kept, its date blocked, retried next run.
    Stuck,
}

named_enum!(RecoveryAction {
    OutputMissing => "output_missing",
    OutputMismatch => "output_mismatch",
    Completed => "completed",
    Quarantined => "quarantined",
    QuarantinedEarlier => "quarantined_earlier",
    Stuck => "stuck",
});

/// A file that was left in place, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedFile {
    /// The key.
    pub key: String,
    /// The partition date.
    pub date: Option<NaiveDate>,
    /// The column involved, if any.
    pub column: Option<String>,
    /// Why it was skipped (foreign object, unreadable Parquet, lossy type...).
    pub reason: String,
}

/// The parity gate's verdict on one date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Parity {
    /// Every flight under `flights/` has an index row (per-flight file or compacted row).
    Passed,
    /// Some flights have no index row; the walk stops at this date.
    Mismatch,
}

/// What happened to one date.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct DayReport {
    /// The partition date (UTC).
    pub date: NaiveDate,
    /// What was done: `compacted`, `nothing_to_compact`, `mismatch`,
    /// `failed`, `planned` (dry run), `swept`/`sweep_planned` (straggler
    /// sweep), `blocked` (a repair range's date held by a manifest).
    pub action: DayAction,
    /// Why, in words.
    pub reason: String,
    /// Flight objects under `flights/` for the date.
    pub flights: u64,
    /// The parity gate's verdict; `None` when the date failed before it was checked.
    pub parity: Option<Parity>,
    /// Index files left out of the plan because a live manifest claims them
    /// (in a dry run: also those recovery would delete first).
    pub files_claimed: u64,
    /// Foreign objects in the date's index partition (never touched): every
    /// object that is not an index input (not `.parquet`, hidden `_`/`.`
    /// names, zero bytes, directory markers, nested prefixes).
    pub foreign_objects: u64,
    /// The first [`crate::run::FOREIGN_KEYS_SHOWN`] of them by key, in key
    /// order (`foreign_objects` is the full count).
    pub foreign_keys: Vec<String>,
    /// Inputs left in place because they cannot be read or merged; each is
    /// in the run's `skipped_files` with the reason.
    pub files_skipped: u64,
    /// Input files read (per-flight plus folded compacted files); in a dry
    /// run, the files the run would merge.
    pub files_read: u64,
    /// Of `files_read`, how many were existing compacted files folded in.
    pub files_read_compacted: u64,
    /// Of `files_read`, how many were other multi-row index files (a legacy
    /// migration's `legacy-migration.parquet`, exports) folded in.
    pub files_read_multi_row: u64,
    /// Input files deleted after the output was verified.
    pub files_deleted: u64,
    /// Input files that could not be deleted (see `errors`).
    pub files_delete_failed: u64,
    /// Inputs kept because they changed after they were read (newer version).
    pub files_kept_newer: u64,
    /// Rows in the output.
    pub rows_written: u64,
    /// Rows dropped as older duplicates of the same flight.
    pub duplicates_removed: u64,
    /// Columns the target schema does not know, kept after the known ones
    /// (names matched without case; each with one type for the day:
    /// `merge::widen`).
    pub extra_columns: Vec<String>,
    /// Rows of multi-row inputs whose `s3_key` is null, empty or names no
    /// flight: merged, kept after the flights' rows (no flight to
    /// deduplicate them by), and counted here on every merge of the date.
    pub rows_without_flight: u64,
    /// The inputs that held them, by key (the first
    /// [`crate::run::FOREIGN_KEYS_SHOWN`]).
    pub rows_without_flight_keys: Vec<String>,
    /// The output key, when one was written.
    pub output_key: Option<String>,
    /// Output size in bytes.
    pub bytes_written: u64,
    /// Bytes of input read (in a dry run: of the files it would merge).
    pub bytes_read: u64,
    /// On a `mismatch`: the flights without an index row, sorted.
    pub mismatch_uuids: Vec<String>,
    /// Inputs of this date left in place, with the reason; moved into the
    /// run's `skipped_files` by [`RunReport::add_day`] (not serialised here).
    #[serde(skip)]
    pub skipped: Vec<SkippedFile>,
    /// Wall time spent on the date, in seconds.
    pub seconds: f64,
}

/// A manifest found at the start of the run and what recovery did with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveredManifest {
    /// The manifest key.
    pub key: String,
    /// Its date (from the key), if readable.
    pub date: Option<NaiveDate>,
    /// `output_missing`, `output_mismatch`, `completed`, `quarantined` (moved
    /// aside now: unreadable or breaking a [`crate::recovery::ManifestRule`],
    /// the detail naming it as `rule {code}: ...`), `quarantined_earlier`
    /// (still under `quarantine/`, date blocked), `stuck`. In a dry run: what
    /// recovery would do (nothing is done).
    pub action: RecoveryAction,
    /// Details.
    pub detail: String,
}

/// Everything a run did, field by field (the Python job's fields first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RunReport {
    /// Per-flight (and folded compacted) files merged and deleted in this run.
    pub files_compacted: u64,
    /// Input files whose delete failed (they are still there; the manifest is kept).
    pub files_delete_failed: u64,
    /// Dates compacted (or found empty) and moved past by the watermark in this run.
    pub days_compacted: u64,
    /// The watermark after the run (`None` when nothing was ever compacted).
    pub last_compacted_date: Option<NaiveDate>,
    /// The date parity failed on, if any.
    pub mismatch_date: Option<NaiveDate>,
    /// How many flights of `mismatch_date` have no index row.
    pub mismatch_uuid_count: u64,
    /// Those flights' uuids, sorted.
    pub mismatch_uuids: Vec<String>,
    /// Consecutive invocations blocked on the same mismatch date.
    pub mismatch_runs: u32,
    /// The invocation time (UTC; the EventBridge event's `time` or `--now`).
    pub last_run_at: DateTime<Utc>,
    /// `Success`, `Mismatch` or `Failure`.
    pub last_run_status: Status,
    /// Invocation id (Lambda request id or a fresh UUIDv7 for the CLI).
    pub invocation_id: String,
    /// The bucket.
    pub bucket: String,
    /// Cutoff date: UTC date of `last_run_at` minus `LAG_DAYS`.
    pub cutoff: Option<NaiveDate>,
    /// The watermark before the run.
    pub watermark_before: Option<NaiveDate>,
    /// Watermark lag behind the cutoff after the run, in days; `None`
    /// exactly when the run could not read the watermark state (see
    /// [`RunReport::state_known`]).
    pub watermark_lag_days: Option<i64>,
    /// Why the walk stopped.
    pub stop_reason: StopReason,
    /// When the run stopped at the deadline (`stop_reason` `deadline`): the
    /// first date it did not start. The next scheduled run (or, for a repair
    /// range, the same event again) goes on from there.
    pub resume_date: Option<NaiveDate>,
    /// True for `--dry-run`: nothing was written or deleted.
    pub dry_run: bool,
    /// Rows written to compacted files.
    pub rows_written: u64,
    /// Bytes written to compacted files.
    pub bytes_written: u64,
    /// Older duplicate rows dropped.
    pub duplicates_removed: u64,
    /// Per-flight files that arrived or were rewritten after their date was
    /// compacted, folded in by the straggler sweep (`SWEEP_DAYS`).
    pub stragglers_folded: u64,
    /// Manifests resolved by recovery at the start.
    pub manifests_recovered: u64,
    /// What recovery did, manifest by manifest.
    pub recovered: Vec<RecoveredManifest>,
    /// Per-date detail, in walk order.
    pub days: Vec<DayReport>,
    /// Files left in place with the reason (foreign objects are not listed, only counted).
    pub skipped_files: Vec<SkippedFile>,
    /// Foreign objects seen under walked partitions (never touched).
    pub foreign_objects: u64,
    /// Errors, each with the key/date/setting involved.
    pub errors: Vec<String>,
    /// Reporting failures (MQTT, CloudWatch); they never change the status.
    pub report_errors: Vec<String>,
    /// Wall time of the run, in seconds.
    pub duration_seconds: f64,
}

impl RunReport {
    /// The status as a value (same as `last_run_status`).
    pub fn status(&self) -> Status {
        self.last_run_status
    }

    /// Records an error and marks the run failed.
    pub fn fail(&mut self, error: impl std::fmt::Display) {
        let msg = error.to_string();
        tracing::error!(error = %msg, "run failed");
        self.errors.push(msg);
        self.last_run_status = Status::Failure;
    }

    /// Whether the run read the watermark state (`_compaction_state/watermark.json`),
    /// so that `last_compacted_date`, `mismatch_runs` and the mismatch
    /// fields are the state's and not defaults. The run sets
    /// `watermark_lag_days` whenever it reads the state, and only then.
    pub fn state_known(&self) -> bool {
        self.watermark_lag_days.is_some()
    }

    /// Folds one date's report into the run's: its totals (files deleted
    /// and failed, rows and bytes written, duplicates, foreign objects,
    /// stragglers for a swept date) are added, its skipped files join
    /// `skipped_files`, and it is listed in `days`. The one place where day
    /// figures become run figures.
    pub fn add_day(&mut self, mut day: DayReport) {
        self.add_totals(&mut day);
        if matches!(day.action, DayAction::Swept | DayAction::SweepPlanned) {
            self.stragglers_folded += day
                .files_read
                .saturating_sub(day.files_read_compacted + day.files_read_multi_row);
        }
        self.days.push(day);
    }

    /// [`RunReport::add_day`] for a date that is not listed in `days` (the
    /// straggler sweep's dates with nothing to fold): its totals and
    /// skipped files still count.
    pub fn add_unlisted_day(&mut self, mut day: DayReport) {
        self.add_totals(&mut day);
    }

    fn add_totals(&mut self, day: &mut DayReport) {
        self.files_compacted += day.files_deleted;
        self.files_delete_failed += day.files_delete_failed;
        self.rows_written += day.rows_written;
        self.bytes_written += day.bytes_written;
        self.duplicates_removed += day.duplicates_removed;
        self.foreign_objects += day.foreign_objects;
        self.skipped_files.append(&mut day.skipped);
    }

    /// Records a parity mismatch on `date` with its missing flights.
    pub fn set_mismatch(&mut self, date: NaiveDate, missing: &[uuid::Uuid]) {
        self.mismatch_date = Some(date);
        self.mismatch_uuid_count = missing.len() as u64;
        self.mismatch_uuids = missing.iter().map(uuid::Uuid::to_string).collect();
    }

    /// Number of files skipped (left in place) for a reason.
    pub fn files_skipped(&self) -> u64 {
        self.skipped_files.len() as u64
    }
}
