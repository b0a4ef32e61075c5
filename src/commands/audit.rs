//! `archive-compaction audit --from A --to B` (the Lambda event `{"audit": {"from": A, "to": B}}`):
//! proves, read-only (no lease, write or delete: safe beside a run), that a range of days holds
//! every flight exactly once, and names what does not ([`Findings`], each with what fixes it).
//! It lists, sorts keys and reads with the run's own code ([`Day::list_window`],
//! [`classify_partition`], [`crate::data::input`]) and counts rows as the parity gate does. A
//! date it could not finish (an S3 error after retries, or an input that changed twice while read:
//! a run was folding the day) is in [`AuditReport::unfinished`]; the deadline leaves
//! [`AuditReport::resume_date`].
//! Memory per date does not grow with its files or flights (`audit_day`).
//! `specs/audit-report.schema.json` documents each JSON field (the types here allow missing field
//! docs).
//! ```
//! use archive_compaction::commands::audit::{audit, AuditOptions, AuditStatus};
//! use archive_compaction::infra::storage::MemoryStore;
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new("archive");
//! let u = "019f7d73-f820-702f-b905-8c81d0944996";
//! store.put_now(&format!("flights/2026/07/20/{u}.json.gz"), "{}".into());
//! let config = archive_compaction::data::config::Config::from_map(
//!     &[("S3_BUCKET".to_string(), "archive".to_string())].into(),
//! ).unwrap();
//! let d = chrono::NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
//! let r = audit(&store, &config, &AuditOptions::range(d, d)).await.unwrap();
//! assert_eq!(r.totals.findings.missing.count, 1); // no index row for the flight
//! assert_eq!(r.status, AuditStatus::Findings);
//! # });
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use chrono::{DateTime, NaiveDate, Utc};
use futures::future::OptionFuture;
use futures::{FutureExt, StreamExt, TryFutureExt, TryStreamExt, stream};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::commands::render::{Col, Text};
use crate::data::config::Config;
use crate::data::input::{self, Budget, RowKeys};
use crate::data::keys::{flight_uuid, index_prefix};
use crate::data::merge::{Source, is_other_day};
use crate::data::spill::{SortedSet, SortedSetBuilder, SpillSettings, UuidSet};
use crate::infra::deadline::Deadline;
use crate::infra::error::{Error, Result};
use crate::infra::storage::{ObjectMeta, Store};
use crate::infra::text::Shortened;
use crate::protocol::day::{DateRange, Day, DayCounts, Flights, RangeOf};
use crate::protocol::partition::{ParityCheck, parity_reason};
use crate::protocol::plan::classify_partition;

/// Examples kept per finding, per date and in the totals (the first); counts are exact.
pub const EXAMPLES_MAX: usize = 5;

/// Files named in one duplicated flight's example.
pub const EXAMPLE_FILES_MAX: usize = 4;

/// Dates audited at once (each holds its listings; GETs share `READ_CONCURRENCY`).
pub const DATES_IN_FLIGHT: usize = 4;

/// Multi-row inputs of one date read at once (each holds its two column chunks).
const FILES_IN_FLIGHT: usize = 8;

const FIX_MISSING: &str = "block the scheduled walk at their date (parity gate) and every run of that date: have the archive writer write each one's index file {uuid}.parquet from its flights/ object (rewrite it when unreadable_files names it; or remove the flight object if it is no flight), then the next run passes the date; `status` shows what blocks the walk (docs/runbook.md#an-unreadable-per-flight-index-file)";
const FIX_DUPLICATED: &str = "run --from D --to D (the event {\"from\": D, \"to\": D}) folds the day into one compacted file, one row per flight (the newest version)";
const FIX_BESIDE_COMPACTED: &str = "run --from D --to D folds the late per-flight files into the day's compacted file (the scheduled run's straggler sweep does it within SWEEP_DAYS)";
const FIX_ORPHANS: &str = "for a person: the index row names no flight object under its date's flights/ (the flight was deleted, or written under another date, or s3_key is empty); runs keep such rows: check the flight and remove the row by hand if it is gone";
const FIX_OTHER_DAY: &str = "for a person: the row's first_message falls on another UTC day than its partition, so queries by day find it under the wrong date; runs keep it where it is";
const FIX_UNREADABLE: &str = "every run leaves the file in place and names it in skipped_files. A per-flight file {uuid}.parquet: its flight is missing (below) and every run stops at its date as a Mismatch until the archive writer rewrites the file from the flight's flights/ object (docs/runbook.md#an-unreadable-per-flight-index-file; `run --from D --to D` cannot read it either). A multi-row file, for a person: replace it with a readable copy or remove it (its rows are not counted here, so their flights may show as missing)";

/// What to audit.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// First date (included).
    pub from: NaiveDate,
    /// Last date (included).
    pub to: NaiveDate,
    /// The deadline, kept by the run's rule ([`crate::infra::deadline::Deadline`]); `None`: none.
    pub deadline: Option<Instant>,
    /// A progress bar over the dates (the CLI on a terminal).
    pub bar: Option<indicatif::ProgressBar>,
}

