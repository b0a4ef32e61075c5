//! Pure planning: which dates a run walks, a partition listing sorted by [`IndexKey`], a date's
//! [`DayPlan`] and its parts ([`plan_date`] → [`DatePlan`]). No S3, no clock; a date's uuid sets
//! may spill to local disk ([`crate::data::spill`]).
//!
//! ```
//! use archive_compaction::protocol::plan::{plan_day, classify_partition, DayAction};
//! use chrono::NaiveDate;
//! let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
//! let plan = plan_day(date, classify_partition(vec![]), &Default::default());
//! assert!(matches!(plan.action, DayAction::Skip { .. }));
//! ```

use std::collections::HashSet;
use std::fmt;

use chrono::{DateTime, Days, NaiveDate, Utc};
use uuid::Uuid;

use crate::data::keys::{IndexKey, classify_index_key};
use crate::data::merge::Source;
use crate::data::report::PlannedPartReport;
use crate::data::spill::{SpillSettings, UuidSet, UuidSetBuilder};
use crate::infra::storage::ObjectMeta;
pub use crate::protocol::sizing::PartSizing;

/// A small set of flights in memory (a parity-gate batch, the flights a report names): a sorted
/// array, smaller than a B-tree. A date's own sets are [`UuidSet`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flights(Vec<Uuid>);

impl Flights {
    /// A binary search.
    pub fn contains(&self, flight: &Uuid) -> bool {
        self.0.binary_search(flight).is_ok()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `flight`; false when it was there already.
    pub fn insert(&mut self, flight: Uuid) -> bool {
        let Err(at) = self.0.binary_search(&flight) else { return false };
        self.0.insert(at, flight);
        true
    }
}

impl From<Vec<Uuid>> for Flights {
    fn from(mut flights: Vec<Uuid>) -> Flights {
        flights.sort_unstable();
        flights.dedup();
        flights.shrink_to_fit();
        Flights(flights)
    }
}

fn cutoff(now: DateTime<Utc>, lag_days: u32) -> NaiveDate {
    now.date_naive() - Days::new(lag_days as u64)
}

/// A command's two cutoffs, each the UTC date of a time minus `LAG_DAYS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cutoff {
    /// The last date a run walks to, or `status` predicts for.
    pub walk: NaiveDate,
    /// The wall clock's, past which a watermark is ahead ([`watermark_ahead_days`]).
    pub today: NaiveDate,
}

impl Cutoff {
    /// A run's, at invocation time `now` and wall clock `wall`: it never walks past the wall
    /// clock's cutoff, whatever time an event carries.
    pub fn of_run(now: DateTime<Utc>, wall: DateTime<Utc>, lag_days: u32) -> Cutoff {
        let today = cutoff(wall, lag_days);
        Cutoff { walk: cutoff(now, lag_days).min(today), today }
    }

    /// `status`'s, predicting the run at `now`, taken at `as_of`.
    pub fn of_status(now: DateTime<Utc>, as_of: DateTime<Utc>, lag_days: u32) -> Cutoff {
        Cutoff { walk: cutoff(now, lag_days), today: cutoff(as_of, lag_days) }
    }
}

/// Days up to `cutoff` not yet compacted: after `watermark`, else from `first` (counted).
///
/// ```
/// use archive_compaction::protocol::plan::watermark_lag_days;
/// let d = |s: &str| s.parse().unwrap();
/// assert_eq!(watermark_lag_days(Some(d("2026-07-17")), None, d("2026-07-20")), 3);
/// assert_eq!(watermark_lag_days(None, Some(d("2026-07-18")), d("2026-07-20")), 3);
/// assert_eq!(watermark_lag_days(Some(d("2026-07-22")), None, d("2026-07-20")), 0);
/// assert_eq!(watermark_lag_days(None, None, d("2026-07-20")), 0);
/// ```
pub fn watermark_lag_days(
    watermark: Option<NaiveDate>,
    first: Option<NaiveDate>,
    cutoff: NaiveDate,
) -> i64 {
    match (watermark, first) {
        (Some(w), _) => (cutoff - w).num_days().max(0),
        (None, Some(f)) => ((cutoff - f).num_days() + 1).max(0),
        (None, None) => 0,
    }
}

/// Days `watermark` is ahead of `today` (the wall clock's cutoff), when it is: every run fails on
/// it (`Error::WatermarkAhead`).
pub fn watermark_ahead_days(watermark: Option<NaiveDate>, today: NaiveDate) -> Option<i64> {
    watermark.filter(|w| *w > today).map(|w| (w - today).num_days())
}

/// First date to walk: the day after the watermark, never before `start_date` (`START_DATE`);
/// without a watermark, `start_date`, else the earliest index partition.
pub fn walk_start(
    watermark: Option<NaiveDate>,
    start_date: Option<NaiveDate>,
    earliest_partition: Option<NaiveDate>,
) -> Option<NaiveDate> {
    match watermark {
        Some(w) => w.succ_opt().map(|next| start_date.map_or(next, |s| next.max(s))),
        None => start_date.or(earliest_partition),
    }
}

/// Where a walk from `start` begins once dates without any object are skipped (each would cost two
/// listings and a watermark write): the first of `earliest` (partition) and `blocked` (manifest's
/// date), never after `cutoff`, so the watermark still reaches the cutoff on an empty bucket.
///
/// ```
/// use archive_compaction::protocol::plan::first_date_with_data;
/// let d = |s: &str| chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
/// let (start, cutoff) = (d("0001-01-02"), d("2026-07-20"));
/// assert_eq!(first_date_with_data(start, cutoff, Some(d("2026-07-18")), None), d("2026-07-18"));
/// assert_eq!(first_date_with_data(start, cutoff, None, None), cutoff);
/// assert_eq!(first_date_with_data(d("2026-07-19"), cutoff, Some(d("2026-07-01")), None), d("2026-07-19"));
/// ```
pub fn first_date_with_data(
    start: NaiveDate,
    cutoff: NaiveDate,
    earliest: Option<NaiveDate>,
    blocked: Option<NaiveDate>,
) -> NaiveDate {
    let first =
        [earliest, blocked, Some(cutoff)].into_iter().flatten().min().expect("the cutoff is one");
    start.max(first)
}

/// An index partition listing, sorted out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionListing {
    /// `{uuid}.parquet` files with their uuid, in key order.
    pub per_flight: Vec<(Uuid, ObjectMeta)>,
    /// `{uuid}.parquet` files past a [`crate::protocol::day::Day::list_window`] window, for a later
    /// pass.
    pub beyond_window: BeyondWindow,
    /// `compacted-*.parquet` files, in key order.
    pub compacted: Vec<ObjectMeta>,
    /// Other multi-row index files (any other `.parquet` name), in key order.
    pub multi_row: Vec<ObjectMeta>,
    /// Everything else, with why it is foreign. Never touched.
    pub foreign: Vec<(ObjectMeta, &'static str)>,
}

