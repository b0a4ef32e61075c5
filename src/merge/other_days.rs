//! Rows of other days: rows of a multi-row input whose flight belongs to
//! another date than the partition's (the UTC date of `first_message` is not
//! the partition's date, as in a backfill file that mixes days). They are
//! merged where they sit, counted and named, never moved (moving rows across
//! partitions is a repair of its own).

use super::*;

/// How many flight uuids [`OtherDays`] keeps (its count is complete).
pub const OTHER_DAYS_UUIDS_SHOWN: usize = 10;

/// Rows of other days found in one or more inputs of a date.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtherDays {
    /// Rows whose `first_message` UTC date is not the partition's date
    /// (rows without a `first_message` are not counted).
    pub rows: u64,
    /// The flights of the first [`OTHER_DAYS_UUIDS_SHOWN`] of them (rows
    /// without an `s3_key` uuid are counted, not named), in the order read.
    pub uuids: Vec<Uuid>,
}

impl OtherDays {
    /// Counts the rows of `decoded` (conformed to [`target_schema`]) whose
    /// `first_message` falls on another UTC date than `date`, into `self`.
    ///
    /// ```
    /// use archive_compaction::merge::{OtherDays, decode, encode, target_schema};
    /// use arrow_array::RecordBatch;
    /// let empty = RecordBatch::new_empty(target_schema());
    /// let d = decode(encode(&[empty], 10).unwrap().into()).unwrap();
    /// let mut o = OtherDays::default();
    /// o.count(&d, chrono::NaiveDate::from_ymd_opt(2026, 7, 20).unwrap());
    /// assert_eq!(o, OtherDays::default());
    /// ```
    pub fn count(&mut self, decoded: &Decoded, date: chrono::NaiveDate) {
        let b = &decoded.batch;
        let (Ok(fm), Ok(sk)) = (
            b.schema().index_of("first_message"),
            b.schema().index_of("s3_key"),
        ) else {
            return;
        };
        let Some(first) = b
            .column(fm)
            .as_primitive_opt::<arrow_array::types::TimestampMicrosecondType>()
        else {
            return;
        };
        let keys = b.column(sk).as_string_opt::<i32>();
        for row in 0..b.num_rows() {
            if !first.is_valid(row) {
                continue;
            }
            let on = DateTime::from_timestamp_micros(first.value(row)).map(|t| t.date_naive());
            if on.is_none_or(|on| on == date) {
                continue;
            }
            self.rows += 1;
            if self.uuids.len() < OTHER_DAYS_UUIDS_SHOWN
                && let Some(u) = keys
                    .filter(|k| k.is_valid(row))
                    .and_then(|k| flight_uuid(k.value(row)))
            {
                self.uuids.push(u);
            }
        }
    }

    /// Adds the rows counted in `other` (its uuids while fewer than
    /// [`OTHER_DAYS_UUIDS_SHOWN`] are kept).
    pub fn add(&mut self, other: OtherDays) {
        self.rows += other.rows;
        let room = OTHER_DAYS_UUIDS_SHOWN.saturating_sub(self.uuids.len());
        self.uuids.extend(other.uuids.into_iter().take(room));
    }
}
