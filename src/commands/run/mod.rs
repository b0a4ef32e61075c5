//! The driver: lease, recover, walk dates, commit each, advance the watermark, report. It only
//! orchestrates: decisions are in [`crate::protocol`].

mod day;
mod watermark;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, Utc};
use uuid::Uuid;

use crate::data::config::Config;
use crate::infra::clock::Clock;
use crate::infra::deadline::{Deadline, Near};
use crate::infra::error::{Error, Result};
use crate::protocol::day::DateRange;

use crate::commands::progress::{Progress, ProgressSink};
use crate::data::report::{
    DayAction as Done, DayReport, RecoveryAction, RunReport, Status, StopReason,
};
use crate::data::state::WatermarkState;
use crate::infra::stop::Stop;
use crate::infra::storage::Store;
use crate::protocol::lease::{Fence, LeaseGuard};
use crate::protocol::partition::{earliest_partition, first_date};
use crate::protocol::plan;
use crate::protocol::recovery;
use day::{DayEnd, process_day};
use watermark::{
    clear_mismatch_if_passed, delete_finished_manifests, fill_watermark_fields, record_mismatch,
    write_watermark,
};

/// Per-invocation options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The invocation time (UTC): the event's `time` or `--now`.
    pub now: DateTime<Utc>,
    /// Lambda request id, or a fresh UUIDv7 on the CLI.
    pub invocation_id: String,
    /// The EventBridge event id (equal on redelivery): `mismatch_runs` counts an event once.
    pub event_id: Option<String>,
    /// Stop starting new dates when too little time is left before this.
    pub deadline: Option<Instant>,
    /// Read, plan and check parity as a real run would, and assess recovery ([`recovery::assess`]);
    /// take no lease, write and delete nothing.
    pub dry_run: bool,
    /// Compact only this date, whatever the watermark says, through the same lease, recovery,
    /// parity gate and commit; the watermark file is not written, a mismatch not recorded.
    pub only_date: Option<NaiveDate>,
    /// Repair these dates (UTC, both included) in [`DayMode::Repair`]; the watermark stays.
    pub repair: Option<DateRange>,
    /// The wall clock the lease reads (the simulation injects its own).
    pub clock: Arc<dyn Clock>,
    /// Where to report [`Progress`] (the CLI's progress bar).
    pub progress: Option<ProgressSink>,
    /// Asked to stop (SIGTERM, SIGINT; [`crate::infra::stop`]): no new date or destructive step
    /// starts, the lease is released, `stop_reason` is `interrupted`.
    pub stop: Option<Stop>,
}

/// How far the invocation time may lead the wall clock; further is [`Error::FutureInvocation`]: it
/// would move the watermark past today's cutoff, where no later run can tell.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

/// How `process_day` treats a date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DayMode {
    /// The walk (and `--date`): parity gate, then the plan; a mismatch stops the walk.
    Walk,
    /// The straggler sweep: no parity gate (stragglers only add rows).
    Sweep,
    /// A repair range: each date holding something to fold, folded as the walk folds; the plan
    /// first (nothing to fold costs no GET), then the parity gate; a mismatch does not stop it.
    Repair,
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
            repair: None,
            clock: crate::infra::clock::system(),
            progress: None,
            stop: None,
        }
    }

    fn send_progress(&self, p: Progress) {
        if let Some(sink) = &self.progress {
            sink.send(p);
        }
    }
}

/// What every step of one invocation works with.
struct Ctx<'a, 'f, S> {
    store: &'a S,
    config: &'a Config,
    opts: &'a RunOptions,
    /// Shared by the walk, a range and the sweep (each date is timed into it).
    deadline: &'a Deadline,
    fence: Fence<'f>,
    recovery: recovery::Recovery,
    /// Complete manifests still to delete: the walk deletes them beside its next watermark write,
    /// other callers at once ([`delete_finished_manifests`]); a crash leaves them to recovery.
    finished_manifests: Vec<String>,
    /// Without a watermark: `START_DATE`, else the earliest partition.
    first: Option<NaiveDate>,
    /// Blocked dates the report already names (see [`fail_blocked`]).
    blocked_reported: std::collections::BTreeSet<NaiveDate>,
    /// The last empty date [`walk_plan`] passed by, for [`walk_dates`] to move the watermark to.
    passed_empty: Option<NaiveDate>,
}

