//! Settings, parsed from environment variables into a typed [`Config`].
//!
//! [`Config::from_map`] takes any string map, so tests never touch the process
//! environment; [`Config::from_env`] is the thin wrapper `main` uses. Every
//! error names the variable and what it expects. The AWS SDK reads its own
//! variables (`AWS_REGION`, credentials, `AWS_ENDPOINT_URL`, ...) itself.
//!
//! ```
//! use std::collections::HashMap;
//! use archive_compaction::config::Config;
//! let env = HashMap::from([("S3_BUCKET".to_string(), "archive".to_string())]);
//! let c = Config::from_map(&env).unwrap();
//! assert_eq!(c.lag_days, 2);
//! assert!(Config::from_map(&HashMap::new()).is_err());
//! ```

use std::collections::HashMap;
use std::time::Duration;

use chrono::NaiveDate;

use crate::error::{Error, Result};

/// The default of each setting that has one of its own, named as the
/// setting: [`Config::from_map`] takes it, [`SETTINGS`] shows it. The
/// multipart sizes' defaults are [`crate::storage`]'s, the input budget's
/// [`crate::input::BUDGET_MB_DEFAULT`].
pub mod defaults {
    /// `LAG_DAYS`.
    pub const LAG_DAYS: u32 = 2;
    /// `LOG_LEVEL`.
    pub const LOG_LEVEL: &str = "info";
    /// `S3_FORCE_PATH_STYLE`.
    pub const S3_FORCE_PATH_STYLE: bool = false;
    /// `LEASE_SECONDS`: above Lambda's 900 s maximum timeout.
    pub const LEASE_SECONDS: u64 = 960;
    /// `READ_CONCURRENCY`.
    pub const READ_CONCURRENCY: usize = 64;
    /// `ROW_GROUP_ROWS`.
    pub const ROW_GROUP_ROWS: usize = 131_072;
    /// `DEADLINE_MARGIN_SECONDS`.
    pub const DEADLINE_MARGIN_SECONDS: u64 = 60;
    /// `SWEEP_DAYS`.
    pub const SWEEP_DAYS: u32 = 14;
    /// `METRICS_ENABLED`.
    pub const METRICS_ENABLED: bool = true;
    /// `METRICS_NAMESPACE`.
    pub const METRICS_NAMESPACE: &str = "SkyFollower/ArchiveCompaction";
    /// `MQTT_PORT`.
    pub const MQTT_PORT: u16 = 1883;
    /// The port on which `MQTT_TLS` defaults to true (MQTT over TLS).
    pub const MQTT_TLS_PORT: u16 = 8883;
    /// `MQTT_TOPIC_ROOT`.
    pub const MQTT_TOPIC_ROOT: &str = "SkyFollower/archive-compaction";
    /// `MQTT_TIMEOUT_SECONDS`.
    pub const MQTT_TIMEOUT_SECONDS: u64 = 5;
    /// `PART_FILES`: a part's weight in per-flight files
    /// ([`crate::plan::input_weight`]), ~75 MB of commit state.
    pub const PART_FILES: u64 = 50_000;
}

