//! [`MemoryStore`]: a strict in-memory S3 bucket for tests and the deterministic simulation. It
//! implements what the S3 API reference and user guide document, not what a lenient server does:
//!
//! - ETags are the quoted hex MD5 of the body, or under [`MemoryStore::sse_kms`] not (AWS: SSE-KMS
//!   and SSE-C ETags are not an MD5 digest of the data).
//! - `If-None-Match: *` on an existing key and `If-Match` with another ETag are 412; `If-Match` on
//!   a missing key is 404 `NoSuchKey`; a conditional write overtaken in flight by another write or
//!   delete of the key is 409 `ConditionalRequestConflict` (transient). A write is in flight until
//!   its first poll after a yield, so two joined writes interleave.
//! - A SHA-256 sent with a PUT is verified (`BadDigest`) and stored; HEAD
//!   returns it, and only then.
//! - Listings are in UTF-8 byte order, in pages of 1,000; a write between
//!   two pages shows in the later ones only.
//! - DeleteObjects deletes each key only in the version of its ETag; a
//!   changed key is a per-key `PreconditionFailed`, a missing one is deleted.
//! - LastModified comes from the injected [`Clock`], to the millisecond.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use archive_compaction::infra::error::Error;
//! use archive_compaction::infra::storage::{MemoryStore, PutMode, Store};
//! let store = MemoryStore::new("b");
//! let etag = store.put("k", "v1".into(), PutMode::Create, None).await.unwrap();
//! assert_eq!(etag, "\"6654c734ccab8f440ff0825eb443dc7f\""); // MD5("v1")
//! let again = store.put("k", "v2".into(), PutMode::Create, None).await;
//! assert!(matches!(again, Err(Error::PreconditionFailed { .. })));
//! store.put("k", "v2".into(), PutMode::Update(etag.clone()), None).await.unwrap();
//! assert_eq!(store.delete_batch(&[("k".into(), etag)]).await.unwrap()[0].code, "PreconditionFailed");
//! # });
//! ```

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use chrono::{DateTime, Utc};

use super::{
    DELETE_BATCH_MAX, DeleteFailure, Fetched, Head, ListPage, ObjectMeta, PutMode, PutRequest,
    Store, etag_eq, sha256_b64,
};
use crate::infra::clock::{Clock, SystemClock};
use crate::infra::error::{Error, Result};

/// Keys (or common prefixes) per ListObjectsV2 page: S3's maximum and default.
pub const LIST_PAGE_MAX: usize = 1000;

/// An error answer as S3 words it: code, message, transient.
struct Answer(&'static str, &'static str, bool);

const NO_SUCH_KEY: Answer = Answer("NoSuchKey", "The specified key does not exist.", false);
const ACCESS_DENIED: Answer = Answer("AccessDenied", "Access Denied", false);
const PRECONDITION_FAILED: Answer = Answer(
    "PreconditionFailed",
    "At least one of the pre-conditions you specified did not hold",
    false,
);
const CONFLICT: Answer = Answer(
    "ConditionalRequestConflict",
    "A conflicting operation occurred. If using PutObject you can retry the request.",
    true,
);
const INTERNAL_ERROR: Answer =
    Answer("InternalError", "We encountered an internal error. Please try again.", true);
const BAD_DIGEST: Answer =
    Answer("BadDigest", "The SHA256 you specified did not match the calculated checksum.", false);

#[derive(Debug, Clone)]
struct Object {
    body: Bytes,
    etag: String,
    last_modified: DateTime<Utc>,
    sha256: Option<String>,
    metadata: BTreeMap<String, String>,
}

/// A version removed from the bucket, as logged by [`MemoryStore::deleted`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedVersion {
    /// The key.
    pub key: String,
    /// The ETag of the version removed.
    pub etag: String,
    /// The operation: `DeleteObject` or `DeleteObjects`.
    pub op: &'static str,
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<String, Object>,
    /// Per key, bumped by every completed write or delete: a conditional
    /// write that sees it moved while in flight lost a race.
    generation: BTreeMap<String, u64>,
    deleted: Vec<DeletedVersion>,
    requests: BTreeMap<&'static str, u64>,
    /// PUTs so far (the SSE-KMS ETags' counter).
    puts: u64,
    /// Keys whose GetObject answers a 500 ([`MemoryStore::fail_gets`]).
    failing_gets: std::collections::BTreeSet<String>,
    /// Keys S3 refuses to delete ([`MemoryStore::deny_deletes`]).
    denied_deletes: std::collections::BTreeSet<String>,
}

