//! A manifest's one owner beside its format ([`Manifest`]): parsed and
//! checked, its quarantine key, its [`StuckMark`].

use std::collections::HashSet;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::data::keys::{
    INDEX_ROOT, IndexKey, MANIFESTS_ROOT, QUARANTINE_ROOT, STATE_ROOT, classify_index_key,
    compacted_key, index_prefix, is_index_input, manifest_date, manifest_key, stuck_key,
};
use crate::data::state::{MANIFEST_VERSION, MANIFEST_VERSION_1, Manifest};
use crate::infra::error::Error;
use crate::infra::storage::{DeleteFailure, JOB_ID_METADATA, PutMode, Store};

/// How far apart a version-1 job id's and its output id's UUIDv7
/// timestamps may be, in ms: minted back to back, less a clock step.
pub const V1_OUTPUT_ID_WINDOW_MS: u64 = 1000;

/// What a manifest names, in a [`ManifestRule`] (`output`, `input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Role {
    /// Its output.
    Output,
    /// One of its inputs.
    Input,
}

/// A rule a manifest breaks, so recovery will not act on it: it is
/// quarantined, its date blocked, nothing deleted on its word.
/// [`validate_manifest`] checks those that need only the key and the body.
#[derive(
    Debug, Clone, PartialEq, Eq, thiserror::Error, strum::IntoStaticStr, strum::VariantNames,
)]
#[strum(serialize_all = "snake_case")]
#[allow(missing_docs)] // a field is what its name and the message say
pub enum ManifestRule {
    /// Empty, not JSON, or not shaped like a [`Manifest`] (the parser's message).
    #[error("unreadable (empty or not a manifest: {0})")]
    Unreadable(String),
    /// A `schema_version` this build does not know (a newer build's file).
    #[error(
        "schema_version {0} is not one this build knows ({MANIFEST_VERSION_1} or {MANIFEST_VERSION}); run the build that wrote it"
    )]
    UnknownVersion(u32),
    /// The file name is not `{job_id}.json`.
    #[error("its file name {name} is not its job_id {job_id}.json")]
    NameNotJobId { name: String, job_id: Uuid },
    /// The manifest's date is not the date in its key.
    #[error("its date {date} is not the date of its key ({key_date})")]
    DateNotKeyDate { key_date: String, date: NaiveDate },
    /// It names a state file (`_compaction_state/...`).
    #[error("its {role} {key} is a state file under {STATE_ROOT}")]
    StateFile { role: Role, key: String },
    /// It names something outside `index/`.
    #[error("its {role} {key} is outside {INDEX_ROOT}")]
    OutsideIndex { role: Role, key: String },
    /// It names a key that is not directly in its own date's partition.
    #[error("its {role} {key} is not directly in its own date's partition {prefix}")]
    NotInPartition { role: Role, key: String, prefix: String },
    /// The output is not a `compacted-*.parquet` file.
    #[error("its output {0} is not a compacted-*.parquet file")]
    OutputNotCompacted(String),
    /// Version 2: the output is not the key the job id gives.
    #[error("its output {key} is not the one its job id names ({expected}): another commit's file")]
    OutputNotDerived { key: String, expected: String },
    /// Version 1: the output id was not minted with the job id.
    #[error(
        "its output {key} was not named when its job {job_id} was (a version-1 output id is a UUIDv7 within {V1_OUTPUT_ID_WINDOW_MS} ms of the job id): another commit's file"
    )]
    OutputNotMintedWithJob { key: String, job_id: Uuid },
    /// An output but no input: its rows would come from nowhere.
    #[error("it has an output ({0}) but no inputs")]
    OutputWithoutInputs(String),
    /// An input is not an index input (a foreign object).
    #[error("its input {key} is not an index input ({why})")]
    InputNotIndexFile { key: String, why: &'static str },
    /// An input is the manifest's own output.
    #[error("its input {0} is its own output")]
    InputIsOutput(String),
    /// An input is listed more than once.
    #[error("its input {0} is listed more than once")]
    InputTwice(String),
    /// The output carries another job's id in its metadata.
    #[error(
        "its output {key} carries job id {found} ({JOB_ID_METADATA} metadata), not its own {job_id}: another commit's file"
    )]
    OutputOfAnotherJob { key: String, found: String, job_id: Uuid },
    /// The output differs and an input is gone or changed.
    #[error(
        "its output {output} differs from it ({reason}) and its input {input} is {state}: the output may hold the only copy of those rows, so it is left"
    )]
    OnlyCopy { output: String, reason: String, input: String, state: &'static str },
    /// An input still there is not proven to be in the verified output.
    #[error(
        "its output {output} verifies, but {count} input(s) still there are not proven to be in it (first: {input}: {reason}); those are kept"
    )]
    InputNotInOutput {
        /// The output key (or "no output", zero rows).
        output: String,
        /// The first input not proven.
        input: String,
        /// Which rule of [`crate::protocol::proof`] it fails.
        reason: String,
        /// Inputs not proven in all.
        count: usize,
    },
}