/// The per-flight files a listing window left out: counted, their keys and ETags not held.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BeyondWindow {
    /// Non-empty `{uuid}.parquet` files.
    pub files: usize,
    /// Bytes.
    pub bytes: u64,
    /// The uuids they are named by; empty when the date's flights were not listed with them.
    pub flights: UuidSet,
}

impl PartitionListing {
    /// The flights of `flights` no per-flight file is named by, in the window or past it: the
    /// parity gate's first look. A merge of sorted sets, so a set on disk is read once.
    /// Errors: [`crate::infra::error::Error::Spill`].
    pub fn flights_not_named(
        &self,
        flights: &UuidSet,
        spill: SpillSettings,
    ) -> crate::infra::error::Result<UuidSet> {
        let mut window: Vec<Uuid> = self.per_flight.iter().map(|(u, _)| *u).collect();
        window.sort_unstable();
        let mut window = window.into_iter().peekable();
        let mut past = self.beyond_window.flights.iter().peekable();
        let mut out = UuidSetBuilder::new(spill);
        for u in flights.iter() {
            let u = u?;
            while window.next_if(|w| *w < u).is_some() {}
            if window.peek() == Some(&u) {
                continue;
            }
            while past.next_if(|p| matches!(p, Ok(p) if *p < u)).is_some() {}
            if let Some(Err(_)) = past.peek() {
                return Err(past.next().and_then(Result::err).expect("an error"));
            }
            if past.peek().and_then(|p| p.as_ref().ok()) != Some(&u) {
                out.push(u)?;
            }
        }
        out.finish()
    }

    /// Compacted, then other multi-row files: rows, not names, say their flights.
    pub fn multi_row_inputs(&self) -> impl Iterator<Item = (&ObjectMeta, Source)> {
        (self.compacted.iter().map(|m| (m, Source::Compacted)))
            .chain(self.multi_row.iter().map(|m| (m, Source::MultiRow)))
    }

    /// Bytes of per-flight files, in the window or past it.
    pub fn per_flight_bytes(&self) -> u64 {
        self.per_flight.iter().map(|(_, m)| m.size).sum::<u64>() + self.beyond_window.bytes
    }

    /// Every index input, of any kind.
    pub fn inputs(&self) -> impl Iterator<Item = &ObjectMeta> {
        (self.per_flight.iter().map(|(_, m)| m)).chain(&self.compacted).chain(&self.multi_row)
    }
}

/// What a listed index object is to the run: its key's kind ([`classify_index_key`]), except that
/// a zero-byte object is foreign whatever its name (an upload not finished, or a marker).
pub fn classify_object(o: &ObjectMeta) -> IndexKey {
    if o.size == 0 { IndexKey::Foreign("zero-byte object") } else { classify_index_key(&o.key) }
}

/// Zero-byte objects are foreign whatever their name (directory markers, failed uploads: an empty
/// body is no Parquet file).
pub fn classify_partition(objects: Vec<ObjectMeta>) -> PartitionListing {
    let mut out = PartitionListing::default();
    for o in objects {
        match classify_object(&o) {
            IndexKey::PerFlight(u) => out.per_flight.push((u, o)),
            IndexKey::Compacted => out.compacted.push(o),
            IndexKey::MultiRow => out.multi_row.push(o),
            IndexKey::Foreign(why) => out.foreign.push((o, why)),
        }
    }
    out
}

/// One input of a day's compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedInput {
    /// The object as listed.
    pub meta: ObjectMeta,
    /// Decides who wins between duplicates ([`crate::data::merge`]).
    pub source: Source,
}

impl PlannedInput {
    /// `None` for a multi-row input.
    pub fn flight(&self) -> Option<Uuid> {
        match self.source {
            Source::PerFlight(u) => Some(u),
            Source::Compacted | Source::MultiRow => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// What to do with one date.
pub enum DayAction {
    /// Merge these into one new compacted file and retire them.
    Compact {
        /// Compacted, then other multi-row, then per-flight files, each kind in key order.
        inputs: Vec<PlannedInput>,
    },
    /// Nothing to write; the watermark may move past the date.
    Skip,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// The plan for one date, with the reason it prints.
pub struct DayPlan {
    /// The date.
    pub date: NaiveDate,
    /// What to do.
    pub action: DayAction,
    /// Why, in words.
    pub reason: String,
    /// Inputs (of any kind) left out because a live manifest claims them.
    pub claimed: usize,
}

/// Plans one date: every input not in `claimed` (keys a live manifest holds) is merged, existing
/// compacted files folded in, in parts cut by [`plan_date`], unless `skip_reason` skips it.
pub fn plan_day(date: NaiveDate, listing: PartitionListing, claimed: &HashSet<String>) -> DayPlan {
    let claimed_n = listing.inputs().filter(|m| claimed.contains(&m.key)).count();
    // Moved, not copied: a large date cannot hold its listing twice.
    let free = |m: &ObjectMeta| !claimed.contains(&m.key);
    let planned = |source| move |meta| PlannedInput { meta, source };
    let mut inputs: Vec<PlannedInput> =
        (listing.compacted.into_iter().filter(free)).map(planned(Source::Compacted)).collect();
    let c = inputs.len();
    inputs.extend((listing.multi_row.into_iter().filter(free)).map(planned(Source::MultiRow)));
    let o = inputs.len() - c;
    inputs.extend(
        (listing.per_flight.into_iter())
            .filter(|(_, m)| free(m))
            .map(|(u, meta)| PlannedInput { meta, source: Source::PerFlight(u) }),
    );
    let n = inputs.len() - c - o;
    let (action, reason) = match skip_reason(n, o, c) {
        Some(why) => (DayAction::Skip, why),
        None => {
            let mut parts = Vec::new();
            if n > 0 {
                parts.push(format!("{n} per-flight file(s)"));
            }
            if o > 0 {
                parts.push(format!("{o} other multi-row index file(s)"));
            }
            let why = match (parts.is_empty(), c) {
                (true, c) => format!("{c} compacted files to merge into one"),
                (false, 0) => parts.join(" and "),
                (false, c) => {
                    format!("{} folded into {c} existing compacted file(s)", parts.join(" and "))
                }
            };
            (DayAction::Compact { inputs }, why)
        }
    };
    DayPlan { date, action, reason, claimed: claimed_n }
}

/// Whether [`plan_day`] would compact, without building the plan: a repair run gates only a date it
/// would touch.
pub fn compacts(listing: &PartitionListing, claimed: &HashSet<String>) -> bool {
    let free = |m: &&ObjectMeta| !claimed.contains(&m.key);
    let n = (listing.per_flight.iter().map(|(_, m)| m)).filter(free).count();
    let o = listing.multi_row.iter().filter(free).count();
    let c = listing.compacted.iter().filter(free).count();
    skip_reason(n, o, c).is_none()
}

/// Why a date with these unclaimed input counts is skipped: the one rule of [`plan_day`] and
/// [`compacts`].
fn skip_reason(per_flight: usize, multi_row: usize, compacted: usize) -> Option<String> {
    match (per_flight, multi_row, compacted) {
        (0, 0, 0) => Some("no index files".to_string()),
        (0, 0, 1) => Some("already one compacted file and nothing else".to_string()),
        _ => None,
    }
}

/// What one input weighs in a part, in per-flight-file units, so a part's weight bounds its memory
/// whatever its inputs.
pub fn input_weight(input: &PlannedInput) -> u64 {
    match input.source {
        Source::PerFlight(_) => 1,
        Source::Compacted | Source::MultiRow => 1 + input.meta.size / MULTI_ROW_BYTES_PER_WEIGHT,
    }
}

/// Bytes of a multi-row input that weigh as much as one per-flight file
/// ([`crate::protocol::sizing::MEMORY_PER_FILE_BYTES`]): a compacted row is ~50 B of file and ~650
/// B while merged (`make bench-sizing`), rounded down.
pub const MULTI_ROW_BYTES_PER_WEIGHT: u64 = 100;

/// A date's inputs grouped by the flights they share: a union-find of one entry an input, not a
/// flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    parent: Vec<usize>,
}

impl Groups {
    /// Each input alone.
    pub fn new(n: usize) -> Groups {
        Groups { parent: (0..n).collect() }
    }

    /// `holders` must be in flight order (a [`crate::data::spill::SortedSet`]'s). Indices past `n`
    /// are ignored. Errors: the first error of `holders`.
    pub fn of_holders<E>(
        n: usize,
        holders: impl IntoIterator<Item = Result<(Uuid, u32), E>>,
    ) -> Result<Groups, E> {
        let mut g = Groups::new(n);
        let mut last: Option<(Uuid, usize)> = None;
        for pair in holders {
            let (flight, i) = pair?;
            let i = i as usize;
            if i >= n {
                continue;
            }
            match last {
                Some((f, j)) if f == flight => g.join(i, j),
                _ => last = Some((flight, i)),
            }
        }
        Ok(g)
    }

    /// Inputs of the same label in one group (a [`PlannedPart`]'s, for a cut).
    fn of_labels(labels: &[u32]) -> Groups {
        let mut g = Groups::new(labels.len());
        let mut first = std::collections::HashMap::new();
        for (i, label) in labels.iter().enumerate() {
            let j = *first.entry(label).or_insert(i);
            g.join(i, j);
        }
        g
    }

    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.root(a), self.root(b));
        self.parent[a.max(b)] = a.min(b);
    }

    /// The group of input `i`: its smallest index.
    fn root(&mut self, mut i: usize) -> usize {
        while self.parent[i] != i {
            self.parent[i] = self.parent[self.parent[i]];
            i = self.parent[i];
        }
        i
    }
}

/// A date's plan, made before any input is read: its parts, each committed on its own (its own
/// output and manifest), and the inputs left as they are, each with why. [`plan_date`] makes it;
/// the run executes it part by part, the dry run and `status` print it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatePlan {
    /// Why the date is compacted or skipped ([`DayPlan::reason`]).
    pub reason: String,
    /// Inputs (of any kind) left out because a live manifest claims them.
    pub claimed: usize,
    /// In commit order.
    pub parts: Vec<PlannedPart>,
    /// Inputs in no part, besides the claimed ones.
    pub left: Vec<LeftInput>,
}

