//! Proof that an input's rows are in an output, before the input is deleted: delete is the one
//! irreversible step, so never on a manifest's word alone. [`unproven`] names every input that
//! fails the rule:
//!
//! - a per-flight file `{uuid}.parquet` that holds a row must have its flight (the uuid of its
//!   name) in the output;
//! - every row of any input must have its flight (the uuid of its `s3_key`) in the output: that
//!   row, or the newer one that beat it in the merge;
//! - rows without a flight uuid cannot be told apart: the inputs' such rows must not outnumber the
//!   output's;
//! - an input whose rows the commit that wrote the output did not read proves nothing.
//!
//! A zero-row input holds nothing to lose and is proven.
//!
//! ```
//! use archive_compaction::protocol::proof::{InputRows, OutputFlights, RowFlights, unproven};
//! let (a, b) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
//! let output = OutputFlights::new(RowFlights { flights: vec![a], anonymous: 0 });
//! let key = |u: uuid::Uuid| format!("index/year=2026/month=07/day=20/{u}.parquet");
//! let rows = |k: &str| Some(InputRows::Rows(RowFlights { flights: vec![
//!     if k.contains(&a.to_string()) { a } else { b }], anonymous: 0 }));
//! let failed = unproven([key(a).as_str(), key(b).as_str()], rows, &output);
//! assert_eq!(failed.len(), 1);
//! assert_eq!(failed[0].key, key(b));
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use uuid::Uuid;

use crate::data::keys::{IndexKey, classify_index_key, flight_uuid};

/// The flights of a set of rows, by their `s3_key`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowFlights {
    /// The flight uuid of each row that has one (in row order, repeats kept).
    pub flights: Vec<Uuid>,
    /// Rows without a flight uuid (a null `s3_key`, or one that names no uuid).
    pub anonymous: u64,
}

impl RowFlights {
    /// `batch` is conformed (`s3_key` utf8); without the column every row is anonymous.
    pub fn of_batch(batch: &RecordBatch) -> RowFlights {
        let mut out = RowFlights::default();
        let Some(keys) = batch.column_by_name("s3_key").and_then(|c| c.as_string_opt::<i32>())
        else {
            out.anonymous = batch.num_rows() as u64;
            return out;
        };
        for k in keys.iter() {
            match k.and_then(flight_uuid) {
                Some(u) => out.flights.push(u),
                None => out.anonymous += 1,
            }
        }
        out
    }

    /// Rows in all.
    pub fn rows(&self) -> u64 {
        self.flights.len() as u64 + self.anonymous
    }
}

/// The flights written to an output, and how many rows name none.
#[derive(Debug, Clone, Default)]
pub struct OutputFlights {
    flights: HashSet<Uuid>,
    anonymous: u64,
}

impl OutputFlights {
    /// From the output's rows.
    pub fn new(rows: RowFlights) -> OutputFlights {
        OutputFlights { flights: rows.flights.into_iter().collect(), anonymous: rows.anonymous }
    }
}

/// The rows one input held, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputRows {
    /// A per-flight file holding one row, of the flight its name gives (the regular case, kept
    /// without a list).
    OwnRow,
    /// Any other input: its rows' flights.
    Rows(RowFlights),
}

/// The rows a commit read and merged, per input.
#[derive(Debug, Clone, Default)]
pub struct ReadRows {
    per_flight: HashMap<Uuid, Option<Box<RowFlights>>>,
    other: HashMap<String, RowFlights>,
}

impl ReadRows {
    /// Records the rows of the input at `key`.
    pub fn insert(&mut self, key: &str, rows: RowFlights) {
        match classify_index_key(key) {
            IndexKey::PerFlight(u) => {
                let own = rows.anonymous == 0 && rows.flights == [u];
                self.per_flight.insert(u, (!own).then(|| Box::new(rows)));
            }
            _ => _ = self.other.insert(key.to_string(), rows),
        }
    }

    /// The rows recorded for `key`, `None` when none were.
    pub fn get(&self, key: &str) -> Option<InputRows> {
        match classify_index_key(key) {
            IndexKey::PerFlight(u) => self.per_flight.get(&u).map(|r| match r {
                None => InputRows::OwnRow,
                Some(r) => InputRows::Rows((**r).clone()),
            }),
            _ => self.other.get(key).cloned().map(InputRows::Rows),
        }
    }
}

/// An input whose rows are not proven to be in the output: it is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unproven {
    /// The input's key.
    pub key: String,
    /// Which rule it fails, in words.
    pub reason: String,
}

