//! [`RunReport`]: the one value that describes a run.
//!
//! The same value is the Lambda response (Success) or the error message
//! (Mismatch, Failure), the CLI's JSON on stdout, and the source of every
//! CloudWatch metric and MQTT topic. Its JSON Schema is
//! `specs/run-report.schema.json`.
//!
//! The report is bounded whatever the run met: every list keeps at most a
//! fixed number of entries ([`UUIDS_SHOWN`], [`DAYS_SHOWN`],
//! [`SKIPPED_FILES_SHOWN`], [`RECOVERED_SHOWN`], [`ERRORS_SHOWN`], per day
//! [`DAY_UUIDS_SHOWN`] and [`crate::merge::OTHER_DAYS_UUIDS_SHOWN`]) with its
//! exact count and a `*_truncated` marker
//! beside it, and [`RunReport::bound`] keeps the whole JSON (pretty-printed,
//! as the CLI prints it) within [`REPORT_MAX_BYTES`]. The Lambda response
//! is refused over 6 MB, and an asynchronous invocation's failure record
//! loses its payload when request and response exceed 256 KB. The full
//! detail lives elsewhere: `status` lists every missing flight, and the log
//! has one line per skipped file (`file skipped`) and per reported date
//! (`date reported`).
//!
//! ```
//! use archive_compaction::report::{RunReport, SkippedFile, UUIDS_SHOWN};
//! use chrono::NaiveDate;
//!
//! let mut r = RunReport::default();
//! let date = NaiveDate::from_ymd_opt(2026, 7, 19).unwrap();
//! let missing: Vec<uuid::Uuid> = (0..20_000u128).map(uuid::Uuid::from_u128).collect();
//! r.set_mismatch(date, missing.len() as u64, &missing);
//! assert_eq!(r.mismatch_uuid_count, 20_000);
//! assert_eq!(r.mismatch_uuids.len(), UUIDS_SHOWN);
//! assert!(r.mismatch_uuids_truncated);
//! r.bound();
//! assert!(serde_json::to_string_pretty(&r).unwrap().len() <= archive_compaction::report::REPORT_MAX_BYTES);
//! ```

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

/// How many of the missing flights' uuids the report (`mismatch_uuids`)
/// and the MQTT topic `mismatch_uuids` carry: the first ones, sorted
/// (100 uuids are about 3.9 KB of JSON). `mismatch_uuid_count` is the exact
/// count; `status` lists them all.
pub const UUIDS_SHOWN: usize = 100;

/// How many uuids a date's entry in `days` carries (`days[].mismatch_uuids`);
/// `days[].mismatch_uuid_count` is the exact count.
pub const DAY_UUIDS_SHOWN: usize = 20;

/// How many dates `days` lists (the first ones, in walk order); `days_total`
/// counts them all, and the log has one `date reported` line for each.
pub const DAYS_SHOWN: usize = 100;

/// How many files `skipped_files` lists (the first ones, in the order they
/// were met); `skipped_files_total` counts them all, and the log has one
/// `file skipped` line for each.
pub const SKIPPED_FILES_SHOWN: usize = 100;

/// How many manifests `recovered` lists (in the order recovery met them);
/// `recovered_total` counts them all.
pub const RECOVERED_SHOWN: usize = 100;

/// How many errors `errors` lists: the first `ERRORS_SHOWN - 1` and the last
/// one (the error that stopped the run); `errors_total` counts them all,
/// and the log has each (`run failed`).
pub const ERRORS_SHOWN: usize = 50;

/// The most bytes the report's JSON takes, pretty-printed as the CLI prints
/// it (the Lambda response is the compact form, smaller still): 200,000,
/// leaving room under the 256 KB of an asynchronous invocation's failure
/// record (request and response together) for the event and its metadata.
/// [`RunReport::bound`] cuts lists further when the caps above are not
/// enough (very long keys or reasons).
pub const REPORT_MAX_BYTES: usize = 200_000;

/// Outcome of a run: exit code 0, 2, 1 respectively.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, strum::IntoStaticStr,
)]
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
}

named_enum!(Status);

/// Why the walk over dates stopped.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    Default,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
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
    /// SIGTERM or SIGINT (or Lambda's shutdown) asked the run to stop: no
    /// new date or destructive step was started, the lease was released
    /// (`errors` names the signal; `resume_date` the date not started).
    Interrupted,
    /// An error stopped the run.
    Error,
}

/// What was done with one date (`days[].action`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    Default,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
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
    /// Some of the date's parts committed (`parts`), the deadline stopped it
    /// with `files_left` index files left: the next run goes on within the
    /// date (`resume_date`). The watermark stays before it.
    Partial,
}

