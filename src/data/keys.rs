//! Bucket layout: how keys are built and classified (pure, no I/O). The
//! layout is the archive writer's (docs/ARCHITECTURE.md, "Bucket layout"):
//!
//! ```text
//! flights/{YYYY}/{MM}/{DD}/{icao_hex}_{ident}_{uuid}.json.gz
//! flights/{YYYY}/{MM}/{DD}/{uuid}.json.gz
//! index/year={YYYY}/month={MM}/day={DD}/{uuid}.parquet         per-flight file
//! index/year={YYYY}/month={MM}/day={DD}/compacted-{id}.parquet compacted file
//! index/year={YYYY}/month={MM}/day={DD}/{any name}.parquet     other multi-row file
//! _compaction_state/...
//! ```
//!
//! ```
//! use archive_compaction::data::keys::{classify_index_key, IndexKey, flight_uuid};
//! let k = "index/year=2026/month=07/day=20/019f7d73-f820-702f-b905-8c81d0944996.parquet";
//! assert!(matches!(classify_index_key(k), IndexKey::PerFlight(_)));
//! let f = "flights/2026/07/20/498893_UAL7368_019f7d73-f820-702f-b905-8c81d0944996.json.gz";
//! assert_eq!(flight_uuid(f).unwrap().to_string(), "019f7d73-f820-702f-b905-8c81d0944996");
//! ```

use chrono::{Datelike, NaiveDate};
use uuid::Uuid;

/// Prefix of the flight objects (the source of truth).
pub(crate) const FLIGHTS_ROOT: &str = "flights/";
/// Prefix of the Parquet index partitions.
pub const INDEX_ROOT: &str = "index/";
/// Prefix of this job's state files.
pub const STATE_ROOT: &str = "_compaction_state/";
/// The watermark file, shared with the Python job.
pub const WATERMARK_KEY: &str = "_compaction_state/watermark.json";
/// The lease file.
pub const LOCK_KEY: &str = "_compaction_state/lock.json";
/// Prefix of the in-flight commit manifests.
pub const MANIFESTS_ROOT: &str = "_compaction_state/manifests/";
/// Where unreadable manifests are moved aside.
pub const QUARANTINE_ROOT: &str = "_compaction_state/quarantine/";
/// Stuck marks of live manifests whose inputs could not be deleted ([`stuck_key`]).
pub const STUCK_ROOT: &str = "_compaction_state/stuck/";
/// File name prefix of this job's outputs.
pub const COMPACTED_PREFIX: &str = "compacted-";

/// `flights/YYYY/MM/DD/` for a date.
pub fn flights_prefix(date: NaiveDate) -> String {
    format!("{FLIGHTS_ROOT}{:04}/{:02}/{:02}/", date.year(), date.month(), date.day())
}

/// `index/year=YYYY/month=MM/day=DD/` for a date (Glue partition projection layout).
pub fn index_prefix(date: NaiveDate) -> String {
    format!("{INDEX_ROOT}year={:04}/month={:02}/day={:02}/", date.year(), date.month(), date.day())
}

/// The output key of a date, named after the commit's job id: two runs never
/// overwrite each other's output, and recovery tells a manifest's own output.
/// ```
/// use archive_compaction::data::keys::compacted_key;
/// let d = chrono::NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
/// let id = uuid::Uuid::parse_str("019f7d73-f820-702f-b905-8c81d0944996").unwrap();
/// assert_eq!(
///     compacted_key(d, id),
///     "index/year=2026/month=07/day=20/compacted-019f7d73-f820-702f-b905-8c81d0944996.parquet"
/// );
/// ```
pub fn compacted_key(date: NaiveDate, id: Uuid) -> String {
    format!("{}{COMPACTED_PREFIX}{id}.parquet", index_prefix(date))
}

/// `_compaction_state/manifests/YYYY-MM-DD/{job_id}.json`.
pub fn manifest_key(date: NaiveDate, job_id: Uuid) -> String {
    format!("{MANIFESTS_ROOT}{date}/{job_id}.json")
}

