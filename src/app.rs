//! Wiring: clients built once ([`Deps::new`]), the Lambda handler
//! ([`handle`]) and the entry point both shells share ([`invoke`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_s3::config::SharedHttpClient;
use aws_smithy_http_client::proxy::ProxyConfig;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_http_client::{Builder, ConnectorBuilder};
use chrono::{DateTime, NaiveDate, Utc};
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde::Deserialize;

use crate::config::Config;
use crate::error::ReportError;
use crate::report::{RunReport, Status};
use crate::run::{RunOptions, run};
use crate::storage::S3Store;

/// Everything a run needs, built once per process (in Lambda: once per
/// execution environment, shared by every invocation it serves).
#[derive(Debug, Clone)]
pub struct Deps {
    /// Settings.
    pub config: Config,
    /// The S3 seam for `config.bucket`.
    pub store: S3Store,
    /// CloudWatch client (metrics), when enabled.
    pub cloudwatch: Option<aws_sdk_cloudwatch::Client>,
    /// Secrets Manager client, when `MQTT_PASSWORD_SECRET_ARN` is set.
    pub secrets: Option<aws_sdk_secretsmanager::Client>,
    /// The MQTT password read from the secret: filled by the first
    /// successful read, then reused (a failed read is tried again by the
    /// next invocation).
    mqtt_password: Arc<tokio::sync::OnceCell<String>>,
    /// The stop request every invocation's run follows (SIGTERM: Lambda's
    /// shutdown; [`crate::stop::Stop::listen`] in `main`).
    pub stop: crate::stop::Stop,
}

impl crate::reporting::Sinks for Deps {
    fn config(&self) -> &Config {
        &self.config
    }

    fn cloudwatch(&self) -> Option<&aws_sdk_cloudwatch::Client> {
        self.cloudwatch.as_ref()
    }

    fn mqtt_password(
        &self,
    ) -> impl std::future::Future<Output = Result<Option<String>, ReportError>> + Send {
        Deps::mqtt_password(self)
    }
}

/// SDK retry policy for every call: 3 attempts, exponential backoff from 1 s
/// with jitter (the SDK's standard strategy retries throttling, 5xx,
/// timeouts and connection errors; 4xx such as AccessDenied are not retried).
pub fn retry_config() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_secs(1))
}

/// The HTTPS client of every AWS client (S3, CloudWatch, and the credential
/// providers'): the SDK's own client (hyper 1, rustls 0.23) with rustls'
/// *ring* provider, the one rumqttc's rustls uses for MQTT over TLS, and the
/// proxy from `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` as the SDK's default
/// client takes it. The SDK's default client is the same on aws-lc-rs, whose
/// C library a cold build compiles from source; with this one the process
/// has a single crypto provider. Trusts the system's root certificates.
pub fn https_client() -> SharedHttpClient {
    Builder::new().build_with_connector_fn(|settings, components| {
        let mut conn =
            ConnectorBuilder::default().tls_provider(tls::Provider::Rustls(CryptoMode::Ring));
        conn.set_connector_settings(settings.cloned());
        if let Some(components) = components {
            conn.set_sleep_impl(components.sleep_impl());
        }
        conn.set_proxy_config(Some(ProxyConfig::from_env()));
        conn.build()
    })
}

/// The S3 client's configuration, from the loaded SDK configuration: path
/// style when asked (local S3 servers), and response checksums validated
/// only where an operation requires it.
///
/// Why not on every GET (the SDK's default, `WhenSupported`, which asks S3
/// for the object's checksum and recomputes it over every body: about 4 % of
/// the job's CPU, `make bench`): the GETs are the index files, and the small
/// JSON state objects (lease, watermark, manifest). In transit each response
/// is already authenticated by TLS; at rest S3 checks its own checksums. An
/// index file is then decoded as Parquet (magic, footer, page headers and
/// decompression reject a truncated or garbled body, and the file is left in
/// place and reported), its ETag is recorded in the manifest and compared
/// again before anything is deleted; the state objects are parsed as JSON.
/// What this job writes keeps full integrity checks: every PUT carries its
/// SHA-256, which S3 verifies, the output is checked by HEAD against the
/// manifest, and DeleteObjects keeps its request checksum (S3 requires one);
/// request checksums stay at the SDK default.
pub fn s3_config(sdk: &aws_config::SdkConfig, force_path_style: bool) -> aws_sdk_s3::Config {
    aws_sdk_s3::config::Builder::from(sdk)
        .force_path_style(force_path_style)
        .response_checksum_validation(aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired)
        .build()
}

