//! One date through the commit protocol, in passes, into its own [`DayReport`].

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::time::Instant;

use chrono::NaiveDate;
use uuid::Uuid;

use super::watermark::delete_finished_manifests;
use super::{Ctx, DayMode};
use crate::commands::progress::Progress;
use crate::data::merge::{Source, Unmergeable};
use crate::data::report::{
    DAY_KEYS_SHOWN, DayAction as Done, DayReport, Parity, RunReport, SkippedFile, UnreadFile,
};
use crate::data::spill::UuidSet;
use crate::infra::deadline::PartFit;
use crate::infra::error::{Error, Result};
use crate::infra::storage::Store;
use crate::infra::text::Shortened;
use crate::protocol::commit::{self, PartEnd};
use crate::protocol::day::Day;
use crate::protocol::partition::{self, ParityCheck, parity_check};
use crate::protocol::plan;
use crate::protocol::read::{self, Prefetched};
use crate::protocol::sizing::MemoryFit;

/// How many times a date is planned in one run when inputs changed during its commit. Passes for
/// files past a listing window do not count: each compacts a part at least, or the date ends.
const MAX_PASSES_PER_DATE: usize = 3;

/// How one date ended, for the step that asked; an error that stopped it is its action `failed`.
pub(super) enum DayEnd {
    /// Compacted, nothing to do, or planned.
    Done,
    /// Parity failed: the flights without an index row.
    Mismatch(UuidSet),
    /// The deadline came between two parts (action `partial`); the next run goes on.
    Unfinished,
}

/// One date in any [`DayMode`], in passes ([`pass`]), into the date's report; the run's report is
/// the caller's ([`RunReport::add_day`]).
pub(super) async fn process_day(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    mode: DayMode,
) -> (DayReport, Result<DayEnd>) {
    let t0 = Instant::now();
    let mut day = DayReport { date, ..Default::default() };
    let outcome = day_passes(cx, date, mode, &mut day).await;
    day.seconds = t0.elapsed().as_secs_f64();
    if day.rows_of_other_days > 0 {
        // Once per date, whatever the passes.
        tracing::warn!(%date, rows = day.rows_of_other_days, first = ?day.other_days_uuids,
            "multi-row inputs hold rows of other days (first_message on another UTC date): merged into this date where they are, not moved");
    }
    let end = match outcome {
        Err(e @ Error::DateUnfinished { .. }) => {
            tracing::warn!(%date, parts = day.parts, files_left = day.files_left, "{e}");
            day.action = Done::Partial;
            day.reason = e.to_string();
            Ok(DayEnd::Unfinished)
        }
        Err(e) => {
            day.action = Done::Failed;
            day.reason = e.to_string();
            Err(e)
        }
        Ok(Some(missing)) => Ok(DayEnd::Mismatch(missing)),
        Ok(None) => {
            let (f, r, b) = (day.files_read, day.rows_written, day.bytes_written);
            let summary = match f {
                0 => day.action.to_string(),
                _ => crate::infra::text::before_after(f, day.bytes_read, r, day.parts, b),
            };
            tracing::info!(%date, action = %day.action, files = f, rows = r, bytes = b,
                bytes_read = day.bytes_read, seconds = crate::infra::text::millis(day.seconds),
                "date done: {summary}");
            cx.opts.send_progress(Progress::DateDone {
                date,
                action: day.action,
                files: day.files_read,
                bytes_read: day.bytes_read,
                rows: day.rows_written,
                bytes: day.bytes_written,
            });
            Ok(DayEnd::Done)
        }
    };
    (day, end)
}

/// What one date carries from pass to pass ([`day_passes`]).
#[derive(Default)]
struct DateState {
    /// Per-flight files a listing holds at most.
    window: usize,
    /// The flights the current pass listed, for its parts' own-row checks.
    flights: Option<UuidSet>,
    unread_files: Vec<UnreadFile>,
    slowest_part: std::time::Duration,
    outputs: Outputs,
    /// Passes run because inputs changed during a commit.
    newer_passes: usize,
    /// Per-flight files the last pass listed past its window.
    left_past_window: usize,
}

