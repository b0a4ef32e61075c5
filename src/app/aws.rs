//! AWS wiring: the clients every command shares, built once per process.

use std::sync::Arc;
use std::time::Duration;

use aws_config::meta::region::RegionProviderChain;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_s3::config::SharedHttpClient;
use aws_smithy_http_client::proxy::ProxyConfig;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_http_client::{Builder, ConnectorBuilder};

use crate::data::config::Config;
use crate::infra::error::{Error, ReportError};
use crate::infra::storage::S3Store;

/// Everything a run needs, shared by every invocation of a process.
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
    mqtt_password: Arc<tokio::sync::OnceCell<String>>,
    /// The stop request every invocation's run follows.
    pub stop: crate::infra::stop::Stop,
}

/// SDK retry policy for every call: the standard strategy (throttling, 5xx, timeouts and
/// connection errors; not 4xx) with 3 attempts from 1 s.
pub fn retry_config() -> RetryConfig {
    RetryConfig::standard().with_max_attempts(3).with_initial_backoff(Duration::from_secs(1))
}

/// The HTTPS client of every AWS client, on rustls' *ring* provider (the one rumqttc uses: one
/// crypto provider, no aws-lc-rs C build); proxies from `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY`.
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

/// Path style when asked (local servers); response checksums only where required: TLS
/// authenticates each response and every body is decoded (what the job writes keeps full checks).
/// No stalled-stream protection: every attempt is bounded by its timeout and every GET body by
/// one of its length (`storage::attempt_timeout`), so a stalled stream ends all the same without
/// the SDK's throughput watch on every poll of every body. [`S3Store::new`] trims the rest.
pub fn s3_config(sdk: &aws_config::SdkConfig, force_path_style: bool) -> aws_sdk_s3::Config {
    aws_sdk_s3::config::Builder::from(sdk)
        .force_path_style(force_path_style)
        .response_checksum_validation(aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired)
        .stalled_stream_protection(aws_sdk_s3::config::StalledStreamProtectionConfig::disabled())
        .build()
}

/// The region, from `AWS_REGION` / `AWS_DEFAULT_REGION` or the profile (`AWS_PROFILE`'s, else
/// `default`, in ~/.aws/config) by aws-config's own providers, without a request: outside AWS the
/// SDK's last fallback, the instance metadata service, waits for its timeout and then fails every
/// request with "a region must be set".
///
/// Errors: [`Error::Config`] naming `AWS_REGION` and how to set it.
pub async fn region() -> Result<Region, Error> {
    let chain = RegionProviderChain::first_try(
        aws_config::environment::region::EnvironmentVariableRegionProvider::new(),
    )
    .or_else(aws_config::profile::ProfileFileRegionProvider::new());
    chain.region().await.ok_or_else(|| Error::Config {
        name: "AWS_REGION".into(),
        reason: "no AWS region: set AWS_REGION (e.g. AWS_REGION=eu-west-1), or a region for \
                 the profile in ~/.aws/config (AWS_PROFILE)"
            .into(),
    })
}

/// `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_S3`, when set, are http(s) URLs with a host (the SDK
/// would fail every request on another).
///
/// Errors: [`Error::Config`] naming the variable and its value.
pub fn check_endpoints(env: &std::collections::HashMap<String, String>) -> Result<(), Error> {
    for name in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"] {
        let Some(v) = env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) else { continue };
        let url = url::Url::parse(v).ok();
        if !url.is_some_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some()) {
            return Err(Error::Config {
                name: name.into(),
                reason: format!(
                    "{} is not an http(s) URL: give one like http://127.0.0.1:4566 or \
                     https://s3.eu-west-1.amazonaws.com, or unset it for AWS itself",
                    crate::infra::text::quote(v)
                ),
            });
        }
    }
    Ok(())
}

impl Deps {
    /// Loads the AWS configuration (credentials, `AWS_ENDPOINT_URL`) for `region` ([`region`]).
    pub async fn new(config: Config, region: Region) -> Deps {
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .region(region)
            .http_client(https_client())
            .retry_config(retry_config())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(crate::infra::storage::CONNECT_TIMEOUT)
                    .operation_attempt_timeout(crate::infra::storage::ATTEMPT_TIMEOUT_BASE)
                    .build(),
            )
            .load()
            .await;
        let s3 = aws_sdk_s3::Client::from_conf(s3_config(&sdk, config.force_path_style));
        let cloudwatch = config.metrics_enabled.then(|| aws_sdk_cloudwatch::Client::new(&sdk));
        let secrets = config
            .mqtt
            .as_ref()
            .and_then(|m| m.password_secret_arn.as_ref())
            .map(|_| aws_sdk_secretsmanager::Client::new(&sdk));
        let store = S3Store::new(s3, config.bucket.clone())
            .with_multipart(config.multipart_threshold, config.multipart_part_size);
        Deps::from_parts(config, store, cloudwatch, secrets)
    }

    /// Deps from clients built elsewhere (tests, tools).
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
            stop: crate::infra::stop::Stop::new(),
        }
    }

    /// `MQTT_PASSWORD_SECRET_ARN`'s `SecretString` (cached for the process), else `MQTT_PASSWORD`;
    /// `Ok(None)` when neither or MQTT off. Errors: [`ReportError::MqttSecret`], not cached.
    pub async fn mqtt_password(&self) -> Result<Option<String>, ReportError> {
        let Some(mqtt) = &self.config.mqtt else {
            return Ok(None);
        };
        let Some(arn) = &mqtt.password_secret_arn else {
            return Ok(mqtt.password.clone());
        };
        let fail = |reason: String| ReportError::MqttSecret { secret: arn.clone(), reason };
        let client = self
            .secrets
            .as_ref()
            .ok_or_else(|| fail("no Secrets Manager client was built".into()))?;
        let read = async {
            let answer = client.get_secret_value().secret_id(arn).send().await;
            let out = answer.map_err(|e| fail(crate::infra::storage::sdk_error_line(&e)))?;
            out.secret_string.ok_or_else(|| {
                fail("the secret has no SecretString (a binary secret?); store the password as the secret's text".into())
            })
        };
        let bounded = async {
            tokio::time::timeout(mqtt.timeout, read).await.unwrap_or_else(|_| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_that_is_not_an_http_url_is_refused_naming_it() {
        let env = |name: &str, v: &str| [(name.to_string(), v.to_string())].into();
        for ok in ["http://127.0.0.1:4566", "https://s3.eu-west-1.amazonaws.com", " "] {
            assert!(check_endpoints(&env("AWS_ENDPOINT_URL", ok)).is_ok(), "{ok}");
        }
        for (name, bad) in [
            ("AWS_ENDPOINT_URL", "localhost:4566"),
            ("AWS_ENDPOINT_URL", "127.0.0.1:4566"),
            ("AWS_ENDPOINT_URL_S3", "ftp://host"),
            ("AWS_ENDPOINT_URL", "http://"),
        ] {
            let e = check_endpoints(&env(name, bad)).unwrap_err().to_string();
            assert!(e.starts_with(&format!("setting {name}: ")) && e.contains(bad), "{e}");
        }
    }
}