impl Deps {
    /// Loads the AWS configuration (region, credentials, `AWS_ENDPOINT_URL`)
    /// and builds the clients ([`https_client`]).
    pub async fn new(config: Config) -> Deps {
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .http_client(https_client())
            .retry_config(retry_config())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(crate::storage::CONNECT_TIMEOUT)
                    .operation_attempt_timeout(crate::storage::ATTEMPT_TIMEOUT_BASE)
                    .build(),
            )
            .load()
            .await;
        let s3 = aws_sdk_s3::Client::from_conf(s3_config(&sdk, config.force_path_style));
        let cloudwatch = config
            .metrics_enabled
            .then(|| aws_sdk_cloudwatch::Client::new(&sdk));
        let secrets = config
            .mqtt
            .as_ref()
            .and_then(|m| m.password_secret_arn.as_ref())
            .map(|_| aws_sdk_secretsmanager::Client::new(&sdk));
        let store = S3Store::new(s3, config.bucket.clone())
            .with_multipart(config.multipart_threshold, config.multipart_part_size);
        Deps::from_parts(config, store, cloudwatch, secrets)
    }

    /// Deps from clients built elsewhere (tests, tools), with an empty
    /// password cache.
    pub fn from_parts(
        config: Config,
        store: S3Store,
        cloudwatch: Option<aws_sdk_cloudwatch::Client>,
        secrets: Option<aws_sdk_secretsmanager::Client>,
    ) -> Deps {
        Deps {
            config,
            store,
            cloudwatch,
            secrets,
            mqtt_password: Arc::new(tokio::sync::OnceCell::new()),
            stop: crate::stop::Stop::new(),
        }
    }

    /// The MQTT password: the `SecretString` of `MQTT_PASSWORD_SECRET_ARN`
    /// when set, read with GetSecretValue on the first call and cached for
    /// the life of the process (a Lambda execution environment); else
    /// `MQTT_PASSWORD`. `Ok(None)` when neither is set or MQTT is off.
    ///
    /// The read is bounded by `MQTT_TIMEOUT_SECONDS`. Errors:
    /// [`ReportError::MqttSecret`] (not found, access denied, a binary
    /// secret, no client, timed out); nothing is cached then, so the next
    /// invocation reads again.
    pub async fn mqtt_password(&self) -> Result<Option<String>, ReportError> {
        let Some(mqtt) = &self.config.mqtt else {
            return Ok(None);
        };
        let Some(arn) = &mqtt.password_secret_arn else {
            return Ok(mqtt.password.clone());
        };
        let fail = |reason: String| ReportError::MqttSecret {
            secret: arn.clone(),
            reason,
        };
        let client = self
            .secrets
            .as_ref()
            .ok_or_else(|| fail("no Secrets Manager client was built".into()))?;
        let read = async {
            let out = client
                .get_secret_value()
                .secret_id(arn)
                .send()
                .await
                .map_err(|e| fail(crate::storage::sdk_error_line(&e)))?;
            match out.secret_string {
                Some(s) => Ok(s),
                None => Err(fail(
                    "the secret has no SecretString (a binary secret?); store the password as the secret's text".into(),
                )),
            }
        };
        let bounded = async {
            tokio::time::timeout(mqtt.timeout, read)
                .await
                .unwrap_or_else(|_| {
                    Err(fail(format!(
                        "GetSecretValue timed out after {} s (MQTT_TIMEOUT_SECONDS)",
                        mqtt.timeout.as_secs_f64()
                    )))
                })
        };
        let password = self.mqtt_password.get_or_try_init(|| bounded).await?;
        Ok(Some(password.clone()))
    }
}

