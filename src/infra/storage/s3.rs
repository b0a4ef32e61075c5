//! [`S3Store`]: the [`Store`] over aws-sdk-s3, one bucket. Every call is bounded by the store's
//! deadline ([`Store::until`]); SDK errors become [`Error`] in [`super::s3_error`].

use aws_sdk_s3::Client;
use aws_sdk_s3::config::endpoint::{DefaultResolver, Endpoint, EndpointFuture, Params};
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::error::{BuildError, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output;
use aws_sdk_s3::operation::list_objects_v2::builders::ListObjectsV2FluentBuilder;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumMode, CompletedMultipartUpload, CompletedPart, Delete, EncodingType,
    ObjectIdentifier,
};
use backon::{BackoffBuilder, ExponentialBuilder, Retryable};

use super::s3_error::no_message;
use super::*;

fn attempt_timeouts(bytes: u64) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(attempt_timeout(bytes))
        .build()
}

/// A call carrying a body of `bytes` overrides the client's [`attempt_timeouts`]`(0)`.
fn attempt_config(bytes: u64) -> aws_sdk_s3::config::Builder {
    aws_sdk_s3::config::Builder::default().timeout_config(attempt_timeouts(bytes))
}

/// S3's endpoint rules (~12 k instructions) run once for every call of a store, not once a
/// call: the SDK caches one [`Params`] with the object's key, but its rules read neither
/// `Key`, `Prefix` nor `CopySource` (the key goes in the path), so this cache compares the
/// rest. `tests::endpoint_params_are_the_ones_the_cache_compares` fails on a new parameter.
#[derive(Debug, Default)]
struct EndpointCache(DefaultResolver, std::sync::Mutex<Option<(Params, Endpoint)>>);

/// What the endpoint rules read of `p`: all but `Key`, `Prefix` and `CopySource`.
fn rule_inputs(p: &Params) -> impl PartialEq + '_ {
    let flags = (p.use_fips(), p.use_dual_stack(), p.force_path_style(), p.accelerate());
    let more = (p.use_global_endpoint(), p.use_object_lambda_endpoint(), p.use_arn_region());
    let access = (p.disable_access_points(), p.disable_multi_region_access_points());
    let express = (p.use_s3_express_control_endpoint(), p.disable_s3_express_session_auth());
    (p.bucket(), p.region(), p.endpoint(), flags, more, access, express)
}

impl aws_sdk_s3::config::endpoint::ResolveEndpoint for EndpointCache {
    fn resolve_endpoint<'a>(&'a self, params: &'a Params) -> EndpointFuture<'a> {
        let cached = self.1.lock().unwrap_or_else(|e| e.into_inner());
        let same = cached.as_ref().filter(|(p, _)| rule_inputs(p) == rule_inputs(params));
        if let Some((_, endpoint)) = same {
            return EndpointFuture::ready(Ok(endpoint.clone()));
        }
        drop(cached);
        EndpointFuture::new(async move {
            let endpoint = self.0.resolve_endpoint(params).await?;
            *self.1.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((params.clone(), endpoint.clone()));
            Ok(endpoint)
        })
    }
}

/// Sends no `User-Agent` / `x-amz-user-agent` (the SDK's name, version and features, for AWS's
/// statistics): the SDK formats them for every request (~22 k instructions) and S3 answers the
/// same without. Through the SDK's own switch, `DisableInterceptor`, set for each call.
#[derive(Debug)]
struct NoUserAgent;

impl aws_sdk_s3::config::Intercept for NoUserAgent {
    fn name(&self) -> &'static str {
        "NoUserAgent"
    }

    fn read_before_execution(
        &self,
        _: &aws_sdk_s3::config::interceptors::BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut aws_sdk_s3::config::ConfigBag,
    ) -> std::result::Result<(), aws_sdk_s3::error::BoxError> {
        let off = aws_smithy_runtime_api::client::interceptors::disable_interceptor::<
            aws_runtime::user_agent::UserAgentInterceptor,
        >("no user agent: its formatting is most of a request's interceptor work");
        cfg.interceptor_state().store_put(off);
        Ok(())
    }
}

