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
use crate::infra::error::{Error, Result};
use crate::infra::storage::Store;
use crate::infra::text::Shortened;
use crate::protocol::commit;
use crate::protocol::day::Day;
use crate::protocol::partition::{
    ParityCheck, nothing_to_merge, parity_check, unread_rows, without_own_row,
};
use crate::protocol::plan::{self, DayAction};
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
            tracing::info!(
                %date,
                action = %day.action,
                files = f,
                rows = r,
                bytes = b,
                bytes_read = day.bytes_read,
                seconds = crate::infra::text::millis(day.seconds),
                "date done: {summary}"
            );
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

/// How one pass of a date ended.
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
    let mut settings = read::ReadSettings::of(cx.config);
    let t = Instant::now();
    // Every pass lists the flights again: one archived meanwhile gets its own-row check.
    let with_flights = mode != DayMode::Sweep;
    let mut listed =
        Day::list_window(cx.store, date, with_flights, st.window, settings.spill).await?;
    day.passes += 1;
    let flights = st.flights.insert(std::mem::take(&mut listed.flights));
    tracing::debug!(%date, phase = "list", flights = flights.len(), spilled = flights.spilled(), seconds = t.elapsed().as_secs_f64(), "partition listed");
    let listing = &listed.index;
    day.flights = flights.len();
    let beyond_window = listing.beyond_window.files;
    st.left_past_window = beyond_window;
    // Refused before any input is read: a report, not an allocation failure.
    let files = (listing.inputs().count() + beyond_window) as u64;
    settings.part_files = MemoryFit::of(cx.config).part_files(date, files, day.flights)?;
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
    let plan = plan::plan_day(date, std::mem::take(&mut listed.index), &cx.recovery.claimed);
    tracing::info!("{plan}");
    tracing::debug!(pass = number, part_files = settings.part_files, "planned");
    day.files_claimed = day.files_claimed.max(plan.claimed as u64);
    let plan::DayPlan { action, reason, .. } = plan;
    let DayAction::Compact { inputs } = action else {
        if number == 0 {
            day.action = Done::NothingToCompact;
            day.reason = reason;
        }
        return Ok(PassEnd::Done);
    };
    let queue =
        crate::protocol::partition::parts_of(cx.store, inputs, settings, &mut prefetched).await?;
    let parts_before = day.parts;
    let parts = Parts { queue, reason: &reason, part_files: settings.part_files, beyond_window };
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

/// A pass's inputs waiting to be committed ([`commit_parts`]).
struct Parts<'r> {
    queue: plan::PartQueue,
    reason: &'r str,
    /// The part weight the run's memory allows for this date.
    part_files: u64,
    beyond_window: usize,
}