impl AuditOptions {
    /// The dates `from` to `to`, no deadline, no bar.
    pub fn range(from: NaiveDate, to: NaiveDate) -> AuditOptions {
        AuditOptions { from, to, deadline: None, bar: None }
    }
}

/// A count and its first examples.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Finding<E> {
    pub count: u64,
    pub examples: Vec<E>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl<E: Clone> Finding<E> {
    fn shortened(&mut self) -> Shortened<'_, E> {
        Shortened::new(&mut self.examples, EXAMPLES_MAX).counted(&mut self.count, None)
    }

    fn add(&mut self, example: impl FnOnce() -> E) {
        self.shortened().push_with(example);
    }

    fn absorb(&mut self, other: &Finding<E>) {
        self.shortened().add(other.count, other.examples.iter().cloned());
    }

    fn fix(&mut self, fix: impl Into<String>) {
        self.fix = (self.count > 0).then(|| fix.into());
    }
}

/// A flight object without an index row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct FlightExample {
    pub date: NaiveDate,
    pub flight: Uuid,
    pub key: String,
}

/// A flight with more than one index row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct DuplicateExample {
    pub date: NaiveDate,
    pub flight: Uuid,
    pub rows: u32,
    pub files: Vec<String>,
}

/// An index row (an orphan, or a row of another day).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct RowExample {
    pub date: NaiveDate,
    pub file: String,
    pub flight: Option<Uuid>,
    pub s3_key: Option<String>,
    pub first_message: Option<DateTime<Utc>>,
}

/// An index file (unreadable, or a per-flight file beside a compacted one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct FileExample {
    pub date: NaiveDate,
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What a date or the whole range holds besides every flight exactly once, each counted exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Findings {
    pub missing: Finding<FlightExample>,
    pub duplicated: Finding<DuplicateExample>,
    pub per_flight_beside_compacted: Finding<FileExample>,
    pub orphans: Finding<RowExample>,
    pub other_day_rows: Finding<RowExample>,
    pub unreadable_files: Finding<FileExample>,
}

impl Findings {
    /// The sum of every count.
    pub fn total(&self) -> u64 {
        self.missing.count
            + self.duplicated.count
            + self.per_flight_beside_compacted.count
            + self.orphans.count
            + self.other_day_rows.count
            + self.unreadable_files.count
    }

    fn absorb(&mut self, o: &Findings) {
        self.missing.absorb(&o.missing);
        self.duplicated.absorb(&o.duplicated);
        self.per_flight_beside_compacted.absorb(&o.per_flight_beside_compacted);
        self.orphans.absorb(&o.orphans);
        self.other_day_rows.absorb(&o.other_day_rows);
        self.unreadable_files.absorb(&o.unreadable_files);
    }

    fn with_fixes(mut self) -> Findings {
        let missing = parity_reason(self.missing.count, 0, &[]).unwrap_or_default();
        self.missing.fix(format!("{missing} {FIX_MISSING}"));
        self.duplicated.fix(FIX_DUPLICATED);
        self.per_flight_beside_compacted.fix(FIX_BESIDE_COMPACTED);
        self.orphans.fix(FIX_ORPHANS);
        self.other_day_rows.fix(FIX_OTHER_DAY);
        self.unreadable_files.fix(FIX_UNREADABLE);
        self
    }
}

/// One date, audited.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct DayAudit {
    pub date: NaiveDate,
    #[serde(flatten)]
    pub counts: DayCounts,
    pub rows: u64,
    pub requests: u64,
    pub bytes_read: u64,
    pub multi_row_bytes: u64,
    #[serde(flatten)]
    pub findings: Findings,
}

/// The whole range.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct AuditTotals {
    pub dates_audited: u64,
    pub flights: u64,
    pub rows: u64,
    pub requests: u64,
    pub bytes_read: u64,
    pub multi_row_bytes: u64,
    #[serde(flatten)]
    pub findings: Findings,
}

/// A date the audit could not finish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Unfinished {
    pub date: NaiveDate,
    pub error: String,
}

/// The outcome, each as `status` of `specs/audit-report.schema.json` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum AuditStatus {
    #[default]
    Clean = 0,
    Findings = 2,
    Incomplete = 1,
}

impl AuditStatus {
    /// The CLI exit code, the variant's number: 0 clean, 2 findings, 1 incomplete.
    pub fn exit_code(self) -> u8 {
        self as u8
    }
}

/// What `audit` prints as JSON (its schema: `specs/audit-report.schema.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct AuditReport {
    pub bucket: String,
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub status: AuditStatus,
    pub dates: u64,
    pub totals: AuditTotals,
    pub days: Vec<DayAudit>,
    pub unfinished: Vec<Unfinished>,
    pub resume_date: Option<NaiveDate>,
}