const TRANSIENT_CODES: &[&str] = &[
    "InternalError",
    "SlowDown",
    "ServiceUnavailable",
    "RequestTimeout",
    "Throttling",
    "ThrottlingException",
    "RequestTimeTooSkewed",
    "OperationAborted",
    "ConditionalRequestConflict",
];

/// The storage seam over one bucket.
#[derive(Debug, Clone)]
pub struct S3Store {
    pub(super) client: Client,
    pub(super) bucket: String,
    delete_backoff: ExponentialBuilder,
    delete_batch_size: usize,
    delete_batches_in_flight: usize,
    multipart_threshold: usize,
    multipart_part_size: usize,
    /// Every call ends by then ([`Store::until`]).
    deadline: Option<Instant>,
}

impl S3Store {
    /// Wraps a client (built once in `main`) for one bucket, rebuilt with: its attempts bounded by
    /// [`attempt_timeout`]`(0)` in its configuration, not overridden call by call (GET −8.5 k
    /// instructions); S3's endpoint rules cached (`EndpointCache`); no user agent (`NoUserAgent`).
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        let config = client.config().to_builder().timeout_config(attempt_timeouts(0));
        let config = config.endpoint_resolver(EndpointCache::default()).interceptor(NoUserAgent);
        S3Store {
            client: Client::from_conf(config.build()),
            bucket: bucket.into(),
            delete_backoff: ExponentialBuilder::default()
                .with_min_delay(Duration::from_secs(1))
                .with_max_delay(Duration::from_secs(4))
                .with_max_times(2)
                .with_jitter(),
            delete_batch_size: DELETE_BATCH_MAX,
            delete_batches_in_flight: DELETE_BATCHES_IN_FLIGHT,
            multipart_threshold: MULTIPART_THRESHOLD_DEFAULT,
            multipart_part_size: MULTIPART_PART_DEFAULT,
            deadline: None,
        }
    }

    /// `call`, bounded by the store's deadline ([`Error::Deadline`] past it).
    async fn bounded<T>(
        &self,
        op: &'static str,
        key: &str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(deadline) = self.deadline else {
            return call.await;
        };
        tokio::time::timeout_at(deadline.into(), call).await.unwrap_or_else(|_| {
            tracing::warn!(op, key, "S3 call not answered before the run's deadline; given up");
            Err(Error::Deadline {
                op,
                bucket: self.bucket.clone(),
                key: key.to_string(),
                margin_s: S3_DEADLINE_MARGIN.as_secs(),
            })
        })
    }

    /// Bodies of at least `threshold` bytes (0: every body) go up as multipart uploads in parts of
    /// `part_size` ([`multipart_ranges`]).
    pub fn with_multipart(mut self, threshold: usize, part_size: usize) -> Self {
        self.multipart_threshold = threshold;
        self.multipart_part_size = part_size;
        self
    }

    /// Uses smaller DeleteObjects batches (tests), clamped to 1..=[`DELETE_BATCH_MAX`].
    pub fn with_delete_batch_size(mut self, n: usize) -> Self {
        self.delete_batch_size = n.clamp(1, DELETE_BATCH_MAX);
        self
    }

    /// Sends at most `n` DeleteObjects requests at once (at least 1; crash tests use 1, so a crash
    /// can fall between two batches).
    pub fn with_delete_batches_in_flight(mut self, n: usize) -> Self {
        self.delete_batches_in_flight = n.max(1);
        self
    }

    /// Shortens the per-key DeleteObjects retry backoff (tests).
    pub fn with_delete_backoff(mut self, min_delay: Duration) -> Self {
        self.delete_backoff =
            self.delete_backoff.with_min_delay(min_delay).with_max_delay(min_delay * 4);
        self
    }

    /// The underlying SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The SDK error `e` of `op` on `key` as a one-line [`Error`].
    pub(super) fn err<E>(&self, op: &'static str, key: &str, e: SdkError<E>) -> Error
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let status = e.raw_response().map(|r| r.status().as_u16());
        let (code, message, transient) = match &e {
            SdkError::ServiceError(se) => {
                let err = se.err();
                let code = err.code().map(str::to_string).unwrap_or_else(|| match status {
                    Some(404) => "NotFound".into(),
                    Some(412) => "PreconditionFailed".into(),
                    Some(s) => format!("HTTP {s}"),
                    None => "Unknown".into(),
                });
                let transient = TRANSIENT_CODES.contains(&code.as_str())
                    || status.is_some_and(|s| s >= 500 || s == 429);
                let message = err.message().map(str::trim).filter(|m| !m.is_empty());
                let message = message.map_or_else(|| no_message(status), str::to_string);
                (code, message, transient)
            }
            SdkError::TimeoutError(_) => ("timeout".into(), one_line(&e), true),
            SdkError::DispatchFailure(_) => ("dispatch".into(), one_line(&e), true),
            SdkError::ResponseError(_) => ("response".into(), one_line(&e), true),
            _ => ("construction".into(), one_line(&e), false),
        };
        tracing::debug!(op, key, error = ?e, "S3 error in full");
        if code == "PreconditionFailed" || status == Some(412) {
            return Error::PreconditionFailed { op, bucket: self.bucket.clone(), key: key.into() };
        }
        Error::s3(op, &self.bucket, key, code, message, transient)
    }

    /// The answer to request `op` on `key`, an error as [`S3Store::err`]. `sent` is boxed: an
    /// SDK call's future is many KB (a test thread's stack overflows without).
    pub(super) fn answer<'a, T, E>(
        &'a self,
        op: &'static str,
        key: &'a str,
        sent: impl Future<Output = std::result::Result<T, SdkError<E>>> + 'a,
    ) -> impl Future<Output = Result<T>> + 'a
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let sent = Box::pin(sent);
        async move { sent.await.map_err(|e| self.err(op, key, e)) }
    }

    /// ListObjectsV2 of `prefix` with `encoding-type=url` ([`decode_listed`]).
    fn list_request(&self, prefix: &str) -> ListObjectsV2FluentBuilder {
        self.client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .encoding_type(EncodingType::Url)
    }

    /// Every page of ListObjectsV2 of `prefix` (split at `delimiter`), each through `each`.
    async fn all_pages<T>(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        each: impl Fn(&ListObjectsV2Output) -> Result<Vec<T>>,
    ) -> Result<Vec<T>> {
        let req = self.list_request(prefix).set_delimiter(delimiter.map(str::to_string));
        let mut pages = req.into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            out.extend(each(&page.map_err(|e| self.err("ListObjectsV2", prefix, e))?)?);
        }
        Ok(out)
    }

    /// A page's objects that have a key, keys decoded.
    /// Errors: [`Error::S3`] (code `KeyEncoding`) when a key does not decode to UTF-8.
    fn objects(&self, prefix: &str, page: &ListObjectsV2Output) -> Result<Vec<ObjectMeta>> {
        let keyed = page.contents().iter().filter_map(|o| Some((o, o.key()?)));
        keyed
            .map(|(o, key)| {
                Ok(ObjectMeta {
                    key: self.decode(prefix, key)?,
                    etag: o.e_tag().unwrap_or_default().to_string(),
                    size: o.size().unwrap_or(0).max(0) as u64,
                    last_modified: o
                        .last_modified()
                        .and_then(|t| DateTime::from_timestamp(t.secs(), t.subsec_nanos()))
                        .unwrap_or_default(),
                })
            })
            .collect()
    }

    /// [`decode_listed`], its failure as [`Error::S3`] naming the listing.
    fn decode(&self, prefix: &str, encoded: &str) -> Result<String> {
        decode_listed(encoded).ok_or_else(|| {
            let message = format!(
                "the server returned the url-encoded key {} that is not UTF-8 once decoded; S3 keys are UTF-8, so the server is at fault",
                crate::infra::text::quote(encoded)
            );
            Error::s3("ListObjectsV2", &self.bucket, prefix, "KeyEncoding", message, false)
        })
    }

    /// GetObject of `key` and its body, read [`BODY_ATTEMPTS`] times at most; `If-Match` is sent
    /// only with a `range`, the answer's ETag checked against `if_match` either way, before the
    /// body is read. Errors: [`Error::PreconditionFailed`] on another ETag; a body that breaks off.
    async fn get_read(
        &self,
        key: &str,
        range: Option<std::ops::Range<u64>>,
        if_match: Option<&str>,
    ) -> Result<Fetched> {
        let read = || async {
            let mut req = self.client.get_object().bucket(&self.bucket).key(key);
            if let Some(r) = &range {
                req = req
                    .range(format!("bytes={}-{}", r.start, r.end - 1))
                    .set_if_match(if_match.map(str::to_string));
            }
            let sent = req.send();
            let out = self.answer("GetObject", key, sent).await?;
            let etag = out.e_tag().unwrap_or_default().to_string();
            check_if_match(&self.bucket, key, if_match, &etag)?;
            let len = out.content_length().unwrap_or(0).max(0) as u64;
            let limit = attempt_timeout(len);
            let body = tokio::time::timeout(limit, out.body.collect())
                .await
                .map_err(|_| {
                    self.body_err(
                        key,
                        format!("the body ({len} bytes) was not read within {} s", limit.as_secs()),
                    )
                })?
                .map_err(|e| self.body_err(key, one_line(&e)))?;
            Ok::<_, Error>(Fetched { body: body.into_bytes(), etag })
        };
        read.retry(
            backon::ConstantBuilder::default()
                .with_delay(Duration::ZERO)
                .with_max_times(BODY_ATTEMPTS as usize - 1),
        )
        // Only a body that broke off: the SDK already retried the request.
        .when(|e| matches!(e, Error::S3 { code, transient: true, .. } if code == "body"))
        .notify(
            |e, _| tracing::warn!(key, error = %e, "GetObject body broke off; reading it again"),
        )
        .await
    }

    /// Transient, so the object is read again.
    fn body_err(&self, key: &str, e: impl std::fmt::Display) -> Error {
        Error::s3("GetObject", &self.bucket, key, "body", e.to_string(), true)
    }

    async fn put_multipart(
        &self,
        key: &str,
        body: Bytes,
        mode: PutMode,
        metadata: Option<std::collections::HashMap<String, String>>,
    ) -> Result<String> {
        let ranges = multipart_ranges(body.len(), self.multipart_part_size);
        tracing::info!(
            key,
            bytes = body.len(),
            parts = ranges.len(),
            "uploading as a multipart upload"
        );
        let req = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .set_metadata(metadata)
            .set_content_type(content_type(key))
            .checksum_algorithm(ChecksumAlgorithm::Sha256);
        let sent = req.send();
        let created = self.answer("CreateMultipartUpload", key, sent).await?;
        let upload_id = created.upload_id().map(str::to_string).ok_or_else(|| {
            let message = "the response carried no UploadId";
            Error::s3("CreateMultipartUpload", &self.bucket, key, "NoUploadId", message, true)
        })?;
        let result = self.upload_parts_and_complete(key, &upload_id, &body, ranges, mode).await;
        if result.is_err() {
            let abort = self.client.abort_multipart_upload().bucket(&self.bucket).key(key);
            let sent = abort.upload_id(&upload_id).send();
            if let Err(e) = self.answer("AbortMultipartUpload", key, sent).await {
                tracing::warn!(key, upload_id, error = %e,
                    "could not abort the failed multipart upload; the bucket's lifecycle rule will remove it");
            }
        }
        result
    }

    async fn upload_parts_and_complete(
        &self,
        key: &str,
        upload_id: &str,
        body: &Bytes,
        ranges: Vec<std::ops::Range<usize>>,
        mode: PutMode,
    ) -> Result<String> {
        use futures::{StreamExt, TryStreamExt};
        let parts: Vec<CompletedPart> = futures::stream::iter(ranges.into_iter().enumerate())
            .map(|(i, r)| {
                let part = body.slice(r);
                let number = i as i32 + 1;
                let part_len = part.len() as u64;
                async move {
                    let sum = sha256_b64(&part);
                    let req = self
                        .client
                        .upload_part()
                        .bucket(&self.bucket)
                        .key(key)
                        .upload_id(upload_id)
                        .part_number(number)
                        .checksum_sha256(&sum)
                        .body(ByteStream::from(part));
                    let sent = req.customize().config_override(attempt_config(part_len)).send();
                    let out = self.answer("UploadPart", key, sent).await?;
                    Ok::<_, Error>(
                        CompletedPart::builder()
                            .part_number(number)
                            .e_tag(out.e_tag().unwrap_or_default())
                            .checksum_sha256(out.checksum_sha256().unwrap_or(&sum))
                            .build(),
                    )
                }
            })
            .buffered(MULTIPART_PARTS_IN_FLIGHT)
            .try_collect()
            .await?;
        let mut req = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build());
        req = match &mode {
            PutMode::Create => req.if_none_match("*"),
            PutMode::Update(etag) => req.if_match(etag),
        };
        let sent = req.send();
        let out = self.answer("CompleteMultipartUpload", key, sent).await?;
        Ok(out.e_tag().unwrap_or_default().to_string())
    }

    async fn delete_once(&self, objects: &[(String, String)]) -> Result<Vec<DeleteFailure>> {
        let first = objects.first().map_or("", |o| o.0.as_str());
        let unbuilt = |key: &str, e: BuildError| {
            Error::s3("DeleteObjects", &self.bucket, key, "construction", e.to_string(), false)
        };
        let ids = objects
            .iter()
            .map(|(k, etag)| ObjectIdentifier::builder().key(k).e_tag(etag).build())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| unbuilt(first, e))?;
        let delete = Delete::builder()
            .set_objects(Some(ids))
            .quiet(true)
            .build()
            .map_err(|e| unbuilt("", e))?;
        let req = self.client.delete_objects().bucket(&self.bucket).delete(delete);
        let sent = req.send();
        let out = self.answer("DeleteObjects", first, sent).await?;
        Ok(out
            .errors()
            .iter()
            .map(|e| DeleteFailure {
                key: e.key().unwrap_or_default().to_string(),
                code: e.code().unwrap_or("Unknown").to_string(),
                message: e.message().unwrap_or_default().to_string(),
            })
            .collect())
    }
}

