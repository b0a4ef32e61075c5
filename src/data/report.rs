//! [`RunReport`], the one value that describes a run: the Lambda response or error message, the
//! CLI's JSON, and the source of every metric and MQTT topic. `specs/run-report.schema.json`
//! documents each JSON field (the types here allow missing field docs for it). Each list keeps
//! its first `*_SHOWN` entries ([`Shortened`]), beside an exact count and a `*_truncated` marker
//! where the JSON has them.
//!
//! ```
//! use archive_compaction::data::report::{MISMATCH_UUIDS_SHOWN, RunReport, SkippedFile};
//! use chrono::NaiveDate;
//!
//! let mut r = RunReport::default();
//! let date = NaiveDate::from_ymd_opt(2026, 7, 19).unwrap();
//! let missing: Vec<uuid::Uuid> = (0..20_000u128).map(uuid::Uuid::from_u128).collect();
//! r.set_mismatch(date, missing.len() as u64, &missing);
//! assert_eq!(r.mismatch_uuid_count, 20_000);
//! assert_eq!(r.mismatch_uuids.len(), MISMATCH_UUIDS_SHOWN);
//! assert!(r.mismatch_uuids_truncated);
//! r.bound();
//! assert!(serde_json::to_string_pretty(&r).unwrap().len() <= archive_compaction::data::report::REPORT_MAX_BYTES);
//! ```

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::data::merge::{LimitBroken, OTHER_DAYS_UUIDS_SHOWN, Unmergeable};
use crate::infra::text::Shortened;

/// Uuids the run's `mismatch_uuids` and its MQTT topic carry, sorted (100 are ~3.9 KB of JSON).
pub const MISMATCH_UUIDS_SHOWN: usize = 100;

/// Flights a date's list names (`days[].mismatch_uuids`, `status`'s text); counts are exact.
pub const DAY_UUIDS_SHOWN: usize = 20;

/// Keys a date's list names (`foreign_keys`, `rows_without_flight_keys`, `unread_files`).
pub const DAY_KEYS_SHOWN: usize = 20;

/// Dates `days` lists (the first, in walk order); the log has a `date reported` line for each.
pub const DAYS_SHOWN: usize = 100;

/// Files `skipped_files` lists (the first met); the log has a `file skipped` line for each.
pub const SKIPPED_FILES_SHOWN: usize = 100;

/// Manifests `recovered` lists (in the order recovery met them).
pub const RECOVERED_SHOWN: usize = 100;

/// Errors `errors` lists: the first `ERRORS_SHOWN - 1` and the last (the one that stopped the run).
pub const ERRORS_SHOWN: usize = 50;

/// Bytes of the pretty-printed JSON: room under the 256 KB of an asynchronous
/// invocation's failure record (request and response together).
pub const REPORT_MAX_BYTES: usize = 200_000;

/// Outcome of a run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, strum::IntoStaticStr,
)]
pub enum Status {
    /// Everything up to the cutoff (or the deadline) is compacted.
    #[default]
    Success = 0,
    /// The walk stopped at a date whose parity failed (flights without index rows).
    Mismatch = 2,
    /// Something failed; see `errors`.
    Failure = 1,
}

impl Status {
    /// The CLI exit code, the variant's number: 0 Success, 2 Mismatch, 1 Failure.
    pub fn exit_code(self) -> i32 {
        self as i32
    }
}

named_enum!(Status);

/// Why the walk over dates stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum StopReason {
    /// Every date up to the cutoff is compacted.
    #[default]
    ReachedCutoff,
    /// The watermark is already at (or past) the cutoff.
    NothingToDo,
    /// No watermark, no `START_DATE`, and no `index/` or `flights/` partition: nothing to start from.
    NoPartitions,
    /// Parity failed on `mismatch_date`.
    Mismatch,
    /// Less time was left than the deadline margin; the next run continues.
    Deadline,
    /// Another invocation holds the lease; this one did nothing.
    LeaseHeld,
    /// A date is blocked by a stuck or quarantined manifest.
    BlockedByManifest,
    /// A repair range (`--from`/`--to`) or `--date` went through its last date.
    EndOfRange,
    /// SIGTERM or SIGINT: no new date or destructive step started, the lease released.
    Interrupted,
    /// An error stopped the run.
    Error,
}

