//! `archive-compaction status`: the job's state for an operator, read-only (List, Get, Head; no
//! write, delete or lease: safe beside a run). The recorded mismatch is re-checked with the run's
//! own listing, plan and parity gate, so it names exactly the flights the next run would stop on.
//! What could not be read is in [`StatusReport::errors`]; what depends on it is unknown, not empty.
//! `specs/status.schema.json` documents each JSON field (the types here allow missing field docs).
//!
//! ```
//! use archive_compaction::commands::status::{StatusReport, format_human};
//! use chrono::{DateTime, NaiveDate};
//! let s = StatusReport {
//!     bucket: "archive".into(),
//!     cutoff: NaiveDate::from_ymd_opt(2026, 7, 20),
//!     watermark: NaiveDate::from_ymd_opt(2026, 7, 18),
//!     watermark_lag_days: Some(2),
//!     ..StatusReport::default()
//! };
//! let text = format_human(&s);
//! assert!(text.contains("watermark    2026-07-18"), "{text}");
//! assert!(text.contains("lease        free"), "{text}");
//! ```

use std::fmt::Display;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::commands::render::{Col, Text};
use crate::data::config::Config;
use crate::data::keys::{LOCK_KEY, WATERMARK_KEY, manifest_date};
use crate::data::mqtt::read_retained;
use crate::data::report::{DAY_KEYS_SHOWN, DAY_UUIDS_SHOWN};
use crate::data::state::{Manifest, Watermark, WatermarkState};
use crate::infra::error::{Error, Result};
use crate::infra::storage::Store;
use crate::infra::storage::lifecycle::{BucketLifecycle, LifecycleRuleSummary};
use crate::protocol::day::{Blocked, Day, DayCounts, StateListing};
use crate::protocol::lease::Lease;
use crate::protocol::manifest::quarantined_date;
use crate::protocol::partition::{ParityCause, first_date, parity_reason};
use crate::protocol::plan;
use crate::protocol::recovery::assess_listed;
use crate::protocol::sizing::MemoryFit;

/// Default number of upcoming dates `status` counts files for (`--days`).
pub const DEFAULT_DAYS: usize = 5;

/// What to gather.
#[derive(Debug, Clone)]
pub struct StatusOptions {
    /// The invocation time the cutoff is computed for (`--now`; default the wall clock).
    pub now: DateTime<Utc>,
    /// The wall clock: ages and the lease's expiry are measured against it.
    pub as_of: DateTime<Utc>,
    /// Upcoming dates (from the walk's start, up to the cutoff) to count files for.
    pub days: usize,
}

/// The lease's state ([`LOCK_KEY`]), each as `specs/status.schema.json`'s `lease.state` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum LeaseState {
    #[default]
    Free,
    Held,
    Expired,
    Implausible,
    Unreadable,
    Unknown,
}

/// The lease, as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(missing_docs)]
pub struct LeaseStatus {
    pub state: LeaseState,
    pub holder: Option<String>,
    pub acquired_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub expires_in_seconds: Option<i64>,
}

/// A live manifest: a commit in flight, or one a crashed run left for recovery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct ManifestStatus {
    pub key: String,
    pub date: Option<NaiveDate>,
    pub age_seconds: i64,
    pub readable: bool,
    pub job_id: Option<Uuid>,
    pub invocation_id: Option<String>,
    pub output_key: Option<String>,
    pub inputs: u64,
    pub breaks_rule: Option<String>,
    pub stuck: bool,
}

/// A manifest moved to `quarantine/`; its date is blocked until an operator deletes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct QuarantinedStatus {
    pub key: String,
    pub date: Option<NaiveDate>,
    pub age_seconds: i64,
    pub size: u64,
}

/// The date the walk is blocked on, re-checked now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct MismatchStatus {
    pub date: NaiveDate,
    pub mismatch_runs: u32,
    pub flights: u64,
    pub missing_uuid_count: u64,
    pub missing_uuids: Vec<String>,
    pub cause: Option<ParityCause>,
    #[serde(default)]
    pub unread_files: Vec<crate::data::report::UnreadFile>,
    pub compacted_files_read: u64,
}

/// File counts of one upcoming date.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(missing_docs)]
pub struct DayStatus {
    pub date: NaiveDate,
    #[serde(flatten)]
    pub counts: DayCounts,
    pub per_flight_bytes: u64,
    pub blocked_by: Option<String>,
    pub rows_of_other_days: u64,
    pub other_days_uuids: Vec<String>,
    pub plan: Option<crate::data::report::PlanReport>,
}

/// The last run, from the broker's retained `last_run_at` and `last_run_status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(missing_docs)]
pub struct LastRunStatus {
    pub at: Option<String>,
    pub age_hours: Option<i64>,
    pub status: Option<String>,
    pub error: Option<String>,
}

/// Reads the last run's time and status from the broker; an error is in [`LastRunStatus::error`].
pub async fn last_run_from_mqtt(
    mqtt: &crate::data::config::MqttConfig,
    as_of: DateTime<Utc>,
) -> LastRunStatus {
    let mut got = match read_retained(mqtt, &["last_run_at", "last_run_status"]).await {
        Err(e) => return LastRunStatus { error: Some(e), ..Default::default() },
        Ok(got) => got,
    };
    let at = got.remove("last_run_at");
    let age = at.as_deref().and_then(|a| DateTime::parse_from_rfc3339(a).ok());
    let age_hours = age.map(|t| (as_of - t.to_utc()).num_hours());
    LastRunStatus { at, age_hours, status: got.remove("last_run_status"), error: None }
}