impl ManifestRule {
    /// The variant's name in snake case, first in the report's detail.
    pub fn code(&self) -> &'static str {
        self.into()
    }
}

/// The first [`ManifestRule`] `manifest` (read from `key`) breaks: it may
/// name only what its own commit wrote and read.
///
/// ```
/// use archive_compaction::protocol::manifest::{validate_manifest, ManifestRule};
/// use archive_compaction::data::state::{Manifest, ManifestOutput, MANIFEST_VERSION};
/// use archive_compaction::data::keys::{compacted_key, manifest_key};
/// let date = chrono::NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
/// let job_id = uuid::Uuid::now_v7();
/// let output = compacted_key(date, job_id);
/// let m = Manifest {
///     schema_version: MANIFEST_VERSION, job_id, date,
///     output: Some(ManifestOutput { key: output.clone(), size: 10, sha256: "x".into(), rows: 1 }),
///     inputs: vec![],
///     created_at: chrono::Utc::now(), invocation_id: "doc".into(),
/// };
/// let key = manifest_key(date, job_id);
/// assert_eq!(validate_manifest(&key, &m), Err(ManifestRule::OutputWithoutInputs(output)));
/// ```
pub fn validate_manifest(key: &str, manifest: &Manifest) -> std::result::Result<(), ManifestRule> {
    let version = manifest.schema_version;
    if version != MANIFEST_VERSION && version != MANIFEST_VERSION_1 {
        return Err(ManifestRule::UnknownVersion(version));
    }
    let name = key.rsplit('/').next().unwrap_or(key);
    if name != format!("{}.json", manifest.job_id) {
        return Err(ManifestRule::NameNotJobId { name: name.to_string(), job_id: manifest.job_id });
    }
    if manifest_date(key) != Some(manifest.date) {
        let key_date = key
            .strip_prefix(MANIFESTS_ROOT)
            .and_then(|r| r.split_once('/'))
            .map_or("none", |(d, _)| d);
        return Err(ManifestRule::DateNotKeyDate {
            key_date: key_date.to_string(),
            date: manifest.date,
        });
    }
    let prefix = index_prefix(manifest.date);
    if let Some(output) = &manifest.output {
        in_partition(Role::Output, &output.key, &prefix)?;
        if classify_index_key(&output.key) != IndexKey::Compacted {
            return Err(ManifestRule::OutputNotCompacted(output.key.clone()));
        }
        if version == MANIFEST_VERSION {
            let expected = compacted_key(manifest.date, manifest.job_id);
            if output.key != expected {
                return Err(ManifestRule::OutputNotDerived { key: output.key.clone(), expected });
            }
        } else if !v1_output_minted_with_job(&output.key, &prefix, manifest.job_id) {
            return Err(ManifestRule::OutputNotMintedWithJob {
                key: output.key.clone(),
                job_id: manifest.job_id,
            });
        }
        if manifest.inputs.is_empty() {
            return Err(ManifestRule::OutputWithoutInputs(output.key.clone()));
        }
    }
    let output_key = manifest.output.as_ref().map(|o| o.key.as_str());
    let mut seen = HashSet::new();
    for input in &manifest.inputs {
        let key = &input.key;
        in_partition(Role::Input, key, &prefix)?;
        if output_key == Some(key.as_str()) {
            return Err(ManifestRule::InputIsOutput(key.clone()));
        }
        if !is_index_input(key) {
            let why = match classify_index_key(key) {
                IndexKey::Foreign(why) => why,
                _ => "not an index file",
            };
            return Err(ManifestRule::InputNotIndexFile { key: key.clone(), why });
        }
        if !seen.insert(key.as_str()) {
            return Err(ManifestRule::InputTwice(key.clone()));
        }
    }
    Ok(())
}