/// Commits a pass's parts one by one, each sized when it starts by the memory's part weight and
/// the time left ([`crate::infra::deadline::Deadline::part_fit`]); [`Error::DateUnfinished`] when
/// not even a part of [`crate::protocol::sizing::MIN_PART_FILES`] fits. `Continue`: every part
/// committed (or read, in a dry run), this many inputs kept newer; `Break`: the pass ends there,
/// parity failed on a part's per-flight files, or a compacted file is over an input limit
/// ([`PartEnd::Stop`]).
async fn commit_parts(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    mut parts: Parts<'_>,
    prefetched: &mut Prefetched,
    st: &mut DateState,
    day: &mut DayReport,
) -> Result<ControlFlow<PassEnd, usize>> {
    let mut kept_newer = 0;
    let mut done = 0usize;
    while parts.queue.has_part() {
        crate::failpoint!("run::before-part");
        let time = cx.deadline.part_fit(st.slowest_part);
        let smallest = crate::protocol::sizing::MIN_PART_FILES.min(parts.queue.weight_left());
        let weight = time.map_or(parts.part_files, |t| t.weight.min(parts.part_files));
        if let Some(near) = time.and_then(|t| t.near(smallest)) {
            let left = parts.queue.files_left() + parts.beyond_window;
            let hint = near.part_hint(cx.deadline.given(), smallest);
            return Err(unfinished(day, &near, left, hint));
        }
        let Some(part) = parts.queue.next_part(weight.max(1)) else { break };
        let part_weight: u64 = part.iter().map(plan::input_weight).sum();
        // A group of inputs sharing flights may weigh more than the time allows.
        if let Some(near) = time.and_then(|t| t.near(part_weight)) {
            let left = parts.queue.files_left() + part.len() + parts.beyond_window;
            let hint = near.part_hint(cx.deadline.given(), part_weight);
            return Err(unfinished(day, &near, left, hint));
        }
        let t = Instant::now();
        let (end, unread) = commit_part(cx, date, part, parts.reason, prefetched, st, day).await?;
        st.slowest_part = st.slowest_part.max(t.elapsed());
        cx.deadline.record_part(part_weight, t.elapsed());
        done += 1;
        add_unread(&mut st.unread_files, unread);
        match end {
            PartEnd::Committed { kept_newer: k } => {
                day.parts += 1;
                kept_newer += k;
                tracing::info!(%date, part = done, weight = part_weight, left = parts.queue.files_left(),
                    seconds = crate::infra::text::millis(t.elapsed().as_secs_f64()), "part committed");
                crate::failpoint!("run::after-part");
            }
            PartEnd::Read => {}
            PartEnd::Lost(lost) => {
                let unread = std::mem::take(&mut st.unread_files);
                return Ok(ControlFlow::Break(PassEnd::Mismatch(lost_rows(day, lost, unread)?)));
            }
            PartEnd::Stop => {
                st.left_past_window = 0;
                return Ok(ControlFlow::Break(PassEnd::Done));
            }
        }
    }
    if parts.queue.left_as_they_are() > 0 {
        tracing::info!(%date, left_as_they_are = parts.queue.left_as_they_are(),
            "compacted files that share no flight with the parts are left as they are");
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

/// How one part of a date ended ([`commit_part`]).
enum PartEnd {
    /// Committed; this many inputs were kept because they changed meanwhile.
    Committed { kept_newer: usize },
    /// Read and counted, nothing written (a dry run, or nothing to merge).
    Read,
    /// Per-flight files without a row of their own flight: the date fails parity.
    Lost(Vec<Uuid>),
    /// A compacted file over an input limit: nothing more of the date.
    Stop,
}

/// One part of a date: read, checked by the gate's second half ([`without_own_row`],
/// [`unread_rows`]), committed ([`commit_read_part`]) or, in a dry run, counted; with it, its
/// unreadable per-flight files, which fail the date's parity once the rest is folded.
async fn commit_part(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    inputs: Vec<plan::PlannedInput>,
    reason: &str,
    prefetched: &mut Prefetched,
    st: &mut DateState,
    day: &mut DayReport,
) -> Result<(PartEnd, Vec<UnreadFile>)> {
    let flights = st.flights.as_ref().expect("listed by the pass");
    let settings = read::ReadSettings::of(cx.config);
    let started = Instant::now();
    let read = read::read_inputs(cx.store, date, &inputs, settings, prefetched).await?;
    for i in &inputs {
        prefetched.remove(&i.meta.key);
    }
    // In the sweep no flight was listed: none can be lost.
    let lost = without_own_row(&read, flights)?;
    let unread = unread_rows(&read, flights)?;
    let planned = inputs.len();
    drop(inputs);
    day.bytes_read += read.bytes_read;
    add_skipped(day, read.skipped.iter().cloned());
    RunReport::note_other_days(day, &read.other_days);
    if let Some(key) = &read.held_back {
        // Nothing of the day is merged or deleted; skipped_files names the file.
        day.reason = format!(
            "compacted file {key} is over an input limit: the day's other inputs are left unmerged"
        );
        return Ok((PartEnd::Stop, Vec::new()));
    }
    if !lost.is_empty() {
        return Ok((PartEnd::Lost(lost), unread));
    }
    if nothing_to_merge(&read) {
        if day.action == Done::NothingToCompact {
            day.reason = "nothing readable to fold: at most one compacted file".into();
        }
        return Ok((PartEnd::Read, unread));
    }
    if cx.opts.dry_run {
        // What was read, not planned (an undecodable input is skipped): a run's part.
        day.action = Done::Planned;
        day.reason = reason.to_string();
        day.parts += 1;
        day.files_read += read.read.len() as u64;
        day.files_read_compacted += count_decoded(&read, Source::Compacted);
        day.files_read_multi_row += count_decoded(&read, Source::MultiRow);
        return Ok((PartEnd::Read, unread));
    }
    note_rows_without_flight(day, &read);
    tracing::debug!(%date, phase = "read", files = planned, seconds = started.elapsed().as_secs_f64(), "inputs read and merged");
    let kept_newer = commit_read_part(cx, date, reason, read, day, &mut st.outputs).await?;
    Ok((PartEnd::Committed { kept_newer }, unread))
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
    (read.merge_inputs.iter()).filter(|i| i.source == source).count() as u64
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

/// Runs the commit protocol for one part ([`commit::commit_part`]) and folds what it did into `day`
/// and `outputs`, also when it leaves its manifest; returns how many inputs were kept newer.
async fn commit_read_part(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    reason: &str,
    mut read: read::ReadInputs,
    day: &mut DayReport,
    outputs: &mut Outputs,
) -> Result<usize> {
    let (now, id) = (cx.opts.now, &cx.opts.invocation_id);
    let c = commit::commit_part(cx.store, &mut cx.fence, date, &mut read, now, id).await?;
    if !c.extra_columns.is_empty() {
        tracing::warn!(%date, columns = ?c.extra_columns, "inputs carry columns the target schema does not know; kept after the known ones");
    }
    day.extra_columns = c.extra_columns.clone();
    day.files_read += c.inputs.len() as u64;
    day.files_read_compacted += count_decoded(&read, Source::Compacted);
    day.files_read_multi_row += count_decoded(&read, Source::MultiRow);
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
    if let Some(e) = c.failure(date, cx.store.bucket()) {
        // Its manifest is kept: the date is not compacted and stays blocked.
        return Err(e);
    }
    cx.finished_manifests.push(c.manifest_key);
    Ok(c.deleted.kept_newer.len())
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
