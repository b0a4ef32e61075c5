//! State files under `_compaction_state/`: watermark, lease and manifests.
//!
//! All are JSON (schemas in `specs/`), all are written with conditional
//! writes so two runs can never silently overwrite each other:
//!
//! - `watermark.json`: [`Watermark`], compatible with the Python job's
//!   `{"last_compacted_date": "YYYY-MM-DD"}`; unknown fields are kept.
//! - `lock.json`: [`crate::lease::Lease`], see [`crate::lease`].
//! - `manifests/{date}/{job_id}.json`: [`Manifest`], one per in-flight commit.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::keys::WATERMARK_KEY;
use crate::storage::{PutMode, Store};

/// `watermark.json`: the last date whose partition is fully compacted, plus
/// the mismatch bookkeeping. Fields this version does not know are kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Watermark {
    /// Last fully compacted date (UTC); `null` when nothing was compacted yet.
    pub last_compacted_date: Option<NaiveDate>,
    /// The date the walk is blocked on by a parity mismatch, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch_date: Option<NaiveDate>,
    /// Consecutive invocations blocked on `mismatch_date` (0 when none).
    #[serde(default)]
    pub mismatch_runs: u32,
    /// Id of the EventBridge event (or CLI run) that last counted a mismatch
    /// run, so a redelivered event does not count twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch_event_id: Option<String>,
    /// When this file was last written by this job (UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<DateTime<Utc>>,
    /// Fields written by other tools (the Python job), kept as they are.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// A watermark as read, with the ETag to write it back conditionally.
#[derive(Debug, Clone, Default)]
pub struct WatermarkState {
    /// The parsed file (default when missing).
    pub watermark: Watermark,
    /// ETag it was read with; `None` when the file does not exist yet.
    pub etag: Option<String>,
}

impl WatermarkState {
    /// Reads `watermark.json`. Missing is `Ok` with `etag: None` (nothing
    /// compacted yet); any other failure, bad JSON included, is an error and
    /// must fail the run (never a silent "first run").
    pub async fn read(store: &impl Store) -> Result<WatermarkState> {
        match store.get_opt(WATERMARK_KEY).await? {
            None => Ok(WatermarkState::default()),
            Some(f) => {
                let watermark: Watermark =
                    serde_json::from_slice(&f.body).map_err(|e| Error::BadState {
                        bucket: store.bucket().to_string(),
                        key: WATERMARK_KEY.to_string(),
                        reason: e.to_string(),
                    })?;
                Ok(WatermarkState {
                    watermark,
                    etag: Some(f.etag),
                })
            }
        }
    }

    /// Writes the watermark conditionally (`If-Match` on the ETag read, or
    /// `If-None-Match: *` on first write) and keeps the new ETag. A lost race
    /// is [`Error::PreconditionFailed`]; nothing is overwritten.
    pub async fn write(&mut self, store: &impl Store, now: DateTime<Utc>) -> Result<()> {
        self.watermark.updated_at = Some(now);
        let body = serde_json::to_vec_pretty(&self.watermark).expect("watermark serialises");
        let mode = match &self.etag {
            Some(e) => PutMode::Update(e.clone()),
            None => PutMode::Create,
        };
        let etag = store.put(WATERMARK_KEY, body.into(), mode, None).await?;
        self.etag = Some(etag);
        Ok(())
    }
}

/// Schema version of [`Manifest`] files written by this build: 2.
///
/// The two versions have the same fields; `schema_version` is what tells
/// them apart, and what recovery may prove from them differs
/// ([`crate::recovery::validate_manifest`]):
///
/// - **2**: the output key is derived from the job id,
///   [`crate::keys::compacted_key`]`(date, job_id)`, and the output object
///   carries the job id in its metadata ([`JOB_ID_METADATA`]). A key other
///   than the derived one is not this commit's output.
/// - **1** ([`MANIFEST_VERSION_1`], before outputs were named after the job):
///   the output was named `compacted-{a second UUIDv7}`, minted right after
///   the job id, so its key proves ownership only as far as that id's
///   timestamp is the job id's; such outputs carry no metadata.
///
/// Any other version is not acted on (quarantined).
///
/// [`JOB_ID_METADATA`]: crate::storage::JOB_ID_METADATA
pub const MANIFEST_VERSION: u32 = 2;

/// Schema version of manifests written before output keys were derived from
/// the job id (see [`MANIFEST_VERSION`]); recovered as before when consistent.
pub const MANIFEST_VERSION_1: u32 = 1;

/// One input of a commit, as it was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestInput {
    /// The key.
    pub key: String,
    /// The ETag of the version that was read (only that version may be deleted).
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
}

/// The compacted output a commit writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestOutput {
    /// `index/year=YYYY/month=MM/day=DD/compacted-{job_id}.parquet` in the
    /// manifest's own partition (version 1: `compacted-{another UUIDv7}`).
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the bytes, base64 (the S3 flexible-checksum encoding).
    pub sha256: String,
    /// Rows in the output.
    pub rows: u64,
}

/// `manifests/{date}/{job_id}.json`: written (conditional create) before the
/// output, deleted once every input is gone or proven newer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_VERSION`] (or [`MANIFEST_VERSION_1`] for older files).
    pub schema_version: u32,
    /// The commit's id (UUIDv7); also the manifest's file name
    /// (`{job_id}.json`) and, from version 2, the output's name
    /// (`compacted-{job_id}.parquet`).
    pub job_id: Uuid,
    /// The partition date.
    pub date: NaiveDate,
    /// The output; `None` when every input had zero rows (no file is written).
    pub output: Option<ManifestOutput>,
    /// Every input, with the ETag it was read with.
    pub inputs: Vec<ManifestInput>,
    /// When the manifest was written (UTC).
    pub created_at: DateTime<Utc>,
    /// The Lambda request id or CLI run id that wrote it.
    pub invocation_id: String,
}