enum PassEnd {
    /// The date is done (or stopped on purpose: a held-back input, a dry run).
    Done,
    Mismatch(UuidSet),
    /// List the date again: files past the window, or newer versions, this many.
    Again(usize),
}

/// [`process_day`]'s passes, as many as [`next_pass`] asks for; `Some(missing)` on a mismatch.
async fn day_passes(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    mode: DayMode,
    day: &mut DayReport,
) -> Result<Option<UuidSet>> {
    let window = MemoryFit::of(cx.config).window().try_into().unwrap_or(usize::MAX);
    let mut st = DateState { window, ..Default::default() };
    let mut pending = 0;
    for number in 0.. {
        if number > 0 {
            // The next pass reads S3 before its first part's own deadline check.
            let smallest = (pending as u64).min(crate::protocol::sizing::MIN_PART_FILES);
            if let Some(near) = cx.deadline.near_part(smallest, st.slowest_part) {
                return Err(unfinished(day, &near, pending, String::new()));
            }
        }
        match pass(cx, date, mode, number, &mut st, day).await? {
            PassEnd::Done => break,
            PassEnd::Mismatch(missing) => return Ok(Some(missing)),
            PassEnd::Again(n) => pending = n,
        }
        // The next pass folds this one's output in: its manifest goes first.
        delete_finished_manifests(cx).await?;
    }
    if !st.unread_files.is_empty() {
        let unread = std::mem::take(&mut st.unread_files);
        return Ok(Some(lost_rows(day, Vec::new(), unread)?));
    }
    if st.left_past_window > 0 {
        // The last window committed nothing: never a date done with files left past it.
        let (window, left) = (st.window as u64, st.left_past_window as u64);
        return Err(Error::WindowStalled { date, window, left });
    }
    Ok(None)
}

/// One pass of a date: list a window, size its parts for the run's memory, gate its parity (the
/// first pass), plan, and commit part by part.
async fn pass(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    mode: DayMode,
    number: usize,
    st: &mut DateState,
    day: &mut DayReport,
) -> Result<PassEnd> {
    let settings = read::ReadSettings::of(cx.config);
    let t = Instant::now();
    // Every pass lists the flights again: one archived meanwhile gets its own-row check.
    let with_flights = mode != DayMode::Sweep;
    let mut listed =
        Day::list_window(cx.store, date, with_flights, st.window, settings.spill).await?;
    day.passes += 1;
    let flights = st.flights.insert(std::mem::take(&mut listed.flights));
    tracing::debug!(%date, phase = "list", flights = flights.len(), spilled = flights.spilled(), seconds = crate::infra::text::millis(t.elapsed().as_secs_f64()), "partition listed");
    let listing = &listed.index;
    day.flights = flights.len();
    let beyond_window = listing.beyond_window.files;
    st.left_past_window = beyond_window;
    // Refused before any input is read: a report, not an allocation failure.
    let files = (listing.inputs().count() + beyond_window) as u64;
    let sizing = MemoryFit::of(cx.config).sizing(date, files, day.flights)?;
    crate::data::spill::check_room(date, files.max(day.flights), settings.spill)?;
    if number == 0 {
        note_foreign(day, listing);
    }
    let gate_needed = match mode {
        DayMode::Walk => true,
        DayMode::Sweep => false,
        DayMode::Repair => plan::compacts(listing, &cx.recovery.claimed),
    };
    let mut prefetched = Prefetched::new();
    if number == 0 && gate_needed {
        match gate(cx.store, date, flights, listing, settings, day).await? {
            Ok(bodies) => prefetched = bodies,
            Err(missing) => return Ok(PassEnd::Mismatch(missing)),
        }
    }
    let day_plan = plan::plan_day(date, std::mem::take(&mut listed.index), &cx.recovery.claimed);
    let plan = partition::plan_date(cx.store, day_plan, &sizing, settings, &mut prefetched).await?;
    tracing::info!(%date, "plan: {plan}");
    tracing::debug!(%date, pass = number, "planned");
    day.files_claimed = day.files_claimed.max(plan.claimed as u64);
    if plan.parts.is_empty() {
        if number == 0 {
            day.action = Done::NothingToCompact;
            day.reason = plan.reason;
        }
        return Ok(PassEnd::Done);
    }
    let parts_before = day.parts;
    let base = (day.plan.parts.len(), day.plan.parts_planned);
    let parts = Parts { plan, sizing, beyond_window, base };
    parts.show(day, 0);
    let kept_newer = match commit_parts(cx, date, parts, &mut prefetched, st, day).await? {
        ControlFlow::Continue(kept_newer) => kept_newer,
        ControlFlow::Break(end) => return Ok(end),
    };
    Ok(next_pass(cx, date, number, st, day, parts_before, kept_newer))
}