/// What was done with one date (`days[].action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum DayAction {
    /// Merged into a new compacted file a part ([`DayReport::parts`]); the inputs retired.
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
    /// Straggler sweep: late or rewritten files folded into an already-compacted date.
    Swept,
    /// Dry run of the straggler sweep.
    SweepPlanned,
    /// A repair range's date held by a stuck or quarantined manifest.
    Blocked,
    /// Some parts committed, then the deadline stopped it; the watermark stays before it.
    Partial,
}

named_enum!(DayAction);

named_enum!(StopReason);

impl StopReason {
    /// Why a run that `e` stopped stopped: a signal, the deadline, else [`StopReason::Error`].
    pub fn of(e: &crate::infra::error::Error) -> StopReason {
        match e {
            crate::infra::error::Error::Interrupted { .. } => StopReason::Interrupted,
            crate::infra::error::Error::Deadline { .. } => StopReason::Deadline,
            _ => StopReason::Error,
        }
    }
}

/// What recovery did with one manifest (`recovered[].action`): a row of the recovery table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::Display, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
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
#[allow(missing_docs)]
pub struct SkippedFile {
    pub key: String,
    pub date: Option<NaiveDate>,
    pub column: Option<String>,
    pub reason: String,
    pub limit: Option<LimitBroken>,
}

impl SkippedFile {
    /// `key`, of partition `date`, left in place because it cannot be merged (`u`).
    pub fn unmergeable(key: &str, date: NaiveDate, u: Unmergeable) -> SkippedFile {
        SkippedFile {
            key: key.to_string(),
            date: Some(date),
            column: u.column,
            reason: u.reason,
            limit: u.limit,
        }
    }
}

/// A per-flight index file whose bytes cannot be read: its flight counts as
/// missing its index row. Left in place; docs/runbook.md, "An unreadable per-flight index file".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct UnreadFile {
    pub key: String,
    pub flight: uuid::Uuid,
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
#[serde(default)] // a field an older report lacks reads as its default
#[allow(missing_docs)]
pub struct DayReport {
    pub date: NaiveDate,
    pub action: DayAction,
    pub reason: String,
    pub flights: u64,
    pub parity: Option<Parity>,
    pub files_claimed: u64,
    pub foreign_objects: u64,
    pub foreign_keys: Vec<String>,
    pub foreign_keys_truncated: bool,
    pub files_skipped: u64,
    pub files_read: u64,
    pub files_read_compacted: u64,
    pub files_read_multi_row: u64,
    pub files_deleted: u64,
    pub files_delete_failed: u64,
    pub files_kept_newer: u64,
    pub rows_written: u64,
    pub duplicates_removed: u64,
    pub parts: u64,
    pub files_left: u64,
    pub passes: u64,
    pub extra_columns: Vec<String>,
    pub rows_without_flight: u64,
    pub rows_without_flight_keys: Vec<String>,
    pub output_key: Option<String>,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub mismatch_uuids: Vec<String>,
    pub mismatch_uuid_count: u64,
    pub mismatch_uuids_truncated: bool,
    pub unread_files: Vec<UnreadFile>,
    pub unread_files_truncated: bool,
    pub rows_of_other_days: u64,
    pub other_days_uuids: Vec<String>,
    pub other_days_uuids_truncated: bool,
    /// Inputs left in place, moved into the run's `skipped_files` by [`RunReport::add_day`].
    #[serde(skip)]
    pub skipped: Vec<SkippedFile>,
    pub seconds: f64,
    pub plan: PlanReport,
}

/// A date's planned parts, every pass's, in commit order: the first [`PLAN_PARTS_SHOWN`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(missing_docs)]
pub struct PlanReport {
    pub parts: Vec<PlannedPartReport>,
    pub parts_planned: u64,
}

/// Parts a [`PlanReport`] lists.
pub const PLAN_PARTS_SHOWN: usize = 100;

