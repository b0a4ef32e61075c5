//! CloudWatch metrics: the run's figures as one `PutMetricData` call in `METRICS_NAMESPACE`, each
//! with the dimension `Bucket={S3_BUCKET}`. `WatermarkLagDays` and `MismatchUuidCount` are left out
//! when the run did not establish them ([`crate::data::mqtt::is_known`]): a missing datum is never
//! a zero. Data points carry the wall-clock start ([`run_started`]), not the invocation time
//! (`--now` or a replayed event may be past CloudWatch's two weeks); Lambda stamps `Errors` with
//! it, and `FunctionErrorsAlarm` subtracts `RunMismatch` from them per minute.
//!
//! ```
//! use archive_compaction::data::metrics::metrics;
//! use archive_compaction::data::report::{RunReport, Status};
//! use aws_sdk_cloudwatch::types::StandardUnit;
//!
//! let report = RunReport { bytes_written: 4096, last_run_status: Status::Mismatch, ..Default::default() };
//! let m = metrics(&report);
//! let get = |n: &str| m.iter().find(|m| m.name == n).unwrap();
//! assert_eq!(get("BytesWritten").value, 4096.0);
//! assert_eq!(get("BytesWritten").unit, StandardUnit::Bytes);
//! assert_eq!((get("RunSuccess").value, get("RunMismatch").value, get("RunFailure").value), (0.0, 1.0, 0.0));
//! ```

use std::time::{Duration, SystemTime};

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};

use crate::data::report::{RunReport, Status, StopReason};
use crate::infra::error::ReportError;

/// The one dimension of every metric; its value is the bucket name.
pub(crate) const BUCKET_DIMENSION: &str = "Bucket";

/// Bound on the whole PutMetricData call, retries included.
pub const CLOUDWATCH_TIMEOUT: Duration = Duration::from_secs(10);

/// One metric value.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// The metric name, e.g. `FilesCompacted`.
    pub name: &'static str,
    /// The value, in `unit`.
    pub value: f64,
    /// `Count`, `Bytes` or `Seconds`.
    pub unit: StandardUnit,
}

/// The metrics for `report`; the watermark lag in days (or days ahead).
pub fn metrics(report: &RunReport) -> Vec<Metric> {
    let metric = |name, value, unit| Metric { name, value, unit };
    let count = |name, value: u64| metric(name, value as f64, StandardUnit::Count);
    let status = report.last_run_status;
    let mut m = vec![
        count("FilesCompacted", report.files_compacted),
        count("FilesDeleteFailed", report.files_delete_failed),
        count("DaysCompacted", report.days_compacted),
        count("MismatchRuns", u64::from(report.mismatch_runs)),
        count("ManifestsRecovered", report.manifests_recovered),
        count("FilesSkipped", report.skipped_files_total),
        count("RowsWritten", report.rows_written),
        metric("BytesWritten", report.bytes_written as f64, StandardUnit::Bytes),
        count("DuplicatesRemoved", report.duplicates_removed),
        metric("RunDurationSeconds", report.duration_seconds, StandardUnit::Seconds),
        count("RunSuccess", u64::from(status == Status::Success)),
        count("RunMismatch", u64::from(status == Status::Mismatch)),
        count("RunFailure", u64::from(status == Status::Failure)),
    ];
    if crate::data::mqtt::is_known(report, "mismatch_uuid_count") {
        m.push(count("MismatchUuidCount", report.mismatch_uuid_count));
    }
    // A run that found the lease held did not establish the lag; a 0 would clear the alarm.
    let lag = (report.watermark_lag_days).filter(|_| report.stop_reason != StopReason::LeaseHeld);
    if let Some(lag) = lag {
        // A watermark ahead of the cutoff is as wrong as one behind: the alarm fires.
        let lag = lag.max(report.watermark_ahead_days.unwrap_or(0));
        // CloudWatch has no "Days" unit: a count of days.
        m.push(Metric { name: "WatermarkLagDays", value: lag as f64, unit: StandardUnit::Count });
    }
    m
}

/// The run's wall-clock start: `now` (when reported) minus `duration_seconds`.
pub fn run_started(now: SystemTime, report: &RunReport) -> SystemTime {
    let took = Duration::try_from_secs_f64(report.duration_seconds).unwrap_or_default();
    now.checked_sub(took).unwrap_or(now)
}

