//! One date through the commit protocol: list, parity gate, plan, read,
//! then commit (or, in a dry run, only read), folding inputs that changed
//! meanwhile in further passes. A date's outcome goes into its own
//! [`DayReport`]; the run's report is the driver's.

use std::collections::HashSet;
use std::time::Instant;

use chrono::NaiveDate;
use uuid::Uuid;

use super::watermark::delete_finished_manifests;
use super::{Ctx, DayMode, FOREIGN_KEYS_SHOWN};
use crate::commit;
use crate::error::{Error, Result};
use crate::merge::{Source, Unmergeable};
use crate::partition::{nothing_to_merge, parity_check, unread_rows, without_own_row};
use crate::plan::{self, DayAction};
use crate::progress::Progress;
use crate::read::{self, Prefetched};
use crate::report::{DayAction as Done, DayReport, Parity, RunReport, SkippedFile, UnreadFile};
use crate::spill::UuidSet;
use crate::storage::Store;

/// How many times a date is planned in one run when inputs changed while
/// it was being compacted (their newer versions are folded in at once).
/// Passes for the per-flight files past a listing window
/// ([`crate::day::Day::list_window`]) do not count: each compacts at least
/// one part, or the date ends.
const MAX_PASSES_PER_DATE: usize = 3;

/// How one date ended, for the step that asked.
pub(super) enum DayOutcome {
    /// Done (compacted, nothing to do, planned): the day's report.
    Done(DayReport),
    /// Parity failed: the day's report and the flights without an index row.
    Mismatch(DayReport, UuidSet),
    /// An error stopped the date: the day's report (with what it did before
    /// the error, action `failed`) and the error.
    Failed(DayReport, Error),
    /// The deadline came between two of its parts: the day's report
    /// (action `partial`, `parts`, `files_left`); the date goes on in the
    /// next run.
    Unfinished(DayReport),
}

/// One date, in any [`DayMode`]: list, sort, parity gate (per mode), plan,
/// then commit (or, in a dry run, read what would be merged). When inputs
/// changed during the commit, their newer versions are folded in at once
/// (up to [`MAX_PASSES_PER_DATE`] passes); a date of more per-flight files
/// than one listing window ([`crate::sizing::WINDOW_PARTS`] parts) is
/// compacted a window a pass, each pass listing the date again. Returns the day's report; it
/// never touches the run's report (see [`RunReport::add_day`]).
pub(super) async fn process_day(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    mode: DayMode,
) -> DayOutcome {
    let t0 = Instant::now();
    let mut day = DayReport {
        date,
        ..Default::default()
    };
    let outcome = day_passes(cx, date, mode, &mut day).await;
    day.seconds = t0.elapsed().as_secs_f64();
    if day.rows_of_other_days > 0 {
        // Once per date, whatever the passes.
        tracing::warn!(%date, rows = day.rows_of_other_days, first = ?day.other_days_uuids,
            "multi-row inputs hold rows of other days (first_message on another UTC date): merged into this date where they are, not moved");
    }
    match outcome {
        Err(e @ Error::DateUnfinished { .. }) => {
            tracing::warn!(%date, parts = day.parts, files_left = day.files_left, "{e}");
            day.action = Done::Partial;
            day.reason = e.to_string();
            DayOutcome::Unfinished(day)
        }
        Err(e) => {
            day.action = Done::Failed;
            day.reason = e.to_string();
            DayOutcome::Failed(day, e)
        }
        Ok(Some(missing)) => DayOutcome::Mismatch(day, missing),
        Ok(None) => {
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
            cx.progress(Progress::DateDone {
                date,
                action: day.action,
                files: day.files_read,
                bytes_read: day.bytes_read,
                rows: day.rows_written,
                bytes: day.bytes_written,
            });
            DayOutcome::Done(day)
        }
    }
}

/// What one date carries from pass to pass ([`day_passes`]).
struct DateState {
    /// The part weight the run's memory allows ([`crate::sizing::MemoryFit`]).
    fit: crate::sizing::MemoryFit,
    /// Per-flight files a listing holds at most ([`crate::sizing::MemoryFit::window`]).
    window: usize,
    /// The date's flights as the current pass listed them, as uuids (on
    /// disk past the sets' limit), for its parts' own-row checks.
    flights: Option<UuidSet>,
    /// Per-flight files of listed flights that could not be read: the date
    /// is a Mismatch once its readable inputs are folded.
    unread_files: Vec<UnreadFile>,
    /// The date's slowest part so far.
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
    /// Parity failed: the flights without an index row.
    Mismatch(UuidSet),
    /// List the date again: files past the window, or newer versions, this many.
    Again(usize),
}

