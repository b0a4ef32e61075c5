//! The one storage seam, [`Store`]: [`S3Store`] over aws-sdk-s3, and [`MemoryStore`], a strict
//! in-memory bucket; `tests/suite/store_conformance.rs` holds both, and the ministack and moto
//! servers, to S3's documented behaviour.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::infra::error::{Error, Result};

pub mod lifecycle;
mod memory;
pub mod ranges;
mod s3;
mod s3_error;
pub use memory::{DeletedVersion, LIST_PAGE_MAX, MemoryStore, md5_etag};
pub use s3::S3Store;
pub use s3_error::{one_line, sdk_error_line, status_meaning};

/// S3 DeleteObjects takes at most 1,000 keys per request (S3 API reference).
pub const DELETE_BATCH_MAX: usize = 1000;

/// S3's smallest part but the last: 5 MiB (S3, "Amazon S3 multipart upload limits").
pub const MULTIPART_PART_MIN: usize = 5 * 1024 * 1024;

/// S3's largest part size: 5 GiB (same source).
pub const MULTIPART_PART_MAX: usize = 5 * 1024 * 1024 * 1024;

/// S3 allows at most 10,000 parts in one upload (same source).
pub const MULTIPART_PARTS_MAX: usize = 10_000;

/// Default size (bytes) from which [`S3Store::put`] uses a multipart upload: 16 MiB.
pub const MULTIPART_THRESHOLD_DEFAULT: usize = 16 * 1024 * 1024;

/// Default part size (bytes) of multipart uploads: 8 MiB.
pub const MULTIPART_PART_DEFAULT: usize = 8 * 1024 * 1024;

/// The user metadata in which a compacted output carries its commit's job id.
pub const JOB_ID_METADATA: &str = "compaction-job-id";

/// DeleteObjects requests a commit sends at once: fewer round trips, no burst
/// past the 3,500 DELETEs a second S3 serves per prefix (S3's documented rate).
pub const DELETE_BATCHES_IN_FLIGHT: usize = 4;

const MULTIPART_PARTS_IN_FLIGHT: usize = 4;

/// The byte ranges of a multipart upload of `len` bytes in parts of `part_size`
/// (the last holds the rest), raised to [`MULTIPART_PART_MIN`] and to fit [`MULTIPART_PARTS_MAX`].
///
/// ```
/// use archive_compaction::infra::storage::{multipart_ranges, MULTIPART_PART_MIN};
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
    (0..len).step_by(size).map(|start| start..(start + size).min(len)).collect()
}

/// S3 calls of a run end this long before its deadline ([`Store::until`]): 5 s to release the lease
/// ([`crate::protocol::lease::LEASE_RELEASE_TIMEOUT`]), then 1 s each for CloudWatch, Secrets
/// Manager and MQTT ([`crate::app::reporting::SINK_TIME_AT_THE_END`]).
pub const S3_DEADLINE_MARGIN: Duration = Duration::from_secs(8);

/// The base of [`attempt_timeout`]: below the SDK's 60 s, so a lost request is retried sooner.
pub const ATTEMPT_TIMEOUT_BASE: Duration = Duration::from_secs(10);

pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads in all of a GetObject body that breaks off (the SDK retries requests, not bodies).
pub const BODY_ATTEMPTS: u32 = 3;

/// The time one attempt carrying (or a body of) `bytes` may take:
/// [`ATTEMPT_TIMEOUT_BASE`] plus 1 s per MiB begun (1 MiB/s at the least).
///
/// ```
/// use archive_compaction::infra::storage::attempt_timeout;
/// use std::time::Duration;
/// assert_eq!(attempt_timeout(3_000), Duration::from_secs(11));
/// assert_eq!(attempt_timeout(0), Duration::from_secs(10));
/// assert_eq!(attempt_timeout(8 * 1024 * 1024), Duration::from_secs(18));
/// ```
pub fn attempt_timeout(bytes: u64) -> Duration {
    ATTEMPT_TIMEOUT_BASE + Duration::from_secs(bytes.div_ceil(1024 * 1024))
}

/// A key of a ListObjectsV2 response asked with `encoding-type=url`, decoded
/// (`+` is a space); `None` when not UTF-8. Without it a key holding a character
/// XML 1.0 cannot carry (ESC) makes the whole response unreadable (S3 user guide).
///
/// ```
/// use archive_compaction::infra::storage::decode_listed;
/// assert_eq!(decode_listed("flights/a%1Bb+c%2Bd%20e").as_deref(), Some("flights/a\x1bb c+d e"));
/// assert_eq!(decode_listed("day=20/%E2%82%AC.parquet").as_deref(), Some("day=20/€.parquet"));
/// assert_eq!(decode_listed("%FF"), None);
/// ```
pub fn decode_listed(encoded: &str) -> Option<String> {
    let spaced = encoded.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced).decode_utf8().ok().map(|s| s.into_owned())
}