/// One part of a [`DatePlan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedPart {
    /// Compacted, then other multi-row, then per-flight files, each kind in key order.
    pub inputs: Vec<PlannedInput>,
    /// Its inputs' [`input_weight`]s, summed.
    pub weight: u64,
    /// Estimated peak memory while it is committed, in MB ([`PartSizing::estimate_mb`]).
    pub estimate_mb: u64,
    /// When it is a piece of a planned part cut smaller for the time left: which, and why.
    pub cut: Option<String>,
    /// Each input's group: inputs sharing a flight have the same, so a cut keeps them together.
    groups: Vec<u32>,
}

impl PlannedPart {
    /// Its inputs' bytes, as listed.
    pub fn bytes(&self) -> u64 {
        self.inputs.iter().map(|i| i.meta.size).sum()
    }

    /// As `days[].plan.parts[]` says it, of listing pass `pass`, not committed: its inputs named
    /// by the first and last key in byte order and `keys_sha256`, the lowercase hex SHA-256 of all
    /// its keys sorted and joined by `\n` (`LC_ALL=C sort | head -c -1 | sha256sum`).
    pub fn report(&self, pass: u64) -> PlannedPartReport {
        // The keys joined by newlines, hashed as they go (no joined copy of a part's keys).
        let digest_of = |keys: &[&str]| {
            use sha2::Digest;
            let mut h = sha2::Sha256::new();
            for (i, k) in keys.iter().enumerate() {
                h.update(if i == 0 { &b""[..] } else { b"\n" });
                h.update(k.as_bytes());
            }
            h.finalize()
        };
        let mut keys: Vec<&str> = self.inputs.iter().map(|i| i.meta.key.as_str()).collect();
        keys.sort_unstable();
        PlannedPartReport {
            pass,
            files: keys.len() as u64,
            bytes: self.bytes(),
            estimate_mb: self.estimate_mb,
            first_key: keys.first().map_or_else(String::new, |k| k.to_string()),
            last_key: keys.last().map_or_else(String::new, |k| k.to_string()),
            keys_sha256: hex::encode(digest_of(&keys)),
            committed: false,
            cut: self.cut.clone(),
        }
    }
}

/// An input a plan leaves as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftInput {
    /// Its key.
    pub key: String,
    /// Why it is left.
    pub why: &'static str,
}

/// Why a compacted file is left as it is ([`plan_date`]).
pub const LEFT_COMPACTED: &str =
    "a compacted file sharing no flight with the other inputs that does not fit the first part";

/// The one planner of a date: `day`'s inputs ([`plan_day`]) in parts of at most
/// `sizing.part_weight`, inputs of one group ([`Groups`]: those holding a row of the same flight)
/// in one part. Pure; what it needs of the inputs' rows comes in `groups`
/// ([`crate::protocol::partition::plan_date`]). Rules, so that every flight's row is in one output
/// exactly once:
/// - all the inputs in one part when they fit;
/// - a group in one part, where the merge keeps one row (the per-flight file's);
/// - a compacted file sharing no flight goes into the first part while it fits, else it is left as
///   it is (already one part's output; Athena reads every `compacted-*` file);
/// - the rest fill parts in order; a group heavier than a part goes alone in its own; a first part
///   that would be one compacted file alone is dropped.
pub fn plan_date(day: DayPlan, groups: Groups, sizing: &PartSizing) -> DatePlan {
    let inputs = match day.action {
        DayAction::Compact { inputs } => inputs,
        DayAction::Skip => Vec::new(),
    };
    let mut plan = DatePlan { reason: day.reason, claimed: day.claimed, ..Default::default() };
    plan.parts = cut(inputs, groups, sizing, sizing.part_weight, &mut plan.left);
    plan
}