named_enum!(DayAction);

named_enum!(StopReason);

impl StopReason {
    /// Why a run that `e` stopped stopped: [`StopReason::Interrupted`] for
    /// a signal, [`StopReason::Deadline`] for the deadline, else
    /// [`StopReason::Error`].
    pub fn of(e: &crate::error::Error) -> StopReason {
        match e {
            crate::error::Error::Interrupted { .. } => StopReason::Interrupted,
            crate::error::Error::Deadline { .. } => StopReason::Deadline,
            _ => StopReason::Error,
        }
    }
}

/// What recovery did with one manifest (`recovered[].action`): the row of
/// the recovery table (docs/ARCHITECTURE.md).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
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

named_enum!(RecoveryAction);

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
    /// The input limit it broke, when that is why (`null` otherwise): such
    /// a file was neither fetched whole nor decoded ([`crate::input`]).
    pub limit: Option<LimitBroken>,
}

impl SkippedFile {
    /// `key`, of partition `date`, left in place because it cannot be
    /// merged (`u`'s column, reason and limit).
    pub fn unmergeable(key: &str, date: NaiveDate, u: crate::merge::Unmergeable) -> SkippedFile {
        SkippedFile {
            key: key.to_string(),
            date: Some(date),
            column: u.column,
            reason: u.reason,
            limit: u.limit,
        }
    }
}

pub use crate::merge::{Limit, LimitBroken};

