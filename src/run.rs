//! The driver: lease, recover, walk dates, commit each, advance the
//! watermark, and produce the [`RunReport`]. It only orchestrates; decisions
//! are in [`crate::plan`], I/O phases in [`crate::commit`] and
//! [`crate::recovery`].
//!
//! Time is injected: `now` (the EventBridge event's `time` or `--now`) fixes
//! the cutoff, and `deadline` (the Lambda deadline or `--max-duration`) stops
//! the walk before a new date is started too late.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, Utc};
use uuid::Uuid;

use crate::clock::Clock;
use crate::commit::{self, Fence, Prefetched};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::keys::{INDEX_ROOT, flights_prefix, index_partition_date, index_prefix};
use crate::lease::LeaseGuard;
use crate::merge::{self, Source};
use crate::plan::{self, DayAction, DayPlan};
use crate::recovery;
use crate::report::{
    DayAction as Done, DayReport, Parity, RecoveryAction, RunReport, SkippedFile, Status,
    StopReason,
};
use crate::state::WatermarkState;
use crate::storage::Store;

/// How many times a date is re-planned in one run when inputs changed while
/// it was being compacted (their newer versions are folded in at once).
const MAX_PASSES_PER_DATE: usize = 3;

/// Per-invocation options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The invocation time (UTC): the event's `time` or `--now`.
    pub now: DateTime<Utc>,
    /// Lambda request id, or a fresh UUIDv7 on the CLI.
    pub invocation_id: String,
    /// The EventBridge event id (or another id that is equal on redelivery),
    /// so that `mismatch_runs` does not count a redelivered event twice.
    pub event_id: Option<String>,
    /// Stop starting new dates when too little time is left before this.
    pub deadline: Option<Instant>,
    /// List, plan and check parity as a real run would, reading every
    /// input, and assess what recovery would do with existing manifests
    /// ([`recovery::assess`]); take no lease, write and delete nothing.
    pub dry_run: bool,
    /// Compact only this date now, whatever the watermark says, through the
    /// same lease, recovery, parity gate and commit protocol. The watermark
    /// file is not written at all: never moved back, and not moved forward
    /// either, even when the date is the day right after it (the normal walk
    /// then passes that date quickly: parity from the compacted file's rows,
    /// nothing to merge). A mismatch is reported, not recorded.
    pub only_date: Option<NaiveDate>,
    /// Repair a range of dates (`from`, `to`, both UTC and included; the
    /// event's `from`/`to`, `--from`/`--to`): every date of the range that
    /// holds something to fold (more than one index input, or any per-flight
    /// or other multi-row file) is merged into one compacted file through the
    /// same lease, recovery, parity gate and manifest protocol. The
    /// watermark is never written. A date that is one compacted file and
    /// nothing else costs a listing and no GET. A parity mismatch on one date
    /// is reported and the range goes on; near the deadline no new date is
    /// started and [`RunReport::resume_date`] says where to go on (the same
    /// event again passes the repaired dates at the cost of a listing each).
    pub repair: Option<(NaiveDate, NaiveDate)>,
    /// The wall clock the lease reads ([`crate::clock::SystemClock`] but in
    /// the simulation).
    pub clock: Arc<dyn Clock>,
}

/// The longest repair range one invocation accepts, in days (ten years):
/// a typo in a year should be an error, not a ten-thousand-date walk.
pub const MAX_REPAIR_DAYS: i64 = 3660;

/// The dates of a repair range, `from` to `to` included.
///
/// Errors: [`Error::Config`] naming `from`/`to` when `from` is after `to` or
/// the range is longer than [`MAX_REPAIR_DAYS`].
pub fn repair_dates(from: NaiveDate, to: NaiveDate) -> Result<Vec<NaiveDate>> {
    if from > to {
        return Err(Error::Config {
            name: "from/to".into(),
            reason: format!("from {from} is after to {to}; give the earlier date as from"),
        });
    }
    let days = (to - from).num_days() + 1;
    if days > MAX_REPAIR_DAYS {
        return Err(Error::Config {
            name: "from/to".into(),
            reason: format!(
                "{from}..{to} is {days} days; at most {MAX_REPAIR_DAYS} per run (split the range)"
            ),
        });
    }
    Ok(from.iter_days().take_while(|d| *d <= to).collect())
}

