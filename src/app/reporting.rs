//! Reporting of a finished run to CloudWatch and MQTT. It never changes the run's outcome: a
//! failure is logged and appended to [`RunReport::report_errors`]. Every run is reported, Failures
//! included, bar a dry run (its figures would overwrite the last real run's).

use std::time::{Duration, Instant, SystemTime};

use super::aws::Deps;
use crate::data::report::RunReport;
use crate::infra::error::ReportError;

/// The least each reporting call is given near the run's deadline, out of
/// [`crate::infra::storage::S3_DEADLINE_MARGIN`].
pub const SINK_TIME_AT_THE_END: Duration = Duration::from_secs(1);

/// `timeout`, or the time left before `deadline` less `later` (kept for
/// the calls after), but never less than [`SINK_TIME_AT_THE_END`].
fn bound(timeout: Duration, deadline: Option<Instant>, later: Duration) -> Duration {
    deadline.map_or(timeout, |d| {
        let left = d.saturating_duration_since(Instant::now());
        timeout.min(left.saturating_sub(later).max(SINK_TIME_AT_THE_END))
    })
}

/// Publishes to CloudWatch (when `METRICS_ENABLED`) and MQTT (when `MQTT_HOST` is set) at once.
pub async fn publish_by(deps: &Deps, report: &mut RunReport, deadline: Option<Instant>) {
    if report.dry_run {
        tracing::info!("dry run: nothing is reported to CloudWatch or MQTT");
        return;
    }
    let config = &deps.config;
    let cloudwatch = async {
        use crate::data::metrics::{CLOUDWATCH_TIMEOUT, metrics, put, run_started};
        let client = deps.cloudwatch.as_ref().filter(|_| config.metrics_enabled)?;
        let (metrics, started) = (metrics(report), run_started(SystemTime::now(), report));
        let timeout = bound(CLOUDWATCH_TIMEOUT, deadline, Duration::ZERO);
        let namespace = &config.metrics_namespace;
        Some(put(client, namespace, &config.bucket, &metrics, started, timeout).await)
    };
    let mqtt = async {
        let Some(m) = &config.mqtt else {
            return vec![];
        };
        // Configs first, so that this run's values are read with them.
        let mut messages = crate::data::mqtt::discovery(&m.topic_root, &config.bucket);
        messages.extend(crate::data::mqtt::statistics(report, &m.topic_root));
        let secret_bound = bound(m.timeout, deadline, SINK_TIME_AT_THE_END);
        let password =
            tokio::time::timeout(secret_bound, deps.mqtt_password()).await.unwrap_or_else(|_| {
                Err(ReportError::MqttSecret {
                    secret: m.password_secret_arn.clone().unwrap_or_default(),
                    reason: format!(
                        "GetSecretValue not answered within {} s, the time left before the run's deadline",
                        secret_bound.as_secs_f64()
                    ),
                })
            });
        match password {
            Ok(password) => {
                let timeout = bound(m.timeout, deadline, Duration::ZERO);
                let config = crate::data::config::MqttConfig { password, timeout, ..m.clone() };
                crate::data::mqtt::publish(&config, &messages).await
            }
            Err(e) => vec![e],
        }
    };
    let (cloudwatch, mqtt) = tokio::join!(cloudwatch, mqtt);
    for error in (cloudwatch.and_then(Result::err).into_iter()).chain(mqtt) {
        tracing::warn!(error = %error, status = report.last_run_status.as_str(), "reporting failed; the run's outcome stands");
        report.report_errors.push(error.to_string());
    }
}