/// The first half of the parity gate, over a date's whole listings: `Ok(bodies)` to reuse, or
/// `Err(missing)`; errors as [`parity_check`].
async fn gate(
    store: &impl Store,
    date: NaiveDate,
    flights: &UuidSet,
    listing: &plan::PartitionListing,
    settings: read::ReadSettings,
    day: &mut DayReport,
) -> Result<std::result::Result<Prefetched, UuidSet>> {
    let check = parity_check(store, date, flights, listing, None, settings).await?;
    let unreadable = check.unreadable.iter().map(|(key, u)| {
        let reason = format!("multi-row index file unreadable for the parity check: {}", u.reason);
        SkippedFile::unmergeable(key, date, Unmergeable { reason, ..u.clone() })
    });
    add_skipped(day, unreadable);
    if !check.missing.is_empty() {
        let reason = check.reason().unwrap_or_default();
        return Ok(Err(parity_failed(day, reason, check.missing)?));
    }
    day.parity = Some(Parity::Passed);
    Ok(Ok(check.prefetched))
}

/// Whether a date needs another pass: files left past the window, or inputs kept newer (up to
/// [`MAX_PASSES_PER_DATE`]). A dry run reads one window.
fn next_pass(
    cx: &Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    number: usize,
    st: &mut DateState,
    day: &mut DayReport,
    parts_before: u64,
    kept_newer: usize,
) -> PassEnd {
    let (window, beyond_window) = (st.window, st.left_past_window);
    if cx.opts.dry_run {
        st.left_past_window = 0;
        if beyond_window > 0 {
            tracing::info!(%date, beyond_window, window,
                "dry run: per-flight files past the listing window not read; a run compacts them in later passes");
            day.reason = format!(
                "{}; dry run: the first listing window ({window} per-flight files) read, {beyond_window} more past it not read (a run compacts them in later passes)",
                day.reason
            );
        }
        return PassEnd::Done;
    }
    if beyond_window > 0 && day.parts > parts_before {
        tracing::info!(%date, pass = number, beyond_window, window, kept_newer,
            "the listing window is compacted; listing the date again for the files past it");
    } else if kept_newer > 0 {
        st.newer_passes += 1;
        if st.newer_passes >= MAX_PASSES_PER_DATE {
            return PassEnd::Done;
        }
        tracing::info!(%date, kept_newer, "inputs changed during the commit; folding their newer versions in");
    } else {
        return PassEnd::Done;
    }
    PassEnd::Again(beyond_window + kept_newer)
}

/// A pass's plan, executed by [`commit_parts`].
struct Parts {
    plan: plan::DatePlan,
    /// What the plan was made with, for a part cut for the time left.
    sizing: plan::PartSizing,
    beyond_window: usize,
    /// Where its parts start in the report's [`crate::data::report::PlanReport`]: shown, counted.
    base: (usize, u64),
}

impl Parts {
    /// Cuts part `at` to the weight `t` allows ([`plan::DatePlan::cut_part`]), saying why in the
    /// plan, the log and the report: how many parts it became.
    fn cut(&mut self, at: usize, t: PartFit, day: &mut DayReport) -> usize {
        let (planned, weight, left) = (self.plan.parts[at].weight, t.weight.max(1), t.left);
        let why = format!(
            "part {} of pass {} (weight {planned}) cut to weight {weight}: {} s left",
            at + 1,
            day.passes,
            left.as_secs()
        );
        let n = self.plan.cut_part(at, weight, &self.sizing, &why);
        tracing::info!(date = %day.date, into = n, "the time left is too short for the planned part: {why}");
        self.show(day, at);
        n
    }