impl DatePlan {
    /// Cuts part `at` into parts of at most `weight` by [`plan_date`]'s rules (the time left
    /// allows no more), each piece saying `why`; compacted files the cut leaves out go to
    /// [`DatePlan::left`]. Returns how many parts it became.
    pub fn cut_part(&mut self, at: usize, weight: u64, sizing: &PartSizing, why: &str) -> usize {
        let part = self.parts.remove(at);
        let groups = Groups::of_labels(&part.groups);
        let mut cut = cut(part.inputs, groups, sizing, weight, &mut self.left);
        cut.iter_mut().for_each(|p| p.cut = Some(why.to_string()));
        let n = cut.len();
        self.parts.splice(at..at, cut);
        n
    }

    /// Index files in its parts.
    pub fn files(&self) -> usize {
        self.parts.iter().map(|p| p.inputs.len()).sum()
    }
}

impl fmt::Display for DatePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} file(s) in {} part(s) ({})", self.files(), self.parts.len(), self.reason)?;
        for (i, p) in self.parts.iter().enumerate() {
            let (n, size, mb) = (p.inputs.len(), indicatif::HumanBytes(p.bytes()), p.estimate_mb);
            write!(f, "; part {}: {n} file(s), {size}, an estimated peak of {mb} MB", i + 1)?;
        }
        if !self.left.is_empty() {
            write!(f, "; {} left as they are ({})", self.left.len(), self.left[0].why)?;
        }
        Ok(())
    }
}

/// `inputs` drained from a [`PartQueue`] at `weight`.
fn cut(
    inputs: Vec<PlannedInput>,
    groups: Groups,
    sizing: &PartSizing,
    weight: u64,
    left: &mut Vec<LeftInput>,
) -> Vec<PlannedPart> {
    let mut queue = PartQueue::new(inputs, groups);
    let mut parts = Vec::new();
    while let Some(part) = queue.next_part(weight) {
        let (groups, inputs): (Vec<u32>, Vec<PlannedInput>) = part.into_iter().unzip();
        let weight = inputs.iter().map(input_weight).sum();
        let estimate_mb = sizing.estimate_mb(weight);
        parts.push(PlannedPart { inputs, weight, estimate_mb, cut: None, groups });
    }
    let why = LEFT_COMPACTED;
    left.extend(queue.left.into_iter().map(|i| LeftInput { key: i.meta.key, why }));
    parts
}

/// A date's inputs taken a part at a time ([`plan_date`]'s rules).
#[derive(Debug)]
struct PartQueue {
    slots: Vec<Option<PlannedInput>>,
    weights: Vec<u64>,
    /// Each group's inputs, by their smallest index, in the order of their first input.
    groups: std::collections::VecDeque<(u32, Vec<usize>)>,
    first_taken: bool,
    left: Vec<PlannedInput>,
}

impl PartQueue {
    /// Inputs past `groups`' size are alone.
    fn new(inputs: Vec<PlannedInput>, mut groups: Groups) -> PartQueue {
        let mut grouped: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for i in 0..inputs.len() {
            let root = if i < groups.parent.len() { groups.root(i) } else { i };
            grouped.entry(root).or_default().push(i);
        }
        let weights: Vec<u64> = inputs.iter().map(input_weight).collect();
        let label = |root: usize| u32::try_from(root).unwrap_or(u32::MAX);
        PartQueue {
            weights,
            slots: inputs.into_iter().map(Some).collect(),
            groups: grouped.into_iter().map(|(root, g)| (label(root), g)).collect(),
            first_taken: false,
            left: Vec::new(),
        }
    }

    /// At most `part_weight` unless one group weighs more, each input with its group; `None` when
    /// nothing is left to merge.
    fn next_part(&mut self, part_weight: u64) -> Option<Vec<(u32, PlannedInput)>> {
        let part_weight = part_weight.max(1);
        let first = !self.first_taken;
        self.first_taken = true;
        let mut part: Vec<(u32, usize)> = Vec::new();
        let mut weight = 0;
        let all_fit = first && self.weights.iter().sum::<u64>() <= part_weight;
        let flat = |(l, g): (u32, Vec<usize>)| g.into_iter().map(move |i| (l, i));
        if all_fit {
            part = self.groups.drain(..).flat_map(flat).collect();
        }
        while let Some((_, group)) = self.groups.front() {
            let w: u64 = group.iter().map(|&i| self.weights[i]).sum();
            if let Some(i) = self.compacted_alone(group) {
                self.groups.pop_front();
                if first && weight + w <= part_weight {
                    weight += w;
                    part.push((i as u32, i));
                } else {
                    self.leave(i);
                }
                continue;
            }
            if !part.is_empty() && weight + w > part_weight {
                break;
            }
            weight += w;
            part.extend(self.groups.pop_front().into_iter().flat_map(flat));
        }
        if let (true, false, [(_, i)]) = (first, all_fit, part.as_slice())
            && self.compacted_alone(&[*i]).is_some()
        {
            self.leave(*i);
            return self.next_part(part_weight);
        }
        if part.is_empty() {
            return None;
        }
        part.sort_unstable_by_key(|(_, i)| *i);
        let take =
            |(l, i): (u32, usize)| (l, self.slots[i].take().expect("each input in one part"));
        Some(part.into_iter().map(take).collect())
    }

    fn leave(&mut self, i: usize) {
        self.left.extend(self.slots[i].take());
    }

