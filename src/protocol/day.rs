//! One date as every command sees it ([`Day`], the one listing every command takes), which dates
//! are blocked, and the dates of a range. Read-only.
//!
//! ```
//! use archive_compaction::protocol::day::Day;
//! use archive_compaction::infra::storage::MemoryStore;
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new("archive");
//! let u = "019f7d73-f820-702f-b905-8c81d0944996";
//! let key = format!("flights/2026/07/20/{u}.json.gz");
//! store.put_now(&key, "{}".into());
//! let date = chrono::NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
//! let day = Day::list(&store, date, true, Default::default()).await.unwrap();
//! assert!(day.flights.contains(&u.parse().unwrap()).unwrap());
//! assert_eq!((day.counts().flights, day.counts().per_flight_files), (1, 0));
//! # });
//! ```

use std::collections::{BTreeMap, BTreeSet};

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::data::input::{self, Budget, RowKeys};
use crate::data::keys::{
    IndexKey, MANIFESTS_ROOT, QUARANTINE_ROOT, STUCK_ROOT, flight_uuid, flights_prefix,
    index_prefix, manifest_date, stuck_manifest_key,
};
use crate::data::merge::OtherDays;
use crate::data::spill::{SpillSettings, UuidSet, UuidSetBuilder};
use crate::infra::error::{Error, Result};
use crate::infra::storage::ranges::list_partition;
use crate::infra::storage::{ObjectMeta, Store};
use crate::protocol::manifest::quarantined_date;
use crate::protocol::partition::{self, ParityCheck};
use crate::protocol::plan::{self, PartitionListing};
use crate::protocol::read::ReadSettings;

pub use crate::protocol::partition::Flights;

/// [`Day::list_window`]'s window as pages arrive: the per-flight files of the `limit` smallest
/// keys, in a max-heap by key; of the others, a count, their bytes and, when wanted, their flights
/// in a set that spills.
#[derive(Default)]
struct Window {
    limit: usize,
    held: std::collections::BinaryHeap<ByKey>,
    files: usize,
    bytes: u64,
    past: Option<UuidSetBuilder>,
}

/// A per-flight file ordered by its key (unique, so first): key, ETag, size, LastModified, uuid.
type ByKey = (String, String, u64, chrono::DateTime<chrono::Utc>, uuid::Uuid);

impl Window {
    /// Takes flight `u`'s file `o` into the window while it has room or when its key is before the
    /// window's last (which then leaves it). Errors: [`Error::Spill`].
    fn offer(&mut self, u: uuid::Uuid, o: ObjectMeta) -> Result<()> {
        let mut out = (o.key, o.etag, o.size, o.last_modified, u);
        if self.held.len() < self.limit {
            self.held.push(out);
            return Ok(());
        }
        if let Some(mut last) = self.held.peek_mut()
            && out < *last
        {
            std::mem::swap(&mut *last, &mut out);
        }
        let (_, _, size, _, u) = out;
        (self.files, self.bytes) = (self.files + 1, self.bytes + size);
        self.past.as_mut().map_or(Ok(()), |b| b.push(u))
    }
}

/// One date's listings.
#[derive(Debug, Clone, Default)]
pub struct Day {
    /// The date.
    pub date: NaiveDate,
    /// The uuids of the flight objects under `flights/YYYY/MM/DD/` (empty when not listed).
    pub flights: UuidSet,
    /// The index partition, sorted by kind.
    pub index: PartitionListing,
}

/// File counts of one date, as `status` and `audit` show them (their schemas in `specs/` say each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct DayCounts {
    pub flights: u64,
    pub per_flight_files: u64,
    pub compacted_files: u64,
    pub multi_row_files: u64,
    pub foreign_objects: u64,
}

impl Day {
    /// Lists `date`'s `flights/` prefix (when `with_flights`), then its index partition
    /// ([`list_partition`]): one after the other, so at most
    /// [`LIST_RANGES_IN_FLIGHT`](crate::infra::storage::ranges::LIST_RANGES_IN_FLIGHT) requests are
    /// in flight (both at once outlast the attempt timeout on a slow server). Errors: an S3 error
    /// listing either prefix; [`Error::Spill`].
    pub async fn list(
        store: &impl Store,
        date: NaiveDate,
        with_flights: bool,
        spill: SpillSettings,
    ) -> Result<Day> {
        Day::list_window(store, date, with_flights, usize::MAX, spill).await
    }

