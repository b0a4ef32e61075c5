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
/// than one listing window ([`crate::day::WINDOW_PARTS`] parts) is
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

/// The passes of [`process_day`]; `Some(missing)` on a parity mismatch.
/// Each pass commits the date's inputs in parts ([`plan::parts`],
/// `PART_FILES`), each part a full commit; between parts the deadline is
/// checked ([`crate::deadline::Deadline::near_part`]) and, when it is near,
/// [`Error::DateUnfinished`] stops the date with what is left.
async fn day_passes(
    cx: &mut Ctx<'_, '_, impl Store>,
    date: NaiveDate,
    mode: DayMode,
    day: &mut DayReport,
) -> Result<Option<UuidSet>> {
    let settings = read::ReadSettings::of(cx.config);
    // Per-flight files of listed flights that could not be read: the date
    // is a Mismatch once its readable inputs are folded.
    let mut unread_files: Vec<UnreadFile> = Vec::new();
    let mut slowest_part = std::time::Duration::ZERO;
    let mut outputs = Outputs::new();
    // The listing of at most this many per-flight files is held at once;
    // a date with more is compacted window by window (a pass each).
    let window = (cx
        .config
        .part_files
        .saturating_mul(crate::day::WINDOW_PARTS))
    .try_into()
    .unwrap_or(usize::MAX);
    let mut newer_passes = 0;
    // The flights are listed by the first pass (its parity gate's), and
    // kept, as uuids (on disk past FLIGHTS_IN_MEMORY), for the parts of
    // every pass: a later pass lists the index partition alone.
    let mut flights: Option<crate::spill::UuidSet> = None;
    // Per-flight files the last pass listed past its window, and inputs it
    // kept as changed: what the next pass is for.
    let (mut left_past_window, mut pending) = (0usize, 0usize);
    for pass in 0.. {
        if pass > 0 {
            // The next pass's listing and plan read S3 before its first
            // part's own check: a deadline stop here is clean too.
            if let Some(near) = cx.deadline.near_part(pending.min(window), slowest_part) {
                return Err(unfinished(day, &near, pending, String::new()));
            }
        }
        let t = std::time::Instant::now();
        let with_flights = mode != DayMode::Sweep && flights.is_none();
        let mut listed =
            crate::day::Day::list_window(cx.store, date, with_flights, window, settings.spill)
                .await?;
        day.passes += 1;
        let flights = flights.get_or_insert_with(|| std::mem::take(&mut listed.flights));
        tracing::debug!(%date, phase = "list", flights = flights.len(), spilled = flights.spilled(), seconds = t.elapsed().as_secs_f64(), "partition listed");
        let listing = &listed.index;
        day.flights = flights.len();
        let beyond_window = listing.beyond_window.files;
        left_past_window = beyond_window;
        // Refused before any input is read when the date cannot fit the
        // run's memory: a report, not an allocation failure.
        let files = (listing.inputs().count() + beyond_window) as u64;
        let in_memory = settings.spill.limit as u64;
        let (part_files, limit_mb) = (cx.config.part_files, cx.config.memory_limit_mb);
        crate::day::check_day_memory(date, files, day.flights, part_files, in_memory, limit_mb)?;
        if pass == 0 {
            day.foreign_objects = listing.foreign.len() as u64;
            day.foreign_keys = (listing.foreign.iter().take(FOREIGN_KEYS_SHOWN))
                .map(|(o, _)| o.key.clone())
                .collect();
            for (o, why) in &listing.foreign {
                tracing::debug!(key = %o.key, reason = why, "foreign object under index/: left alone");
            }
            if !listing.foreign.is_empty() {
                tracing::info!(%date, count = listing.foreign.len(), first = %listing.foreign[0].0.key,
                    "foreign objects in the partition (not index inputs): left alone");
            }
        }
        let gate_needed = match mode {
            DayMode::Walk => true,
            DayMode::Sweep => false,
            // Nothing to fold: the date is not touched, so no gate (no GET).
            DayMode::Repair => plan::compacts(listing, &cx.recovery.claimed),
        };
        // The bodies the gate read, for the merge to reuse.
        let mut prefetched = Prefetched::new();
        if pass == 0 && gate_needed {
            // The gate's first half, over the whole date's listings; its
            // second half (what the per-flight files hold) part by part.
            let check = parity_check(cx.store, date, flights, listing, None, settings).await?;
            add_skipped(
                day,
                check.unreadable.iter().map(|(key, u)| {
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
                }),
            );
            if !check.missing.is_empty() {
                let reason = check.reason().unwrap_or_default();
                return Ok(Some(parity_failed(day, reason, check.missing)?));
            }
            day.parity = Some(Parity::Passed);
            prefetched = check.prefetched;
        }
        // The listing (every key and ETag, ~200 B a file) moves into the
        // plan, which holds what the commit needs; of the flights only
        // their uuids were kept (the parts' parity checks).
        let plan = plan::plan_day(
            date,
            std::mem::take(&mut listed.index),
            &cx.recovery.claimed,
        );
        tracing::info!(pass, "{plan}");
        day.files_claimed = day.files_claimed.max(plan.claimed as u64);
        let plan::DayPlan { action, reason, .. } = plan;
        let DayAction::Compact { inputs } = action else {
            if pass == 0 {
                day.action = Done::NothingToCompact;
                day.reason = reason;
            }
            break;
        };
        let plan::Parts {
            parts,
            left_as_they_are,
        } = crate::partition::parts_of(cx.store, inputs, settings, &mut prefetched).await?;
        let count = parts.len();
        if count > 1 || left_as_they_are > 0 {
            tracing::info!(%date, parts = count, left_as_they_are, part_files = cx.config.part_files,
                "the date's inputs are more than one part (PART_FILES): each part is committed on its own");
        }
        let mut kept_newer = 0;
        let parts_before = day.parts;
        let mut stop = false;
        let mut pass_unread: Vec<UnreadFile> = Vec::new();
        let mut left: Vec<Vec<plan::PlannedInput>> = parts;
        left.reverse();
        let mut done = 0usize;
        while let Some(part) = left.pop() {
            // Before every part, the first included: refused before
            // anything of it is read when what is left cannot hold it.
            crate::failpoint!("run::before-part");
            if let Some(near) = cx.deadline.near_part(part.len(), slowest_part) {
                let files_left =
                    left.iter().map(Vec::len).sum::<usize>() + part.len() + beyond_window;
                let hint = near.part_hint(cx.deadline.given(), part.len(), cx.config.part_files);
                return Err(unfinished(day, &near, files_left, hint));
            }
            let t = Instant::now();
            let files = part.len();
            let (end, unread) = commit_part(
                cx,
                date,
                part,
                &reason,
                &mut prefetched,
                flights,
                day,
                &mut outputs,
            )
            .await?;
            slowest_part = slowest_part.max(t.elapsed());
            cx.deadline.record_part(files, t.elapsed());
            done += 1;
            pass_unread.extend(unread);
            match end {
                PartEnd::Committed { kept_newer: k } => {
                    day.parts += 1;
                    kept_newer += k;
                    if count > 1 {
                        tracing::info!(%date, part = done, of = count, seconds = t.elapsed().as_secs_f64(), "part committed");
                    }
                    crate::failpoint!("run::after-part");
                }
                PartEnd::Read => {}
                PartEnd::Lost(lost) => {
                    add_unread(&mut unread_files, pass_unread);
                    return Ok(Some(lost_rows(day, lost, unread_files)?));
                }
                PartEnd::Stop => {
                    stop = true;
                    break;
                }
            }
        }
        add_unread(&mut unread_files, pass_unread);
        if stop || cx.opts.dry_run {
            // A held-back compacted file leaves the whole date unmerged
            // (its reason says so); a dry run reads one window.
            left_past_window = 0;
            if cx.opts.dry_run && beyond_window > 0 {
                tracing::info!(%date, beyond_window, window,
                    "dry run: per-flight files past the listing window not read; a run compacts them in later passes");
                day.reason = format!(
                    "{}; dry run: the first listing window ({window} per-flight files) read, {beyond_window} more past it not read (a run compacts them in later passes)",
                    day.reason
                );
            }
            break;
        }
        // A window pass commits a part at least, so the date's inputs
        // shrink every pass and the passes end; newer versions ride along.
        if beyond_window > 0 && day.parts > parts_before {
            tracing::info!(%date, pass, beyond_window, window, kept_newer,
                "the listing window is compacted; listing the date again for the files past it");
        } else if kept_newer > 0 {
            newer_passes += 1;
            if newer_passes >= MAX_PASSES_PER_DATE {
                break;
            }
            tracing::info!(%date, kept_newer, "inputs changed during the commit; folding their newer versions in");
        } else {
            break;
        }
        pending = beyond_window + kept_newer;
        // The next pass folds this one's output in: its manifest goes first.
        delete_finished_manifests(cx).await?;
    }
    if !unread_files.is_empty() {
        return Ok(Some(lost_rows(day, Vec::new(), unread_files)?));
    }
    if left_past_window > 0 {
        // The last window committed nothing: never a date done with
        // files left past it.
        return Err(Error::WindowStalled {
            date,
            window: window as u64,
            left: left_past_window as u64,
        });
    }
    Ok(None)
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