/// How [`process_day`] treats a date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DayMode {
    /// The walk (and `--date`): parity gate, then the plan; a mismatch stops
    /// the walk.
    Walk,
    /// The straggler sweep over already-compacted dates: no parity gate
    /// (stragglers only add rows).
    Sweep,
    /// A repair range: the plan first (a date with nothing to fold costs no
    /// GET), then the parity gate; a mismatch is reported and the range goes
    /// on.
    Repair,
}

/// How many foreign keys a [`DayReport`] names (`foreign_keys`); the count
/// in `foreign_objects` is always complete.
pub const FOREIGN_KEYS_SHOWN: usize = 20;

impl RunOptions {
    /// Options for a run at `now` with a fresh invocation id.
    pub fn at(now: DateTime<Utc>) -> RunOptions {
        RunOptions {
            now,
            invocation_id: Uuid::now_v7().to_string(),
            event_id: None,
            deadline: None,
            dry_run: false,
            only_date: None,
            repair: None,
            clock: crate::clock::system(),
        }
    }
}

enum DayOutcome {
    Done(DayReport),
    Mismatch(DayReport, Vec<Uuid>),
}

/// Runs one invocation. Never returns an error: every failure is recorded in
/// the report (`last_run_status: Failure`, `errors`).
pub async fn run<S: Store + Clone + std::fmt::Debug + 'static>(
    store: &S,
    config: &Config,
    opts: &RunOptions,
) -> RunReport {
    let started = Instant::now();
    let cutoff = plan::cutoff(opts.now, config.lag_days);
    let mut report = RunReport {
        last_run_at: opts.now,
        invocation_id: opts.invocation_id.clone(),
        bucket: store.bucket().to_string(),
        cutoff: Some(cutoff),
        dry_run: opts.dry_run,
        ..RunReport::default()
    };
    tracing::info!(bucket = store.bucket(), %cutoff, now = %opts.now, dry_run = opts.dry_run, invocation_id = %opts.invocation_id, "run starting");
    if let Some(Err(e)) = opts.repair.map(|(from, to)| repair_dates(from, to)) {
        // Bad input: a clear error before the lease, nothing touched.
        report.stop_reason = StopReason::Error;
        report.fail(e);
        report.duration_seconds = started.elapsed().as_secs_f64();
        return report;
    }
    let mut lease = None;
    if !opts.dry_run {
        match LeaseGuard::acquire_with_clock(
            store,
            opts.clock.clone(),
            &opts.invocation_id,
            config.lease,
        )
        .await
        {
            Ok(l) => lease = Some(l),
            Err(e @ Error::LeaseHeld { .. }) => {
                tracing::warn!(error = %e, "another invocation holds the lease; doing nothing");
                report.stop_reason = StopReason::LeaseHeld;
                if let Ok(wm) = WatermarkState::read(store).await {
                    fill_watermark_fields(&mut report, &wm, cutoff);
                    report.watermark_before = wm.watermark.last_compacted_date;
                }
                report.errors.push(e.to_string());
                report.duration_seconds = started.elapsed().as_secs_f64();
                return report;
            }
            Err(e) => {
                report.stop_reason = StopReason::Error;
                report.fail(e);
                report.duration_seconds = started.elapsed().as_secs_f64();
                return report;
            }
        }
    }
    let fence = lease.as_mut().map(|l| l as &mut dyn crate::lease::Confirm);
    let result = walk(store, config, opts, &mut report, &mut Fence(fence)).await;
    if let Err(e) = result {
        report.stop_reason = StopReason::Error;
        report.fail(e);
    }
    if let Some(Err(e)) = match lease {
        Some(l) => Some(l.release().await),
        None => None,
    } {
        tracing::warn!(error = %e, "could not release the lease; it lapses on its own");
    }
    report.duration_seconds = started.elapsed().as_secs_f64();
    tracing::info!(
        status = report.last_run_status.as_str(),
        stop_reason = ?report.stop_reason,
        days = report.days_compacted,
        files = report.files_compacted,
        rows = report.rows_written,
        watermark = ?report.last_compacted_date,
        seconds = report.duration_seconds,
        "run finished"
    );
    report
}

fn fill_watermark_fields(report: &mut RunReport, wm: &WatermarkState, cutoff: NaiveDate) {
    report.last_compacted_date = wm.watermark.last_compacted_date;
    report.mismatch_runs = wm.watermark.mismatch_runs;
    report.watermark_lag_days = Some(match wm.watermark.last_compacted_date {
        Some(w) => (cutoff - w).num_days().max(0),
        None => 0,
    });
}

