//! `archive-compaction prune-cache`: keeps the archive host's local index cache bounded
//! (archive-processor's copy of every per-flight index file, at its S3 key without `index/`); a
//! Lambda cannot reach it, the host runs this. A local copy is deleted only when no [`KeptReason`]
//! holds: its date passed parity and its S3 object is gone while its flight is listed, so its row
//! is in a multi-row file. Every read comes before the first delete, so any error deletes nothing
//! ([`PruneError`]). S3: ListBucket, and GetObject on the watermark; nothing is written.
//!
//! ```
//! use archive_compaction::commands::prune::{PruneOptions, prune};
//! use archive_compaction::infra::storage::{MemoryStore, Store};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new("archive");
//! let u = "019f7d73-f820-702f-b905-8c81d0944996";
//! store.put_now(&format!("flights/2026/07/20/{u}.json.gz"), "{}".into());
//! store.put_now(
//!     "_compaction_state/watermark.json",
//!     r#"{"last_compacted_date": "2026-07-20"}"#.into(),
//! );
//! let dir = tempfile::tempdir().unwrap();
//! let day = dir.path().join("year=2026/month=07/day=20");
//! std::fs::create_dir_all(&day).unwrap();
//! std::fs::write(day.join(format!("{u}.parquet")), b"PAR1").unwrap();
//! std::fs::write(day.join("notes.txt"), b"kept").unwrap();
//! let r = prune(&store, &PruneOptions::new(dir.path())).await.unwrap();
//! assert_eq!((r.files_deleted, r.bytes_freed, r.files_kept), (1, 4, 1));
//! assert!(!day.join(format!("{u}.parquet")).exists());
//! assert!(day.join("notes.txt").exists());
//! # });
//! ```

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use chrono::NaiveDate;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::data::keys::{IndexKey, classify_index_key, index_prefix};
use crate::data::state::WatermarkState;
use crate::infra::storage::Store;
use crate::infra::text::escape;
use crate::protocol::day::{Blocked, Day};

/// How many paths each list of examples in a [`PruneReport`] shows.
pub const EXAMPLES_SHOWN: usize = 5;

/// Dates listed at once (each two listings: `index/…` and `flights/…`).
const DATES_LISTED_IN_FLIGHT: usize = 4;

/// Why `prune-cache` stopped before deleting anything.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // a field is what its name and the message say
pub enum PruneError {
    /// `--dir` does not exist or is not a directory.
    #[error(
        "cache directory {dir} does not exist or is not a directory (give --dir the host path mounted at /app/index-cache); nothing was deleted"
    )]
    MissingDir { dir: PathBuf },
    /// A folder of the cache could not be read.
    #[error(
        "cannot read {path}: {source} (the command needs read and write access to the cache); nothing was deleted"
    )]
    ReadDir { path: PathBuf, source: std::io::Error },
    /// `_compaction_state/watermark.json` could not be read or parsed.
    #[error(
        "cannot read the watermark: {source}; nothing was deleted (the credential needs s3:GetObject on _compaction_state/watermark.json)"
    )]
    Watermark {
        /// The S3 or parse error (boxed: the error type is large).
        source: Box<crate::infra::error::Error>,
    },
    /// Listing the state or a date's partition failed.
    #[error(
        "cannot list {what}: {source}; nothing was deleted (the credential needs s3:ListBucket on the bucket)"
    )]
    Listing {
        /// The prefix or date that could not be listed.
        what: String,
        /// The S3 error (boxed: the error type is large).
        source: Box<crate::infra::error::Error>,
    },
}

/// What to prune.
#[derive(Debug, Clone)]
pub struct PruneOptions {
    /// The cache directory (the host path mounted at `/app/index-cache`).
    pub dir: PathBuf,
    /// Plan only: delete nothing, report what would be deleted.
    pub dry_run: bool,
}

impl PruneOptions {
    /// A real (not dry) run over `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> PruneOptions {
        PruneOptions { dir: dir.into(), dry_run: false }
    }
}

