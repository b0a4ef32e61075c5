//! The one storage seam: list, get, head, conditional put, conditional delete.
//!
//! [`Store`] is the seam the protocol is written against (commit, recovery,
//! lease, state, run, status). Two implementations: [`S3Store`] over
//! aws-sdk-s3, and [`MemoryStore`], a strict in-memory bucket with S3's
//! documented semantics for tests and the deterministic simulation.
//! `tests/suite/store_conformance.rs` holds both, and the ministack and moto
//! servers, to the same behaviour.
//!
//! [`S3Store`] wraps an `aws_sdk_s3::Client` and a bucket. Every method maps
//! SDK errors to [`Error`] with the operation, key, S3 error code and a
//! transient/permanent classification. Transient failures of a whole call
//! (throttling, 5xx, timeouts, connection errors) are already retried by the
//! SDK's standard retry strategy that `main` configures (3 attempts, 1 s
//! initial backoff with jitter); per-key failures inside a 200 DeleteObjects
//! response are retried here (see [`S3Store::delete_batch`]).
//!
//! Time: an [`S3Store`] made with [`Store::until`] bounds every call, all
//! its attempts, backoffs and body reads together, by a deadline (the run's
//! deadline less [`S3_DEADLINE_MARGIN`]); a call still under way then fails
//! with [`Error::Deadline`]. Each attempt is bounded by
//! [`attempt_timeout`] (10 s plus 1 s per MiB it carries, the SDK's
//! `operation_attempt_timeout`), and a GetObject body by the same figure for
//! the size announced. A body that breaks off (reset, truncated, stalled) is
//! read again, up to [`BODY_ATTEMPTS`] times in all: the SDK retries a
//! request, not a body.
//!
//! Conditional writes follow S3's documented semantics: `If-None-Match: *`
//! creates only if absent, `If-Match: <etag>` replaces or deletes only the
//! version that was read; a lost condition is [`Error::PreconditionFailed`].

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumMode, CompletedMultipartUpload, CompletedPart, Delete, EncodingType,
    ObjectIdentifier,
};
use backon::{BackoffBuilder, ExponentialBuilder, Retryable};
use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

pub mod lifecycle;
mod memory;
pub mod ranges;
pub use memory::{DeletedVersion, LIST_PAGE_MAX, MemoryStore, md5_etag};

/// S3 DeleteObjects takes at most 1,000 keys per request (S3 API reference).
pub const DELETE_BATCH_MAX: usize = 1000;

/// S3's smallest part size for every part but the last: 5 MiB (S3 multipart
/// upload limits, "Amazon S3 multipart upload limits").
pub const MULTIPART_PART_MIN: usize = 5 * 1024 * 1024;

/// S3's largest part size: 5 GiB (same source).
pub const MULTIPART_PART_MAX: usize = 5 * 1024 * 1024 * 1024;

/// S3 allows at most 10,000 parts in one upload (same source).
pub const MULTIPART_PARTS_MAX: usize = 10_000;

/// Default size (bytes) from which [`S3Store::put`] uses a multipart upload: 16 MiB.
pub const MULTIPART_THRESHOLD_DEFAULT: usize = 16 * 1024 * 1024;

/// Default part size (bytes) of multipart uploads: 8 MiB.
pub const MULTIPART_PART_DEFAULT: usize = 8 * 1024 * 1024;

/// The user-metadata name (sent as `x-amz-meta-compaction-job-id`) under
/// which a compacted output carries the job id of the commit that wrote it,
/// set at PutObject or CreateMultipartUpload. Recovery reads it back at HEAD
/// ([`Head::metadata`]) and never deletes an output carrying another job's id.
pub const JOB_ID_METADATA: &str = "compaction-job-id";

/// DeleteObjects requests a commit sends at once (a day of 50,000 inputs
/// is 50 requests of 1,000 keys): a few in flight take the deletes' share of
/// a run from 50 round trips to 13 without a burst S3 would throttle
/// (3,500 DELETEs a second per prefix, S3's documented rate).
pub const DELETE_BATCHES_IN_FLIGHT: usize = 4;

/// Parts uploaded at once in one multipart upload.
const MULTIPART_PARTS_IN_FLIGHT: usize = 4;

/// The byte ranges of a multipart upload of `len` bytes in parts of
/// `part_size` bytes: every part but the last is `part_size` long, the last
/// holds the rest (at least 1 byte). `part_size` is raised to S3's minimum
/// ([`MULTIPART_PART_MIN`]) and, when `len` would need more than
/// [`MULTIPART_PARTS_MAX`] parts, to the smallest size that fits.
///
/// ```
/// use archive_compaction::storage::{multipart_ranges, MULTIPART_PART_MIN};
/// let mib = 1024 * 1024;
/// assert_eq!(multipart_ranges(12 * mib, 5 * mib), vec![0..5 * mib, 5 * mib..10 * mib, 10 * mib..12 * mib]);
/// assert_eq!(multipart_ranges(10, 1), vec![0..10]); // raised to 5 MiB: one part
/// assert_eq!(multipart_ranges(0, MULTIPART_PART_MIN), vec![0..0]);
/// ```
pub fn multipart_ranges(len: usize, part_size: usize) -> Vec<std::ops::Range<usize>> {
    let size = part_size
        .max(MULTIPART_PART_MIN)
        .max(len.div_ceil(MULTIPART_PARTS_MAX))
        .min(MULTIPART_PART_MAX);
    if len == 0 {
        // One empty part: S3 needs at least one.
        return std::iter::once(0..0).collect();
    }
    (0..len)
        .step_by(size)
        .map(|start| start..(start + size).min(len))
        .collect()
}