fn in_partition(role: Role, key: &str, prefix: &str) -> std::result::Result<(), ManifestRule> {
    if key.starts_with(STATE_ROOT) {
        return Err(ManifestRule::StateFile { role, key: key.to_string() });
    }
    if !key.starts_with(INDEX_ROOT) {
        return Err(ManifestRule::OutsideIndex { role, key: key.to_string() });
    }
    match key.strip_prefix(prefix) {
        Some(name) if !name.is_empty() && !name.contains('/') => Ok(()),
        _ => Err(ManifestRule::NotInPartition {
            role,
            key: key.to_string(),
            prefix: prefix.to_string(),
        }),
    }
}

/// Version 1: the output `compacted-{id}.parquet` has a UUIDv7 id whose
/// timestamp is within [`V1_OUTPUT_ID_WINDOW_MS`] of the job id's.
fn v1_output_minted_with_job(key: &str, prefix: &str, job_id: Uuid) -> bool {
    let id = key
        .strip_prefix(prefix)
        .and_then(|n| n.strip_prefix(crate::data::keys::COMPACTED_PREFIX))
        .and_then(|n| n.strip_suffix(".parquet"))
        .and_then(|n| Uuid::parse_str(n).ok());
    let millis = |u: Uuid| {
        (u.get_version_num() == 7).then(|| u.get_timestamp()).flatten().map(|t| {
            let (s, n) = t.to_unix();
            s * 1000 + u64::from(n) / 1_000_000
        })
    };
    match (id.and_then(millis), millis(job_id)) {
        (Some(a), Some(b)) => a.abs_diff(b) <= V1_OUTPUT_ID_WINDOW_MS,
        _ => false,
    }
}

/// The manifest and the first rule it breaks, if any;
/// [`ManifestRule::Unreadable`] if it does not parse.
pub fn parse(key: &str, body: &[u8]) -> Result<(Manifest, Option<ManifestRule>), ManifestRule> {
    let manifest =
        serde_json::from_slice(body).map_err(|e| ManifestRule::Unreadable(e.to_string()))?;
    let rule = validate_manifest(key, &manifest).err();
    Ok((manifest, rule))
}

/// The same name under [`QUARANTINE_ROOT`].
pub fn quarantine_key(key: &str) -> String {
    key.replacen(MANIFESTS_ROOT, QUARANTINE_ROOT, 1)
}

/// The date of a key under `quarantine/`.
pub fn quarantined_date(key: &str) -> Option<NaiveDate> {
    manifest_date(&key.replacen(QUARANTINE_ROOT, MANIFESTS_ROOT, 1))
}

/// A stuck mark's body, at [`stuck_key`]`(manifest)`; field order is the
/// format of docs/ARCHITECTURE.md's "State formats".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StuckMark {
    /// S3's error code for `first_key` (`AccessDenied`, ...).
    pub code: String,
    /// The first input that could not be deleted.
    pub first_key: String,
    /// How many inputs could not be deleted.
    pub inputs_not_deleted: usize,
    /// The manifest's key.
    pub manifest: String,
    /// S3's message for `first_key`.
    pub message: String,
}