/// The date of a manifest key (`_compaction_state/manifests/{date}/...`), if well formed.
pub fn manifest_date(key: &str) -> Option<NaiveDate> {
    let rest = key.strip_prefix(MANIFESTS_ROOT)?;
    let (date, _) = rest.split_once('/')?;
    NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()
}

/// The stuck mark of the manifest at `manifest_key` (same name under [`STUCK_ROOT`]).
///
/// ```
/// use archive_compaction::data::keys::{stuck_key, stuck_manifest_key};
/// let m = "_compaction_state/manifests/2026-07-20/j.json";
/// assert_eq!(stuck_key(m), "_compaction_state/stuck/2026-07-20/j.json");
/// assert_eq!(stuck_manifest_key(&stuck_key(m)).as_deref(), Some(m));
/// assert_eq!(stuck_manifest_key("_compaction_state/lock.json"), None);
/// ```
pub fn stuck_key(manifest_key: &str) -> String {
    manifest_key.replacen(MANIFESTS_ROOT, STUCK_ROOT, 1)
}

/// The manifest key a stuck mark stands for; `None` outside [`STUCK_ROOT`].
pub fn stuck_manifest_key(key: &str) -> Option<String> {
    Some(format!("{MANIFESTS_ROOT}{}", key.strip_prefix(STUCK_ROOT)?))
}

/// What an object under an index partition is ([`classify_index_key`]; the Python job merged every
/// input). A zero-byte one is foreign too ([`crate::protocol::plan::classify_partition`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexKey {
    /// `{uuid}.parquet`: one flight's index row, written by the archive writer.
    PerFlight(Uuid),
    /// `compacted-*.parquet`: an output of this job or of the Python job.
    Compacted,
    /// Any other `.parquet` name (exports, a migration's): merged and retired like a compacted one.
    MultiRow,
    /// Anything else (`_SUCCESS`, `*.json`, directory markers, `.hidden`,
    /// nested prefixes): never read, merged, deleted or counted as a row.
    Foreign(&'static str),
}

impl IndexKey {
    /// Whether this is an index input (not [`IndexKey::Foreign`]).
    pub fn is_input(&self) -> bool {
        !matches!(self, IndexKey::Foreign(_))
    }
}

/// Classifies a key under an index partition prefix by its last segment.
pub fn classify_index_key(key: &str) -> IndexKey {
    if key.ends_with('/') {
        return IndexKey::Foreign("directory marker");
    }
    let Some((dir, name)) = key.rsplit_once('/') else {
        return IndexKey::Foreign("not in a partition");
    };
    if !dir.rsplit('/').next().is_some_and(|d| d.starts_with("day=")) {
        return IndexKey::Foreign("not directly in a day= partition");
    }
    if name.starts_with('_') || name.starts_with('.') {
        return IndexKey::Foreign("hidden name (starts with _ or .)");
    }
    let Some(stem) = name.strip_suffix(".parquet") else {
        return IndexKey::Foreign("not a .parquet file");
    };
    if stem.is_empty() {
        return IndexKey::Foreign("no name before .parquet");
    }
    if stem.starts_with(COMPACTED_PREFIX) {
        return IndexKey::Compacted;
    }
    match Uuid::parse_str(stem) {
        Ok(u) if stem.len() == 36 => IndexKey::PerFlight(u),
        _ => IndexKey::MultiRow,
    }
}

/// Whether `key` is an index input: a file this job reads, merges and may delete.
///
/// ```
/// use archive_compaction::data::keys::is_index_input;
/// assert!(is_index_input("index/year=2026/month=07/day=20/compacted-x.parquet"));
/// assert!(!is_index_input("index/year=2026/month=07/day=20/_SUCCESS"));
/// assert!(!is_index_input("_compaction_state/watermark.json"));
/// ```
pub fn is_index_input(key: &str) -> bool {
    classify_index_key(key).is_input()
}

/// The flight uuid of a flight object key or an `s3_key` value: the last
/// `_`-separated part of the `.json.gz` name.
pub fn flight_uuid(key: &str) -> Option<Uuid> {
    let name = key.rsplit('/').next()?;
    let stem = name.strip_suffix(".json.gz")?;
    let last = stem.rsplit('_').next()?;
    if last.len() != 36 {
        return None;
    }
    Uuid::parse_str(last).ok()
}

