//! State files under `_compaction_state/`: watermark, lease and manifests.
//!
//! All JSON (schemas in `specs/` document each field), all written conditionally so two runs never silently overwrite
//! each other: `watermark.json` ([`Watermark`], the Python job's format), `lock.json`
//! ([`crate::protocol::lease`]) and `manifests/{date}/{job_id}.json` ([`Manifest`]).

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::data::keys::WATERMARK_KEY;
use crate::infra::error::{Error, Result};
use crate::infra::storage::{PutMode, Store};

/// `watermark.json`: the last fully compacted date and the mismatch bookkeeping.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Watermark {
    pub last_compacted_date: Option<NaiveDate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch_date: Option<NaiveDate>,
    #[serde(default)]
    pub mismatch_runs: u32,
    /// Id of the event (or CLI run) that last counted a mismatch run: a redelivered event does not count twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch_event_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<DateTime<Utc>>,
    /// Fields written by other tools (the Python job), kept as they are.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// The fields of `watermark.json` this version reads, with their JSON types (`specs/watermark.schema.json`).
pub const WATERMARK_FIELDS: &[(&str, &str)] = &[
    ("last_compacted_date", "a date YYYY-MM-DD or null (required)"),
    ("mismatch_date", "a date YYYY-MM-DD or null"),
    ("mismatch_runs", "a whole number, 0 or more"),
    ("mismatch_event_id", "a string"),
    ("updated_at", "an RFC 3339 date-time"),
];

impl Watermark {
    /// Parses `watermark.json` strictly ([`WATERMARK_FIELDS`]), keeping unknown fields in `extra`.
    ///
    /// Errors: a message naming the field, what it holds and must hold. A
    /// missing `last_compacted_date` (a typo) is an error, never a first run.
    pub fn parse(body: &[u8]) -> std::result::Result<Watermark, String> {
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
        let serde_json::Value::Object(map) = value else {
            return Err(format!(
                "expected a JSON object with \"last_compacted_date\", got {}",
                json_kind(&value)
            ));
        };
        if !map.contains_key("last_compacted_date") {
            let known: Vec<&str> = WATERMARK_FIELDS.iter().map(|(n, _)| *n).collect();
            // Field names quoted bounded: a hand-edited file may hold any.
            let found: Vec<String> =
                map.keys().take(20).map(|k| crate::infra::text::quote(k)).collect();
            return Err(format!(
                "field \"last_compacted_date\" is missing (fields found: [{}]; known fields: {known:?}); \
                 a file without it is never taken for a first run (a misspelt name? deleting the file starts over)",
                found.join(", ")
            ));
        }
        let mut wm = Watermark::default();
        for (name, v) in map {
            let Some((_, want)) = WATERMARK_FIELDS.iter().find(|(n, _)| *n == name) else {
                wm.extra.insert(name, v);
                continue;
            };
            let parsed = match name.as_str() {
                "last_compacted_date" => nullable(&v, date).map(|d| wm.last_compacted_date = d),
                "mismatch_date" => nullable(&v, date).map(|d| wm.mismatch_date = d),
                "mismatch_runs" => {
                    v.as_u64().and_then(|n| u32::try_from(n).ok()).map(|n| wm.mismatch_runs = n)
                }
                "mismatch_event_id" => {
                    nullable(&v, |s| Some(s.to_string())).map(|id| wm.mismatch_event_id = id)
                }
                "updated_at" => {
                    let at = |s: &str| DateTime::parse_from_rfc3339(s).ok().map(|t| t.to_utc());
                    nullable(&v, at).map(|t| wm.updated_at = t)
                }
                _ => unreachable!("every known field is matched"),
            };
            if parsed.is_none() {
                return Err(format!("field \"{name}\" must be {want}, got {}", json_kind(&v)));
            }
        }
        Ok(wm)
    }

    /// The walk compacted `date`; a recorded mismatch on or before it is cleared.
    pub fn advance(&mut self, date: NaiveDate) {
        self.last_compacted_date = Some(date);
        if self.mismatch_date.is_some_and(|m| m <= date) {
            self.clear_mismatch();
        }
    }