/// The passes of [`process_day`]; `Some(missing)` on a parity mismatch.
/// Each pass lists the date ([`pass`]) and commits its inputs in parts
/// ([`commit_parts`]); a date with files past its listing window, or
/// inputs that changed during a commit, gets another pass.
async fn day_passes(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    mode: DayMode,
    day: &mut DayReport,
) -> Result<Option<UuidSet>> {
    let fit = crate::sizing::MemoryFit::of(cx.config);
    let mut st = DateState {
        fit,
        window: fit.window().try_into().unwrap_or(usize::MAX),
        flights: None,
        unread_files: Vec::new(),
        slowest_part: std::time::Duration::ZERO,
        outputs: Outputs::new(),
        newer_passes: 0,
        left_past_window: 0,
    };
    let mut pending = 0;
    for number in 0.. {
        if number > 0 {
            // The next pass's listing and plan read S3 before its first
            // part's own check: a deadline stop here is clean too.
            let smallest = (pending as u64).min(crate::sizing::MIN_PART_FILES);
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
        // The last window committed nothing: never a date done with
        // files left past it.
        return Err(Error::WindowStalled {
            date,
            window: st.window as u64,
            left: st.left_past_window as u64,
        });
    }
    Ok(None)
}

/// One pass of a date: list (a window of per-flight files), size its parts
/// for the run's memory, gate its parity (the first pass), plan, and
/// commit the plan's inputs part by part.
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
    // Every pass lists the flights again: a flight archived between two
    // passes gets its own-row check like the others (the sweep lists none).
    let with_flights = mode != DayMode::Sweep;
    let mut listed =
        crate::day::Day::list_window(cx.store, date, with_flights, st.window, settings.spill)
            .await?;
    day.passes += 1;
    let flights = st.flights.insert(std::mem::take(&mut listed.flights));
    tracing::debug!(%date, phase = "list", flights = flights.len(), spilled = flights.spilled(), seconds = t.elapsed().as_secs_f64(), "partition listed");
    let listing = &listed.index;
    day.flights = flights.len();
    let beyond_window = listing.beyond_window.files;
    st.left_past_window = beyond_window;
    // Refused before any input is read when not even a small part fits
    // the run's memory: a report, not an allocation failure.
    let files = (listing.inputs().count() + beyond_window) as u64;
    settings.part_files = st.fit.part_files(date, files, day.flights)?;
    crate::spill::check_room(date, files.max(day.flights), settings.spill)?;
    if number == 0 {
        note_foreign(day, listing);
    }
    let gate_needed = match mode {
        DayMode::Walk => true,
        DayMode::Sweep => false,
        // Nothing to fold: the date is not touched, so no gate (no GET).
        DayMode::Repair => plan::compacts(listing, &cx.recovery.claimed),
    };
    // The bodies the gate read, for the merge to reuse.
    let mut prefetched = Prefetched::new();
    if number == 0 && gate_needed {
        // The gate's first half, over the whole date's listings; its
        // second half (what the per-flight files hold) part by part.
        let check = parity_check(cx.store, date, flights, listing, None, settings).await?;
        add_skipped(
            day,
            check
                .unreadable
                .iter()
                .map(|(key, u)| gate_skipped(key, date, u)),
        );
        if !check.missing.is_empty() {
            let reason = check.reason().unwrap_or_default();
            return Ok(PassEnd::Mismatch(parity_failed(
                day,
                reason,
                check.missing,
            )?));
        }
        day.parity = Some(Parity::Passed);
        prefetched = check.prefetched;
    }
    // The listing moves into the plan, which holds what the commit needs.
    let plan = plan::plan_day(
        date,
        std::mem::take(&mut listed.index),
        &cx.recovery.claimed,
    );
    tracing::info!(pass = number, part_files = settings.part_files, "{plan}");
    day.files_claimed = day.files_claimed.max(plan.claimed as u64);
    let plan::DayPlan { action, reason, .. } = plan;
    let DayAction::Compact { inputs } = action else {
        if number == 0 {
            day.action = Done::NothingToCompact;
            day.reason = reason;
        }
        return Ok(PassEnd::Done);
    };
    let queue = crate::partition::parts_of(cx.store, inputs, settings, &mut prefetched).await?;
    let parts_before = day.parts;
    let parts = Parts {
        queue,
        reason: &reason,
        part_files: settings.part_files,
        beyond_window,
    };
    let kept_newer = match commit_parts(cx, date, parts, &mut prefetched, st, day).await? {
        PartsEnd::Committed { kept_newer } => kept_newer,
        PartsEnd::Mismatch(missing) => return Ok(PassEnd::Mismatch(missing)),
        PartsEnd::Stopped => {
            st.left_past_window = 0;
            return Ok(PassEnd::Done);
        }
    };
    if cx.opts.dry_run {
        // A dry run reads one window.
        st.left_past_window = 0;
        if beyond_window > 0 {
            let window = st.window;
            tracing::info!(%date, beyond_window, window,
                "dry run: per-flight files past the listing window not read; a run compacts them in later passes");
            day.reason = format!(
                "{}; dry run: the first listing window ({window} per-flight files) read, {beyond_window} more past it not read (a run compacts them in later passes)",
                day.reason
            );
        }
        return Ok(PassEnd::Done);
    }
    // A window pass commits a part at least, so the date's inputs shrink
    // every pass and the passes end; newer versions ride along.
    if beyond_window > 0 && day.parts > parts_before {
        tracing::info!(%date, pass = number, beyond_window, window = st.window, kept_newer,
            "the listing window is compacted; listing the date again for the files past it");
    } else if kept_newer > 0 {
        st.newer_passes += 1;
        if st.newer_passes >= MAX_PASSES_PER_DATE {
            return Ok(PassEnd::Done);
        }
        tracing::info!(%date, kept_newer, "inputs changed during the commit; folding their newer versions in");
    } else {
        return Ok(PassEnd::Done);
    }
    Ok(PassEnd::Again(beyond_window + kept_newer))
}

