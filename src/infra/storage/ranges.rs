//! Listing one large prefix as contiguous key ranges `(after, through]`, several at a time:
//! ListObjectsV2 pages follow one another, but `StartAfter` lets a listing begin anywhere. Where
//! the cuts fall decides only how even the ranges are, never which keys are listed:
//! [`cuts_between`] when the keys are known, [`estimated_cuts`] or [`name_cuts`] when they are not.
//!
//! ```
//! use archive_compaction::infra::storage::ranges::{cuts_between, KeyRange};
//! let keys: Vec<String> = (0..2500).map(|i| format!("p/{i:05}")).collect();
//! let ranges = KeyRange::covering(None, cuts_between(&keys, 1000));
//! assert_eq!(ranges.len(), 3); // (start, p/00999], (p/00999, p/01999], (p/01999, end)
//! assert!(ranges[0].contains("p/00999") && !ranges[1].contains("p/00999"));
//! ```

use chrono::{NaiveDate, NaiveTime};
use futures::{StreamExt, TryStreamExt, stream};
use uuid::Uuid;

use super::{ObjectMeta, Store};
use crate::infra::error::Result;

/// Key ranges one listing lists at once: far below the 5,500 GET/HEAD/LIST
/// requests a second S3 serves per prefix (S3 performance guidelines).
pub const LIST_RANGES_IN_FLIGHT: usize = 8;

/// At most this many ranges from [`estimated_cuts`]: a range's last page reads
/// past its bound (S3 has no end key), so fewer, longer ranges waste less.
pub const ESTIMATED_RANGES_MAX: usize = LIST_RANGES_IN_FLIGHT;

/// Pages an estimated range aims for: one twice as dense as estimated is still four.
pub const ESTIMATED_RANGE_KEYS_PAGES: usize = 2;

/// The keys `k` with `after < k <= through` (no bound where `None`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyRange {
    /// Exclusive lower bound (S3's `StartAfter`); `None`: from the first key.
    pub after: Option<String>,
    /// Inclusive upper bound; `None`: to the last key.
    pub through: Option<String>,
}

impl KeyRange {
    /// Whether `key` falls in this range.
    pub fn contains(&self, key: &str) -> bool {
        self.after.as_deref().is_none_or(|a| key > a)
            && self.through.as_deref().is_none_or(|t| key <= t)
    }

    /// The ranges `(after, c1], (c1, c2], …, (cn, None)`: every key after `after` in exactly
    /// one. A cut not after the one before is dropped (a gap or an overlap).
    pub fn covering(after: Option<String>, cuts: Vec<String>) -> Vec<KeyRange> {
        let mut ranges = Vec::with_capacity(cuts.len() + 1);
        let mut lower = after;
        for cut in cuts {
            if lower.as_ref().is_some_and(|l| cut <= *l) {
                continue;
            }
            ranges.push(KeyRange { after: lower.clone(), through: Some(cut.clone()) });
            lower = Some(cut);
        }
        ranges.push(KeyRange { after: lower, through: None });
        ranges
    }
}

/// Cuts after every `every`-th (at least 1) of the sorted `keys`, none at the last.
pub fn cuts_between<S: AsRef<str>>(keys: &[S], every: usize) -> Vec<String> {
    let every = every.max(1);
    (1..)
        .map(|k| k * every - 1)
        .take_while(|&i| i + 1 < keys.len())
        .map(|i| keys[i].as_ref().to_string())
        .collect()
}

/// The first 48 bits (a UUIDv7's Unix time in ms) of the UUID naming a key under `prefix`.
fn uuid_position(prefix: &str, key: &str) -> Option<u64> {
    let name = key.strip_prefix(prefix)?;
    let u = Uuid::try_parse(name.get(..36)?).ok()?;
    Some((u.as_u128() >> 80) as u64)
}

/// The key prefix sorting just before every lowercase UUID whose first 48 bits are `pos`.
fn cut_at(prefix: &str, pos: u64) -> String {
    format!("{prefix}{:08x}-{:04x}", pos >> 16, pos & 0xffff)
}