/// S3 calls of a run end this long before the run's deadline (all attempts
/// of a call together, [`Store::until`]): 5 s for the lease's release
/// ([`crate::lease::LEASE_RELEASE_TIMEOUT`]), then 1 s each for CloudWatch,
/// Secrets Manager and MQTT ([`crate::reporting::SINK_TIME_AT_THE_END`]), so
/// that the run ends, released and reported, by its deadline
/// (docs/configuration.md, "Deadline").
pub const S3_DEADLINE_MARGIN: Duration = Duration::from_secs(8);

/// Every attempt of an S3 request may take this long, plus 1 s per MiB it
/// carries ([`attempt_timeout`]): a 3 KB GET does not need the SDK's usual
/// 60 s, a request that gets no answer is given up and retried.
pub const ATTEMPT_TIMEOUT_BASE: Duration = Duration::from_secs(10);

/// How long an S3 connection may take to open (as `main`'s SDK
/// configuration): 5 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How many times in all a GetObject (whole or ranged) whose body breaks off
/// is read: 3.
pub const BODY_ATTEMPTS: u32 = 3;

/// The time one attempt of a request carrying (or a body of) `bytes` bytes
/// may take: [`ATTEMPT_TIMEOUT_BASE`] plus 1 s per MiB begun (a transfer of
/// 1 MiB/s at the least, far below Lambda's).
///
/// ```
/// use archive_compaction::storage::attempt_timeout;
/// use std::time::Duration;
/// assert_eq!(attempt_timeout(3_000), Duration::from_secs(11));
/// assert_eq!(attempt_timeout(0), Duration::from_secs(10));
/// assert_eq!(attempt_timeout(8 * 1024 * 1024), Duration::from_secs(18));
/// ```
pub fn attempt_timeout(bytes: u64) -> Duration {
    ATTEMPT_TIMEOUT_BASE + Duration::from_secs(bytes.div_ceil(1024 * 1024))
}

/// A per-request SDK configuration whose attempts are bounded by
/// [`attempt_timeout`]`(bytes)` (connections by [`CONNECT_TIMEOUT`]).
fn attempt_config(bytes: u64) -> aws_sdk_s3::config::Builder {
    aws_sdk_s3::config::Builder::default().timeout_config(
        TimeoutConfig::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .operation_attempt_timeout(attempt_timeout(bytes))
            .build(),
    )
}

/// What an HTTP status means from S3, for an error whose response carried
/// no message (a HEAD's never does): S3's own names where it has them
/// (S3 API reference, "Error responses": 503 `SlowDown`, 500
/// `InternalError`).
pub fn status_meaning(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden (access denied)",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        412 => "Precondition Failed",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Slow Down",
        504 => "Gateway Timeout",
        s if s >= 500 => "a server error",
        _ => "an error",
    }
}

/// An S3 error's message when the response carried none: the status's
/// meaning ([`status_meaning`]) and that the server said nothing more.
fn no_message(status: Option<u16>) -> String {
    match status {
        Some(s) => format!("{} (the server sent no message)", status_meaning(s)),
        None => "(the server sent no message)".into(),
    }
}

/// A key (or common prefix) of a ListObjectsV2 response asked with
/// `encoding-type=url`, decoded: `%XX` escapes are bytes, and `+` is a
/// space (S3 writes a space as `+` and a `+` as `%2B`, as an HTML form
/// does; some servers write a space as `%20`, which decodes alike). `None`
/// when the bytes are not UTF-8.
///
/// Without `encoding-type=url` a key holding a character XML 1.0 cannot
/// carry (ESC, `\x01`: S3 user guide, "Naming Amazon S3 objects", "XML
/// related object key constraints") makes the whole response unreadable,
/// so every listing of [`S3Store`] asks for it.
///
/// ```
/// use archive_compaction::storage::decode_listed;
/// assert_eq!(decode_listed("flights/a%1Bb+c%2Bd%20e").as_deref(), Some("flights/a\x1bb c+d e"));
/// assert_eq!(decode_listed("day=20/%E2%82%AC.parquet").as_deref(), Some("day=20/€.parquet"));
/// assert_eq!(decode_listed("%FF"), None);
/// ```
pub fn decode_listed(encoded: &str) -> Option<String> {
    let spaced = encoded.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

/// Whether DeleteObjects can carry `key` in its XML body: not when it holds
/// a control character. XML 1.0 has no way to write most of them (ESC,
/// `\x01`; "Char" production of the XML 1.0 spec), and the ones it has
/// (CR, LF) S3 asks to be sent as entity references, which a parser
/// normalises otherwise (S3 user guide, "Naming Amazon S3 objects", "XML
/// related object key constraints"). Such keys go by DeleteObject, whose
/// key is in the URL ([`S3Store::delete_batch`]).
pub fn fits_delete_xml(key: &str) -> bool {
    !key.chars().any(char::is_control)
}

/// Per-key error codes of DeleteObjects worth retrying.
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

/// One object from a listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectMeta {
    /// The full key, exactly as S3 returned it.
    pub key: String,
    /// The ETag, quotes included, as S3 returned it.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// LastModified (UTC, second precision on most servers).
    pub last_modified: DateTime<Utc>,
}