    /// The input of `group` when it is one compacted file alone.
    fn compacted_alone(&self, group: &[usize]) -> Option<usize> {
        match group {
            [i] if self.slots[*i].as_ref().is_some_and(|p| p.source == Source::Compacted) => {
                Some(*i)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(key: &str, size: u64) -> ObjectMeta {
        ObjectMeta {
            key: key.into(),
            etag: "\"e\"".into(),
            size,
            last_modified: DateTime::UNIX_EPOCH,
        }
    }
    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }
    const P: &str = "index/year=2026/month=07/day=20/";
    const U1: &str = "019f7d73-f820-702f-b905-8c81d0944996";
    const U2: &str = "019f7dc0-c448-7e25-b944-852039292d22";

    #[test]
    fn cutoff_is_utc_date_minus_lag() {
        let now = DateTime::parse_from_rfc3339("2026-07-22T00:30:00+02:00").unwrap().to_utc();
        assert_eq!(cutoff(now, 2), d("2026-07-19"));
        assert_eq!(cutoff(now, 0), d("2026-07-21"));
    }

    #[test]
    fn a_runs_cutoff_never_walks_past_the_wall_clocks() {
        let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let c = Cutoff::of_run(t("2026-07-30T01:00:00Z"), t("2026-07-21T23:59:00Z"), 2);
        assert_eq!((c.walk, c.today), (d("2026-07-19"), d("2026-07-19")));
        let c = Cutoff::of_run(t("2026-07-20T01:00:00Z"), t("2026-07-21T00:00:00Z"), 0);
        assert_eq!((c.walk, c.today), (d("2026-07-20"), d("2026-07-21")));
    }

    #[test]
    fn walk_start_rules() {
        assert_eq!(
            walk_start(Some(d("2026-07-19")), Some(d("2020-01-01")), None),
            Some(d("2026-07-20"))
        );
        assert_eq!(
            walk_start(None, Some(d("2026-01-01")), Some(d("2025-01-01"))),
            Some(d("2026-01-01"))
        );
        assert_eq!(walk_start(None, None, Some(d("2025-01-01"))), Some(d("2025-01-01")));
        assert_eq!(walk_start(None, None, None), None);
        // A watermark before START_DATE (the Python job's): the walk starts
        // at START_DATE, never before it.
        assert_eq!(
            walk_start(Some(d("2026-07-13")), Some(d("2026-07-16")), None),
            Some(d("2026-07-16"))
        );
    }

    #[test]
    fn flights_are_a_sorted_set_of_sixteen_bytes_a_flight() {
        let u = |n: u128| Uuid::from_u128(n);
        let mut f = Flights::from(vec![u(3), u(1), u(3), u(2)]);
        assert_eq!(f.0, [u(1), u(2), u(3)]);
        assert_eq!(f.0.len(), 3);
        // The array holds no spare room once built.
        assert_eq!(f.0.capacity(), 3);
        assert!(f.contains(&u(2)) && !f.contains(&u(4)));
        assert!(f.insert(u(0)) && !f.insert(u(2)));
        assert_eq!(f.0, [u(0), u(1), u(2), u(3)]);
        assert!(!f.is_empty() && Flights::default().is_empty());
    }

    #[test]
    fn classify_sorts_foreign_and_zero_byte() {
        let l = classify_partition(vec![
            meta(&format!("{P}{U1}.parquet"), 10),
            meta(&format!("{P}{U2}.parquet"), 0),
            meta(&format!("{P}compacted-x.parquet"), 10),
            meta(&format!("{P}legacy-migration.parquet"), 10),
            meta(&format!("{P}empty-export.parquet"), 0),
            meta(&format!("{P}_SUCCESS"), 10),
            meta(P, 0),
        ]);
        assert_eq!(l.per_flight.len(), 1);
        assert_eq!(l.compacted.len(), 1);
        assert_eq!(l.multi_row.len(), 1);
        assert_eq!(l.foreign.len(), 4);
        assert_eq!(l.inputs().count(), 3);
    }

    /// The gate's first look, in memory and with every set on disk (a
    /// limit of one uuid): the same flights.
    #[test]
    fn parity_reports_missing_only() {
        let u1 = Uuid::parse_str(U1).unwrap();
        let u2 = Uuid::parse_str(U2).unwrap();
        let uuids: Vec<Uuid> = [
            format!("flights/2026/07/20/A_B_{U1}.json.gz"),
            format!("flights/2026/07/20/{U2}.json.gz"),
            "flights/2026/07/20/notes.txt".to_string(),
        ]
        .iter()
        .filter_map(|k| crate::data::keys::flight_uuid(k))
        .collect();
        for limit in [1, 1000] {
            let spill = SpillSettings { limit };
            let set = |us: &[Uuid]| {
                let mut b = UuidSetBuilder::new(spill);
                us.iter().for_each(|u| b.push(*u).unwrap());
                b.finish().unwrap()
            };
            let not_named = |l: &PartitionListing, f: &UuidSet| -> Vec<Uuid> {
                let out = l.flights_not_named(f, spill).unwrap();
                out.iter().map(Result::unwrap).collect()
            };
            let flights = set(&uuids);
            assert_eq!(flights.len(), 2);
            let listing = classify_partition(vec![meta(&format!("{P}{U1}.parquet"), 10)]);
            assert_eq!(not_named(&listing, &flights), vec![u2], "limit {limit}");
            // Named by a file past the listing window (the window holds u1).
            let mut past = listing.clone();
            past.beyond_window = BeyondWindow { files: 1, bytes: 10, flights: set(&[u2]) };
            assert!(not_named(&past, &flights).is_empty(), "limit {limit}");
            // Files past the window of flights before, between and after
            // the listed ones: each flight still named or not by its own.
            let last = Uuid::from_u128(u128::MAX);
            let (first, mid) =
                (Uuid::from_u128(0), Uuid::from_u128(u1.as_u128().min(u2.as_u128()) + 1));
            past.beyond_window.flights = set(&[first, mid, u2]);
            let more = set(&[u1, u2, last]);
            assert_eq!(not_named(&past, &more), vec![last], "limit {limit}");
            past.per_flight.clear();
            assert_eq!(not_named(&past, &more), vec![u1, last], "limit {limit}");
            // A per-flight file of no listed flight blocks nothing.
            assert!(not_named(&listing, &set(&[u1])).is_empty());
            assert!(not_named(&listing, &UuidSet::default()).is_empty());
        }
    }

    #[test]
    fn plan_table() {
        let date = d("2026-07-20");
        let pf = |u: &str| meta(&format!("{P}{u}.parquet"), 10);
        let cf = |n: &str| meta(&format!("{P}compacted-{n}.parquet"), 10);
        let mf = |n: &str| meta(&format!("{P}{n}.parquet"), 10);
        let none = HashSet::new();
        // (objects, claimed, expected input count or None for Skip)
        let cases: Vec<(Vec<ObjectMeta>, HashSet<String>, Option<usize>)> = vec![
            (vec![], none.clone(), None),
            (vec![cf("a")], none.clone(), None),
            (vec![pf(U1), pf(U2)], none.clone(), Some(2)),
            (vec![cf("a"), pf(U1)], none.clone(), Some(2)),
            (vec![cf("a"), cf("b")], none.clone(), Some(2)),
            (vec![pf(U1), pf(U2)], HashSet::from([pf(U1).key]), Some(1)),
            (vec![pf(U1)], HashSet::from([pf(U1).key]), None),
            // A legacy migration's day: one multi-row file alone is merged.
            (vec![mf("legacy-migration")], none.clone(), Some(1)),
            (vec![cf("a"), mf("export"), pf(U1)], none.clone(), Some(3)),
            (vec![cf("a"), mf("export")], HashSet::from([mf("export").key]), None),
        ];
        for (objects, claimed, expected) in cases {
            // `compacts` (a repair run's gate) says what the plan does.
            let listing = classify_partition(objects.clone());
            assert_eq!(compacts(&listing, &claimed), expected.is_some(), "{objects:?}");
            let plan = plan_day(date, listing, &claimed);
            match (&plan.action, expected) {
                (DayAction::Skip, None) => {}
                (DayAction::Compact { inputs }, Some(n)) => {
                    assert_eq!(inputs.len(), n, "{plan:?}");
                    // Multi-row inputs first (compacted, then others), per-flight last.
                    let kinds: Vec<u8> = inputs
                        .iter()
                        .map(|i| match i.source {
                            Source::Compacted => 0,
                            Source::MultiRow => 1,
                            Source::PerFlight(_) => 2,
                        })
                        .collect();
                    assert!(kinds.is_sorted(), "{plan:?}: {kinds:?}");
                }
                _ => panic!("unexpected plan {plan:?} for {objects:?}"),
            }
            assert!(!plan.reason.is_empty());
        }
        // The reason counts each kind of input (the report's `days[].reason`).
        let reason =
            |objects: Vec<ObjectMeta>| plan_day(date, classify_partition(objects), &none).reason;
        assert_eq!(
            reason(vec![cf("a"), mf("export"), pf(U1), pf(U2)]),
            "2 per-flight file(s) and 1 other multi-row index file(s) folded into 1 existing compacted file(s)"
        );
        assert_eq!(reason(vec![mf("export")]), "1 other multi-row index file(s)");
        assert_eq!(reason(vec![pf(U1)]), "1 per-flight file(s)");
        assert_eq!(reason(vec![cf("a"), cf("b")]), "2 compacted files to merge into one");
        assert_eq!(reason(vec![cf("a")]), "already one compacted file and nothing else");
        assert_eq!(reason(vec![]), "no index files");
    }

    #[test]
    fn a_walk_begins_at_the_first_date_with_data_or_a_blocked_manifest() {
        let (start, cutoff) = (d("2026-01-01"), d("2026-07-20"));
        let first = |earliest, blocked| first_date_with_data(start, cutoff, earliest, blocked);
        assert_eq!(first(Some(d("2026-07-18")), None), d("2026-07-18"));
        // A blocked manifest's date before the first partition comes first.
        assert_eq!(first(Some(d("2026-07-18")), Some(d("2026-03-01"))), d("2026-03-01"));
        assert_eq!(first(None, Some(d("2026-03-01"))), d("2026-03-01"));
        // Nothing up to the cutoff: the cutoff, so the watermark reaches it.
        assert_eq!(first(None, None), cutoff);
        assert_eq!(first(Some(d("2026-08-01")), None), cutoff);
        // Never before `start`.
        assert_eq!(first(Some(d("2025-12-01")), None), start);
    }

    #[test]
    fn the_lag_counts_dates_up_to_the_cutoff_not_yet_compacted() {
        let cutoff = d("2026-07-20");
        // From the day after the watermark through the cutoff.
        assert_eq!(watermark_lag_days(Some(d("2026-07-17")), None, cutoff), 3);
        assert_eq!(watermark_lag_days(Some(d("2026-07-20")), None, cutoff), 0);
        // Without one, from the first date a walk would take, counted.
        assert_eq!(watermark_lag_days(None, Some(d("2026-07-18")), cutoff), 3);
        assert_eq!(watermark_lag_days(None, Some(d("2026-07-20")), cutoff), 1);
        assert_eq!(watermark_lag_days(None, Some(d("2026-07-21")), cutoff), 0);
        // Never negative; nothing to start from is no lag.
        assert_eq!(watermark_lag_days(Some(d("2026-07-22")), None, cutoff), 0);
        assert_eq!(watermark_lag_days(None, None, cutoff), 0);
        // A watermark past today's cutoff: by how many days, else none.
        assert_eq!(watermark_ahead_days(Some(d("2026-07-23")), cutoff), Some(3));
        assert_eq!(watermark_ahead_days(Some(d("2026-07-20")), cutoff), None);
        assert_eq!(watermark_ahead_days(Some(d("2026-07-19")), cutoff), None);
        assert_eq!(watermark_ahead_days(None, cutoff), None);
    }

    /// A date's inputs in parts, each committed on its own.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct Parts {
        /// In commit order, each in the plan's order ([`PartQueue`]).
        parts: Vec<Vec<PlannedInput>>,
        /// Compacted files not folded ([`DatePlan::left`]).
        left_as_they_are: usize,
    }

    fn sizing(part_weight: u64) -> PartSizing {
        PartSizing { part_weight, files: 100, flights: 100, in_memory: 1_000 }
    }

    /// [`cut`] at one `part_weight` ([`input_weight`]).
    fn parts(inputs: Vec<PlannedInput>, groups: Groups, part_weight: u64) -> Parts {
        let mut left = Vec::new();
        let parts = cut(inputs, groups, &sizing(part_weight), part_weight, &mut left);
        assert!(left.iter().all(|l| l.why == LEFT_COMPACTED));
        let parts = parts.into_iter().map(|p| p.inputs).collect();
        Parts { parts, left_as_they_are: left.len() }
    }

    /// `inputs` in parts of `weight`, sharing no flight.
    fn split(inputs: Vec<PlannedInput>, weight: u64) -> Parts {
        let n = inputs.len();
        parts(inputs, Groups::new(n), weight)
    }

    /// `inputs` in parts of `weight`, the multi-row ones holding the
    /// flights `flights_of` gives by key (the pairs in memory, as a small
    /// date's are, and on disk, one pair a run).
    fn split_sharing(
        inputs: Vec<PlannedInput>,
        flights_of: &[(&str, Vec<Uuid>)],
        weight: u64,
    ) -> Parts {
        let mut pairs = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            let held = match input.flight() {
                Some(u) => vec![u],
                None => (flights_of.iter())
                    .find(|(k, _)| *k == input.meta.key)
                    .map(|(_, f)| f.clone())
                    .unwrap_or_default(),
            };
            pairs.extend(held.into_iter().map(|u| (u, i as u32)));
        }
        let n = inputs.len();
        let in_memory = crate::data::spill::SortedSet::from(pairs.clone());
        let mut b = crate::data::spill::SortedSetBuilder::new(SpillSettings { limit: 1 });
        pairs.iter().for_each(|p| b.push(*p).unwrap());
        let on_disk = b.finish().unwrap();
        assert!(on_disk.spilled() || pairs.len() < 2);
        let groups = Groups::of_holders(n, in_memory.iter()).unwrap();
        assert_eq!(groups, Groups::of_holders(n, on_disk.iter()).unwrap());
        parts(inputs, groups, weight)
    }