/// Cuts for the keys after a first page of a UUID-named `prefix`, `day`'s partition: the page's
/// keys per ms of UUIDv7 time estimate the keys to the end of the UTC day, cut into ranges of about
/// `range_keys`, at most [`ESTIMATED_RANGES_MAX`]. Empty when the page's ends share a position.
pub fn estimated_cuts(
    prefix: &str,
    first_page: &[ObjectMeta],
    day: NaiveDate,
    range_keys: usize,
) -> Vec<String> {
    let [first, .., last] = first_page else {
        return Vec::new();
    };
    let position = |o: &ObjectMeta| uuid_position(prefix, &o.key);
    let (Some(lo), Some(at)) = (position(first), position(last)) else {
        return Vec::new();
    };
    if at <= lo {
        return Vec::new();
    }
    let ms = |d: NaiveDate| d.and_time(NaiveTime::MIN).and_utc().timestamp_millis();
    let (day_start, day_end) = (ms(day), day.succ_opt().map(ms).unwrap_or(i64::MAX));
    let within = |p: u64| (p as i64) >= day_start && (p as i64) < day_end;
    let hi = if within(lo) && within(at) { day_end as u64 } else { (1u64 << 48) - 1 };
    if hi <= at {
        return Vec::new();
    }
    let per_ms = first_page.len() as f64 / (at - lo) as f64;
    let expected = per_ms * (hi - at) as f64;
    let ranges = ((expected / range_keys.max(1) as f64).ceil() as usize)
        .clamp(1, ESTIMATED_RANGES_MAX) as u64;
    let span = hi - at;
    let mut cuts: Vec<String> = (1..ranges)
        .map(|i| cut_at(prefix, at + (span as u128 * i as u128 / ranges as u128) as u64))
        .filter(|c| c.as_str() > last.key.as_str())
        .collect();
    cuts.dedup();
    cuts
}

/// First characters after the prefix at which [`name_cuts`] cuts: digits and letters in groups.
pub const NAME_CUT_CHARS: &str = "147ADGan";