/// Audits `opts.from` to `opts.to`. Errors: only a bad range ([`DateRange::new`]); a date that
/// fails is in [`AuditReport::unfinished`].
pub async fn audit(
    store: &(impl Store + Clone),
    config: &Config,
    opts: &AuditOptions,
) -> Result<AuditReport> {
    let dates = DateRange::new(opts.from, opts.to, RangeOf::Audit)?.dates();
    let deadline = &Deadline::new(opts.deadline, config.deadline_margin);
    let store = &store.until(deadline.s3());
    let mut report = AuditReport {
        bucket: store.bucket().to_string(),
        from: opts.from,
        to: opts.to,
        dates: dates.len() as u64,
        ..AuditReport::default()
    };
    let bar = opts.bar.clone().unwrap_or_else(indicatif::ProgressBar::hidden);
    bar.set_length(dates.len() as u64);
    bar.set_position(0);
    bar.set_message("auditing");
    let reader = &Reader {
        store,
        gets: &Semaphore::new(config.read_concurrency.max(1)),
        budget: config.input_budget,
        spill: SpillSettings { limit: config.spill.limit.min(SET_IN_MEMORY) },
    };
    let mut days = stream::iter(dates)
        .map(|date| async move {
            if let Some(near) = deadline.near() {
                tracing::warn!(%date, left_s = near.left.as_secs_f64(), needed_s = near.needed.as_secs_f64(), "deadline near: not auditing another date");
                return (date, None);
            }
            let audited = deadline.timed(audit_date(reader, date)).await;
            (date, Some(audited))
        })
        .buffered(DATES_IN_FLIGHT)
        .boxed();
    while let Some((date, outcome)) = days.next().await {
        add_date(&mut report, date, outcome);
        bar.inc(1);
        bar.set_message(format!("{date}: {} finding(s) so far", report.totals.findings.total()));
    }
    drop(days);
    bar.finish_and_clear();
    report.totals.findings = std::mem::take(&mut report.totals.findings).with_fixes();
    let finished = report.unfinished.is_empty() && report.resume_date.is_none();
    report.status = match (finished, report.totals.findings.total()) {
        (false, _) => AuditStatus::Incomplete,
        (true, 0) => AuditStatus::Clean,
        (true, _) => AuditStatus::Findings,
    };
    Ok(report)
}

/// Folds one date's outcome into `report` (`None`: not started).
fn add_date(report: &mut AuditReport, date: NaiveDate, outcome: Option<Result<DayAudit>>) {
    match outcome {
        // Not started, or cut by the S3 deadline: the next audit starts here.
        None | Some(Err(Error::Deadline { .. })) => {
            report.resume_date = Some(report.resume_date.map_or(date, |r| r.min(date)));
        }
        Some(Ok(day)) => {
            let t = &mut report.totals;
            t.dates_audited += 1;
            t.flights += day.counts.flights;
            t.rows += day.rows;
            t.requests += day.requests;
            t.bytes_read += day.bytes_read;
            t.multi_row_bytes += day.multi_row_bytes;
            t.findings.absorb(&day.findings);
            report.days.push(day);
        }
        Some(Err(e)) => {
            tracing::warn!(%date, error = %e, "date not audited");
            report.unfinished.push(Unfinished { date, error: e.to_string() });
        }
    }
}

/// [`audit_day`], once more when an input changed since the listing (a run folded the day).
async fn audit_date(r: &Reader<'_, impl Store>, date: NaiveDate) -> Result<DayAudit> {
    match audit_day(r, date).await {
        Err(e) if matches!(e, Error::PreconditionFailed { .. }) || e.is_not_found() => {
            tracing::info!(%date, error = %e, "an index file changed while it was audited; auditing the date again");
            audit_day(r, date).await
        }
        audited => audited,
    }
}

/// Records each of an audit's sets holds in memory (fewer when `FLIGHTS_IN_MEMORY` is lower), the
/// rest in sorted runs on local disk: a fixed rule, so an audit holds the same whatever the date.
pub const SET_IN_MEMORY: usize = 1 << 14;

/// Audits one date: its listings (no per-flight key held: a window of none, then a page at a time),
/// its index files' columns, then merge passes for missing and duplicated flights. Errors: an S3
/// error (after the SDK's retries); [`Error::PreconditionFailed`] or not-found when an input
/// changed or vanished since the listing; [`Error::Spill`] when a set on disk fails (any step).
async fn audit_day(r: &Reader<'_, impl Store>, date: NaiveDate) -> Result<DayAudit> {
    let listed = Day::list_window(r.store, date, true, 0, r.spill).await?;
    let mut day = DayAudit { date, counts: listed.counts(), ..DayAudit::default() };
    let held = read_index(r, &listed, &mut day).await?;
    find_missing(r, &listed.flights, &held, &mut day).await?;
    find_duplicated(&held, &mut day)?;
    Ok(day)
}

/// Reads a date's index files; GETs share `READ_CONCURRENCY`, sets hold [`SET_IN_MEMORY`] in memory.
struct Reader<'a, S> {
    store: &'a S,
    gets: &'a Semaphore,
    budget: Budget,
    spill: SpillSettings,
}

/// Who holds each flight's rows in a partition. Files are numbered in the
/// order read, the readable ones alone: multi-row inputs, then per-flight files.
#[derive(Debug, Default)]
struct Held {
    /// The multi-row inputs read, by number.
    multi_row: Vec<String>,
    /// The per-flight files read: (the uuid of the file's name, its number).
    per_flight: SortedSet<(Uuid, u32)>,
    /// Keys of per-flight files not named `{uuid}.parquet` in lower case, by number.
    other_names: BTreeMap<u32, String>,
    /// One record a row naming a flight: (flight, file number, row number among the file's
    /// flight rows); a flight's rows are together, files in read order.
    rows: SortedSet<(Uuid, u32, u32)>,
}