/// One planned part of a date.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)] // a field an older report lacks reads as its default
#[allow(missing_docs)]
pub struct PlannedPartReport {
    pub pass: u64,
    pub files: u64,
    pub bytes: u64,
    pub estimate_mb: u64,
    pub first_key: String,
    pub last_key: String,
    pub keys_sha256: String,
    pub committed: bool,
    pub cut: Option<String>,
}

impl PlanReport {
    /// Shows `parts` from `at` on, in place of those there (a pass's plan, again after a cut),
    /// `planned` parts counted before them; only those shown are made.
    pub fn show_from(
        &mut self,
        at: usize,
        planned: u64,
        parts: impl ExactSizeIterator<Item = PlannedPartReport>,
    ) {
        self.parts.truncate(at);
        self.parts_planned = planned + parts.len() as u64;
        let room = PLAN_PARTS_SHOWN.saturating_sub(self.parts.len());
        self.parts.extend(parts.take(room));
    }
}

impl DayReport {
    /// Cuts the date's lists to their caps (idempotent).
    fn shortened_lists(&mut self) {
        Shortened::new(&mut self.mismatch_uuids, DAY_UUIDS_SHOWN)
            .counted(&mut self.mismatch_uuid_count, Some(&mut self.mismatch_uuids_truncated))
            .to_cap();
        Shortened::new(&mut self.foreign_keys, DAY_KEYS_SHOWN)
            .counted(&mut self.foreign_objects, Some(&mut self.foreign_keys_truncated))
            .to_cap();
        Shortened::new(&mut self.rows_without_flight_keys, DAY_KEYS_SHOWN).to_cap();
        // Marked before the cut, and kept: neither list has its count in the JSON.
        self.unread_files_truncated |= self.unread_files.len() > DAY_KEYS_SHOWN;
        Shortened::new(&mut self.unread_files, DAY_KEYS_SHOWN).to_cap();
        let (n, cap) = (self.other_days_uuids.len(), OTHER_DAYS_UUIDS_SHOWN);
        self.other_days_uuids_truncated |=
            n > cap || (n == cap && self.rows_of_other_days > n as u64);
        Shortened::new(&mut self.other_days_uuids, cap).to_cap();
    }
}

/// A manifest found at the start of the run and what recovery did with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct RecoveredManifest {
    pub key: String,
    pub date: Option<NaiveDate>,
    pub action: RecoveryAction,
    pub detail: String,
}

/// Everything a run did (the Python job's fields first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[allow(missing_docs)]
pub struct RunReport {
    pub files_compacted: u64,
    pub files_delete_failed: u64,
    pub days_compacted: u64,
    pub last_compacted_date: Option<NaiveDate>,
    pub mismatch_date: Option<NaiveDate>,
    pub mismatch_uuid_count: u64,
    pub mismatch_uuids: Vec<String>,
    pub mismatch_runs: u32,
    pub last_run_at: DateTime<Utc>,
    pub last_run_status: Status,
    pub invocation_id: String,
    pub bucket: String,
    pub cutoff: Option<NaiveDate>,
    pub watermark_before: Option<NaiveDate>,
    pub watermark_lag_days: Option<i64>,
    pub watermark_ahead_days: Option<i64>,
    pub stop_reason: StopReason,
    pub resume_date: Option<NaiveDate>,
    pub dry_run: bool,
    pub rows_written: u64,
    pub bytes_written: u64,
    pub duplicates_removed: u64,
    pub stragglers_folded: u64,
    pub manifests_recovered: u64,
    pub recovered: Vec<RecoveredManifest>,
    pub days: Vec<DayReport>,
    pub skipped_files: Vec<SkippedFile>,
    pub foreign_objects: u64,
    pub rows_of_other_days: u64,
    pub errors: Vec<String>,
    pub report_errors: Vec<String>,
    pub duration_seconds: f64,
    pub mismatch_uuids_truncated: bool,
    pub days_total: u64,
    pub days_truncated: bool,
    pub skipped_files_total: u64,
    pub skipped_files_truncated: bool,
    pub recovered_total: u64,
    pub recovered_truncated: bool,
    pub errors_total: u64,
    pub errors_truncated: bool,
}

