//! The parity gate over one date's listings (docs/ARCHITECTURE.md, "Parity gate"): every
//! [`ParityCheck`] of `run`, `status` and `audit`, worded by [`parity_reason`]; and the earliest
//! partition, where a fresh deployment starts. Read-only.
//!
//! ```
//! use archive_compaction::protocol::day::Day;
//! use archive_compaction::protocol::partition::parity_gate;
//! use archive_compaction::infra::storage::{MemoryStore, Store};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new("archive");
//! let u = "019f7d73-f820-702f-b905-8c81d0944996";
//! store.put_now(&format!("flights/2026/07/20/{u}.json.gz"), "{}".into());
//! let date = chrono::NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
//! let day = Day::list(&store, date, true, Default::default()).await.unwrap();
//! let (budget, spill) = (Default::default(), Default::default());
//! let gate = parity_gate(&store, &day.flights, &day.index, budget, spill).await.unwrap();
//! assert_eq!(gate.missing.len(), 1); // no index row for the flight
//! # });
//! ```

use chrono::NaiveDate;
use uuid::Uuid;

use crate::data::input::{self, Budget, RowKeys};
use crate::data::keys::{
    FLIGHTS_ROOT, INDEX_ROOT, flight_uuid, flights_partition_date, index_partition_date,
};
use crate::data::merge;
use crate::data::merge::Source;
use crate::data::report::UnreadFile;
use crate::data::spill::{SortedSetBuilder, SpillSettings, UuidSet};
use crate::infra::error::Result;
use crate::infra::storage::Store;
use crate::protocol::plan::{self, DatePlan, PartitionListing, PlannedInput};
use crate::protocol::read::{self, Prefetched, ReadInputs, ReadSettings};

pub use crate::protocol::plan::Flights;

/// The first half of the gate: a flight counts as indexed when a per-flight file is named by its
/// uuid or, read only when the names do not cover every flight, a multi-row input holds a row whose
/// `s3_key` carries it. Index rows without a flight do not block. Memory is bounded by `spill`'s
/// limit and the largest input, not by the date. Errors: an S3 error reading a multi-row input (one
/// that vanished since the listing holds no rows); [`crate::infra::error::Error::Spill`].
pub async fn parity_gate(
    store: &impl Store,
    flights: &UuidSet,
    listing: &PartitionListing,
    budget: Budget,
    spill: SpillSettings,
) -> Result<ParityCheck> {
    let missing = listing.flights_not_named(flights, spill)?;
    let mut gate = ParityCheck { missing, ..ParityCheck::default() };
    if gate.missing.is_empty() {
        return Ok(gate);
    }
    let mut found = crate::data::spill::UuidSetBuilder::new(spill);
    for (c, _) in listing.multi_row_inputs() {
        let Some(read) = flights_in(store, c, budget, &mut gate.prefetched).await? else {
            continue;
        };
        gate.compacted_files_read += 1;
        match read {
            Ok(rows) => rows.into_iter().try_for_each(|u| found.push(u))?,
            Err(u) => gate.unreadable.push((c.key.clone(), u)),
        }
    }
    gate.missing = gate.missing.difference(found.finish()?.iter(), spill)?;
    Ok(gate)
}

/// The flights one multi-row input holds rows of (the body kept in `prefetched` when read whole).
/// `None` when it vanished since the listing; `Some(Err)` when it cannot be decoded.
/// Errors: an S3 error reading it.
async fn flights_in(
    store: &impl Store,
    c: &crate::infra::storage::ObjectMeta,
    budget: Budget,
    prefetched: &mut Prefetched,
) -> Result<Option<std::result::Result<Vec<Uuid>, merge::Unmergeable>>> {
    let mut found = Vec::new();
    let read = match input::read_columns(store, c, None, budget, None, &["s3_key"], |b| {
        let keys = RowKeys::of(&b)?;
        found.extend((0..keys.rows()).filter_map(|r| keys.s3_key(r).and_then(flight_uuid)));
        Ok(())
    })
    .await
    {
        Err(e) if e.is_not_found() => return Ok(None),
        r => r?,
    };
    if let Some(f) = read.whole {
        prefetched.insert(c.key.clone(), f);
    }
    Ok(Some(read.outcome.map(|()| found)))
}