async fn walk(
    store: &impl Store,
    config: &Config,
    opts: &RunOptions,
    report: &mut RunReport,
    fence: &mut Fence<'_>,
) -> Result<()> {
    let cutoff = report.cutoff.expect("cutoff set");
    let mut wm = WatermarkState::read(store).await?;
    report.watermark_before = wm.watermark.last_compacted_date;
    fill_watermark_fields(report, &wm, cutoff);

    let recovery = if opts.dry_run {
        // What recovery would do, done by nobody: the walk plans as after it.
        let r = recovery::assess(store).await?;
        report.recovered = r.recovered.clone();
        r
    } else {
        let r = recovery::recover(store, fence).await?;
        report.manifests_recovered = r
            .recovered
            .iter()
            .filter(|m| m.action != RecoveryAction::QuarantinedEarlier)
            .count() as u64;
        report.files_compacted += r.files_deleted;
        report.files_delete_failed += r.files_delete_failed;
        report.recovered = r.recovered.clone();
        r
    };

    if let Some((from, to)) = opts.repair {
        return repair_range(store, config, opts, report, fence, from, to, &recovery).await;
    }
    let watermark_before = wm.watermark.last_compacted_date;
    walk_dates(store, config, opts, report, fence, &mut wm, &recovery).await?;
    if opts.only_date.is_none() {
        sweep(
            store,
            config,
            opts,
            report,
            fence,
            watermark_before,
            &recovery,
        )
        .await?;
    }
    Ok(())
}

/// Walks from the day after the watermark (or `only_date`) to the cutoff.
async fn walk_dates(
    store: &impl Store,
    config: &Config,
    opts: &RunOptions,
    report: &mut RunReport,
    fence: &mut Fence<'_>,
    wm: &mut WatermarkState,
    recovery: &recovery::Recovery,
) -> Result<()> {
    let cutoff = report.cutoff.expect("cutoff set");
    let dates: Vec<NaiveDate> = match opts.only_date {
        Some(d) => vec![d],
        None => {
            let earliest =
                if wm.watermark.last_compacted_date.is_none() && config.start_date.is_none() {
                    earliest_partition(store).await?
                } else {
                    None
                };
            match plan::walk_start(
                wm.watermark.last_compacted_date,
                config.start_date,
                earliest,
            ) {
                None => {
                    report.stop_reason = StopReason::NoPartitions;
                    tracing::info!(
                        "no watermark, no START_DATE and no index/ partition: nothing to do"
                    );
                    return Ok(());
                }
                Some(start) if start > cutoff => {
                    report.stop_reason = StopReason::NothingToDo;
                    tracing::info!(%start, %cutoff, "watermark is at the cutoff: nothing to do");
                    clear_mismatch_if_passed(store, wm, report, opts, cutoff).await?;
                    return Ok(());
                }
                Some(start) => start.iter_days().take_while(|d| *d <= cutoff).collect(),
            }
        }
    };
    tracing::info!(first = %dates[0], last = %dates[dates.len() - 1], count = dates.len(), "walking dates");

    let mut slowest = Duration::ZERO;
    report.stop_reason = StopReason::ReachedCutoff;
    for date in dates {
        if let Some((left, needed)) = deadline_near(opts, config.deadline_margin.max(slowest * 2)) {
            tracing::warn!(%date, left_s = left.as_secs_f64(), needed_s = needed.as_secs_f64(), "deadline near: not starting another date; the next run continues");
            report.stop_reason = StopReason::Deadline;
            break;
        }
        if let Some(why) = recovery.blocked.get(&date) {
            report.stop_reason = StopReason::BlockedByManifest;
            report.fail(format!("{date} is blocked: {why}"));
            break;
        }
        let t0 = Instant::now();
        let outcome = process_day(
            store,
            config,
            opts,
            report,
            fence,
            date,
            &recovery.claimed,
            DayMode::Walk,
        )
        .await;
        slowest = slowest.max(t0.elapsed());
        match outcome {
            Err(e) => {
                report.days.push(DayReport {
                    date,
                    action: Done::Failed,
                    reason: e.to_string(),
                    seconds: t0.elapsed().as_secs_f64(),
                    ..Default::default()
                });
                return Err(e);
            }
            Ok(DayOutcome::Mismatch(day, missing)) => {
                report.days.push(day);
                record_mismatch(store, wm, report, opts, fence, date, missing).await?;
                return Ok(());
            }
            Ok(DayOutcome::Done(day)) => {
                report.days.push(day);
                if opts.dry_run {
                    continue;
                }
                if opts.only_date.is_none() {
                    fence.check().await?;
                    wm.watermark.last_compacted_date = Some(date);
                    if wm.watermark.mismatch_date.is_some_and(|m| m <= date) {
                        wm.watermark.mismatch_date = None;
                        wm.watermark.mismatch_runs = 0;
                        wm.watermark.mismatch_event_id = None;
                    }
                    crate::failpoint!("run::before-watermark-write");
                    wm.write(store, opts.now).await?;
                    report.days_compacted += 1;
                    fill_watermark_fields(report, wm, cutoff);
                }
            }
        }
    }
    if report.stop_reason == StopReason::ReachedCutoff {
        clear_mismatch_if_passed(store, wm, report, opts, cutoff).await?;
    }
    Ok(())
}