/// Why a file of the cache was kept: `reason` of `specs/prune-cache.schema.json` says each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
#[allow(missing_docs)]
pub enum KeptReason {
    AfterWatermark,
    Blocked,
    StillInS3,
    FlightNotListed,
    NotPerFlight,
    OutsideLayout,
    DeleteFailed,
}

named_enum!(KeptReason);

impl KeptReason {
    fn words(self) -> &'static str {
        match self {
            KeptReason::AfterWatermark => "after the watermark",
            KeptReason::Blocked => "of a blocked date",
            KeptReason::StillInS3 => "still in S3",
            KeptReason::FlightNotListed => "without a flight in S3",
            KeptReason::NotPerFlight => "not per-flight index files",
            KeptReason::OutsideLayout => "outside the layout",
            KeptReason::DeleteFailed => "whose delete failed",
        }
    }
}

/// One local copy of a per-flight index file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LocalCopy {
    path: PathBuf,
    /// The S3 key it mirrors (`index/` + its path relative to the cache).
    key: String,
    flight: Uuid,
    size: u64,
}

/// One `year=/month=/day=/` folder of the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct CacheDay {
    /// The per-flight index files, in name order.
    copies: Vec<LocalCopy>,
    other: Vec<PathBuf>,
}

/// The cache as walked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct CacheWalk {
    days: BTreeMap<NaiveDate, CacheDay>,
    outside: Vec<PathBuf>,
    /// Folders below `--dir` that could not be read, with why: skipped.
    skipped: Vec<(PathBuf, String)>,
}

/// A folder's entries, sorted by name: name, path, metadata (links not followed).
type Entries = Vec<(String, PathBuf, std::fs::Metadata)>;

impl CacheWalk {
    /// The entries of `path` when it is a folder of the layout (`inside`), else `None`: named in
    /// `outside`, or in `skipped` when it cannot be read.
    fn enter(&mut self, path: PathBuf, inside: bool) -> Option<Entries> {
        if !inside {
            self.outside.push(path);
            return None;
        }
        read_dir_sorted(&path)
            .inspect_err(|(p, source)| {
                tracing::warn!(folder = %p.display(), error = %source,
                    "cache folder unreadable: skipped, the rest is pruned");
                self.skipped.push((path.clone(), format!("{}: {source}", p.display())));
            })
            .ok()
    }
}