struct Lists<'a> {
    days: Shortened<'a, DayReport>,
    skipped_files: Shortened<'a, SkippedFile>,
    recovered: Shortened<'a, RecoveredManifest>,
    errors: Shortened<'a, String>,
    mismatch_uuids: Shortened<'a, String>,
}

impl Lists<'_> {
    /// Each list, in the order [`RunReport::bound`] breaks ties by.
    fn each(&mut self) -> [&mut dyn Bounded; 5] {
        [
            &mut self.days,
            &mut self.skipped_files,
            &mut self.recovered,
            &mut self.errors,
            &mut self.mismatch_uuids,
        ]
    }
}

impl RunReport {
    /// Records an error and marks the run failed.
    pub fn fail(&mut self, error: impl std::fmt::Display) {
        let msg = error.to_string();
        tracing::error!(error = %msg, "run failed");
        self.errors.push(msg);
        self.errors_total += 1;
        self.last_run_status = Status::Failure;
    }

    /// Whether the run read `watermark.json` (then and only then `watermark_lag_days` is set).
    pub fn state_known(&self) -> bool {
        self.watermark_lag_days.is_some()
    }

    fn lists(&mut self) -> Lists<'_> {
        Lists {
            days: Shortened::new(&mut self.days, DAYS_SHOWN)
                .counted(&mut self.days_total, Some(&mut self.days_truncated)),
            skipped_files: Shortened::new(&mut self.skipped_files, SKIPPED_FILES_SHOWN)
                .counted(&mut self.skipped_files_total, Some(&mut self.skipped_files_truncated)),
            recovered: Shortened::new(&mut self.recovered, RECOVERED_SHOWN)
                .counted(&mut self.recovered_total, Some(&mut self.recovered_truncated)),
            errors: Shortened::new(&mut self.errors, ERRORS_SHOWN)
                .counted(&mut self.errors_total, Some(&mut self.errors_truncated))
                .keeping_last(),
            mismatch_uuids: Shortened::new(&mut self.mismatch_uuids, MISMATCH_UUIDS_SHOWN)
                .counted(&mut self.mismatch_uuid_count, Some(&mut self.mismatch_uuids_truncated)),
        }
    }

    /// Folds one date's report into the run's, cutting its lists to their caps;
    /// logs a `date reported` line per date and a `file skipped` line per skipped file.
    pub fn add_day(&mut self, mut day: DayReport) {
        self.add_totals(&mut day);
        if matches!(day.action, DayAction::Swept | DayAction::SweepPlanned) {
            self.stragglers_folded +=
                day.files_read.saturating_sub(day.files_read_compacted.min(1));
        }
        day.shortened_lists();
        let json = serde_json::to_string(&day).unwrap_or_default();
        tracing::info!(date = %day.date, action = %day.action, day = %json, "date reported");
        let mut days = self.lists().days;
        // A date with work takes the last empty one's place.
        if let Some(day) = days.push(day)
            && day.action != DayAction::NothingToCompact
            && let Some(i) =
                days.shown.iter().rposition(|d| d.action == DayAction::NothingToCompact)
        {
            days.shown.remove(i);
            days.shown.push(day);
        }
    }

    /// Orders `days` with the dates that have work first, each group in date order.
    pub(crate) fn work_first(&mut self) {
        self.days.sort_by_key(|d| (d.action == DayAction::NothingToCompact, d.date));
    }

    /// [`RunReport::add_day`] for a date not listed in `days`: its totals still count.
    pub(crate) fn add_unlisted_day(&mut self, mut day: DayReport) {
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
        let mut skipped_files = self.lists().skipped_files;
        for f in day.skipped.drain(..) {
            tracing::warn!(key = %f.key, date = ?f.date, column = ?f.column, reason = %f.reason,
                limit = f.limit.map(|l| l.limit.as_str()), found = f.limit.map(|l| l.found),
                allowed = f.limit.map(|l| l.allowed), "file skipped: left in place");
            skipped_files.push(f);
        }
    }

    /// Records a parity mismatch of `count` flights; `first`, the first in uuid
    /// order, needs only [`MISMATCH_UUIDS_SHOWN`] of them.
    pub fn set_mismatch(&mut self, date: NaiveDate, count: u64, first: &[uuid::Uuid]) {
        self.mismatch_date = Some(date);
        self.lists().mismatch_uuids.set(count, first.iter().map(uuid::Uuid::to_string));
    }

    /// Notes one read of `day`'s rows of other days: the largest wins (a later pass re-reads the earlier one's output).
    pub(crate) fn note_other_days(day: &mut DayReport, found: &crate::data::merge::OtherDays) {
        if found.rows > day.rows_of_other_days {
            day.rows_of_other_days = found.rows;
            day.other_days_uuids = found.uuids.iter().map(uuid::Uuid::to_string).collect();
        }
    }

    /// Lists what recovery did with each manifest.
    pub(crate) fn set_recovered(&mut self, recovered: &[RecoveredManifest]) {
        self.lists().recovered.set(recovered.len() as u64, recovered.iter().cloned());
    }

    /// Bounds the report (idempotent): lists cut to their caps (`errors` keeps its
    /// last), then the largest list halved while the JSON is over [`REPORT_MAX_BYTES`].
    pub fn bound(&mut self) {
        self.days.iter_mut().for_each(DayReport::shortened_lists);
        for list in self.lists().each() {
            list.to_cap();
        }
        while json_len(self) > REPORT_MAX_BYTES {
            let mut lists = self.lists();
            let sizes = lists.each().map(|l| (l.json_len(), l));
            let Some((_, largest)) =
                sizes.into_iter().filter(|(n, _)| *n > 2).max_by_key(|(n, _)| *n)
            else {
                // Every list empty: the rest is a few hundred bytes of figures.
                break;
            };
            largest.halve();
        }
    }
}