    /// Parity failed on `date` in the invocation of `event` (equal on
    /// redelivery): each new event counts once. Returns `mismatch_runs`.
    pub(crate) fn record_mismatch(&mut self, date: NaiveDate, event: &str) -> u32 {
        if self.mismatch_date == Some(date) {
            if self.mismatch_event_id.as_deref() != Some(event) {
                // Saturates: a hand-edited 4294967295 must not wrap to 0 and clear the MismatchRuns alarm.
                self.mismatch_runs = self.mismatch_runs.saturating_add(1);
            }
        } else {
            self.mismatch_date = Some(date);
            self.mismatch_runs = 1;
        }
        self.mismatch_event_id = Some(event.to_string());
        self.mismatch_runs
    }

    /// Forgets the mismatch; true when there was one (then the file must be written).
    pub(crate) fn clear_mismatch(&mut self) -> bool {
        let runs = std::mem::take(&mut self.mismatch_runs);
        let (date, event) = (self.mismatch_date.take(), self.mismatch_event_id.take());
        date.is_some() || runs != 0 || event.is_some()
    }
}

/// A JSON value's kind as an error message names it (state files and the Lambda event alike).
pub(crate) fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// [`json_type`] and, when short, the value itself.
fn json_kind(v: &serde_json::Value) -> String {
    let kind = json_type(v);
    let text = v.to_string();
    if text.len() <= 40 { format!("{kind} {text}") } else { kind.to_string() }
}

/// `Some(None)` for `null`, `Some` of what `parse` makes of a string; `None` for anything else.
fn nullable<T>(v: &serde_json::Value, parse: impl Fn(&str) -> Option<T>) -> Option<Option<T>> {
    match v {
        serde_json::Value::Null => Some(None),
        serde_json::Value::String(s) => parse(s).map(Some),
        _ => None,
    }
}

fn date(s: &str) -> Option<NaiveDate> {
    crate::data::config::parse_date("", s).ok()
}

/// Writes `body` to `key` conditionally (`mode`). A lost answer's retry fails its own condition, so
/// on a [`settles`] error the object is read back: if it holds exactly `body` (every state file
/// carries this run's id or write time) its ETag is returned, else the write's error stands.
pub async fn put_settled(
    store: &impl Store,
    key: &str,
    body: Vec<u8>,
    mode: PutMode,
) -> Result<String> {
    let body = bytes::Bytes::from(body);
    let e = match store.put(key, body.clone(), mode, None).await {
        Ok(etag) => return Ok(etag),
        Err(e) if settles(&e) => e,
        Err(e) => return Err(e),
    };
    match store.get_opt(key).await {
        Ok(Some(f)) if f.body == body => {
            tracing::warn!(key, error = %e, "the write's answer was lost and its retry failed; read back, the object is this run's own write: done");
            Ok(f.etag)
        }
        Ok(_) => Err(e),
        Err(read) => {
            tracing::warn!(key, error = %read, "a failed write could not be read back to see whether it took effect");
            Err(e)
        }
    }
}

/// Whether a failed conditional write may have been this run's own, its answer
/// lost; not on the deadline (no time to read it back).
pub fn settles(e: &Error) -> bool {
    match e {
        Error::PreconditionFailed { .. } => true,
        Error::Deadline { .. } => false,
        e => e.is_transient(),
    }
}

/// A watermark as read, with the ETag to write it back conditionally.
#[derive(Debug, Clone, Default)]
pub(crate) struct WatermarkState {
    /// The parsed file (default when missing).
    pub watermark: Watermark,
    /// ETag it was read with; `None` when the file does not exist yet.
    pub etag: Option<String>,
}

impl WatermarkState {
    /// Reads `watermark.json`; missing is `etag: None` (nothing compacted yet).
    /// Any other failure, bad JSON included, must fail the run.
    pub async fn read(store: &impl Store) -> Result<WatermarkState> {
        let Some(f) = store.get_opt(WATERMARK_KEY).await? else {
            return Ok(WatermarkState::default());
        };
        let watermark = Watermark::parse(&f.body).map_err(|reason| Error::BadState {
            bucket: store.bucket().to_string(),
            key: WATERMARK_KEY.to_string(),
            reason,
        })?;
        Ok(WatermarkState { watermark, etag: Some(f.etag) })
    }

