//! Wiring: clients built once ([`Deps::new`]), the Lambda handler
//! ([`handle`]) and the entry point both shells share ([`invoke`]).

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
use crate::report::{RunReport, Status};
use crate::run::{RunOptions, run};
use crate::storage::S3Store;

/// Everything a run needs, built once per process.
#[derive(Debug, Clone)]
pub struct Deps {
    /// Settings.
    pub config: Config,
    /// The S3 seam for `config.bucket`.
    pub store: S3Store,
    /// CloudWatch client (metrics), when enabled.
    pub cloudwatch: Option<aws_sdk_cloudwatch::Client>,
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

impl Deps {
    /// Loads the AWS configuration (region, credentials, `AWS_ENDPOINT_URL`)
    /// and builds the clients ([`https_client`]).
    pub async fn new(config: Config) -> Deps {
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .http_client(https_client())
            .retry_config(retry_config())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .operation_attempt_timeout(Duration::from_secs(60))
                    .build(),
            )
            .load()
            .await;
        let s3 = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&sdk)
                .force_path_style(config.force_path_style)
                .build(),
        );
        let cloudwatch = config
            .metrics_enabled
            .then(|| aws_sdk_cloudwatch::Client::new(&sdk));
        Deps {
            store: S3Store::new(s3, config.bucket.clone())
                .with_multipart(config.multipart_threshold, config.multipart_part_size),
            config,
            cloudwatch,
        }
    }
}

/// Runs one invocation and reports it (CloudWatch, MQTT). Reporting never
/// changes the status.
pub async fn invoke(deps: &Deps, opts: &RunOptions) -> RunReport {
    let mut report = run(&deps.store, &deps.config, opts).await;
    crate::reporting::publish(deps, &mut report).await;
    report
}

/// The Lambda payload: an EventBridge scheduled event, or a console test
/// event with the optional fields below. Unknown fields are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
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
    /// Compact only this date (`YYYY-MM-DD`).
    #[serde(default)]
    pub date: Option<NaiveDate>,
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
    }
}

/// The Lambda handler: Success returns the report; Mismatch and Failure
/// return a [`RunError`] whose type names the outcome.
pub async fn handle(
    deps: &Deps,
    event: LambdaEvent<serde_json::Value>,
) -> Result<RunReport, RunError> {
    let (payload, ctx) = event.into_parts();
    let parsed: InvokeEvent = match serde_json::from_value(payload) {
        Ok(e) => e,
        Err(e) => {
            let mut r = RunReport {
                last_run_at: Utc::now(),
                bucket: deps.config.bucket.clone(),
                ..Default::default()
            };
            r.fail(format!(
                "event is not an EventBridge event or a test event: {e}"
            ));
            // A Failure like any other: reported too.
            crate::reporting::publish(deps, &mut r).await;
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
    let opts = options_from_event(&parsed, &ctx.request_id, deadline);
    let report = invoke(deps, &opts).await;
    match report.last_run_status {
        Status::Success => Ok(report),
        _ => Err(RunError(report)),
    }
}