/// What [`RunReport::bound`] does to a [`Shortened`] list, whatever its entries.
trait Bounded {
    fn to_cap(&mut self);
    fn halve(&mut self);
    fn json_len(&self) -> usize;
}

impl<T: Serialize> Bounded for Shortened<'_, T> {
    fn to_cap(&mut self) {
        self.cut(self.cap);
    }

    fn halve(&mut self) {
        self.cut(self.shown.len() / 2);
    }

    fn json_len(&self) -> usize {
        json_len(&*self.shown)
    }
}

fn json_len(value: &impl Serialize) -> usize {
    serde_json::to_string_pretty(value).map_or(0, |s| s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bound` cuts every shortened list to its cap and marks it, including lists a caller
    /// filled past the cap without `set`/`push`; a list within its cap is left unmarked.
    #[test]
    fn bound_cuts_every_list_past_its_cap() {
        let uuids: Vec<String> = (0..150).map(|i| i.to_string()).collect();
        let mut r = RunReport {
            mismatch_uuids: uuids,
            mismatch_uuid_count: 150,
            days: vec![DayReport::default(); DAYS_SHOWN + 50],
            recovered: vec![],
            ..Default::default()
        };
        r.bound();
        assert_eq!(r.mismatch_uuids.len(), MISMATCH_UUIDS_SHOWN);
        assert!(r.mismatch_uuids_truncated);
        assert_eq!(r.mismatch_uuid_count, 150);
        assert_eq!(r.days.len(), DAYS_SHOWN);
        assert!(r.days_truncated);
        assert!(!r.recovered_truncated);
    }

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
        r.set_mismatch(date(0), MISMATCH_UUIDS_SHOWN as u64, &uuids(MISMATCH_UUIDS_SHOWN));
        assert_eq!(r.mismatch_uuids.len(), MISMATCH_UUIDS_SHOWN);
        assert!(!r.mismatch_uuids_truncated);
        r.set_mismatch(date(0), MISMATCH_UUIDS_SHOWN as u64 + 1, &uuids(MISMATCH_UUIDS_SHOWN + 1));
        assert_eq!(r.mismatch_uuids.len(), MISMATCH_UUIDS_SHOWN);
        assert_eq!(r.mismatch_uuid_count, MISMATCH_UUIDS_SHOWN as u64 + 1);
        assert!(r.mismatch_uuids_truncated);
        // The first ones, in order.
        assert_eq!(r.mismatch_uuids[0], uuid::Uuid::from_u128(0).to_string());
        assert_eq!(
            r.mismatch_uuids[MISMATCH_UUIDS_SHOWN - 1],
            uuid::Uuid::from_u128(MISMATCH_UUIDS_SHOWN as u128 - 1).to_string()
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
        use crate::data::merge::OTHER_DAYS_UUIDS_SHOWN;
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
        assert!(!r.days[0].other_days_uuids_truncated && r.days[1].other_days_uuids_truncated);
        // A full list (the merge keeps the first rows' flights) is marked when more rows were read.
        r.add_day(day(3, OTHER_DAYS_UUIDS_SHOWN as u64, OTHER_DAYS_UUIDS_SHOWN));
        r.add_day(day(4, OTHER_DAYS_UUIDS_SHOWN as u64 + 1, OTHER_DAYS_UUIDS_SHOWN));
        assert!(!r.days[2].other_days_uuids_truncated && r.days[3].other_days_uuids_truncated);
        // The skipped files of every day, listed and counted.
        assert_eq!(r.skipped_files_total, 5);
        // bound() keeps the cap on a day pushed past add_day, and the counts.
        r.days[0].other_days_uuids = uuids(50).iter().map(uuid::Uuid::to_string).collect();
        r.bound();
        assert_eq!(r.days[0].other_days_uuids.len(), OTHER_DAYS_UUIDS_SHOWN);
        assert!(r.days[0].other_days_uuids_truncated && r.days[3].other_days_uuids_truncated);
        assert_eq!((r.rows_of_other_days, r.days[0].rows_of_other_days), (66, 3));
    }

    /// A date's unread files past [`DAY_KEYS_SHOWN`] are cut and marked, also once bound again.
    #[test]
    fn a_days_unread_files_at_their_cap() {
        let unread = |n: usize| DayReport {
            action: DayAction::Mismatch,
            unread_files: (uuids(n).into_iter())
                .map(|flight| UnreadFile {
                    key: format!("index/{flight}"),
                    flight,
                    reason: "r".into(),
                })
                .collect(),
            ..Default::default()
        };
        let mut r = RunReport::default();
        r.add_day(unread(DAY_KEYS_SHOWN));
        r.add_day(unread(DAY_KEYS_SHOWN + 1));
        r.bound();
        let (at, over) = (&r.days[0], &r.days[1]);
        assert_eq!((at.unread_files.len(), at.unread_files_truncated), (DAY_KEYS_SHOWN, false));
        assert_eq!((over.unread_files.len(), over.unread_files_truncated), (DAY_KEYS_SHOWN, true));
    }

    #[test]
    fn days_at_their_cap() {
        let mut r = RunReport::default();
        for i in 0..DAYS_SHOWN {
            r.add_day(DayReport { date: date(i as u64), ..Default::default() });
        }
        assert_eq!((r.days.len(), r.days_total), (DAYS_SHOWN, DAYS_SHOWN as u64));
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
        r.add_day(DayReport { skipped: skipped(SKIPPED_FILES_SHOWN, 10), ..Default::default() });
        assert_eq!(r.skipped_files.len(), SKIPPED_FILES_SHOWN);
        assert_eq!(r.skipped_files_total, SKIPPED_FILES_SHOWN as u64);
        assert!(!r.skipped_files_truncated);
        r.add_unlisted_day(DayReport { skipped: skipped(1, 10), ..Default::default() });
        assert_eq!(r.skipped_files.len(), SKIPPED_FILES_SHOWN);
        assert_eq!(r.skipped_files_total, SKIPPED_FILES_SHOWN as u64 + 1);
        assert_eq!(r.skipped_files_total, SKIPPED_FILES_SHOWN as u64 + 1);
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
        assert_eq!(r.errors[ERRORS_SHOWN - 2], format!("error {}", ERRORS_SHOWN - 2));
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
        r.add_day(DayReport { skipped: skipped(50_000, 120), ..Default::default() });
        r.bound();
        assert!(json_bytes(&r) <= 60_000, "{}", json_bytes(&r));
        assert_eq!(r.skipped_files_total, 50_000);

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
        assert!(bytes > REPORT_MAX_BYTES / 4, "cut much more than needed: {bytes}");
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
