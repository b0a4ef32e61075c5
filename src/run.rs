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
use crate::commit::{self, Fence};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::keys::{INDEX_ROOT, flights_prefix, index_partition_date, index_prefix};
use crate::lease::LeaseGuard;
use crate::merge::{self, Source};
use crate::plan::{self, DayAction, DayPlan};
use crate::recovery;
use crate::report::{DayReport, Parity, RunReport, SkippedFile, Status, StopReason};
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
    /// The wall clock the lease reads ([`crate::clock::SystemClock`] but in
    /// the simulation).
    pub clock: Arc<dyn Clock>,
}

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
            .filter(|m| m.action != "quarantined_earlier")
            .count() as u64;
        report.files_compacted += r.files_deleted;
        report.files_delete_failed += r.files_delete_failed;
        report.recovered = r.recovered.clone();
        r
    };

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
            false,
        )
        .await;
        slowest = slowest.max(t0.elapsed());
        match outcome {
            Err(e) => {
                report.days.push(DayReport {
                    date,
                    action: "failed".into(),
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
            true,
        )
        .await?;
        if let DayOutcome::Done(mut day) = outcome
            && (day.action == "compacted" || day.action == "planned")
        {
            day.action = if opts.dry_run {
                "sweep_planned".into()
            } else {
                "swept".into()
            };
            report.stragglers_folded += day.files_read.saturating_sub(day.files_read_compacted);
            tracing::info!(%date, files = day.files_read, "stragglers folded into the compacted file");
            report.days.push(day);
        }
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
    sweep: bool,
) -> Result<DayOutcome> {
    let t0 = Instant::now();
    let mut day = DayReport {
        date,
        ..Default::default()
    };
    for pass in 0..MAX_PASSES_PER_DATE {
        let (fp, ip) = (flights_prefix(date), index_prefix(date));
        let (flights, index) = if sweep {
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
        }
        if pass == 0 && sweep {
            report.foreign_objects += listing.foreign.len() as u64;
        }
        if pass == 0 && !sweep {
            report.foreign_objects += listing.foreign.len() as u64;
            for (o, why) in &listing.foreign {
                tracing::debug!(key = %o.key, reason = why, "foreign object under index/: left alone");
            }
            let gate = parity_gate(store, &flight_set, &listing).await?;
            for (key, u) in gate.unreadable {
                report.skipped_files.push(SkippedFile {
                    key,
                    date: Some(date),
                    column: u.column,
                    reason: format!(
                        "compacted file unreadable for the parity check: {}",
                        u.reason
                    ),
                });
            }
            let missing = gate.missing;
            if !missing.is_empty() {
                day.parity = Some(Parity::Mismatch);
                day.action = "mismatch".into();
                day.reason = format!("{} flight(s) without an index row", missing.len());
                day.seconds = t0.elapsed().as_secs_f64();
                return Ok(DayOutcome::Mismatch(day, missing));
            }
            day.parity = Some(Parity::Passed);
        }
        let plan = plan::plan_day(date, &listing, claimed);
        tracing::info!(pass, "{plan}");
        day.files_claimed = (listing.per_flight.iter().map(|(_, m)| m))
            .chain(&listing.compacted)
            .filter(|m| claimed.contains(&m.key))
            .count() as u64;
        let DayAction::Compact { inputs } = &plan.action else {
            if pass == 0 {
                day.action = "nothing_to_compact".into();
                day.reason = plan.reason.clone();
            }
            break;
        };
        if opts.dry_run {
            day.action = "planned".into();
            day.reason = plan.reason.clone();
            day.files_read = inputs.len() as u64;
            day.files_read_compacted = inputs.iter().filter(|i| i.flight.is_none()).count() as u64;
            day.bytes_read = inputs.iter().map(|i| i.meta.size).sum();
            dry_run_read(store, config, report, &plan, inputs, &mut day).await?;
            break;
        }
        let kept_newer =
            commit_day(store, config, opts, report, fence, &plan, inputs, &mut day).await?;
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

/// What the parity gate found for one date.
#[derive(Debug, Default)]
pub struct ParityGate {
    /// Flights under `flights/` with no index row, in uuid order.
    pub missing: Vec<Uuid>,
    /// Compacted files read to look for rows (0 when the per-flight file
    /// names already cover every flight).
    pub compacted_files_read: u64,
    /// Compacted files that could not be decoded, with why (their rows
    /// count as absent).
    pub unreadable: Vec<(String, merge::Unmergeable)>,
}

/// The parity gate (DESIGN.md, "Parity gate") for one date's listings:
/// per-flight file names first; the compacted files' `s3_key` columns are
/// read only when the names do not cover every flight. Shared by the walk
/// and `status`.
///
/// Errors: an S3 error reading a compacted file.
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
    if gate.missing.is_empty() || listing.compacted.is_empty() {
        return Ok(gate);
    }
    for c in &listing.compacted {
        let f = store.get(&c.key).await?;
        gate.compacted_files_read += 1;
        match merge::flight_uuids_in(f.body) {
            Ok(us) => indexed.extend(us),
            Err(u) => gate.unreadable.push((c.key.clone(), u)),
        }
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
) -> Result<()> {
    let read = commit::read_inputs(
        store,
        plan.date,
        inputs,
        config.read_concurrency,
        config.row_group_rows,
    )
    .await?;
    day.files_read = read.read.len() as u64;
    day.bytes_read = read.bytes_read;
    day.files_skipped += read.skipped.len() as u64;
    report.skipped_files.extend(read.skipped);
    let compacted = read
        .merge_inputs
        .iter()
        .filter(|i| matches!(i.source, Source::Compacted))
        .count();
    if read.merge_inputs.len() == compacted && compacted < 2 {
        day.action = "nothing_to_compact".into();
        day.reason = "no readable per-flight files".into();
    }
    Ok(())
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
) -> Result<usize> {
    let date = plan.date;
    let read = commit::read_inputs(
        store,
        date,
        inputs,
        config.read_concurrency,
        config.row_group_rows,
    )
    .await?;
    day.bytes_read += read.bytes_read;
    report.skipped_files.extend(read.skipped.iter().cloned());
    day.files_skipped += read.skipped.len() as u64;
    let per_flight_read = read
        .merge_inputs
        .iter()
        .filter(|i| matches!(i.source, Source::PerFlight(_)))
        .count();
    if per_flight_read == 0 && read.merge_inputs.len() < 2 {
        day.action = if day.action.is_empty() {
            "nothing_to_compact".into()
        } else {
            day.action.clone()
        };
        day.reason = "no readable per-flight files".into();
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
        commit::put_output(store, fence, output, body).await?;
        commit::verify_output(store, output).await?;
    }
    let deleted = commit::delete_inputs(store, fence, m).await?;
    day.files_read += m.inputs.len() as u64;
    day.files_read_compacted += read
        .merge_inputs
        .iter()
        .filter(|i| matches!(i.source, Source::Compacted))
        .count() as u64;
    day.files_deleted += deleted.deleted;
    day.files_kept_newer += deleted.kept_newer.len() as u64;
    day.duplicates_removed += prepared.duplicates_removed;
    day.action = "compacted".into();
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