impl Store for S3Store {
    fn bucket(&self) -> &str {
        &self.bucket
    }

    fn delete_batch_size(&self) -> usize {
        self.delete_batch_size
    }

    fn delete_batches_in_flight(&self) -> usize {
        self.delete_batches_in_flight
    }

    fn until(&self, deadline: Option<Instant>) -> S3Store {
        S3Store { deadline, ..self.clone() }
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<ObjectMeta>>> + Send {
        let all = self.all_pages(prefix, None, |page| self.objects(prefix, page));
        self.bounded("ListObjectsV2", prefix, all)
    }

    fn list_prefixes(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>>> + Send {
        let all = self.all_pages(prefix, Some("/"), |page| {
            let common = page.common_prefixes().iter().filter_map(|p| p.prefix());
            common.map(|p| self.decode(prefix, p)).collect()
        });
        self.bounded("ListObjectsV2", prefix, all)
    }

    fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
    ) -> impl Future<Output = Result<ListPage>> + Send {
        self.bounded("ListObjectsV2", prefix, async move {
            let req = self.list_request(prefix).set_start_after(start_after.map(str::to_string));
            let page = self.answer("ListObjectsV2", prefix, req.send()).await?;
            let objects = self.objects(prefix, &page)?;
            Ok(ListPage { objects, truncated: page.is_truncated().unwrap_or(false) })
        })
    }

    fn get(&self, key: &str) -> impl Future<Output = Result<Fetched>> + Send {
        self.bounded("GetObject", key, self.get_read(key, None, None))
    }

    fn head(&self, key: &str) -> impl Future<Output = Result<Option<Head>>> + Send {
        self.bounded("HeadObject", key, async move {
            let req = self.client.head_object().bucket(&self.bucket).key(key);
            let sent = req.checksum_mode(ChecksumMode::Enabled).send();
            let Some(h) = found(self.answer("HeadObject", key, sent).await)? else {
                return Ok(None);
            };
            let metadata = h.metadata().into_iter().flatten();
            Ok(Some(Head {
                size: h.content_length().unwrap_or(0).max(0) as u64,
                etag: h.e_tag().unwrap_or_default().to_string(),
                checksum_sha256: h.checksum_sha256().map(str::to_string),
                metadata: metadata.map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect(),
            }))
        })
    }

    fn get_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
        if_match: Option<&str>,
    ) -> impl Future<Output = Result<Fetched>> + Send {
        self.bounded("GetObject", key, async move {
            if range.start >= range.end {
                return Ok(Fetched {
                    body: Bytes::new(),
                    etag: if_match.unwrap_or_default().into(),
                });
            }
            self.get_read(key, Some(range), if_match).await
        })
    }