/// Runs one invocation; every failure is in the report (`last_run_status: Failure`, `errors`).
pub async fn run<S: Store + Clone + std::fmt::Debug + 'static>(
    store: &S,
    config: &Config,
    opts: &RunOptions,
) -> RunReport {
    let started = Instant::now();
    let _running = opts.stop.as_ref().map(Stop::enter);
    // S3 calls, retries included, end S3_DEADLINE_MARGIN early: the rest is for release and report.
    let deadline = Deadline::new(opts.deadline, config.deadline_margin);
    let store = &store.until(deadline.s3());
    // Read once: the invocation time may not be ahead of it.
    let wall = opts.clock.now();
    let cutoffs = plan::Cutoff::of_run(opts.now, wall, config.lag_days);
    let cutoff = cutoffs.walk;
    let mut report = RunReport {
        last_run_at: opts.now,
        invocation_id: opts.invocation_id.clone(),
        bucket: store.bucket().to_string(),
        cutoff: Some(cutoff),
        dry_run: opts.dry_run,
        ..RunReport::default()
    };
    tracing::info!(bucket = store.bucket(), %cutoff, now = %opts.now, dry_run = opts.dry_run, invocation_id = %opts.invocation_id, event_id = opts.event_id.as_deref(), "run starting");
    let ahead = opts.now - wall;
    if ahead > chrono::Duration::from_std(MAX_CLOCK_SKEW).expect("small") {
        report.stop_reason = StopReason::Error;
        report.fail(Error::FutureInvocation {
            now: opts.now.to_rfc3339(),
            wall: wall.to_rfc3339(),
            ahead_seconds: ahead.num_seconds(),
            skew_seconds: MAX_CLOCK_SKEW.as_secs() as i64,
        });
        return finish(report, started, opts);
    }
    let mut lease = None;
    if !opts.dry_run {
        let (clock, holder) = (opts.clock.clone(), &opts.invocation_id);
        match LeaseGuard::acquire_with_clock(store, clock, holder, config.lease).await {
            Ok(mut l) => {
                if let Some(stop) = &opts.stop {
                    l.stop_on(stop.clone());
                }
                lease = Some(l)
            }
            Err(e @ Error::LeaseHeld { .. }) => {
                tracing::warn!(error = %e, "another invocation holds the lease; doing nothing");
                report.stop_reason = StopReason::LeaseHeld;
                if let Ok(wm) = WatermarkState::read(store).await {
                    // The lag as the walk would count it; reported, not published.
                    let (last, start) = (wm.watermark.last_compacted_date, config.start_date);
                    let first = first_date(store, last, start).await.ok().flatten();
                    fill_watermark_fields(&mut report, &wm, cutoff, first);
                    report.watermark_before = wm.watermark.last_compacted_date;
                }
                report.errors.push(e.to_string());
                return finish(report, started, opts);
            }
            Err(e) => {
                report.stop_reason = StopReason::of(&e);
                report.fail(e);
                return finish(report, started, opts);
            }
        }
    }
    let fence = lease.as_mut().map(|l| l as &mut dyn crate::protocol::lease::Confirm);
    let result = walk(store, config, opts, &deadline, cutoffs, &mut report, Fence(fence)).await;
    if let Err(e) = result {
        report.stop_reason = StopReason::of(&e);
        report.fail(e);
    }
    if let Some(l) = lease
        && let Err(e) = l.release().await
    {
        tracing::warn!(error = %e, "could not release the lease; it lapses on its own");
        report.errors.push(e.to_string());
        report.errors_total += 1;
    }
    finish(report, started, opts)
}

/// Every run's end: the duration, the log's last line, the progress display told.
fn finish(mut report: RunReport, started: Instant, opts: &RunOptions) -> RunReport {
    report.duration_seconds = started.elapsed().as_secs_f64();
    let watermark =
        report.last_compacted_date.map_or_else(|| "none".to_string(), |d| d.to_string());
    // The status and stop reason as the report spells them, not their Rust names.
    tracing::info!(status = report.last_run_status.as_str(), stop_reason = %report.stop_reason,
        days = report.days_compacted, files = report.files_compacted, rows = report.rows_written,
        %watermark, seconds = crate::infra::text::millis(report.duration_seconds), "run finished");
    opts.send_progress(Progress::Finished);
    report
}