/// Runs one invocation and reports it (CloudWatch, MQTT). Reporting never
/// changes the status.
pub async fn invoke(deps: &Deps, opts: &RunOptions) -> RunReport {
    let mut report = run(&deps.store, &deps.config, opts).await;
    crate::reporting::publish_by(deps, &mut report, opts.deadline).await;
    report.bound();
    report
}

/// The Lambda payload: an EventBridge scheduled event, or a console test
/// event with the optional fields below, parsed strictly
/// ([`InvokeEvent::from_value`]): a field this version does not know (say
/// `dry-run`, the CLI's spelling) is an error, never ignored. EventBridge's
/// own envelope fields ([`EVENTBRIDGE_ENVELOPE`]) are the exception: they
/// are accepted and not used, bar `id` and `time`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // the envelope's fields are read by nobody
pub struct InvokeEvent {
    /// EventBridge event id (equal on redelivery).
    #[serde(default)]
    pub id: Option<String>,
    /// EventBridge event time: the invocation time (fixes the cutoff).
    #[serde(default)]
    pub time: Option<DateTime<Utc>>,
    /// Pins the invocation time (console tests); wins over `time`.
    #[serde(default)]
    pub now: Option<DateTime<Utc>>,
    /// Plan only; write nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Compact only this date (exactly `YYYY-MM-DD`).
    #[serde(default, deserialize_with = "strict_date")]
    pub date: Option<NaiveDate>,
    /// First date of a repair range (exactly `YYYY-MM-DD`, with `to`; see
    /// [`RunOptions::repair`]).
    #[serde(default, deserialize_with = "strict_date")]
    pub from: Option<NaiveDate>,
    /// Last date of a repair range (exactly `YYYY-MM-DD`, with `from`), included.
    #[serde(default, deserialize_with = "strict_date")]
    pub to: Option<NaiveDate>,
    /// EventBridge's envelope fields ([`EVENTBRIDGE_ENVELOPE`]), accepted
    /// and not used.
    #[serde(default)]
    version: Option<serde_json::Value>,
    #[serde(default, rename = "detail-type")]
    detail_type: Option<serde_json::Value>,
    #[serde(default)]
    source: Option<serde_json::Value>,
    #[serde(default)]
    account: Option<serde_json::Value>,
    #[serde(default)]
    region: Option<serde_json::Value>,
    #[serde(default)]
    resources: Option<serde_json::Value>,
    #[serde(default)]
    detail: Option<serde_json::Value>,
    #[serde(default, rename = "replay-name")]
    replay_name: Option<serde_json::Value>,
}

/// The fields of an EventBridge event other than `id` and `time`
/// (<https://docs.aws.amazon.com/eventbridge/latest/ref/overiew-event-structure.html>),
/// plus `replay-name` of a replayed event: accepted in an event and ignored.
pub const EVENTBRIDGE_ENVELOPE: &[&str] = &[
    "version",
    "detail-type",
    "source",
    "account",
    "region",
    "resources",
    "detail",
    "replay-name",
];

/// The fields of an event this version reads.
pub const EVENT_FIELDS: &[&str] = &["id", "time", "now", "dry_run", "date", "from", "to"];

/// A date field of an event: exactly `YYYY-MM-DD`, as the CLI takes it
/// ([`crate::config::parse_date`]).
fn strict_date<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<NaiveDate>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    s.map(|s| {
        crate::config::parse_date("", &s).map_err(|_| {
            serde::de::Error::custom(format!(
                "expected a date YYYY-MM-DD, got {}",
                crate::text::quote(&s)
            ))
        })
    })
    .transpose()
}