fn read_dir_sorted(path: &Path) -> Result<Entries, (PathBuf, std::io::Error)> {
    let err = |source| (path.to_path_buf(), source);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path).map_err(err)? {
        let entry = entry.map_err(err)?;
        let p = entry.path();
        let meta = std::fs::symlink_metadata(&p).map_err(|source| (p.clone(), source))?;
        // A name that is not UTF-8 is no partition and no uuid: kept.
        let name = entry.file_name().to_string_lossy().into_owned();
        out.push((name, p, meta));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Walks `dir`'s day folders; nothing below a day folder, links not followed. Errors:
/// [`PruneError::MissingDir`]; [`PruneError::ReadDir`] for `dir` (below: [`CacheWalk::skipped`]).
fn walk_cache(dir: &Path) -> Result<CacheWalk, PruneError> {
    if !dir.is_dir() {
        return Err(PruneError::MissingDir { dir: dir.to_path_buf() });
    }
    let mut walk = CacheWalk::default();
    let years = read_dir_sorted(dir).map_err(|(path, source)| PruneError::ReadDir { path, source });
    for (y, yp, ym) in years? {
        let months = walk.enter(yp, ym.is_dir() && y.starts_with("year="));
        for (m, mp, mm) in months.into_iter().flatten() {
            let days = walk.enter(mp, mm.is_dir() && m.starts_with("month="));
            for (d, dp, dm) in days.into_iter().flatten() {
                let prefix = format!("index/{y}/{m}/{d}/");
                let date = crate::data::keys::index_partition_date(&prefix)
                    .filter(|date| dm.is_dir() && index_prefix(*date) == prefix);
                let (Some(date), Some(entries)) = (date, walk.enter(dp, date.is_some())) else {
                    continue;
                };
                let day = walk.days.entry(date).or_default();
                for (name, fp, fm) in entries {
                    let key = format!("{prefix}{name}");
                    match classify_index_key(&key) {
                        IndexKey::PerFlight(flight) if fm.is_file() => {
                            day.copies.push(LocalCopy { path: fp, key, flight, size: fm.len() })
                        }
                        _ => day.other.push(fp),
                    }
                }
            }
        }
    }
    Ok(walk)
}

/// What the bucket says, as far as pruning needs it.
#[derive(Debug, Clone, Default)]
struct BucketState {
    /// `last_compacted_date` (`None`: nothing compacted yet).
    watermark: Option<NaiveDate>,
    /// Blocked dates with why ([`Blocked::keeping_cache`]).
    blocked: BTreeMap<NaiveDate, String>,
    /// Per date looked up: its listings, reduced.
    listed: BTreeMap<NaiveDate, ListedDay>,
}

/// One date's listings, reduced to the folder's copies, so memory is bounded by the copies.
#[derive(Debug, Clone, Default)]
struct ListedDay {
    /// Keys of the index partition that are one of the copies' keys.
    index_keys: HashSet<String>,
    /// Flight uuids under `flights/YYYY/MM/DD/` that are one of the copies'.
    flights: BTreeSet<Uuid>,
}

impl ListedDay {
    /// Reduces a date's listings to what matters for `day`'s copies. Errors:
    /// [`crate::infra::error::Error::Spill`] when the date's flights cannot be read back from disk.
    fn for_copies(l: Day, day: &CacheDay) -> crate::infra::error::Result<ListedDay> {
        let keys: HashSet<&str> = day.copies.iter().map(|c| c.key.as_str()).collect();
        let flights: BTreeSet<Uuid> = day.copies.iter().map(|c| c.flight).collect();
        let listed = l.index.inputs().chain(l.index.foreign.iter().map(|(m, _)| m));
        let index_keys =
            listed.filter(|m| keys.contains(m.key.as_str())).map(|m| m.key.clone()).collect();
        let mut listed = ListedDay { index_keys, ..ListedDay::default() };
        for u in flights {
            if l.flights.contains(&u)? {
                listed.flights.insert(u);
            }
        }
        Ok(listed)
    }
}

/// The dates of `walk` to list: per-flight copies, at or before the watermark, not blocked.
fn dates_to_list(walk: &CacheWalk, state: &BucketState) -> Vec<NaiveDate> {
    walk.days
        .iter()
        .filter(|(d, day)| {
            !day.copies.is_empty()
                && state.watermark.is_some_and(|w| **d <= w)
                && !state.blocked.contains_key(d)
        })
        .map(|(d, _)| *d)
        .collect()
}

/// One day folder in the report (`days[]` of `specs/prune-cache.schema.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(missing_docs)]
pub struct PruneDay {
    pub date: NaiveDate,
    pub copies: u64,
    pub to_delete: u64,
    pub bytes_to_free: u64,
    pub kept: BTreeMap<KeptReason, u64>,
    pub blocked_by: Option<String>,
}

/// The plan: what to delete, and every kept file with its reason (in walk order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PrunePlan {
    delete: Vec<LocalCopy>,
    kept: Vec<(PathBuf, KeptReason)>,
    days: Vec<PruneDay>,
}