/// A pass's inputs waiting to be committed ([`commit_parts`]).
struct Parts<'r> {
    queue: plan::PartQueue,
    /// The plan's reason.
    reason: &'r str,
    /// The part weight the run's memory allows for this date.
    part_files: u64,
    /// Per-flight files past the pass's listing window.
    beyond_window: usize,
}

/// How a pass's parts ended ([`commit_parts`]).
enum PartsEnd {
    /// Every part committed (or read, in a dry run); this many inputs were
    /// kept because they changed meanwhile.
    Committed { kept_newer: usize },
    /// Parity failed on a part's per-flight files.
    Mismatch(UuidSet),
    /// A compacted file over an input limit: nothing more of the date.
    Stopped,
}

/// Commits a pass's parts one by one, each sized when it starts: at most
/// the memory's part weight, and what the time left allows at the pace
/// measured so far ([`crate::deadline::Deadline::part_fit`]). Stops the
/// date with [`Error::DateUnfinished`] when not even a part of
/// [`crate::sizing::MIN_PART_FILES`] (or what is left, if less) fits the time.
async fn commit_parts(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    mut parts: Parts<'_>,
    prefetched: &mut Prefetched,
    st: &mut DateState,
    day: &mut DayReport,
) -> Result<PartsEnd> {
    let mut kept_newer = 0;
    let mut pass_unread: Vec<UnreadFile> = Vec::new();
    let flights = st.flights.as_ref().expect("listed by the pass");
    let mut done = 0usize;
    while parts.queue.has_part() {
        crate::failpoint!("run::before-part");
        let time = cx.deadline.part_fit(st.slowest_part);
        let smallest = crate::sizing::MIN_PART_FILES.min(parts.queue.weight_left());
        let weight = time.map_or(parts.part_files, |t| t.weight.min(parts.part_files));
        let part = match time.and_then(|t| t.near(smallest)) {
            None => parts.queue.next_part(weight.max(1)),
            Some(near) => {
                let left = parts.queue.files_left() + parts.beyond_window;
                let hint = near.part_hint(cx.deadline.given(), smallest);
                return Err(unfinished(day, &near, left, hint));
            }
        };
        let Some(part) = part else { break };
        let part_weight: u64 = part.iter().map(plan::input_weight).sum();
        // A group of inputs sharing flights may weigh more than the time allows.
        if let Some(near) = time.and_then(|t| t.near(part_weight)) {
            let left = parts.queue.files_left() + part.len() + parts.beyond_window;
            let hint = near.part_hint(cx.deadline.given(), part_weight);
            return Err(unfinished(day, &near, left, hint));
        }
        let t = Instant::now();
        let (end, unread) = commit_part(
            cx,
            date,
            part,
            parts.reason,
            prefetched,
            flights,
            day,
            &mut st.outputs,
        )
        .await?;
        st.slowest_part = st.slowest_part.max(t.elapsed());
        cx.deadline.record_part(part_weight, t.elapsed());
        done += 1;
        pass_unread.extend(unread);
        match end {
            PartEnd::Committed { kept_newer: k } => {
                day.parts += 1;
                kept_newer += k;
                tracing::info!(%date, part = done, weight = part_weight, left = parts.queue.files_left(),
                    seconds = t.elapsed().as_secs_f64(), "part committed");
                crate::failpoint!("run::after-part");
            }
            PartEnd::Read => {}
            PartEnd::Lost(lost) => {
                add_unread(&mut st.unread_files, pass_unread);
                let unread = std::mem::take(&mut st.unread_files);
                return Ok(PartsEnd::Mismatch(lost_rows(day, lost, unread)?));
            }
            PartEnd::Stop => {
                add_unread(&mut st.unread_files, pass_unread);
                return Ok(PartsEnd::Stopped);
            }
        }
    }
    if parts.queue.left_as_they_are() > 0 {
        tracing::info!(%date, left_as_they_are = parts.queue.left_as_they_are(),
            "compacted files that share no flight with the parts are left as they are");
    }
    add_unread(&mut st.unread_files, pass_unread);
    Ok(PartsEnd::Committed { kept_newer })
}