/// Reads the watermark, recovers (dry run: assesses), walks (or `--date`, or a range), sweeps.
async fn walk(
    store: &impl Store,
    config: &Config,
    opts: &RunOptions,
    deadline: &Deadline,
    cutoffs: plan::Cutoff,
    report: &mut RunReport,
    mut fence: Fence<'_>,
) -> Result<()> {
    let cutoff = cutoffs.walk;
    // Recovery never writes the watermark, and no other invocation does while this one holds the lease.
    let (mut wm, recovery) = if opts.dry_run {
        // What recovery would do, done by nobody: the walk plans as after it.
        tokio::try_join!(WatermarkState::read(store), recovery::assess(store, config.input_budget))?
    } else {
        tokio::try_join!(
            WatermarkState::read(store),
            recovery::recover(store, &mut fence, config.input_budget)
        )?
    };
    report.watermark_before = wm.watermark.last_compacted_date;
    let first = first_date(store, wm.watermark.last_compacted_date, config.start_date).await?;
    fill_watermark_fields(report, &wm, cutoff, first);
    // Ahead of the wall clock's cutoff (a future --now, or a hand edit): no run would compact
    // again and the lag would read 0, so fail saying how to fix it.
    let today = cutoffs.today;
    if let Some(w) = wm.watermark.last_compacted_date
        && let Some(days) = plan::watermark_ahead_days(Some(w), today)
    {
        report.watermark_ahead_days = Some(days);
        report.watermark_lag_days = Some(days);
        return Err(Error::WatermarkAhead {
            bucket: store.bucket().to_string(),
            key: crate::data::keys::WATERMARK_KEY.to_string(),
            watermark: w,
            cutoff: today,
            days,
        });
    }

    if !opts.dry_run {
        let recovered = recovery.recovered.iter();
        report.manifests_recovered =
            recovered.filter(|m| m.action != RecoveryAction::QuarantinedEarlier).count() as u64;
        report.files_compacted += recovery.files_deleted;
        report.files_delete_failed += recovery.files_delete_failed;
    }
    report.set_recovered(&recovery.recovered);
    let mut cx = Ctx {
        store,
        config,
        opts,
        deadline,
        fence,
        recovery,
        finished_manifests: Vec::new(),
        first,
        blocked_reported: Default::default(),
        passed_empty: None,
    };
    let result = match opts.repair {
        Some(range) => repair_range(&mut cx, report, range).await,
        None => walk_and_sweep(&mut cx, report, &mut wm).await,
    };
    // A quarantined or stuck manifest on any date, walked or not, fails the run until resolved.
    let blocked: Vec<NaiveDate> = cx.recovery.blocked.walk_blocked_dates().collect();
    for date in blocked {
        fail_blocked(&mut cx, report, date);
    }
    result
}

async fn walk_and_sweep(
    cx: &mut Ctx<'_, '_, impl Store>,
    report: &mut RunReport,
    wm: &mut WatermarkState,
) -> Result<()> {
    walk_dates(cx, report, wm).await?;
    delete_finished_manifests(cx).await?;
    if cx.opts.only_date.is_none() {
        sweep(cx, report).await?;
    }
    Ok(())
}