/// What to delete and why the rest stays, from a walk and the bucket's state. Pure.
fn plan_prune(walk: &CacheWalk, state: &BucketState) -> PrunePlan {
    let mut plan = PrunePlan::default();
    for path in &walk.outside {
        plan.kept.push((path.clone(), KeptReason::OutsideLayout));
    }
    for (date, day) in &walk.days {
        let (copies, blocked_by) = (day.copies.len() as u64, state.blocked.get(date).cloned());
        let mut report = PruneDay { date: *date, copies, blocked_by, ..Default::default() };
        let mut keep = |plan: &mut PrunePlan, path: &Path, why: KeptReason| {
            *report.kept.entry(why).or_default() += 1;
            plan.kept.push((path.to_path_buf(), why));
        };
        for path in &day.other {
            keep(&mut plan, path, KeptReason::NotPerFlight);
        }
        let listed = state.listed.get(date);
        for c in &day.copies {
            let why = match listed {
                // Blocked first: the mismatch date is after the watermark too.
                _ if report.blocked_by.is_some() => Some(KeptReason::Blocked),
                _ if state.watermark.is_none_or(|w| *date > w) => Some(KeptReason::AfterWatermark),
                // Not listed: a caller's plan without the listing keeps the copy.
                None => Some(KeptReason::StillInS3),
                Some(l) if l.index_keys.contains(&c.key) => Some(KeptReason::StillInS3),
                Some(l) if !l.flights.contains(&c.flight) => Some(KeptReason::FlightNotListed),
                Some(_) => None,
            };
            match why {
                Some(why) => keep(&mut plan, &c.path, why),
                None => {
                    report.to_delete += 1;
                    report.bytes_to_free += c.size;
                    plan.delete.push(c.clone());
                }
            }
        }
        plan.days.push(report);
    }
    plan
}

/// What `prune-cache` did: its JSON summary on stdout, field by field in
/// `specs/prune-cache.schema.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(missing_docs)]
pub struct PruneReport {
    pub dir: String,
    pub bucket: String,
    pub dry_run: bool,
    pub watermark: Option<NaiveDate>,
    pub dates_looked_at: u64,
    pub dates_listed: u64,
    pub dates_blocked: BTreeMap<NaiveDate, String>,
    pub files_to_delete: u64,
    pub bytes_to_free: u64,
    pub files_deleted: u64,
    pub bytes_freed: u64,
    pub files_kept: u64,
    pub kept: BTreeMap<KeptReason, u64>,
    pub delete_examples: Vec<String>,
    pub kept_examples: BTreeMap<KeptReason, Vec<String>>,
    pub days: Vec<PruneDay>,
    pub errors: Vec<String>,
    pub skipped_folders: Vec<String>,
}

impl PruneReport {
    /// The CLI exit code: 1 when a delete failed, else 3 when a folder was skipped (a partial prune), else 0.
    pub fn exit_code(&self) -> u8 {
        match (self.errors.is_empty(), self.skipped_folders.is_empty()) {
            (false, _) => 1,
            (true, false) => 3,
            (true, true) => 0,
        }
    }

    fn keep(&mut self, path: &Path, why: KeptReason) {
        self.files_kept += 1;
        *self.kept.entry(why).or_default() += 1;
        let ex = self.kept_examples.entry(why).or_default();
        if ex.len() < EXAMPLES_SHOWN {
            ex.push(path.display().to_string());
        }
    }
}