    /// The report's plan from part `from` on, as the plan now holds it.
    fn show(&self, day: &mut DayReport, from: usize) {
        let pass = day.passes;
        let parts = self.plan.parts[from..].iter().map(|p| p.report(pass));
        day.plan.show_from(self.base.0 + from, self.base.1 + from as u64, parts);
    }
}

/// Commits a pass's planned parts one by one. Before each, the deadline decides whether it starts:
/// a part heavier than the time left allows ([`crate::infra::deadline::Deadline::part_fit`]) is
/// cut by the planner ([`plan::DatePlan::cut_part`]); [`Error::DateUnfinished`] when not even a
/// part of [`crate::protocol::sizing::MIN_PART_FILES`] (or a group that cannot be cut) fits.
/// `Continue`: every part committed (or read, in a dry run), this many inputs kept newer; `Break`:
/// the pass ends there, parity failed on a part's per-flight files, or a compacted file is over an
/// input limit.
async fn commit_parts(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    mut parts: Parts,
    prefetched: &mut Prefetched,
    st: &mut DateState,
    day: &mut DayReport,
) -> Result<ControlFlow<PassEnd, usize>> {
    let (mut kept_newer, mut at) = (0, 0);
    while at < parts.plan.parts.len() {
        crate::failpoint!("run::before-part");
        let time = cx.deadline.part_fit(st.slowest_part);
        let rest = &parts.plan.parts[at..];
        let weight_left = rest.iter().map(|p| p.weight).sum::<u64>();
        let smallest = crate::protocol::sizing::MIN_PART_FILES.min(weight_left);
        let files_left = rest.iter().map(|p| p.inputs.len()).sum::<usize>() + parts.beyond_window;
        if let Some(near) = time.and_then(|t| t.near(smallest)) {
            let hint = near.part_hint(cx.deadline.given(), smallest);
            return Err(unfinished(day, &near, files_left, hint));
        }
        if let Some(t) = time.filter(|t| rest[0].weight > t.weight.max(1))
            && parts.cut(at, t, day) == 0
        {
            continue;
        }
        let part = &parts.plan.parts[at];
        // A group of inputs sharing flights may weigh more than the time allows.
        if let Some(near) = time.and_then(|t| t.near(part.weight)) {
            let hint = near.part_hint(cx.deadline.given(), part.weight);
            return Err(unfinished(day, &near, files_left, hint));
        }
        let t = Instant::now();
        let flights = st.flights.as_ref().expect("listed by the pass");
        let settings = read::ReadSettings::of(cx.config);
        let write = (!cx.opts.dry_run).then_some((cx.opts.now, cx.opts.invocation_id.as_str()));
        let job = commit::Part { date, inputs: &part.inputs, flights, settings, write };
        let outcome = commit::commit_part(cx.store, &mut cx.fence, job, prefetched).await?;
        st.slowest_part = st.slowest_part.max(t.elapsed());
        cx.deadline.record_part(part.weight, t.elapsed());
        at += 1;
        match fold_part(cx, &parts.plan.reason, outcome, st, day)? {
            ControlFlow::Continue(None) => {}
            ControlFlow::Continue(Some(k)) => {
                kept_newer += k;
                if let Some(p) = day.plan.parts.get_mut(parts.base.0 + at - 1) {
                    p.committed = true;
                }
                tracing::info!(%date, part = at, of = parts.plan.parts.len(), seconds = crate::infra::text::millis(t.elapsed().as_secs_f64()), "part committed");
                crate::failpoint!("run::after-part");
            }
            ControlFlow::Break(end) => return Ok(ControlFlow::Break(end)),
        }
    }
    Ok(ControlFlow::Continue(kept_newer))
}

fn note_foreign(day: &mut DayReport, listing: &plan::PartitionListing) {
    Shortened::new(&mut day.foreign_keys, DAY_KEYS_SHOWN)
        .counted(&mut day.foreign_objects, Some(&mut day.foreign_keys_truncated))
        .set(listing.foreign.len() as u64, listing.foreign.iter().map(|(o, _)| o.key.clone()));
    for (o, why) in &listing.foreign {
        tracing::debug!(key = %o.key, reason = why, "foreign object under index/: left alone");
    }
    if let Some((first, _)) = listing.foreign.first() {
        tracing::info!(date = %day.date, count = listing.foreign.len(), first = %first.key,
            "foreign objects in the partition (not index inputs): left alone");
    }
}