/// A per-flight index file whose bytes cannot be read (not Parquet,
/// truncated, a footer or page that does not decode): its flight's row is
/// in no readable file, so the flight counts as missing its index row and
/// the date fails parity ([`crate::partition::unread_rows`]). The file is
/// left in place; docs/runbook.md, "An unreadable per-flight index file",
/// says how to rebuild it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnreadFile {
    /// The per-flight file's key (`index/year=…/{uuid}.parquet`).
    pub key: String,
    /// The flight it is named after (a flight object under the date's
    /// `flights/` prefix).
    pub flight: uuid::Uuid,
    /// Why it cannot be read, as the decoder said.
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
    /// True when `foreign_keys` names fewer keys than `foreign_objects` counts.
    pub foreign_keys_truncated: bool,
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
    /// Commits of the date in this run: one a part ([`crate::plan::parts`],
    /// `PART_FILES`), more when inputs changed meanwhile.
    #[serde(default)]
    pub parts: u64,
    /// On `partial`: index files of the date left for the next run.
    #[serde(default)]
    pub files_left: u64,
    /// Listings of the date's index partition by this run: one, plus one a
    /// listing window past the first (a date of more than `PART_FILES` ×
    /// [`crate::day::WINDOW_PARTS`] per-flight files) and one a fold of
    /// inputs changed meanwhile.
    #[serde(default)]
    pub passes: u64,
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
    /// On a `mismatch`: the first [`DAY_UUIDS_SHOWN`] flights without an
    /// index row, sorted (cut by [`RunReport::add_day`]).
    pub mismatch_uuids: Vec<String>,
    /// On a `mismatch`: how many flights have no index row (exact).
    pub mismatch_uuid_count: u64,
    /// True when `mismatch_uuids` holds fewer than `mismatch_uuid_count`.
    pub mismatch_uuids_truncated: bool,
    /// On a `mismatch`: the per-flight files of the date's flights that
    /// cannot be read (the first [`DAY_UUIDS_SHOWN`], by flight), each with
    /// why; their flights are in `mismatch_uuids`. Left in place.
    #[serde(default)]
    pub unread_files: Vec<UnreadFile>,
    /// Rows of the day's multi-row inputs (compacted and other multi-row
    /// files) whose `first_message` UTC date is not this date, as in a
    /// backfill file that mixes days: merged into this date's compacted file
    /// where they sit, never moved (in a dry run: in the files it would
    /// merge). When a date takes more than one pass, the pass that read the
    /// most (a later pass reads the earlier one's output again).
    pub rows_of_other_days: u64,
    /// The flights of the first [`crate::merge::OTHER_DAYS_UUIDS_SHOWN`] of
    /// them, in the order read (`rows_of_other_days` is the full count).
    pub other_days_uuids: Vec<String>,
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
    /// Index input files retired by this run: merged into a new compacted
    /// file, which was verified, and then deleted. Every kind counts:
    /// per-flight files, the compacted and other multi-row files folded in
    /// (a sweep that folds one late file into a date's compacted file
    /// retires 2), and the inputs recovery deleted to finish a crashed
    /// commit. The sum of `days[].files_deleted` plus recovery's deletes.
    /// Each file is counted once, by the run whose DeleteObjects removed
    /// it: a stuck manifest retried counts only what the retry deleted, not
    /// the inputs an earlier run already retired.
    pub files_compacted: u64,
    /// Input files whose delete failed (they are still there; the manifest is kept).
    pub files_delete_failed: u64,
    /// Dates compacted (or found empty) and moved past by the watermark in this run.
    pub days_compacted: u64,
    /// The watermark after the run (`None` when nothing was ever compacted).
    pub last_compacted_date: Option<NaiveDate>,
    /// The date the scheduled walk stopped on because its parity failed in
    /// this run (recorded in `watermark.json`). Never set by `--date`,
    /// `--from`/`--to` or a dry run: their verdicts are in `days[]`.
    pub mismatch_date: Option<NaiveDate>,
    /// How many flights of `mismatch_date` fail parity (exact, whatever
    /// the cut of `mismatch_uuids`).
    pub mismatch_uuid_count: u64,
    /// The first [`UUIDS_SHOWN`] of those flights' uuids, sorted (`status`
    /// lists them all).
    pub mismatch_uuids: Vec<String>,
    /// `watermark.json`'s count of consecutive scheduled runs blocked on
    /// its mismatch date; `--date`, ranges and dry runs report it as read.
    pub mismatch_runs: u32,
    /// The invocation time (UTC; the EventBridge event's `time` or `--now`).
    pub last_run_at: DateTime<Utc>,
    /// `Success`, `Mismatch` or `Failure`.
    pub last_run_status: Status,
    /// Invocation id (Lambda request id or a fresh UUIDv7 for the CLI).
    pub invocation_id: String,
    /// The bucket.
    pub bucket: String,
    /// Cutoff date: UTC date of `last_run_at` minus `LAG_DAYS`, never past
    /// the wall clock's date minus `LAG_DAYS` (`last_run_at` may be up to
    /// [`crate::run::MAX_CLOCK_SKEW`] ahead of it; later is refused).
    pub cutoff: Option<NaiveDate>,
    /// The watermark before the run.
    pub watermark_before: Option<NaiveDate>,
    /// Watermark lag behind the cutoff after the run, in days; for a
    /// watermark ahead of today's cutoff, the days ahead
    /// (`watermark_ahead_days`): always the value `WatermarkLagDays`
    /// carries. `None` exactly when the run could not read the watermark
    /// state (see [`RunReport::state_known`]).
    pub watermark_lag_days: Option<i64>,
    /// When the watermark is ahead of today's cutoff (the wall clock's
    /// date minus `LAG_DAYS`): by how many days. The run is then a Failure
    /// saying how to fix it, and `WatermarkLagDays` carries this number so
    /// the lag alarm fires. `None` otherwise.
    #[serde(default)]
    pub watermark_ahead_days: Option<i64>,
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
    /// Files the straggler sweep (`SWEEP_DAYS`) folded into dates already
    /// compacted, beyond the one compacted file each such date is folded
    /// into: late or rewritten per-flight files, other multi-row files, and
    /// extra compacted files (the Python job's stitched rewrites). Per swept
    /// date: `files_read` minus 1 when it read a compacted file.
    pub stragglers_folded: u64,
    /// Manifests resolved by recovery at the start.
    pub manifests_recovered: u64,
    /// What recovery did, manifest by manifest: the first
    /// [`RECOVERED_SHOWN`].
    pub recovered: Vec<RecoveredManifest>,
    /// Per-date detail, in walk order: the first [`DAYS_SHOWN`] dates, a
    /// date with work (any action but `nothing_to_compact`) taking the
    /// place of the last date with nothing to compact once the list is
    /// full. A repair range (and its dry run) lists its dates with work
    /// first, then the empty ones ([`RunReport::work_first`]).
    pub days: Vec<DayReport>,
    /// Files left in place with the reason (foreign objects are not listed,
    /// only counted): the first [`SKIPPED_FILES_SHOWN`].
    pub skipped_files: Vec<SkippedFile>,
    /// Foreign objects seen under walked partitions (never touched).
    pub foreign_objects: u64,
    /// The days' `rows_of_other_days`, summed.
    pub rows_of_other_days: u64,
    /// Errors, one line each, with the operation, key, date or setting
    /// involved; a date blocked by a quarantined or stuck manifest is named
    /// here (`{date} is blocked: …`) on every run until it is resolved. The
    /// first [`ERRORS_SHOWN`] − 1 and the last (`errors_total` counts all).
    pub errors: Vec<String>,
    /// Reporting failures (MQTT, CloudWatch); they never change the status.
    /// At most one per sink and MQTT exchange, so a handful.
    pub report_errors: Vec<String>,
    /// Wall time of the run, in seconds.
    pub duration_seconds: f64,
    /// True when `mismatch_uuids` holds fewer uuids than `mismatch_uuid_count`.
    pub mismatch_uuids_truncated: bool,
    /// Dates reported (exact; `days` lists the first ones).
    pub days_total: u64,
    /// True when `days` lists fewer than `days_total`.
    pub days_truncated: bool,
    /// Files left in place with a reason (exact; `skipped_files` lists the
    /// first ones).
    pub skipped_files_total: u64,
    /// True when `skipped_files` lists fewer than `skipped_files_total`.
    pub skipped_files_truncated: bool,
    /// Manifests recovery met (exact; `recovered` lists the first ones).
    pub recovered_total: u64,
    /// True when `recovered` lists fewer than `recovered_total`.
    pub recovered_truncated: bool,
    /// Errors recorded (exact; `errors` lists some of them).
    pub errors_total: u64,
    /// True when `errors` lists fewer than `errors_total`.
    pub errors_truncated: bool,
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
        self.errors_total += 1;
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
    ///
    /// Bounded: the day's `mismatch_uuids` is cut to [`DAY_UUIDS_SHOWN`]
    /// (its `mismatch_uuid_count` exact), `days` lists the first
    /// [`DAYS_SHOWN`] dates (`days_total` counts every one) and
    /// `skipped_files` the first [`SKIPPED_FILES_SHOWN`] files. Each date
    /// is logged as one `date reported` line (its JSON, bounded by the same
    /// caps), each skipped file as one `file skipped` line.
    pub fn add_day(&mut self, mut day: DayReport) {
        self.add_totals(&mut day);
        if matches!(day.action, DayAction::Swept | DayAction::SweepPlanned) {
            self.stragglers_folded += day
                .files_read
                .saturating_sub(day.files_read_compacted.min(1));
        }
        let uuids = day.mismatch_uuids.len() as u64;
        day.mismatch_uuid_count = day.mismatch_uuid_count.max(uuids);
        if cut(&mut day.mismatch_uuids, DAY_UUIDS_SHOWN) {
            day.mismatch_uuids_truncated = true;
        }
        cut(&mut day.unread_files, DAY_UUIDS_SHOWN);
        day.foreign_keys_truncated = (day.foreign_keys.len() as u64) < day.foreign_objects;
        // `rows_of_other_days` is the exact count beside it.
        cut(
            &mut day.other_days_uuids,
            crate::merge::OTHER_DAYS_UUIDS_SHOWN,
        );
        tracing::info!(
            date = %day.date,
            action = %day.action,
            day = %serde_json::to_string(&day).unwrap_or_default(),
            "date reported"
        );
        self.days_total += 1;
        if self.days.len() < DAYS_SHOWN {
            self.days.push(day);
            return;
        }
        self.days_truncated = true;
        // A date with work is never hidden behind empty ones (a migration's
        // range of mostly empty dates): it takes the last empty one's place.
        if day.action != DayAction::NothingToCompact
            && let Some(i) =
                (self.days.iter()).rposition(|d| d.action == DayAction::NothingToCompact)
        {
            self.days.remove(i);
            self.days.push(day);
        }
    }

    /// Orders `days` with the dates that have work (any action but
    /// `nothing_to_compact`) first, each group in date order: what a repair
    /// range's report (and its dry run, "the plan") shows first.
    pub fn work_first(&mut self) {
        self.days
            .sort_by_key(|d| (d.action == DayAction::NothingToCompact, d.date));
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
        self.rows_of_other_days += day.rows_of_other_days;
        for f in day.skipped.drain(..) {
            tracing::warn!(key = %f.key, date = ?f.date, column = ?f.column, reason = %f.reason,
                limit = f.limit.map(|l| l.limit.as_str()), found = f.limit.map(|l| l.found),
                allowed = f.limit.map(|l| l.allowed), "file skipped: left in place");
            self.skipped_files_total += 1;
            if self.skipped_files.len() < SKIPPED_FILES_SHOWN {
                self.skipped_files.push(f);
            } else {
                self.skipped_files_truncated = true;
            }
        }
    }

    /// Records a parity mismatch on `date` of `count` missing flights,
    /// `first` the first of them in uuid order (at least [`UUIDS_SHOWN`]
    /// when there are that many; a date's set may be on disk, so only those
    /// are asked for): `mismatch_uuid_count` is `count`, `mismatch_uuids`
    /// the first [`UUIDS_SHOWN`].
    pub fn set_mismatch(&mut self, date: NaiveDate, count: u64, first: &[uuid::Uuid]) {
        self.mismatch_date = Some(date);
        self.mismatch_uuid_count = count;
        self.mismatch_uuids = (first.iter().take(UUIDS_SHOWN))
            .map(uuid::Uuid::to_string)
            .collect();
        self.mismatch_uuids_truncated = count > UUIDS_SHOWN as u64;
    }

    /// Notes what one read of `day`'s inputs found of rows of other days:
    /// the read that found the most wins (a later pass of a date reads the
    /// rows of the earlier pass's output again, so adding would count them
    /// twice).
    pub fn note_other_days(day: &mut DayReport, found: &crate::merge::OtherDays) {
        if found.rows > day.rows_of_other_days {
            day.rows_of_other_days = found.rows;
            day.other_days_uuids = found.uuids.iter().map(uuid::Uuid::to_string).collect();
        }
    }

    /// Number of files skipped (left in place) for a reason (exact, also
    /// when `skipped_files` is cut).
    pub fn files_skipped(&self) -> u64 {
        self.skipped_files_total
    }

    /// Lists what recovery did with each manifest: the first
    /// [`RECOVERED_SHOWN`] in `recovered`, all of them counted in
    /// `recovered_total`.
    pub fn set_recovered(&mut self, recovered: &[RecoveredManifest]) {
        self.recovered_total = recovered.len() as u64;
        self.recovered = recovered.iter().take(RECOVERED_SHOWN).cloned().collect();
        self.recovered_truncated = recovered.len() > RECOVERED_SHOWN;
    }

    /// Bounds the report for its consumers, when nothing is added any more
    /// (after reporting: `report_errors`); calling it again changes nothing.
    /// `errors` keeps its first [`ERRORS_SHOWN`] − 1 entries and the last
    /// (`errors_total` counts them all), `recovered` its first
    /// [`RECOVERED_SHOWN`], each day's `other_days_uuids` its first
    /// [`crate::merge::OTHER_DAYS_UUIDS_SHOWN`] (`rows_of_other_days`, per
    /// day and summed for the run, stays exact). Then, while
    /// the pretty-printed JSON is over [`REPORT_MAX_BYTES`], the list taking
    /// the most bytes (`days`, `skipped_files`, `recovered`, `errors`,
    /// `mismatch_uuids`) is halved and marked cut. Counts stay exact.
    pub fn bound(&mut self) {
        self.recovered_total = self.recovered_total.max(self.recovered.len() as u64);
        if cut(&mut self.recovered, RECOVERED_SHOWN) {
            self.recovered_truncated = true;
        }
        self.errors_total = self.errors_total.max(self.errors.len() as u64);
        if cut_keeping_last(&mut self.errors, ERRORS_SHOWN) {
            self.errors_truncated = true;
        }
        self.mismatch_uuid_count = (self.mismatch_uuid_count).max(self.mismatch_uuids.len() as u64);
        self.days_total = self.days_total.max(self.days.len() as u64);
        for day in &mut self.days {
            cut(
                &mut day.other_days_uuids,
                crate::merge::OTHER_DAYS_UUIDS_SHOWN,
            );
        }
        self.skipped_files_total = (self.skipped_files_total).max(self.skipped_files.len() as u64);
        while json_len(self) > REPORT_MAX_BYTES {
            let sizes = [
                json_len(&self.days),
                json_len(&self.skipped_files),
                json_len(&self.recovered),
                json_len(&self.errors),
                json_len(&self.mismatch_uuids),
            ];
            let (largest, _) = (sizes.iter().enumerate())
                .filter(|(_, n)| **n > 2)
                .max_by_key(|(_, n)| **n)
                .unwrap_or((usize::MAX, &0));
            match largest {
                0 => self.days_truncated |= halve(&mut self.days, cut),
                1 => self.skipped_files_truncated |= halve(&mut self.skipped_files, cut),
                2 => self.recovered_truncated |= halve(&mut self.recovered, cut),
                3 => self.errors_truncated |= halve(&mut self.errors, cut_keeping_last),
                4 => self.mismatch_uuids_truncated |= halve(&mut self.mismatch_uuids, cut),
                // Every list empty: the rest is a few hundred bytes of figures.
                _ => break,
            }
        }
    }
}