    /// [`Day::list`], holding the first `window` per-flight files in key order, the rest left to
    /// [`PartitionListing::beyond_window`] for a later pass. Errors: as [`Day::list`].
    pub async fn list_window(
        store: &impl Store,
        date: NaiveDate,
        with_flights: bool,
        window: usize,
        spill: SpillSettings,
    ) -> Result<Day> {
        let (fp, ip) = (flights_prefix(date), index_prefix(date));
        // Uuids page by page into a set that spills: the listing is not held.
        let flights = match with_flights {
            true => {
                let building = std::sync::Mutex::new(UuidSetBuilder::new(spill));
                let b = &building;
                let uuid = move |o: ObjectMeta| {
                    if let Some(u) = flight_uuid(&o.key) {
                        b.lock().unwrap_or_else(|p| p.into_inner()).push(u)?;
                    }
                    Ok(None::<()>)
                };
                list_partition(store, &fp, date, uuid).await?;
                building.into_inner().unwrap_or_else(|p| p.into_inner()).finish()?
            }
            false => UuidSet::default(),
        };
        let held = std::sync::Mutex::new(Window {
            limit: window,
            past: with_flights.then(|| UuidSetBuilder::new(spill)),
            ..Window::default()
        });
        let window = &held;
        // Anything else is kept for classify_partition.
        let keep = move |o: ObjectMeta| match plan::classify_object(&o) {
            IndexKey::PerFlight(u) => {
                window.lock().unwrap_or_else(|p| p.into_inner()).offer(u, o).map(|()| None)
            }
            _ => Ok(Some(o)),
        };
        let others = list_partition(store, &ip, date, keep).await?;
        let Window { held, files, bytes, past, .. } =
            held.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut index = plan::classify_partition(others);
        let file = |(key, etag, size, last_modified, u): ByKey| {
            (u, ObjectMeta { key, etag, size, last_modified })
        };
        index.per_flight = held.into_sorted_vec().into_iter().map(file).collect();
        index.beyond_window = plan::BeyondWindow {
            files,
            bytes,
            flights: past.map(UuidSetBuilder::finish).transpose()?.unwrap_or_default(),
        };
        Ok(Day { date, flights, index })
    }

    /// The keys of `wanted`'s flight objects, by uuid: a second listing, for the few flights a
    /// report names ([`Day::list`] keeps uuids alone). Errors: an S3 error listing the prefix.
    pub async fn flight_keys(
        store: &impl Store,
        date: NaiveDate,
        wanted: &Flights,
    ) -> Result<BTreeMap<uuid::Uuid, String>> {
        let keep = |o: ObjectMeta| {
            Ok(flight_uuid(&o.key).filter(|u| wanted.contains(u)).map(|u| (u, o.key)))
        };
        Ok(list_partition(store, &flights_prefix(date), date, keep).await?.into_iter().collect())
    }

    /// The date's file counts.
    pub fn counts(&self) -> DayCounts {
        let i = &self.index;
        DayCounts {
            flights: self.flights.len(),
            per_flight_files: (i.per_flight.len() + i.beyond_window.files) as u64,
            compacted_files: i.compacted.len() as u64,
            multi_row_files: i.multi_row.len() as u64,
            foreign_objects: i.foreign.len() as u64,
        }
    }

    /// [`partition::parity_check`] over these listings and `plan`'s parts, with its errors.
    pub async fn parity_check(
        &self,
        store: &impl Store,
        plan: Option<&plan::DatePlan>,
        settings: ReadSettings,
    ) -> Result<ParityCheck> {
        partition::parity_check(store, self.date, &self.flights, &self.index, plan, settings).await
    }