    fn input(source: Source, size: u64) -> PlannedInput {
        PlannedInput { meta: meta(&format!("{P}{:?}-{size}", source), size), source }
    }

    fn shape(p: &Parts) -> Vec<Vec<u64>> {
        (p.parts.iter()).map(|part| part.iter().map(input_weight).collect()).collect()
    }

    #[test]
    fn a_day_that_fits_one_part_is_one_part_with_its_compacted_files() {
        let c = input(Source::Compacted, 400);
        let f = input(Source::PerFlight(Uuid::from_u128(1)), 3_000);
        assert_eq!((input_weight(&c), input_weight(&f)), (5, 1));
        let p = split(vec![c.clone(), c.clone(), f.clone()], 11);
        assert_eq!((shape(&p), p.left_as_they_are), (vec![vec![5, 5, 1]], 0));
        // Exactly the bound still fits; one over does not.
        let p = split(vec![c.clone(), c.clone(), f.clone()], 10);
        assert_eq!((shape(&p), p.left_as_they_are), (vec![vec![5, 5], vec![1]], 0));
    }

    #[test]
    fn compacted_files_that_do_not_fit_the_first_part_are_left_as_they_are() {
        let c = input(Source::Compacted, 400);
        let f = |i| input(Source::PerFlight(Uuid::from_u128(i)), 3_000);
        let inputs = vec![c.clone(), c.clone(), c.clone(), f(1), f(2), f(3), f(4)];
        let p = split(inputs, 12);
        assert_eq!(p.left_as_they_are, 1);
        assert_eq!(shape(&p), vec![vec![5, 5, 1, 1], vec![1, 1]]);
        // A compacted file alone would be merged with nothing: dropped.
        let p = split(vec![c.clone(), f(1), f(2)], 6);
        assert_eq!((shape(&p), p.left_as_they_are), (vec![vec![5, 1], vec![1]], 0));
        let p = split(vec![c.clone(), input(Source::MultiRow, 400)], 6);
        assert_eq!((shape(&p), p.left_as_they_are), (vec![vec![5]], 1));
        assert_eq!(p.parts[0][0].source, Source::MultiRow);
    }