/// One ListObjectsV2 page ([`Store::list_page`]).
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    /// The page's objects, in key order.
    pub objects: Vec<ObjectMeta>,
    /// More keys follow the page's last one (S3's `IsTruncated`).
    pub truncated: bool,
}

/// A GetObject result.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The body.
    pub body: Bytes,
    /// The ETag of the version that was read.
    pub etag: String,
}

/// A HeadObject result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Size in bytes.
    pub size: u64,
    /// The ETag.
    pub etag: String,
    /// The stored SHA-256 flexible checksum (base64), when the server keeps one.
    pub checksum_sha256: Option<String>,
    /// User metadata (`x-amz-meta-*`, names without the prefix, lower case
    /// as S3 stores them).
    pub metadata: BTreeMap<String, String>,
}

impl Head {
    /// The job id in [`JOB_ID_METADATA`], when the object carries one.
    pub fn job_id(&self) -> Option<&str> {
        self.metadata.get(JOB_ID_METADATA).map(String::as_str)
    }
}

/// Everything a PUT carries besides key and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutRequest {
    /// The condition.
    pub mode: PutMode,
    /// SHA-256 of the body, base64: sent as the flexible checksum, which the
    /// server verifies (a mismatch is S3's `BadDigest`) and stores.
    pub sha256_b64: Option<String>,
    /// User metadata (`x-amz-meta-*`).
    pub metadata: BTreeMap<String, String>,
}

impl PutRequest {
    /// A PUT with this condition, no checksum and no metadata.
    pub fn new(mode: PutMode) -> PutRequest {
        PutRequest {
            mode,
            sha256_b64: None,
            metadata: BTreeMap::new(),
        }
    }
}

/// The storage seam over one bucket: what the commit protocol, recovery, the
/// lease and the state files need of S3, with S3's semantics.
///
/// Contract (what every implementation gives, and what
/// `tests/suite/store_conformance.rs` checks):
///
/// - [`Store::list`]: every object under a prefix, in lexicographic (UTF-8
///   byte) key order, with ETag (quoted, as S3 returns it), size and
///   LastModified; S3 pages of 1,000 keys are followed to the end.
/// - [`Store::get`] of a missing key fails with an error for which
///   [`Error::is_not_found`] holds; [`Store::get_opt`] and [`Store::head`]
///   say `None` instead.
/// - [`Store::put`] with [`PutMode::Create`] (`If-None-Match: *`) fails with
///   [`Error::PreconditionFailed`] (412) when the key exists; with
///   [`PutMode::Update`] (`If-Match`) when the ETag differs, and with a
///   not-found error (404 `NoSuchKey`) when the key does not exist. A
///   conflicting operation on the same key while a conditional write is in
///   flight fails that write with a transient `ConditionalRequestConflict`
///   (409): retry it.
/// - [`Store::delete`] of a missing key succeeds; with an `If-Match` ETag
///   that differs it fails with [`Error::PreconditionFailed`].
/// - [`Store::delete_batch`] deletes each `(key, etag)` only in that
///   version; keys it did not delete come back as [`DeleteFailure`]s
///   (`PreconditionFailed` for a changed key); a missing key counts as deleted.
///
/// Every method's future is `Send` (the Lambda handler spawns the run).
pub trait Store: Send + Sync {
    /// The bucket name.
    fn bucket(&self) -> &str;

    /// Keys per [`Store::delete_batch`] call (at most [`DELETE_BATCH_MAX`]).
    fn delete_batch_size(&self) -> usize;

    /// [`Store::delete_batch`] calls the commit's delete phase sends at
    /// once (a wave; the lease is confirmed before each wave). 1: one
    /// after another.
    fn delete_batches_in_flight(&self) -> usize {
        1
    }

    /// Keys per [`Store::list_page`] page when more follow: S3's
    /// [`LIST_PAGE_MAX`] (1,000).
    fn list_page_size(&self) -> usize {
        LIST_PAGE_MAX
    }

    /// The same store, each of its calls (all attempts, backoffs and body
    /// reads together) bounded by `deadline`: a call still under way then
    /// fails with [`Error::Deadline`]. `None`: no bound. The in-memory stores,
    /// which answer at once, keep no deadline.
    fn until(&self, deadline: Option<Instant>) -> Self
    where
        Self: Sized + Clone,
    {
        let _ = deadline;
        self.clone()
    }

    /// Every object under `prefix`, in lexicographic key order.
    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<ObjectMeta>>> + Send;

    /// The common prefixes directly under `prefix` (delimiter `/`), in order.
    fn list_prefixes(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// One ListObjectsV2 page without a delimiter: the objects under
    /// `prefix` whose keys sort after `start_after` (from the first when
    /// `None`), in lexicographic key order, at most [`LIST_PAGE_MAX`] of
    /// them (S3's page size); [`ListPage::truncated`] when more follow.
    /// `start_after` may be any string, a key or not (S3's `StartAfter`).
    /// [`ranges`] builds concurrent listings of one prefix on it.
    fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
    ) -> impl Future<Output = Result<ListPage>> + Send;

    /// Reads a whole object; a missing key is an error for which
    /// [`Error::is_not_found`] is true.
    fn get(&self, key: &str) -> impl Future<Output = Result<Fetched>> + Send;