/// A date's [`DatePlan`] ([`plan::plan_date`]): when its inputs may be more than one part (a part
/// may be cut as small as [`crate::protocol::sizing::MIN_PART_FILES`] by the time left), the
/// multi-row inputs' flights are read first (bodies in `prefetched` reused, whole ones kept) so
/// inputs sharing a flight stay together. Errors: as [`parity_gate`].
pub async fn plan_date(
    store: &impl Store,
    day: plan::DayPlan,
    sizing: &plan::PartSizing,
    settings: ReadSettings,
    prefetched: &mut Prefetched,
) -> Result<DatePlan> {
    let inputs = match &day.action {
        plan::DayAction::Compact { inputs } => inputs.as_slice(),
        plan::DayAction::Skip => &[],
    };
    let total: u64 = inputs.iter().map(plan::input_weight).sum();
    let may_split = sizing.part_weight.min(crate::protocol::sizing::MIN_PART_FILES);
    let groups = match total > may_split {
        true => shared_flights(store, inputs, settings, prefetched).await?,
        false => plan::Groups::new(inputs.len()),
    };
    Ok(plan::plan_date(day, groups, sizing))
}

/// An input that vanished or cannot be decoded shares no flight (the merge skips it too).
/// Errors: as [`plan_date`].
async fn shared_flights(
    store: &impl Store,
    inputs: &[PlannedInput],
    settings: ReadSettings,
    prefetched: &mut Prefetched,
) -> Result<plan::Groups> {
    let mut holders = SortedSetBuilder::<(Uuid, u32)>::new(settings.spill);
    for (i, input) in inputs.iter().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        if let Some(u) = input.flight() {
            holders.push((u, i))?;
            continue;
        }
        let found = flights_in(store, &input.meta, settings.budget, prefetched).await?;
        for u in found.and_then(Result::ok).unwrap_or_default() {
            holders.push((u, i))?;
        }
    }
    plan::Groups::of_holders(inputs.len(), holders.finish()?.iter())
}

/// The parity verdict on one date: [`parity_gate`]'s, or [`parity_check`]'s.
#[derive(Debug, Default)]
pub struct ParityCheck {
    /// Flights under `flights/` with no index row, in uuid order.
    pub missing: UuidSet,
    /// When `missing` is empty: [`without_own_row`].
    pub without_own_row: Vec<Uuid>,
    /// When `missing` is empty: [`unread_rows`].
    pub unread: Vec<UnreadFile>,
    /// Multi-row inputs the gate read.
    pub compacted_files_read: u64,
    /// Multi-row inputs the gate could not decode (their rows count as absent).
    pub unreadable: Vec<(String, merge::Unmergeable)>,
    /// The bodies the gate read, by key, for the merge to reuse; empty once the inputs were read.
    pub prefetched: Prefetched,
}

/// Why a date fails parity: what `status` names (`mismatch.cause` of `specs/status.schema.json`
/// says each) and [`parity_reason`] words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum ParityCause {
    NoIndexRow,
    PerFlightFileWithoutOwnRow,
    UnreadablePerFlightFile,
}

impl ParityCheck {
    /// The first cause the date fails parity for (`None`: it passes).
    pub fn cause(&self) -> Option<ParityCause> {
        if !self.missing.is_empty() {
            Some(ParityCause::NoIndexRow)
        } else if !self.unread.is_empty() {
            Some(ParityCause::UnreadablePerFlightFile)
        } else if !self.without_own_row.is_empty() {
            Some(ParityCause::PerFlightFileWithoutOwnRow)
        } else {
            None
        }
    }

    /// `missing`, else the flights of `without_own_row` and `unread`.
    pub fn failing(&self) -> UuidSet {
        if !self.missing.is_empty() {
            return self.missing.clone();
        }
        (self.without_own_row.iter().copied()).chain(self.unread.iter().map(|f| f.flight)).collect()
    }

    /// Why the date fails parity ([`parity_reason`]); `None`: it passes.
    pub fn reason(&self) -> Option<String> {
        parity_reason(self.missing.len(), self.without_own_row.len() as u64, &self.unread)
    }

