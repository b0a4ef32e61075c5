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
//! - The MQTT password comes from [`crate::app::Deps::mqtt_password`]: the Secrets
//!   Manager secret `MQTT_PASSWORD_SECRET_ARN` (read once per process, then
//!   cached) or `MQTT_PASSWORD`. A secret that cannot be read is a
//!   [`ReportError::MqttSecret`] and nothing goes to MQTT.
//! - Both sinks are bounded in time: MQTT by `MQTT_TIMEOUT_SECONDS` (the
//!   first secret read by the same bound again),
//!   CloudWatch by [`crate::metrics::CLOUDWATCH_TIMEOUT`]. They run
//!   concurrently, so reporting takes at most the longer of the two.
//! - One MQTT topic that cannot be published does not keep the others
//!   back: a payload over [`crate::mqtt::MAX_PAYLOAD_BYTES`] is left out
//!   and named in its own `report_errors` entry, a message the broker
//!   closes the connection at is left out and named while the rest go on a
//!   new connection ([`crate::mqtt::publish`]), and a failed exchange
//!   names the topics the broker did not acknowledge.
//! - What is published is a pure function of the report
//!   ([`crate::mqtt::statistics`], [`crate::mqtt::discovery`],
//!   [`crate::metrics::metrics`]).

use std::time::SystemTime;

use crate::config::Config;
use crate::report::RunReport;

pub use crate::error::ReportError;

/// What [`publish`] reports through: the settings, the CloudWatch client and
/// where the MQTT password comes from. [`crate::app::Deps`] implements it;
/// a test can implement it without building AWS clients.
pub trait Sinks: Sync {
    /// The settings (`METRICS_*`, `MQTT_*`, the bucket).
    fn config(&self) -> &Config;
    /// The CloudWatch client, when one was built.
    fn cloudwatch(&self) -> Option<&aws_sdk_cloudwatch::Client>;
    /// The MQTT password (`MQTT_PASSWORD`, or the secret
    /// `MQTT_PASSWORD_SECRET_ARN`); `None` for no password.
    ///
    /// Errors: [`ReportError::MqttSecret`] when the secret cannot be read.
    fn mqtt_password(
        &self,
    ) -> impl std::future::Future<Output = Result<Option<String>, ReportError>> + Send;
}

/// Publishes the report to CloudWatch (when `deps.cloudwatch` is set and
/// `METRICS_ENABLED`) and MQTT (when `MQTT_HOST` is set), concurrently.
/// Failures are logged and appended to `report.report_errors`; nothing else
/// in the report changes.
pub async fn publish(deps: &impl Sinks, report: &mut RunReport) {
    if report.dry_run {
        tracing::info!("dry run: nothing is reported to CloudWatch or MQTT");
        return;
    }
    let cloudwatch = async {
        match deps.cloudwatch() {
            Some(client) if deps.config().metrics_enabled => Some(
                crate::metrics::put(
                    client,
                    &deps.config().metrics_namespace,
                    &deps.config().bucket,
                    &crate::metrics::metrics(report),
                    crate::metrics::run_started(SystemTime::now(), report),
                )
                .await,
            ),
            _ => None,
        }
    };
    let mqtt = async {
        match &deps.config().mqtt {
            Some(m) => {
                // Configs first, so that this run's values are read with them.
                let mut messages = crate::mqtt::discovery(&m.topic_root, &deps.config().bucket);
                messages.extend(crate::mqtt::statistics(report, &m.topic_root));
                match deps.mqtt_password().await {
                    Ok(password) => {
                        let config = crate::config::MqttConfig {
                            password,
                            ..m.clone()
                        };
                        crate::mqtt::publish(&config, &messages).await
                    }
                    Err(e) => vec![e],
                }
            }
            None => vec![],
        }
    };
    let (cloudwatch, mqtt) = tokio::join!(cloudwatch, mqtt);
    for error in (cloudwatch.and_then(Result::err).into_iter()).chain(mqtt) {
        tracing::warn!(error = %error, status = report.last_run_status.as_str(), "reporting failed; the run's outcome stands");
        report.report_errors.push(error.to_string());
    }
}