/// The dates the walk goes through, from the day after the watermark (or `--date`'s) to the
/// cutoff; `None` when there is none (the report's `stop_reason` and the log say why).
async fn walk_plan(
    cx: &mut Ctx<'_, '_, impl Store>,
    report: &mut RunReport,
    wm: &mut WatermarkState,
    cutoff: NaiveDate,
) -> Result<Option<Vec<NaiveDate>>> {
    if let Some(d) = cx.opts.only_date {
        return Ok(Some(vec![d]));
    }
    let last = wm.watermark.last_compacted_date;
    let Some(start) = plan::walk_start(last, cx.config.start_date, cx.first) else {
        report.stop_reason = StopReason::NoPartitions;
        // A fresh deployment, or the wrong bucket: a Success, said louder.
        tracing::warn!(
            bucket = %report.bucket,
            "no watermark, no START_DATE and no index/ partition: nothing to do (is S3_BUCKET the archive's bucket?)"
        );
        return Ok(None);
    };
    if start > cutoff {
        report.stop_reason = StopReason::NothingToDo;
        tracing::info!(%start, %cutoff, "watermark is at the cutoff: nothing to do");
        clear_mismatch_if_passed(cx, report, wm, cutoff).await?;
        return Ok(None);
    }
    // Catching up (a watermark or START_DATE far back): start at the first partition with data
    // (one delimiter listing each of index/ and flights/). A daily run lists nothing more.
    let start = if start < cutoff && (last.is_some() || cx.config.start_date.is_some()) {
        let earliest = earliest_partition(cx.store).await?;
        let blocked = cx.recovery.blocked.walk_blocked_dates().filter(|d| *d >= start).min();
        let first = plan::first_date_with_data(start, cutoff, earliest, blocked);
        if first > start {
            tracing::info!(from = %start, to = %first,
                "no partition before {first}: the walk starts there instead of walking {} empty dates",
                (first - start).num_days());
            cx.passed_empty = first.pred_opt();
        }
        first
    } else {
        start
    };
    Ok(Some(start.iter_days().take_while(|d| *d <= cutoff).collect()))
}

/// Walks the dates of [`walk_plan`], moving the watermark after each (not for `--date` or a dry run).
async fn walk_dates(
    cx: &mut Ctx<'_, '_, impl Store>,
    report: &mut RunReport,
    wm: &mut WatermarkState,
) -> Result<()> {
    let cutoff = report.cutoff.expect("cutoff set");
    let Some(dates) = walk_plan(cx, report, wm, cutoff).await? else {
        return Ok(());
    };
    walking(cx, &dates);
    let opts = cx.opts;
    // Empty dates passed by count as walked: the watermark moves to the eve of the first with data.
    if let Some(passed) = cx.passed_empty.take()
        && !opts.dry_run
        && opts.only_date.is_none()
        && wm.watermark.last_compacted_date.is_none_or(|w| w < passed)
    {
        let (written, manifests) = write_watermark(cx, wm, passed).await;
        written?;
        fill_watermark_fields(report, wm, cutoff, cx.first);
        manifests?;
    }
    report.stop_reason =
        if opts.only_date.is_some() { StopReason::EndOfRange } else { StopReason::ReachedCutoff };
    let then = if opts.only_date.is_some() {
        "--date is not started; run it again with more time (--max-duration)"
    } else {
        "the next run continues"
    };
    for date in dates {
        if stop_for_deadline(cx, report, date, then) {
            break;
        }
        if cx.recovery.blocked.blocking_walk(date).is_some() {
            report.stop_reason = StopReason::BlockedByManifest;
            fail_blocked(cx, report, date);
            break;
        }
        match timed_day(cx, report, date, DayMode::Walk).await? {
            DayEnd::Done => {}
            DayEnd::Mismatch(missing) => {
                record_mismatch(cx, report, wm, date, missing).await?;
                return Ok(());
            }
            DayEnd::Unfinished => break,
        }
        if opts.dry_run || opts.only_date.is_some() {
            delete_finished_manifests(cx).await?;
            continue;
        }
        let (written, manifests) = write_watermark(cx, wm, date).await;
        written?;
        report.days_compacted += 1;
        fill_watermark_fields(report, wm, cutoff, cx.first);
        manifests?;
    }
    if report.stop_reason == StopReason::ReachedCutoff {
        clear_mismatch_if_passed(cx, report, wm, cutoff).await?;
    }
    Ok(())
}

fn walking(cx: &Ctx<'_, '_, impl Store>, dates: &[NaiveDate]) {
    let (first, last) = (dates[0], dates[dates.len() - 1]);
    tracing::info!(%first, %last, count = dates.len(), "walking dates");
    cx.opts.send_progress(Progress::Dates { count: dates.len() as u64 });
}

