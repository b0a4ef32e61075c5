//! Reporting of a finished run to CloudWatch ([`crate::metrics`]) and MQTT
//! ([`crate::mqtt`]).
//!
//! Guarantees:
//!
//! - Reporting never changes the outcome of a run: `last_run_status`, the
//!   exit code and the data work stand whatever happens here. A failure is
//!   logged and appended to [`RunReport::report_errors`] as the text of a
//!   [`ReportError`] (prefixed `MQTT` or `CloudWatch`).
//! - Every run is reported, Failure runs included, with what the report
//!   knows: a value the run could not establish (the watermark or mismatch
//!   state when the state file could not be read) is not published over
//!   MQTT, so the retained last known value stays
//!   ([`crate::mqtt::is_known`]).
//! - A dry run (`--dry-run`) is not reported: it writes nothing, and its
//!   figures would overwrite the last real run's retained topics.
//! - The MQTT password comes from [`Deps::mqtt_password`]: the Secrets
//!   Manager secret `MQTT_PASSWORD_SECRET_ARN` (read once per process, then
//!   cached) or `MQTT_PASSWORD`. A secret that cannot be read is a
//!   [`ReportError::MqttSecret`] and nothing goes to MQTT.
//! - Both sinks are bounded in time: MQTT by `MQTT_TIMEOUT_SECONDS` (the
//!   first secret read by the same bound again),
//!   CloudWatch by [`crate::metrics::CLOUDWATCH_TIMEOUT`]. They run
//!   concurrently, so reporting takes at most the longer of the two.
//! - What is published is a pure function of the report
//!   ([`crate::mqtt::statistics`], [`crate::mqtt::discovery`],
//!   [`crate::metrics::metrics`]).

use std::time::{Duration, SystemTime};

use crate::app::Deps;
use crate::report::RunReport;

/// A reporting failure. Its text lands in [`RunReport::report_errors`]; it
/// never changes the run's status.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The MQTT client could not be set up (TLS roots, CA file).
    #[error("MQTT {broker}: TLS setup failed: {reason}")]
    MqttTls {
        /// `host:port` of the broker.
        broker: String,
        /// What is wrong (unreadable `MQTT_CA_FILE`, no certificate in it, no system roots).
        reason: String,
    },

    /// The broker refused or dropped the connection, or a request failed.
    #[error("MQTT {broker}: {reason} ({acked} of {total} messages acknowledged)")]
    Mqtt {
        /// `host:port` of the broker.
        broker: String,
        /// The client's error (connection refused, not authorised, I/O error...).
        reason: String,
        /// Messages the broker acknowledged (PUBACK) before the failure.
        acked: usize,
        /// Messages that were to be published.
        total: usize,
    },

    /// Connect, publish and disconnect did not finish within `MQTT_TIMEOUT_SECONDS`.
    #[error(
        "MQTT {broker}: timed out after {} s while {stage} ({acked} of {total} messages acknowledged)",
        timeout.as_secs_f64()
    )]
    MqttTimeout {
        /// `host:port` of the broker.
        broker: String,
        /// The bound (`MQTT_TIMEOUT_SECONDS`).
        timeout: Duration,
        /// What was under way: `connecting`, `publishing` or `disconnecting`.
        stage: &'static str,
        /// Messages the broker acknowledged (PUBACK) in time.
        acked: usize,
        /// Messages that were to be published.
        total: usize,
    },

    /// The MQTT password could not be read from Secrets Manager
    /// (`MQTT_PASSWORD_SECRET_ARN`); nothing was published to MQTT.
    #[error("MQTT password secret {secret}: {reason}; nothing was published to MQTT")]
    MqttSecret {
        /// The secret's ARN or name (`MQTT_PASSWORD_SECRET_ARN`).
        secret: String,
        /// The SDK's error (ResourceNotFoundException, AccessDeniedException...)
        /// or what is wrong with the secret.
        reason: String,
    },

    /// PutMetricData failed (after the SDK's retries).
    #[error("CloudWatch PutMetricData to namespace {namespace}: {reason}")]
    CloudWatch {
        /// The namespace (`METRICS_NAMESPACE`).
        namespace: String,
        /// The SDK's error with its code and message.
        reason: String,
    },

    /// PutMetricData did not finish within [`crate::metrics::CLOUDWATCH_TIMEOUT`].
    #[error(
        "CloudWatch PutMetricData to namespace {namespace}: timed out after {} s",
        timeout.as_secs_f64()
    )]
    CloudWatchTimeout {
        /// The namespace (`METRICS_NAMESPACE`).
        namespace: String,
        /// The bound.
        timeout: Duration,
    },
}

/// Publishes the report to CloudWatch (when `deps.cloudwatch` is set and
/// `METRICS_ENABLED`) and MQTT (when `MQTT_HOST` is set), concurrently.
/// Failures are logged and appended to `report.report_errors`; nothing else
/// in the report changes.
pub async fn publish(deps: &Deps, report: &mut RunReport) {
    if report.dry_run {
        tracing::info!("dry run: nothing is reported to CloudWatch or MQTT");
        return;
    }
    let cloudwatch = async {
        match &deps.cloudwatch {
            Some(client) if deps.config.metrics_enabled => Some(
                crate::metrics::put(
                    client,
                    &deps.config.metrics_namespace,
                    &deps.config.bucket,
                    &crate::metrics::metrics(report),
                    SystemTime::now(),
                )
                .await,
            ),
            _ => None,
        }
    };
    let mqtt = async {
        match &deps.config.mqtt {
            Some(m) => {
                // Configs first, so that this run's values are read with them.
                let mut messages = crate::mqtt::discovery(&m.topic_root, &deps.config.bucket);
                messages.extend(crate::mqtt::statistics(report, &m.topic_root));
                Some(match deps.mqtt_password().await {
                    Ok(password) => {
                        let config = crate::config::MqttConfig {
                            password,
                            ..m.clone()
                        };
                        crate::mqtt::publish(&config, &messages).await
                    }
                    Err(e) => Err(e),
                })
            }
            None => None,
        }
    };
    let (cloudwatch, mqtt) = tokio::join!(cloudwatch, mqtt);
    for error in [cloudwatch, mqtt]
        .into_iter()
        .flatten()
        .filter_map(Result::err)
    {
        tracing::warn!(error = %error, status = report.last_run_status.as_str(), "reporting failed; the run's outcome stands");
        report.report_errors.push(error.to_string());
    }
}