/// The deadline stop of `day` with `files_left` index files not yet compacted (`hint` empty or led
/// by "; "), counting every part of every pass.
fn unfinished(
    day: &mut DayReport,
    near: &crate::infra::deadline::Near,
    files_left: usize,
    hint: String,
) -> Error {
    day.files_left = files_left as u64;
    Error::DateUnfinished {
        date: day.date,
        parts_done: day.parts,
        files_left: files_left as u64,
        left_s: near.left.as_secs(),
        needed_s: near.needed.as_secs(),
        hint,
    }
}

/// The compacted files a run wrote on a date and left there, by key: rows, bytes.
type Outputs = std::collections::BTreeMap<String, (u64, u64)>;

/// Folds one part's outcome ([`commit::commit_part`]) into `day`: `Continue(Some(kept_newer))`
/// when it was committed, `Continue(None)` when nothing was written, `Break` when the pass ends
/// there (parity failed on its per-flight files, or a compacted file over an input limit).
fn fold_part(
    cx: &mut Ctx<'_, '_, impl Store>,
    reason: &str,
    outcome: commit::PartOutcome,
    st: &mut DateState,
    day: &mut DayReport,
) -> Result<ControlFlow<PassEnd, Option<usize>>> {
    let commit::PartOutcome { end, read, unread } = outcome;
    day.bytes_read += read.bytes_read;
    add_skipped(day, read.skipped.iter().cloned());
    RunReport::note_other_days(day, &read.other_days);
    if let PartEnd::HeldBack(key) = &end {
        // Nothing of the day is merged or deleted; skipped_files names the file.
        day.reason = format!(
            "compacted file {key} is over an input limit: the day's other inputs are left unmerged"
        );
        st.left_past_window = 0;
        return Ok(ControlFlow::Break(PassEnd::Done));
    }
    add_unread(&mut st.unread_files, unread);
    let mut committed = match end {
        PartEnd::Committed(committed) => committed,
        PartEnd::Lost(lost) => {
            let unread = std::mem::take(&mut st.unread_files);
            return Ok(ControlFlow::Break(PassEnd::Mismatch(lost_rows(day, lost, unread)?)));
        }
        PartEnd::NothingToMerge if day.action == Done::NothingToCompact => {
            day.reason = "nothing readable to fold: at most one compacted file".into();
            return Ok(ControlFlow::Continue(None));
        }
        PartEnd::Planned => {
            // What was read, not planned (an undecodable input is skipped): a run's part.
            day.action = Done::Planned;
            day.reason = reason.to_string();
            day.parts += 1;
            day.files_read += read.read.len() as u64;
            day.files_read_compacted += count_decoded(&read, Source::Compacted);
            day.files_read_multi_row += count_decoded(&read, Source::MultiRow);
            return Ok(ControlFlow::Continue(None));
        }
        PartEnd::NothingToMerge | PartEnd::HeldBack(_) => return Ok(ControlFlow::Continue(None)),
    };
    note_rows_without_flight(day, &read);
    fold_committed(day, reason, &committed, &read, &mut st.outputs);
    if let Some(e) = committed.failure.take() {
        // Its manifest is kept: the date is not compacted and stays blocked.
        return Err(e);
    }
    day.parts += 1;
    cx.finished_manifests.push(committed.manifest_key);
    Ok(ControlFlow::Continue(Some(committed.deleted.kept_newer.len())))
}

/// Marks `day` as failing parity (`reason`, the flights `missing`).
fn parity_failed(day: &mut DayReport, reason: String, missing: UuidSet) -> Result<UuidSet> {
    day.parity = Some(Parity::Mismatch);
    day.action = Done::Mismatch;
    day.reason = reason;
    // The count whole, the uuids only as many as the report shows.
    day.mismatch_uuid_count = missing.len();
    day.mismatch_uuids = (missing.first(crate::data::report::DAY_UUIDS_SHOWN + 1)?.iter())
        .map(Uuid::to_string)
        .collect();
    Ok(missing)
}