struct Holding {
    held: Held,
    per_flight: SortedSetBuilder<(Uuid, u32)>,
    rows: SortedSetBuilder<(Uuid, u32, u32)>,
    files: u32,
}

/// Reads every index file of `listed` into `day`, multi-row inputs first. Errors: as [`audit_day`].
async fn read_index(r: &Reader<'_, impl Store>, listed: &Day, day: &mut DayAudit) -> Result<Held> {
    let mut h = Holding {
        held: Held::default(),
        per_flight: SortedSetBuilder::new(r.spill),
        rows: SortedSetBuilder::new(r.spill),
        files: 0,
    };
    // Every row counts for the flight its `s3_key` names, as Athena counts it and the parity gate
    // proves it: a per-flight file without its own flight's row, or unreadable, leaves it missing.
    read_files(r, listed, &mut h, day, listed.index.multi_row_inputs(), false).await?;
    per_flight_pages(r, listed, &mut h, day).await?;
    let Holding { mut held, per_flight, rows, .. } = h;
    held.per_flight = per_flight.finish()?;
    held.rows = rows.finish()?;
    Ok(held)
}

/// Reads the per-flight files of `listed` a listing page at a time; one written since the first
/// listing is passed by, one gone since ends the date (audited again). Errors: as [`audit_day`].
async fn per_flight_pages(
    r: &Reader<'_, impl Store>,
    listed: &Day,
    h: &mut Holding,
    day: &mut DayAudit,
) -> Result<()> {
    let (store, listing) = (r.store, &listed.index);
    let past = &listing.beyond_window;
    let beside = !listing.compacted.is_empty();
    let prefix = index_prefix(listed.date);
    let (mut seen, mut page) = (0usize, Some(store.list_page(&prefix, None).await?));
    while let Some(this) = page.take() {
        let after = (this.truncated).then(|| this.objects.last().map(|o| o.key.clone())).flatten();
        // The run's rule sorts each page ([`classify_partition`]); written since: passed by.
        let mut files = Vec::new();
        for (u, o) in classify_partition(this.objects).per_flight {
            if past.flights.contains(&u)? {
                files.push((o, Source::PerFlight(u)));
            }
        }
        seen += files.len();
        let next = OptionFuture::from(after.as_ref().map(|a| store.list_page(&prefix, Some(a))));
        let read = read_files(r, listed, h, day, files.iter().map(|(m, s)| (m, *s)), beside);
        let (next, ()) = tokio::try_join!(next.map(Option::transpose), read)?;
        page = next;
    }
    if seen != past.files {
        let why = format!(
            "{} per-flight file(s) listed when the date's audit began, {seen} of them listed again: a run folded the day",
            past.files
        );
        return Err(Error::s3("ListObjectsV2", store.bucket(), &prefix, "NoSuchKey", why, false));
    }
    Ok(())
}

/// Reads `files`, [`FILES_IN_FLIGHT`] at once, into `h` and `day` (`beside`: per-flight files in a
/// partition with a compacted one). Errors: as [`audit_day`].
async fn read_files<'m>(
    r: &Reader<'_, impl Store>,
    listed: &Day,
    h: &mut Holding,
    day: &mut DayAudit,
    files: impl Iterator<Item = (&'m ObjectMeta, Source)> + Send,
    beside: bool,
) -> Result<()> {
    let mut reads = stream::iter(files)
        .map(|(meta, source)| {
            read_columns(r, listed, meta, source).map_ok(move |c| (meta, source, c))
        })
        .buffered(FILES_IN_FLIGHT)
        .boxed();
    while let Some((meta, source, read)) = reads.try_next().await? {
        let Source::PerFlight(u) = source else {
            day.multi_row_bytes += meta.size;
            if add_file(h, day, meta, beside, read)?.is_some() {
                h.held.multi_row.push(meta.key.clone());
            }
            continue;
        };
        if let Some(n) = add_file(h, day, meta, beside, read)? {
            h.per_flight.push((u, n))?;
            if meta.key != format!("{}{u}.parquet", index_prefix(day.date)) {
                h.held.other_names.insert(n, meta.key.clone());
            }
        }
    }
    Ok(())
}

/// Counts one index file's read into `day` and its rows into `h`: its number, `None` if unreadable.
fn add_file(
    h: &mut Holding,
    day: &mut DayAudit,
    meta: &ObjectMeta,
    beside: bool,
    read: ColumnRead,
) -> Result<Option<u32>> {
    let date = day.date;
    let file = |reason| FileExample { date, file: meta.key.clone(), reason };
    day.requests += read.requests;
    day.bytes_read += read.bytes_read;
    let rows = match read.outcome {
        Err(reason) => {
            day.findings.unreadable_files.add(|| file(Some(reason)));
            return Ok(None);
        }
        Ok(rows) => rows,
    };
    let n = h.files;
    h.files += 1;
    day.rows += rows.rows;
    for (i, f) in rows.flights.iter().enumerate() {
        h.rows.push((*f, n, i as u32))?;
    }
    day.findings.orphans.absorb(&rows.orphans);
    day.findings.other_day_rows.absorb(&rows.other_day);
    if beside {
        day.findings.per_flight_beside_compacted.add(|| file(None));
    }
    Ok(Some(n))
}