impl InvokeEvent {
    /// Parses a Lambda payload strictly: a JSON object whose fields are
    /// [`EVENT_FIELDS`] or EventBridge's envelope ([`EVENTBRIDGE_ENVELOPE`]),
    /// each of its type, then [`InvokeEvent::validate`].
    ///
    /// Errors: a message naming the field (or the payload's kind when it is
    /// not an object) and listing the accepted fields.
    pub fn from_value(payload: serde_json::Value) -> Result<InvokeEvent, String> {
        let accepted = || {
            format!(
                "accepted fields: {}; EventBridge's envelope fields ({}) are accepted and ignored",
                EVENT_FIELDS.join(", "),
                EVENTBRIDGE_ENVELOPE.join(", ")
            )
        };
        let serde_json::Value::Object(map) = payload else {
            let kind = crate::state::json_type(&payload);
            return Err(format!(
                "the event must be a JSON object (an EventBridge event or a test event such as {{\"dry_run\": true}}), got {kind}; {}",
                accepted()
            ));
        };
        for name in map.keys() {
            if !EVENT_FIELDS.contains(&name.as_str())
                && !EVENTBRIDGE_ENVELOPE.contains(&name.as_str())
            {
                return Err(format!(
                    "unknown field {} in the event; {}",
                    crate::text::quote(name),
                    accepted()
                ));
            }
        }
        // Each field alone, so the error names it.
        for (name, v) in &map {
            if EVENT_FIELDS.contains(&name.as_str()) {
                let one =
                    serde_json::Value::Object([(name.clone(), v.clone())].into_iter().collect());
                serde_json::from_value::<InvokeEvent>(one).map_err(|e| {
                    format!(
                        "field {} of the event: {}",
                        crate::text::quote(name),
                        crate::text::escape(&e.to_string())
                    )
                })?;
            }
        }
        let event: InvokeEvent =
            serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| {
                format!(
                    "the event is not an EventBridge event or a test event: {}; {}",
                    crate::text::escape(&e.to_string()),
                    accepted()
                )
            })?;
        event.validate()?;
        Ok(event)
    }

    /// Checks the fields that only make sense together.
    ///
    /// Errors: a message naming the fields: `from` without `to` (or the
    /// reverse), `date` together with `from`/`to`, `from` after `to`, a range
    /// longer than [`crate::day::MAX_RANGE_DAYS`].
    pub fn validate(&self) -> Result<(), String> {
        match (self.from, self.to) {
            (None, None) => Ok(()),
            (Some(_), None) | (None, Some(_)) => Err(
                "a repair range needs both \"from\" and \"to\" (YYYY-MM-DD, both included)".into(),
            ),
            (Some(_), Some(_)) if self.date.is_some() => Err(
                "\"date\" and \"from\"/\"to\" exclude each other: give one date or one range"
                    .into(),
            ),
            (Some(f), Some(t)) => crate::day::date_range(f, t, crate::day::RangeOf::Repair)
                .map(|_| ())
                .map_err(|e| e.to_string()),
        }
    }
}

/// The Lambda error for a Mismatch or Failure run: its type names the
/// outcome (`Mismatch`, `Failure`), its message is the report as JSON.
#[derive(Debug)]
pub struct RunError(pub RunReport);

impl From<RunError> for Diagnostic {
    fn from(e: RunError) -> Diagnostic {
        Diagnostic {
            error_type: e.0.last_run_status.as_str().to_string(),
            error_message: serde_json::to_string(&e.0).expect("report serialises"),
        }
    }
}

/// Builds [`RunOptions`] from a Lambda event and context.
pub fn options_from_event(
    event: &InvokeEvent,
    request_id: &str,
    deadline: Option<Instant>,
) -> RunOptions {
    RunOptions {
        now: event.now.or(event.time).unwrap_or_else(Utc::now),
        invocation_id: if request_id.is_empty() {
            uuid::Uuid::now_v7().to_string()
        } else {
            request_id.to_string()
        },
        event_id: event.id.clone(),
        deadline,
        dry_run: event.dry_run,
        only_date: event.date,
        repair: event.from.zip(event.to),
        clock: crate::clock::system(),
        progress: None,
        stop: None,
    }
}