/// The straggler sweep: already-compacted dates within `SWEEP_DAYS` of the
/// watermark (as it was before this run) are re-listed; per-flight files that
/// arrived or were rewritten after compaction are folded into a new compacted
/// file (a per-flight row beats the compacted row of the same flight).
/// Costs one ListObjectsV2 per date when there is nothing to fold.
async fn sweep(
    store: &impl Store,
    config: &Config,
    opts: &RunOptions,
    report: &mut RunReport,
    fence: &mut Fence<'_>,
    watermark_before: Option<NaiveDate>,
    recovery: &recovery::Recovery,
) -> Result<()> {
    let Some(last) = watermark_before else {
        return Ok(());
    };
    if config.sweep_days == 0 || report.last_run_status == Status::Failure {
        return Ok(());
    }
    let first = last - chrono::Days::new(u64::from(config.sweep_days) - 1);
    for date in first.iter_days().take_while(|d| *d <= last) {
        if let Some((left, needed)) = deadline_near(opts, config.deadline_margin) {
            tracing::warn!(%date, left_s = left.as_secs_f64(), needed_s = needed.as_secs_f64(), "deadline near: straggler sweep stops here");
            break;
        }
        if recovery.blocked.contains_key(&date) {
            continue;
        }
        let outcome = process_day(
            store,
            config,
            opts,
            report,
            fence,
            date,
            &recovery.claimed,
            DayMode::Sweep,
        )
        .await?;
        if let DayOutcome::Done(mut day) = outcome
            && matches!(day.action, Done::Compacted | Done::Planned)
        {
            day.action = if opts.dry_run {
                Done::SweepPlanned
            } else {
                Done::Swept
            };
            report.stragglers_folded += day
                .files_read
                .saturating_sub(day.files_read_compacted + day.files_read_multi_row);
            tracing::info!(%date, files = day.files_read, "stragglers folded into the compacted file");
            report.days.push(day);
        }
    }
    Ok(())
}