/// One row of the settings table: name, default, meaning. Used by `--help`
/// and kept in sync with docs/configuration.md (checked by `tests/suite/docs.rs`);
/// each default's text is the [`defaults`] constant's (checked by this
/// module's tests).
pub const SETTINGS: &[(&str, &str, &str)] = &[
    (
        "S3_BUCKET",
        "(required)",
        "bucket holding flights/, index/ and _compaction_state/",
    ),
    (
        "LAG_DAYS",
        "2",
        "cutoff = UTC date of the invocation time minus this many days",
    ),
    (
        "START_DATE",
        "(unset)",
        "YYYY-MM-DD to start at when there is no watermark (else the earliest index/ or flights/ partition)",
    ),
    (
        "LOG_LEVEL",
        defaults::LOG_LEVEL,
        "log level: off, error, warn, info, debug or trace, optionally with target=level pairs: info,aws_smithy_runtime=debug; anything else is refused",
    ),
    (
        "S3_FORCE_PATH_STYLE",
        "false",
        "true for S3-compatible servers that need path-style addressing",
    ),
    (
        "LEASE_SECONDS",
        "960",
        "length of the lease in seconds; keep it above the Lambda timeout (900 s)",
    ),
    (
        "READ_CONCURRENCY",
        "64",
        "index files fetched at once (GetObject requests in flight)",
    ),
    (
        "INPUT_BUDGET_MB",
        "a quarter of AWS_LAMBDA_FUNCTION_MEMORY_SIZE; 128 without it",
        "memory one index input may take decoded, in MiB; an input whose footer declares more (or whose footer is longer than 1/32 of it, or that has more than 1,000 columns) is left in place unread and named in skipped_files",
    ),
    (
        "MEMORY_LIMIT_MB",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE; none without it",
        "memory the run may use, in MB; a date whose estimated peak (day::peak_memory_mb) is over 90% of it is refused before it is read, with the estimate and the fix (0: no limit)",
    ),
    (
        "PART_FILES",
        "50000",
        "most index files one commit of a date takes (a multi-row input counts 1 + 1 for every 400 bytes of it); a date with more is committed in parts, each its own compacted file and manifest, so a day's memory is bounded whatever its size and a day cut by the deadline goes on from its last part",
    ),
    (
        "FLIGHTS_IN_MEMORY",
        "524288",
        "most flight uuids a date holds in memory per set (its flights, its per-flight files past the listing window, the parity gate's candidates; 16 B each); past it they are sorted into runs on local disk (TMPDIR, /tmp on Lambda: 16 B a uuid, at most ~52 B a flight of the date), so a day's memory does not grow with its size. At least 1",
    ),
    (
        "ROW_GROUP_ROWS",
        "131072",
        "rows per Parquet row group in compacted files",
    ),
    (
        "MULTIPART_THRESHOLD_BYTES",
        "16777216",
        "compacted files of at least this many bytes go up as S3 multipart uploads (0: always); smaller ones as one PUT",
    ),
    (
        "MULTIPART_PART_BYTES",
        "8388608",
        "part size of multipart uploads, from 5 MiB (5242880) to 5 GiB (S3's limits)",
    ),
    (
        "DEADLINE_MARGIN_SECONDS",
        "60",
        "stop starting new dates when less time than this (or twice the slowest day so far) remains; more than 8 (the S3 cut-off before the deadline), and a `--max-duration` must be more than it",
    ),
    (
        "SWEEP_DAYS",
        "14",
        "re-check this many already-compacted days (up to the watermark) for late or rewritten index files; 0 turns the sweep off",
    ),
    ("METRICS_ENABLED", "true", "publish CloudWatch metrics"),
    (
        "METRICS_NAMESPACE",
        defaults::METRICS_NAMESPACE,
        "CloudWatch namespace",
    ),
    (
        "MQTT_HOST",
        "(unset)",
        "MQTT broker host; MQTT reporting is off when unset",
    ),
    ("MQTT_PORT", "1883", "MQTT broker port (8883 turns TLS on)"),
    ("MQTT_USERNAME", "(unset)", "MQTT user name"),
    (
        "MQTT_PASSWORD",
        "(unset)",
        "MQTT password (prefer MQTT_PASSWORD_SECRET_ARN: an environment variable is readable in the function's configuration)",
    ),
    (
        "MQTT_PASSWORD_SECRET_ARN",
        "(unset)",
        "Secrets Manager secret whose SecretString is the MQTT password; read once per process, wins over MQTT_PASSWORD",
    ),
    ("MQTT_TLS", "true on port 8883", "use TLS (rustls) for MQTT"),
    (
        "MQTT_CA_FILE",
        "(system roots)",
        "PEM file of CA certificates for MQTT TLS",
    ),
    (
        "MQTT_TOPIC_ROOT",
        defaults::MQTT_TOPIC_ROOT,
        "topic root; values go to {root}/statistic/{name}",
    ),
    (
        "MQTT_TIMEOUT_SECONDS",
        "5",
        "bound on connect + publish + disconnect",
    ),
];

/// MQTT reporting settings (present only when `MQTT_HOST` is set).
#[derive(Debug, Clone, PartialEq)]
pub struct MqttConfig {
    /// Broker host name or address (`MQTT_HOST`).
    pub host: String,
    /// Broker port (`MQTT_PORT`, default 1883).
    pub port: u16,
    /// User name (`MQTT_USERNAME`).
    pub username: Option<String>,
    /// Password (`MQTT_PASSWORD`). Ignored when `password_secret_arn` is set.
    pub password: Option<String>,
    /// Secrets Manager secret (ARN or name) whose `SecretString` is the
    /// password (`MQTT_PASSWORD_SECRET_ARN`). Read once per process by
    /// [`crate::app::Deps::mqtt_password`]; wins over `password`.
    pub password_secret_arn: Option<String>,
    /// TLS on (`MQTT_TLS`, default true when the port is 8883).
    pub tls: bool,
    /// PEM CA bundle (`MQTT_CA_FILE`); system roots when unset.
    pub ca_file: Option<String>,
    /// Topic root (`MQTT_TOPIC_ROOT`).
    pub topic_root: String,
    /// Bound on the whole publish (`MQTT_TIMEOUT_SECONDS`, default 5 s).
    pub timeout: Duration,
}