    /// The rows of the date's multi-row inputs whose `first_message` UTC date is another (the run's
    /// `rows_of_other_days`). An unreadable input counts none (the run reports it); a gone one is
    /// skipped. Errors: an S3 error reading an input.
    pub async fn other_day_rows(&self, store: &impl Store, budget: Budget) -> Result<OtherDays> {
        let date = self.date;
        let mut other = OtherDays::default();
        for (m, _) in self.index.multi_row_inputs() {
            let mut file = OtherDays::default();
            let names = ["s3_key", "first_message"];
            let read = input::read_columns(store, m, None, budget, None, &names, |b| {
                let keys = RowKeys::of(&b)?;
                for row in 0..keys.rows() {
                    let flight = keys.s3_key(row).and_then(flight_uuid);
                    file.count_row(keys.first_message(row), flight, date);
                }
                Ok(())
            })
            .await;
            match read {
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
                Ok(r) if r.outcome.is_ok() => other.add(file),
                Ok(_) => {}
            }
        }
        Ok(other)
    }
}

/// Why a date is blocked, in the order a command names them when a date has several (the first its
/// policy takes), so every command names the same one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, strum::Display)]
pub enum BlockReason {
    /// A quarantined manifest (its key): the date waits for an operator to delete it.
    #[strum(to_string = "quarantined manifest {0}")]
    Quarantined(String),
    /// A live manifest whose inputs could not be deleted (its key), marked
    /// ([`crate::data::keys::stuck_key`]) by the run that tried; the next run retries.
    #[strum(to_string = "stuck manifest {0}")]
    Stuck(String),
    /// The watermark's `mismatch_date`: the date fails the parity gate.
    #[strum(to_string = "the watermark's mismatch_date")]
    Mismatch,
    /// A live manifest (its key): a commit in flight, or one recovery resolves.
    #[strum(to_string = "live manifest {0}")]
    LiveManifest(String),
}

impl BlockReason {
    /// The run's and `status`'s policy: only a quarantined or a stuck manifest stops the walk
    /// (recovery resolves a live one first; the mismatch date stops it for parity).
    pub fn blocks_walk(&self) -> bool {
        matches!(self, BlockReason::Quarantined(_) | BlockReason::Stuck(_))
    }

    /// `prune-cache`'s policy: every reason keeps the date's local copies (a manifest may still
    /// delete or keep its index files; the mismatch date has not passed parity).
    pub fn keeps_cache(&self) -> bool {
        match self {
            BlockReason::Quarantined(_)
            | BlockReason::Stuck(_)
            | BlockReason::Mismatch
            | BlockReason::LiveManifest(_) => true,
        }
    }
}

/// The listings of `_compaction_state/`'s `manifests/`, `quarantine/` and `stuck/`: the one read
/// `status`, `prune-cache` and recovery share.
#[derive(Debug, Clone, Default)]
pub struct StateListing {
    /// Live manifests ([`MANIFESTS_ROOT`]), in key order.
    pub manifests: Vec<ObjectMeta>,
    /// Quarantined manifests ([`QUARANTINE_ROOT`]), in key order.
    pub quarantined: Vec<ObjectMeta>,
    /// Stuck marks ([`STUCK_ROOT`]), in key order; one whose manifest is not live is stale.
    pub stuck: Vec<ObjectMeta>,
}

impl StateListing {
    /// Lists the three folders side by side.
    /// Errors: the prefix whose listing failed, with the S3 error.
    pub async fn read(
        store: &impl Store,
    ) -> std::result::Result<StateListing, (&'static str, Error)> {
        let list =
            |root: &'static str| async move { (store.list(root).await).map_err(|e| (root, e)) };
        let (manifests, quarantined, stuck) =
            tokio::try_join!(list(MANIFESTS_ROOT), list(QUARANTINE_ROOT), list(STUCK_ROOT))?;
        Ok(StateListing { manifests, quarantined, stuck })
    }

    /// The live manifests a mark in [`Self::stuck`] stands for.
    pub fn stuck_manifests(&self) -> BTreeSet<&str> {
        let marked: BTreeSet<String> =
            (self.stuck.iter()).filter_map(|m| stuck_manifest_key(&m.key)).collect();
        (self.manifests.iter()).map(|m| m.key.as_str()).filter(|k| marked.contains(*k)).collect()
    }
}