    /// Reads a whole object, or `None` when the key does not exist.
    fn get_opt(&self, key: &str) -> impl Future<Output = Result<Option<Fetched>>> + Send {
        async move {
            match self.get(key).await {
                Ok(f) => Ok(Some(f)),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e),
            }
        }
    }

    /// Reads bytes `range` (start included, end excluded) of an object,
    /// only in the version with ETag `if_match` when given: GetObject with
    /// `Range: bytes=start-(end-1)` and `If-Match` (what `audit` reads a
    /// Parquet footer and a column chunk with). The range is clipped to the
    /// object's end; an empty range reads nothing.
    ///
    /// Errors: [`Error::PreconditionFailed`] when the object's ETag is not
    /// `if_match` (it changed since it was listed; the ETag the response
    /// carries is compared too, for a server that ignores `If-Match`); a
    /// missing key as in [`Store::get`]. The default reads the whole object
    /// and slices it (the in-memory stores); [`S3Store`] sends the range.
    fn get_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
        if_match: Option<&str>,
    ) -> impl Future<Output = Result<Fetched>> + Send {
        async move {
            let f = self.get(key).await?;
            check_if_match(self.bucket(), key, if_match, &f.etag)?;
            let end = (range.end.min(f.body.len() as u64)) as usize;
            let start = (range.start as usize).min(end);
            Ok(Fetched {
                body: f.body.slice(start..end),
                etag: f.etag,
            })
        }
    }

    /// Size, ETag, stored SHA-256 checksum and metadata, or `None` when the
    /// key does not exist.
    fn head(&self, key: &str) -> impl Future<Output = Result<Option<Head>>> + Send;

    /// PutObject with a condition, checksum and metadata; returns the new ETag.
    fn put_object(
        &self,
        key: &str,
        body: Bytes,
        request: PutRequest,
    ) -> impl Future<Output = Result<String>> + Send;

    /// PutObject with a condition and an optional SHA-256 checksum (base64);
    /// returns the new ETag.
    fn put(
        &self,
        key: &str,
        body: Bytes,
        mode: PutMode,
        sha256_b64: Option<&str>,
    ) -> impl Future<Output = Result<String>> + Send {
        let request = PutRequest {
            mode,
            sha256_b64: sha256_b64.map(str::to_string),
            metadata: BTreeMap::new(),
        };
        self.put_object(key, body, request)
    }

    /// DeleteObject, conditional on `if_match` when given. Deleting a
    /// missing key succeeds.
    fn delete(&self, key: &str, if_match: Option<&str>) -> impl Future<Output = Result<()>> + Send;

    /// Deletes one batch of `(key, etag)` pairs (at most
    /// [`Store::delete_batch_size`]), each only in the version with that
    /// ETag; returns the keys not deleted, with S3's per-key error code.
    fn delete_batch(
        &self,
        batch: &[(String, String)],
    ) -> impl Future<Output = Result<Vec<DeleteFailure>>> + Send;
}

/// How a PUT may replace what is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutMode {
    /// `If-None-Match: *`: fail with [`Error::PreconditionFailed`] if the key exists.
    Create,
    /// `If-Match: etag`: replace only the version with this ETag.
    Update(String),
}

/// A key that DeleteObjects did not delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteFailure {
    /// The key.
    pub key: String,
    /// S3's per-key error code (`AccessDenied`, `PreconditionFailed`, ...).
    pub code: String,
    /// S3's message.
    pub message: String,
}

impl DeleteFailure {
    /// The object changed since it was read (conditional delete lost): a
    /// newer version survives, which is the intended outcome.
    pub fn is_newer_version(&self) -> bool {
        self.code == "PreconditionFailed"
    }
}

/// SHA-256 of `bytes`, base64 (S3's `x-amz-checksum-sha256` encoding).
pub fn sha256_b64(bytes: &[u8]) -> String {
    use base64::Engine;
    use sha2::Digest;
    base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(bytes))
}