/// Cuts `list` to half its length with `how`; true when something was cut.
fn halve<T>(list: &mut Vec<T>, how: fn(&mut Vec<T>, usize) -> bool) -> bool {
    let half = list.len() / 2;
    how(list, half)
}

/// Cuts `list` to its first `keep` entries; true when something was cut.
fn cut<T>(list: &mut Vec<T>, keep: usize) -> bool {
    let cut = list.len() > keep;
    list.truncate(keep);
    cut
}

/// Cuts `list` to its first `keep - 1` entries and its last one (none when
/// `keep` is 0); true when something was cut.
fn cut_keeping_last<T>(list: &mut Vec<T>, keep: usize) -> bool {
    if list.len() <= keep {
        return false;
    }
    let last = list.pop();
    list.truncate(keep.saturating_sub(1));
    if keep > 0 {
        list.extend(last);
    }
    true
}

/// The length of `value`'s pretty-printed JSON, in bytes.
fn json_len(value: &impl Serialize) -> usize {
    serde_json::to_string_pretty(value).map_or(0, |s| s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// strum's names (logs, `as_str`) are serde's (the report's JSON), for
    /// every variant.
    #[test]
    fn logged_names_are_the_json_names() {
        fn check<T: Serialize + strum::VariantArray + Into<&'static str> + Clone>() {
            for v in T::VARIANTS {
                let json = serde_json::to_value(v).unwrap();
                let name: &'static str = v.clone().into();
                assert_eq!(json, serde_json::Value::from(name));
            }
        }
        check::<StopReason>();
        check::<DayAction>();
        check::<RecoveryAction>();
    }

    fn date(n: u64) -> NaiveDate {
        NaiveDate::from_ymd_opt(2016, 1, 1).unwrap() + chrono::Days::new(n)
    }

    fn uuids(n: usize) -> Vec<uuid::Uuid> {
        (0..n as u128).map(uuid::Uuid::from_u128).collect()
    }

    fn skipped(n: usize, reason_len: usize) -> Vec<SkippedFile> {
        (0..n)
            .map(|i| SkippedFile {
                key: format!("index/year=2026/month=07/day=19/{i:036}.parquet"),
                date: Some(date(0)),
                column: Some("first_message".into()),
                reason: "r".repeat(reason_len),
                limit: None,
            })
            .collect()
    }

    /// The names logs print (`Display`, `as_str`) are the report's JSON
    /// names, for every stop reason, day action and recovery action.
    fn json_bytes(r: &RunReport) -> usize {
        serde_json::to_string_pretty(r).unwrap().len()
    }

    #[test]
    fn mismatch_uuids_at_their_cap() {
        let mut r = RunReport::default();
        r.set_mismatch(date(0), UUIDS_SHOWN as u64, &uuids(UUIDS_SHOWN));
        assert_eq!(r.mismatch_uuids.len(), UUIDS_SHOWN);
        assert!(!r.mismatch_uuids_truncated);
        r.set_mismatch(date(0), UUIDS_SHOWN as u64 + 1, &uuids(UUIDS_SHOWN + 1));
        assert_eq!(r.mismatch_uuids.len(), UUIDS_SHOWN);
        assert_eq!(r.mismatch_uuid_count, UUIDS_SHOWN as u64 + 1);
        assert!(r.mismatch_uuids_truncated);
        // The first ones, in order.
        assert_eq!(r.mismatch_uuids[0], uuid::Uuid::from_u128(0).to_string());
        assert_eq!(
            r.mismatch_uuids[UUIDS_SHOWN - 1],
            uuid::Uuid::from_u128(UUIDS_SHOWN as u128 - 1).to_string()
        );
    }

    #[test]
    fn a_days_mismatch_uuids_and_foreign_keys_at_their_cap() {
        let day = |n: usize, foreign: u64| DayReport {
            date: date(0),
            action: DayAction::Mismatch,
            mismatch_uuids: uuids(n).iter().map(uuid::Uuid::to_string).collect(),
            foreign_objects: foreign,
            foreign_keys: (0..foreign.min(20)).map(|i| format!("k{i}")).collect(),
            ..Default::default()
        };
        let mut r = RunReport::default();
        r.add_day(day(DAY_UUIDS_SHOWN, 20));
        r.add_day(day(DAY_UUIDS_SHOWN + 1, 21));
        let (at, over) = (&r.days[0], &r.days[1]);
        assert_eq!(
            (at.mismatch_uuids.len(), at.mismatch_uuid_count),
            (DAY_UUIDS_SHOWN, DAY_UUIDS_SHOWN as u64)
        );
        assert!(!at.mismatch_uuids_truncated && !at.foreign_keys_truncated);
        assert_eq!(
            (over.mismatch_uuids.len(), over.mismatch_uuid_count),
            (DAY_UUIDS_SHOWN, DAY_UUIDS_SHOWN as u64 + 1)
        );
        assert!(over.mismatch_uuids_truncated && over.foreign_keys_truncated);
    }

    #[test]
    fn rows_of_other_days_summed_and_their_uuids_at_their_cap() {
        use crate::merge::OTHER_DAYS_UUIDS_SHOWN;
        let day = |i: u64, rows: u64, n: usize| DayReport {
            date: date(i),
            rows_of_other_days: rows,
            other_days_uuids: uuids(n).iter().map(uuid::Uuid::to_string).collect(),
            skipped: skipped(1, 10),
            ..Default::default()
        };
        let mut r = RunReport::default();
        r.add_day(day(0, 3, 3));
        r.add_day(day(1, 40, OTHER_DAYS_UUIDS_SHOWN + 5));
        r.add_unlisted_day(day(2, 2, 2));
        assert_eq!(r.rows_of_other_days, 45);
        assert_eq!(r.days[0].other_days_uuids.len(), 3);
        assert_eq!(r.days[1].other_days_uuids.len(), OTHER_DAYS_UUIDS_SHOWN);
        assert_eq!(r.days[1].rows_of_other_days, 40);
        // The skipped files of every day, listed and counted.
        assert_eq!(r.files_skipped(), 3);
        // bound() keeps the cap on a day pushed past add_day, and the counts.
        r.days[0].other_days_uuids = uuids(50).iter().map(uuid::Uuid::to_string).collect();
        r.bound();
        assert_eq!(r.days[0].other_days_uuids.len(), OTHER_DAYS_UUIDS_SHOWN);
        assert_eq!(
            (r.rows_of_other_days, r.days[0].rows_of_other_days),
            (45, 3)
        );
    }

    #[test]
    fn days_at_their_cap() {
        let mut r = RunReport::default();
        for i in 0..DAYS_SHOWN {
            r.add_day(DayReport {
                date: date(i as u64),
                ..Default::default()
            });
        }
        assert_eq!(
            (r.days.len(), r.days_total),
            (DAYS_SHOWN, DAYS_SHOWN as u64)
        );
        assert!(!r.days_truncated);
        r.add_day(DayReport {
            date: date(DAYS_SHOWN as u64),
            files_deleted: 7,
            ..Default::default()
        });
        assert_eq!(r.days.len(), DAYS_SHOWN);
        assert_eq!(r.days_total, DAYS_SHOWN as u64 + 1);
        assert!(r.days_truncated);
        // An unlisted date still counts in the run's figures.
        assert_eq!(r.files_compacted, 7);
        assert_eq!(r.days.last().unwrap().date, date(DAYS_SHOWN as u64 - 1));
    }

    #[test]
    fn skipped_files_at_their_cap() {
        let mut r = RunReport::default();
        r.add_day(DayReport {
            skipped: skipped(SKIPPED_FILES_SHOWN, 10),
            ..Default::default()
        });
        assert_eq!(r.skipped_files.len(), SKIPPED_FILES_SHOWN);
        assert_eq!(r.files_skipped(), SKIPPED_FILES_SHOWN as u64);
        assert!(!r.skipped_files_truncated);
        r.add_unlisted_day(DayReport {
            skipped: skipped(1, 10),
            ..Default::default()
        });
        assert_eq!(r.skipped_files.len(), SKIPPED_FILES_SHOWN);
        assert_eq!(r.skipped_files_total, SKIPPED_FILES_SHOWN as u64 + 1);
        assert_eq!(r.files_skipped(), SKIPPED_FILES_SHOWN as u64 + 1);
        assert!(r.skipped_files_truncated);
    }

    #[test]
    fn recovered_at_its_cap() {
        let manifests = |n: usize| -> Vec<RecoveredManifest> {
            (0..n)
                .map(|i| RecoveredManifest {
                    key: format!("_compaction_state/manifests/2026-07-19/{i}.json"),
                    date: Some(date(0)),
                    action: RecoveryAction::Completed,
                    detail: "done".into(),
                })
                .collect()
        };
        let mut r = RunReport::default();
        r.set_recovered(&manifests(RECOVERED_SHOWN));
        assert_eq!(r.recovered.len(), RECOVERED_SHOWN);
        assert!(!r.recovered_truncated);
        r.set_recovered(&manifests(RECOVERED_SHOWN + 1));
        assert_eq!(r.recovered.len(), RECOVERED_SHOWN);
        assert_eq!(r.recovered_total, RECOVERED_SHOWN as u64 + 1);
        assert!(r.recovered_truncated);
    }

    #[test]
    fn errors_at_their_cap_keep_the_last() {
        let mut r = RunReport::default();
        for i in 0..ERRORS_SHOWN {
            r.fail(format!("error {i}"));
        }
        r.bound();
        assert_eq!(r.errors.len(), ERRORS_SHOWN);
        assert!(!r.errors_truncated);
        r.fail("the one that stopped the run");
        r.bound();
        assert_eq!(r.errors.len(), ERRORS_SHOWN);
        assert_eq!(r.errors_total, ERRORS_SHOWN as u64 + 1);
        assert!(r.errors_truncated);
        assert_eq!(
            r.errors[ERRORS_SHOWN - 2],
            format!("error {}", ERRORS_SHOWN - 2)
        );
        assert_eq!(r.errors.last().unwrap(), "the one that stopped the run");
        // Again: nothing changes.
        let before = r.clone();
        r.bound();
        assert_eq!(r, before);
    }

    #[test]
    fn the_issues_scales_of_trouble_stay_within_the_bound() {
        // 20,000 missing flights on one date.
        let mut r = RunReport::default();
        let missing = uuids(20_000);
        r.add_day(DayReport {
            date: date(0),
            action: DayAction::Mismatch,
            mismatch_uuids: missing.iter().map(uuid::Uuid::to_string).collect(),
            ..Default::default()
        });
        r.set_mismatch(date(0), missing.len() as u64, &missing);
        r.bound();
        assert!(json_bytes(&r) <= 20_000, "{}", json_bytes(&r));
        assert_eq!(r.mismatch_uuid_count, 20_000);
        assert_eq!(r.days[0].mismatch_uuid_count, 20_000);

        // 50,000 skipped files.
        let mut r = RunReport::default();
        r.add_day(DayReport {
            skipped: skipped(50_000, 120),
            ..Default::default()
        });
        r.bound();
        assert!(json_bytes(&r) <= 60_000, "{}", json_bytes(&r));
        assert_eq!(r.files_skipped(), 50_000);

        // A 3,660-day repair range, every date blocked.
        let mut r = RunReport::default();
        for i in 0..3_660 {
            r.add_day(DayReport {
                date: date(i),
                action: DayAction::Blocked,
                reason: "manifest _compaction_state/manifests/... is stuck".into(),
                ..Default::default()
            });
            r.fail(format!("{} is blocked: a stuck manifest", date(i)));
        }
        r.bound();
        assert!(json_bytes(&r) <= 150_000, "{}", json_bytes(&r));
        assert_eq!((r.days_total, r.errors_total), (3_660, 3_660));
        assert!(r.days_truncated && r.errors_truncated);
    }

    #[test]
    fn the_byte_bound_holds_when_the_caps_are_not_enough() {
        // Every list at its cap with entries as long as S3 keys get (1,024
        // bytes) and long reasons: the caps alone would give megabytes.
        let long = |c: char| c.to_string().repeat(1_024);
        let mut r = RunReport::default();
        for i in 0..3_660 {
            r.add_day(DayReport {
                date: date(i),
                action: DayAction::Failed,
                reason: long('r'),
                foreign_objects: 50,
                foreign_keys: (0..20).map(|_| long('k')).collect(),
                mismatch_uuids: (0..50).map(|_| long('u')).collect(),
                skipped: skipped(20, 2_000),
                ..Default::default()
            });
            r.fail(long('e'));
        }
        r.set_recovered(
            &(0..500)
                .map(|_| RecoveredManifest {
                    key: long('m'),
                    date: None,
                    action: RecoveryAction::Stuck,
                    detail: long('d'),
                })
                .collect::<Vec<_>>(),
        );
        r.report_errors = (0..3).map(|_| long('x')).collect();
        r.bound();
        let bytes = json_bytes(&r);
        assert!(bytes <= REPORT_MAX_BYTES, "{bytes}");
        assert!(
            bytes > REPORT_MAX_BYTES / 4,
            "cut much more than needed: {bytes}"
        );
        // Counts exact, every cut list marked.
        assert_eq!(r.days_total, 3_660);
        assert_eq!(r.skipped_files_total, 3_660 * 20);
        assert_eq!(r.errors_total, 3_660);
        assert_eq!(r.recovered_total, 500);
        assert!(r.days_truncated && r.skipped_files_truncated);
        assert!(r.errors_truncated && r.recovered_truncated);
        assert!(!r.days.is_empty(), "some detail is left");
    }
}