/// Every blocked date with all its reasons.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Blocked {
    /// The reasons of each blocked date, in [`BlockReason`]'s order.
    pub dates: BTreeMap<NaiveDate, BTreeSet<BlockReason>>,
}

impl Blocked {
    /// The blocked dates of the watermark's `mismatch` and of `state`'s keys (one without a date
    /// blocks nothing).
    pub fn of(mismatch: Option<NaiveDate>, state: &StateListing) -> Blocked {
        let mut b = Blocked::default();
        if let Some(d) = mismatch {
            b.add(d, BlockReason::Mismatch);
        }
        let stuck = state.stuck_manifests();
        for m in &state.manifests {
            let Some(d) = manifest_date(&m.key) else { continue };
            let reason = match stuck.contains(m.key.as_str()) {
                true => BlockReason::Stuck(m.key.clone()),
                false => BlockReason::LiveManifest(m.key.clone()),
            };
            b.add(d, reason);
        }
        for q in &state.quarantined {
            if let Some(d) = quarantined_date(&q.key) {
                b.add(d, BlockReason::Quarantined(q.key.clone()));
            }
        }
        b
    }

    /// [`Blocked::of`] `mismatch` and a fresh [`StateListing::read`], with its errors.
    pub async fn read(
        store: &impl Store,
        mismatch: Option<NaiveDate>,
    ) -> std::result::Result<Blocked, (&'static str, Error)> {
        Ok(Blocked::of(mismatch, &StateListing::read(store).await?))
    }

    /// Adds `reason` to `date`'s reasons.
    pub fn add(&mut self, date: NaiveDate, reason: BlockReason) {
        self.dates.entry(date).or_default().insert(reason);
    }

    /// The dates the walk stops before, in order.
    pub fn walk_blocked_dates(&self) -> impl Iterator<Item = NaiveDate> + '_ {
        (self.dates.keys()).copied().filter(|d| self.blocking_walk(*d).is_some())
    }

    /// Why the walk stops before `date`, if it does: `status`'s `blocked_by`.
    pub fn blocking_walk(&self, date: NaiveDate) -> Option<&BlockReason> {
        self.first(date, BlockReason::blocks_walk)
    }

    /// The dates whose local copies `prune-cache` keeps, each with why.
    pub fn keeping_cache(&self) -> BTreeMap<NaiveDate, String> {
        (self.dates.keys())
            .filter_map(|d| Some((*d, self.first(*d, BlockReason::keeps_cache)?.to_string())))
            .collect()
    }

    fn first(&self, date: NaiveDate, policy: fn(&BlockReason) -> bool) -> Option<&BlockReason> {
        self.dates.get(&date)?.iter().find(|r| policy(r))
    }
}

/// The longest `from`/`to` range, in days (ten years): a typo in a year should be an error, not a
/// ten-thousand-date walk.
pub const MAX_RANGE_DAYS: i64 = 3660;

/// Which command a range is for: its name and its unit in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOf {
    /// A repair run (`run --from --to`, the event's `from`/`to`).
    Repair,
    /// `audit --from --to`.
    Audit,
}

/// A `from`/`to` range of dates, both included, checked where it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateRange {
    from: NaiveDate,
    to: NaiveDate,
}

impl DateRange {
    /// The range `from` to `to`, for `of`. Errors: [`Error::Config`] when `from` is after `to` or
    /// past [`MAX_RANGE_DAYS`].
    pub fn new(from: NaiveDate, to: NaiveDate, of: RangeOf) -> Result<DateRange> {
        let (name, per) = match of {
            RangeOf::Repair => ("from/to", "run"),
            RangeOf::Audit => ("audit from/to", "audit"),
        };
        let bad = |reason: String| Error::Config { name: name.into(), reason };
        if from > to {
            return Err(bad(format!(
                "from {from} is after to {to}; give the earlier date as from"
            )));
        }
        let days = (to - from).num_days() + 1;
        if days > MAX_RANGE_DAYS {
            return Err(bad(format!(
                "{from}..{to} is {days} days; at most {MAX_RANGE_DAYS} per {per} (split the range)"
            )));
        }
        Ok(DateRange { from, to })
    }