/// [`Error::PreconditionFailed`] for a GetObject of `key` when `if_match`
/// is given and differs from the `etag` read.
fn check_if_match(bucket: &str, key: &str, if_match: Option<&str>, etag: &str) -> Result<()> {
    match if_match {
        Some(want) if !etag_eq(want, etag) => Err(Error::PreconditionFailed {
            op: "GetObject",
            bucket: bucket.to_string(),
            key: key.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Strips the quotes S3 puts around ETags, for comparisons.
pub fn etag_eq(a: &str, b: &str) -> bool {
    a.trim_matches('"') == b.trim_matches('"')
}

/// The storage seam over one bucket.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: Client,
    bucket: String,
    delete_backoff: ExponentialBuilder,
    delete_batch_size: usize,
    delete_batches_in_flight: usize,
    multipart_threshold: usize,
    multipart_part_size: usize,
    /// Every call ends by then ([`Store::until`]).
    deadline: Option<Instant>,
}

impl S3Store {
    /// Wraps a client (built once in `main`) for one bucket.
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        S3Store {
            client,
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

    /// The deadline every call of this store ends by ([`Store::until`]).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// `call`, bounded by the store's deadline: [`Error::Deadline`] naming
    /// `op` and `key` when it is still under way then.
    async fn bounded<T>(
        &self,
        op: &'static str,
        key: &str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(deadline) = self.deadline else {
            return call.await;
        };
        match tokio::time::timeout_at(deadline.into(), call).await {
            Ok(r) => r,
            Err(_) => {
                tracing::warn!(
                    op,
                    key,
                    "S3 call not answered before the run's deadline; given up"
                );
                Err(Error::Deadline {
                    op,
                    bucket: self.bucket.clone(),
                    key: key.to_string(),
                    margin_s: S3_DEADLINE_MARGIN.as_secs(),
                })
            }
        }
    }

    /// Bodies of at least `threshold` bytes go up as multipart uploads in
    /// parts of `part_size` bytes (see [`multipart_ranges`] for how the part
    /// size is kept within S3's limits); smaller ones as one PutObject.
    /// `threshold` 0 sends every body as a multipart upload.
    pub fn with_multipart(mut self, threshold: usize, part_size: usize) -> Self {
        self.multipart_threshold = threshold;
        self.multipart_part_size = part_size;
        self
    }

    /// Uses smaller DeleteObjects batches (tests exercise batching on small
    /// days); clamped to 1..=[`DELETE_BATCH_MAX`].
    pub fn with_delete_batch_size(mut self, n: usize) -> Self {
        self.delete_batch_size = n.clamp(1, DELETE_BATCH_MAX);
        self
    }

    /// Sends at most `n` DeleteObjects requests at once (at least 1; the
    /// crash tests use 1, so a crash can fall between two batches).
    pub fn with_delete_batches_in_flight(mut self, n: usize) -> Self {
        self.delete_batches_in_flight = n.max(1);
        self
    }

    /// Shortens the per-key DeleteObjects retry backoff (tests).
    pub fn with_delete_backoff(mut self, min_delay: Duration) -> Self {
        self.delete_backoff = self
            .delete_backoff
            .with_min_delay(min_delay)
            .with_max_delay(min_delay * 4);
        self
    }

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The underlying SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The SDK error `e` of `op` on `key` as an [`Error`]: one line, naming
    /// the operation, the key and the code (the SDK's full debug dump goes
    /// to the debug log).
    fn err<E>(&self, op: &'static str, key: &str, e: SdkError<E>) -> Error
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let status = e.raw_response().map(|r| r.status().as_u16());
        let (code, message, transient) = match &e {
            SdkError::ServiceError(se) => {
                let err = se.err();
                let code = err
                    .code()
                    .map(str::to_string)
                    .unwrap_or_else(|| match status {
                        Some(404) => "NotFound".into(),
                        Some(412) => "PreconditionFailed".into(),
                        Some(s) => format!("HTTP {s}"),
                        None => "Unknown".into(),
                    });
                let transient = TRANSIENT_CODES.contains(&code.as_str())
                    || status.is_some_and(|s| s >= 500 || s == 429);
                let message = match err.message().map(str::trim) {
                    Some(m) if !m.is_empty() => m.to_string(),
                    _ => no_message(status),
                };
                (code, message, transient)
            }
            SdkError::TimeoutError(_) => ("timeout".into(), one_line(&e), true),
            SdkError::DispatchFailure(_) => ("dispatch".into(), one_line(&e), true),
            SdkError::ResponseError(_) => ("response".into(), one_line(&e), true),
            _ => ("construction".into(), one_line(&e), false),
        };
        // The SDK's full dump (request, headers, extensions: ~1.5 KB) goes
        // to the debug log only; the error is one line.
        tracing::debug!(op, key, error = ?e, "S3 error in full");
        if code == "PreconditionFailed" || status == Some(412) {
            return Error::PreconditionFailed {
                op,
                bucket: self.bucket.clone(),
                key: key.to_string(),
            };
        }
        Error::S3 {
            op,
            bucket: self.bucket.clone(),
            key: key.to_string(),
            code,
            message,
            transient,
        }
    }

    /// Every object under `prefix` (ListObjectsV2, paginated, 1,000 keys a page),
    /// in S3's lexicographic key order. Asked with `encoding-type=url`, keys
    /// decoded ([`decode_listed`]), so a key with a control character lists
    /// like any other.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .encoding_type(EncodingType::Url)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.err("ListObjectsV2", prefix, e))?;
            for o in page.contents() {
                out.extend(self.object_meta(prefix, o)?);
            }
        }
        Ok(out)
    }

    /// A listed object (asked with `encoding-type=url`) with its key
    /// decoded; `None` without a key.
    ///
    /// Errors: [`Error::S3`] (code `KeyEncoding`) when the key does not
    /// decode to UTF-8 (a server defect: S3 keys are UTF-8).
    fn object_meta(
        &self,
        prefix: &str,
        o: &aws_sdk_s3::types::Object,
    ) -> Result<Option<ObjectMeta>> {
        let Some(mut meta) = object_meta(o) else {
            return Ok(None);
        };
        meta.key = self.decode(prefix, &meta.key)?;
        Ok(Some(meta))
    }

    /// [`decode_listed`], its failure as [`Error::S3`] naming the listing.
    fn decode(&self, prefix: &str, encoded: &str) -> Result<String> {
        decode_listed(encoded).ok_or_else(|| Error::S3 {
            op: "ListObjectsV2",
            bucket: self.bucket.clone(),
            key: prefix.to_string(),
            code: "KeyEncoding".into(),
            message: format!(
                "the server returned the url-encoded key {} that is not UTF-8 once decoded; S3 keys are UTF-8, so the server is at fault",
                crate::text::quote(encoded)
            ),
            transient: false,
        })
    }

    /// One ListObjectsV2 page (see [`Store::list_page`]).
    pub async fn list_page(&self, prefix: &str, start_after: Option<&str>) -> Result<ListPage> {
        let page = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_start_after(start_after.map(str::to_string))
            .encoding_type(EncodingType::Url)
            .send()
            .await
            .map_err(|e| self.err("ListObjectsV2", prefix, e))?;
        let mut objects = Vec::with_capacity(page.contents().len());
        for o in page.contents() {
            objects.extend(self.object_meta(prefix, o)?);
        }
        Ok(ListPage {
            objects,
            truncated: page.is_truncated().unwrap_or(false),
        })
    }

    /// The common prefixes directly under `prefix` (ListObjectsV2 with
    /// delimiter `/` and `encoding-type=url`, prefixes decoded).
    pub async fn list_prefixes(&self, prefix: &str) -> Result<Vec<String>> {
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .delimiter("/")
            .encoding_type(EncodingType::Url)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.err("ListObjectsV2", prefix, e))?;
            for p in page.common_prefixes().iter().filter_map(|p| p.prefix()) {
                out.push(self.decode(prefix, p)?);
            }
        }
        Ok(out)
    }

    /// Reads a whole object. A missing key is an error for which
    /// [`Error::is_not_found`] is true.
    ///
    /// A body that breaks off is read again ([`S3Store::get_read`]).
    pub async fn get(&self, key: &str) -> Result<Fetched> {
        self.get_read(key, None, None).await
    }

    /// GetObject of `key` (bytes `range` only, with `If-Match` on
    /// `if_match`, when given), its body read; a body that breaks off
    /// (reset, truncated, stalled: a transient [`Error::S3`] with code
    /// `body`, [`Error::is_transient`]) is read again, [`BODY_ATTEMPTS`]
    /// times in all. A failed request is not sent again here: the SDK's
    /// retry strategy already did.
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
            let out = req
                .customize()
                .config_override(attempt_config(0))
                .send()
                .await
                .map_err(|e| self.err("GetObject", key, e))?;
            self.read_body(key, out, if_match).await
        };
        // Only a body that broke off is read again, at once: the request's
        // own failures were retried by the SDK.
        read.retry(
            backon::ConstantBuilder::default()
                .with_delay(Duration::ZERO)
                .with_max_times(BODY_ATTEMPTS as usize - 1),
        )
        .when(|e| e.is_transient() && is_body_error(e))
        .notify(
            |e, _| tracing::warn!(key, error = %e, "GetObject body broke off; reading it again"),
        )
        .await
    }

    /// A GetObject answer's body and ETag, once its ETag is the one
    /// `if_match` names (when it names one: [`check_if_match`], before the
    /// body is read).
    ///
    /// Errors: [`Error::PreconditionFailed`] on another ETag; a body that
    /// breaks off ([`S3Store::body_err`]).
    async fn read_body(
        &self,
        key: &str,
        out: aws_sdk_s3::operation::get_object::GetObjectOutput,
        if_match: Option<&str>,
    ) -> Result<Fetched> {
        let etag = out.e_tag().unwrap_or_default().to_string();
        check_if_match(&self.bucket, key, if_match, &etag)?;
        let len = out.content_length().unwrap_or(0).max(0) as u64;
        let limit = attempt_timeout(len);
        let body = tokio::time::timeout(limit, out.body.collect())
            .await
            .map_err(|_| {
                self.body_err(
                    key,
                    format!(
                        "the body ({len} bytes) was not read within {} s",
                        limit.as_secs()
                    ),
                )
            })?
            .map_err(|e| self.body_err(key, one_line(&e)))?;
        Ok(Fetched {
            body: body.into_bytes(),
            etag,
        })
    }

    /// A GetObject body that broke off while it was read (connection reset,
    /// timeout): [`Error::S3`] with code `body`, transient, so the caller's
    /// retry policy reads the object again.
    fn body_err(&self, key: &str, e: impl std::fmt::Display) -> Error {
        Error::S3 {
            op: "GetObject",
            bucket: self.bucket.clone(),
            key: key.to_string(),
            code: "body".into(),
            message: e.to_string(),
            transient: true,
        }
    }

    /// Reads bytes `range` of an object (see [`Store::get_range`]).
    pub async fn get_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
        if_match: Option<&str>,
    ) -> Result<Fetched> {
        if range.start >= range.end {
            return Ok(Fetched {
                body: Bytes::new(),
                etag: if_match.unwrap_or_default().to_string(),
            });
        }
        self.get_read(key, Some(range), if_match).await
    }

    /// Reads a whole object, or `None` when the key does not exist.
    pub async fn get_opt(&self, key: &str) -> Result<Option<Fetched>> {
        match self.get(key).await {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// HeadObject with checksum mode on, or `None` when the key does not exist.
    pub async fn head(&self, key: &str) -> Result<Option<Head>> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .checksum_mode(ChecksumMode::Enabled)
            .customize()
            .config_override(attempt_config(0))
            .send()
            .await
        {
            Ok(h) => Ok(Some(Head {
                size: h.content_length().unwrap_or(0).max(0) as u64,
                etag: h.e_tag().unwrap_or_default().to_string(),
                checksum_sha256: h.checksum_sha256().map(str::to_string),
                metadata: h
                    .metadata()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default(),
            })),
            Err(e) => {
                let e = self.err("HeadObject", key, e);
                if e.is_not_found() { Ok(None) } else { Err(e) }
            }
        }
    }

    /// PutObject with a condition; returns the new ETag. `sha256_b64` is sent
    /// as the SHA-256 flexible checksum, which S3 verifies and stores.
    ///
    /// Bodies of at least the multipart threshold (default
    /// [`MULTIPART_THRESHOLD_DEFAULT`], see [`S3Store::with_multipart`]) go
    /// up as a multipart upload instead: each part carries its own SHA-256
    /// (S3 then stores a composite checksum, `{b64}-{parts}`, not the
    /// whole-object one), and the condition is applied by
    /// CompleteMultipartUpload, so the object appears whole or not at all.
    /// A failed upload is aborted (best effort; an upload left by a crash is
    /// removed by the bucket's `AbortIncompleteMultipartUpload` lifecycle
    /// rule, see docs/operating.md, "Recovery").
    pub async fn put(
        &self,
        key: &str,
        body: Bytes,
        mode: PutMode,
        sha256_b64: Option<&str>,
    ) -> Result<String> {
        let request = PutRequest {
            mode,
            sha256_b64: sha256_b64.map(str::to_string),
            metadata: BTreeMap::new(),
        };
        self.put_object(key, body, request).await
    }

    /// [`S3Store::put`] with user metadata (`x-amz-meta-*`).
    pub async fn put_object(&self, key: &str, body: Bytes, request: PutRequest) -> Result<String> {
        let PutRequest {
            mode,
            sha256_b64,
            metadata,
        } = request;
        let sha256_b64 = sha256_b64.as_deref();
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
            .body(ByteStream::from(body));
        req = match &mode {
            PutMode::Create => req.if_none_match("*"),
            PutMode::Update(etag) => req.if_match(etag),
        };
        if let Some(sum) = sha256_b64 {
            req = req.checksum_sha256(sum);
        }
        if key.ends_with(".json") {
            req = req.content_type("application/json");
        }
        let out = req
            .customize()
            .config_override(attempt_config(len))
            .send()
            .await
            .map_err(|e| self.err("PutObject", key, e))?;
        Ok(out.e_tag().unwrap_or_default().to_string())
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
        let mut req = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .set_metadata(metadata)
            .checksum_algorithm(ChecksumAlgorithm::Sha256);
        if key.ends_with(".json") {
            req = req.content_type("application/json");
        }
        let created = req
            .customize()
            .config_override(attempt_config(0))
            .send()
            .await
            .map_err(|e| self.err("CreateMultipartUpload", key, e))?;
        let Some(upload_id) = created.upload_id().map(str::to_string) else {
            return Err(Error::S3 {
                op: "CreateMultipartUpload",
                bucket: self.bucket.clone(),
                key: key.to_string(),
                code: "NoUploadId".into(),
                message: "the response carried no UploadId".into(),
                transient: true,
            });
        };
        let result = self
            .upload_parts_and_complete(key, &upload_id, &body, ranges, mode)
            .await;
        if result.is_err() {
            let abort = self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(&upload_id)
                .send()
                .await;
            if let Err(e) = abort {
                tracing::warn!(key, upload_id, error = %self.err("AbortMultipartUpload", key, e),
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
                    let out = self
                        .client
                        .upload_part()
                        .bucket(&self.bucket)
                        .key(key)
                        .upload_id(upload_id)
                        .part_number(number)
                        .checksum_sha256(&sum)
                        .body(ByteStream::from(part))
                        .customize()
                        .config_override(attempt_config(part_len))
                        .send()
                        .await
                        .map_err(|e| self.err("UploadPart", key, e))?;
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
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            );
        req = match &mode {
            PutMode::Create => req.if_none_match("*"),
            PutMode::Update(etag) => req.if_match(etag),
        };
        let out = req
            .customize()
            .config_override(attempt_config(0))
            .send()
            .await
            .map_err(|e| self.err("CompleteMultipartUpload", key, e))?;
        Ok(out.e_tag().unwrap_or_default().to_string())
    }

    /// DeleteObject, conditional on `if_match` when given. Deleting a missing
    /// key succeeds (S3 semantics).
    pub async fn delete(&self, key: &str, if_match: Option<&str>) -> Result<()> {
        let mut req = self.client.delete_object().bucket(&self.bucket).key(key);
        if let Some(etag) = if_match {
            req = req.if_match(etag);
        }
        match req
            .customize()
            .config_override(attempt_config(0))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = self.err("DeleteObject", key, e);
                if e.is_not_found() { Ok(()) } else { Err(e) }
            }
        }
    }

    /// Keys per DeleteObjects request (at most [`DELETE_BATCH_MAX`]).
    pub fn delete_batch_size(&self) -> usize {
        self.delete_batch_size
    }

    /// Deletes one batch of `(key, etag)` pairs (at most
    /// [`S3Store::delete_batch_size`] keys; S3 DeleteObjects takes at most
    /// 1,000) with one DeleteObjects request, each key conditional on its
    /// ETag, in quiet mode. A 200 response can still carry per-key errors:
    /// transient ones are retried (up to 2 more times, 1 s then 2 s backoff
    /// with jitter), `NoSuchKey` counts as deleted, and the rest are returned.
    ///
    /// Errors: a whole request that fails after the SDK's retries.
    pub async fn delete_batch(&self, batch: &[(String, String)]) -> Result<Vec<DeleteFailure>> {
        assert!(
            batch.len() <= self.delete_batch_size,
            "batch larger than the DeleteObjects limit"
        );
        let mut failures = Vec::new();
        // A key DeleteObjects' XML cannot carry (a control character) goes
        // by DeleteObject, one by one: ministack answers 400 to the whole
        // batch otherwise, and S3 documents such keys as not expressible in
        // XML 1.0 ([`fits_delete_xml`]). Same condition (If-Match), same
        // outcome per key.
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
                // A per-key refusal (AccessDenied, ...), as DeleteObjects
                // would report it; a transient failure fails the call.
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
            if transient.is_empty() {
                break;
            }
            match delays.next() {
                Some(d) => {
                    tracing::warn!(keys = transient.len(), code = %transient[0].code, delay_ms = d.as_millis() as u64, "DeleteObjects per-key transient errors; retrying those keys");
                    tokio::time::sleep(d).await;
                    pending.retain(|(k, _)| transient.iter().any(|f| &f.key == k));
                }
                None => {
                    failures.extend(transient);
                    break;
                }
            }
        }
        Ok(failures)
    }

    async fn delete_once(&self, objects: &[(String, String)]) -> Result<Vec<DeleteFailure>> {
        let ids = objects
            .iter()
            .map(|(k, etag)| ObjectIdentifier::builder().key(k).e_tag(etag).build())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::S3 {
                op: "DeleteObjects",
                bucket: self.bucket.clone(),
                key: objects.first().map(|o| o.0.clone()).unwrap_or_default(),
                code: "construction".into(),
                message: e.to_string(),
                transient: false,
            })?;
        let delete = Delete::builder()
            .set_objects(Some(ids))
            .quiet(true)
            .build()
            .map_err(|e| Error::S3 {
                op: "DeleteObjects",
                bucket: self.bucket.clone(),
                key: String::new(),
                code: "construction".into(),
                message: e.to_string(),
                transient: false,
            })?;
        let first = objects.first().map(|o| o.0.as_str()).unwrap_or_default();
        let out = self
            .client
            .delete_objects()
            .bucket(&self.bucket)
            .delete(delete)
            .customize()
            .config_override(attempt_config(0))
            .send()
            .await
            .map_err(|e| self.err("DeleteObjects", first, e))?;
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