impl State {
    fn generation(&self, key: &str) -> u64 {
        self.generation.get(key).copied().unwrap_or(0)
    }

    fn bump(&mut self, key: &str) {
        *self.generation.entry(key.to_string()).or_default() += 1;
    }

    /// Removes `key`'s current version, if any, logged as deleted by `op`.
    fn remove(&mut self, key: &str, op: &'static str) {
        if let Some(o) = self.objects.remove(key) {
            self.bump(key);
            self.deleted.push(DeletedVersion { key: key.to_string(), etag: o.etag, op });
        }
    }

    /// `op` on `key`, only in version `if_match` when given: S3's refusal, or removed (a missing
    /// key too: 204 without a condition; 404 with one, which S3Store maps to Ok too).
    fn delete(&mut self, key: &str, if_match: Option<&str>, op: &'static str) -> Option<Answer> {
        if self.denied_deletes.contains(key) {
            return Some(ACCESS_DENIED);
        }
        if self.objects.get(key).zip(if_match).is_some_and(|(o, etag)| !etag_eq(&o.etag, etag)) {
            return Some(PRECONDITION_FAILED);
        }
        self.remove(key, op);
        None
    }
}

#[derive(Debug)]
struct Inner {
    bucket: String,
    sse_kms: bool,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

/// Clones share the same bucket.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
    delete_batch_size: usize,
    list_page_size: usize,
    /// Writes are applied, their answers lost ([`MemoryStore::lose_answers`]).
    lose_answers: bool,
}