/// Everything `status` shows; the `--json` output (`specs/status.schema.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[allow(missing_docs)]
pub struct StatusReport {
    pub bucket: String,
    pub as_of: DateTime<Utc>,
    pub now: DateTime<Utc>,
    pub lag_days: Option<u32>,
    pub cutoff: Option<NaiveDate>,
    pub state_unreadable: bool,
    pub bucket_unreadable: bool,
    pub watermark: Option<NaiveDate>,
    pub watermark_lag_days: Option<i64>,
    pub watermark_ahead_days: Option<i64>,
    pub next_date: Option<NaiveDate>,
    pub lease: LeaseStatus,
    pub manifests: Vec<ManifestStatus>,
    pub quarantined: Vec<QuarantinedStatus>,
    pub mismatch: Option<MismatchStatus>,
    pub next_days: Vec<DayStatus>,
    pub last_run: Option<LastRunStatus>,
    pub versioning: Option<VersioningStatus>,
    pub errors: Vec<String>,
}

impl StatusReport {
    /// A status when nothing could be gathered: `error` its one error, the rest unknown.
    pub fn unavailable(
        bucket: &str,
        lag_days: Option<u32>,
        opts: &StatusOptions,
        error: impl std::fmt::Display,
    ) -> StatusReport {
        StatusReport {
            state_unreadable: true,
            bucket_unreadable: true,
            lease: LeaseStatus { state: LeaseState::Unknown, ..Default::default() },
            errors: vec![error.to_string()],
            ..StatusReport::new(bucket, lag_days, opts)
        }
    }

    fn new(bucket: &str, lag_days: Option<u32>, opts: &StatusOptions) -> StatusReport {
        StatusReport {
            bucket: bucket.to_string(),
            as_of: opts.as_of,
            now: opts.now,
            lag_days,
            cutoff: lag_days.map(|l| plan::Cutoff::of_status(opts.now, opts.as_of, l).walk),
            ..Default::default()
        }
    }
}

/// Prefixes a versioned bucket must expire: compaction deletes under `index/` and overwrites state.
pub const VERSIONED_PREFIXES: [&str; 2] = ["index/", "_compaction_state/"];

/// Versioning judged against the bucket's lifecycle rules (docs/deploying.md, "Versioned buckets").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(missing_docs)]
pub struct VersioningStatus {
    pub versioning: Option<String>,
    pub noncurrent_kept: Vec<String>,
    pub delete_markers_kept: Vec<String>,
    pub current_expired: Vec<String>,
    pub advice: Option<String>,
    pub error: Option<String>,
}

/// Which [`VERSIONED_PREFIXES`] keep old versions or markers forever, or lose current objects.
pub fn judge_versioning(l: &BucketLifecycle) -> VersioningStatus {
    let prefixes = |pick: &dyn Fn(&str) -> bool| -> Vec<String> {
        VERSIONED_PREFIXES.into_iter().filter(|p| pick(p)).map(String::from).collect()
    };
    // Unversioned, nothing is kept whatever the rules.
    let uncovered = |keeps: fn(&LifecycleRuleSummary) -> bool| match l.versioning {
        Some(_) => prefixes(&|p| !l.rules.iter().any(|r| r.covers(p) && keeps(r))),
        None => Vec::new(),
    };
    let current_expired = prefixes(&|p| {
        (l.rules.iter())
            .any(|r| r.expires_current && (p.starts_with(&r.prefix) || r.prefix.starts_with(p)))
    });
    let noncurrent_kept = uncovered(|r| r.noncurrent_days.is_some());
    let delete_markers_kept = uncovered(|r| r.expired_delete_markers);
    let mut advice = Vec::new();
    if !current_expired.is_empty() {
        advice.push(format!(
            "a lifecycle rule expires current objects under {}: index rows or the job's state are deleted by S3; remove the rule's Expiration Days/Date for these prefixes",
            current_expired.join(", ")
        ));
    }
    let missing: Vec<String> = [
        ("NoncurrentVersionExpiration", &noncurrent_kept),
        ("ExpiredObjectDeleteMarker", &delete_markers_kept),
    ]
    .into_iter()
    .filter(|(_, kept)| !kept.is_empty())
    .map(|(rule, kept)| format!("{rule} for {}", kept.join(", ")))
    .collect();
    if !missing.is_empty() {
        advice.push(format!(
            "the bucket is versioned ({}): every per-flight file compaction deletes stays as a noncurrent version behind a delete marker, billed and skipped by every listing; add the lifecycle rules of docs/deploying.md (\"Versioned buckets\"): {}",
            l.versioning.as_deref().unwrap_or("?"),
            missing.join("; ")
        ));
    }
    VersioningStatus {
        versioning: l.versioning.clone(),
        noncurrent_kept,
        delete_markers_kept,
        current_expired,
        advice: (!advice.is_empty()).then(|| advice.join("; ")),
        error: None,
    }
}

/// Reads and judges the bucket's configuration; an S3 error is in [`VersioningStatus::error`].
pub async fn versioning(store: &crate::infra::storage::S3Store) -> VersioningStatus {
    match store.bucket_lifecycle().await {
        Ok(l) => judge_versioning(&l),
        Err(e) => VersioningStatus {
            error: Some(format!(
                "{e} (status needs s3:GetBucketVersioning and s3:GetLifecycleConfiguration on the bucket: specs/status.policy.json)"
            )),
            ..Default::default()
        },
    }
}

fn age(as_of: DateTime<Utc>, t: DateTime<Utc>) -> i64 {
    (as_of - t).num_seconds().max(0)
}