    fn put_object(
        &self,
        key: &str,
        body: Bytes,
        request: PutRequest,
    ) -> impl Future<Output = Result<String>> + Send {
        self.bounded("PutObject", key, async move {
            let PutRequest { mode, sha256_b64, metadata } = request;
            let len = body.len() as u64;
            let metadata = (!metadata.is_empty()).then(|| metadata.into_iter().collect());
            if body.len() >= self.multipart_threshold {
                return self.put_multipart(key, body, mode, metadata).await;
            }
            let mut req = self
                .client
                .put_object()
                .bucket(&self.bucket)
                .key(key)
                .set_metadata(metadata)
                .set_checksum_sha256(sha256_b64)
                .set_content_type(content_type(key))
                .body(ByteStream::from(body));
            req = match &mode {
                PutMode::Create => req.if_none_match("*"),
                PutMode::Update(etag) => req.if_match(etag),
            };
            let sent = req.customize().config_override(attempt_config(len)).send();
            let out = self.answer("PutObject", key, sent).await?;
            Ok(out.e_tag().unwrap_or_default().to_string())
        })
    }

    fn delete(&self, key: &str, if_match: Option<&str>) -> impl Future<Output = Result<()>> + Send {
        self.bounded("DeleteObject", key, async move {
            let req = self.client.delete_object().bucket(&self.bucket).key(key);
            let sent = req.set_if_match(if_match.map(str::to_string)).send();
            found(self.answer("DeleteObject", key, sent).await)?;
            Ok(())
        })
    }

