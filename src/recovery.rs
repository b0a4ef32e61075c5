//! Recovery: resolve every manifest a crashed run left, before anything else.
//!
//! Follows DESIGN.md's recovery table:
//!
//! | found at start | action |
//! |---|---|
//! | manifest, output missing | delete manifest; the date is compacted again from intact inputs |
//! | manifest, output size or checksum differs | delete the output, then the manifest |
//! | manifest, output verified | delete the remaining inputs (ETag-conditional), then the manifest |
//! | manifest unreadable (0 bytes, bad JSON) | move it aside to `quarantine/`, report it, leave that date alone |
//! | manifest whose inputs cannot be deleted | keep it, report it as stuck, retry next time |
//!
//! An error listing or reading manifests fails the run (never "no
//! manifests"). Manifests are never dropped after a TTL. Dates with a stuck
//! manifest, or a quarantined one still under `quarantine/`, are blocked:
//! the walk stops before them until an operator looks.
//!
//! [`assess`] answers the same questions without acting (the dry run).
//!
//! Failpoints (feature `failpoints`): `recovery::before-output-delete`,
//! `recovery::after-input-deletes`, plus those of the commit phases reused here.

use std::collections::{BTreeMap, HashSet};

use chrono::NaiveDate;

use crate::commit::{self, Fence, OutputCheck};
use crate::error::Result;
use crate::failpoint;
use crate::keys::{MANIFESTS_ROOT, QUARANTINE_ROOT, index_prefix, manifest_date};
use crate::report::RecoveredManifest;
use crate::state::Manifest;
use crate::storage::{PutMode, Store, etag_eq};

/// What recovery did.
#[derive(Debug, Default)]
pub struct Recovery {
    /// One entry per manifest found (and per quarantined one still there).
    pub recovered: Vec<RecoveredManifest>,
    /// Dates the walk must not touch, with why.
    pub blocked: BTreeMap<NaiveDate, String>,
    /// Keys claimed by manifests that are still live (never inputs).
    pub claimed: HashSet<String>,
    /// Inputs deleted while finishing commits.
    pub files_deleted: u64,
    /// Inputs that could not be deleted.
    pub files_delete_failed: u64,
}

/// Resolves every manifest under `_compaction_state/manifests/`.
///
/// Errors: listing or reading a manifest, or any S3 error while acting on
/// one; the run must then stop as a Failure.
pub async fn recover(store: &impl Store, fence: &mut Fence<'_>) -> Result<Recovery> {
    let mut out = Recovery::default();
    still_quarantined(store, &mut out).await?;
    let manifests = store.list(MANIFESTS_ROOT).await?;
    for m in manifests {
        let date = manifest_date(&m.key);
        let body = store.get_opt(&m.key).await?;
        let Some(body) = body else { continue };
        let parsed: Option<Manifest> = serde_json::from_slice(&body.body)
            .ok()
            .filter(|man: &Manifest| Some(man.date) == date);
        let Some(manifest) = parsed else {
            quarantine(store, &m.key, body.body, &mut out, date).await?;
            continue;
        };
        tracing::info!(key = %m.key, date = %manifest.date, inputs = manifest.inputs.len(), "recovering manifest");
        let entry = resolve(store, fence, &m.key, &manifest, &mut out).await?;
        out.recovered.push(entry);
    }
    Ok(out)
}

/// The date of a key under `quarantine/` (named like its manifest was).
pub fn quarantined_date(key: &str) -> Option<NaiveDate> {
    manifest_date(&key.replacen(QUARANTINE_ROOT, MANIFESTS_ROOT, 1))
}

/// Quarantined manifests still under `quarantine/` block their date.
async fn still_quarantined(store: &impl Store, out: &mut Recovery) -> Result<()> {
    for q in store.list(QUARANTINE_ROOT).await? {
        let date = quarantined_date(&q.key);
        if let Some(d) = date {
            out.blocked.insert(
                d,
                format!(
                    "quarantined manifest s3://{}/{} needs an operator",
                    store.bucket(),
                    q.key
                ),
            );
        }
        out.recovered.push(RecoveredManifest {
            key: q.key.clone(),
            date,
            action: "quarantined_earlier".into(),
            detail: "still in quarantine: inspect it, then delete it to unblock the date".into(),
        });
    }
    Ok(())
}