/// All settings of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Bucket name (`S3_BUCKET`).
    pub bucket: String,
    /// Days between the invocation date and the cutoff (`LAG_DAYS`, default 2).
    pub lag_days: u32,
    /// First date to consider when there is no watermark (`START_DATE`).
    pub start_date: Option<NaiveDate>,
    /// Tracing filter (`LOG_LEVEL`, default `info`).
    pub log_level: String,
    /// Path-style S3 addressing (`S3_FORCE_PATH_STYLE`, default false).
    pub force_path_style: bool,
    /// Lease length (`LEASE_SECONDS`, default 960 s: above Lambda's 900 s maximum timeout).
    pub lease: Duration,
    /// GetObject requests in flight at once (`READ_CONCURRENCY`, default 64).
    pub read_concurrency: usize,
    /// Rows per row group in outputs (`ROW_GROUP_ROWS`, default 131,072).
    pub row_group_rows: usize,
    /// What one index input may take decoded (`INPUT_BUDGET_MB`; default a
    /// quarter of `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, which Lambda sets to
    /// the function's memory in MB, else 128 MiB). The input limits derive
    /// from it ([`crate::input`]).
    pub input_budget: crate::input::Budget,
    /// Memory the run may use, in MB (`MEMORY_LIMIT_MB`; default
    /// `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, none without it; 0: none): a date
    /// over it is refused before it is read ([`crate::day::check_day_memory`]).
    pub memory_limit_mb: Option<u64>,
    /// Most weight one commit of a date takes (`PART_FILES`, default
    /// 50,000; at least 1): a date over it is committed in parts
    /// ([`crate::plan::parts`]).
    pub part_files: u64,
    /// How many uuids a date's sets hold in memory before they spill to
    /// local disk (`FLIGHTS_IN_MEMORY`, default
    /// [`crate::spill::DEFAULT_IN_MEMORY`]; at least 1).
    pub spill: crate::spill::SpillSettings,
    /// Output size from which the compacted file goes up as a multipart
    /// upload (`MULTIPART_THRESHOLD_BYTES`, default 16 MiB; 0 = always).
    pub multipart_threshold: usize,
    /// Multipart part size (`MULTIPART_PART_BYTES`, default 8 MiB; S3 allows
    /// 5 MiB to 5 GiB).
    pub multipart_part_size: usize,
    /// Minimum time left before starting another date (`DEADLINE_MARGIN_SECONDS`, default 60 s;
    /// more than [`crate::storage::S3_DEADLINE_MARGIN`], 8 s, else refused).
    pub deadline_margin: Duration,
    /// Already-compacted days re-checked for stragglers (`SWEEP_DAYS`, default 14; 0 = off).
    pub sweep_days: u32,
    /// Publish CloudWatch metrics (`METRICS_ENABLED`, default true).
    pub metrics_enabled: bool,
    /// CloudWatch namespace (`METRICS_NAMESPACE`).
    pub metrics_namespace: String,
    /// MQTT reporting, when `MQTT_HOST` is set.
    pub mqtt: Option<MqttConfig>,
}

impl Config {
    /// Refuses a run's own time limit (`--max-duration`) that leaves no room
    /// for a date: the walk starts a date only with more than
    /// `DEADLINE_MARGIN_SECONDS` left, so a limit within the margin would
    /// end `Success` having done nothing.
    ///
    /// # Errors
    /// [`Error::Config`] naming `--max-duration`, with both figures (seconds)
    /// and the two ways out.
    pub fn check_max_duration(&self, max_duration: Duration) -> Result<(), Error> {
        if max_duration > self.deadline_margin {
            return Ok(());
        }
        Err(bad(
            "--max-duration",
            format!(
                "{}s is not more than DEADLINE_MARGIN_SECONDS ({} s): no date would start; give more (a bare number is seconds: 14m for 14 minutes) or lower DEADLINE_MARGIN_SECONDS (more than {} s)",
                max_duration.as_secs_f64(),
                self.deadline_margin.as_secs(),
                crate::storage::S3_DEADLINE_MARGIN.as_secs()
            ),
        ))
    }
}

fn bad(name: &str, reason: impl Into<String>) -> Error {
    Error::Config {
        name: name.to_string(),
        reason: reason.into(),
    }
}

/// Checks an `MQTT_TOPIC_ROOT` and drops its trailing `/`s. A topic a
/// client publishes to may not hold the wildcards `#` and `+` nor the
/// character NUL (MQTT 3.1.1, sections 4.7.1 and 1.5.3; the broker refuses
/// such a PUBLISH, so nothing would be retained, not even discovery).
///
/// Errors: [`Error::Config`] naming `MQTT_TOPIC_ROOT` and the character.
pub fn parse_topic_root(v: &str) -> Result<String> {
    let named = |c: char| match c {
        '#' => "the multi-level wildcard '#'",
        '+' => "the single-level wildcard '+'",
        _ => "the character NUL (U+0000)",
    };
    if let Some(c) = v.chars().find(|c| matches!(c, '#' | '+' | '\0')) {
        return Err(bad(
            "MQTT_TOPIC_ROOT",
            format!(
                "{} holds {}, which no topic a client publishes to may hold (MQTT 3.1.1, 4.7.1 and 1.5.3): the broker would refuse every statistic; use a root of plain levels such as SkyFollower/archive-compaction",
                crate::text::quote(v),
                named(c)
            ),
        ));
    }
    let root = v.trim_end_matches('/');
    if root.is_empty() {
        return Err(bad(
            "MQTT_TOPIC_ROOT",
            "is only '/': give a root such as SkyFollower/archive-compaction",
        ));
    }
    Ok(root.to_string())
}

fn get<'a>(env: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    env.get(name).map(|s| s.trim()).filter(|s| !s.is_empty())
}

fn parse_num<T: std::str::FromStr>(
    env: &HashMap<String, String>,
    name: &str,
    default: T,
    what: &str,
) -> Result<T> {
    match get(env, name) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| {
            bad(
                name,
                format!("expected {what}, got {}", crate::text::quote(v)),
            )
        }),
    }
}