/// A repair range (see [`RunOptions::repair`]): every date from `from` to
/// `to` through [`process_day`] in [`DayMode::Repair`]. The watermark and
/// the mismatch bookkeeping are not written; the report's status is
/// Mismatch when any date mismatched (its `mismatch_*` fields name the
/// first), Failure when a date is blocked by a manifest or an error stopped
/// the range.
#[allow(clippy::too_many_arguments)]
async fn repair_range(
    store: &impl Store,
    config: &Config,
    opts: &RunOptions,
    report: &mut RunReport,
    fence: &mut Fence<'_>,
    from: NaiveDate,
    to: NaiveDate,
    recovery: &recovery::Recovery,
) -> Result<()> {
    let dates = repair_dates(from, to)?;
    tracing::info!(%from, %to, "repairing a range of dates: folding what each holds; the watermark is not moved");
    tracing::info!(first = %from, last = %to, count = dates.len(), "walking dates");
    report.stop_reason = StopReason::EndOfRange;
    let mut slowest = Duration::ZERO;
    let mut first_mismatch: Option<(NaiveDate, Vec<Uuid>)> = None;
    for date in dates {
        if let Some((left, needed)) = deadline_near(opts, config.deadline_margin.max(slowest * 2)) {
            tracing::warn!(%date, left_s = left.as_secs_f64(), needed_s = needed.as_secs_f64(),
                "deadline near: not starting another date of the range; the same event again continues from here");
            report.stop_reason = StopReason::Deadline;
            report.resume_date = Some(date);
            break;
        }
        if let Some(why) = recovery.blocked.get(&date) {
            report.days.push(DayReport {
                date,
                action: Done::Blocked,
                reason: why.clone(),
                ..Default::default()
            });
            report.fail(format!("{date} is blocked: {why}"));
            continue;
        }
        let t0 = Instant::now();
        let outcome = process_day(
            store,
            config,
            opts,
            report,
            fence,
            date,
            &recovery.claimed,
            DayMode::Repair,
        )
        .await;
        slowest = slowest.max(t0.elapsed());
        match outcome {
            Err(e) => {
                report.days.push(DayReport {
                    date,
                    action: Done::Failed,
                    reason: e.to_string(),
                    seconds: t0.elapsed().as_secs_f64(),
                    ..Default::default()
                });
                return Err(e);
            }
            Ok(DayOutcome::Mismatch(day, missing)) => {
                tracing::warn!(%date, missing = missing.len(), "parity mismatch: date left as it is; the range goes on");
                report.days.push(day);
                first_mismatch.get_or_insert((date, missing));
            }
            Ok(DayOutcome::Done(day)) => report.days.push(day),
        }
    }
    if let Some((date, missing)) = first_mismatch {
        if report.last_run_status != Status::Failure {
            report.last_run_status = Status::Mismatch;
        }
        report.mismatch_date = Some(date);
        report.mismatch_uuid_count = missing.len() as u64;
        report.mismatch_uuids = missing.iter().map(Uuid::to_string).collect();
    }
    Ok(())
}