/// Marks `manifest` stuck when `failed` is not empty; a mark already there stands. Never fails (the
/// run already fails for the deletes; a mark not written is logged). No lease check of its own: it
/// follows the deletes' and writes state, never data.
pub async fn mark_stuck(store: &impl Store, manifest: &Manifest, failed: &[DeleteFailure]) {
    let Some(first) = failed.first() else {
        return;
    };
    let manifest_key = &manifest_key(manifest.date, manifest.job_id);
    let key = stuck_key(manifest_key);
    let mark = StuckMark {
        code: first.code.clone(),
        first_key: first.key.clone(),
        inputs_not_deleted: failed.len(),
        manifest: manifest_key.clone(),
        message: first.message.clone(),
    };
    let body = serde_json::to_vec(&mark).expect("JSON serialises");
    match store.put(&key, body.into(), PutMode::Create, None).await {
        Ok(_) | Err(Error::PreconditionFailed { .. }) => {}
        Err(e) => {
            tracing::warn!(%key, manifest = manifest_key, error = %e, "could not mark the manifest stuck: status shows it as live");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_codes_are_the_documented_names() {
        use strum::VariantNames;
        // docs/operating.md's recovery table and the reports name these.
        assert_eq!(
            ManifestRule::VARIANTS,
            [
                "unreadable",
                "unknown_version",
                "name_not_job_id",
                "date_not_key_date",
                "state_file",
                "outside_index",
                "not_in_partition",
                "output_not_compacted",
                "output_not_derived",
                "output_not_minted_with_job",
                "output_without_inputs",
                "input_not_index_file",
                "input_is_output",
                "input_twice",
                "output_of_another_job",
                "only_copy",
                "input_not_in_output",
            ]
        );
    }
    #[test]
    fn a_quarantined_key_is_dated_like_its_manifest() {
        let live = "_compaction_state/manifests/2026-07-19/x.json";
        assert_eq!(quarantine_key(live), "_compaction_state/quarantine/2026-07-19/x.json");
        assert_eq!(quarantined_date(&quarantine_key(live)), manifest_date(live));
        assert_eq!(quarantined_date("_compaction_state/quarantine/x.json"), None);
    }

    /// The mark's bytes are the state format's (docs/ARCHITECTURE.md,
    /// "State formats"): the fields in name order, as the mark was first
    /// written, and read back the same.
    #[test]
    fn a_stuck_mark_is_written_in_its_state_format() {
        let mark = StuckMark {
            code: "AccessDenied".into(),
            first_key: "index/year=2026/month=07/day=20/a.parquet".into(),
            inputs_not_deleted: 2,
            manifest: "_compaction_state/manifests/2026-07-20/j.json".into(),
            message: "Access Denied".into(),
        };
        let body = serde_json::to_string(&mark).unwrap();
        assert_eq!(
            body,
            r#"{"code":"AccessDenied","first_key":"index/year=2026/month=07/day=20/a.parquet","inputs_not_deleted":2,"manifest":"_compaction_state/manifests/2026-07-20/j.json","message":"Access Denied"}"#
        );
        assert_eq!(serde_json::from_str::<StuckMark>(&body).unwrap(), mark);
    }

    /// What does not parse is unreadable; what parses comes back with the
    /// rule it breaks, for `status` to show and recovery to quarantine by.
    #[test]
    fn parse_tells_an_unreadable_manifest_from_one_that_breaks_a_rule() {
        let key = "_compaction_state/manifests/2026-07-20/x.json";
        assert_eq!(parse(key, b"").unwrap_err().code(), "unreadable");
        let job_id = Uuid::now_v7();
        let date = NaiveDate::from_ymd_opt(2026, 7, 20).unwrap();
        let m = Manifest {
            schema_version: MANIFEST_VERSION,
            job_id,
            date,
            output: None,
            inputs: vec![],
            created_at: chrono::Utc::now(),
            invocation_id: "t".into(),
        };
        let body = serde_json::to_vec(&m).unwrap();
        let (back, rule) = parse(key, &body).unwrap();
        assert_eq!(back.job_id, job_id);
        assert_eq!(rule.map(|r| r.code()), Some("name_not_job_id"));
        let key = manifest_key(date, job_id);
        assert_eq!(parse(&key, &body).unwrap().1, None);
    }
}