    /// One DeleteObjects request in quiet mode. A 200 can still carry per-key errors: transient
    /// ones are retried, `NoSuchKey` counts as deleted, the rest are returned.
    /// Errors: a whole request that fails after the SDK's retries.
    fn delete_batch(
        &self,
        batch: &[(String, String)],
    ) -> impl Future<Output = Result<Vec<DeleteFailure>>> + Send {
        let first = batch.first().map(|b| b.0.as_str()).unwrap_or_default();
        self.bounded("DeleteObjects", first, async move {
            assert!(
                batch.len() <= self.delete_batch_size,
                "batch larger than the DeleteObjects limit"
            );
            let mut failures = Vec::new();
            // A key DeleteObjects' XML cannot carry goes by DeleteObject, same condition: ministack
            // answers 400 to the whole batch otherwise.
            let (mut pending, one_by_one): (Vec<_>, Vec<_>) =
                batch.iter().cloned().partition(|(k, _)| fits_delete_xml(k));
            for (key, etag) in one_by_one {
                match self.delete(&key, Some(&etag)).await {
                    Ok(()) => {}
                    Err(Error::PreconditionFailed { .. }) => failures.push(DeleteFailure {
                        key,
                        code: "PreconditionFailed".into(),
                        message: "the object changed since it was listed".into(),
                    }),
                    // A per-key refusal, as DeleteObjects would report it; a transient failure
                    // fails the call.
                    Err(Error::S3 {
                        code,
                        message,
                        transient: false,
                        ..
                    }) => failures.push(DeleteFailure { key, code, message }),
                    Err(e) => return Err(e),
                }
            }
            if pending.is_empty() {
                return Ok(failures);
            }
            let mut delays = self.delete_backoff.build();
            loop {
                let errors = self.delete_once(&pending).await?;
                let (transient, permanent): (Vec<_>, Vec<_>) = errors
                    .into_iter()
                    .partition(|f| TRANSIENT_CODES.contains(&f.code.as_str()));
                failures.extend(permanent.into_iter().filter(|f| f.code != "NoSuchKey"));
                // Done when nothing is left to retry or no retry is left.
                let Some(d) = delays.next().filter(|_| !transient.is_empty()) else {
                    failures.extend(transient);
                    return Ok(failures);
                };
                tracing::warn!(keys = transient.len(), code = %transient[0].code, delay_ms = d.as_millis() as u64, "DeleteObjects per-key transient errors; retrying those keys");
                tokio::time::sleep(d).await;
                pending.retain(|(k, _)| transient.iter().any(|f| &f.key == k));
            }
        })
    }
}