/// A listed object's key, ETag, size and LastModified (`None` without a key).
fn object_meta(o: &aws_sdk_s3::types::Object) -> Option<ObjectMeta> {
    let key = o.key()?;
    let last_modified = o
        .last_modified()
        .and_then(|t| DateTime::from_timestamp(t.secs(), t.subsec_nanos()))
        .unwrap_or_default();
    Some(ObjectMeta {
        key: key.to_string(),
        etag: o.e_tag().unwrap_or_default().to_string(),
        size: o.size().unwrap_or(0).max(0) as u64,
        last_modified,
    })
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
        S3Store {
            deadline,
            ..self.clone()
        }
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<ObjectMeta>>> + Send {
        self.bounded("ListObjectsV2", prefix, S3Store::list(self, prefix))
    }

    fn list_prefixes(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>>> + Send {
        self.bounded(
            "ListObjectsV2",
            prefix,
            S3Store::list_prefixes(self, prefix),
        )
    }

    fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
    ) -> impl Future<Output = Result<ListPage>> + Send {
        self.bounded(
            "ListObjectsV2",
            prefix,
            S3Store::list_page(self, prefix, start_after),
        )
    }

    fn get(&self, key: &str) -> impl Future<Output = Result<Fetched>> + Send {
        self.bounded("GetObject", key, S3Store::get(self, key))
    }

    fn head(&self, key: &str) -> impl Future<Output = Result<Option<Head>>> + Send {
        self.bounded("HeadObject", key, S3Store::head(self, key))
    }

    fn get_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
        if_match: Option<&str>,
    ) -> impl Future<Output = Result<Fetched>> + Send {
        self.bounded(
            "GetObject",
            key,
            S3Store::get_range(self, key, range, if_match),
        )
    }

    fn put_object(
        &self,
        key: &str,
        body: Bytes,
        request: PutRequest,
    ) -> impl Future<Output = Result<String>> + Send {
        self.bounded(
            "PutObject",
            key,
            S3Store::put_object(self, key, body, request),
        )
    }

    fn delete(&self, key: &str, if_match: Option<&str>) -> impl Future<Output = Result<()>> + Send {
        self.bounded("DeleteObject", key, S3Store::delete(self, key, if_match))
    }

    fn delete_batch(
        &self,
        batch: &[(String, String)],
    ) -> impl Future<Output = Result<Vec<DeleteFailure>>> + Send {
        let first = batch.first().map(|b| b.0.as_str()).unwrap_or_default();
        self.bounded("DeleteObjects", first, S3Store::delete_batch(self, batch))
    }
}