/// Reads the state of `store`'s bucket. Errors: any S3 error listing or reading state, flights or
/// partitions; an unreadable watermark or multi-row file is in [`StatusReport::errors`] instead.
pub async fn gather(
    store: &impl Store,
    config: &Config,
    opts: &StatusOptions,
) -> Result<StatusReport> {
    let cutoff = plan::Cutoff::of_status(opts.now, opts.as_of, config.lag_days);
    let mut s = StatusReport::new(store.bucket(), Some(config.lag_days), opts);
    let wm = read_watermark(store, &mut s).await?;
    s.lease = lease_status(store, opts.as_of).await?;
    check_lease_plausible(&mut s, config);
    let state = StateListing::read(store).await.map_err(|(_, e)| e)?;
    let stuck = state.stuck_manifests();
    for m in &state.manifests {
        if let Some(status) = manifest_status(store, m, &stuck, opts.as_of).await? {
            s.manifests.push(status);
        }
    }
    for q in &state.quarantined {
        s.quarantined.push(QuarantinedStatus {
            date: quarantined_date(&q.key),
            age_seconds: age(opts.as_of, q.last_modified),
            size: q.size,
            key: q.key.clone(),
        });
    }
    let Some(wm) = wm else {
        s.errors.push("the next dates are unknown while the watermark is unreadable".into());
        return Ok(s);
    };
    s.watermark = wm.last_compacted_date;
    check_watermark_ahead(&mut s, cutoff.today);
    let blocked = Blocked::of(wm.mismatch_date, &state);
    if let Some(date) = wm.mismatch_date {
        let claimed = assess_listed(store, state, config.input_budget).await?.claimed;
        let runs = wm.mismatch_runs;
        s.mismatch =
            Some(mismatch_status(store, config, date, runs, &claimed, &mut s.errors).await?);
    }
    let earliest = first_date(store, wm.last_compacted_date, config.start_date).await?;
    s.next_date = plan::walk_start(wm.last_compacted_date, config.start_date, earliest);
    s.watermark_lag_days =
        Some(plan::watermark_lag_days(wm.last_compacted_date, s.next_date, cutoff.walk));
    if let Some(start) = s.next_date {
        s.next_days = next_days(store, config, start, cutoff.walk, opts.days, &blocked).await?;
    }
    Ok(s)
}