/// Whether DeleteObjects' XML body can carry `key`: not with a control character
/// (S3 user guide); such keys go by DeleteObject ([`S3Store::delete_batch`]).
pub fn fits_delete_xml(key: &str) -> bool {
    !key.chars().any(char::is_control)
}

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
    /// User metadata (`x-amz-meta-*` names without the prefix, lower case).
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
    /// SHA-256 of the body, base64: the flexible checksum S3 verifies and stores.
    pub sha256_b64: Option<String>,
    /// User metadata (`x-amz-meta-*`).
    pub metadata: BTreeMap<String, String>,
}

impl PutRequest {
    /// A PUT with this condition, no checksum and no metadata.
    pub fn new(mode: PutMode) -> PutRequest {
        PutRequest { mode, sha256_b64: None, metadata: BTreeMap::new() }
    }
}

/// One bucket with S3's semantics: each method's doc is the contract the conformance suite checks.
/// Every future is `Send` (the Lambda handler spawns the run).
pub trait Store: Send + Sync {
    /// The bucket name.
    fn bucket(&self) -> &str;

    /// Keys per [`Store::delete_batch`] call (at most [`DELETE_BATCH_MAX`]).
    fn delete_batch_size(&self) -> usize;

    /// Calls the commit's delete phase sends at once (the lease confirmed before each wave).
    fn delete_batches_in_flight(&self) -> usize {
        1
    }

    /// Keys per [`Store::list_page`] page when more follow.
    fn list_page_size(&self) -> usize {
        LIST_PAGE_MAX
    }

    /// The same store, each call (attempts, backoffs, body reads together) bounded
    /// by `deadline` (`None`: no bound), then [`Error::Deadline`]; in memory, none.
    fn until(&self, deadline: Option<Instant>) -> Self
    where
        Self: Sized + Clone,
    {
        let _ = deadline;
        self.clone()
    }

    /// Every object under `prefix`, in UTF-8 byte key order, every page followed.
    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<ObjectMeta>>> + Send;

    /// The common prefixes directly under `prefix` (delimiter `/`), in order.
    fn list_prefixes(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// One ListObjectsV2 page: the objects under `prefix` after `start_after` (as
    /// S3's `StartAfter`), at most [`LIST_PAGE_MAX`]. [`ranges`] builds on it.
    fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
    ) -> impl Future<Output = Result<ListPage>> + Send;

    /// Reads a whole object; a missing key is an [`Error::is_not_found`] error.
    fn get(&self, key: &str) -> impl Future<Output = Result<Fetched>> + Send;

    /// Reads a whole object, or `None` when the key does not exist.
    fn get_opt(&self, key: &str) -> impl Future<Output = Result<Option<Fetched>>> + Send {
        async move { found(self.get(key).await) }
    }

    /// Bytes `range` (end excluded, clipped to the object's end) of an object,
    /// only in version `if_match` when given.
    /// Errors: [`Error::PreconditionFailed`] when the ETag (the response's too, for a server
    /// that ignores `If-Match`) is not `if_match`; a missing key as in [`Store::get`].
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
            Ok(Fetched { body: f.body.slice(start..end), etag: f.etag })
        }
    }

    /// Size, ETag, stored SHA-256 and metadata, or `None` when the key does not exist.
    fn head(&self, key: &str) -> impl Future<Output = Result<Option<Head>>> + Send;

    /// PutObject with a condition, checksum and metadata; returns the new ETag.
    /// Errors: [`Error::PreconditionFailed`] (412) when the condition fails; not found
    /// (404) when an update's key is missing; a transient `ConditionalRequestConflict`
    /// (409) when another operation on the key is in flight: retry it.
    fn put_object(
        &self,
        key: &str,
        body: Bytes,
        request: PutRequest,
    ) -> impl Future<Output = Result<String>> + Send;

    /// [`Store::put_object`] with an optional SHA-256 (base64), no metadata.
    fn put(
        &self,
        key: &str,
        body: Bytes,
        mode: PutMode,
        sha256_b64: Option<&str>,
    ) -> impl Future<Output = Result<String>> + Send {
        let request =
            PutRequest { sha256_b64: sha256_b64.map(str::to_string), ..PutRequest::new(mode) };
        self.put_object(key, body, request)
    }

    /// DeleteObject, conditional on `if_match` ([`Error::PreconditionFailed`]);
    /// a missing key succeeds.
    fn delete(&self, key: &str, if_match: Option<&str>) -> impl Future<Output = Result<()>> + Send;

    /// Deletes each `(key, etag)` (at most [`Store::delete_batch_size`]) only in that version;
    /// returns the keys not deleted with S3's per-key error code (a missing key counts as deleted).
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
    /// The object changed since read (conditional delete lost): a newer version survives.
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

fn found<T>(answer: Result<T>) -> Result<Option<T>> {
    match answer {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether two ETags are equal, S3's quotes aside.
pub fn etag_eq(a: &str, b: &str) -> bool {
    a.trim_matches('"') == b.trim_matches('"')
}