async fn clear_mismatch_if_passed(
    store: &impl Store,
    wm: &mut WatermarkState,
    report: &mut RunReport,
    opts: &RunOptions,
    cutoff: NaiveDate,
) -> Result<()> {
    if opts.dry_run || opts.only_date.is_some() {
        return Ok(());
    }
    if wm.watermark.mismatch_date.is_some() || wm.watermark.mismatch_runs != 0 {
        wm.watermark.mismatch_date = None;
        wm.watermark.mismatch_runs = 0;
        wm.watermark.mismatch_event_id = None;
        wm.write(store, opts.now).await?;
    }
    fill_watermark_fields(report, wm, cutoff);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn record_mismatch(
    store: &impl Store,
    wm: &mut WatermarkState,
    report: &mut RunReport,
    opts: &RunOptions,
    fence: &mut Fence<'_>,
    date: NaiveDate,
    missing: Vec<Uuid>,
) -> Result<()> {
    report.last_run_status = Status::Mismatch;
    report.stop_reason = StopReason::Mismatch;
    report.mismatch_date = Some(date);
    report.mismatch_uuid_count = missing.len() as u64;
    report.mismatch_uuids = missing.iter().map(Uuid::to_string).collect();
    tracing::warn!(%date, missing = missing.len(), first = %missing[0], "parity mismatch: flights without index rows; the walk stops here");
    let w = &mut wm.watermark;
    let event = opts
        .event_id
        .clone()
        .unwrap_or_else(|| opts.invocation_id.clone());
    if w.mismatch_date == Some(date) {
        if w.mismatch_event_id.as_deref() != Some(event.as_str()) {
            w.mismatch_runs += 1;
        }
    } else {
        w.mismatch_date = Some(date);
        w.mismatch_runs = 1;
    }
    w.mismatch_event_id = Some(event);
    report.mismatch_runs = w.mismatch_runs;
    if !opts.dry_run && opts.only_date.is_none() {
        fence.check().await?;
        wm.write(store, opts.now).await?;
    }
    Ok(())
}

/// The earliest `index/year=/month=/day=/` partition, by delimiter listings.
pub async fn earliest_partition(store: &impl Store) -> Result<Option<NaiveDate>> {
    let mut best: Option<NaiveDate> = None;
    let mut years = store.list_prefixes(INDEX_ROOT).await?;
    years.sort();
    for y in years
        .iter()
        .filter(|p| p[INDEX_ROOT.len()..].starts_with("year="))
    {
        let mut months = store.list_prefixes(y).await?;
        months.sort();
        for m in &months {
            let days = store.list_prefixes(m).await?;
            best = days
                .iter()
                .filter_map(|d| index_partition_date(d))
                .chain(best)
                .min();
            if best.is_some() {
                return Ok(best);
            }
        }
    }
    Ok(best)
}

#[allow(clippy::too_many_arguments)]
async fn process_day(
    store: &impl Store,
    config: &Config,
    opts: &RunOptions,
    report: &mut RunReport,
    fence: &mut Fence<'_>,
    date: NaiveDate,
    claimed: &HashSet<String>,
    mode: DayMode,
) -> Result<DayOutcome> {
    let t0 = Instant::now();
    let mut day = DayReport {
        date,
        ..Default::default()
    };
    for pass in 0..MAX_PASSES_PER_DATE {
        let (fp, ip) = (flights_prefix(date), index_prefix(date));
        let (flights, index) = if mode == DayMode::Sweep {
            // An already-compacted date: no parity gate (stragglers only add rows).
            (Vec::new(), store.list(&ip).await?)
        } else {
            tokio::try_join!(store.list(&fp), store.list(&ip))?
        };
        let listing = plan::classify_partition(index);
        let flight_set = plan::flight_uuids(&flights);
        day.flights = flight_set.len() as u64;
        if pass == 0 {
            day.foreign_objects = listing.foreign.len() as u64;
            day.foreign_keys = (listing.foreign.iter().take(FOREIGN_KEYS_SHOWN))
                .map(|(o, _)| o.key.clone())
                .collect();
            report.foreign_objects += listing.foreign.len() as u64;
            for (o, why) in &listing.foreign {
                tracing::debug!(key = %o.key, reason = why, "foreign object under index/: left alone");
            }
            if !listing.foreign.is_empty() {
                tracing::info!(%date, count = listing.foreign.len(), first = %listing.foreign[0].0.key,
                    "foreign objects in the partition (not index inputs): left alone");
            }
        }
        let plan = plan::plan_day(date, &listing, claimed);
        let mut prefetched = Prefetched::new();
        let gate_needed = match mode {
            DayMode::Walk => true,
            DayMode::Sweep => false,
            // Nothing to fold: the date is not touched, so no gate (no GET).
            DayMode::Repair => matches!(plan.action, DayAction::Compact { .. }),
        };
        if pass == 0 && gate_needed {
            let gate = parity_gate(store, &flight_set, &listing).await?;
            for (key, u) in gate.unreadable {
                report.skipped_files.push(SkippedFile {
                    key,
                    date: Some(date),
                    column: u.column,
                    reason: format!(
                        "multi-row index file unreadable for the parity check: {}",
                        u.reason
                    ),
                });
            }
            let missing = gate.missing;
            if !missing.is_empty() {
                day.parity = Some(Parity::Mismatch);
                day.action = Done::Mismatch;
                day.reason = format!("{} flight(s) without an index row", missing.len());
                day.mismatch_uuids = missing.iter().map(Uuid::to_string).collect();
                day.seconds = t0.elapsed().as_secs_f64();
                return Ok(DayOutcome::Mismatch(day, missing));
            }
            day.parity = Some(Parity::Passed);
            prefetched = gate.prefetched;
        }
        tracing::info!(pass, "{plan}");
        day.files_claimed = listing
            .inputs()
            .filter(|m| claimed.contains(&m.key))
            .count() as u64;
        let DayAction::Compact { inputs } = &plan.action else {
            if pass == 0 {
                day.action = Done::NothingToCompact;
                day.reason = plan.reason.clone();
            }
            break;
        };
        if opts.dry_run {
            day.action = Done::Planned;
            day.reason = plan.reason.clone();
            day.files_read = inputs.len() as u64;
            day.files_read_compacted = count_source(inputs, Source::Compacted);
            day.files_read_multi_row = count_source(inputs, Source::MultiRow);
            day.bytes_read = inputs.iter().map(|i| i.meta.size).sum();
            dry_run_read(store, config, report, &plan, inputs, &mut day, &prefetched).await?;
            break;
        }
        let kept_newer = commit_day(
            store,
            config,
            opts,
            report,
            fence,
            &plan,
            inputs,
            &mut day,
            &prefetched,
        )
        .await?;
        if kept_newer == 0 {
            break;
        }
        tracing::info!(%date, kept_newer, "inputs changed during the commit; folding their newer versions in");
    }
    day.seconds = t0.elapsed().as_secs_f64();
    tracing::info!(
        %date,
        action = %day.action,
        files = day.files_read,
        rows = day.rows_written,
        bytes = day.bytes_written,
        bytes_read = day.bytes_read,
        seconds = day.seconds,
        "date done"
    );
    Ok(DayOutcome::Done(day))
}

fn count_source(inputs: &[plan::PlannedInput], source: Source) -> u64 {
    inputs.iter().filter(|i| i.source == source).count() as u64
}

/// What the parity gate found for one date.
#[derive(Debug, Default)]
pub struct ParityGate {
    /// Flights under `flights/` with no index row, in uuid order.
    pub missing: Vec<Uuid>,
    /// Multi-row inputs (compacted and other) read to look for rows (0 when
    /// the per-flight file names already cover every flight).
    pub compacted_files_read: u64,
    /// Multi-row inputs that could not be decoded, with why (their rows
    /// count as absent).
    pub unreadable: Vec<(String, merge::Unmergeable)>,
    /// The bodies read, by key, for the merge to reuse (no second GET of
    /// the same version).
    pub prefetched: Prefetched,
}

/// The parity gate (docs/ARCHITECTURE.md, "Parity gate") for one date's
/// listings: a flight counts as indexed when a per-flight file is named by
/// its uuid, or when any multi-row input (a compacted file, or another
/// multi-row index file such as a legacy migration's) holds a row whose
/// `s3_key` carries its uuid. The multi-row inputs' `s3_key` columns are
/// read only when the names do not cover every flight; what was read is
/// returned in [`ParityGate::prefetched`]. Shared by the walk, repair
/// ranges and `status`.
///
/// Errors: an S3 error reading a multi-row input (one that vanished since
/// the listing counts as holding no rows).
pub async fn parity_gate(
    store: &impl Store,
    flights: &BTreeSet<Uuid>,
    listing: &plan::PartitionListing,
) -> Result<ParityGate> {
    let mut indexed: BTreeSet<Uuid> = listing.per_flight_uuids();
    let mut gate = ParityGate {
        missing: plan::missing_flights(flights, &indexed),
        ..ParityGate::default()
    };
    if gate.missing.is_empty() {
        return Ok(gate);
    }
    for (c, _) in listing.multi_row_inputs() {
        let Some(f) = store.get_opt(&c.key).await? else {
            continue;
        };
        gate.compacted_files_read += 1;
        match merge::flight_uuids_in(f.body.clone()) {
            Ok(us) => indexed.extend(us),
            Err(u) => gate.unreadable.push((c.key.clone(), u)),
        }
        gate.prefetched.insert(c.key.clone(), f);
    }
    gate.missing = plan::missing_flights(flights, &indexed);
    Ok(gate)
}

/// `Some((left, needed))` when less than `needed` remains before the run's
/// deadline (`RunOptions::deadline`); `None` when there is time, or no
/// deadline at all.
fn deadline_near(opts: &RunOptions, needed: Duration) -> Option<(Duration, Duration)> {
    let left = opts.deadline?.saturating_duration_since(Instant::now());
    (left < needed).then_some((left, needed))
}

/// The dry run's stand-in for [`commit_day`]: reads and decodes every input
/// as phase 1 of the commit would (GETs only), so the day reports the files
/// it would merge, their bytes, and the files it would skip and why.
async fn dry_run_read(
    store: &impl Store,
    config: &Config,
    report: &mut RunReport,
    plan: &DayPlan,
    inputs: &[plan::PlannedInput],
    day: &mut DayReport,
    prefetched: &Prefetched,
) -> Result<()> {
    let read = commit::read_inputs(
        store,
        plan.date,
        inputs,
        config.read_concurrency,
        config.row_group_rows,
        prefetched,
    )
    .await?;
    day.files_read = read.read.len() as u64;
    day.bytes_read = read.bytes_read;
    day.files_skipped += read.skipped.len() as u64;
    if nothing_to_merge(&read) {
        day.action = Done::NothingToCompact;
        day.reason = "nothing readable to fold: at most one compacted file".into();
    }
    report.skipped_files.extend(read.skipped);
    Ok(())
}

/// Whether what was read leaves nothing to merge: no readable per-flight or
/// other multi-row file, and at most one compacted file.
fn nothing_to_merge(read: &commit::ReadInputs) -> bool {
    let compacted = (read.merge_inputs.iter())
        .filter(|i| i.source == Source::Compacted)
        .count();
    compacted == read.merge_inputs.len() && compacted < 2
}

/// Runs the commit protocol for one planned date; returns how many inputs
/// were kept because they changed meanwhile.
#[allow(clippy::too_many_arguments)]
async fn commit_day(
    store: &impl Store,
    config: &Config,
    opts: &RunOptions,
    report: &mut RunReport,
    fence: &mut Fence<'_>,
    plan: &DayPlan,
    inputs: &[plan::PlannedInput],
    day: &mut DayReport,
    prefetched: &Prefetched,
) -> Result<usize> {
    let date = plan.date;
    let read = commit::read_inputs(
        store,
        date,
        inputs,
        config.read_concurrency,
        config.row_group_rows,
        prefetched,
    )
    .await?;
    day.bytes_read += read.bytes_read;
    report.skipped_files.extend(read.skipped.iter().cloned());
    day.files_skipped += read.skipped.len() as u64;
    if nothing_to_merge(&read) {
        // The first pass leaves the default (nothing_to_compact); a later
        // pass keeps what the first one did (compacted).
        day.reason = "nothing readable to fold: at most one compacted file".into();
        return Ok(0);
    }
    let prepared = commit::prepare(date, &read, opts.now, &opts.invocation_id)?;
    day.extra_columns = prepared.extra_columns.clone();
    if !prepared.extra_columns.is_empty() {
        tracing::warn!(%date, columns = ?prepared.extra_columns, "inputs carry columns the target schema does not know; kept after the known ones");
    }
    let m = &prepared.manifest;
    commit::create_manifest(store, &prepared.manifest_key, m).await?;
    if let (Some(output), Some(body)) = (&m.output, prepared.body.clone()) {
        commit::put_output(store, fence, m.job_id, output, body).await?;
        commit::verify_output(store, output).await?;
    }
    let deleted = commit::delete_inputs(store, fence, m).await?;
    day.files_read += m.inputs.len() as u64;
    day.files_read_compacted += (read.merge_inputs.iter())
        .filter(|i| i.source == Source::Compacted)
        .count() as u64;
    day.files_read_multi_row += (read.merge_inputs.iter())
        .filter(|i| i.source == Source::MultiRow)
        .count() as u64;
    day.files_deleted += deleted.deleted;
    day.files_kept_newer += deleted.kept_newer.len() as u64;
    day.duplicates_removed += prepared.duplicates_removed;
    day.action = Done::Compacted;
    day.reason = plan.reason.clone();
    if let Some(o) = &m.output {
        day.output_key = Some(o.key.clone());
        day.rows_written = o.rows;
        day.bytes_written = o.size;
        report.rows_written += o.rows;
        report.bytes_written += o.size;
    }
    report.files_compacted += deleted.deleted;
    report.duplicates_removed += prepared.duplicates_removed;
    if !deleted.failed.is_empty() {
        day.files_delete_failed += deleted.failed.len() as u64;
        report.files_delete_failed += deleted.failed.len() as u64;
        let f = &deleted.failed[0];
        return Err(Error::S3 {
            op: "DeleteObjects",
            bucket: store.bucket().to_string(),
            key: f.key.clone(),
            code: f.code.clone(),
            message: format!(
                "{} input(s) of {date} could not be deleted ({}); manifest {} kept, the next run retries",
                deleted.failed.len(),
                f.message,
                prepared.manifest_key
            ),
            transient: false,
        });
    }
    commit::delete_manifest(store, &prepared.manifest_key).await?;
    Ok(deleted.kept_newer.len())
}

#[cfg(test)]
mod send_checks {
    fn is_send<T: Send>(_: &T) {}

    #[allow(
        dead_code,
        unreachable_code,
        unused_variables,
        clippy::diverging_sub_expression
    )]
    fn run_future_is_send() {
        let store: &crate::storage::S3Store = unimplemented!();
        let config: &crate::config::Config = unimplemented!();
        let opts: &super::RunOptions = unimplemented!();
        is_send(&super::run(store, config, opts));
        let memory: &crate::storage::MemoryStore = unimplemented!();
        is_send(&super::run(memory, config, opts));
    }
}