/// The flights holding a row, in order, each once, from `rows`' records.
fn holding_flights(rows: &SortedSet<(Uuid, u32, u32)>) -> impl Iterator<Item = Result<Uuid>> + '_ {
    let mut last = None;
    rows.iter().map(|r| r.map(|(u, _, _)| u)).filter(move |r| match r {
        Ok(u) => last.replace(*u) != Some(*u),
        Err(_) => true,
    })
}

/// Counts the flights no file holds a row of (the gate's [`ParityCheck::of_rows`]), naming the
/// first ones' keys. Errors: also an S3 error listing the keys.
async fn find_missing(
    r: &Reader<'_, impl Store>,
    flights: &UuidSet,
    held: &Held,
    day: &mut DayAudit,
) -> Result<()> {
    let (date, store) = (day.date, r.store);
    // The listing kept uuids, not keys: listed again for the examples alone.
    let mut examples = Flights::default();
    let check = ParityCheck::of_rows(flights, holding_flights(&held.rows), r.spill)?;
    for u in check.missing.iter() {
        let u = u?;
        day.findings.missing.add(|| {
            examples.insert(u);
            FlightExample { date, flight: u, key: String::new() }
        });
    }
    if !examples.is_empty() {
        let keys = Day::flight_keys(store, date, &examples).await?;
        for e in &mut day.findings.missing.examples {
            e.key = keys.get(&e.flight).cloned().unwrap_or_default();
        }
    }
    Ok(())
}

/// Counts the flights with more than one row (one pass), naming the first ones' files.
fn find_duplicated(held: &Held, day: &mut DayAudit) -> Result<()> {
    // (flight, rows, its first files' numbers) of the flight being counted.
    let mut this: Option<(Uuid, u32, Vec<u32>)> = None;
    let mut named: Vec<(Uuid, u32, Vec<u32>)> = Vec::new();
    let mut close = |d: &mut DayAudit, t: Option<(Uuid, u32, Vec<u32>)>| {
        if let Some(t) = t.filter(|t| t.1 > 1) {
            d.findings.duplicated.add(|| {
                named.push(t.clone());
                DuplicateExample { date: d.date, flight: t.0, rows: t.1, files: Vec::new() }
            });
        }
    };
    for r in held.rows.iter() {
        let (u, file, _) = r?;
        match &mut this {
            Some((f, rows, files)) if *f == u => {
                *rows = rows.saturating_add(1);
                if files.last() != Some(&file) && files.len() < EXAMPLE_FILES_MAX {
                    files.push(file);
                }
            }
            _ => close(day, this.replace((u, 1, vec![file]))),
        }
    }
    close(day, this.take());
    let keys = file_keys(held, day.date, named.iter().flat_map(|t| t.2.iter().copied()))?;
    for (e, (_, _, files)) in day.findings.duplicated.examples.iter_mut().zip(&named) {
        e.files = (files.iter()).filter_map(|n| keys.get(n).cloned()).collect();
    }
    Ok(())
}

/// The keys of the files numbered `wanted` (one pass over the per-flight set).
fn file_keys(
    held: &Held,
    date: NaiveDate,
    wanted: impl Iterator<Item = u32>,
) -> Result<BTreeMap<u32, String>> {
    let mut keys = BTreeMap::new();
    let mut per_flight = BTreeSet::new();
    for n in wanted {
        match held.multi_row.get(n as usize) {
            Some(k) => _ = keys.insert(n, k.clone()),
            None => _ = per_flight.insert(n),
        }
    }
    if per_flight.is_empty() {
        return Ok(keys);
    }
    let prefix = index_prefix(date);
    for r in held.per_flight.iter() {
        let (u, n) = r?;
        if per_flight.contains(&n) {
            let key = (held.other_names.get(&n).cloned())
                .unwrap_or_else(|| format!("{prefix}{u}.parquet"));
            keys.insert(n, key);
        }
    }
    Ok(keys)
}

/// What one index file's columns said: its rows, or why it cannot be read.
#[derive(Debug)]
struct ColumnRead {
    requests: u64,
    bytes_read: u64,
    outcome: std::result::Result<FileRows, String>,
}

#[derive(Debug, Default)]
struct FileRows {
    rows: u64,
    /// The flight of every row that names one (file order).
    flights: Vec<Uuid>,
    orphans: Finding<RowExample>,
    other_day: Finding<RowExample>,
}