    /// Writes the watermark (`If-Match` the ETag read, or `If-None-Match: *`)
    /// via [`put_settled`]; a lost race is [`Error::PreconditionFailed`].
    pub async fn write(&mut self, store: &impl Store, now: DateTime<Utc>) -> Result<()> {
        self.watermark.updated_at = Some(now);
        let body = serde_json::to_vec_pretty(&self.watermark).expect("watermark serialises");
        let mode = self.etag.clone().map_or(PutMode::Create, PutMode::Update);
        self.etag = Some(put_settled(store, WATERMARK_KEY, body, mode).await?);
        Ok(())
    }
}

/// Schema version of [`Manifest`]s this build writes; the versions differ in
/// what recovery may prove ([`crate::protocol::manifest::validate_manifest`]).
/// 2: output key [`crate::data::keys::compacted_key`]`(date, job_id)`, job id
/// in its metadata ([`JOB_ID_METADATA`]); 1: [`MANIFEST_VERSION_1`]. Any other is quarantined.
///
/// [`JOB_ID_METADATA`]: crate::infra::storage::JOB_ID_METADATA
pub const MANIFEST_VERSION: u32 = 2;

/// Manifests whose output was `compacted-{a second UUIDv7}`, without metadata.
pub const MANIFEST_VERSION_1: u32 = 1;

/// One input of a commit, as it was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct ManifestInput {
    pub key: String,
    /// The ETag of the version that was read (only that version may be deleted).
    pub etag: String,
    pub size: u64,
}

/// The compacted output a commit writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct ManifestOutput {
    pub key: String,
    pub size: u64,
    /// SHA-256 of the bytes, base64 (the S3 flexible-checksum encoding).
    pub sha256: String,
    pub rows: u64,
}