/// Reads the watermark, the blocked dates and [`dates_to_list`]'s listings, each reduced as it
/// arrives ([`ListedDay::for_copies`]). Errors: [`PruneError::Watermark`], [`PruneError::Listing`].
async fn read_bucket(store: &impl Store, walk: &CacheWalk) -> Result<BucketState, PruneError> {
    let wm = WatermarkState::read(store)
        .await
        .map_err(|e| PruneError::Watermark { source: Box::new(e) })?
        .watermark;
    let listing = |what: &str| {
        let what = what.to_string();
        move |e| PruneError::Listing { what, source: Box::new(e) }
    };
    let blocked =
        (Blocked::read(store, wm.mismatch_date).await).map_err(|(prefix, e)| listing(prefix)(e))?;
    let mut state = BucketState {
        watermark: wm.last_compacted_date,
        blocked: blocked.keeping_cache(),
        ..Default::default()
    };
    let dates = dates_to_list(walk, &state);
    state.listed = futures::stream::iter(dates)
        .map(|d| async move {
            let l = (Day::list(store, d, true, Default::default()).await)
                .and_then(|l| ListedDay::for_copies(l, &walk.days[&d]))
                .map_err(listing(&format!("the partitions of {d}")))?;
            Ok::<_, PruneError>((d, l))
        })
        .buffered(DATES_LISTED_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(state)
}

/// Plans and (unless `dry_run`) executes one `prune-cache`. Errors: [`PruneError`].
pub async fn prune(store: &impl Store, opts: &PruneOptions) -> Result<PruneReport, PruneError> {
    let walk = walk_cache(&opts.dir)?;
    let state = read_bucket(store, &walk).await?;
    let mut plan = plan_prune(&walk, &state);
    let mut r = PruneReport {
        dir: opts.dir.display().to_string(),
        bucket: store.bucket().to_string(),
        dry_run: opts.dry_run,
        watermark: state.watermark,
        dates_looked_at: walk.days.len() as u64,
        dates_listed: state.listed.len() as u64,
        dates_blocked: plan
            .days
            .iter()
            .filter_map(|d| Some((d.date, d.blocked_by.clone()?)))
            .collect(),
        files_to_delete: plan.delete.len() as u64,
        bytes_to_free: plan.delete.iter().map(|c| c.size).sum(),
        delete_examples: (plan.delete.iter().take(EXAMPLES_SHOWN))
            .map(|c| c.path.display().to_string())
            .collect(),
        days: std::mem::take(&mut plan.days),
        skipped_folders: walk.skipped.iter().map(|(_, why)| escape(why)).collect(),
        ..Default::default()
    };
    for (path, why) in &plan.kept {
        r.keep(path, *why);
    }
    if opts.dry_run {
        tracing::info!(dir = %r.dir, files = r.files_to_delete, bytes = r.bytes_to_free,
            "dry run: nothing deleted");
        return Ok(r);
    }
    execute(&opts.dir, &plan, &mut r);
    tracing::info!(dir = %r.dir, files = r.files_deleted, bytes = r.bytes_freed, kept = r.files_kept,
        "local index cache pruned");
    Ok(r)
}

/// Deletes the plan's copies into `r`: one already gone counts as deleted (no bytes freed), one
/// that cannot be deleted goes to `r.errors` and the rest go on. Through directory handles, never a
/// path: `dir` opened (a link there is the operator's mount), then `year=`, `month=`, `day=` with
/// `O_NOFOLLOW | O_DIRECTORY`, then `unlinkat`. A folder swapped for a link since the walk fails
/// its open, so nothing outside `dir` is deleted; a file swapped for a link loses the link.
fn execute(dir: &Path, plan: &PrunePlan, r: &mut PruneReport) {
    let mut days = DayHandles { dir, open: None };
    for c in &plan.delete {
        match days.unlink(&c.key) {
            Ok(()) => {
                r.files_deleted += 1;
                r.bytes_freed += c.size;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => r.files_deleted += 1,
            Err(e) => {
                let link = [rustix::io::Errno::LOOP, rustix::io::Errno::NOTDIR]
                    .map(|n| Some(n.raw_os_error()))
                    .contains(&e.raw_os_error());
                let why = if link {
                    format!(
                        "{e}: a folder on its path is no longer a folder (a symbolic link?); nothing was deleted through it"
                    )
                } else {
                    e.to_string()
                };
                tracing::warn!(path = %c.path.display(), error = %why, "local copy could not be deleted");
                r.errors.push(format!(
                    "deleting {}: {why} (its S3 object is gone; delete it by hand or fix the permissions, the next run tries again)",
                    escape(&c.path.display().to_string())
                ));
                r.keep(&c.path, KeptReason::DeleteFailed);
            }
        }
    }
}

/// The open day folder of the last delete, so a day's copies share one `openat` chain.
struct DayHandles<'a> {
    dir: &'a Path,
    open: Option<(String, rustix::fd::OwnedFd)>,
}

impl DayHandles<'_> {
    /// Removes `key`'s local copy (`index/` + its path below `dir`).
    fn unlink(&mut self, key: &str) -> std::io::Result<()> {
        use rustix::fs::{AtFlags, Mode, OFlags};
        let rel = key.strip_prefix(crate::data::keys::INDEX_ROOT).unwrap_or(key);
        let Some((folders, name)) = rel.rsplit_once('/') else {
            return Err(std::io::Error::other(format!("{rel} is not below a day folder")));
        };
        if self.open.as_ref().is_none_or(|(f, _)| f != folders) {
            self.open = None;
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let mut fd = rustix::fs::open(self.dir, flags, Mode::empty())?;
            for part in folders.split('/') {
                fd = rustix::fs::openat(&fd, part, flags | OFlags::NOFOLLOW, Mode::empty())?;
            }
            self.open = Some((folders.to_string(), fd));
        }
        let (_, fd) = self.open.as_ref().expect("opened above");
        rustix::fs::unlinkat(fd, name, AtFlags::empty())?;
        Ok(())
    }
}