/// Whether the walk or a range must not start `date`: a stop was requested, or [`Deadline::near`].
/// Then the report says so (`resume_date`) and the log says how the work goes on (`then`).
fn stop_for_deadline(
    cx: &Ctx<'_, '_, impl Store>,
    report: &mut RunReport,
    date: NaiveDate,
    then: &str,
) -> bool {
    if let Some(signal) = cx.opts.stop.as_ref().and_then(Stop::requested) {
        tracing::warn!(%date, signal, "stop requested: not starting another date; {then}");
        report.resume_date = Some(date);
        report.fail(Error::Interrupted { signal, what: format!("date {date}") });
        report.stop_reason = StopReason::Interrupted;
        return true;
    }
    let Some(Near { left, needed }) = cx.deadline.near() else {
        return false;
    };
    tracing::warn!(%date, left_s = left.as_secs_f64(), needed_s = needed.as_secs_f64(),
        "deadline near: not starting another date; {then}");
    report.stop_reason = StopReason::Deadline;
    report.resume_date = Some(date);
    true
}

/// [`process_day`] for the walk and a range ([`Deadline::timed`]), its day reported whatever
/// happened. Errors: the one that stopped the date (the day is reported `failed`).
async fn timed_day(
    cx: &mut Ctx<'_, '_, impl Store>,
    report: &mut RunReport,
    date: NaiveDate,
    mode: DayMode,
) -> Result<DayEnd> {
    let deadline = cx.deadline;
    let (day, end) = deadline.timed(process_day(cx, date, mode)).await;
    if let Ok(DayEnd::Unfinished) = end {
        // A deadline stop within the date: the next run goes on from its parts.
        report.stop_reason = StopReason::Deadline;
        report.resume_date = Some(date);
    }
    report.add_day(day);
    end
}

/// The dates the straggler sweep looks at: the last `sweep_days` dates up to `watermark` (before
/// the run), none before `start_date`, oldest first.
///
/// ```
/// use archive_compaction::commands::run::sweep_dates;
/// let d = |s: &str| chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
/// assert_eq!(sweep_dates(d("2026-07-20"), 3, None), [d("2026-07-18"), d("2026-07-19"), d("2026-07-20")]);
/// assert_eq!(sweep_dates(d("2026-07-20"), 14, Some(d("2026-07-19"))), [d("2026-07-19"), d("2026-07-20")]);
/// assert!(sweep_dates(d("2026-07-20"), 0, None).is_empty());
/// ```
pub fn sweep_dates(
    watermark: NaiveDate,
    sweep_days: u32,
    start_date: Option<NaiveDate>,
) -> Vec<NaiveDate> {
    let Some(back) = sweep_days.checked_sub(1) else {
        return Vec::new();
    };
    let first =
        watermark.checked_sub_days(chrono::Days::new(u64::from(back))).unwrap_or(NaiveDate::MIN);
    let first = start_date.map_or(first, |s| first.max(s));
    (first.iter_days().take_while(|d| *d <= watermark)).collect()
}

/// Fails the run for the blocked `date` ([`crate::protocol::day::BlockReason::blocks_walk`]),
/// naming it and why, once per date.
fn fail_blocked(cx: &mut Ctx<'_, '_, impl Store>, report: &mut RunReport, date: NaiveDate) {
    if !cx.blocked_reported.insert(date) {
        return;
    }
    if let Some(why) = cx.recovery.blocked.blocking_walk(date) {
        let detail = (report.recovered.iter())
            .find(|m| {
                m.date == Some(date)
                    && matches!(
                        m.action,
                        RecoveryAction::Quarantined
                            | RecoveryAction::QuarantinedEarlier
                            | RecoveryAction::Stuck
                    )
            })
            .map_or_else(String::new, |m| format!(" ({})", m.detail));
        report.fail(format!(
            "{date} is blocked: {why}{detail}; no run touches the date until it is resolved"
        ));
    }
}