/// `"<hex md5>"`: S3's ETag of a single-part upload.
pub fn md5_etag(body: &[u8]) -> String {
    use md5::Digest;
    let digest = md5::Md5::digest(body);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

impl MemoryStore {
    /// An empty bucket on the system clock, DeleteObjects batches of 1,000.
    pub fn new(bucket: impl Into<String>) -> MemoryStore {
        MemoryStore::with_clock(bucket, Arc::new(SystemClock))
    }

    /// An empty bucket whose LastModified times come from `clock`.
    pub fn with_clock(bucket: impl Into<String>, clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore::new_bucket(bucket.into(), clock, false)
    }

    /// An empty bucket with SSE-KMS default encryption, on `clock`: ETags differ between PUTs of
    /// one body.
    pub fn sse_kms(bucket: impl Into<String>, clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore::new_bucket(bucket.into(), clock, true)
    }

    fn new_bucket(bucket: String, clock: Arc<dyn Clock>, sse_kms: bool) -> MemoryStore {
        MemoryStore {
            inner: Arc::new(Inner { bucket, sse_kms, clock, state: Mutex::new(State::default()) }),
            delete_batch_size: DELETE_BATCH_MAX,
            list_page_size: LIST_PAGE_MAX,
            lose_answers: false,
        }
    }

    /// The same bucket, seen through a client that sends at most `n` keys
    /// per DeleteObjects (clamped to 1..=[`DELETE_BATCH_MAX`]).
    pub fn with_delete_batch_size(&self, n: usize) -> MemoryStore {
        MemoryStore { delete_batch_size: n.clamp(1, DELETE_BATCH_MAX), ..self.clone() }
    }

    /// The same bucket, listed `n` keys a page (clamped to
    /// 1..=[`LIST_PAGE_MAX`]), for multi-page listings with a few objects.
    pub fn with_list_page_size(&self, n: usize) -> MemoryStore {
        MemoryStore { list_page_size: n.clamp(1, LIST_PAGE_MAX), ..self.clone() }
    }

    /// The same bucket through a connection that loses the answer of every
    /// PutObject that took effect: the retry's answer is returned, so a
    /// conditional write fails its own condition. Deletes are not affected.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use archive_compaction::infra::error::Error;
    /// use archive_compaction::infra::storage::{MemoryStore, PutMode, Store};
    /// let store = MemoryStore::new("b");
    /// let lost = store.lose_answers().put("k", "v1".into(), PutMode::Create, None).await;
    /// assert!(matches!(lost, Err(Error::PreconditionFailed { .. })));
    /// assert_eq!(store.get("k").await.unwrap().body, "v1"); // applied all the same
    /// # });
    /// ```
    pub fn lose_answers(&self) -> MemoryStore {
        MemoryStore { lose_answers: true, ..self.clone() }
    }

    /// From now on, every GetObject of `key` answers `InternalError` (500,
    /// transient); the object stays.
    pub fn fail_gets(&self, key: &str) {
        self.state().failing_gets.insert(key.to_string());
    }

    /// From now on, every delete of `key` is refused with `AccessDenied`
    /// (403, not transient), as a bucket policy would; the object stays.
    pub fn deny_deletes(&self, key: &str) {
        self.state().denied_deletes.insert(key.to_string());
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().expect("memory store lock")
    }

    fn now(&self) -> DateTime<Utc> {
        let t = self.inner.clock.now();
        DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
    }

    fn count(&self, op: &'static str) {
        *self.state().requests.entry(op).or_default() += 1;
    }

    /// Requests served so far, by S3 operation (`ListObjectsV2` counts pages).
    pub fn requests(&self, op: &str) -> u64 {
        self.state().requests.get(op).copied().unwrap_or(0)
    }

    /// Every version deleted so far, in order.
    pub fn deleted(&self) -> Vec<DeletedVersion> {
        self.state().deleted.clone()
    }

    /// Every key in the bucket with its body and ETag (a snapshot).
    pub fn snapshot(&self) -> BTreeMap<String, (Bytes, String)> {
        self.state()
            .objects
            .iter()
            .map(|(k, o)| (k.clone(), (o.body.clone(), o.etag.clone())))
            .collect()
    }

    /// `answer` as [`super::S3Store`] reports it (a 412 as [`Error::PreconditionFailed`]).
    fn refuse(&self, op: &'static str, key: &str, answer: Answer) -> Error {
        let Answer(code, message, transient) = answer;
        match code {
            "PreconditionFailed" => {
                Error::PreconditionFailed { op, bucket: self.inner.bucket.clone(), key: key.into() }
            }
            _ => Error::s3(op, &self.inner.bucket, key, code, message, transient),
        }
    }

    /// One ListObjectsV2 page: (objects, prefixes, the last key or prefix, more).
    fn page_of(
        &self,
        prefix: &str,
        delimiter: bool,
        start_after: Option<&str>,
    ) -> (Vec<ObjectMeta>, Vec<String>, Option<String>, bool) {
        self.count("ListObjectsV2");
        let st = self.state();
        let (mut objects, mut prefixes) = (Vec::new(), Vec::<String>::new());
        let mut last = None;
        // The keys under `prefix` follow one another from `prefix` on.
        let from =
            start_after.filter(|s| *s >= prefix).map_or(Bound::Included(prefix), Bound::Excluded);
        let range = st.objects.range::<str, _>((from, Bound::Unbounded));
        for (key, o) in range.take_while(|(k, _)| k.starts_with(prefix)) {
            if objects.len() + prefixes.len() == self.list_page_size {
                return (objects, prefixes, last, true);
            }
            if delimiter && let Some(i) = key[prefix.len()..].find('/') {
                let common = &key[..prefix.len() + i + 1];
                if prefixes.last().map(String::as_str) != Some(common) {
                    prefixes.push(common.to_string());
                }
                // Continue after every key under this common prefix.
                last = Some(format!("{common}\u{10FFFF}"));
                continue;
            }
            objects.push(ObjectMeta {
                key: key.clone(),
                etag: o.etag.clone(),
                size: o.body.len() as u64,
                last_modified: o.last_modified,
            });
            last = Some(key.clone());
        }
        (objects, prefixes, last, false)
    }

    async fn list_all(&self, prefix: &str, delimiter: bool) -> (Vec<ObjectMeta>, Vec<String>) {
        let (mut objects, mut prefixes) = (Vec::new(), Vec::new());
        let mut after: Option<String> = None;
        loop {
            let (o, p, last, more) = self.page_of(prefix, delimiter, after.as_deref());
            objects.extend(o);
            prefixes.extend(p);
            if !more {
                // A common prefix split over two pages is listed once.
                prefixes.dedup();
                return (objects, prefixes);
            }
            after = last;
            tokio::task::yield_now().await;
        }
    }

    async fn put_inner(&self, key: &str, body: Bytes, request: PutRequest) -> Result<String> {
        self.count("PutObject");
        if request.sha256_b64.as_ref().is_some_and(|sum| *sum != sha256_b64(&body)) {
            return Err(self.refuse("PutObject", key, BAD_DIGEST));
        }
        let started = self.state().generation(key);
        // The request is in flight: other requests may complete meanwhile.
        tokio::task::yield_now().await;
        let mut st = self.state();
        let moved = st.generation(key) != started;
        let refusal = match (&request.mode, st.objects.get(key)) {
            (PutMode::Create, Some(_)) => PRECONDITION_FAILED,
            (PutMode::Update(etag), Some(o)) if !etag_eq(&o.etag, etag) => PRECONDITION_FAILED,
            _ if moved => CONFLICT,
            (PutMode::Update(_), None) => NO_SUCH_KEY,
            _ => return Ok(self.write(&mut st, key, body, request)),
        };
        Err(self.refuse("PutObject", key, refusal))
    }

    /// Stores `body` as `key`'s new version with `request`'s checksum and metadata (its condition
    /// already checked); returns the ETag.
    fn write(&self, st: &mut State, key: &str, body: Bytes, request: PutRequest) -> String {
        st.puts += 1;
        let etag = if self.inner.sse_kms {
            let mut salted = format!("sse-kms:{}:", st.puts).into_bytes();
            salted.extend_from_slice(&body);
            md5_etag(&salted)
        } else {
            md5_etag(&body)
        };
        let object = Object {
            etag: etag.clone(),
            last_modified: self.now(),
            sha256: request.sha256_b64,
            metadata: request.metadata.into_iter().map(|(k, v)| (k.to_lowercase(), v)).collect(),
            body,
        };
        st.objects.insert(key.to_string(), object);
        st.bump(key);
        etag
    }

    /// An unconditional PUT, as the archive writer does (returns the ETag).
    pub fn put_now(&self, key: &str, body: Bytes) -> String {
        self.write(&mut self.state(), key, body, PutRequest::new(PutMode::Create))
    }

    /// A delete by someone other than the job: not logged in [`MemoryStore::deleted`].
    pub fn remove_now(&self, key: &str) {
        let mut st = self.state();
        st.objects.remove(key);
        st.bump(key);
    }
}

impl Store for MemoryStore {
    fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    fn delete_batch_size(&self) -> usize {
        self.delete_batch_size
    }

    fn list_page_size(&self) -> usize {
        self.list_page_size
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        Ok(self.list_all(prefix, false).await.0)
    }

    async fn list_prefixes(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self.list_all(prefix, true).await.1)
    }

    async fn list_page(&self, prefix: &str, start_after: Option<&str>) -> Result<ListPage> {
        let (objects, _, _, truncated) = self.page_of(prefix, false, start_after);
        tokio::task::yield_now().await;
        Ok(ListPage { objects, truncated })
    }

    async fn get(&self, key: &str) -> Result<Fetched> {
        self.count("GetObject");
        let st = self.state();
        if st.failing_gets.contains(key) {
            return Err(self.refuse("GetObject", key, INTERNAL_ERROR));
        }
        match st.objects.get(key) {
            Some(o) => Ok(Fetched { body: o.body.clone(), etag: o.etag.clone() }),
            None => Err(self.refuse("GetObject", key, NO_SUCH_KEY)),
        }
    }

    async fn head(&self, key: &str) -> Result<Option<Head>> {
        self.count("HeadObject");
        let st = self.state();
        Ok(st.objects.get(key).map(|o| Head {
            size: o.body.len() as u64,
            etag: o.etag.clone(),
            checksum_sha256: o.sha256.clone(),
            metadata: o.metadata.clone(),
        }))
    }

    async fn put_object(&self, key: &str, body: Bytes, request: PutRequest) -> Result<String> {
        if !self.lose_answers {
            return self.put_inner(key, body, request).await;
        }
        self.put_inner(key, body.clone(), request.clone()).await?;
        // Applied, the answer lost: the retry's answer is what the caller gets.
        self.put_inner(key, body, request).await
    }

    async fn delete(&self, key: &str, if_match: Option<&str>) -> Result<()> {
        self.count("DeleteObject");
        let refused = self.state().delete(key, if_match, "DeleteObject");
        refused.map_or(Ok(()), |answer| Err(self.refuse("DeleteObject", key, answer)))
    }

    async fn delete_batch(&self, batch: &[(String, String)]) -> Result<Vec<DeleteFailure>> {
        assert!(batch.len() <= self.delete_batch_size, "batch larger than the DeleteObjects limit");
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        self.count("DeleteObjects");
        let mut st = self.state();
        let refused = batch.iter().filter_map(|(key, etag)| {
            let Answer(code, message, _) = st.delete(key, Some(etag), "DeleteObjects")?;
            Some(DeleteFailure { key: key.clone(), code: code.into(), message: message.into() })
        });
        Ok(refused.collect())
    }
}