impl fmt::Display for Unproven {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

/// The inputs of `keys` whose rows are not proven to be in `output`, in order (`rows_of` `None`
/// proves nothing). Rows without a flight uuid are counted off the output's in order; the input
/// that overdraws fails.
pub fn unproven<'a>(
    keys: impl IntoIterator<Item = &'a str>,
    rows_of: impl Fn(&str) -> Option<InputRows>,
    output: &OutputFlights,
) -> Vec<Unproven> {
    let mut anonymous_left = output.anonymous;
    let mut out = Vec::new();
    for key in keys {
        let fail = |reason: String| Unproven { key: key.to_string(), reason };
        let own = match classify_index_key(key) {
            IndexKey::PerFlight(u) => Some(u),
            _ => None,
        };
        let rows = match rows_of(key) {
            None => {
                out.push(fail(
                    "its rows were not read into the output (skipped, unreadable, or never read by the commit that wrote it)".into(),
                ));
                continue;
            }
            Some(InputRows::OwnRow) => RowFlights { flights: Vec::from_iter(own), anonymous: 0 },
            Some(InputRows::Rows(r)) => r,
        };
        if rows.rows() == 0 {
            continue;
        }
        if let Some(u) = own
            && !output.flights.contains(&u)
        {
            out.push(fail(format!("its flight {u} is not in the output")));
            continue;
        }
        if let Some(missing) = rows.flights.iter().find(|u| !output.flights.contains(u)) {
            let n = rows.flights.iter().filter(|u| !output.flights.contains(u)).count();
            out.push(fail(format!(
                "{n} of its {} row(s) are of flights not in the output (first: {missing})",
                rows.rows()
            )));
            continue;
        }
        if rows.anonymous > anonymous_left {
            out.push(fail(format!(
                "{} of its rows carry no flight uuid in s3_key, and the output holds only {anonymous_left} more such row(s)",
                rows.anonymous
            )));
            continue;
        }
        anonymous_left -= rows.anonymous;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(n: u128) -> Uuid {
        Uuid::from_u128((0x0190_0000_0000_7000_8000_0000_0000_0000) | n)
    }
    fn per_flight(n: u128) -> String {
        format!("index/year=2026/month=07/day=20/{}.parquet", u(n))
    }
    const MULTI: &str = "index/year=2026/month=07/day=20/legacy.parquet";
    fn rows(flights: &[u128], anonymous: u64) -> RowFlights {
        RowFlights { flights: flights.iter().map(|n| u(*n)).collect(), anonymous }
    }

    #[test]
    fn each_rule() {
        let output = OutputFlights::new(rows(&[1, 2, 3], 1));
        let table: HashMap<String, Option<InputRows>> = [
            (per_flight(1), Some(InputRows::OwnRow)),
            // Its flight is not in the output: a straggler listed by mistake.
            (per_flight(9), Some(InputRows::OwnRow)),
            // Zero rows: nothing to lose.
            (per_flight(8), Some(InputRows::Rows(rows(&[], 0)))),
            // Its one row has no s3_key: the output has the row, not the flight.
            (per_flight(7), Some(InputRows::Rows(rows(&[], 1)))),
            // Skipped by the merge: its rows are unknown.
            (per_flight(2), None),
            // Superseded rows (2 twice) are proven by the flight being there.
            (MULTI.to_string(), Some(InputRows::Rows(rows(&[2, 2, 3], 1)))),
            (
                "index/year=2026/month=07/day=20/compacted-a.parquet".into(),
                Some(InputRows::Rows(rows(&[3, 4], 0))),
            ),
            // The one anonymous row of the output is taken by MULTI.
            (
                "index/year=2026/month=07/day=20/export.parquet".into(),
                Some(InputRows::Rows(rows(&[1], 1))),
            ),
        ]
        .into();
        let keys: Vec<String> = [
            per_flight(1),
            per_flight(9),
            per_flight(8),
            per_flight(7),
            per_flight(2),
            MULTI.into(),
            "index/year=2026/month=07/day=20/compacted-a.parquet".into(),
            "index/year=2026/month=07/day=20/export.parquet".into(),
        ]
        .into();
        let failed =
            unproven(keys.iter().map(String::as_str), |k| table.get(k).cloned().flatten(), &output);
        let got: Vec<(&str, &str)> =
            failed.iter().map(|f| (f.key.as_str(), f.reason.as_str())).collect();
        assert_eq!(got.len(), 5, "{got:#?}");
        assert_eq!(got[0].0, per_flight(9));
        assert!(got[0].1.contains("not in the output"), "{}", got[0].1);
        assert_eq!(got[1].0, per_flight(7));
        assert_eq!(got[2].0, per_flight(2));
        assert!(got[2].1.contains("not read"), "{}", got[2].1);
        assert!(got[3].0.ends_with("compacted-a.parquet"));
        assert!(got[3].1.contains("1 of its 2 row(s)"), "{}", got[3].1);
        assert!(got[4].0.ends_with("export.parquet"));
        assert!(got[4].1.contains("no flight uuid"), "{}", got[4].1);
    }

    #[test]
    fn read_rows_keeps_the_regular_per_flight_file_small() {
        let flight = u(5);
        let mut read = ReadRows::default();
        let batch = crate::data::merge::tests::row(&flight.to_string(), "X");
        read.insert(&per_flight(5), RowFlights::of_batch(&batch));
        assert_eq!(read.get(&per_flight(5)), Some(InputRows::OwnRow));
        // Another flight's row in a per-flight file: its rows are kept.
        read.insert(&per_flight(6), RowFlights::of_batch(&batch));
        assert_eq!(read.get(&per_flight(6)), Some(InputRows::Rows(rows(&[5], 0))));
        read.insert(MULTI, RowFlights::of_batch(&batch));
        assert_eq!(read.get(MULTI), Some(InputRows::Rows(rows(&[5], 0))));
        assert_eq!(read.get(&per_flight(7)), None);
    }

    #[test]
    fn a_multi_row_input_none_of_whose_flights_is_in_the_output_is_unproven() {
        let output = OutputFlights::new(rows(&[1], 0));
        for input in [rows(&[8, 9], 0), rows(&[8], 0), rows(&[8, 9, 1], 0)] {
            let failed = unproven([MULTI], |_| Some(InputRows::Rows(input.clone())), &output);
            assert_eq!(failed.len(), 1, "{input:?}: {failed:?}");
            assert!(failed[0].reason.contains("not in the output"), "{failed:?}");
        }
        // A per-flight file holding only another flight's row, absent too.
        let failed =
            unproven([per_flight(1).as_str()], |_| Some(InputRows::Rows(rows(&[8], 0))), &output);
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(failed[0].reason.contains("1 of its 1 row(s)"), "{failed:?}");
        // Named in the error by its key, then the rule.
        assert_eq!(failed[0].to_string(), format!("{}: {}", per_flight(1), failed[0].reason));
    }

    #[test]
    fn anonymous_rows_are_counted_against_the_outputs_in_order() {
        let output = OutputFlights::new(rows(&[1], 2));
        let table: HashMap<String, RowFlights> =
            [(MULTI.to_string(), rows(&[1], 2)), (per_flight(1), rows(&[1], 1))].into();
        let get = |k: &str| table.get(k).cloned().map(InputRows::Rows);
        // The first takes both of the output's anonymous rows; the second finds none left.
        let failed = unproven([MULTI, per_flight(1).as_str()], get, &output);
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed[0].key, per_flight(1));
        assert!(
            failed[0].reason.contains("1 of its rows carry no flight uuid")
                && failed[0].reason.contains("only 0 more"),
            "{failed:?}"
        );
        // Exactly as many as the output holds: proven.
        assert!(unproven([MULTI], get, &output).is_empty());
    }

    #[tokio::test]
    async fn rows_whose_s3_key_is_null_empty_or_names_no_flight_are_anonymous() {
        let flight = u(5);
        let good = crate::data::merge::tests::row(&flight.to_string(), "X");
        let with_key = |key: Option<&str>| {
            let mut cols = good.columns().to_vec();
            cols[8] = std::sync::Arc::new(arrow_array::StringArray::from(vec![key]));
            RecordBatch::try_new(good.schema(), cols).unwrap()
        };
        let batch = arrow_select::concat::concat_batches(
            &good.schema(),
            &[
                with_key(None),
                good.clone(),
                with_key(Some("")),
                with_key(Some("flights/year=2026/month=07/day=20/not-a-uuid.json.gz")),
            ],
        )
        .unwrap();
        let got = RowFlights::of_batch(&batch);
        assert_eq!(got, rows(&[5], 3));
        assert_eq!(got.rows(), 4);
        // Read back from Parquet (`s3_key` alone, by the bounded reader), the same.
        let body = bytes::Bytes::from(
            crate::data::merge::encode(std::slice::from_ref(&batch), 16).unwrap(),
        );
        let store = crate::infra::storage::MemoryStore::new("b");
        let budget = crate::data::input::Budget::default();
        let read_back = crate::data::input::row_flights_of_body(&store, "k", body, budget).await;
        let read_back = read_back.unwrap().unwrap();
        assert_eq!(read_back, rows(&[5], 3));
        let output = OutputFlights::new(read_back);
        assert!(output.flights.contains(&flight));
        // Recorded for a per-flight file of that flight: not its own row only.
        let mut read = ReadRows::default();
        read.insert(&per_flight(5), RowFlights::of_batch(&batch));
        assert_eq!(read.get(&per_flight(5)), Some(InputRows::Rows(rows(&[5], 3))));
        // Three anonymous rows in the input, as many in the output: proven;
        // one fewer in the output: not.
        assert!(unproven([per_flight(5).as_str()], |k| read.get(k), &output).is_empty());
        let short = OutputFlights::new(rows(&[5], 2));
        assert_eq!(unproven([per_flight(5).as_str()], |k| read.get(k), &short).len(), 1);
        // A batch without an s3_key column: every row is anonymous.
        let no_key = good.project(&[0, 1, 2]).unwrap();
        assert_eq!(RowFlights::of_batch(&no_key), rows(&[], 1));
    }
}