/// The watermark; `None`, the error in `s.errors`, when it is not one ([`Error::BadState`]).
async fn read_watermark(store: &impl Store, s: &mut StatusReport) -> Result<Option<Watermark>> {
    match WatermarkState::read(store).await {
        Ok(wm) => Ok(Some(wm.watermark)),
        Err(e @ Error::BadState { .. }) => {
            s.errors.push(e.to_string());
            s.state_unreadable = true;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Marks `s.lease` implausible when it claims longer than any run holds it.
fn check_lease_plausible(s: &mut StatusReport, config: &Config) {
    let max = crate::protocol::lease::max_plausible_lease(config.lease).as_secs() as i64;
    if let Some(left) = s.lease.expires_in_seconds.filter(|l| *l > max) {
        s.lease.state = LeaseState::Implausible;
        s.errors.push(format!(
            "lease {LOCK_KEY} claims {left} s more, longer than any run holds it (LEASE_SECONDS + 900 s = {max} s): runs fail on it; check that no run is under way, then remove the file"
        ));
    }
}

/// Sets `s.watermark_ahead_days`; ahead of `as_of`'s cutoff, an error ([`Error::WatermarkAhead`]).
fn check_watermark_ahead(s: &mut StatusReport, today: NaiveDate) {
    s.watermark_ahead_days = plan::watermark_ahead_days(s.watermark, today);
    if let (Some(w), Some(n)) = (s.watermark, s.watermark_ahead_days) {
        s.errors.push(format!(
            "{WATERMARK_KEY}: last_compacted_date {w} is {n} day(s) ahead of today's cutoff {today}: every run fails until it is set back to the last date really compacted, or the file is deleted to start over"
        ));
    }
}

/// One live manifest as it reads now; `None` when it vanished since the listing.
async fn manifest_status(
    store: &impl Store,
    m: &crate::infra::storage::ObjectMeta,
    stuck: &std::collections::BTreeSet<&str>,
    as_of: DateTime<Utc>,
) -> Result<Option<ManifestStatus>> {
    let Some(body) = store.get_opt(&m.key).await? else {
        return Ok(None);
    };
    let parsed = crate::protocol::manifest::parse(&m.key, &body.body);
    let (parsed, rule) = parsed.map_or((None, None), |(p, rule)| (Some(p), rule));
    Ok(Some(ManifestStatus {
        key: m.key.clone(),
        date: manifest_date(&m.key),
        age_seconds: age(as_of, m.last_modified),
        readable: parsed.is_some(),
        job_id: parsed.as_ref().map(|p| p.job_id),
        invocation_id: parsed.as_ref().map(|p| p.invocation_id.clone()),
        output_key: parsed.as_ref().and_then(|p| p.output.as_ref().map(|o| o.key.clone())),
        inputs: inputs_listed(store, parsed.as_ref()).await?,
        breaks_rule: rule.map(|rule| format!("{}: {rule}", rule.code())),
        stuck: stuck.contains(m.key.as_str()),
    }))
}

/// Up to `days` dates from `start` to `cutoff`, counted, each with what blocks it.
async fn next_days(
    store: &impl Store,
    config: &Config,
    start: NaiveDate,
    cutoff: NaiveDate,
    days: usize,
    blocked: &Blocked,
) -> Result<Vec<DayStatus>> {
    let mut next = Vec::new();
    let window = usize::try_from(MemoryFit::of(config).window()).unwrap_or(usize::MAX);
    for date in start.iter_days().take_while(|d| *d <= cutoff).take(days) {
        let window = if next.is_empty() { window } else { 0 };
        let day = Day::list_window(store, date, true, window, config.spill).await?;
        let other = day.other_day_rows(store, config.input_budget).await?;
        let mut plan = None;
        if window > 0
            && let Ok(p) = plan_of(store, config, &day, &Default::default()).await
        {
            let report = plan.insert(crate::data::report::PlanReport::default());
            report.show_from(0, 0, p.parts.iter().map(|p| p.report(1)));
        }
        next.push(DayStatus {
            date,
            counts: day.counts(),
            per_flight_bytes: day.index.per_flight_bytes(),
            blocked_by: blocked.blocking_walk(date).map(ToString::to_string),
            rows_of_other_days: other.rows,
            other_days_uuids: other.uuids.iter().map(Uuid::to_string).collect(),
            plan,
        });
    }
    Ok(next)
}

async fn inputs_listed(store: &impl Store, manifest: Option<&Manifest>) -> Result<u64> {
    let Some(manifest) = manifest.filter(|m| !m.inputs.is_empty()) else {
        return Ok(0);
    };
    let prefix = crate::data::keys::index_prefix(manifest.date);
    let listed: std::collections::HashSet<String> =
        store.list(&prefix).await?.into_iter().map(|o| o.key).collect();
    Ok((manifest.inputs.iter()).filter(|i| listed.contains(&i.key)).count() as u64)
}

async fn lease_status(store: &impl Store, as_of: DateTime<Utc>) -> Result<LeaseStatus> {
    let Some(f) = store.get_opt(LOCK_KEY).await? else {
        return Ok(LeaseStatus::default());
    };
    Ok(match serde_json::from_slice::<Lease>(&f.body) {
        Err(_) => LeaseStatus { state: LeaseState::Unreadable, ..Default::default() },
        Ok(l) => LeaseStatus {
            state: if l.expires_at > as_of { LeaseState::Held } else { LeaseState::Expired },
            expires_in_seconds: Some((l.expires_at - as_of).num_seconds()),
            holder: Some(l.holder),
            acquired_at: Some(l.acquired_at),
            expires_at: Some(l.expires_at),
        },
    })
}

/// The next run's first pass's parity gate for one date, read-only: its plan (`claimed` keys left
/// out) and window ([`MemoryFit::window`]); files past it go unchecked.
async fn mismatch_status(
    store: &impl Store,
    config: &Config,
    date: NaiveDate,
    mismatch_runs: u32,
    claimed: &std::collections::HashSet<String>,
    errors: &mut Vec<String>,
) -> Result<MismatchStatus> {
    let settings = crate::protocol::read::ReadSettings::of(config);
    let window = usize::try_from(MemoryFit::of(config).window()).unwrap_or(usize::MAX);
    let day = Day::list_window(store, date, true, window, settings.spill).await?;
    let plan = plan_of(store, config, &day, claimed).await?;
    let check = day.parity_check(store, Some(&plan), settings).await?;
    for (key, u) in &check.unreadable {
        errors.push(format!(
            "multi-row index file s3://{}/{key} unreadable for the parity check: {}",
            store.bucket(),
            u.reason
        ));
    }
    let failing = check.failing();
    Ok(MismatchStatus {
        date,
        mismatch_runs,
        flights: day.flights.len(),
        missing_uuid_count: failing.len() as u64,
        missing_uuids: (failing.iter()).map(|u| u.map(|u| u.to_string())).collect::<Result<_>>()?,
        cause: check.cause(),
        unread_files: check.unread,
        compacted_files_read: check.compacted_files_read,
    })
}

/// The next run's plan of `day`'s listing window ([`crate::protocol::partition::plan_date`]).
/// Errors: as it, and a date no part of which fits in memory ([`MemoryFit::part_files`]).
async fn plan_of(
    store: &impl Store,
    config: &Config,
    day: &Day,
    claimed: &std::collections::HashSet<String>,
) -> Result<plan::DatePlan> {
    let settings = crate::protocol::read::ReadSettings::of(config);
    let files = (day.index.inputs().count() + day.index.beyond_window.files) as u64;
    let sizing = MemoryFit::of(config).sizing(day.date, files, day.flights.len())?;
    let day_plan = plan::plan_day(day.date, day.index.clone(), claimed);
    let mut prefetched = Default::default();
    crate::protocol::partition::plan_date(store, day_plan, &sizing, settings, &mut prefetched).await
}

/// A duration in seconds as `3d 4h`, `2h 5m`, `4m 10s` or `12s`.
fn format_age(seconds: i64) -> String {
    let s = seconds.unsigned_abs();
    let (d, h, m, sec) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
    match (d, h, m) {
        (1.., _, _) => format!("{d}d {h}h"),
        (0, 1.., _) => format!("{h}h {m}m"),
        (0, 0, 1..) => format!("{m}m {sec}s"),
        _ => format!("{sec}s"),
    }
}

fn utc(d: DateTime<Utc>) -> String {
    d.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn date_or(d: Option<NaiveDate>, none: &str) -> String {
    d.map_or_else(|| none.to_string(), |d| d.to_string())
}

/// Renders a status for a terminal (pure; `--json` prints the value itself).
pub fn format_human(s: &StatusReport) -> String {
    let mut o = Text::default();
    if !s.errors.is_empty() {
        o.line("errors");
        o.items("  ", &s.errors);
    }
    let unknown = s.state_unreadable;
    o.field("bucket", format!("{} (as of {})", s.bucket, utc(s.as_of)));
    let no_watermark = if unknown {
        "unknown: could not be read (see errors)"
    } else {
        "none (nothing compacted yet)"
    };
    o.field("watermark", date_or(s.watermark, no_watermark));
    let cutoff = match (s.cutoff, s.lag_days) {
        (Some(cutoff), Some(lag)) => format!("{cutoff} (now {}, LAG_DAYS {lag})", utc(s.now)),
        _ => "unknown: the settings could not be read".to_string(),
    };
    o.field("cutoff", cutoff);
    o.field("lag", lag_text(s));
    o.field("next date", date_or(s.next_date, if unknown { "unknown" } else { "none" }));
    o.field("last run", last_run_text(s.last_run.as_ref()));
    if let Some(v) = &s.versioning {
        o.field("versioning", versioning_text(v));
    }
    if s.bucket_unreadable {
        for part in ["lease", "manifests", "quarantined"] {
            o.field(part, "unknown");
        }
    } else {
        o.field("lease", lease_text(&s.lease));
        format_manifests(&mut o, s);
    }
    format_mismatch(&mut o, s);
    format_next_days(&mut o, s);
    o.into_string()
}

fn lag_text(s: &StatusReport) -> String {
    match (s.watermark_lag_days, s.watermark_ahead_days) {
        (_, Some(n)) => format!(
            "watermark {n} day(s) AHEAD of today's cutoff: no run compacts anything until last_compacted_date is set back to the last date really compacted, or watermark.json is deleted to start over"
        ),
        (Some(n), None) if s.watermark.is_none() && s.next_date.is_some() => format!(
            "{n} day(s) behind the cutoff (no watermark yet: counted from {})",
            date_or(s.next_date, "")
        ),
        (Some(0), None) if s.watermark.is_none() && s.next_date.is_none() => {
            "0 days: nothing to compact (no watermark, no START_DATE and no index/ partition: is S3_BUCKET the archive's bucket?)".to_string()
        }
        (Some(0), None) => "0 days: up to date".to_string(),
        (Some(1), None) => "1 day behind the cutoff".to_string(),
        (Some(n), None) => format!("{n} days behind the cutoff"),
        (None, None) if s.state_unreadable => "unknown".to_string(),
        (None, None) => "unknown (no watermark)".to_string(),
    }
}

fn last_run_text(last_run: Option<&LastRunStatus>) -> String {
    match last_run {
        None => {
            "unknown: MQTT_HOST is not set (docs/runbook.md#norunalarm says where else to look)"
                .to_string()
        }
        Some(LastRunStatus { error: Some(e), .. }) => format!("unknown: {e}"),
        Some(LastRunStatus { at: None, .. }) => {
            "none reported: the broker holds no retained last_run_at (no run has published yet)"
                .to_string()
        }
        Some(l) => format!(
            "{} ({}), {}",
            l.at.as_deref().unwrap_or("?"),
            l.age_hours.map_or_else(|| "age unknown".to_string(), |h| format!("{h} h ago")),
            l.status.as_deref().unwrap_or("status unknown")
        ),
    }
}

fn versioning_text(v: &VersioningStatus) -> String {
    match v {
        VersioningStatus { error: Some(e), .. } => format!("unknown: {e}"),
        VersioningStatus { advice: Some(a), .. } => format!("NEEDS A RULE: {a}"),
        VersioningStatus { versioning: Some(state), .. } => format!(
            "{state}, noncurrent versions and expired delete markers under index/ and _compaction_state/ expire by lifecycle rules"
        ),
        _ => "off".to_string(),
    }
}

fn lease_text(l: &LeaseStatus) -> String {
    let holder = l.holder.as_deref().unwrap_or("?");
    let expires = l.expires_at.map(utc).unwrap_or_default();
    let age = format_age(l.expires_in_seconds.unwrap_or(0));
    match l.state {
        LeaseState::Free => "free".to_string(),
        LeaseState::Held => format!(
            "held until {expires} (in {age}), by {holder}: a run under way, or one that may have died (a new run does nothing until then)"
        ),
        LeaseState::Expired => format!(
            "expired: {holder} held it until {expires} ({age} ago); the next run takes it over"
        ),
        LeaseState::Implausible => format!(
            "implausible: {holder} claims it until {expires} (in {age}), longer than any run holds it: every run fails on it until the file is removed (docs/runbook.md#a-lease-that-lasts-implausibly-long)"
        ),
        LeaseState::Unreadable => "unreadable lock file; the next run takes it over".to_string(),
        LeaseState::Unknown => "unknown".to_string(),
    }
}

fn format_manifests(o: &mut Text, s: &StatusReport) {
    let live = match s.manifests.len() {
        0 => "none".to_string(),
        n => format!(
            "{n} live (the next run's recovery finishes or undoes each; one still here after it is stuck: docs/runbook.md#a-stuck-manifest):"
        ),
    };
    o.field("manifests", live);
    for m in &s.manifests {
        let output = m.output_key.as_deref().unwrap_or("none (no rows)");
        let what = match m.readable {
            true => format!("{} input(s) still listed, output {output}", m.inputs),
            false => "UNREADABLE: the next run quarantines it".to_string(),
        };
        let what = match &m.breaks_rule {
            Some(rule) => format!("BREAKS RULE {rule}: the next run quarantines it"),
            None if m.stuck => format!(
                "STUCK: {what}; a run could not delete them, the date is blocked and the next run retries"
            ),
            None => what,
        };
        let age = format_age(m.age_seconds);
        let date = date_or(m.date, "?");
        o.line(format_args!("  {date}  {}  age {age}  {what}", m.key));
    }
    let quarantined = match s.quarantined.len() {
        0 => "none".to_string(),
        n => format!("{n} (each blocks its date; inspect, then delete it):"),
    };
    o.field("quarantined", quarantined);
    for q in &s.quarantined {
        let (date, age) = (date_or(q.date, "?"), format_age(q.age_seconds));
        o.line(format_args!("  {date}  {}  age {age}  {} bytes", q.key, q.size));
    }
}

fn format_mismatch(o: &mut Text, s: &StatusReport) {
    let m = match &s.mismatch {
        None if s.state_unreadable => return o.field("mismatch", "unknown"),
        None => return o.field("mismatch", "none"),
        Some(m) => m,
    };
    let (date, runs, flights) = (m.date, m.mismatch_runs, m.flights);
    if m.missing_uuids.is_empty() {
        let passes = "flights has an index row now; the next run passes it";
        let head = format!("{date} (blocked {runs} run(s)): every one of its {flights} {passes}");
        return o.field("mismatch", head);
    }
    // The run's own wording of its verdict: the flights not of an unread file hold no own row.
    let reason = match m.cause {
        Some(ParityCause::NoIndexRow) | None => parity_reason(m.missing_uuid_count, 0, &[]),
        Some(_) => {
            let lost = m.missing_uuid_count.saturating_sub(m.unread_files.len() as u64);
            parity_reason(0, lost, &m.unread_files)
        }
    };
    let reason = reason.unwrap_or_default();
    let head = format!("{date} (blocked {runs} run(s)), {flights} flights: {reason}");
    o.field("mismatch", format_args!("{head}; the next run stops here again:"));
    let more = |n| format!("... {n} more (--json lists them all)");
    let uuids = &m.missing_uuids;
    o.shortened("  ", uuids, DAY_UUIDS_SHOWN, uuids.len() as u64, more);
    if !m.unread_files.is_empty() {
        o.line(
            "  unreadable per-flight files (left in place; rewrite each from its flights/ object: docs/runbook.md#an-unreadable-per-flight-index-file):",
        );
        let files: Vec<String> =
            (m.unread_files.iter()).map(|f| format!("{}  {}", f.key, f.reason)).collect();
        o.shortened("  ", &files, DAY_KEYS_SHOWN, files.len() as u64, more);
    }
}

fn format_next_days(o: &mut Text, s: &StatusReport) {
    use Col::{Left, Right};
    const COLS: [Col; 7] = [Left(10), Right(8), Right(10), Right(12), Right(9), Right(9), Right(7)];
    if s.next_days.is_empty() && s.state_unreadable {
        return o.field("next dates", "unknown");
    } else if s.next_days.is_empty() {
        let cutoff = date_or(s.cutoff, "unknown");
        return o.field("next dates", format_args!("none due (up to the cutoff {cutoff})"));
    }
    o.line("next dates");
    let head = ["date", "flights", "per-flight", "bytes", "compacted", "multi-row", "foreign"];
    o.row(&COLS, &head.each_ref().map(|h| h as &dyn Display), "");
    for d in &s.next_days {
        let c = &d.counts;
        let cells: [&dyn Display; 7] = [
            &d.date,
            &c.flights,
            &c.per_flight_files,
            &d.per_flight_bytes,
            &c.compacted_files,
            &c.multi_row_files,
            &c.foreign_objects,
        ];
        let blocked = d.blocked_by.as_ref().map(|b| format!("  blocked: {b}"));
        o.row(&COLS, &cells, blocked.unwrap_or_default());
        for (i, p) in d.plan.iter().flat_map(|p| p.parts.iter()).enumerate() {
            let (n, b, mb) = (p.files, p.bytes, p.estimate_mb);
            o.line(format_args!("  part {}: {n} file(s), {b} bytes, ~{mb} MB", i + 1));
        }
        if d.rows_of_other_days > 0 {
            let (n, uuids) = (d.rows_of_other_days, d.other_days_uuids.join(", "));
            let other = format!(
                "  {n} row(s) of other days in multi-row files (merged here, not moved): {uuids}"
            );
            o.row(&COLS[..1], &[&""], other);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn versioning_is_judged_by_rules_that_cover_every_object() {
        use crate::infra::storage::lifecycle::{BucketLifecycle, LifecycleRuleSummary};
        let whole = |prefix: &str| LifecycleRuleSummary {
            prefix: prefix.into(),
            every_object: true,
            noncurrent_days: Some(7),
            expired_delete_markers: true,
            ..Default::default()
        };
        let judge = |versioning: Option<&str>, rules: Vec<LifecycleRuleSummary>| {
            judge_versioning(&BucketLifecycle { versioning: versioning.map(str::to_string), rules })
        };
        // Unversioned: nothing kept, whatever the rules.
        assert_eq!(judge(None, vec![]).advice, None);
        // Suspended still holds the versions made while it was on.
        let v = judge(Some("Suspended"), vec![whole("index/")]);
        assert_eq!(v.noncurrent_kept, ["_compaction_state/"]);
        assert!(v.advice.unwrap().contains("(Suspended)"));
        // One bucket-wide rule covers both prefixes.
        assert_eq!(judge(Some("Enabled"), vec![whole("")]).advice, None);
        // A narrower prefix, or a tag/size filter, does not cover every object.
        let narrow =
            judge(Some("Enabled"), vec![whole("index/year=2026/"), whole("_compaction_state/")]);
        assert_eq!(narrow.noncurrent_kept, ["index/"]);
        let tagged = LifecycleRuleSummary { every_object: false, ..whole("") };
        assert_eq!(
            judge(Some("Enabled"), vec![tagged]).delete_markers_kept,
            ["index/", "_compaction_state/"]
        );
        // An expiration of current objects is flagged, versioned or not.
        let expiring = LifecycleRuleSummary { expires_current: true, ..whole("") };
        let v = judge(None, vec![expiring]);
        assert_eq!(v.current_expired, ["index/", "_compaction_state/"]);
        assert!(v.advice.is_some());
    }

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn sample() -> StatusReport {
        StatusReport {
            bucket: "archive".into(),
            as_of: t("2026-07-22T05:00:00Z"),
            now: t("2026-07-22T04:50:00Z"),
            lag_days: Some(2),
            cutoff: Some(d("2026-07-20")),
            state_unreadable: false,
            bucket_unreadable: false,
            watermark: Some(d("2026-07-17")),
            watermark_lag_days: Some(3),
            watermark_ahead_days: None,
            next_date: Some(d("2026-07-18")),
            lease: LeaseStatus {
                state: LeaseState::Held,
                holder: Some("run-1".into()),
                acquired_at: Some(t("2026-07-22T04:58:00Z")),
                expires_at: Some(t("2026-07-22T05:14:00Z")),
                expires_in_seconds: Some(840),
            },
            manifests: vec![
                ManifestStatus {
                    key: "_compaction_state/manifests/2026-07-18/j.json".into(),
                    date: Some(d("2026-07-18")),
                    age_seconds: 3 * 3600 + 120,
                    readable: true,
                    job_id: None,
                    invocation_id: Some("run-0".into()),
                    output_key: Some("index/year=2026/month=07/day=18/compacted-x.parquet".into()),
                    inputs: 12,
                    breaks_rule: None,
                    stuck: false,
                },
                ManifestStatus {
                    key: "_compaction_state/manifests/2026-07-19/k.json".into(),
                    date: Some(d("2026-07-19")),
                    age_seconds: 5,
                    readable: false,
                    job_id: None,
                    invocation_id: None,
                    output_key: None,
                    inputs: 0,
                    breaks_rule: None,
                    stuck: false,
                },
            ],
            quarantined: vec![QuarantinedStatus {
                key: "_compaction_state/quarantine/2026-07-19/q.json".into(),
                date: Some(d("2026-07-19")),
                age_seconds: 2 * 86_400 + 3600,
                size: 0,
            }],
            mismatch: Some(MismatchStatus {
                date: d("2026-07-18"),
                mismatch_runs: 3,
                flights: 40,
                missing_uuid_count: 2,
                missing_uuids: vec![
                    "019f7d73-f820-702f-b905-8c81d0944996".into(),
                    "019f7dc0-c448-7e25-b944-852039292d22".into(),
                ],
                cause: Some(ParityCause::NoIndexRow),
                unread_files: Vec::new(),
                compacted_files_read: 0,
            }),
            next_days: vec![
                DayStatus {
                    date: d("2026-07-18"),
                    counts: DayCounts {
                        flights: 40,
                        per_flight_files: 38,
                        compacted_files: 0,
                        multi_row_files: 0,
                        foreign_objects: 1,
                    },
                    per_flight_bytes: 190_000,
                    blocked_by: None,
                    ..DayStatus::default()
                },
                DayStatus {
                    date: d("2026-07-19"),
                    counts: DayCounts {
                        flights: 5,
                        per_flight_files: 5,
                        compacted_files: 1,
                        multi_row_files: 0,
                        foreign_objects: 0,
                    },
                    per_flight_bytes: 25_000,
                    blocked_by: Some(
                        "quarantined manifest _compaction_state/quarantine/2026-07-19/q.json"
                            .into(),
                    ),
                    rows_of_other_days: 2,
                    other_days_uuids: vec![
                        "019f7d73-f820-702f-b905-8c81d0944996".into(),
                        "019f7dc0-c448-7e25-b944-852039292d22".into(),
                    ],
                    plan: None,
                },
            ],
            last_run: Some(LastRunStatus {
                at: Some("2026-07-22T04:50:00.000000+00:00".into()),
                age_hours: Some(0),
                status: Some("Mismatch".into()),
                error: None,
            }),
            versioning: None,
            errors: vec![],
        }
    }

    #[test]
    fn ages() {
        assert_eq!(format_age(0), "0s");
        assert_eq!(format_age(59), "59s");
        assert_eq!(format_age(61), "1m 1s");
        assert_eq!(format_age(3 * 3600 + 120), "3h 2m");
        assert_eq!(format_age(2 * 86_400 + 3600), "2d 1h");
        assert_eq!(format_age(-90), "1m 30s");
    }

    #[test]
    fn human_output_shows_every_part() {
        let text = format_human(&sample());
        let expected = "\
bucket       archive (as of 2026-07-22T05:00:00Z)
watermark    2026-07-17
cutoff       2026-07-20 (now 2026-07-22T04:50:00Z, LAG_DAYS 2)
lag          3 days behind the cutoff
next date    2026-07-18
last run     2026-07-22T04:50:00.000000+00:00 (0 h ago), Mismatch
lease        held until 2026-07-22T05:14:00Z (in 14m 0s), by run-1: a run under way, or one that may have died (a new run does nothing until then)
manifests    2 live (the next run's recovery finishes or undoes each; one still here after it is stuck: docs/runbook.md#a-stuck-manifest):
  2026-07-18  _compaction_state/manifests/2026-07-18/j.json  age 3h 2m  12 input(s) still listed, output index/year=2026/month=07/day=18/compacted-x.parquet
  2026-07-19  _compaction_state/manifests/2026-07-19/k.json  age 5s  UNREADABLE: the next run quarantines it
quarantined  1 (each blocks its date; inspect, then delete it):
  2026-07-19  _compaction_state/quarantine/2026-07-19/q.json  age 2d 1h  0 bytes
mismatch     2026-07-18 (blocked 3 run(s)), 40 flights: 2 flight(s) without an index row; the next run stops here again:
  019f7d73-f820-702f-b905-8c81d0944996
  019f7dc0-c448-7e25-b944-852039292d22
next dates
  date         flights  per-flight         bytes  compacted  multi-row  foreign
  2026-07-18        40          38        190000          0          0        1
  2026-07-19         5           5         25000          1          0        0  blocked: quarantined manifest _compaction_state/quarantine/2026-07-19/q.json
              2 row(s) of other days in multi-row files (merged here, not moved): 019f7d73-f820-702f-b905-8c81d0944996, 019f7dc0-c448-7e25-b944-852039292d22
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn a_stuck_manifest_says_so_on_its_line() {
        let mut s = sample();
        s.manifests[0].stuck = true;
        let text = format_human(&s);
        assert!(
            text.contains("  2026-07-18  _compaction_state/manifests/2026-07-18/j.json  age 3h 2m  STUCK: 12 input(s) still listed, output index/year=2026/month=07/day=18/compacted-x.parquet; a run could not delete them, the date is blocked and the next run retries\n"),
            "\n{text}"
        );
    }

    #[test]
    fn human_output_of_a_bucket_with_nothing_to_start_from() {
        let s = StatusReport {
            bucket: "not-the-archive".into(),
            cutoff: Some(d("2026-07-20")),
            lag_days: Some(2),
            watermark_lag_days: Some(0),
            ..Default::default()
        };
        let text = format_human(&s);
        assert!(
            text.contains("lag          0 days: nothing to compact (no watermark, no START_DATE and no index/ partition: is S3_BUCKET the archive's bucket?)"),
            "{text}"
        );
        assert!(!text.contains("up to date"), "{text}");
    }

    #[test]
    fn human_output_of_a_quiet_bucket() {
        let s = StatusReport {
            bucket: "archive".into(),
            cutoff: Some(d("2026-07-20")),
            watermark: Some(d("2026-07-20")),
            watermark_lag_days: Some(0),
            ..Default::default()
        };
        let text = format_human(&s);
        for line in [
            "lag          0 days: up to date",
            "next date    none",
            "lease        free",
            "manifests    none",
            "quarantined  none",
            "mismatch     none",
            "next dates   none due (up to the cutoff 2026-07-20)",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        assert!(!text.contains("errors"));
    }

    #[test]
    fn human_output_of_leases_mismatches_and_errors() {
        let mut s = sample();
        s.lease = LeaseStatus {
            state: LeaseState::Expired,
            holder: Some("dead".into()),
            expires_at: Some(t("2026-07-22T04:55:00Z")),
            expires_in_seconds: Some(-300),
            acquired_at: None,
        };
        s.mismatch.as_mut().unwrap().missing_uuids = (0..25).map(|i| format!("u{i}")).collect();
        s.errors.push("state file is not valid".into());
        let text = format_human(&s);
        assert!(
            text.contains(
                "lease        expired: dead held it until 2026-07-22T04:55:00Z (5m 0s ago)"
            ),
            "{text}"
        );
        assert!(text.contains("  u19\n  ... 5 more (--json lists them all)\n"), "{text}");
        assert!(!text.contains("u20"));
        assert!(
            text.starts_with("errors\n  state file is not valid\nbucket "),
            "errors first: {text}"
        );

        s.lease.state = LeaseState::Unreadable;
        let m = s.mismatch.as_mut().unwrap();
        m.missing_uuids.clear();
        m.missing_uuid_count = 0;
        s.watermark = None;
        s.watermark_lag_days = None;
        let text = format_human(&s);
        assert!(text.contains("lease        unreadable lock file"), "{text}");
        assert!(text.contains("the next run passes it"), "{text}");
        assert!(text.contains("watermark    none (nothing compacted yet)"), "{text}");
        assert!(text.contains("lag          unknown (no watermark)"), "{text}");

        // The state could not be read: unknown, never "none".
        let m = s.mismatch.as_mut().unwrap();
        m.missing_uuids = vec!["u0".into()];
        m.missing_uuid_count = 1;
        m.cause = Some(ParityCause::PerFlightFileWithoutOwnRow);
        let text = format_human(&s);
        assert!(
            text.contains("40 flights: 1 flight(s) whose per-flight file holds no row of theirs (empty, another flight's row, or a null or empty s3_key); the next run stops here again:"),
            "{text}"
        );
        let s = StatusReport::unavailable(
            "",
            None,
            &StatusOptions {
                now: t("2026-07-22T04:50:00Z"),
                as_of: t("2026-07-22T04:50:00Z"),
                days: 5,
            },
            "setting S3_BUCKET: required",
        );
        let text = format_human(&s);
        assert!(text.starts_with("errors\n  setting S3_BUCKET: required\n"), "{text}");
        for line in [
            "watermark    unknown: could not be read (see errors)",
            "cutoff       unknown: the settings could not be read",
            "lag          unknown\n",
            "next date    unknown",
            "mismatch     unknown",
            "next dates   unknown",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        assert!(!text.contains("none"), "{text}");
    }

    #[test]
    fn json_round_trips_with_snake_case_states() {
        let s = sample();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["lease"]["state"], "held");
        assert_eq!(v["mismatch"]["missing_uuid_count"], 2);
        assert_eq!(v["next_days"][1]["compacted_files"], 1);
        let back: StatusReport = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }
}
