//! One date's partition as the driver and `status` see it: the listings of
//! `flights/YYYY/MM/DD/` and `index/year=…/month=…/day=…/`, the parity gate
//! over them, and the earliest index partition (where a fresh deployment
//! starts). Read-only: lists and GETs, never writes.
//!
//! The parity gate (docs/ARCHITECTURE.md, "Parity gate"): a flight counts
//! as indexed when a per-flight file is named by its uuid, or when any
//! multi-row input (a compacted file, or another multi-row index file such
//! as a legacy migration's) holds a row whose `s3_key` carries its uuid.
//!
//! ```
//! use archive_compaction::partition::{list_day, parity_gate};
//! use archive_compaction::storage::{MemoryStore, Store};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new("archive");
//! let u = "019f7d73-f820-702f-b905-8c81d0944996";
//! store.put_now(&format!("flights/2026/07/20/{u}.json.gz"), "{}".into());
//! let date = chrono::NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
//! let day = list_day(&store, date, true).await.unwrap();
//! let gate = parity_gate(&store, &day.flights, &day.index).await.unwrap();
//! assert_eq!(gate.missing.len(), 1); // no index row for the flight
//! # });
//! ```

use std::collections::BTreeSet;

use chrono::NaiveDate;
use uuid::Uuid;

use crate::commit::Prefetched;
use crate::error::Result;
use crate::keys::{INDEX_ROOT, flights_prefix, index_partition_date, index_prefix};
use crate::merge;
use crate::plan::{self, PartitionListing};
use crate::storage::Store;
use crate::storage::ranges::list_partition;

/// One date's listings.
#[derive(Debug, Clone, Default)]
pub struct DayListing {
    /// Flight uuids under `flights/YYYY/MM/DD/` (empty when not listed).
    pub flights: BTreeSet<Uuid>,
    /// The index partition, sorted by kind.
    pub index: PartitionListing,
}

/// Lists one date's index partition and, when `with_flights`, its
/// `flights/` prefix too (both ListObjectsV2, concurrently; a prefix of
/// more than one page in concurrent key ranges,
/// [`crate::storage::ranges::list_partition`]).
///
/// Errors: an S3 error listing either prefix.
pub async fn list_day(
    store: &impl Store,
    date: NaiveDate,
    with_flights: bool,
) -> Result<DayListing> {
    let (fp, ip) = (flights_prefix(date), index_prefix(date));
    let (flights, index) = if with_flights {
        tokio::try_join!(
            list_partition(store, &fp, date),
            list_partition(store, &ip, date)
        )?
    } else {
        (Vec::new(), list_partition(store, &ip, date).await?)
    };
    Ok(DayListing {
        flights: plan::flight_uuids(&flights),
        index: plan::classify_partition(index),
    })
}

/// What the parity gate found for one date.
#[derive(Debug, Default)]
pub struct ParityGate {
    /// Flights under `flights/` with no index row, in uuid order.
    pub missing: Vec<Uuid>,
    /// Multi-row inputs (compacted and other) read to look for rows (0 when
    /// the per-flight file names already cover every flight).
    pub compacted_files_read: u64,
    /// Multi-row inputs that could not be decoded, with why (their rows
    /// count as absent).
    pub unreadable: Vec<(String, merge::Unmergeable)>,
    /// The bodies read, by key, for the merge to reuse (no second GET of
    /// the same version).
    pub prefetched: Prefetched,
}

/// The parity gate for one date's listings (see the module docs). The
/// multi-row inputs' `s3_key` columns are read only when the names do not
/// cover every flight; what was read is returned in
/// [`ParityGate::prefetched`]. Index rows without a flight do not block.
///
/// Errors: an S3 error reading a multi-row input (one that vanished since
/// the listing counts as holding no rows).
pub async fn parity_gate(
    store: &impl Store,
    flights: &BTreeSet<Uuid>,
    listing: &PartitionListing,
) -> Result<ParityGate> {
    let mut indexed: BTreeSet<Uuid> = listing.per_flight_uuids();
    let mut gate = ParityGate {
        missing: plan::missing_flights(flights, &indexed),
        ..ParityGate::default()
    };
    if gate.missing.is_empty() {
        return Ok(gate);
    }
    for (c, _) in listing.multi_row_inputs() {
        let Some(f) = store.get_opt(&c.key).await? else {
            continue;
        };
        gate.compacted_files_read += 1;
        match merge::flight_uuids_in(f.body.clone()) {
            Ok(us) => indexed.extend(us),
            Err(u) => gate.unreadable.push((c.key.clone(), u)),
        }
        gate.prefetched.insert(c.key.clone(), f);
    }
    gate.missing = plan::missing_flights(flights, &indexed);
    Ok(gate)
}

/// The earliest `index/year=/month=/day=/` partition, by delimiter listings
/// (years, then months, then days, stopping at the first day found).
///
/// Errors: an S3 error listing a prefix.
pub async fn earliest_partition(store: &impl Store) -> Result<Option<NaiveDate>> {
    let mut best: Option<NaiveDate> = None;
    let mut years = store.list_prefixes(INDEX_ROOT).await?;
    years.sort();
    for y in years
        .iter()
        .filter(|p| p[INDEX_ROOT.len()..].starts_with("year="))
    {
        let mut months = store.list_prefixes(y).await?;
        months.sort();
        for m in &months {
            let days = store.list_prefixes(m).await?;
            best = days
                .iter()
                .filter_map(|d| index_partition_date(d))
                .chain(best)
                .min();
            if best.is_some() {
                return Ok(best);
            }
        }
    }
    Ok(best)
}