/// [`parse_num`] for a count that must be at least 1 (`ROW_GROUP_ROWS`,
/// `PART_FILES`, `FLIGHTS_IN_MEMORY`).
fn parse_count<T: std::str::FromStr + From<u8> + PartialOrd>(
    env: &HashMap<String, String>,
    name: &str,
    default: T,
    what: &str,
) -> Result<T> {
    let n = parse_num(env, name, default, what)?;
    match n < T::from(1) {
        true => Err(bad(name, "must be at least 1")),
        false => Ok(n),
    }
}

fn parse_bool(env: &HashMap<String, String>, name: &str, default: bool) -> Result<bool> {
    match get(env, name).map(|v| v.to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) => match v.as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(bad(
                name,
                format!("expected true or false, got {}", crate::text::quote(&v)),
            )),
        },
    }
}

/// Parses a `YYYY-MM-DD` date for the setting `name`.
pub fn parse_date(name: &str, v: &str) -> Result<NaiveDate> {
    let t = v.trim();
    // Exactly YYYY-MM-DD: chrono's %Y alone would take `26-7-12` as the year 26.
    let shaped = t.len() == 10
        && t.bytes().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                c == b'-'
            } else {
                c.is_ascii_digit()
            }
        });
    shaped
        .then(|| NaiveDate::parse_from_str(t, "%Y-%m-%d").ok())
        .flatten()
        .ok_or_else(|| {
            bad(
                name,
                format!("expected a date YYYY-MM-DD, got {}", crate::text::quote(v)),
            )
        })
}