fn content_type(key: &str) -> Option<String> {
    key.ends_with(".json").then(|| "application/json".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_s3::config::endpoint::ResolveEndpoint;

    fn params(bucket: &str, key: Option<&str>, prefix: Option<&str>) -> Params {
        let p = Params::builder().region("eu-west-1").bucket(bucket).use_fips(false);
        p.set_key(key.map(Into::into)).set_prefix(prefix.map(Into::into)).build().unwrap()
    }

    #[tokio::test]
    async fn one_endpoint_for_every_key_of_a_bucket_another_for_another_bucket() {
        let (cache, rules) = (EndpointCache::default(), DefaultResolver::new());
        for (bucket, key, prefix) in [
            ("b-one", Some("2026/01/02/a.parquet"), None),
            ("b-one", Some("x"), None),
            ("b-one", None, Some("index/2026/")),
            ("b-two", Some("x"), None),
            ("b-one", Some("y"), None),
        ] {
            let p = params(bucket, key, prefix);
            let (got, want) = (cache.resolve_endpoint(&p).await, rules.resolve_endpoint(&p).await);
            assert_eq!(got.unwrap(), want.unwrap(), "{bucket} {key:?} {prefix:?}");
        }
    }

    /// A parameter aws-sdk-s3 adds must be weighed for [`rule_inputs`] before an upgrade.
    #[test]
    fn endpoint_params_are_the_ones_the_cache_compares() {
        let debug = format!("{:?}", Params::builder().build().unwrap());
        let names: Vec<&str> = debug
            .split([',', '{'])
            .skip(1)
            .filter_map(|f| f.split(':').next())
            .map(str::trim)
            .collect();
        assert_eq!(
            names,
            [
                "bucket",
                "region",
                "use_fips",
                "use_dual_stack",
                "endpoint",
                "force_path_style",
                "accelerate",
                "use_global_endpoint",
                "use_object_lambda_endpoint",
                "key",
                "prefix",
                "copy_source",
                "disable_access_points",
                "disable_multi_region_access_points",
                "use_arn_region",
                "use_s3_express_control_endpoint",
                "disable_s3_express_session_auth",
            ]
        );
    }

    /// The request a store sends carries no user agent ([`NoUserAgent`]): one HEAD against a
    /// listener on 127.0.0.1 that records it and answers 404.
    #[tokio::test]
    async fn a_request_goes_out_without_a_user_agent() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut head = vec![0u8; 16 * 1024];
            let n = conn.read(&mut head).await.unwrap();
            conn.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").await.unwrap();
            String::from_utf8_lossy(&head[..n]).to_lowercase()
        });
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("eu-west-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new("a", "b", None, None, "t"))
            .endpoint_url(url)
            .force_path_style(true)
            .http_client(crate::app::aws::https_client())
            .build();
        let store = S3Store::new(Client::from_conf(config), "b");
        assert_eq!(store.head("k").await.unwrap(), None);
        let request = server.await.unwrap();
        assert!(request.starts_with("head /b/k "), "{request}");
        assert!(!request.contains("user-agent"), "{request}");
    }
}