/// A GetObject body that broke off ([`S3Store::body_err`]), as opposed to
/// a request the SDK already retried.
fn is_body_error(e: &Error) -> bool {
    matches!(e, Error::S3 { code, .. } if code == "body")
}

/// An AWS SDK error (S3, CloudWatch, Secrets Manager) as one line for a
/// report: `{code}: {message} (HTTP {status})` for a service error, else
/// [`one_line`] of it. The status is kept because some servers answer in a
/// shape the SDK cannot read a code from (moto's Secrets Manager denials:
/// code `Unknown`, HTTP 403). The SDK's `DisplayErrorContext` appends its
/// whole debug dump (request, headers, extensions); that goes to the debug
/// log only.
pub fn sdk_error_line<E>(e: &SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    tracing::debug!(error = ?e, "AWS SDK error in full");
    match e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            let code = err.code().unwrap_or("Unknown");
            let message = err.message().map(one_line_text).unwrap_or_default();
            let status = se.raw().status().as_u16();
            format!("{code}: {message} (HTTP {status})")
        }
        other => one_line(other),
    }
}

fn one_line_text(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An SDK error as one line: its `Display` with every source, newlines
/// folded, at most 300 characters (a dispatch failure's source chain names
/// the cause, e.g. "Connection refused").
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        source = cause.source();
    }
    let s: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match s.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}