/// The event `{"audit": {"from": "YYYY-MM-DD", "to": "YYYY-MM-DD"}}`
/// ([`crate::audit`]); nothing else may stand beside `audit`, and `audit`
/// takes exactly `from` and `to`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditEvent {
    /// The range.
    pub audit: AuditRange,
}

/// The range of an [`AuditEvent`], both dates included.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditRange {
    /// First date (exactly `YYYY-MM-DD`).
    #[serde(deserialize_with = "strict_date_required")]
    pub from: NaiveDate,
    /// Last date (exactly `YYYY-MM-DD`).
    #[serde(deserialize_with = "strict_date_required")]
    pub to: NaiveDate,
}

/// A required date field of an event: exactly `YYYY-MM-DD` ([`strict_date`]).
fn strict_date_required<'de, D: serde::Deserializer<'de>>(d: D) -> Result<NaiveDate, D::Error> {
    strict_date(d)?.ok_or_else(|| serde::de::Error::custom("expected a date YYYY-MM-DD, got null"))
}

/// The Lambda entry point: an event with an `audit` field is an
/// [`AuditEvent`] (the audit's report is the response when clean; an
/// error of type `AuditFindings` or `AuditIncomplete` with the report as
/// its message otherwise; no CloudWatch or MQTT report); any other event
/// goes to [`handle`].
pub async fn dispatch(
    deps: &Deps,
    event: LambdaEvent<serde_json::Value>,
) -> Result<serde_json::Value, Diagnostic> {
    if event.payload.get("audit").is_none() {
        return handle(deps, event)
            .await
            .map(|r| serde_json::to_value(r).expect("report serialises"))
            .map_err(Diagnostic::from);
    }
    let failure = |message: String| Diagnostic {
        error_type: "AuditIncomplete".into(),
        error_message: message,
    };
    let range = serde_json::from_value::<AuditEvent>(event.payload)
        .map_err(|e| {
            failure(format!(
                "an audit event is {{\"audit\": {{\"from\": \"YYYY-MM-DD\", \"to\": \"YYYY-MM-DD\"}}}} and nothing else: {e}"
            ))
        })?
        .audit;
    let left_ms = event.context.deadline as i64 - Utc::now().timestamp_millis();
    let mut opts = crate::audit::AuditOptions::range(range.from, range.to);
    opts.deadline = (left_ms > 0).then(|| Instant::now() + Duration::from_millis(left_ms as u64));
    let report = crate::audit::audit(&deps.store, &deps.config, &opts)
        .await
        .map_err(|e| failure(e.to_string()))?;
    let json = serde_json::to_value(&report).expect("report serialises");
    match report.status {
        crate::audit::AuditStatus::Clean => Ok(json),
        crate::audit::AuditStatus::Findings => Err(Diagnostic {
            error_type: "AuditFindings".into(),
            error_message: json.to_string(),
        }),
        crate::audit::AuditStatus::Incomplete => Err(failure(json.to_string())),
    }
}

/// The `message` of the log line that carries a Lambda run's report
/// ([`report_log_line`]).
pub const REPORT_LOG_MESSAGE: &str = "run report";

/// The log line of a Lambda run's report, on every outcome: one JSON
/// object shaped like the other JSON log lines (`level`, `target`,
/// `fields.message`), with the report itself, not escaped, as
/// `fields.report`. Find it in the log group with the filter pattern
/// `{ $.fields.message = "run report" }` (docs/runbook.md). A Mismatch's
/// or a Failure's report is also the message of the Lambda error, which
/// the runtime logs escaped.
pub fn report_log_line(report: &RunReport) -> String {
    let level = match report.last_run_status {
        Status::Success => "INFO",
        Status::Mismatch => "WARN",
        Status::Failure => "ERROR",
    };
    serde_json::json!({
        "level": level,
        "target": module_path!(),
        "fields": {"message": REPORT_LOG_MESSAGE, "report": report},
    })
    .to_string()
}