/// Cuts for the keys of `prefix` (`day`'s partition, UTC) after `last`, a
/// first page's last key, when names do not start with a UUID: the archive
/// writer names about half its flights `{icao_hex}_{callsign}_{uuid}.json.gz`,
/// so cut at [`NAME_CUT_CHARS`] and evenly over the day's UUIDv7 time.
pub fn name_cuts(prefix: &str, last: &str, day: NaiveDate) -> Vec<String> {
    let ms = |d: NaiveDate| d.and_time(NaiveTime::MIN).and_utc().timestamp_millis() as u64;
    let start = ms(day);
    let day_ms = 86_400_000u64;
    let parts = ESTIMATED_RANGES_MAX as u64;
    let mut cuts: Vec<String> = (0..=parts)
        .map(|k| cut_at(prefix, start + day_ms * k / parts))
        .chain(NAME_CUT_CHARS.chars().map(|c| format!("{prefix}{c}")))
        .filter(|c| c.as_str() > last)
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// What a listing does with each object as its page arrives: `Ok(Some)`
/// keeps a value, `Ok(None)` drops it, `Err` ends the listing.
pub trait Keep<T>: Fn(ObjectMeta) -> Result<Option<T>> + Copy + Send + Sync {}
impl<T, F: Fn(ObjectMeta) -> Result<Option<T>> + Copy + Send + Sync> Keep<T> for F {}

fn kept<T>(objects: impl IntoIterator<Item = ObjectMeta>, keep: impl Keep<T>) -> Result<Vec<T>> {
    objects.into_iter().filter_map(|o| keep(o).transpose()).collect()
}

/// One range's objects through `keep` as each page arrives, until a page ends the prefix
/// or passes the range's bound. Errors: an S3 error listing a page; `keep`'s first error.
async fn list_range<T>(
    store: &impl Store,
    prefix: &str,
    range: &KeyRange,
    keep: impl Keep<T>,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    let mut after = range.after.clone();
    loop {
        let page = store.list_page(prefix, after.as_deref()).await?;
        let Some(last) = page.objects.last().map(|o| o.key.clone()) else {
            return Ok(out);
        };
        let past = range.through.as_deref().is_some_and(|t| last.as_str() >= t);
        out.extend(kept(page.objects.into_iter().filter(|o| range.contains(&o.key)), keep)?);
        if past || !page.truncated {
            return Ok(out);
        }
        after = Some(last);
    }
}

/// `head`, then every object under `prefix` in `ranges`, [`LIST_RANGES_IN_FLIGHT`] at a time, in
/// range order, each through `keep` ([`concat()`]).
/// Errors: the first S3 error of any range; `keep`'s first error.
async fn list_in_ranges<T: Send>(
    store: &impl Store,
    prefix: &str,
    head: Vec<T>,
    ranges: &[KeyRange],
    keep: impl Keep<T>,
) -> Result<Vec<T>> {
    if let [only] = ranges {
        return Ok(concat(head, vec![list_range(store, prefix, only, keep).await?]));
    }
    // Owned ranges: a stream of futures borrowing them is not `Send` (the run
    // is spawned). Unordered, so a long range does not hold back the next.
    let mut parts: Vec<(usize, Vec<T>)> = stream::iter(ranges.iter().cloned().enumerate())
        .map(|(i, r)| async move {
            Ok::<_, crate::infra::error::Error>((i, list_range(store, prefix, &r, keep).await?))
        })
        .buffer_unordered(LIST_RANGES_IN_FLIGHT)
        .try_collect()
        .await?;
    parts.sort_unstable_by_key(|(i, _)| *i);
    Ok(concat(head, parts.into_iter().map(|(_, p)| p).collect()))
}

/// `head`, then each of `parts`, in one allocation of the exact size: at most
/// twice the items at once, where a growing `collect` can hold three times.
fn concat<T>(head: Vec<T>, mut parts: Vec<Vec<T>>) -> Vec<T> {
    if head.is_empty() && parts.len() == 1 {
        return parts.pop().unwrap_or_default();
    }
    let mut out = Vec::with_capacity(head.len() + parts.iter().map(Vec::len).sum::<usize>());
    out.extend(head);
    out.extend(parts.into_iter().flatten());
    out
}

/// Every object under `prefix` (`day`'s partition) in key order, each through
/// `keep`: the first page alone, then the rest in estimated ranges at once.
/// Errors: an S3 error listing a page; `keep`'s first error.
pub async fn list_partition<T: Send>(
    store: &impl Store,
    prefix: &str,
    day: NaiveDate,
    keep: impl Keep<T>,
) -> Result<Vec<T>> {
    let first = store.list_page(prefix, None).await?;
    if !first.truncated {
        return kept(first.objects, keep);
    }
    let last = first.objects.last().map(|o| o.key.clone());
    let range_keys = ESTIMATED_RANGE_KEYS_PAGES * store.list_page_size();
    let uuid_named =
        |o: Option<&ObjectMeta>| o.is_some_and(|o| uuid_position(prefix, &o.key).is_some());
    let cuts = if uuid_named(first.objects.first()) && uuid_named(first.objects.last()) {
        estimated_cuts(prefix, &first.objects, day, range_keys)
    } else {
        name_cuts(prefix, last.as_deref().unwrap_or(prefix), day)
    };
    let head = kept(first.objects, keep)?;
    list_in_ranges(store, prefix, head, &KeyRange::covering(last, cuts), keep).await
}

/// Every object under `prefix`, in ranges cut between the `known` keys ([`relist_ranges`]).
/// Errors: an S3 error listing a page.
pub async fn relist<S: AsRef<str>>(
    store: &impl Store,
    prefix: &str,
    known: &[S],
) -> Result<Vec<ObjectMeta>> {
    let ranges = relist_ranges(prefix, known, store.list_page_size());
    list_in_ranges(store, prefix, Vec::new(), &ranges, |o| Ok(Some(o))).await
}

/// [`relist`] through the greatest `known` key only: one commit's inputs, where later keys would
/// cost pages for nothing; `keep` filters each page. Errors: an S3 error listing a page.
pub async fn relist_through<S: AsRef<str>, T: Send>(
    store: &impl Store,
    prefix: &str,
    known: &[S],
    keep: impl Keep<T>,
) -> Result<Vec<T>> {
    let mut ranges = relist_ranges(prefix, known, store.list_page_size());
    let last = (known.iter().map(AsRef::as_ref)).filter(|k| k.starts_with(prefix)).max();
    if let (Some(range), Some(last)) = (ranges.last_mut(), last) {
        range.through = Some(last.to_string());
    }
    list_in_ranges(store, prefix, Vec::new(), &ranges, keep).await
}

/// The ranges [`relist`] lists: the whole key space, each holding
/// [`relist_range_keys`]`(page_size)` of the `known` keys under `prefix`.
pub fn relist_ranges<S: AsRef<str>>(prefix: &str, known: &[S], page_size: usize) -> Vec<KeyRange> {
    let mut keys: Vec<&str> =
        known.iter().map(AsRef::as_ref).filter(|k| k.starts_with(prefix)).collect();
    keys.sort_unstable();
    keys.dedup();
    KeyRange::covering(None, cuts_between(&keys, relist_range_keys(page_size)))
}

/// Known keys in one [`relist`] range: nine tenths of a page (at least 1), so
/// the keys written since (the commit's own output) fit the same page.
pub fn relist_range_keys(page_size: usize) -> usize {
    (page_size * 9 / 10).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::storage::MemoryStore;
    use bytes::Bytes;

    fn v7_key(prefix: &str, ms: u64, n: u64) -> String {
        let u = Uuid::from_u128(((ms as u128) << 80) | (0x7u128 << 76) | n as u128);
        format!("{prefix}{u}.parquet")
    }

    #[test]
    fn covering_ranges_hold_every_key_once() {
        let cuts = vec!["b".to_string(), "d".into(), "c".into(), "f".into()];
        let ranges = KeyRange::covering(None, cuts);
        assert_eq!(ranges.len(), 4, "the cut out of order is dropped: {ranges:?}");
        for key in ["", "a", "b", "b0", "c", "d", "e", "f", "f0", "z"] {
            let n = ranges.iter().filter(|r| r.contains(key)).count();
            assert_eq!(n, 1, "{key:?} in {n} ranges");
        }
    }

    #[test]
    fn cuts_between_known_keys_one_page_apart() {
        let keys: Vec<String> = (0..3000).map(|i| format!("{i:05}")).collect();
        assert_eq!(cuts_between(&keys, 1000), vec!["00999", "01999"]);
        assert!(cuts_between(&keys[..1000], 1000).is_empty());
        assert_eq!(cuts_between(&keys[..1001], 1000), vec!["00999"]);
        assert!(cuts_between::<String>(&[], 1000).is_empty());
    }

    #[test]
    fn estimated_cuts_follow_uuidv7_time_to_the_end_of_the_day() {
        let day = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let start = day.and_time(NaiveTime::MIN).and_utc().timestamp_millis() as u64;
        let p = "index/year=2026/month=07/day=20/";
        // 1,000 keys in the first 3,456 s of the day: 25,000 at that rate
        // by its end, so ~24,030 follow: 5 ranges of at most ~5,000.
        let page: Vec<ObjectMeta> = (0..1000)
            .map(|i| ObjectMeta { key: v7_key(p, start + i * 3456, i), ..ObjectMeta::default() })
            .collect();
        let cuts = estimated_cuts(p, &page, day, 5000);
        assert_eq!(cuts.len(), 4, "{}", cuts.len());
        assert!(cuts.windows(2).all(|w| w[0] < w[1]));
        assert!(cuts[0] > page[999].key);
        let end = start + 86_400_000;
        assert!(cuts[3] < cut_at(p, end), "cuts stay inside the day");
        // Denser: capped.
        assert_eq!(estimated_cuts(p, &page, day, 10).len(), ESTIMATED_RANGES_MAX - 1);
        // Not UUIDs: nothing to cut by.
        let odd: Vec<ObjectMeta> = ["a", "b"]
            .iter()
            .map(|k| ObjectMeta { key: format!("{p}{k}"), ..ObjectMeta::default() })
            .collect();
        assert!(estimated_cuts(p, &odd, day, 2000).is_empty());
    }

    fn store_with(keys: &[String], page: usize) -> MemoryStore {
        let s = MemoryStore::new("b").with_list_page_size(page);
        for k in keys {
            s.put_now(k, Bytes::from_static(b"x"));
        }
        s
    }

    fn all(o: ObjectMeta) -> Result<Option<ObjectMeta>> {
        Ok(Some(o))
    }

    fn names(objects: &[ObjectMeta]) -> Vec<String> {
        objects.iter().map(|o| o.key.clone()).collect()
    }

    #[tokio::test]
    async fn listings_in_ranges_equal_the_sequential_listing() {
        let day = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let start = day.and_time(NaiveTime::MIN).and_utc().timestamp_millis() as u64;
        let p = "index/year=2026/month=07/day=20/";
        // Dense first, sparse later (the estimate is wrong), a key before the
        // day, keys after it, odd names, and a key outside the prefix.
        let mut keys: Vec<String> = (0..40).map(|i| v7_key(p, start + i, i)).collect();
        keys.extend((0..30).map(|i| v7_key(p, start + 3_600_000 * (i % 24) + i, i)));
        keys.push(v7_key(p, start - 5, 1));
        keys.push(v7_key(p, start + 90_000_000, 2));
        // The writer's other flight names: `{icao_hex}_{callsign}_{uuid}`.
        keys.extend((0..30u64).map(|i| {
            let u = v7_key("", start + i * 2_000_000, i);
            format!("{p}{:06X}_DAL{i}_{u}", (i * 0x08_5A3D) % 0x100_0000)
        }));
        keys.extend([
            format!("{p}compacted-x.parquet"),
            format!("{p}_SUCCESS"),
            format!("{p}zz"),
            "index/year=2026/month=07/day=21/x".into(),
        ]);
        for page in [1, 3, 7, 1000] {
            let s = store_with(&keys, page);
            let want = names(&s.list(p).await.unwrap());
            let got = names(&list_partition(&s, p, day, all).await.unwrap());
            assert_eq!(got, want, "list_partition, page size {page}");
            let known = &want[..want.len() / 2];
            let got = names(&relist(&s, p, known).await.unwrap());
            assert_eq!(got, want, "relist, page size {page}");
        }
    }

    #[test]
    fn a_prefix_named_by_aircraft_addresses_is_cut_too() {
        let day = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let p = "flights/2026/07/20/";
        let cuts = name_cuts(p, &format!("{p}00A3F1_DAL1_x"), day);
        assert!(cuts.len() >= 10, "{cuts:?}");
        assert!(cuts.windows(2).all(|w| w[0] < w[1]), "sorted: {cuts:?}");
        assert!(cuts.iter().all(|c| c.as_str() > "flights/2026/07/20/00A3F1_DAL1_x"));
        // The day's UUIDv7 names fall between the cuts, not all in one range.
        let start = day.and_time(NaiveTime::MIN).and_utc().timestamp_millis() as u64;
        let ranges = KeyRange::covering(None, cuts);
        let hit = |ms: u64| ranges.iter().position(|r| r.contains(&v7_key(p, ms, 1)));
        assert_ne!(hit(start + 3_600_000), hit(start + 20 * 3_600_000));
        assert_ne!(
            ranges.iter().position(|r| r.contains(&format!("{p}3C6444_DLH4_x"))),
            ranges.iter().position(|r| r.contains(&format!("{p}A0B1C2_UAL9_x")))
        );
    }

    #[test]
    fn a_relist_range_fits_its_known_keys_and_new_ones_in_one_page() {
        let p = "index/year=2026/month=07/day=20/";
        for (page, known) in [(1000usize, 1000usize), (1000, 2000), (1000, 50_000), (100, 250)] {
            let keys: Vec<String> =
                (0..known as u64).map(|i| v7_key(p, 1_784_505_600_000 + i, i)).collect();
            // New since: the commit's output, and per-flight files landing
            // between the known ones.
            let mut all = keys.clone();
            all.push(format!("{p}compacted-01a2.parquet"));
            all.extend((0..5).map(|i| v7_key(p, 1_784_505_600_000 + i * 200, 9_999)));
            let ranges = relist_ranges(p, &keys, page);
            assert!(ranges.len() >= known.div_ceil(page));
            for r in &ranges {
                let held = all.iter().filter(|k| r.contains(k)).count();
                assert!(
                    held <= page,
                    "page {page}, {known} known: a range holds {held} keys, more than a page: {r:?}"
                );
            }
            for k in &all {
                assert_eq!(ranges.iter().filter(|r| r.contains(k)).count(), 1, "{k}");
            }
        }
    }

    /// A `keep` that fails (a spill write on a full disk) ends the listing:
    /// no page after the one it failed on is asked for.
    #[tokio::test]
    async fn a_failing_keep_ends_the_listing_at_its_page() {
        let p = "index/year=2026/month=07/day=20/";
        let keys: Vec<String> = (0..100).map(|i| v7_key(p, 1_784_505_600_000 + i, i)).collect();
        let s = store_with(&keys, 10);
        let seen = std::sync::atomic::AtomicUsize::new(0);
        let seen = &seen;
        use std::sync::atomic::Ordering;
        let keep = move |o: ObjectMeta| match seen.fetch_add(1, Ordering::Relaxed) {
            24 => Err(crate::infra::error::Error::Spill {
                dir: "/tmp".into(),
                source: std::io::Error::other("disk full"),
            }),
            _ => Ok(Some(o)),
        };
        let err = list_in_ranges(&s, p, Vec::new(), &KeyRange::covering(None, vec![]), keep).await;
        assert!(matches!(err, Err(crate::infra::error::Error::Spill { .. })), "{err:?}");
        assert_eq!(s.requests("ListObjectsV2"), 3);
        assert_eq!(seen.load(Ordering::Relaxed), 25);
    }

    #[tokio::test]
    async fn a_day_of_one_page_costs_one_request() {
        let day = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let p = "index/year=2026/month=07/day=20/";
        let keys: Vec<String> = (0..5).map(|i| v7_key(p, 1_784_505_600_000 + i, i)).collect();
        let s = store_with(&keys, 1000);
        assert_eq!(list_partition(&s, p, day, all).await.unwrap().len(), 5);
        assert_eq!(s.requests("ListObjectsV2"), 1);
        assert_eq!(relist(&s, p, &keys).await.unwrap().len(), 5);
        assert_eq!(s.requests("ListObjectsV2"), 2);
    }

    #[tokio::test]
    async fn a_relist_through_its_known_keys_stops_at_the_last_one() {
        let p = "index/year=2026/month=07/day=20/";
        let keys: Vec<String> = (0..50).map(|i| v7_key(p, 1_784_505_600_000 + i, i)).collect();
        let mut stored = keys.clone();
        stored.push(format!("{p}compacted-01a2.parquet"));
        for page in [1, 3, 1000] {
            let s = store_with(&stored, page);
            // The first 20 known (a part), one of them rewritten since:
            // every key up to the 20th, none after it.
            let got = names(&relist_through(&s, p, &keys[..20], all).await.unwrap());
            assert_eq!(got, keys[..20], "page size {page}");
            let got = names(&relist_through(&s, p, &keys[30..40], all).await.unwrap());
            assert_eq!(got, keys[..40], "page size {page}");
        }
    }
}