/// The levels `LOG_LEVEL` takes, alone or after `target=`.
pub const LOG_LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// Checks a `LOG_LEVEL`: comma-separated directives, each a level of
/// [`LOG_LEVELS`] (the default for every target) or `target=level`, a
/// target being a Rust module path such as `aws_smithy_runtime` or
/// `archive_compaction::run`. Levels are taken in any case and returned in
/// lower case.
///
/// Errors: [`Error::Config`] naming `LOG_LEVEL` and the directive that is
/// neither (`warning`, `verbose`, `debug;`, a bare target, an empty
/// directive): `tracing`'s own filter would take such a word as a target
/// name and so turn every log line off, errors included.
pub fn parse_log_level(v: &str) -> Result<String> {
    let level = |l: &str| {
        let l = l.trim().to_ascii_lowercase();
        LOG_LEVELS.contains(&l.as_str()).then_some(l)
    };
    let target_ok = |t: &str| {
        !t.is_empty()
            && t.split("::").all(|part| {
                let mut c = part.chars();
                c.next()
                    .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
                    && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
    };
    let mut out = Vec::new();
    for d in v.split(',') {
        let d = d.trim();
        let parsed = match d.split_once('=') {
            None => level(d),
            Some((t, l)) if target_ok(t.trim()) => level(l).map(|l| format!("{}={l}", t.trim())),
            Some(_) => None,
        };
        match parsed {
            Some(p) => out.push(p),
            None => {
                return Err(bad(
                    "LOG_LEVEL",
                    format!(
                        "{} in {} is neither a level ({}) nor target=level (e.g. info,aws_smithy_runtime=debug)",
                        crate::text::quote(d),
                        crate::text::quote(v),
                        LOG_LEVELS.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(out.join(","))
}

impl Config {
    /// Parses settings from a map of environment variables.
    ///
    /// Errors: [`Error::Config`] naming the first variable that is missing
    /// (`S3_BUCKET`) or malformed.
    pub fn from_map(env: &HashMap<String, String>) -> Result<Config> {
        let bucket = get(env, "S3_BUCKET")
            .ok_or_else(|| bad("S3_BUCKET", "required: the name of the archive bucket"))?
            .to_string();
        let lag_days: u32 = parse_num(
            env,
            "LAG_DAYS",
            defaults::LAG_DAYS,
            "a whole number of days (0 or more)",
        )?;
        if lag_days > 3650 {
            return Err(bad(
                "LAG_DAYS",
                format!("{lag_days} days is more than ten years"),
            ));
        }
        let start_date = get(env, "START_DATE")
            .map(|v| parse_date("START_DATE", v))
            .transpose()?;
        let lease_secs: u64 = parse_num(
            env,
            "LEASE_SECONDS",
            defaults::LEASE_SECONDS,
            "a whole number of seconds",
        )?;
        if lease_secs == 0 {
            return Err(bad("LEASE_SECONDS", "must be at least 1 second"));
        }
        let read_concurrency: usize = parse_num(
            env,
            "READ_CONCURRENCY",
            defaults::READ_CONCURRENCY,
            "a whole number from 1 to 1024",
        )?;
        if !(1..=1024).contains(&read_concurrency) {
            return Err(bad("READ_CONCURRENCY", "must be from 1 to 1024"));
        }
        let row_group_rows: usize = parse_count(
            env,
            "ROW_GROUP_ROWS",
            defaults::ROW_GROUP_ROWS,
            "a whole number of rows",
        )?;
        let input_budget = match get(env, "INPUT_BUDGET_MB") {
            Some(_) => {
                let mb: u64 = parse_num(env, "INPUT_BUDGET_MB", 0, "a whole number of MiB")?;
                if !(1..=1024 * 1024).contains(&mb) {
                    return Err(bad("INPUT_BUDGET_MB", "must be from 1 to 1048576 MiB"));
                }
                crate::input::Budget::from_mb(mb)
            }
            None => match get(env, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
                .and_then(|v| v.parse::<u64>().ok())
            {
                Some(memory_mb) => crate::input::Budget::from_mb((memory_mb / 4).max(1)),
                None => crate::input::Budget::default(),
            },
        };
        let memory_limit_mb = match get(env, "MEMORY_LIMIT_MB") {
            Some(_) => parse_num::<u64>(env, "MEMORY_LIMIT_MB", 0, "a whole number of MB")?,
            None => get(env, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0),
        };
        let memory_limit_mb = (memory_limit_mb > 0).then_some(memory_limit_mb);
        let part_files: u64 = parse_count(
            env,
            "PART_FILES",
            defaults::PART_FILES,
            "a whole number of index files",
        )?;
        let flights_in_memory: usize = parse_count(
            env,
            "FLIGHTS_IN_MEMORY",
            crate::spill::DEFAULT_IN_MEMORY,
            "a whole number of uuids",
        )?;
        let multipart_threshold: usize = parse_num(
            env,
            "MULTIPART_THRESHOLD_BYTES",
            crate::storage::MULTIPART_THRESHOLD_DEFAULT,
            "a whole number of bytes",
        )?;
        let multipart_part_size: usize = parse_num(
            env,
            "MULTIPART_PART_BYTES",
            crate::storage::MULTIPART_PART_DEFAULT,
            "a whole number of bytes",
        )?;
        if !(crate::storage::MULTIPART_PART_MIN..=crate::storage::MULTIPART_PART_MAX)
            .contains(&multipart_part_size)
        {
            return Err(bad(
                "MULTIPART_PART_BYTES",
                format!(
                    "{multipart_part_size} is outside S3's part size limits: 5242880 (5 MiB) to 5368709120 (5 GiB)"
                ),
            ));
        }
        let margin: u64 = parse_num(
            env,
            "DEADLINE_MARGIN_SECONDS",
            defaults::DEADLINE_MARGIN_SECONDS,
            "a whole number of seconds",
        )?;
        // A date started with less time left than the S3 cut-off has its
        // S3 calls cut before they begin: every deadline stop a Failure.
        let s3_cutoff = crate::storage::S3_DEADLINE_MARGIN.as_secs();
        if margin <= s3_cutoff {
            return Err(bad(
                "DEADLINE_MARGIN_SECONDS",
                format!(
                    "{margin} is not more than the {s3_cutoff} s before the deadline at which every S3 call is cut (S3_DEADLINE_MARGIN): a date started with that little time left could not write its output, and every deadline stop would be a Failure; give at least {} (default {})",
                    s3_cutoff + 1,
                    defaults::DEADLINE_MARGIN_SECONDS
                ),
            ));
        }
        let mqtt = match get(env, "MQTT_HOST") {
            None => None,
            Some(host) => {
                let port: u16 = parse_num(env, "MQTT_PORT", defaults::MQTT_PORT, "a TCP port")?;
                let timeout: f64 = parse_num(
                    env,
                    "MQTT_TIMEOUT_SECONDS",
                    defaults::MQTT_TIMEOUT_SECONDS as f64,
                    "a number of seconds",
                )?;
                if !(timeout > 0.0 && timeout <= 300.0) {
                    return Err(bad(
                        "MQTT_TIMEOUT_SECONDS",
                        "must be above 0 and at most 300",
                    ));
                }
                Some(MqttConfig {
                    host: host.to_string(),
                    port,
                    username: get(env, "MQTT_USERNAME").map(str::to_string),
                    password: env.get("MQTT_PASSWORD").filter(|p| !p.is_empty()).cloned(),
                    password_secret_arn: get(env, "MQTT_PASSWORD_SECRET_ARN").map(str::to_string),
                    tls: parse_bool(env, "MQTT_TLS", port == defaults::MQTT_TLS_PORT)?,
                    ca_file: get(env, "MQTT_CA_FILE").map(str::to_string),
                    topic_root: parse_topic_root(
                        get(env, "MQTT_TOPIC_ROOT").unwrap_or(defaults::MQTT_TOPIC_ROOT),
                    )?,
                    timeout: Duration::from_secs_f64(timeout),
                })
            }
        };
        Ok(Config {
            bucket,
            lag_days,
            start_date,
            log_level: match get(env, "LOG_LEVEL") {
                None => defaults::LOG_LEVEL.to_string(),
                Some(v) => parse_log_level(v)?,
            },
            force_path_style: parse_bool(
                env,
                "S3_FORCE_PATH_STYLE",
                defaults::S3_FORCE_PATH_STYLE,
            )?,
            lease: Duration::from_secs(lease_secs),
            read_concurrency,
            row_group_rows,
            input_budget,
            memory_limit_mb,
            part_files,
            spill: crate::spill::SpillSettings {
                limit: flights_in_memory,
            },
            multipart_threshold,
            multipart_part_size,
            deadline_margin: Duration::from_secs(margin),
            sweep_days: {
                let d: u32 = parse_num(
                    env,
                    "SWEEP_DAYS",
                    defaults::SWEEP_DAYS,
                    "a whole number of days (0 turns the sweep off)",
                )?;
                if d > 366 {
                    return Err(bad("SWEEP_DAYS", "at most 366 days"));
                }
                d
            },
            metrics_enabled: parse_bool(env, "METRICS_ENABLED", defaults::METRICS_ENABLED)?,
            metrics_namespace: get(env, "METRICS_NAMESPACE")
                .unwrap_or(defaults::METRICS_NAMESPACE)
                .to_string(),
            mqtt,
        })
    }

    /// Parses settings from the process environment (see [`Config::from_map`]).
    pub fn from_env() -> Result<Config> {
        Config::from_map(&std::env::vars().collect())
    }
}

/// Variables of `env` that are not settings but look like a mistyped one,
/// each with the setting it resembles, sorted by name: `LAG_DAY` →
/// `LAG_DAYS`, `MQTT_HOTS` → `MQTT_HOST`, `s3_bucket` → `S3_BUCKET`. A
/// variable resembles a setting when, compared without case, it is at most
/// two edits away (a letter inserted, removed or changed, or two adjacent
/// letters swapped) and is at least 6 characters long. Such a variable is
/// ignored like any other, which would silently leave the setting at its
/// default (`MQTT_HOTS`: no MQTT at all); `main` logs a warning for each.
///
/// ```
/// use std::collections::HashMap;
/// use archive_compaction::config::mistyped_settings;
/// let env = HashMap::from([
///     ("MQTT_HOTS".to_string(), "broker".to_string()),
///     ("S3_BUCKET".to_string(), "archive".to_string()),
///     ("HOME".to_string(), "/root".to_string()),
/// ]);
/// assert_eq!(mistyped_settings(&env), vec![("MQTT_HOTS".to_string(), "MQTT_HOST")]);
/// ```
pub fn mistyped_settings(env: &HashMap<String, String>) -> Vec<(String, &'static str)> {
    let mut out: Vec<(String, &'static str)> = env
        .keys()
        .filter(|k| k.len() >= 6 && !SETTINGS.iter().any(|(name, _, _)| name == k))
        .filter_map(|k| {
            let upper = k.to_ascii_uppercase();
            SETTINGS
                .iter()
                .map(|(name, _, _)| (strsim::osa_distance(&upper, name), *name))
                .filter(|(d, _)| *d <= 2)
                .min()
                .map(|(_, name)| (k.clone(), name))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each default [`SETTINGS`] shows is the text of the constant the
    /// code uses: change one and this fails until the other follows.
    #[test]
    fn the_settings_table_shows_the_constants_defaults() {
        let shown: std::collections::BTreeMap<_, _> = SETTINGS
            .iter()
            .map(|(name, default, _)| (*name, *default))
            .collect();
        let budget = crate::input::BUDGET_MB_DEFAULT;
        let want = [
            ("LAG_DAYS", defaults::LAG_DAYS.to_string()),
            (
                "S3_FORCE_PATH_STYLE",
                defaults::S3_FORCE_PATH_STYLE.to_string(),
            ),
            ("LEASE_SECONDS", defaults::LEASE_SECONDS.to_string()),
            ("READ_CONCURRENCY", defaults::READ_CONCURRENCY.to_string()),
            (
                "INPUT_BUDGET_MB",
                format!("a quarter of AWS_LAMBDA_FUNCTION_MEMORY_SIZE; {budget} without it"),
            ),
            ("PART_FILES", defaults::PART_FILES.to_string()),
            (
                "FLIGHTS_IN_MEMORY",
                crate::spill::DEFAULT_IN_MEMORY.to_string(),
            ),
            ("ROW_GROUP_ROWS", defaults::ROW_GROUP_ROWS.to_string()),
            (
                "MULTIPART_THRESHOLD_BYTES",
                crate::storage::MULTIPART_THRESHOLD_DEFAULT.to_string(),
            ),
            (
                "MULTIPART_PART_BYTES",
                crate::storage::MULTIPART_PART_DEFAULT.to_string(),
            ),
            (
                "DEADLINE_MARGIN_SECONDS",
                defaults::DEADLINE_MARGIN_SECONDS.to_string(),
            ),
            ("SWEEP_DAYS", defaults::SWEEP_DAYS.to_string()),
            ("METRICS_ENABLED", defaults::METRICS_ENABLED.to_string()),
            ("MQTT_PORT", defaults::MQTT_PORT.to_string()),
            (
                "MQTT_TLS",
                format!("true on port {}", defaults::MQTT_TLS_PORT),
            ),
            (
                "MQTT_TIMEOUT_SECONDS",
                defaults::MQTT_TIMEOUT_SECONDS.to_string(),
            ),
        ];
        for (name, text) in want {
            assert_eq!(shown[name], text, "{name}");
        }
    }

    #[test]
    fn mistyped_settings_name_the_setting_they_resemble() {
        let e = env(&[
            ("LAG_DAY", "5"),
            ("MQTT_HOTS", "h"),
            ("S3_BUCKETS", "b"),
            ("s3_bucket", "b"),
            ("START_DATES", "2026-07-01"),
            ("SWEEP_DAY", "0"),
            ("LOG_LEVELS", "debug"),
            // Settings, and variables that are not near one.
            ("S3_BUCKET", "b"),
            ("MQTT_PORT", "1883"),
            ("MQTT_HOST", "h"),
            ("AWS_REGION", "eu-west-1"),
            ("AWS_PROFILE", "p"),
            ("HOME", "/root"),
            ("PATH", "/bin"),
            ("RUST_LOG", "info"),
            ("TOOLS_DIR", "/x"),
            ("LANG", "C"),
        ]);
        assert_eq!(
            mistyped_settings(&e),
            vec![
                ("LAG_DAY".to_string(), "LAG_DAYS"),
                ("LOG_LEVELS".to_string(), "LOG_LEVEL"),
                ("MQTT_HOTS".to_string(), "MQTT_HOST"),
                ("S3_BUCKETS".to_string(), "S3_BUCKET"),
                ("START_DATES".to_string(), "START_DATE"),
                ("SWEEP_DAY".to_string(), "SWEEP_DAYS"),
                ("s3_bucket".to_string(), "S3_BUCKET"),
            ]
        );
        assert_eq!(strsim::osa_distance("MQTT_HOTS", "MQTT_HOST"), 1);
        assert_eq!(strsim::osa_distance("", "ABC"), 3);
    }

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A count setting of 0 is refused naming it; 1 and the default are
    /// taken (`FLIGHTS_IN_MEMORY` goes into the spill settings).
    #[test]
    fn counts_are_at_least_one() {
        for name in ["ROW_GROUP_ROWS", "PART_FILES", "FLIGHTS_IN_MEMORY"] {
            let e = Config::from_map(&env(&[("S3_BUCKET", "b"), (name, "0")])).unwrap_err();
            assert!(
                e.to_string().contains(name) && e.to_string().contains("must be at least 1"),
                "{e}"
            );
            assert!(Config::from_map(&env(&[("S3_BUCKET", "b"), (name, "1")])).is_ok());
        }
        let c = Config::from_map(&env(&[("S3_BUCKET", "b"), ("FLIGHTS_IN_MEMORY", "7")])).unwrap();
        assert_eq!(c.spill.limit, 7);
        let c = Config::from_map(&env(&[("S3_BUCKET", "b")])).unwrap();
        assert_eq!(c.spill.limit, crate::spill::DEFAULT_IN_MEMORY);
    }

    #[test]
    fn dates_are_exactly_yyyy_mm_dd() {
        assert!(parse_date("--date", "2026-07-20").is_ok());
        assert!(parse_date("--date", " 2026-07-20 ").is_ok());
        for bad in [
            "26-7-12",
            "2026-7-20",
            "20260720",
            "2026-13-01",
            "2026-02-30",
            "+2026-07-2",
        ] {
            let e = parse_date("--date", bad).unwrap_err().to_string();
            assert!(
                e.contains("--date") && e.contains("YYYY-MM-DD"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn defaults() {
        let c = Config::from_map(&env(&[("S3_BUCKET", "b")])).unwrap();
        assert_eq!(c.lag_days, 2);
        assert_eq!(c.start_date, None);
        assert_eq!(c.log_level, "info");
        assert!(!c.force_path_style);
        assert_eq!(c.lease, Duration::from_secs(960));
        assert!(c.metrics_enabled);
        assert!(c.mqtt.is_none());
    }

    #[test]
    fn settings_that_contradict_each_other_are_refused() {
        // A margin must outlast the S3 cut-off (8 s) ...
        for margin in ["0", "5", "8"] {
            let e = Config::from_map(&env(&[
                ("S3_BUCKET", "b"),
                ("DEADLINE_MARGIN_SECONDS", margin),
            ]))
            .unwrap_err()
            .to_string();
            assert!(
                e.starts_with("setting DEADLINE_MARGIN_SECONDS: ") && e.contains("give at least 9"),
                "{margin}: {e}"
            );
        }
        let c = Config::from_map(&env(&[
            ("S3_BUCKET", "b"),
            ("DEADLINE_MARGIN_SECONDS", "9"),
        ]))
        .unwrap();
        // ... and a run's own limit must outlast the margin.
        assert!(c.check_max_duration(Duration::from_millis(9_001)).is_ok());
        for within in [0, 8_000, 9_000] {
            let e = c
                .check_max_duration(Duration::from_millis(within))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("setting --max-duration: ")
                    && e.contains("is not more than DEADLINE_MARGIN_SECONDS (9 s)"),
                "{within} ms: {e}"
            );
        }
        let c = Config::from_map(&env(&[("S3_BUCKET", "b")])).unwrap();
        assert!(c.check_max_duration(Duration::from_secs(30)).is_err());
        assert!(c.check_max_duration(Duration::from_secs(61)).is_ok());
    }

    #[test]
    fn errors_name_the_variable() {
        for (pairs, name) in [
            (vec![], "S3_BUCKET"),
            (vec![("S3_BUCKET", "b"), ("LAG_DAYS", "-1")], "LAG_DAYS"),
            (
                vec![("S3_BUCKET", "b"), ("START_DATE", "2026-13-01")],
                "START_DATE",
            ),
            (
                vec![("S3_BUCKET", "b"), ("S3_FORCE_PATH_STYLE", "maybe")],
                "S3_FORCE_PATH_STYLE",
            ),
            (
                vec![("S3_BUCKET", "b"), ("MQTT_HOST", "h"), ("MQTT_PORT", "x")],
                "MQTT_PORT",
            ),
            (
                vec![("S3_BUCKET", "b"), ("READ_CONCURRENCY", "0")],
                "READ_CONCURRENCY",
            ),
            (
                vec![("S3_BUCKET", "b"), ("MULTIPART_PART_BYTES", "1048576")],
                "MULTIPART_PART_BYTES",
            ),
            (
                vec![("S3_BUCKET", "b"), ("MULTIPART_THRESHOLD_BYTES", "16MB")],
                "MULTIPART_THRESHOLD_BYTES",
            ),
        ] {
            let e = Config::from_map(&env(&pairs)).unwrap_err();
            assert!(
                matches!(&e, Error::Config { name: n, .. } if n == name),
                "{e}"
            );
            assert!(e.to_string().contains(name));
        }
    }

    #[test]
    fn log_level_takes_levels_and_target_level_pairs_only() {
        let ok = |v: &str| parse_log_level(v).unwrap();
        assert_eq!(ok("info"), "info");
        assert_eq!(ok("WARN"), "warn");
        assert_eq!(
            ok("info, aws_smithy_runtime=debug"),
            "info,aws_smithy_runtime=debug"
        );
        assert_eq!(
            ok("archive_compaction::run=trace"),
            "archive_compaction::run=trace"
        );
        for bad in [
            "warning",
            "verbose",
            "debug;",
            "aws_smithy_runtime",
            "info,",
            "=debug",
            "info,aws=loud",
            "a b=info",
        ] {
            let e = parse_log_level(bad).unwrap_err().to_string();
            assert!(
                e.contains("LOG_LEVEL") && e.contains("target=level"),
                "{bad}: {e}"
            );
            let e = Config::from_map(&env(&[("S3_BUCKET", "b"), ("LOG_LEVEL", bad)]));
            assert!(e.is_err(), "{bad} accepted");
        }
        // Every accepted value is a filter tracing takes as meant.
        for v in [
            "info",
            "off",
            "info,aws_smithy_runtime=debug",
            "error,archive_compaction::run=debug",
        ] {
            let f: Result<tracing_subscriber::filter::Targets, _> = ok(v).parse();
            assert!(f.is_ok(), "{v}");
        }
    }

    #[test]
    fn mqtt_tls_follows_port() {
        let c = Config::from_map(&env(&[
            ("S3_BUCKET", "b"),
            ("MQTT_HOST", "h"),
            ("MQTT_PORT", "8883"),
        ]))
        .unwrap();
        let m = c.mqtt.unwrap();
        assert!(m.tls);
        assert_eq!(m.topic_root, "SkyFollower/archive-compaction");
        assert_eq!(m.password_secret_arn, None);
    }

    #[test]
    fn a_topic_root_with_a_wildcard_or_nul_is_refused_naming_it() {
        for (root, named) in [("ac/#", "'#'"), ("ac/+/x", "'+'"), ("a\0c", "NUL")] {
            let e = Config::from_map(&env(&[
                ("S3_BUCKET", "b"),
                ("MQTT_HOST", "h"),
                ("MQTT_TOPIC_ROOT", root),
            ]))
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("MQTT_TOPIC_ROOT") && e.contains(named),
                "{root:?}: {e}"
            );
            assert!(!e.contains('\0'), "the NUL is quoted, not raw: {e:?}");
        }
        assert_eq!(parse_topic_root("a/b/").unwrap(), "a/b");
        assert!(parse_topic_root("/").is_err());
    }

    #[test]
    fn mqtt_password_secret_arn() {
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:mqtt-AbCdEf";
        let c = Config::from_map(&env(&[
            ("S3_BUCKET", "b"),
            ("MQTT_HOST", "h"),
            ("MQTT_PASSWORD", "plain"),
            ("MQTT_PASSWORD_SECRET_ARN", arn),
        ]))
        .unwrap();
        let m = c.mqtt.unwrap();
        assert_eq!(m.password_secret_arn.as_deref(), Some(arn));
        assert_eq!(m.password.as_deref(), Some("plain"));
        // Empty, as the template passes an unset parameter: no secret.
        let c = Config::from_map(&env(&[
            ("S3_BUCKET", "b"),
            ("MQTT_HOST", "h"),
            ("MQTT_PASSWORD_SECRET_ARN", ""),
        ]))
        .unwrap();
        assert_eq!(c.mqtt.unwrap().password_secret_arn, None);
    }
}