/// Writes [`report_log_line`] to stderr, where the tracing lines go (the
/// Lambda runtime sends both to the function's log group), as one write.
fn log_report(report: &RunReport) {
    use std::io::Write as _;
    let mut line = report_log_line(report);
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// The Lambda handler: Success returns the report; Mismatch and Failure
/// return a [`RunError`] whose type names the outcome.
pub async fn handle(
    deps: &Deps,
    event: LambdaEvent<serde_json::Value>,
) -> Result<RunReport, RunError> {
    let (payload, ctx) = event.into_parts();
    let parsed = match InvokeEvent::from_value(payload) {
        Ok(e) => e,
        Err(e) => {
            let mut r = RunReport {
                last_run_at: Utc::now(),
                bucket: deps.config.bucket.clone(),
                stop_reason: crate::report::StopReason::Error,
                ..Default::default()
            };
            r.fail(e);
            // A Failure like any other: reported too.
            crate::reporting::publish(deps, &mut r).await;
            r.bound();
            log_report(&r);
            return Err(RunError(r));
        }
    };
    // Lambda sends the deadline as epoch milliseconds, always in the future.
    // A local emulator may not (`cargo lambda watch` sends a constant
    // 600000): a deadline already past when the invocation starts is not a
    // real one, and honouring it would stop the run before its first date.
    let left_ms = ctx.deadline as i64 - Utc::now().timestamp_millis();
    let deadline = (left_ms > 0).then(|| Instant::now() + Duration::from_millis(left_ms as u64));
    if deadline.is_none() && ctx.deadline > 0 {
        tracing::warn!(
            deadline_ms = ctx.deadline,
            "runtime deadline already past: running without one"
        );
    }
    let mut opts = options_from_event(&parsed, &ctx.request_id, deadline);
    opts.stop = Some(deps.stop.clone());
    let report = invoke(deps, &opts).await;
    log_report(&report);
    match report.last_run_status {
        Status::Success => Ok(report),
        _ => Err(RunError(report)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(v: serde_json::Value) -> InvokeEvent {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn repair_range_fields_are_checked_together() {
        let ok = event(serde_json::json!({"from": "2024-01-01", "to": "2024-01-31"}));
        assert_eq!(ok.validate(), Ok(()));
        let opts = options_from_event(&ok, "req", None);
        assert_eq!(
            opts.repair.map(|(f, t)| (f.to_string(), t.to_string())),
            Some(("2024-01-01".into(), "2024-01-31".into()))
        );
        for (v, needle) in [
            (serde_json::json!({"from": "2024-01-01"}), "needs both"),
            (serde_json::json!({"to": "2024-01-01"}), "needs both"),
            (
                serde_json::json!({"from": "2024-01-01", "to": "2024-01-02", "date": "2024-01-01"}),
                "exclude each other",
            ),
            (
                serde_json::json!({"from": "2024-02-01", "to": "2024-01-01"}),
                "is after to",
            ),
            (
                serde_json::json!({"from": "2000-01-01", "to": "2024-01-01"}),
                "at most 3660",
            ),
        ] {
            let err = event(v.clone()).validate().unwrap_err();
            assert!(err.contains(needle), "{v}: {err}");
        }
        assert_eq!(event(serde_json::json!({})).validate(), Ok(()));
    }

    #[test]
    fn a_huge_or_strange_field_name_or_value_is_quoted_bounded() {
        let name = format!(
            "\n2026-07-20T00:00:00Z ERROR forged{}",
            "x".repeat(6_000_000)
        );
        let e = InvokeEvent::from_value(serde_json::json!({ name.clone(): 1 })).unwrap_err();
        assert!(e.len() < 4_000, "{} bytes", e.len());
        assert!(!e.contains('\n') && e.contains("bytes)"), "{}", &e[..200]);
        let e = InvokeEvent::from_value(serde_json::json!({"date": "x".repeat(6_000_000)}))
            .unwrap_err();
        assert!(e.len() < 4_000, "{} bytes", e.len());
    }
}