    /// The first date.
    pub fn from(&self) -> NaiveDate {
        self.from
    }

    /// The last date (included).
    pub fn to(&self) -> NaiveDate {
        self.to
    }

    /// Every date from `from` to `to`, in order.
    pub fn dates(&self) -> Vec<NaiveDate> {
        self.from.iter_days().take_while(|d| *d <= self.to).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    fn spill(limit: usize) -> SpillSettings {
        SpillSettings { limit }
    }

    fn meta(key: &str) -> ObjectMeta {
        ObjectMeta { key: key.to_string(), ..Default::default() }
    }

    /// One date in memory: three flights, a per-flight file of the first,
    /// a multi-row file holding the second's row (of another day: the
    /// test row's `first_message` is in 2023), nothing of the third. What
    /// `status` and `audit` read of it through [`Day`]: the gate's missing
    /// flight, the other day's row, the missing flight's key; an
    /// unreadable or vanished multi-row input counts no row and fails
    /// nothing.
    #[tokio::test]
    async fn parity_other_day_rows_and_flight_keys_of_one_date() {
        use crate::data::merge::tests::{row, uuid_n};
        use crate::infra::storage::MemoryStore;
        let date = d("2026-07-20");
        let store = MemoryStore::new("archive");
        let (u1, u2, u3) = (uuid_n(1), uuid_n(2), uuid_n(3));
        for u in [&u1, &u2, &u3] {
            store.put_now(&format!("flights/2026/07/20/{u}.json.gz"), "{}".into());
        }
        let pq = |b| bytes::Bytes::from(crate::data::merge::encode(&[b], 10).unwrap());
        let ip = index_prefix(date);
        store.put_now(&format!("{ip}{u1}.parquet"), pq(row(&u1, "A")));
        let export = format!("{ip}export.parquet");
        store.put_now(&export, pq(row(&u2, "B")));
        let config = crate::data::config::Config::from_map(
            &[("S3_BUCKET".to_string(), "archive".to_string())].into(),
        )
        .unwrap();
        let day = Day::list(&store, date, true, spill(1)).await.unwrap();
        assert_eq!(day.counts().multi_row_files, 1);
        let check = day.parity_check(&store, None, ReadSettings::of(&config)).await.unwrap();
        let u = |s: &str| s.parse::<uuid::Uuid>().unwrap();
        assert_eq!(check.missing, [u(&u3)].into());
        assert_eq!(check.compacted_files_read, 1);
        let budget = config.input_budget;
        let other = day.other_day_rows(&store, budget).await.unwrap();
        assert_eq!((other.rows, other.uuids), (1, vec![u(&u2)]));
        let keys = Day::flight_keys(&store, date, &vec![u(&u3)].into()).await.unwrap();
        assert_eq!(
            keys.into_iter().collect::<Vec<_>>(),
            [(u(&u3), format!("flights/2026/07/20/{u3}.json.gz"))]
        );
        store.put_now(&export, "not parquet".into());
        let other = day.other_day_rows(&store, budget).await.unwrap();
        assert_eq!(other.rows, 0, "an unreadable input counts no row");
        store.delete(&export, None).await.unwrap();
        let other = day.other_day_rows(&store, budget).await.unwrap();
        assert_eq!(other.rows, 0, "an input gone since the listing counts none");
    }

    /// A multi-row input S3 fails to read fails the count (it is not taken
    /// for gone); one whose read stops part way, after rows of another day
    /// were seen, counts none of them.
    #[tokio::test]
    async fn other_day_rows_fail_on_an_s3_error_and_count_nothing_of_an_input_read_part_way() {
        use crate::data::merge::tests::{row, uuid_n};
        use crate::infra::storage::MemoryStore;
        let date = d("2026-07-20");
        let store = MemoryStore::new("archive");
        let export = format!("{}export.parquet", index_prefix(date));
        // Two rows of another day, one row group each; the second's column
        // chunks overwritten, so the read fails after the first's rows.
        let batch = arrow_select::concat::concat_batches(
            &row(&uuid_n(1), "A").schema(),
            &[row(&uuid_n(1), "A"), row(&uuid_n(2), "B")],
        )
        .unwrap();
        let mut body = Vec::new();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(1))
            .build();
        let mut w =
            parquet::arrow::ArrowWriter::try_new(&mut body, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let whole = bytes::Bytes::from(body.clone());
        let meta = parquet::file::metadata::ParquetMetaDataReader::new().parse_and_finish(&whole);
        let meta = meta.unwrap();
        assert_eq!(meta.num_row_groups(), 2);
        for c in meta.row_group(1).columns() {
            let (start, len) = c.byte_range();
            body[start as usize..(start + len) as usize].fill(0xFF);
        }
        store.put_now(&export, whole);
        let day = Day::list(&store, date, false, spill(1000)).await.unwrap();
        let budget = Budget::DEFAULT;
        let other = day.other_day_rows(&store, budget).await.unwrap();
        assert_eq!(other.rows, 2, "both rows are of another day");
        store.put_now(&export, body.into());
        let other = day.other_day_rows(&store, budget).await.unwrap();
        assert_eq!(other.rows, 0, "an input read part way counts none");
        store.fail_gets(&export);
        let failed = day.other_day_rows(&store, budget).await;
        assert!(failed.is_err(), "an S3 error is not an input gone: {failed:?}");
    }

    /// A listing window holds the listing of that many per-flight files,
    /// the first keys; the rest are a count and their flights' uuids (on
    /// disk past the spill limit), still counted and in the parity gate; a
    /// compacted file, a zero-byte object and a foreign one are listed
    /// whatever the window.
    #[tokio::test]
    async fn a_listing_window_keeps_the_first_keys_and_the_flights_of_the_rest() {
        use crate::data::merge::tests::uuid_n;
        use crate::infra::storage::MemoryStore;
        let date = d("2026-07-20");
        let store = MemoryStore::new("archive");
        let (ip, fp) = (index_prefix(date), flights_prefix(date));
        let u = |i: u32| uuid_n(i).parse::<uuid::Uuid>().unwrap();
        // Flights 0 to 11; 0 to 9 have their file, 10 and 11 none.
        for i in 0..12 {
            store.put_now(&format!("{fp}{}.json.gz", uuid_n(i)), "{}".into());
        }
        for i in 0..10 {
            store.put_now(&format!("{ip}{}.parquet", uuid_n(i)), "x".into());
        }
        // A file of no listed flight, past the window: counted, named by
        // no listed flight.
        store.put_now(&format!("{ip}{}.parquet", uuid_n(50)), "x".into());
        store.put_now(&format!("{ip}compacted-a.parquet"), "x".into());
        store.put_now(&format!("{ip}{}.parquet", uuid_n(99)), "".into());
        store.put_now(&format!("{ip}notes.txt"), "x".into());
        let uuids = |set: &UuidSet| set.iter().map(Result::unwrap).collect::<Vec<_>>();
        let not_named =
            |day: &Day| uuids(&day.index.flights_not_named(&day.flights, spill(1)).unwrap());
        // In pages of 2, the ranges listed at once: the window is still the
        // first keys, in key order; with every set on disk (a limit of 1)
        // or in memory, the same.
        for (store, limit) in [(store.clone(), 1000), (store.with_list_page_size(2), 1)] {
            let day = Day::list_window(&store, date, true, 4, spill(limit)).await.unwrap();
            assert_eq!(day.flights.spilled(), limit == 1);
            let i = &day.index;
            let window: Vec<_> = i.per_flight.iter().map(|(u, _)| *u).collect();
            assert_eq!(window, (0..4).map(u).collect::<Vec<_>>());
            assert_eq!((i.beyond_window.files, i.compacted.len(), i.foreign.len()), (7, 1, 2));
            let past = (4..10).chain([50]).map(u).collect::<Vec<_>>();
            assert_eq!(uuids(&i.beyond_window.flights), past);
            assert_eq!(day.counts().per_flight_files, 11);
            assert_eq!(day.counts().flights, 12);
            // One byte a file, in the window or past it.
            assert_eq!((i.per_flight_bytes(), i.beyond_window.bytes), (11, 7));
            assert_eq!(not_named(&day), vec![u(10), u(11)]);
        }
        let whole = Day::list(&store, date, true, spill(1000)).await.unwrap();
        assert_eq!(
            (whole.index.per_flight.len(), &whole.index.beyond_window),
            (11, &plan::BeyondWindow::default())
        );
        assert_eq!(not_named(&whole), vec![u(10), u(11)]);
        // Without the flights (a later pass): counted, no uuid kept.
        let none = Day::list_window(&store, date, false, 0, spill(1)).await.unwrap();
        assert_eq!((none.index.per_flight.len(), none.index.beyond_window.files), (0, 11));
        assert!(none.index.beyond_window.flights.is_empty());
        assert!(none.flights.is_empty());
        assert_eq!(none.index.per_flight_bytes(), 11);
    }

    /// The window keeps the smallest keys whatever order they are offered
    /// in: a smaller key pushes the window's last out, its flight kept
    /// with those past the window.
    #[test]
    fn a_listing_window_keeps_the_first_keys_offered_in_any_order() {
        use crate::data::merge::tests::uuid_n;
        let u = |i: u32| uuid_n(i).parse::<uuid::Uuid>().unwrap();
        let mut w =
            Window { limit: 3, past: Some(UuidSetBuilder::new(spill(2))), ..Window::default() };
        for i in [7, 2, 9, 4, 0, 5, 1, 12] {
            w.offer(u(i), meta(&format!("index/{}.parquet", uuid_n(i)))).unwrap();
        }
        let held: Vec<_> = w.held.into_sorted_vec().into_iter().map(|b| b.4).collect();
        assert_eq!(held, [0, 1, 2].map(u));
        assert_eq!(w.files, 5);
        let past = w.past.unwrap().finish().unwrap();
        let past: Vec<_> = past.iter().map(Result::unwrap).collect();
        assert_eq!(past, [4, 5, 7, 9, 12].map(u));
    }

    #[test]
    fn a_range_is_refused_reversed_or_too_long_naming_its_command() {
        let r = DateRange::new(d("2026-07-19"), d("2026-07-21"), RangeOf::Repair).unwrap().dates();
        assert_eq!(r, [d("2026-07-19"), d("2026-07-20"), d("2026-07-21")]);
        let e = DateRange::new(d("2026-07-20"), d("2026-07-19"), RangeOf::Repair).unwrap_err();
        assert!(e.to_string().contains("from/to"), "{e}");
        assert!(e.to_string().contains("is after"), "{e}");
        let long = |of| DateRange::new(d("2000-01-01"), d("2026-01-01"), of).unwrap_err();
        assert!(long(RangeOf::Repair).to_string().contains("per run"));
        let e = long(RangeOf::Audit).to_string();
        assert!(e.contains("audit from/to") && e.contains("per audit"), "{e}");
        let last = d("2000-01-01") + chrono::Days::new(MAX_RANGE_DAYS as u64 - 1);
        assert_eq!(
            DateRange::new(d("2000-01-01"), last, RangeOf::Audit).unwrap().dates().len(),
            MAX_RANGE_DAYS as usize
        );
    }

    /// One bucket state: a live manifest on 07-17, a quarantined one on
    /// 07-18, both on 07-19, the mismatch date 07-20, a stuck manifest on
    /// 07-21 and a stale stuck mark (its manifest gone) on 07-22.
    fn blocked() -> Blocked {
        Blocked::of(
            Some(d("2026-07-20")),
            &StateListing {
                manifests: vec![
                    meta("_compaction_state/manifests/2026-07-17/a.json"),
                    meta("_compaction_state/manifests/2026-07-19/b.json"),
                    meta("_compaction_state/manifests/2026-07-21/s.json"),
                    meta("_compaction_state/manifests/not-a-date/c.json"),
                ],
                quarantined: vec![
                    meta("_compaction_state/quarantine/2026-07-18/q.json"),
                    meta("_compaction_state/quarantine/2026-07-19/r.json"),
                ],
                stuck: vec![
                    meta("_compaction_state/stuck/2026-07-21/s.json"),
                    meta("_compaction_state/stuck/2026-07-22/gone.json"),
                ],
            },
        )
    }

    /// [`Blocked::read`] lists the state itself (what `prune-cache` calls):
    /// the same dates as [`Blocked::of`] over the same objects; the walk
    /// stops before the quarantined and the stuck dates only, in order.
    #[tokio::test]
    async fn blocked_read_from_a_store_and_the_dates_the_walk_stops_before() {
        let store = crate::infra::storage::MemoryStore::new("archive");
        for m in [
            "_compaction_state/manifests/2026-07-17/a.json",
            "_compaction_state/manifests/2026-07-21/s.json",
            "_compaction_state/quarantine/2026-07-18/q.json",
            "_compaction_state/stuck/2026-07-21/s.json",
        ] {
            store.put_now(m, "{}".into());
        }
        let b = Blocked::read(&store, Some(d("2026-07-20"))).await.unwrap();
        assert_eq!(
            b.dates.keys().copied().collect::<Vec<_>>(),
            [d("2026-07-17"), d("2026-07-18"), d("2026-07-20"), d("2026-07-21")]
        );
        assert_eq!(b.walk_blocked_dates().collect::<Vec<_>>(), [d("2026-07-18"), d("2026-07-21")]);
        assert_eq!(
            blocked().walk_blocked_dates().collect::<Vec<_>>(),
            [d("2026-07-18"), d("2026-07-19"), d("2026-07-21")]
        );
    }

    #[test]
    fn a_marked_live_manifest_is_stuck_and_blocks_the_walk_a_stale_mark_blocks_nothing() {
        let b = blocked();
        let key = "_compaction_state/manifests/2026-07-21/s.json";
        assert_eq!(b.blocking_walk(d("2026-07-21")), Some(&BlockReason::Stuck(key.into())));
        assert_eq!(b.keeping_cache()[&d("2026-07-21")], format!("stuck manifest {key}"));
        assert!(!b.dates.contains_key(&d("2026-07-22")), "{b:?}");
    }

    #[test]
    fn status_and_prune_name_the_same_quarantined_manifest_for_a_date() {
        let b = blocked();
        let prune = b.keeping_cache();
        for date in ["2026-07-18", "2026-07-19"] {
            let walk = b.blocking_walk(d(date)).map(ToString::to_string);
            assert!(walk.as_deref().unwrap().starts_with("quarantined manifest "));
            assert_eq!(walk.as_ref(), prune.get(&d(date)), "{date}");
        }
        assert_eq!(
            prune[&d("2026-07-19")],
            "quarantined manifest _compaction_state/quarantine/2026-07-19/r.json"
        );
    }

    #[test]
    fn a_live_manifest_and_the_mismatch_date_keep_the_cache_but_do_not_block_the_walk() {
        let b = blocked();
        let prune = b.keeping_cache();
        assert_eq!(
            prune[&d("2026-07-17")],
            "live manifest _compaction_state/manifests/2026-07-17/a.json"
        );
        assert_eq!(prune[&d("2026-07-20")], "the watermark's mismatch_date");
        assert_eq!(prune.len(), 5, "{prune:?}");
        assert_eq!(b.blocking_walk(d("2026-07-17")), None);
        assert_eq!(b.blocking_walk(d("2026-07-20")), None);
        assert_eq!(b.blocking_walk(d("2026-07-23")), None);
        let live = BlockReason::LiveManifest("k".into());
        assert!(live.keeps_cache() && !live.blocks_walk());
        assert!(BlockReason::Mismatch.keeps_cache() && !BlockReason::Mismatch.blocks_walk());
        let q = BlockReason::Quarantined("k".into());
        assert!(q.keeps_cache() && q.blocks_walk());
    }
}