/// The straggler sweep over [`sweep_dates`] up to the watermark before the run: index files that
/// arrived or were rewritten after compaction are folded into a new compacted file; one
/// ListObjectsV2 a date with nothing to fold. A date blocked by a manifest is skipped (the run
/// fails on it: [`fail_blocked`]).
async fn sweep(cx: &mut Ctx<'_, '_, impl Store>, report: &mut RunReport) -> Result<()> {
    let Some(last) = report.watermark_before else {
        return Ok(());
    };
    let (opts, config) = (cx.opts, cx.config);
    if config.sweep_days == 0 || report.last_run_status == Status::Failure {
        return Ok(());
    }
    for date in sweep_dates(last, config.sweep_days, config.start_date) {
        if let Some(signal) = opts.stop.as_ref().and_then(Stop::requested) {
            tracing::warn!(%date, signal, "stop requested: straggler sweep stops here");
            report.stop_reason = StopReason::Interrupted;
            let what = format!("the straggler sweep of {date}");
            report.fail(Error::Interrupted { signal, what });
            break;
        }
        if let Some(Near { left, needed }) = cx.deadline.near() {
            tracing::warn!(%date, left_s = left.as_secs_f64(), needed_s = needed.as_secs_f64(), "deadline near: straggler sweep stops here");
            break;
        }
        if let Some(why) = cx.recovery.blocked.blocking_walk(date) {
            tracing::warn!(%date, reason = %why, "straggler sweep skips the date: blocked by a manifest; late files there are not folded until an operator resolves it");
            continue;
        }
        let deadline = cx.deadline;
        let (mut day, end) = deadline.timed(process_day(cx, date, DayMode::Sweep)).await;
        delete_finished_manifests(cx).await?;
        match end {
            Err(e) => {
                report.add_day(day);
                return Err(e);
            }
            Ok(DayEnd::Done) if matches!(day.action, Done::Compacted | Done::Planned) => {
                day.action = if opts.dry_run { Done::SweepPlanned } else { Done::Swept };
                tracing::info!(%date, files = day.files_read, "stragglers folded into the compacted file");
                report.add_day(day);
            }
            Ok(DayEnd::Done | DayEnd::Mismatch(_)) => report.add_unlisted_day(day),
            Ok(DayEnd::Unfinished) => {
                report.add_day(day);
                break;
            }
        }
    }
    Ok(())
}

/// A repair range ([`RunOptions::repair`]): Mismatch when any date mismatched (its `days[]` entry
/// says so), Failure when a date is blocked or an error stopped the range.
async fn repair_range(
    cx: &mut Ctx<'_, '_, impl Store>,
    report: &mut RunReport,
    range: DateRange,
) -> Result<()> {
    let dates = range.dates();
    let (from, to) = (range.from(), range.to());
    tracing::info!(%from, %to, "repairing a range of dates: folding what each holds; the watermark is not moved");
    walking(cx, &dates);
    report.stop_reason = StopReason::EndOfRange;
    let mut first_mismatch: Option<(NaiveDate, crate::data::spill::UuidSet)> = None;
    for date in dates {
        if stop_for_deadline(cx, report, date, "the same event again continues from here") {
            break;
        }
        if let Some(why) = cx.recovery.blocked.blocking_walk(date) {
            report.add_day(DayReport {
                date,
                action: Done::Blocked,
                reason: why.to_string(),
                ..Default::default()
            });
            fail_blocked(cx, report, date);
            continue;
        }
        let end = timed_day(cx, report, date, DayMode::Repair).await?;
        delete_finished_manifests(cx).await?;
        if let DayEnd::Unfinished = end {
            break;
        }
        if let DayEnd::Mismatch(missing) = end {
            tracing::warn!(%date, missing = missing.len(), "parity mismatch: date left as it is; the range goes on");
            first_mismatch.get_or_insert((date, missing));
        }
    }
    // A long range's plan lists its dates with work, not its first empty ones.
    report.work_first();
    if let Some((date, missing)) = first_mismatch {
        // The run-level `mismatch_*` fields stay the state's.
        tracing::warn!(first = %date, missing = missing.len(), "the range ends as a Mismatch: see days[] (parity, mismatch_uuids)");
        if report.last_run_status != Status::Failure {
            report.last_run_status = Status::Mismatch;
        }
    }
    Ok(())
}

#[cfg(test)]
mod send_checks {
    fn is_send<T: Send>(_: &T) {}

    #[allow(dead_code, unreachable_code, unused_variables, clippy::diverging_sub_expression)]
    fn run_future_is_send() {
        let store: &crate::infra::storage::S3Store = unimplemented!();
        let config: &crate::data::config::Config = unimplemented!();
        let opts: &super::RunOptions = unimplemented!();
        is_send(&super::run(store, config, opts));
        let memory: &crate::infra::storage::MemoryStore = unimplemented!();
        is_send(&super::run(memory, config, opts));
    }
}