/// The one line a terminal gets (pure).
pub fn format_human(r: &PruneReport) -> String {
    let wm =
        r.watermark.map_or_else(|| "none: nothing compacted yet".to_string(), |w| w.to_string());
    let done = if r.dry_run {
        let (n, bytes) = (r.files_to_delete, r.bytes_to_free);
        format!("dry run, would delete {n} local copies ({bytes} bytes); nothing deleted")
    } else {
        let (n, bytes) = (r.files_deleted, r.bytes_freed);
        format!("deleted {n} local copies ({bytes} bytes freed)")
    };
    let reasons = (r.kept.iter()).map(|(why, n)| format!("{n} {}", why.words()));
    let reasons = reasons.collect::<Vec<_>>().join(", ");
    let reasons = if reasons.is_empty() { reasons } else { format!(": {reasons}") };
    let n = r.errors.len();
    let failed =
        if n == 0 { String::new() } else { format!("; {n} delete(s) FAILED (see errors)") };
    format!(
        "prune-cache {} (watermark {wm}): {} of {} dates listed; {done}; kept {}{reasons}{failed}",
        r.dir, r.dates_listed, r.dates_looked_at, r.files_kept
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_reasons_log_as_their_json_names() {
        use strum::VariantArray;
        for r in KeptReason::VARIANTS {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str(), "{r:?}");
        }
    }

    const U1: &str = "019f7d73-f820-702f-b905-8c81d0944996";
    const U2: &str = "019f7dc0-c448-7e25-b944-852039292d22";

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn copy(date: &str, u: &str) -> LocalCopy {
        let key = format!("{}{u}.parquet", index_prefix(d(date)));
        LocalCopy {
            path: PathBuf::from(key.trim_start_matches("index/")),
            key,
            flight: Uuid::parse_str(u).unwrap(),
            size: 10,
        }
    }

    #[test]
    fn a_copy_goes_only_when_done_gone_from_s3_and_its_flight_listed() {
        let mut walk = CacheWalk::default();
        for date in ["2026-07-17", "2026-07-18", "2026-07-19", "2026-07-20"] {
            walk.days.insert(
                d(date),
                CacheDay {
                    copies: vec![copy(date, U1), copy(date, U2)],
                    other: vec![PathBuf::from("x/_SUCCESS")],
                },
            );
        }
        walk.outside.push(PathBuf::from("lost+found"));
        let mut state = BucketState { watermark: Some(d("2026-07-19")), ..Default::default() };
        state.blocked.insert(d("2026-07-19"), "live manifest m".into());
        assert_eq!(dates_to_list(&walk, &state), [d("2026-07-17"), d("2026-07-18")]);
        // 07-17: U1 still in S3, U2 gone and its flight listed.
        let mut l17 = ListedDay::default();
        l17.index_keys.insert(copy("2026-07-17", U1).key);
        l17.flights.extend([copy("2026-07-17", U1).flight, copy("2026-07-17", U2).flight]);
        // 07-18: both gone, only U1's flight listed.
        let mut l18 = ListedDay::default();
        l18.flights.insert(copy("2026-07-18", U1).flight);
        state.listed.insert(d("2026-07-17"), l17);
        state.listed.insert(d("2026-07-18"), l18);
        let plan = plan_prune(&walk, &state);
        let deleted: Vec<&str> = plan.delete.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(deleted, [copy("2026-07-17", U2).key, copy("2026-07-18", U1).key]);
        let why = |date: &str| plan.days.iter().find(|x| x.date == d(date)).unwrap().kept.clone();
        use KeptReason::*;
        assert_eq!(why("2026-07-17"), BTreeMap::from([(NotPerFlight, 1), (StillInS3, 1)]));
        assert_eq!(why("2026-07-18"), BTreeMap::from([(NotPerFlight, 1), (FlightNotListed, 1)]));
        assert_eq!(why("2026-07-19"), BTreeMap::from([(NotPerFlight, 1), (Blocked, 2)]));
        assert_eq!(why("2026-07-20"), BTreeMap::from([(NotPerFlight, 1), (AfterWatermark, 2)]));
        assert!(plan.kept.iter().any(|k| k.1 == OutsideLayout));
        // Without a watermark nothing is listed or deleted.
        let none = BucketState::default();
        assert!(dates_to_list(&walk, &none).is_empty());
        assert!(plan_prune(&walk, &none).delete.is_empty());
    }

    #[test]
    fn the_walk_takes_only_the_exact_layout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let day = p.join("year=2026/month=07/day=20");
        std::fs::create_dir_all(&day).unwrap();
        for (rel, body) in [
            (format!("year=2026/month=07/day=20/{U1}.parquet"), "abc"),
            (format!("year=2026/month=07/day=20/{U2}.parquet.tmp"), "x"),
            ("year=2026/month=07/day=20/legacy-migration.parquet".into(), "x"),
            ("year=2026/month=07/day=20/_SUCCESS".into(), ""),
            (format!("year=2026/month=7/day=20/{U1}.parquet"), "x"),
            (format!("year=2026/month=02/day=30/{U1}.parquet"), "x"),
            (format!("year=2026/month=07/day=20/sub/{U1}.parquet"), "x"),
            ("year=2026/README".into(), "x"),
            ("notes.txt".into(), "x"),
        ] {
            let f = p.join(rel);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, body).unwrap();
        }
        let walk = walk_cache(p).unwrap();
        assert_eq!(walk.days.len(), 1);
        let day20 = &walk.days[&d("2026-07-20")];
        assert_eq!(day20.copies.len(), 1);
        assert_eq!(day20.copies[0].size, 3);
        assert_eq!(day20.copies[0].key, format!("index/year=2026/month=07/day=20/{U1}.parquet"));
        // .tmp, legacy, _SUCCESS, sub/.
        assert_eq!(day20.other.len(), 4);
        // month=7, day=30 of February, README, notes.txt.
        assert_eq!(walk.outside.len(), 4, "{:?}", walk.outside);
        assert!(matches!(walk_cache(&p.join("nope")), Err(PruneError::MissingDir { .. })));
        assert!(matches!(walk_cache(&p.join("notes.txt")), Err(PruneError::MissingDir { .. })));
    }

    /// `copy(date, u)` with its file written under `dir` (`body` bytes).
    fn written(dir: &Path, date: &str, u: &str, body: &str) -> LocalCopy {
        let mut c = copy(date, u);
        c.path = dir.join(&c.path);
        c.size = body.len() as u64;
        std::fs::create_dir_all(c.path.parent().unwrap()).unwrap();
        std::fs::write(&c.path, body).unwrap();
        c
    }

    #[test]
    fn a_delete_that_fails_is_an_error_and_the_rest_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = PrunePlan::default();
        plan.delete.push(written(dir.path(), "2026-07-20", U1, "abc"));
        plan.delete.push(written(dir.path(), "2026-07-20", U2, ""));
        // A folder where a copy was planned (replaced since the walk): its
        // delete fails, even for root.
        std::fs::remove_file(&plan.delete[1].path).unwrap();
        std::fs::create_dir(&plan.delete[1].path).unwrap();
        let gone = copy("2026-07-21", U1);
        plan.delete.push(gone);
        let mut r = PruneReport::default();
        execute(dir.path(), &plan, &mut r);
        assert_eq!((r.files_deleted, r.bytes_freed), (2, 3));
        assert_eq!(r.kept, BTreeMap::from([(KeptReason::DeleteFailed, 1)]));
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        assert!(r.errors[0].contains(U2), "{:?}", r.errors);
        assert_eq!(r.exit_code(), 1);
        assert!(!plan.delete[0].path.exists());
        assert!(format_human(&r).contains("1 delete(s) FAILED"));
    }

    #[test]
    fn a_folder_swapped_for_a_link_after_the_walk_deletes_nothing_outside() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let mut plan = PrunePlan::default();
        plan.delete.push(written(dir.path(), "2026-07-20", U1, "abc"));
        plan.delete.push(written(dir.path(), "2026-06-20", U2, "abc"));
        // Between the walk and the delete: month=07 becomes a link to a
        // folder holding a file of the same name.
        let victim = outside.path().join("day=20");
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(victim.join(format!("{U1}.parquet")), "precious").unwrap();
        let month = dir.path().join("year=2026/month=07");
        std::fs::remove_dir_all(&month).unwrap();
        std::os::unix::fs::symlink(outside.path(), &month).unwrap();
        let mut r = PruneReport::default();
        execute(dir.path(), &plan, &mut r);
        assert_eq!(
            std::fs::read_to_string(victim.join(format!("{U1}.parquet"))).unwrap(),
            "precious"
        );
        assert_eq!(r.files_deleted, 1, "the other month is pruned");
        assert!(!plan.delete[1].path.exists());
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        assert!(r.errors[0].contains("symbolic link"), "{:?}", r.errors);
    }

    #[test]
    fn an_unreadable_folder_is_named_and_skipped() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        written(dir.path(), "2026-07-20", U1, "abc");
        let locked = written(dir.path(), "2026-07-21", U2, "abc");
        let folder = locked.path.parent().unwrap().to_path_buf();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o000)).unwrap();
        let walk = walk_cache(dir.path());
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o000)).unwrap();
        let root = std::fs::read_dir(&folder).is_ok();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
        if root {
            eprintln!("running as root, who reads any folder: the skip is not exercised");
            return;
        }
        let walk = walk.unwrap();
        assert_eq!(walk.days[&d("2026-07-20")].copies.len(), 1);
        assert_eq!(walk.skipped.len(), 1, "{:?}", walk.skipped);
        assert_eq!(walk.skipped[0].0, folder);
        let r = PruneReport { skipped_folders: vec!["x".into()], ..Default::default() };
        assert_eq!(r.exit_code(), 3);
    }

    #[test]
    fn the_human_line_says_what_was_done_and_kept() {
        let mut r = PruneReport {
            dir: "/c".into(),
            watermark: Some(d("2026-07-19")),
            dates_looked_at: 5,
            dates_listed: 2,
            files_to_delete: 3,
            bytes_to_free: 30,
            dry_run: true,
            ..Default::default()
        };
        r.keep(Path::new("/c/x"), KeptReason::AfterWatermark);
        let line = format_human(&r);
        assert_eq!(
            line,
            "prune-cache /c (watermark 2026-07-19): 2 of 5 dates listed; dry run, would delete 3 local copies (30 bytes); nothing deleted; kept 1: 1 after the watermark"
        );
        r.dry_run = false;
        r.files_deleted = 3;
        r.bytes_freed = 30;
        assert!(format_human(&r).contains("deleted 3 local copies (30 bytes freed)"));
    }
}