    /// A date's plan: its parts' weights and estimates, what is left, and a part cut smaller for
    /// the time left, compacted files left as they are included.
    #[test]
    fn a_plan_counts_its_parts_and_what_is_left_and_a_cut_keeps_the_rules() {
        let c = input(Source::Compacted, 400);
        let f = |i| input(Source::PerFlight(Uuid::from_u128(i)), 3_000);
        let inputs = vec![c.clone(), f(1), f(2), f(3), f(4), f(5)];
        let day = |inputs| DayPlan {
            date: d("2026-07-20"),
            action: DayAction::Compact { inputs },
            reason: "r".into(),
            claimed: 0,
        };
        // The compacted file does not fit the first part: left as it is, with why.
        let mut plan = plan_date(day(inputs.clone()), Groups::new(6), &sizing(4));
        assert_eq!((plan.reason.as_str(), plan.claimed), ("r", 0), "the day plan's, kept");
        let weights: Vec<u64> = plan.parts.iter().map(|p| p.weight).collect();
        assert_eq!((weights, plan.files()), (vec![4, 1], 5));
        assert_eq!(plan.left, vec![LeftInput { key: c.meta.key.clone(), why: LEFT_COMPACTED }]);
        assert_eq!(plan.parts[0].estimate_mb, sizing(4).estimate_mb(4));
        assert!(
            plan.to_string().contains("part 2: 1 file(s), 2.93 KiB, an estimated peak of"),
            "{plan}"
        );
        assert!(plan.to_string().ends_with(&format!("; 1 left as they are ({LEFT_COMPACTED})")));
        // Cut for the time left: the first part in two, the second as it was.
        assert_eq!(plan.cut_part(0, 3, &sizing(4), "no time"), 2);
        assert_eq!(plan.parts[1].cut.as_deref(), Some("no time"));
        assert_eq!(plan.parts[2].cut, None);
        let weights: Vec<u64> = plan.parts.iter().map(|p| p.weight).collect();
        assert_eq!((weights, plan.files()), (vec![3, 1, 1], 5));
        // A first part that would be the compacted file alone is dropped, its weight with it.
        let plan = plan_date(day(vec![c, f(1), f(2), f(3)]), Groups::new(4), &sizing(5));
        assert_eq!((plan.parts.len(), plan.left.len(), plan.files()), (1, 1, 3));
        // As the log says it: each part's size and its estimated peak, labelled.
        let said = plan.to_string();
        assert!(said.starts_with("3 file(s) in 1 part(s)"), "{said}");
        assert!(said.contains("; part 1: 3 file(s), ") && said.contains("an estimated peak of"));
        // A skipped date has no part.
        let skip = DayPlan { action: DayAction::Skip, ..day(vec![]) };
        assert!(plan_date(skip, Groups::new(0), &sizing(5)).parts.is_empty());
    }

    /// A part's report names its inputs by their first and last key in byte order and the
    /// SHA-256 of its keys sorted and joined by newlines (`printf 'index/a\nindex/b' | sha256sum`).
    #[test]
    fn a_parts_report_names_its_inputs_by_their_ends_and_their_digest() {
        let f = |key: &str, size| PlannedInput { meta: meta(key, size), source: Source::MultiRow };
        let inputs = vec![f("index/b", 2), f("index/a", 3)];
        let part = PlannedPart { inputs, weight: 2, estimate_mb: 7, cut: None, groups: vec![0, 1] };
        let r = part.report(2);
        assert_eq!((r.pass, r.files, r.bytes, r.estimate_mb, r.committed), (2, 2, 5, 7, false));
        assert_eq!((r.first_key.as_str(), r.last_key.as_str()), ("index/a", "index/b"));
        let digest = "6c292c6217149b22d59a5a6a6c63a8fde7647eeb09d3757055985b8d2ade872c";
        assert_eq!(r.keys_sha256, digest);
    }

