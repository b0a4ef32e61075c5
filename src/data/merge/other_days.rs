//! Rows of other days: rows of a multi-row input whose `first_message` UTC
//! date is not the partition's; merged where they sit, counted, never moved.

use super::*;
use crate::infra::text::Shortened;

/// How many flight uuids [`OtherDays`] keeps (its count is complete).
pub const OTHER_DAYS_UUIDS_SHOWN: usize = 10;

/// The UTC instant of a raw `first_message` (`v` in `unit`, floored to the
/// second so a value before 1970 stays on its day); `None` outside chrono's
/// range. The one reading, for the merge and the audit.
///
/// ```
/// use archive_compaction::data::merge::first_message_at;
/// use arrow_schema::TimeUnit;
/// let t = first_message_at(-1, TimeUnit::Microsecond).unwrap();
/// assert_eq!(t.to_rfc3339(), "1969-12-31T23:59:59.999999+00:00");
/// assert_eq!(first_message_at(i64::MAX, TimeUnit::Second), None);
/// ```
pub fn first_message_at(v: i64, unit: TimeUnit) -> Option<DateTime<Utc>> {
    let per_sec: i64 = match unit {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    };
    let nanos = v.rem_euclid(per_sec) * (1_000_000_000 / per_sec);
    DateTime::from_timestamp(v.div_euclid(per_sec), nanos as u32)
}

/// Whether a row's `first_message` is on another UTC day than its partition's
/// `date` (one without is not): the rule of `rows_of_other_days` and the audit's `other_day_rows`.
///
/// ```
/// use archive_compaction::data::merge::is_other_day;
/// let d = chrono::NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
/// let at = |s: &str| Some(s.parse::<chrono::DateTime<chrono::Utc>>().unwrap());
/// assert!(!is_other_day(at("2026-07-20T23:59:59.999999Z"), d));
/// assert!(is_other_day(at("2026-07-19T23:59:59.999999Z"), d));
/// assert!(!is_other_day(None, d));
/// ```
pub fn is_other_day(first_message: Option<DateTime<Utc>>, date: chrono::NaiveDate) -> bool {
    first_message.is_some_and(|t| t.date_naive() != date)
}

/// Rows of other days found in one or more inputs of a date.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtherDays {
    /// Rows whose `first_message` UTC date is not the partition's.
    pub rows: u64,
    /// The flights of the first [`OTHER_DAYS_UUIDS_SHOWN`] rows, in the order read.
    pub uuids: Vec<Uuid>,
}

impl OtherDays {
    /// Counts the rows of `decoded` that are [`is_other_day`] for `date`.
    ///
    /// ```
    /// use archive_compaction::data::merge::{OtherDays, decode, encode, target_schema};
    /// use arrow_array::RecordBatch;
    /// let empty = RecordBatch::new_empty(target_schema());
    /// let d = decode(encode(&[empty], 10).unwrap().into()).unwrap();
    /// let mut o = OtherDays::default();
    /// o.count(&d, chrono::NaiveDate::from_ymd_opt(2026, 7, 20).unwrap());
    /// assert_eq!(o, OtherDays::default());
    /// ```
    pub fn count(&mut self, decoded: &Decoded, date: chrono::NaiveDate) {
        let b = &decoded.batch;
        let (Ok(fm), Ok(sk)) =
            (b.schema().index_of("first_message"), b.schema().index_of("s3_key"))
        else {
            return;
        };
        let Some(first) =
            b.column(fm).as_primitive_opt::<arrow_array::types::TimestampMicrosecondType>()
        else {
            return;
        };
        let keys = b.column(sk).as_string_opt::<i32>();
        for (row, v) in first.iter().enumerate() {
            let at = v.and_then(|v| first_message_at(v, TimeUnit::Microsecond));
            let flight = keys.filter(|k| k.is_valid(row)).and_then(|k| flight_uuid(k.value(row)));
            self.count_row(at, flight, date);
        }
    }

    /// Counts one row (`s3_key` naming `flight`) when [`is_other_day`].
    pub(crate) fn count_row(
        &mut self,
        first_message: Option<DateTime<Utc>>,
        flight: Option<Uuid>,
        date: chrono::NaiveDate,
    ) {
        if !is_other_day(first_message, date) {
            return;
        }
        self.rows += 1;
        if let Some(u) = flight {
            Shortened::new(&mut self.uuids, OTHER_DAYS_UUIDS_SHOWN).push(u);
        }
    }

    /// Adds the rows counted in `other`.
    pub fn add(&mut self, other: OtherDays) {
        self.rows += other.rows;
        Shortened::new(&mut self.uuids, OTHER_DAYS_UUIDS_SHOWN).add(0, other.uuids.into_iter());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_in_every_unit() {
        let t = first_message_at(1_784_505_599_999_999, TimeUnit::Microsecond).unwrap();
        assert_eq!(t.to_rfc3339(), "2026-07-19T23:59:59.999999+00:00");
        assert_eq!(
            first_message_at(-1, TimeUnit::Second).unwrap().to_rfc3339(),
            "1969-12-31T23:59:59+00:00"
        );
        assert_eq!(
            first_message_at(1_784_505_600_000_000_123, TimeUnit::Nanosecond).unwrap().date_naive(),
            chrono::NaiveDate::from_ymd_opt(2026, 7, 20).unwrap()
        );
    }
}