/// Counts and logs the foreign objects of a date's first listing.
fn note_foreign(day: &mut DayReport, listing: &plan::PartitionListing) {
    day.foreign_objects = listing.foreign.len() as u64;
    day.foreign_keys = (listing.foreign.iter().take(FOREIGN_KEYS_SHOWN))
        .map(|(o, _)| o.key.clone())
        .collect();
    for (o, why) in &listing.foreign {
        tracing::debug!(key = %o.key, reason = why, "foreign object under index/: left alone");
    }
    if let Some((first, _)) = listing.foreign.first() {
        tracing::info!(date = %day.date, count = listing.foreign.len(), first = %first.key,
            "foreign objects in the partition (not index inputs): left alone");
    }
}

/// A multi-row input the parity gate could not read, as a skipped file.
fn gate_skipped(key: &str, date: NaiveDate, u: &Unmergeable) -> SkippedFile {
    let reason = format!(
        "multi-row index file unreadable for the parity check: {}",
        u.reason
    );
    SkippedFile::unmergeable(
        key,
        date,
        Unmergeable {
            reason,
            ..u.clone()
        },
    )
}

/// The deadline stop of `day` with `files_left` index files not yet
/// compacted ([`Error::DateUnfinished`], `hint` empty or led by "; "):
/// every part the date committed counts, whichever pass did it.
fn unfinished(
    day: &mut DayReport,
    near: &crate::deadline::Near,
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

/// The compacted files a run wrote on a date and left there, by key: rows
/// and bytes (the day's `rows_written`, `bytes_written`).
type Outputs = std::collections::BTreeMap<String, (u64, u64)>;

/// How one part of a date ended ([`commit_part`]).
enum PartEnd {
    /// Committed; this many inputs were kept because they changed meanwhile.
    Committed { kept_newer: usize },
    /// Read and counted, nothing written (a dry run, or nothing to merge).
    Read,
    /// Per-flight files without a row of their own flight: nothing of the
    /// part is written, the date fails parity.
    Lost(Vec<Uuid>),
    /// A compacted file over an input limit: nothing more of the date.
    Stop,
}

/// One part of a date: read (reusing `prefetched` bodies), checked by the
/// second half of the parity gate ([`without_own_row`], [`unread_rows`]
/// against `flights`), then committed ([`commit_day`]) or, in a dry run,
/// counted. With it, the part's per-flight files of listed flights that
/// could not be read: the date fails parity once its readable inputs are
/// folded (the files themselves are never inputs, so nothing of them is
/// merged or deleted, and the other flights do not wait on them).
#[allow(clippy::too_many_arguments)]
async fn commit_part(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    inputs: Vec<plan::PlannedInput>,
    reason: &str,
    prefetched: &mut Prefetched,
    flights: &UuidSet,
    day: &mut DayReport,
    outputs: &mut Outputs,
) -> Result<(PartEnd, Vec<UnreadFile>)> {
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
    // The dry run and the commit alike: what this part read.
    RunReport::note_other_days(day, &read.other_days);
    if let Some(key) = &read.held_back {
        // Nothing of the day is merged or deleted; the file is named
        // in skipped_files with its limit.
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
        // What was read, as the real run counts it (not what was
        // planned: a planned input that cannot be decoded is skipped,
        // not read).
        day.action = Done::Planned;
        day.reason = reason.to_string();
        day.files_read += read.read.len() as u64;
        day.files_read_compacted += count_decoded(&read, Source::Compacted);
        day.files_read_multi_row += count_decoded(&read, Source::MultiRow);
        return Ok((PartEnd::Read, unread));
    }
    let pass = ToCommit {
        reason: reason.to_string(),
        planned,
        started,
        read,
    };
    let kept_newer = commit_day(cx, date, pass, day, outputs).await?;
    Ok((PartEnd::Committed { kept_newer }, unread))
}

/// Marks `day` as failing parity (`reason`, the flights `missing`).
fn parity_failed(day: &mut DayReport, reason: String, missing: UuidSet) -> Result<UuidSet> {
    day.parity = Some(Parity::Mismatch);
    day.action = Done::Mismatch;
    day.reason = reason;
    // The count whole, the uuids as many as the report shows: a date of
    // millions of flights without an index costs no string for each.
    day.mismatch_uuid_count = missing.len();
    day.mismatch_uuids = (missing.first(crate::report::DAY_UUIDS_SHOWN + 1)?.iter())
        .map(Uuid::to_string)
        .collect();
    Ok(missing)
}

/// Adds a pass's unreadable per-flight files to the date's. An unreadable
/// file stays in place, so every later pass reads it again beside its new
/// window's: each is named once.
fn add_unread(unread: &mut Vec<UnreadFile>, pass: Vec<UnreadFile>) {
    let named: HashSet<String> = unread.iter().map(|f| f.key.clone()).collect();
    unread.extend(pass.into_iter().filter(|f| !named.contains(&f.key)));
}

/// Marks `day` as failing parity because of [`without_own_row`] (`lost`)
/// or [`unread_rows`] (`unread`, named in `days[].unread_files`).
fn lost_rows(day: &mut DayReport, lost: Vec<Uuid>, unread: Vec<UnreadFile>) -> Result<UuidSet> {
    if let Some(first) = lost.first() {
        tracing::warn!(date = %day.date, flights = lost.len(), first = %first,
            "per-flight files that hold no row of their flight: parity fails, nothing is written");
    }
    for f in &unread {
        tracing::warn!(date = %day.date, key = %f.key, flight = %f.flight, reason = %f.reason,
            "per-flight file cannot be read: its flight has no readable index row; parity fails, the file is left in place");
    }
    let check = crate::partition::ParityCheck {
        without_own_row: lost,
        unread,
        ..Default::default()
    };
    let text = check.reason().unwrap_or_default();
    let failing = check.failing();
    day.unread_files = check.unread;
    parity_failed(day, text, failing)
}

/// Inputs of `read` of kind `source` that were decoded (and merged).
fn count_decoded(read: &read::ReadInputs, source: Source) -> u64 {
    (read.merge_inputs.iter())
        .filter(|i| i.source == source)
        .count() as u64
}

/// Adds `files` to the day's skipped files (`skipped`, `files_skipped`),
/// each key once: the parity gate and every pass of the commit may each
/// find the same file unreadable.
fn add_skipped(day: &mut DayReport, files: impl IntoIterator<Item = SkippedFile>) {
    let mut seen: std::collections::HashSet<String> =
        day.skipped.iter().map(|f| f.key.clone()).collect();
    for f in files {
        if seen.insert(f.key.clone()) {
            day.files_skipped += 1;
            day.skipped.push(f);
        }
    }
}

/// What one pass hands to [`commit_day`]: `planned` inputs, read into
/// `read` from `started` on, planned for `reason` (parity passed).
struct ToCommit {
    reason: String,
    planned: usize,
    started: Instant,
    read: read::ReadInputs,
}

/// Runs the commit protocol for one planned date ([`ToCommit`]); returns
/// how many inputs were kept because they changed meanwhile. What it did goes into
/// `day` (also when it fails part way: the day then says what was done).
async fn commit_day(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    pass: ToCommit,
    day: &mut DayReport,
    outputs: &mut Outputs,
) -> Result<usize> {
    let ToCommit {
        reason,
        planned,
        started,
        mut read,
    } = pass;
    let (store, opts) = (cx.store, cx.opts);
    let prepared = commit::prepare(date, &mut read, opts.now, &opts.invocation_id)?;
    day.extra_columns = prepared.extra_columns.clone();
    for (key, rows) in &read.rows_without_flight {
        day.rows_without_flight += rows;
        if day.rows_without_flight_keys.len() < FOREIGN_KEYS_SHOWN
            && !day.rows_without_flight_keys.contains(key)
        {
            day.rows_without_flight_keys.push(key.clone());
        }
    }
    if day.rows_without_flight > 0 {
        tracing::warn!(%date, rows = day.rows_without_flight, first = %day.rows_without_flight_keys[0],
            "multi-row inputs hold rows whose s3_key is null, empty or names no flight; kept after the flights' rows");
    }
    if !prepared.extra_columns.is_empty() {
        tracing::warn!(%date, columns = ?prepared.extra_columns, "inputs carry columns the target schema does not know; kept after the known ones");
    }
    // Each phase's time at debug level
    // (`LOG_LEVEL=info,archive_compaction::run=debug`), in seconds.
    tracing::debug!(%date, phase = "read", files = planned, seconds = started.elapsed().as_secs_f64(), "inputs read and merged");
    let m = &prepared.manifest;
    // Nothing is deleted unless its rows are proven to be in the output:
    // checked before anything is written (the output read back in memory),
    // applied in the delete phase.
    let t = std::time::Instant::now();
    let unproven = commit::prove_inputs(store, m, &read.rows, prepared.body.as_ref()).await?;
    tracing::debug!(%date, phase = "prove", files = m.inputs.len(), seconds = t.elapsed().as_secs_f64(), "inputs proven to be in the output");
    let t = std::time::Instant::now();
    // The lease's GETs go beside the requests before the destructive steps
    // (`lease::Fence::beside`).
    (cx.fence)
        .beside(commit::create_manifest(store, &prepared.manifest_key, m))
        .await?;
    if let (Some(output), Some(body)) = (&m.output, prepared.body.clone()) {
        commit::put_output(store, &mut cx.fence, m.job_id, output, body).await?;
    }
    tracing::debug!(%date, phase = "write", seconds = t.elapsed().as_secs_f64(), "manifest and output written");
    let t = std::time::Instant::now();
    let deleted = commit::verify_and_delete_inputs(store, &mut cx.fence, m, &unproven).await?;
    tracing::debug!(%date, phase = "delete", files = m.inputs.len(), seconds = t.elapsed().as_secs_f64(), "output verified, partition re-listed, inputs deleted");
    day.files_read += m.inputs.len() as u64;
    day.files_read_compacted += count_decoded(&read, Source::Compacted);
    day.files_read_multi_row += count_decoded(&read, Source::MultiRow);
    day.files_deleted += deleted.deleted;
    day.files_kept_newer += deleted.kept_newer.len() as u64;
    day.duplicates_removed += prepared.duplicates_removed;
    day.action = Done::Compacted;
    day.reason = reason;
    // The outputs this run left on the date: a part's, less those a later
    // pass folded in (its new output holds their rows).
    for i in &m.inputs {
        outputs.remove(&i.key);
    }
    if let Some(o) = &m.output {
        day.output_key = Some(o.key.clone());
        outputs.insert(o.key.clone(), (o.rows, o.size));
    }
    day.rows_written = outputs.values().map(|(rows, _)| rows).sum();
    day.bytes_written = outputs.values().map(|(_, bytes)| bytes).sum();
    if let Some(first) = deleted.unproven.first() {
        // Kept with its manifest (not in `finished_manifests`): the date is
        // not counted as compacted and stays blocked.
        day.files_delete_failed += deleted.failed.len() as u64;
        return Err(Error::Unproven {
            date,
            key: first.key.clone(),
            reason: first.reason.clone(),
            count: deleted.unproven.len(),
            output: m
                .output
                .as_ref()
                .map_or_else(|| "no output (zero rows)".to_string(), |o| o.key.clone()),
            manifest: prepared.manifest_key.clone(),
        });
    }
    if !deleted.failed.is_empty() {
        day.files_delete_failed += deleted.failed.len() as u64;
        let f = &deleted.failed[0];
        return Err(Error::s3(
            "DeleteObjects",
            store.bucket(),
            &f.key,
            &f.code,
            format!(
                "{} input(s) of {date} could not be deleted ({}); manifest {} kept, the next run retries",
                deleted.failed.len(),
                f.message,
                prepared.manifest_key
            ),
            false,
        ));
    }
    // Complete: its manifest is deleted beside the watermark write that
    // follows (`write_watermark`), or at once by another caller.
    cx.finished_manifests.push(prepared.manifest_key);
    Ok(deleted.kept_newer.len())
}