/// Reads the `s3_key` and `first_message` columns of one index file in its listed version; rows of
/// other days only in a multi-row input, as the run counts them. Errors: S3 errors;
/// [`Error::PreconditionFailed`] when it changed (an unreadable file: `outcome` `Err`).
async fn read_columns(
    r: &Reader<'_, impl Store>,
    listed: &Day,
    meta: &ObjectMeta,
    source: Source,
) -> Result<ColumnRead> {
    let (date, flights) = (listed.date, &listed.flights);
    let mut out = FileRows::default();
    // A flights set on disk that cannot be read back ends the read.
    let mut failed = None;
    let names = ["s3_key", "first_message"];
    let read =
        input::read_columns(r.store, meta, Some(&meta.etag), r.budget, Some(r.gets), &names, |b| {
            let keys = RowKeys::of(&b)?;
            for row in 0..keys.rows() {
                out.rows += 1;
                let s3_key = keys.s3_key(row);
                let flight = s3_key.and_then(flight_uuid);
                let first = keys.first_message(row);
                let example = || RowExample {
                    date,
                    file: meta.key.clone(),
                    flight,
                    s3_key: s3_key.map(str::to_string),
                    first_message: first,
                };
                out.flights.extend(flight);
                match flight.map(|u| flights.contains(&u)).transpose() {
                    Ok(Some(true)) => {}
                    Ok(_) => out.orphans.add(example),
                    Err(e) => _ = failed.get_or_insert(e),
                }
                if !matches!(source, Source::PerFlight(_)) && is_other_day(first, date) {
                    out.other_day.add(example);
                }
            }
            Ok(())
        })
        .await?;
    failed.map_or(Ok(()), Err)?;
    Ok(ColumnRead {
        requests: read.requests,
        bytes_read: read.bytes_read,
        outcome: read.outcome.map(|()| out).map_err(|u| match u.column {
            Some(c) => format!("column {c}: {}", u.reason),
            None => u.reason,
        }),
    })
}

/// The report as text: totals, findings with examples and fixes, dates not finished.
pub fn format_human(r: &AuditReport) -> String {
    let mut s = Text::default();
    let AuditReport { bucket, from, to, dates, totals, .. } = r;
    let AuditTotals { dates_audited, flights, rows, bytes_read, multi_row_bytes, .. } = totals;
    s.line(format_args!(
        "audit of s3://{bucket} {from}..{to}: {dates_audited} of {dates} date(s) audited, {flights} flight(s), {rows} index row(s); {bytes_read} of {multi_row_bytes} bytes of multi-row files read"
    ));
    format_findings(&mut s, &totals.findings);
    let unfinished = r.unfinished.iter();
    s.items("  ", unfinished.map(|u| format!("not audited {}: {}", u.date, u.error)));
    if let Some(d) = r.resume_date {
        s.line(format_args!("  stopped before the deadline: audit --from {d} --to {to} continues"));
    }
    let result = match r.status {
        AuditStatus::Clean => "clean: every flight exactly once",
        AuditStatus::Findings => "findings",
        AuditStatus::Incomplete => "incomplete",
    };
    s.line(format_args!("result: {result} (exit {})", r.status.exit_code()));
    s.into_string()
}

fn format_findings(s: &mut Text, f: &Findings) {
    format_finding(s, "missing", &f.missing, |e| format!("{} {} ({})", e.date, e.flight, e.key));
    format_finding(s, "duplicated", &f.duplicated, |e| {
        let files = e.files.join(", ");
        format!("{} {}: {} rows in {files}", e.date, e.flight, e.rows)
    });
    format_finding(s, "per_flight_beside_compacted", &f.per_flight_beside_compacted, |e| {
        format!("{} {}", e.date, e.file)
    });
    let row = |e: &RowExample| {
        let at = e.first_message.map_or("(none)".to_string(), |t| t.to_rfc3339());
        let key = e.s3_key.as_deref().unwrap_or("(none)");
        format!("{} {}: s3_key {key}, first_message {at}", e.date, e.file)
    };
    format_finding(s, "orphans", &f.orphans, row);
    format_finding(s, "other_day_rows", &f.other_day_rows, row);
    format_finding(s, "unreadable_files", &f.unreadable_files, |e| {
        let reason = e.reason.as_deref().unwrap_or_default();
        format!("{} {}: {reason}", e.date, e.file)
    });
}

const FINDING: [Col; 2] = [Col::Left(27), Col::Right(8)];