/// `manifests/{date}/{job_id}.json`: created before the output, deleted once
/// every input is gone or proven newer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Manifest {
    pub schema_version: u32,
    pub job_id: Uuid,
    pub date: NaiveDate,
    pub output: Option<ManifestOutput>,
    pub inputs: Vec<ManifestInput>,
    pub created_at: DateTime<Utc>,
    pub invocation_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_watermark_write_whose_answer_was_lost_is_this_runs_another_writers_is_not() {
        use crate::infra::storage::MemoryStore;
        let store = MemoryStore::new("b");
        let lost = store.lose_answers();
        let now: DateTime<Utc> = "2026-07-22T04:50:00Z".parse().unwrap();
        let mut wm = WatermarkState::default();
        wm.watermark.advance(d("2026-07-19"));
        wm.write(&lost, now).await.unwrap(); // created, 412 on the retry
        wm.watermark.advance(d("2026-07-20"));
        wm.write(&lost, now).await.unwrap(); // replaced, 412 on the retry
        let read = WatermarkState::read(&store).await.unwrap();
        assert_eq!(read.watermark.last_compacted_date, Some(d("2026-07-20")));
        assert_eq!(read.etag, wm.etag, "the ETag read back is kept");
        // Another writer's version in between: its precondition failure stands.
        store.put_now(WATERMARK_KEY, b"{\"last_compacted_date\": null}".to_vec().into());
        wm.watermark.advance(d("2026-07-21"));
        let e = wm.write(&lost, now).await.unwrap_err();
        assert!(matches!(e, Error::PreconditionFailed { .. }), "{e}");
    }

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn a_watermark_without_its_date_or_with_a_wrong_type_is_refused_naming_the_field() {
        for (body, field) in [
            (r#"{"last_compacted_dat": "2026-07-18"}"#, "last_compacted_date"),
            (r#"{"mismatch_runs": 0}"#, "last_compacted_date"),
            (r#"{}"#, "last_compacted_date"),
            (r#"{"last_compacted_date": 20260718}"#, "last_compacted_date"),
            (r#"{"last_compacted_date": "2026-7-18"}"#, "last_compacted_date"),
            (r#"{"last_compacted_date": "2026-07-18", "mismatch_runs": "3"}"#, "mismatch_runs"),
            (r#"{"last_compacted_date": "2026-07-18", "mismatch_runs": -1}"#, "mismatch_runs"),
            (r#"{"last_compacted_date": "2026-07-18", "mismatch_date": true}"#, "mismatch_date"),
            (
                r#"{"last_compacted_date": "2026-07-18", "mismatch_event_id": 7}"#,
                "mismatch_event_id",
            ),
            (r#"{"last_compacted_date": "2026-07-18", "updated_at": "yesterday"}"#, "updated_at"),
        ] {
            let e = Watermark::parse(body.as_bytes()).unwrap_err();
            assert!(e.contains(&format!("\"{field}\"")), "{body}: {e}");
        }
        for body in [r#"[]"#, r#""2026-07-18""#, "null", "{"] {
            assert!(Watermark::parse(body.as_bytes()).is_err(), "{body}");
        }
        // The Python job's file, a null date and unknown fields are fine.
        let w = Watermark::parse(br#"{"last_compacted_date": "2026-07-18", "writer": "python"}"#)
            .unwrap();
        assert_eq!(w.last_compacted_date, Some(d("2026-07-18")));
        assert_eq!(w.extra["writer"], "python");
        let w = Watermark::parse(br#"{"last_compacted_date": null, "mismatch_date": "2026-07-18", "mismatch_runs": 2, "mismatch_event_id": "e", "updated_at": "2026-07-22T04:50:00Z"}"#).unwrap();
        assert_eq!((w.last_compacted_date, w.mismatch_runs), (None, 2));
        // What this version writes, it reads back.
        let back = Watermark::parse(&serde_json::to_vec(&w).unwrap()).unwrap();
        assert_eq!(back, w);
    }

    #[test]
    fn watermark_transitions() {
        // (start: watermark, mismatch date, runs, event), step, want.
        let start = |wm: Option<&str>, mm: Option<&str>, runs: u32, ev: Option<&str>| Watermark {
            last_compacted_date: wm.map(d),
            mismatch_date: mm.map(d),
            mismatch_runs: runs,
            mismatch_event_id: ev.map(str::to_string),
            ..Watermark::default()
        };
        enum Step {
            Advance(&'static str),
            Mismatch(&'static str, &'static str),
            Clear,
        }
        let cases = [
            // A first mismatch counts one run.
            (
                start(None, None, 0, None),
                Step::Mismatch("2026-07-18", "e1"),
                start(None, Some("2026-07-18"), 1, Some("e1")),
            ),
            // Another event on the same date counts again...
            (
                start(None, Some("2026-07-18"), 1, Some("e1")),
                Step::Mismatch("2026-07-18", "e2"),
                start(None, Some("2026-07-18"), 2, Some("e2")),
            ),
            // ...a redelivered event does not.
            (
                start(None, Some("2026-07-18"), 2, Some("e2")),
                Step::Mismatch("2026-07-18", "e2"),
                start(None, Some("2026-07-18"), 2, Some("e2")),
            ),
            // A mismatch on another date starts over.
            (
                start(None, Some("2026-07-18"), 5, Some("e5")),
                Step::Mismatch("2026-07-19", "e6"),
                start(None, Some("2026-07-19"), 1, Some("e6")),
            ),
            // Advancing past the mismatch date clears it...
            (
                start(Some("2026-07-17"), Some("2026-07-18"), 3, Some("e3")),
                Step::Advance("2026-07-18"),
                start(Some("2026-07-18"), None, 0, None),
            ),
            // ...advancing before it does not.
            (
                start(Some("2026-07-16"), Some("2026-07-18"), 3, Some("e3")),
                Step::Advance("2026-07-17"),
                start(Some("2026-07-17"), Some("2026-07-18"), 3, Some("e3")),
            ),
            (
                start(Some("2026-07-16"), None, 0, None),
                Step::Clear,
                start(Some("2026-07-16"), None, 0, None),
            ),
        ];
        for (mut w, step, want) in cases {
            match step {
                Step::Advance(x) => w.advance(d(x)),
                Step::Mismatch(x, ev) => {
                    let runs = w.record_mismatch(d(x), ev);
                    assert_eq!(runs, w.mismatch_runs);
                }
                Step::Clear => assert!(!w.clear_mismatch()),
            }
            assert_eq!(w, want);
        }
        let mut w = start(None, Some("2026-07-18"), 1, Some("e"));
        assert!(w.clear_mismatch(), "something to forget: the file is written");
    }

    #[test]
    fn mismatch_runs_saturates_instead_of_wrapping() {
        let body = r#"{"last_compacted_date": "2026-07-16", "mismatch_date": "2026-07-17", "mismatch_runs": 4294967295, "mismatch_event_id": "e1"}"#;
        let mut w = Watermark::parse(body.as_bytes()).unwrap();
        assert_eq!(w.record_mismatch(d("2026-07-17"), "e2"), u32::MAX);
        assert_eq!(w.mismatch_runs, u32::MAX, "the alarm's count never wraps to 0");
    }
}