/// What [`recover`] would do, without doing any of it (the dry run): lists
/// and reads manifests, HEADs (or reads back) their outputs and lists their
/// partitions; writes and deletes nothing.
///
/// The result is shaped like [`recover`]'s so the walk plans exactly as the
/// real run would after recovery: `blocked` holds the dates recovery would
/// block (quarantined or to-be-quarantined manifests); `claimed` holds the
/// keys recovery would delete before the walk (inputs of verified commits
/// still in their version read, outputs that differ from their manifest),
/// so the plan leaves them out. `recovered` says, per manifest, what would
/// be done (same action names; details start with "would"). A manifest
/// whose deletes would fail (`stuck`) cannot be foreseen without trying; it
/// shows as `completed`.
///
/// Errors: listing or reading manifests, HEAD/GET of outputs, or listing a
/// partition (the real run would fail on them too).
pub async fn assess(store: &impl Store) -> Result<Recovery> {
    let mut out = Recovery::default();
    still_quarantined(store, &mut out).await?;
    for m in store.list(MANIFESTS_ROOT).await? {
        let date = manifest_date(&m.key);
        let Some(body) = store.get_opt(&m.key).await? else {
            continue;
        };
        let parsed: Option<Manifest> = serde_json::from_slice(&body.body)
            .ok()
            .filter(|man: &Manifest| Some(man.date) == date);
        let entry = |action: &'static str, detail: String| RecoveredManifest {
            key: m.key.clone(),
            date,
            action: action.into(),
            detail,
        };
        let Some(manifest) = parsed else {
            let target = m.key.replacen(MANIFESTS_ROOT, QUARANTINE_ROOT, 1);
            if let Some(d) = date {
                out.blocked.insert(
                    d,
                    format!(
                        "unreadable manifest s3://{}/{} would be moved to {target}",
                        store.bucket(),
                        m.key
                    ),
                );
            }
            out.recovered.push(entry(
                "quarantined",
                format!("would move it to {target}: unreadable (empty or not a manifest); the date would stay blocked until an operator deletes it"),
            ));
            continue;
        };
        if let Some(output) = &manifest.output {
            match commit::check_output(store, output).await? {
                OutputCheck::Missing => {
                    out.recovered.push(entry(
                        "output_missing",
                        format!(
                            "would delete the manifest: {} was never written; inputs intact, the date is compacted again",
                            output.key
                        ),
                    ));
                    continue;
                }
                OutputCheck::Differs(reason, _) => {
                    out.claimed.insert(output.key.clone());
                    out.recovered.push(entry(
                        "output_mismatch",
                        format!(
                            "would delete {} ({reason}), then the manifest; inputs intact",
                            output.key
                        ),
                    ));
                    continue;
                }
                OutputCheck::Verified => {}
            }
        }
        let listed = store.list_etags(&index_prefix(manifest.date)).await?;
        let (mut to_delete, mut newer, mut gone) = (0, 0, 0);
        for i in &manifest.inputs {
            match listed.get(&i.key) {
                None => gone += 1,
                Some(etag) if !etag_eq(etag, &i.etag) => newer += 1,
                Some(_) => {
                    to_delete += 1;
                    out.claimed.insert(i.key.clone());
                }
            }
        }
        out.recovered.push(entry(
            "completed",
            format!(
                "output verified; would delete {to_delete} input(s) (ETag-conditional), keep {newer} newer version(s) ({gone} already gone), then the manifest"
            ),
        ));
    }
    Ok(out)
}

async fn quarantine(
    store: &impl Store,
    key: &str,
    body: bytes::Bytes,
    out: &mut Recovery,
    date: Option<NaiveDate>,
) -> Result<()> {
    let target = key.replacen(MANIFESTS_ROOT, QUARANTINE_ROOT, 1);
    tracing::error!(key, quarantine = %target, "manifest is unreadable; moved aside, nothing deleted on its word");
    match store.put(&target, body, PutMode::Create, None).await {
        Ok(_) | Err(crate::error::Error::PreconditionFailed { .. }) => {}
        Err(e) => return Err(e),
    }
    store.delete(key, None).await?;
    if let Some(d) = date {
        out.blocked.insert(
            d,
            format!(
                "unreadable manifest moved to s3://{}/{target}",
                store.bucket()
            ),
        );
    }
    out.recovered.push(RecoveredManifest {
        key: key.to_string(),
        date,
        action: "quarantined".into(),
        detail: format!("unreadable (empty or not a manifest); moved to {target}; inspect it, then delete it to unblock the date"),
    });
    Ok(())
}

async fn resolve(
    store: &impl Store,
    fence: &mut Fence<'_>,
    key: &str,
    manifest: &Manifest,
    out: &mut Recovery,
) -> Result<RecoveredManifest> {
    let entry = |action: &str, detail: String| RecoveredManifest {
        key: key.to_string(),
        date: Some(manifest.date),
        action: action.into(),
        detail,
    };
    if let Some(output) = &manifest.output {
        match commit::check_output(store, output).await? {
            OutputCheck::Missing => {
                fence.check().await?;
                commit::delete_manifest(store, key).await?;
                return Ok(entry(
                    "output_missing",
                    format!(
                        "{} was never written; inputs intact, date compacted again",
                        output.key
                    ),
                ));
            }
            OutputCheck::Differs(reason, etag) => {
                fence.check().await?;
                failpoint!("recovery::before-output-delete");
                store.delete(&output.key, Some(&etag)).await?;
                commit::delete_manifest(store, key).await?;
                return Ok(entry(
                    "output_mismatch",
                    format!("{} deleted ({reason}); inputs intact", output.key),
                ));
            }
            OutputCheck::Verified => {}
        }
    }
    let deleted = commit::delete_inputs(store, fence, manifest).await?;
    failpoint!("recovery::after-input-deletes");
    out.files_deleted += deleted.deleted;
    if !deleted.failed.is_empty() {
        out.files_delete_failed += deleted.failed.len() as u64;
        for i in &manifest.inputs {
            out.claimed.insert(i.key.clone());
        }
        let first = &deleted.failed[0];
        let why = format!(
            "stuck manifest {key}: {} input(s) cannot be deleted (first: {} {}: {}); fix the permission or object, the next run retries",
            deleted.failed.len(),
            first.key,
            first.code,
            first.message
        );
        out.blocked.insert(manifest.date, why.clone());
        return Ok(entry("stuck", why));
    }
    commit::delete_manifest(store, key).await?;
    Ok(entry(
        "completed",
        format!(
            "output verified; {} input(s) deleted, {} kept as newer versions",
            deleted.deleted,
            deleted.kept_newer.len()
        ),
    ))
}