    /// The verdict when every index file's `s3_key` was read (`audit`): a flight is indexed when a
    /// row carries it (`holding`, in order). Errors: [`crate::infra::error::Error::Spill`].
    pub fn of_rows(
        flights: &UuidSet,
        holding: impl Iterator<Item = Result<Uuid>>,
        spill: SpillSettings,
    ) -> Result<ParityCheck> {
        Ok(ParityCheck { missing: flights.difference(holding, spill)?, ..ParityCheck::default() })
    }

    /// The second half's verdict over parts read ([`without_own_row`], [`unread_rows`]), each once.
    pub fn of_parts(mut without_own_row: Vec<Uuid>, mut unread: Vec<UnreadFile>) -> ParityCheck {
        without_own_row.sort_unstable();
        without_own_row.dedup();
        unread.sort_by(|a, b| (a.flight, &a.key).cmp(&(b.flight, &b.key)));
        unread.dedup_by(|a, b| a.key == b.key);
        ParityCheck { without_own_row, unread, ..ParityCheck::default() }
    }
}

/// Why a date fails parity, the one wording of the run's `days[].reason`, `status` and `audit`:
/// `missing` flights, else `without_own_row` flights and `unread` files ([`ParityCheck`]).
pub fn parity_reason(missing: u64, without_own_row: u64, unread: &[UnreadFile]) -> Option<String> {
    if missing > 0 {
        return Some(format!("{missing} flight(s) without an index row"));
    }
    let mut parts = Vec::new();
    if without_own_row > 0 {
        parts.push(format!(
            "{without_own_row} flight(s) whose per-flight file holds no row of theirs (empty, another flight's row, or a null or empty s3_key)"
        ));
    }
    if let Some(first) = unread.first() {
        parts.push(format!(
            "{} flight(s) whose per-flight file cannot be read, so their index row is in no readable file (first: {}: {}); left in place, the date stays unpassed until the file is rewritten readable (docs/runbook.md#an-unreadable-per-flight-index-file)",
            unread.len(),
            first.key,
            first.reason
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Both halves: [`parity_gate`], then, when it passes, `plan`'s parts read as the commit reads
/// them ([`without_own_row`], [`unread_rows`]), so what `status` predicts is what the next run does.
/// Errors: an S3 error reading an input; [`crate::infra::error::Error::Encode`] from the merge.
pub async fn parity_check(
    store: &impl Store,
    date: NaiveDate,
    flights: &UuidSet,
    listing: &PartitionListing,
    plan: Option<&DatePlan>,
    settings: ReadSettings,
) -> Result<ParityCheck> {
    let mut check = parity_gate(store, flights, listing, settings.budget, settings.spill).await?;
    let Some(plan) = plan.filter(|_| check.missing.is_empty()) else {
        return Ok(check);
    };
    let prefetched = std::mem::take(&mut check.prefetched);
    let (mut lost, mut unread) = (Vec::new(), Vec::new());
    for part in &plan.parts {
        let read = read::read_inputs(store, date, &part.inputs, settings, &prefetched).await?;
        lost.extend(without_own_row(&read, flights)?);
        unread.extend(unread_rows(&read, flights)?);
    }
    let ParityCheck { without_own_row, unread, .. } = ParityCheck::of_parts(lost, unread);
    Ok(ParityCheck { without_own_row, unread, ..check })
}

/// Whether what was read leaves nothing to merge (then nothing is written and no row can be lost):
/// at most one compacted file and nothing else, or one over an input limit
/// ([`ReadInputs::held_back`]).
pub fn nothing_to_merge(read: &ReadInputs) -> bool {
    if read.held_back.is_some() {
        return true;
    }
    let compacted = read.merge_inputs.iter().filter(|s| **s == Source::Compacted).count();
    compacted == read.merge_inputs.len() && compacted < 2
}

/// Flights of `flights` whose per-flight file, read, holds no row of theirs, unsorted: the gate
/// counted them by name, but a merge would leave them without an index row. When
/// [`nothing_to_merge`], only the [`ReadInputs::keyless_flights`]: no merge ever takes such a file.
/// Errors: [`crate::infra::error::Error::Spill`] reading `flights` back.
pub fn without_own_row(read: &ReadInputs, flights: &UuidSet) -> Result<Vec<Uuid>> {
    let merging = !nothing_to_merge(read);
    let mut lost = Vec::new();
    for u in &read.without_own_row {
        if (merging || read.keyless_flights.contains(u)) && flights.contains(u)? {
            lost.push(*u);
        }
    }
    Ok(lost)
}

/// The per-flight files of `flights` that could not be read ([`ReadInputs::unread`]), unsorted:
/// their row is in no readable file, so the date is a Mismatch until the file is readable or
/// replaced. Errors: as [`without_own_row`].
pub fn unread_rows(read: &ReadInputs, flights: &UuidSet) -> Result<Vec<UnreadFile>> {
    let listed = |f: &UnreadFile| flights.contains(&f.flight).map(|l| l.then(|| f.clone()));
    read.unread.iter().filter_map(|f| listed(f).transpose()).collect()
}

/// The walk's first date when there is no watermark: `start_date` (`START_DATE`), else
/// [`earliest_partition`]; `None` with a watermark ([`plan::walk_start`]) or in an empty bucket.
/// Errors: an S3 error listing a prefix.
pub async fn first_date(
    store: &impl Store,
    watermark: Option<NaiveDate>,
    start_date: Option<NaiveDate>,
) -> Result<Option<NaiveDate>> {
    match (watermark, start_date) {
        (Some(_), _) => Ok(None),
        (None, Some(s)) => Ok(Some(s)),
        (None, None) => earliest_partition(store).await,
    }
}

/// The earlier of the first `index/year=/month=/day=/` and the first `flights/YYYY/MM/DD/` prefix:
/// `flights/` counts so that flights before the first index partition are walked and reported as a
/// Mismatch, not never looked at. Errors: an S3 error listing a prefix.
pub async fn earliest_partition(store: &impl Store) -> Result<Option<NaiveDate>> {
    let index = earliest_under(store, INDEX_ROOT, "year=", index_partition_date).await?;
    let flights = earliest_under(store, FLIGHTS_ROOT, "", flights_partition_date).await?;
    Ok(index.into_iter().chain(flights).min())
}

async fn earliest_under(
    store: &impl Store,
    root: &str,
    year_tag: &str,
    date_of: fn(&str) -> Option<NaiveDate>,
) -> Result<Option<NaiveDate>> {
    let mut years = store.list_prefixes(root).await?;
    years.sort();
    for y in years.iter().filter(|p| p[root.len()..].starts_with(year_tag)) {
        let mut months = store.list_prefixes(y).await?;
        months.sort();
        for m in &months {
            let first = store.list_prefixes(m).await?.iter().filter_map(|d| date_of(d)).min();
            if first.is_some() {
                return Ok(first);
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    /// One owner of the verdict's wording: flights without a row first,
    /// else the per-flight files' two faults together; the failing flights
    /// are the missing ones, else those files' flights.
    #[test]
    fn a_parity_check_names_its_first_cause_its_failing_flights_and_its_reason() {
        let unread = |n| UnreadFile { key: format!("k{n}"), flight: u(n), reason: "bad".into() };
        let passes = ParityCheck::default();
        assert_eq!((passes.cause(), passes.reason(), passes.failing().len()), (None, None, 0));

        let own_row = ParityCheck { without_own_row: vec![u(1)], ..ParityCheck::default() };
        assert_eq!(own_row.cause(), Some(ParityCause::PerFlightFileWithoutOwnRow));
        assert_eq!(own_row.failing().first(9).unwrap(), [u(1)]);
        let why = own_row.reason().unwrap();
        assert!(why.starts_with("1 flight(s) whose per-flight file holds no row"), "{why}");

        let both = ParityCheck {
            without_own_row: vec![u(1)],
            unread: vec![unread(2), unread(3)],
            ..ParityCheck::default()
        };
        assert_eq!(both.cause(), Some(ParityCause::UnreadablePerFlightFile));
        assert_eq!(both.failing().first(9).unwrap(), [u(1), u(2), u(3)]);
        let why = both.reason().unwrap();
        assert!(why.contains("holds no row of theirs"), "{why}");
        assert!(why.contains("; 2 flight(s) whose per-flight file cannot be read"), "{why}");
        assert!(why.contains("(first: k2: bad)"), "{why}");

        let missing = ParityCheck { missing: [u(4)].into_iter().collect(), ..both };
        assert_eq!(missing.cause(), Some(ParityCause::NoIndexRow));
        assert_eq!(missing.failing().first(9).unwrap(), [u(4)]);
        assert_eq!(missing.reason().unwrap(), "1 flight(s) without an index row");
    }

    /// A multi-row input the gate cannot decode is named in the verdict
    /// (its rows count as absent, so its flights are missing).
    #[tokio::test]
    async fn a_parity_check_names_the_multi_row_input_it_cannot_decode() {
        use crate::data::keys::{flights_prefix, index_prefix};
        use crate::infra::storage::MemoryStore;
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let flight = crate::data::merge::tests::uuid_n(1);
        store.put_now(&format!("{}{flight}.json.gz", flights_prefix(date)), "{}".into());
        let export = format!("{}export.parquet", index_prefix(date));
        store.put_now(&export, "not parquet".into());
        let day = crate::protocol::day::Day::list(&store, date, true, Default::default());
        let day = day.await.unwrap();
        let settings = ReadSettings {
            concurrency: 1,
            row_group_rows: 1000,
            budget: Budget::DEFAULT,
            spill: Default::default(),
        };
        let check = day.parity_check(&store, None, settings).await.unwrap();
        assert_eq!(check.missing.len(), 1);
        assert_eq!(check.compacted_files_read, 1);
        let unreadable: Vec<&str> = check.unreadable.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(unreadable, [export.as_str()]);
    }

    /// Status's check over a plan: the second half of the verdict comes from reading each part
    /// (a per-flight file holding no row of its flight, one that cannot be read), the first half
    /// from the listings.
    #[tokio::test]
    async fn a_parity_check_over_a_plan_names_files_without_their_own_row_and_unreadable_ones() {
        use crate::data::keys::{flights_prefix, index_prefix};
        use crate::data::merge::tests::{row, uuid_n};
        use crate::infra::storage::MemoryStore;
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let (ip, fp) = (index_prefix(date), flights_prefix(date));
        let pq = |b| bytes::Bytes::from(crate::data::merge::encode(&[b], 10).unwrap());
        for i in 1..=3 {
            store.put_now(&format!("{fp}{}.json.gz", uuid_n(i)), "{}".into());
        }
        store.put_now(&format!("{ip}{}.parquet", uuid_n(1)), pq(row(&uuid_n(1), "own row")));
        store.put_now(&format!("{ip}{}.parquet", uuid_n(2)), pq(row(&uuid_n(9), "stray")));
        store.put_now(&format!("{ip}{}.parquet", uuid_n(3)), "not parquet".into());
        let day = crate::protocol::day::Day::list(&store, date, true, Default::default());
        let day = day.await.unwrap();
        let planned = plan::plan_day(date, day.index.clone(), &Default::default());
        let sizing = plan::PartSizing { part_weight: 10, files: 3, flights: 3, in_memory: 1_000 };
        let plan = plan::plan_date(planned, plan::Groups::new(3), &sizing);
        let settings = ReadSettings {
            concurrency: 1,
            row_group_rows: 1000,
            budget: Budget::DEFAULT,
            spill: Default::default(),
        };
        let check = day.parity_check(&store, Some(&plan), settings).await.unwrap();
        assert!(check.missing.is_empty(), "{:?}", check.missing);
        assert_eq!(check.without_own_row, [uuid_n(2).parse::<Uuid>().unwrap()]);
        let unread: Vec<Uuid> = check.unread.iter().map(|f| f.flight).collect();
        assert_eq!(unread, [uuid_n(3).parse::<Uuid>().unwrap()]);
    }

    /// Inputs that weigh no more than the smallest part the run may cut
    /// are one part: no multi-row input is read to keep flights together;
    /// one more weight and it is read.
    #[tokio::test]
    async fn a_plan_reads_multi_row_inputs_only_when_the_date_may_be_split() {
        use crate::data::keys::index_prefix;
        use crate::data::merge::tests::{row, uuid_n};
        use crate::infra::storage::MemoryStore;
        let store = MemoryStore::new("b");
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let ip = index_prefix(date);
        let pq = |b| bytes::Bytes::from(crate::data::merge::encode(&[b], 10).unwrap());
        let export = format!("{ip}export.parquet");
        store.put_now(&export, pq(row(&uuid_n(1), "M")));
        store.put_now(&format!("{ip}{}.parquet", uuid_n(1)), pq(row(&uuid_n(1), "X")));
        let inputs: Vec<PlannedInput> = (store.list(&ip).await.unwrap().into_iter())
            .map(|meta| {
                let source = match meta.key == export {
                    true => Source::MultiRow,
                    false => Source::PerFlight(uuid_n(1).parse().unwrap()),
                };
                PlannedInput { meta, source }
            })
            .collect();
        let total: u64 = inputs.iter().map(plan::input_weight).sum();
        assert!(total < crate::protocol::sizing::MIN_PART_FILES, "{total}");
        let settings = ReadSettings {
            concurrency: 1,
            row_group_rows: 1000,
            budget: Budget::DEFAULT,
            spill: Default::default(),
        };
        let mut prefetched = Prefetched::new();
        async fn parts_of(
            store: &MemoryStore,
            inputs: Vec<PlannedInput>,
            (settings, part_weight): (ReadSettings, u64),
            prefetched: &mut Prefetched,
        ) -> Result<DatePlan> {
            let action = plan::DayAction::Compact { inputs };
            let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
            let day = plan::DayPlan { date, action, reason: String::new(), claimed: 0 };
            let sizing = plan::PartSizing { part_weight, files: 2, flights: 1, in_memory: 1_000 };
            plan_date(store, day, &sizing, settings, prefetched).await
        }
        parts_of(&store, inputs.clone(), (settings, total), &mut prefetched).await.unwrap();
        assert_eq!(store.requests("GetObject"), 0, "one part at most: nothing read");
        assert!(prefetched.is_empty());
        parts_of(&store, inputs, (settings, total - 1), &mut prefetched).await.unwrap();
        assert_eq!(store.requests("GetObject"), 1, "may be split: the multi-row input read");
        assert!(prefetched.contains_key(&export));
    }

    /// A flight's unreadable file counts once, and only for a listed flight.
    #[test]
    fn unread_rows_are_the_listed_flights_files_each_once() {
        let file =
            |n, key: &str| UnreadFile { key: key.into(), flight: u(n), reason: "bad".into() };
        let read = ReadInputs {
            unread: vec![file(2, "b"), file(1, "a"), file(1, "a"), file(1, "c"), file(9, "z")],
            ..ReadInputs::default()
        };
        let flights: UuidSet = [u(1), u(2)].into_iter().collect();
        let unread = ParityCheck::of_parts(vec![], unread_rows(&read, &flights).unwrap()).unread;
        let keys: Vec<String> = unread.into_iter().map(|f| f.key).collect();
        assert_eq!(keys, ["a", "c", "b"]);
    }

    /// A per-flight file without its flight's row loses that row when
    /// something is merged (two compacted files are), else only when it was
    /// keyless; a flight not listed is not counted.
    #[test]
    fn without_own_row_counts_listed_flights_a_merge_would_lose() {
        let read = |sources: Vec<Source>, keyless: Vec<Uuid>| ReadInputs {
            merge_inputs: sources,
            without_own_row: vec![u(2), u(1), u(1), u(9)],
            keyless_flights: keyless,
            ..ReadInputs::default()
        };
        let flights: UuidSet = [u(1), u(2)].into_iter().collect();
        let without_own_row = |r: &ReadInputs, f: &UuidSet| {
            without_own_row(r, f).map(|l| ParityCheck::of_parts(l, vec![]).without_own_row)
        };
        let merging = read(vec![Source::PerFlight(u(1)), Source::PerFlight(u(2))], vec![]);
        assert_eq!(without_own_row(&merging, &flights).unwrap(), [u(1), u(2)]);
        let two_compacted = read(vec![Source::Compacted, Source::Compacted], vec![]);
        assert_eq!(without_own_row(&two_compacted, &flights).unwrap(), [u(1), u(2)]);
        let nothing = read(vec![Source::Compacted], vec![u(2)]);
        assert_eq!(without_own_row(&nothing, &flights).unwrap(), [u(2)], "keyless only");
    }
}