/// The data points for `metrics`, each with `Bucket={bucket}` and timestamp `at`.
pub(crate) fn metric_data(metrics: &[Metric], bucket: &str, at: SystemTime) -> Vec<MetricDatum> {
    let dimension = Dimension::builder().name(BUCKET_DIMENSION).value(bucket).build();
    metrics
        .iter()
        .map(|m| {
            MetricDatum::builder()
                .metric_name(m.name)
                .dimensions(dimension.clone())
                .value(m.value)
                .unit(m.unit.clone())
                .timestamp(DateTime::from(at))
                .build()
        })
        .collect()
}

/// Sends `metrics` in one PutMetricData call within `timeout`.
///
/// Errors: [`ReportError::CloudWatch`] (after the SDK's retries), [`ReportError::CloudWatchTimeout`].
pub async fn put(
    client: &aws_sdk_cloudwatch::Client,
    namespace: &str,
    bucket: &str,
    metrics: &[Metric],
    at: SystemTime,
    timeout: Duration,
) -> Result<(), ReportError> {
    let started = std::time::Instant::now();
    let call = client
        .put_metric_data()
        .namespace(namespace)
        .set_metric_data(Some(metric_data(metrics, bucket, at)))
        .send();
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(_)) => {
            tracing::info!(
                namespace,
                bucket,
                metrics = metrics.len(),
                seconds = crate::infra::text::millis(started.elapsed().as_secs_f64()),
                "CloudWatch metrics published"
            );
            Ok(())
        }
        Ok(Err(e)) => Err(ReportError::CloudWatch {
            namespace: namespace.to_string(),
            reason: crate::infra::storage::sdk_error_line(&e),
        }),
        Err(_) => Err(ReportError::CloudWatchTimeout { namespace: namespace.to_string(), timeout }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hot_status_and_units() {
        for (status, hot) in [
            (Status::Success, "RunSuccess"),
            (Status::Mismatch, "RunMismatch"),
            (Status::Failure, "RunFailure"),
        ] {
            let report = RunReport {
                last_run_status: status,
                watermark_lag_days: Some(3),
                duration_seconds: 1.5,
                ..Default::default()
            };
            let m = metrics(&report);
            assert_eq!(m.len(), 15);
            for name in ["RunSuccess", "RunMismatch", "RunFailure"] {
                let v = m.iter().find(|x| x.name == name).unwrap().value;
                assert_eq!(v, if name == hot { 1.0 } else { 0.0 }, "{name}");
            }
            let lag = m.iter().find(|x| x.name == "WatermarkLagDays").unwrap();
            assert_eq!((lag.value, &lag.unit), (3.0, &StandardUnit::Count));
            let d = m.iter().find(|x| x.name == "RunDurationSeconds").unwrap();
            assert_eq!((d.value, &d.unit), (1.5, &StandardUnit::Seconds));
        }
    }

    #[test]
    fn a_run_that_found_the_lease_held_publishes_no_lag() {
        let r = RunReport {
            watermark_lag_days: Some(0),
            stop_reason: StopReason::LeaseHeld,
            ..Default::default()
        };
        assert!(!metrics(&r).iter().any(|x| x.name == "WatermarkLagDays"));
    }

    #[test]
    fn unknown_watermark_lag_is_left_out() {
        let m = metrics(&RunReport::default());
        assert_eq!(m.len(), 13);
        assert!(!m.iter().any(|x| x.name == "WatermarkLagDays"));
        assert!(!m.iter().any(|x| x.name == "MismatchUuidCount"));
    }

    #[test]
    fn a_mismatch_count_the_walk_did_not_establish_is_left_out() {
        // The state blocked on a date (mismatch_runs 2) that this run did
        // not record a mismatch on (`--date`, a range, a Failure before it).
        let r = RunReport { watermark_lag_days: Some(1), mismatch_runs: 2, ..Default::default() };
        let m = metrics(&r);
        assert!(!m.iter().any(|x| x.name == "MismatchUuidCount"));
        let runs = m.iter().find(|x| x.name == "MismatchRuns").unwrap();
        assert_eq!(runs.value, 2.0, "the state's count, unchanged");
    }

    #[test]
    fn every_datum_has_the_bucket_dimension() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let data = metric_data(&metrics(&RunReport::default()), "archive", at);
        for d in &data {
            assert_eq!(d.dimensions().len(), 1);
            assert_eq!(d.dimensions()[0].name(), Some(BUCKET_DIMENSION));
            assert_eq!(d.dimensions()[0].value(), Some("archive"));
            assert_eq!(d.timestamp().unwrap().secs(), 1_800_000_000);
        }
    }
}