    #[test]
    fn inputs_fill_parts_of_at_most_the_part_weight_in_order() {
        let inputs: Vec<_> =
            (0..10).map(|i| input(Source::PerFlight(Uuid::from_u128(i)), 3_000)).collect();
        assert_eq!(parts(inputs.clone(), Groups::new(10), 10).parts.len(), 1);
        let split = parts(inputs, Groups::new(10), 4);
        assert_eq!(split.parts.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 2]);
    }

    #[test]
    fn an_input_heavier_than_a_part_goes_alone() {
        let big = input(Source::MultiRow, 10_000);
        let f = |i| input(Source::PerFlight(Uuid::from_u128(i)), 3_000);
        let p = split(vec![big, f(1), f(2)], 10);
        assert_eq!(shape(&p), vec![vec![101], vec![1, 1]]);
        // Every input is in exactly one part, in the plan's order.
        let inputs: Vec<_> = (0..25).map(f).collect();
        let p = split(inputs.clone(), 7);
        assert_eq!(p.parts.concat(), inputs);
        assert!(p.parts.iter().all(|part| part.len() <= 7));
        assert_eq!(p.parts.len(), 4);
        // A bound of 0 is taken as 1 (never an endless split).
        assert_eq!(split(vec![f(1), f(2)], 0).parts.len(), 2);
    }

    #[test]
    fn inputs_that_share_a_flight_are_in_one_part() {
        let u = |i| Uuid::from_u128(i);
        let c1 = input(Source::Compacted, 400);
        let mut c2 = input(Source::Compacted, 400);
        c2.meta.key.push('2');
        let m = input(Source::MultiRow, 200);
        let f = |i| input(Source::PerFlight(u(i)), 3_000);
        // c1 holds flights 1 and 2; c2 holds flight 9 (no other input);
        // the multi-row file holds flight 7.
        let flights_of = [
            (c1.meta.key.as_str(), vec![u(1), u(2)]),
            (c2.meta.key.as_str(), vec![u(9)]),
            (m.meta.key.as_str(), vec![u(7)]),
        ];
        let inputs: Vec<_> =
            [c1.clone(), c2.clone(), m.clone()].into_iter().chain((1..=8).map(f)).collect();
        let p = split_sharing(inputs, &flights_of, 7);
        // c1 with the per-flight files of flights 1 and 2 (their newer
        // rows win in one merge), the multi-row file with flight 7's; c2
        // shares nothing and does not fit: left as it is.
        assert_eq!(p.left_as_they_are, 1);
        let part_of =
            |key: &str| p.parts.iter().position(|part| part.iter().any(|i| i.meta.key == key));
        assert_eq!(part_of(&c1.meta.key), part_of(&f(1).meta.key));
        assert_eq!(part_of(&c1.meta.key), part_of(&f(2).meta.key));
        assert_eq!(part_of(&m.meta.key), part_of(&f(7).meta.key));
        assert_eq!(part_of(&c2.meta.key), None);
        assert_eq!(p.parts.iter().map(Vec::len).sum::<usize>(), 10);
        for part in &p.parts {
            let kinds: Vec<u8> = (part.iter())
                .map(|i| match i.source {
                    Source::Compacted => 0,
                    Source::MultiRow => 1,
                    Source::PerFlight(_) => 2,
                })
                .collect();
            assert!(kinds.is_sorted(), "{kinds:?}");
        }
        // Two multi-row inputs sharing a flight (20) go together, wherever
        // they are in the plan; apart without the pair.
        let mut m2 = m.clone();
        m2.meta.key.push('b');
        let both = [(m.meta.key.as_str(), vec![u(20)]), (m2.meta.key.as_str(), vec![u(20), u(21)])];
        let inputs: Vec<_> =
            [m.clone()].into_iter().chain((1..=6).map(f)).chain([m2.clone()]).collect();
        let together =
            |p: &Parts| p.parts.iter().any(|part| part.contains(&m) && part.contains(&m2));
        assert!(together(&split_sharing(inputs.clone(), &both, 7)));
        assert!(!together(&split(inputs, 7)));
        // Without the flights read, the same inputs would be split apart.
        let p = split([c1.clone()].into_iter().chain((1..=8).map(f)).collect(), 6);
        assert_ne!(
            p.parts.iter().position(|part| part.contains(&c1)),
            p.parts.iter().position(|part| part.contains(&f(2)))
        );
    }

    /// splitmix64: small and seedable, so a failing listing replays from its seed.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) % n.max(1)
        }
    }

    /// The flights each input key holds a row of.
    type Held = Vec<(String, Vec<Uuid>)>;

    /// A generated date: per-flight files, compacted and other multi-row files each holding rows of
    /// some of 40 flights, some keys claimed; with the flights each key holds.
    fn generated(rng: &mut Rng) -> (Vec<ObjectMeta>, HashSet<String>, Held) {
        let flight =
            |i: u64| Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + i as u128);
        let (mut objects, mut held) = (Vec::new(), Vec::new());
        for i in 0..40 {
            if rng.below(3) > 0 {
                let m = meta(&format!("{P}{}.parquet", flight(i)), 1 + rng.below(5_000));
                held.push((m.key.clone(), vec![flight(i)]));
                objects.push(m);
            }
        }
        for (kind, n) in [("compacted-", rng.below(5)), ("export-", rng.below(3))] {
            for j in 0..n {
                let m = meta(&format!("{P}{kind}{j}.parquet"), 1 + rng.below(2_500));
                let rows = rng.below(4);
                held.push((m.key.clone(), (0..rows).map(|_| flight(rng.below(60))).collect()));
                objects.push(m);
            }
        }
        let claimed =
            (objects.iter().filter(|_| rng.below(12) == 0)).map(|m| m.key.clone()).collect();
        (objects, claimed, held)
    }

    /// Where each input of `plan` is: its part, or `None` when left as it is.
    fn places(plan: &DatePlan) -> std::collections::HashMap<String, Option<usize>> {
        let mut at = std::collections::HashMap::new();
        for (n, part) in plan.parts.iter().enumerate() {
            for i in &part.inputs {
                assert!(at.insert(i.meta.key.clone(), Some(n)).is_none(), "{} twice", i.meta.key);
            }
        }
        for l in &plan.left {
            assert!(at.insert(l.key.clone(), None).is_none(), "{} twice", l.key);
        }
        at
    }

    /// Over generated listings: every input in exactly one part or left with a reason; the inputs
    /// holding a row of one flight in one part; parts within their weight unless one group is
    /// heavier; the same plan for the same listing; and the same after a part is cut smaller.
    #[test]
    fn the_planner_keeps_its_rules_over_generated_listings() {
        for seed in 0..400 {
            let mut rng = Rng(seed);
            let (objects, claimed, held) = generated(&mut rng);
            let part_weight = 1 + rng.below(40);
            let day = plan_day(d("2026-07-20"), classify_partition(objects.clone()), &claimed);
            let inputs = match &day.action {
                DayAction::Compact { inputs } => inputs.clone(),
                DayAction::Skip => Vec::new(),
            };
            let mut pairs: Vec<(Uuid, u32)> = Vec::new();
            for (i, input) in inputs.iter().enumerate() {
                let flights = &held.iter().find(|(k, _)| *k == input.meta.key).expect("held").1;
                pairs.extend(flights.iter().map(|u| (*u, i as u32)));
            }
            pairs.sort_unstable();
            let groups = || Groups::of_holders(inputs.len(), pairs.iter().map(|p| Ok::<_, ()>(*p)));
            let mut plan = plan_date(day.clone(), groups().unwrap(), &sizing(part_weight));
            assert_eq!(plan, plan_date(day.clone(), groups().unwrap(), &sizing(part_weight)));
            let at = places(&plan);
            assert_eq!(at.len() + plan.claimed, objects.len(), "seed {seed}");
            assert_eq!(plan.claimed, objects.iter().filter(|m| claimed.contains(&m.key)).count());
            assert!(plan.left.iter().all(|l| l.why == LEFT_COMPACTED), "seed {seed}");
            let mut roots = groups().unwrap();
            for part in &plan.parts {
                assert_eq!(part.weight, part.inputs.iter().map(input_weight).sum::<u64>());
                let index = |k: &str| inputs.iter().position(|i| i.meta.key == k).unwrap();
                let one_group = (part.inputs.iter().map(|i| roots.root(index(&i.meta.key))))
                    .collect::<HashSet<_>>()
                    .len()
                    == 1;
                assert!(part.weight <= part_weight || one_group, "seed {seed}: {plan}");
            }
            let mut cut = plan.clone();
            if !cut.parts.is_empty() {
                let n = rng.below(cut.parts.len() as u64) as usize;
                cut.cut_part(n, 1 + rng.below(cut.parts[n].weight), &sizing(part_weight), "");
                assert_eq!(places(&cut).len(), at.len(), "seed {seed}: the cut lost an input");
            }
            for p in [&mut plan, &mut cut] {
                let at = places(p);
                for (u, _) in &pairs {
                    let holders: HashSet<Option<usize>> = (pairs.iter().filter(|(v, _)| v == u))
                        .map(|(_, i)| at[&inputs[*i as usize].meta.key])
                        .collect();
                    assert!(holders.len() == 1, "seed {seed}: flight {u} in {holders:?}");
                }
            }
        }
    }
}
