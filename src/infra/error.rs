//! The crate's one error type: each variant carries the key, date or setting involved;
//! [`Error::is_transient`] tells a retry from an operator's fix.

use std::time::Duration;

use chrono::NaiveDate;

use crate::infra::text::escape;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a run, with the context needed to act on it.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // an undocumented field is what its name and the message say
pub enum Error {
    /// A setting (environment variable or CLI flag) is missing or malformed.
    #[error("setting {name}: {reason}")]
    Config { name: String, reason: String },

    /// An S3 call failed after the SDK's retries.
    // Keys and messages escaped and bounded (crate::infra::text says why).
    #[error("S3 {op} s3://{bucket}/{}: {code}: {}", escape(.key), escape(.message))]
    S3 {
        /// The S3 operation, e.g. `GetObject`.
        op: &'static str,
        bucket: String,
        /// The key or prefix involved.
        key: String,
        /// The S3 error code (`AccessDenied`, `SlowDown`, ...) or `dispatch`/`timeout`.
        code: String,
        message: String,
        /// Whether retrying later may succeed (throttling, 5xx, timeouts).
        transient: bool,
    },

    /// A conditional write or delete lost (S3's 412): nothing was overwritten.
    #[error(
        "conditional {op} on s3://{bucket}/{} failed: the object changed since it was read (another writer?)",
        escape(.key)
    )]
    PreconditionFailed { op: &'static str, bucket: String, key: String },

    /// An S3 call (all attempts and body reads) did not finish before the
    /// run's deadline less [`crate::infra::storage::S3_DEADLINE_MARGIN`].
    #[error(
        "S3 {op} s3://{bucket}/{key}: not answered before the run's deadline (S3 calls end {margin_s} s before it, to leave time for the lease's release and the report); stopped here, the next run goes on from here (give the run more time if this repeats)"
    )]
    Deadline { op: &'static str, bucket: String, key: String, margin_s: u64 },

    /// No part of a date fits in memory ([`crate::protocol::sizing::MemoryFit::part_files`]):
    /// refused before any input is read, rather than dying on an allocation.
    #[error(
        "date {date} holds {files} index files and {flights} flights: compacting it in parts of {part_files} needs about {needed_mb} MB, more than 90% of the {limit_mb} MB this run may use (MEMORY_LIMIT_MB, default the function's MemorySize); nothing of it was read. Raise MemorySize (the template's parameter) to at least {suggest_mb} MB, or run `archive-compaction run --date {date}` where that much memory is"
    )]
    DayTooBig {
        /// The date (YYYY-MM-DD).
        date: String,
        files: u64,
        flights: u64,
        /// The smallest useful part, in weight ([`crate::protocol::plan::input_weight`]).
        part_files: u64,
        needed_mb: u64,
        limit_mb: u64,
        /// The smallest limit that would do, rounded up to 64 MB.
        suggest_mb: u64,
    },

    /// A date's uuid sets would not fit the free local disk ([`crate::data::spill::check_room`]).
    #[error(
        "date {date}: its uuid sets need about {needed_mb} MB of local disk in {dir} and {free_mb} MB is free; nothing more of the date was read (parts committed before are kept, the next run with room goes on). Give the function more ephemeral storage (EphemeralStorage on template.yaml's function: 512 MB unless set, up to 10,240 MB; TMPDIR elsewhere)"
    )]
    DiskTooSmall { date: NaiveDate, dir: String, needed_mb: u64, free_mb: u64 },

    /// A date's uuid sets could not be spilled to, or read back from, disk ([`crate::data::spill`]).
    #[error(
        "spilling a date's flight uuids to {dir} failed: {source}; parts of the date committed before are kept and the next run goes on from what is left. Past the in-memory limit a date's sets are sorted on local disk (up to about 52 B a flight of the date): give the function more ephemeral storage (EphemeralStorage on template.yaml's function: 512 MB unless set, up to 10,240 MB; TMPDIR elsewhere), or raise FLIGHTS_IN_MEMORY with the memory to hold it (16 B a uuid)"
    )]
    Spill { dir: String, source: std::io::Error },

    /// The deadline came before a part of a date ([`crate::infra::deadline::Deadline::near_part`]).
    /// Not a failure: the run ends as a deadline stop naming the date (`resume_date`).
    #[error(
        "deadline near within {date}: {parts_done} part(s) committed, {files_left} index file(s) left ({left_s} s left, {needed_s} s needed for the next part: the margin, or its files at this run's pace before the S3 calls end); the next run goes on within this date{hint}"
    )]
    DateUnfinished {
        date: NaiveDate,
        parts_done: u64,
        /// Index files of the date's plan not yet compacted.
        files_left: u64,
        left_s: u64,
        needed_s: u64,
        /// [`crate::infra::deadline::Near::part_hint`]: empty, or what to change.
        hint: String,
    },

    /// A listing window ([`crate::protocol::day::Day::list_window`]) committed nothing with files
    /// past it left: the next window would be the same files. The watermark stays.
    #[error(
        "date {date}: a listing window of {window} per-flight file(s) committed nothing, and {left} per-flight file(s) past it are left uncompacted: the window's files were all skipped (see skipped_files: over an input limit, unreadable, or claimed by a manifest); fix or remove those files, or raise PART_FILES (a window is 4 parts), then run again"
    )]
    WindowStalled { date: NaiveDate, window: u64, left: u64 },

    /// A state file (`_compaction_state/...`) exists but cannot be parsed.
    #[error(
        "state file s3://{bucket}/{key} is not valid: {reason}; fix or remove it by hand (it is never overwritten on a guess)"
    )]
    BadState { bucket: String, key: String, reason: String },

    /// Another invocation holds the lease.
    #[error(
        "lease s3://{bucket}/{key} is held by {holder} until {expires_at}; this invocation does nothing"
    )]
    LeaseHeld { bucket: String, key: String, holder: String, expires_at: String },

    /// The lock file changed or vanished under this invocation.
    #[error(
        "lease s3://{bucket}/{key} was lost (taken over or deleted); stopped before a destructive step"
    )]
    LeaseLost { bucket: String, key: String },

    /// The lease's DeleteObject failed or outlasted [`crate::protocol::lease::LEASE_RELEASE_TIMEOUT`].
    #[error(
        "lease s3://{bucket}/_compaction_state/lock.json was not released ({reason}): the next run finds it held by {holder} until {expires_at} and does nothing until then; once this run is over, deleting _compaction_state/lock.json by hand lets a run start at once"
    )]
    LeaseNotReleased { bucket: String, holder: String, expires_at: String, reason: String },

    /// This invocation's own lease expired under it, unchanged.
    #[error(
        "lease s3://{bucket}/{key} expired under this run at {expired_at} (LEASE_SECONDS {lease_seconds} s was shorter than the time between two of its steps; keep it above the Lambda timeout, 900 s); stopped before a destructive step"
    )]
    LeaseExpired { bucket: String, key: String, expired_at: String, lease_seconds: u64 },

    /// A lease longer than any run holds ([`crate::protocol::lease::max_plausible_lease`]): not
    /// obeyed (every run would stop, silently, until it expires) nor taken over (a run may hold it).
    #[error(
        "lease s3://{bucket}/{key} held by {holder} claims to last until {expires_at}, {seconds_left} s from now, longer than any run holds it (LEASE_SECONDS + 900 s = {max_seconds} s): check that no run is under way (archive-compaction status; the Lambda's invocations), then remove {key} by hand; this invocation does nothing"
    )]
    LeaseImplausible {
        bucket: String,
        key: String,
        holder: String,
        expires_at: String,
        seconds_left: i64,
        max_seconds: i64,
    },

    /// The run was asked to stop and did not start the step it was about to.
    #[error("stopped by {signal}: {what} was not started; the next run goes on from here")]
    Interrupted { signal: &'static str, what: String },

    /// The invocation time is later than the wall clock by more than
    /// [`crate::commands::run::MAX_CLOCK_SKEW`]. Nothing is read or written.
    #[error(
        "invocation time {now} is {ahead_seconds} s ahead of the wall clock ({wall}), more than the {skew_seconds} s allowed: a future --now or event \"now\"/\"time\" would move the watermark past today's cutoff; give a time at or before now (or none)"
    )]
    FutureInvocation { now: String, wall: String, ahead_seconds: i64, skew_seconds: i64 },

    /// The watermark is ahead of the wall clock's cutoff.
    #[error(
        "watermark s3://{bucket}/{key} says {watermark}, {days} day(s) ahead of today's cutoff {cutoff}: no run compacts anything until it is fixed (a future --now or event time, or a hand edit, put it there). Fix: set last_compacted_date back to the last date really compacted (`archive-compaction status` and the index/ partitions show which), or delete the file to start over from START_DATE or the earliest partition (compacted dates are passed at the cost of a listing each)"
    )]
    WatermarkAhead {
        bucket: String,
        key: String,
        watermark: NaiveDate,
        cutoff: NaiveDate,
        days: i64,
    },

    /// The compacted output, read back with HeadObject, is not what was written.
    #[error("verification of s3://{bucket}/{} failed: {reason}", escape(.key))]
    VerifyFailed { bucket: String, key: String, reason: String },

    /// Encoding the compacted Parquet output failed.
    #[error("writing the compacted file for {date}: {reason}")]
    Encode { date: NaiveDate, reason: String },

    /// A commit kept inputs whose rows are not proven to be in its output
    /// ([`crate::protocol::proof`]); the manifest is kept for recovery.
    #[error(
        "{count} input(s) of {date} kept: their rows are not proven to be in {output} (first: {key}: {reason}); manifest {manifest} kept, the date is blocked: a bug listed an input the merge did not take in; inspect the input and the manifest"
    )]
    Unproven {
        date: NaiveDate,
        /// The first input kept (its key in the bucket).
        key: String,
        /// Which rule it fails.
        reason: String,
        count: usize,
        /// The commit's output key (or "no output", zero rows).
        output: String,
        manifest: String,
    },

    /// A failpoint injected this error (tests only).
    #[error("failpoint {0} fired")]
    Failpoint(String),
}