/// Adds a part's unreadable per-flight files to the date's, each once (every pass rereads them).
fn add_unread(unread: &mut Vec<UnreadFile>, part: Vec<UnreadFile>) {
    let named: HashSet<String> = unread.iter().map(|f| f.key.clone()).collect();
    unread.extend(part.into_iter().filter(|f| !named.contains(&f.key)));
}

/// Marks `day` as failing parity because of [`without_own_row`] (`lost`) or [`unread_rows`]
/// (`unread`, named in `days[].unread_files`).
fn lost_rows(day: &mut DayReport, lost: Vec<Uuid>, unread: Vec<UnreadFile>) -> Result<UuidSet> {
    if let Some(first) = lost.first() {
        tracing::warn!(date = %day.date, flights = lost.len(), first = %first,
            "per-flight files that hold no row of their flight: parity fails, nothing is written");
    }
    for f in &unread {
        tracing::warn!(date = %day.date, key = %f.key, flight = %f.flight, reason = %f.reason,
            "per-flight file cannot be read: its flight has no readable index row; parity fails, the file is left in place");
    }
    let check = ParityCheck::of_parts(lost, unread);
    let text = check.reason().unwrap_or_default();
    let failing = check.failing();
    day.unread_files = check.unread;
    parity_failed(day, text, failing)
}

/// Inputs of `read` of kind `source` that were decoded (and merged).
fn count_decoded(read: &read::ReadInputs, source: Source) -> u64 {
    read.merge_inputs.iter().filter(|s| **s == source).count() as u64
}

/// Adds `files` to the day's skipped files, each key once (the gate and every pass may find it).
fn add_skipped(day: &mut DayReport, files: impl IntoIterator<Item = SkippedFile>) {
    let mut seen: HashSet<String> = day.skipped.iter().map(|f| f.key.clone()).collect();
    for f in files {
        if seen.insert(f.key.clone()) {
            day.files_skipped += 1;
            day.skipped.push(f);
        }
    }
}

/// Folds what one committed part did into `day` and `outputs`, also when it leaves its manifest.
fn fold_committed(
    day: &mut DayReport,
    reason: &str,
    c: &commit::Committed,
    read: &read::ReadInputs,
    outputs: &mut Outputs,
) {
    let date = day.date;
    if !c.extra_columns.is_empty() {
        tracing::warn!(%date, columns = ?c.extra_columns, "inputs carry columns the target schema does not know; kept after the known ones");
    }
    day.extra_columns = c.extra_columns.clone();
    day.files_read += c.inputs.len() as u64;
    day.files_read_compacted += count_decoded(read, Source::Compacted);
    day.files_read_multi_row += count_decoded(read, Source::MultiRow);
    day.files_deleted += c.deleted.deleted;
    day.files_kept_newer += c.deleted.kept_newer.len() as u64;
    day.files_delete_failed += c.deleted.failed.len() as u64;
    day.duplicates_removed += c.duplicates_removed;
    day.action = Done::Compacted;
    day.reason = reason.to_string();
    // A later pass's output holds the rows of the outputs it folded in.
    for key in &c.inputs {
        outputs.remove(key);
    }
    if let Some(o) = &c.output {
        day.output_key = Some(o.key.clone());
        outputs.insert(o.key.clone(), (o.rows, o.size));
    }
    day.rows_written = outputs.values().map(|(rows, _)| rows).sum();
    day.bytes_written = outputs.values().map(|(_, bytes)| bytes).sum();
}

/// Counts the multi-row inputs' rows whose `s3_key` names no flight, naming a few files.
fn note_rows_without_flight(day: &mut DayReport, read: &read::ReadInputs) {
    for (key, rows) in &read.rows_without_flight {
        day.rows_without_flight += rows;
        if !day.rows_without_flight_keys.contains(key) {
            Shortened::new(&mut day.rows_without_flight_keys, DAY_KEYS_SHOWN).push(key.clone());
        }
    }
    if let Some(first) = day.rows_without_flight_keys.first() {
        tracing::warn!(date = %day.date, rows = day.rows_without_flight, first = %first,
            "multi-row inputs hold rows whose s3_key is null, empty or names no flight; kept after the flights' rows");
    }
}