fn format_finding<E>(s: &mut Text, name: &str, f: &Finding<E>, show: impl Fn(&E) -> String) {
    s.row(&FINDING, &[&name, &f.count], "");
    let examples: Vec<String> = f.examples.iter().map(show).collect();
    s.shortened("      ", &examples, EXAMPLES_MAX, f.count, |n| format!("… {n} more"));
    if let (Some(fix), true) = (&f.fix, f.count > 0) {
        s.line(format_args!("      fix: {fix}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::keys::{flights_prefix, index_prefix};
    use crate::infra::storage::MemoryStore;
    use arrow_array::StringArray;
    use arrow_schema::{DataType, TimeUnit};
    use std::sync::Arc;

    fn config() -> Config {
        Config::from_map(&[("S3_BUCKET".to_string(), "b".to_string())].into()).unwrap()
    }

    #[tokio::test]
    async fn findings_of_a_day_in_memory() {
        let (store, d) = findings_store();
        let r = audit(&store, &config(), &AuditOptions::range(d, d)).await.unwrap();
        let day = &r.days[0];
        let got = &day.findings;
        assert_eq!((day.counts.flights, day.counts.foreign_objects), (4, 1));
        assert_eq!(day.rows, 6, "5 rows in the compacted file, 1 per-flight file");
        assert_eq!(got.missing.count, 2, "flights 2 and 3");
        assert_eq!(got.duplicated.count, 2, "flight 0 across files, 1 within");
        assert_eq!(got.duplicated.examples[0].files.len(), 2);
        assert_eq!(got.orphans.count, 2, "flight 9 and the row without s3_key");
        assert_eq!(got.other_day_rows.count, 1, "the compacted file's; not the per-flight file's");
        // As the run and `status` count them (`rows_of_other_days`).
        let listed = Day::list(&store, d, true, Default::default()).await.unwrap();
        let run = listed.other_day_rows(&store, Budget::DEFAULT).await.unwrap();
        assert_eq!(got.other_day_rows.count, run.rows);
        assert_eq!(got.unreadable_files.count, 2, "the export and flight 2's file");
        assert_eq!(got.per_flight_beside_compacted.count, 1, "the readable one");
        assert_eq!(r.status, AuditStatus::Findings);
        assert_eq!(r.status.exit_code(), 2);
        assert!(r.totals.findings.duplicated.fix.is_some());
        assert!(format_human(&r).contains("duplicated"));
    }

    /// Every set spilled (one record in memory): the same report, findings
    /// and examples in the same order, the files of a duplicate named.
    #[tokio::test]
    async fn a_day_whose_sets_spill_reports_the_same() {
        let (store, d) = findings_store();
        let opts = AuditOptions::range(d, d);
        let held = audit(&store, &config(), &opts).await.unwrap();
        let spilled = Config::from_map(
            &[
                ("S3_BUCKET".to_string(), "b".to_string()),
                ("FLIGHTS_IN_MEMORY".to_string(), "1".to_string()),
            ]
            .into(),
        )
        .unwrap();
        let r = audit(&store, &spilled, &opts).await.unwrap();
        assert_eq!(r, held);
        let p = index_prefix(d);
        assert_eq!(
            r.days[0].findings.duplicated.examples[0].files,
            [
                format!("{p}compacted-a.parquet"),
                format!("{p}019f7d73-f820-702f-b905-000000000000.parquet")
            ]
        );
    }

    /// A date of every finding: four flights, a compacted file with a
    /// duplicate, an orphan, a row of another day and a row without
    /// `s3_key`, a per-flight file beside it, one cut short, and junk.
    fn findings_store() -> (MemoryStore, NaiveDate) {
        use crate::data::merge::{encode, target_schema};
        use arrow_array::{ArrayRef, BooleanArray, RecordBatch, TimestampMicrosecondArray};
        let d = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let p = index_prefix(d);
        let f = flights_prefix(d);
        let u = |i: u32| format!("019f7d73-f820-702f-b905-{i:012x}");
        let store = MemoryStore::new("b");
        for i in 0..4 {
            store.put_now(&format!("{f}{}.json.gz", u(i)), "{}".into());
        }
        // Rows of flights 0, 1, 1 (a duplicate within the file), 9 (an
        // orphan, first seen the day before) and one without s3_key.
        let day_us = 1_784_505_600_000_000i64;
        let keys = [Some(0), Some(1), Some(1), Some(9), None];
        let n = keys.len();
        let s = |v: Vec<Option<String>>| Arc::new(StringArray::from(v)) as ArrayRef;
        let firsts: Vec<Option<i64>> = keys
            .iter()
            .map(|k| Some(if *k == Some(9) { day_us - 1 } else { day_us + 5 }))
            .collect();
        let ts = |v: Vec<Option<i64>>| {
            Arc::new(TimestampMicrosecondArray::from(v).with_timezone("UTC")) as ArrayRef
        };
        let b = RecordBatch::try_new(
            target_schema(),
            vec![
                s(vec![None; n]),
                s(vec![None; n]),
                s(vec![None; n]),
                Arc::new(BooleanArray::from(vec![false; n])),
                s(vec![None; n]),
                s(vec![None; n]),
                ts(firsts),
                ts(vec![None; n]),
                s(keys.iter().map(|k| k.map(|i| format!("{f}X_Y_{}.json.gz", u(i)))).collect()),
            ],
        )
        .unwrap();
        store.put_now(
            &format!("{p}compacted-a.parquet"),
            encode(std::slice::from_ref(&b), 2).unwrap().into(),
        );
        // A late per-flight file beside it (flight 0 again, first seen the
        // day before: not a multi-row input's row, so no row of another
        // day), junk, and a per-flight file of flight 2 cut short: read, it
        // holds no row, so flight 2 is missing and the file unreadable.
        let mut own = b.slice(0, 1).columns().to_vec();
        own[6] = ts(vec![Some(day_us - 1)]);
        let own = RecordBatch::try_new(target_schema(), own).unwrap();
        store.put_now(&format!("{p}{}.parquet", u(0)), encode(&[own], 2).unwrap().into());
        store.put_now(&format!("{p}{}.parquet", u(2)), "PAR1 cut".into());
        store.put_now(&format!("{p}export.parquet"), "not parquet".into());
        // Foreign to the run (a zero-byte object): not read, flight 3 missing.
        store.put_now(&format!("{p}{}.parquet", u(3)), "".into());
        (store, d)
    }

    /// `S3_Key` and `First_Message` are the columns the merge takes as
    /// `s3_key` and `first_message` (names without case): read as such.
    #[tokio::test]
    async fn column_names_match_without_case() {
        use arrow_array::{ArrayRef, RecordBatch, TimestampMicrosecondArray};
        use arrow_schema::{Field, Schema};
        let d = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let (p, f) = (index_prefix(d), flights_prefix(d));
        let store = MemoryStore::new("b");
        let u = "019f7d73-f820-702f-b905-000000000001";
        store.put_now(&format!("{f}{u}.json.gz"), "{}".into());
        let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let schema = Arc::new(Schema::new(vec![
            Field::new("S3_Key", DataType::Utf8, true),
            Field::new("First_Message", ts, true),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![format!("{f}X_Y_{u}.json.gz")])) as ArrayRef,
                // The day before the partition's: an other-day row.
                Arc::new(
                    TimestampMicrosecondArray::from(vec![1_784_505_600_000_000i64 - 1])
                        .with_timezone("UTC"),
                ),
            ],
        )
        .unwrap();
        let mut body = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut body, schema, None).unwrap();
        w.write(&b).unwrap();
        w.close().unwrap();
        store.put_now(&format!("{p}export.parquet"), body.into());
        let r = audit(&store, &config(), &AuditOptions::range(d, d)).await.unwrap();
        let got = &r.days[0].findings;
        assert_eq!(got.unreadable_files.count, 0, "{got:?}");
        assert_eq!(got.missing.count, 0, "{got:?}");
        assert_eq!(got.orphans.count, 0, "{got:?}");
        assert_eq!(got.other_day_rows.count, 1, "{got:?}");
    }

    #[tokio::test]
    async fn a_large_compacted_file_is_read_by_its_footer_and_two_columns() {
        use crate::data::merge::{encode, target_schema};
        use arrow_array::{ArrayRef, BooleanArray, RecordBatch, TimestampMicrosecondArray};
        let d = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let (p, f) = (index_prefix(d), flights_prefix(d));
        let store = MemoryStore::new("b");
        let n = 30_000usize;
        let mut ids: Vec<Uuid> = (0..n).map(|_| Uuid::now_v7()).collect();
        ids.sort();
        for u in &ids {
            store.put_now(&format!("{f}{u}.json.gz"), "{}".into());
        }
        let s = |v: Vec<Option<String>>| Arc::new(StringArray::from(v)) as ArrayRef;
        // The other columns as varied as the writer's (no long runs to compress).
        let words = |w: &str| {
            s((0..n)
                .map(|i| {
                    Some(format!("{w}-{:016x}", (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)))
                })
                .collect())
        };
        let ts = Arc::new(
            TimestampMicrosecondArray::from(vec![Some(1_784_505_600_000_001); n])
                .with_timezone("UTC"),
        ) as ArrayRef;
        let b = RecordBatch::try_new(
            target_schema(),
            vec![
                words("icao"),
                words("reg"),
                words("type"),
                Arc::new(BooleanArray::from(vec![false; n])),
                words("op"),
                words("ident"),
                ts.clone(),
                ts,
                s(ids.iter().map(|u| Some(format!("{f}{u}.json.gz"))).collect()),
            ],
        )
        .unwrap();
        let body = encode(&[b], 8192).unwrap();
        let size = body.len() as u64;
        assert!(size > 4 * crate::data::input::TAIL_READ_BYTES, "{size}");
        store.put_now(&format!("{p}compacted-a.parquet"), body.into());
        let r = audit(&store, &config(), &AuditOptions::range(d, d)).await.unwrap();
        let day = &r.days[0];
        assert_eq!(r.status, AuditStatus::Clean, "{:?}", day.findings);
        assert_eq!((day.counts.flights, day.rows), (n as u64, n as u64));
        assert_eq!(day.multi_row_bytes, size);
        assert!(day.bytes_read < size / 2, "read {} of {size} bytes", day.bytes_read);
        assert!(day.requests >= 2, "tail, column chunks: {}", day.requests);
    }

    #[tokio::test]
    async fn an_empty_range_is_clean_one_past_the_deadline_incomplete_and_a_reversed_one_refused() {
        let store = MemoryStore::new("b");
        let d = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::hidden());
        let opts = AuditOptions {
            bar: Some(bar.clone()),
            ..AuditOptions::range(d, d.succ_opt().unwrap())
        };
        let r = audit(&store, &config(), &opts).await.unwrap();
        assert_eq!((bar.position(), bar.length()), (2, Some(2)), "one step a date");
        assert!(bar.is_finished());
        assert_eq!((r.status, r.dates, r.totals.dates_audited), (AuditStatus::Clean, 2, 2));
        // No time left: no date is started, the report says where to go on.
        let late = AuditOptions {
            deadline: Some(Instant::now()),
            ..AuditOptions::range(d, d.succ_opt().unwrap())
        };
        let r = audit(&store, &config(), &late).await.unwrap();
        assert_eq!((r.status, r.resume_date), (AuditStatus::Incomplete, Some(d)));
        assert_eq!(r.status.exit_code(), 1);
        assert!(r.days.is_empty());
        let e = audit(&store, &config(), &AuditOptions::range(d, d.pred_opt().unwrap()))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("is after"), "{e}");
    }
}