impl Error {
    /// An [`Error::S3`].
    pub fn s3(
        op: &'static str,
        bucket: &str,
        key: &str,
        code: impl Into<String>,
        message: impl Into<String>,
        transient: bool,
    ) -> Error {
        Error::S3 {
            op,
            bucket: bucket.to_string(),
            key: key.to_string(),
            code: code.into(),
            message: message.into(),
            transient,
        }
    }

    /// True when the same call may succeed later without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::S3 { transient: true, .. } | Error::Deadline { .. })
    }

    /// True when the error is S3's `NoSuchKey`/`NotFound` (404).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::S3 { code, .. } if code == "NoSuchKey" || code == "NotFound")
    }
}

/// A reporting failure. Its text lands in [`crate::data::report::RunReport::report_errors`]; it
/// never changes the run's status.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // as Error's
pub enum ReportError {
    /// The MQTT client could not be set up (TLS roots, CA file).
    #[error("MQTT {broker}: TLS setup failed: {reason}")]
    MqttTls { broker: String, reason: String },

    /// The broker refused or dropped the connection, or a request failed.
    #[error(
        "MQTT {broker}: {reason} ({acked} of {total} messages acknowledged; not acknowledged: {pending})"
    )]
    Mqtt {
        broker: String,
        /// The client's error (connection refused, not authorised, I/O error...).
        reason: String,
        /// Messages the broker acknowledged (PUBACK) before the failure.
        acked: usize,
        total: usize,
        /// The messages not acknowledged: `all`, `none`, or their topics'
        /// short names ([`crate::data::mqtt::short_name`]), comma-separated.
        pending: String,
    },

    /// Connect, publish and disconnect did not finish within `MQTT_TIMEOUT_SECONDS`.
    #[error(
        "MQTT {broker}: timed out after {} s while {stage} ({acked} of {total} messages acknowledged; not acknowledged: {pending})",
        timeout.as_secs_f64()
    )]
    MqttTimeout {
        broker: String,
        timeout: Duration,
        /// What was under way: `connecting`, `publishing` or `disconnecting`.
        stage: &'static str,
        acked: usize,
        total: usize,
        pending: String,
    },

    /// The broker closed the connection at this message twice, the second time sent alone.
    #[error(
        "MQTT {broker}: the broker closed the connection at {topic} twice, the second time sent alone (its own packet limit?): {topic} not published, the other topics sent on new connections"
    )]
    MqttDropped { broker: String, topic: String },

    /// A message over the payload limit (a bug: none comes near it).
    #[error(
        "MQTT {broker}: {topic} not published: its payload of {bytes} bytes is over the {limit}-byte limit (the others are sent without it)"
    )]
    MqttTooLarge { broker: String, topic: String, bytes: usize, limit: usize },

    /// The MQTT password could not be read from Secrets Manager.
    #[error("MQTT password secret {secret}: {reason}; nothing was published to MQTT")]
    MqttSecret { secret: String, reason: String },

    /// PutMetricData failed (after the SDK's retries).
    #[error("CloudWatch PutMetricData to namespace {namespace}: {reason}")]
    CloudWatch { namespace: String, reason: String },

    /// PutMetricData did not finish within [`crate::data::metrics::CLOUDWATCH_TIMEOUT`].
    #[error(
        "CloudWatch PutMetricData to namespace {namespace}: timed out after {} s",
        timeout.as_secs_f64()
    )]
    CloudWatchTimeout { namespace: String, timeout: Duration },
}