/// The date of an `index/year=YYYY/month=MM/day=DD/` prefix, if well formed.
pub(crate) fn index_partition_date(prefix: &str) -> Option<NaiveDate> {
    let rest = prefix.strip_prefix(INDEX_ROOT)?;
    let mut parts = rest.split('/');
    let y = parts.next()?.strip_prefix("year=")?.parse().ok()?;
    let m = parts.next()?.strip_prefix("month=")?.parse().ok()?;
    let d = parts.next()?.strip_prefix("day=")?.parse().ok()?;
    NaiveDate::from_ymd_opt(y, m, d)
}

/// The date of a `flights/YYYY/MM/DD/` prefix, if well formed.
pub(crate) fn flights_partition_date(prefix: &str) -> Option<NaiveDate> {
    let rest = prefix.strip_prefix(FLIGHTS_ROOT)?;
    let mut parts = rest.split('/');
    let mut field = |width: usize| {
        parts
            .next()
            .filter(|p| p.len() == width && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u32>().ok())
    };
    let (y, m, d) = (field(4)?, field(2)?, field(2)?);
    NaiveDate::from_ymd_opt(y as i32, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "019f7d73-f820-702f-b905-8c81d0944996";

    #[test]
    fn flights_partition_dates() {
        let d = NaiveDate::from_ymd_opt(2026, 7, 5).unwrap();
        assert_eq!(flights_partition_date(&flights_prefix(d)), Some(d));
        for bad in [
            "flights/2026/7/05/",
            "flights/2026/07/32/",
            "flights/tmp/",
            "index/2026/07/05/",
            "flights/2026/07/",
        ] {
            assert_eq!(flights_partition_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn prefixes() {
        let d = NaiveDate::from_ymd_opt(2026, 7, 5).unwrap();
        assert_eq!(flights_prefix(d), "flights/2026/07/05/");
        assert_eq!(index_prefix(d), "index/year=2026/month=07/day=05/");
        assert_eq!(index_partition_date(&index_prefix(d)), Some(d));
        assert_eq!(index_partition_date("index/year=2026/month=13/day=01/"), None);
        let m = manifest_key(d, Uuid::parse_str(U).unwrap());
        assert_eq!(manifest_date(&m), Some(d));
    }

    #[test]
    fn index_keys() {
        let p = "index/year=2026/month=07/day=20/";
        assert_eq!(
            classify_index_key(&format!("{p}{U}.parquet")),
            IndexKey::PerFlight(Uuid::parse_str(U).unwrap())
        );
        assert_eq!(classify_index_key(&format!("{p}compacted-{U}.parquet")), IndexKey::Compacted);
        for multi in [
            "abc.parquet",
            "legacy-migration.parquet",
            "legacy export+2022 (1) ~é.parquet",
            "019f7d73-f820-702f-b905-8c81d0944996-v2.parquet",
        ] {
            assert_eq!(classify_index_key(&format!("{p}{multi}")), IndexKey::MultiRow, "{multi}");
        }
        for foreign in
            ["_SUCCESS", "x.json", ".tmp.parquet", "_x.parquet", ".parquet", "x.parquet.tmp", ""]
        {
            assert!(
                matches!(classify_index_key(&format!("{p}{foreign}")), IndexKey::Foreign(_)),
                "{foreign}"
            );
        }
        assert!(matches!(classify_index_key(p), IndexKey::Foreign(_)));
        assert!(matches!(classify_index_key(&format!("{p}sub/{U}.parquet")), IndexKey::Foreign(_)));
    }

    #[test]
    fn flight_keys() {
        let u = Uuid::parse_str(U).unwrap();
        assert_eq!(flight_uuid(&format!("flights/2026/07/20/498893_UAL7368_{U}.json.gz")), Some(u));
        assert_eq!(flight_uuid(&format!("flights/2026/07/20/{U}.json.gz")), Some(u));
        assert_eq!(flight_uuid(&format!("flights/2026/07/20/A_B_C_{U}.json.gz")), Some(u));
        assert_eq!(flight_uuid("flights/2026/07/20/"), None);
        assert_eq!(flight_uuid(&format!("flights/2026/07/20/{U}.json")), None);
    }
}
