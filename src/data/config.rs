//! Settings, parsed from environment variables into a typed [`Config`], each declared once in
//! `settings!` (variable, default or derived default, parser with its bounds, meaning, field):
//! `archive-compaction settings` prints the rows, docs/configuration.md's table is
//! [`settings_markdown`] (`make docs-settings`; tests/suite/docs.rs holds them equal, and
//! template.yaml to the defaults). Every error names the variable and what it expects. The AWS
//! SDK reads its own variables.
//!
//! ```
//! use std::collections::HashMap;
//! use archive_compaction::data::config::{Config, LAG_DAYS};
//! let env = HashMap::from([("S3_BUCKET".to_string(), "archive".to_string())]);
//! let c = Config::from_map(&env).unwrap();
//! assert_eq!(c.lag_days, 2);
//! assert_eq!(LAG_DAYS.default.to_string(), "2");
//! assert!(Config::from_map(&HashMap::new()).is_err());
//! ```

use std::collections::HashMap;
use std::time::Duration;

use chrono::NaiveDate;

use crate::data::input::Budget;
use crate::data::spill::SpillSettings;
use crate::infra::error::{Error, Result};
use crate::infra::storage;
use crate::infra::text::quote;

type Env = HashMap<String, String>;

/// Declares the settings, one row each, in the order `settings` and docs/configuration.md list
/// them:
///
/// ```text
/// /// meaning, in Markdown
/// VARIABLE: default, parser => field: Type = conversion;   // `= conversion` optional
/// ```
///
/// From each row it makes the constant `VARIABLE` (a [`Setting`]; `default` is a [`DefaultIs`],
/// `parser` a [`Parse`]), its place in [`SETTINGS`], and the field of the struct it is listed
/// under, documented with the meaning. `from_map` reads the fields in order, each by
/// [`FromSetting`] for its type (for the conversion's argument when there is one), then converts.
/// The second struct is a field of the first; its first row is its gate: unset, the struct is
/// `None` and its other rows are not read.
macro_rules! settings {
    (
        $(#[$meta:meta])* pub struct $config:ident {
            $($(#[doc = $doc:literal])+
            $name:ident: $default:expr, $parse:expr => $field:ident: $ty:ty $(= $conv:expr)?;)+
        }
        $(#[$sub_meta:meta])* pub struct $sub:ident in $sub_field:ident {
            $(#[doc = $gate_doc:literal])+
            $gate:ident: $gate_default:expr, $gate_parse:expr => $gate_field:ident: String;
            $($(#[doc = $sub_doc:literal])+
            $sub_name:ident: $sub_default:expr, $sub_parse:expr => $sub_row:ident: $sub_ty:ty;)+
        }
    ) => {
        $(settings!(@const $(#[doc = $doc])+ $name, $default, $parse);)+
        settings!(@const $(#[doc = $gate_doc])+ $gate, $gate_default, $gate_parse);
        $(settings!(@const $(#[doc = $sub_doc])+ $sub_name, $sub_default, $sub_parse);)+

        /// Every setting, in the order `settings` and docs/configuration.md show them.
        pub const SETTINGS: &[Setting] = &[$($name,)+ $gate, $($sub_name),+];

        $(#[$meta])*
        pub struct $config {
            $($(#[doc = $doc])+
            #[doc = concat!("\n\n([`", stringify!($name), "`])")]
            pub $field: $ty,)+
            #[doc = concat!("Read when [`", stringify!($gate), "`] is set.")]
            pub $sub_field: Option<$sub>,
        }

        impl $config {
            /// Parses settings from a map of environment variables (tests never touch the
            /// process's).
            ///
            /// Errors: [`Error::Config`] naming the first variable missing or malformed.
            pub fn from_map(env: &HashMap<String, String>) -> Result<$config> {
                Ok($config {
                    $($field: {
                        let read = FromSetting::from_setting(&$name, env)?;
                        $(let read = ($conv)(read);)?
                        read
                    },)+
                    $sub_field: $sub::from_map(env)?,
                })
            }
        }

        $(#[$sub_meta])*
        pub struct $sub {
            $(#[doc = $gate_doc])+
            #[doc = concat!("\n\n([`", stringify!($gate), "`])")]
            pub $gate_field: String,
            $($(#[doc = $sub_doc])+
            #[doc = concat!("\n\n([`", stringify!($sub_name), "`])")]
            pub $sub_row: $sub_ty,)+
        }

        impl $sub {
            fn from_map(env: &Env) -> Result<Option<$sub>> {
                let Some($gate_field) = FromSetting::from_setting(&$gate, env)? else {
                    return Ok(None);
                };
                Ok(Some($sub {
                    $gate_field,
                    $($sub_row: FromSetting::from_setting(&$sub_name, env)?,)+
                }))
            }
        }
    };
    (@const $(#[doc = $doc:literal])+ $name:ident, $default:expr, $parse:expr) => {
        $(#[doc = $doc])+
        pub const $name: Setting = {
            #[allow(unused_imports)]
            use {DefaultIs::*, Parse::*};
            Setting {
                name: stringify!($name),
                default: $default,
                parse: $parse,
                doc: concat!($($doc),+).trim_ascii(),
            }
        };
    };
}

settings! {
    /// All settings of a run.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Config {
        /// bucket holding `flights/`, `index/` and `_compaction_state/`
        S3_BUCKET: Required, Plain => bucket: String;
        /// cutoff = UTC date of the invocation time minus this many days
        LAG_DAYS: Number(2), Whole { min: 0, max: 3650, what: "a whole number of days" }
            => lag_days: u32;
        /// `YYYY-MM-DD`: the walk and the sweep never touch an earlier date (only `--date` or
        /// `--from`/`--to` do). Unset, a fresh deployment starts at the earliest `index/` or
        /// `flights/` partition; set it to the first indexed date when `flights/` goes back further
        START_DATE: Unset, Date => start_date: Option<NaiveDate>;
        /// `off`, `error`, `warn`, `info`, `debug`, `trace`, or `target=level` pairs
        /// (`info,archive_compaction::commands::run=debug,archive_compaction::protocol::commit=debug`
        /// adds each part's phase times); anything else is refused. The AWS SDK's own region and
        /// credential lookups log at `debug` only
        LOG_LEVEL: Text("info"), LogLevel => log_level: String;
        /// `true` for S3-compatible servers that need path-style URLs
        S3_FORCE_PATH_STYLE: Bool(false), Flag => force_path_style: bool;
        /// lease length, s; keep it above the Lambda timeout (900 s), the same for CLI and Lambda
        LEASE_SECONDS: Number(960), at_least(1, "a whole number of seconds") => lease: Duration;
        /// GETs in flight; 128 pays from 1,769 MB
        /// ([Performance](performance.md#read_concurrency-the-sweep))
        READ_CONCURRENCY: Number(64),
            Whole { min: 1, max: 1024, what: "a whole number of requests" }
            => read_concurrency: usize;
        /// MiB one index input may take decoded (1 to 1048576); the [input limits](#input-limits)
        /// derive from it: an input over one is left in place unread and named in `skipped_files`.
        /// Raise it with the memory for a file skipped for a limit
        INPUT_BUDGET_MB: Derived {
            shown: "a quarter of AWS_LAMBDA_FUNCTION_MEMORY_SIZE; {} without it",
            figure: crate::data::input::BUDGET_MB_DEFAULT,
            from: |env| function_mb(env).map(|mb| (mb / 4).max(1)),
        }, Whole { min: 1, max: 1024 * 1024, what: "a whole number of MiB" }
            => input_budget: Budget = Budget::from_mb;
        /// MB the run may use (`0`: no limit). Each run sizes a date's parts and uuid sets to keep
        /// its estimated peak within 90% of it; a date is refused (`DayTooBig`, before it is read)
        /// only when the smallest useful part cannot fit. Set it on a CLI run where the machine's
        /// memory is shared, or below `MemorySize` when something else in the function takes memory
        MEMORY_LIMIT_MB: Derived {
            shown: "AWS_LAMBDA_FUNCTION_MEMORY_SIZE; none without it",
            figure: 0,
            from: function_mb,
        }, at_least(0, "a whole number of MB")
            => memory_limit_mb: Option<u64> = |mb: u64| (mb > 0).then_some(mb);
        /// ceiling on the uuids each of a date's sets holds in memory (16 B each); past it they go
        /// to `TMPDIR` (Lambda's ephemeral storage), up to ~52 B a flight. The run lowers it when
        /// memory is tight. Lower it to save memory; at least 1
        FLIGHTS_IN_MEMORY: Number(crate::data::spill::DEFAULT_IN_MEMORY as u64),
            at_least(1, "a whole number of uuids")
            => spill: SpillSettings = |limit: usize| SpillSettings { limit };
        /// ceiling on the index files one commit of a date takes (a multi-row input counts 1 + 1
        /// for every 100 bytes). Each run sizes its parts below it from its memory and time left;
        /// lower it only to cap every commit. At least 1
        PART_FILES: Number(50_000), at_least(1, "a whole number of index files") => part_files: u64;
        /// rows per Parquet row group in compacted files
        ROW_GROUP_ROWS: Number(131_072), at_least(1, "a whole number of rows")
            => row_group_rows: usize;
        /// compacted files of at least this many bytes go up as multipart uploads (0: always)
        MULTIPART_THRESHOLD_BYTES: Number(storage::MULTIPART_THRESHOLD_DEFAULT as u64),
            at_least(0, "a whole number of bytes") => multipart_threshold: usize;
        /// multipart part size, 5 MiB (5242880) to 5 GiB
        MULTIPART_PART_BYTES: Number(storage::MULTIPART_PART_DEFAULT as u64), Whole {
            min: storage::MULTIPART_PART_MIN as u64,
            max: storage::MULTIPART_PART_MAX as u64,
            what: "a whole number of bytes",
        } => multipart_part_size: usize;
        /// no new date with less than this (or twice the slowest date) left, s; more than 8 (the S3
        /// cut-off before the deadline), and less than a `--max-duration` ([Deadline](#deadline))
        DEADLINE_MARGIN_SECONDS: Number(60),
            at_least(storage::S3_DEADLINE_MARGIN.as_secs() + 1, "a whole number of seconds")
            => deadline_margin: Duration;
        /// straggler sweep: the last this many dates up to the watermark are re-listed and late or
        /// extra files folded in; `0` turns it off
        SWEEP_DAYS: Number(14), Whole { min: 0, max: 366, what: "a whole number of days" }
            => sweep_days: u32;
        /// publish CloudWatch metrics
        METRICS_ENABLED: Bool(true), Flag => metrics_enabled: bool;
        /// CloudWatch namespace
        METRICS_NAMESPACE: Text("SkyFollower/ArchiveCompaction"), Plain
            => metrics_namespace: String;
    }

    /// MQTT reporting settings.
    #[derive(Debug, Clone, PartialEq)]
    pub struct MqttConfig in mqtt {
        /// MQTT broker; MQTT reporting is off when unset (the other `MQTT_*` are then not read)
        MQTT_HOST: Unset, Plain => host: String;
        /// broker port (8883 turns TLS on)
        MQTT_PORT: Number(1883), Whole { min: 0, max: 65535, what: "a TCP port" } => port: u16;
        /// broker user name
        MQTT_USERNAME: Unset, Plain => username: Option<String>;
        /// broker password; prefer `MQTT_PASSWORD_SECRET_ARN` (an environment variable is readable
        /// in the function's configuration)
        MQTT_PASSWORD: Unset, Verbatim => password: Option<String>;
        /// Secrets Manager secret whose `SecretString` is the password, read once per process; wins
        /// over `MQTT_PASSWORD`. Unreadable: a `report_errors` entry, no MQTT, the status unchanged
        MQTT_PASSWORD_SECRET_ARN: Unset, Plain => password_secret_arn: Option<String>;
        /// TLS (rustls)
        MQTT_TLS: Derived {
            shown: "true on port {}",
            figure: 8883,
            from: |env| MQTT_PORT.whole::<u64>(env).ok().map(|port| u64::from(port == 8883)),
        }, Flag => tls: bool;
        /// PEM CA bundle for TLS
        MQTT_CA_FILE: Described("(system roots)"), Plain => ca_file: Option<String>;
        /// topics are `{root}/statistic/{name}`; `#`, `+` or NUL refused
        MQTT_TOPIC_ROOT: Text("SkyFollower/archive-compaction"), TopicRoot => topic_root: String;
        /// bound on connect + publish + disconnect, s
        MQTT_TIMEOUT_SECONDS: Number(5), Seconds { max: 300 } => timeout: Duration;
    }
}

/// A [`Parse::Whole`] of no upper bound.
const fn at_least(min: u64, what: &'static str) -> Parse {
    Parse::Whole { min, max: u64::MAX, what }
}

/// `AWS_LAMBDA_FUNCTION_MEMORY_SIZE` in MB (Lambda sets it), from which the memory settings default.
fn function_mb(env: &Env) -> Option<u64> {
    env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE").and_then(|v| v.trim().parse().ok())
}

/// What a setting is when unset or empty, as `settings` and docs/configuration.md show it.
#[derive(Debug, Clone, Copy)]
pub enum DefaultIs {
    /// No default: the run refuses to start without it.
    Required,
    /// Nothing (the meaning says what that does).
    Unset,
    /// This number.
    Number(u64),
    /// This truth value.
    Bool(bool),
    /// This text.
    Text(&'static str),
    /// Decided elsewhere as described (a text setting's).
    Described(&'static str),
    /// Decided from other variables.
    Derived {
        /// What `archive-compaction settings` shows, with `figure` at `{}`.
        shown: &'static str,
        /// The number when `from` decides nothing.
        figure: u64,
        /// The number (a flag's 0 or 1) the other variables make.
        from: fn(&Env) -> Option<u64>,
    },
}

impl DefaultIs {
    /// The number of a [`DefaultIs::Number`] or [`DefaultIs::Derived`] when nothing decides it;
    /// panics on any other.
    pub const fn figure(self) -> u64 {
        match self {
            DefaultIs::Number(n) | DefaultIs::Derived { figure: n, .. } => n,
            _ => panic!("a setting whose default is not a number, read as one"),
        }
    }

    /// The number it is with `env`'s other variables.
    fn figure_in(self, env: &Env) -> u64 {
        match self {
            DefaultIs::Derived { figure, from, .. } => from(env).unwrap_or(figure),
            _ => self.figure(),
        }
    }
}

impl std::fmt::Display for DefaultIs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DefaultIs::Required => f.write_str("(required)"),
            DefaultIs::Unset => f.write_str("(unset)"),
            DefaultIs::Number(n) => write!(f, "{n}"),
            DefaultIs::Bool(b) => write!(f, "{b}"),
            DefaultIs::Text(t) | DefaultIs::Described(t) => f.write_str(t),
            DefaultIs::Derived { shown, figure, .. } => {
                f.write_str(&shown.replace("{}", &figure.to_string()))
            }
        }
    }
}

/// How a setting's text is read; what the parser does not take is an [`Error::Config`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Parse {
    /// Any text.
    Plain,
    /// Any text, kept as given (a password may begin or end with a space).
    Verbatim,
    /// A whole number from `min` to `max`; `what` it is, for the error: "a whole number of days".
    Whole { min: u64, max: u64, what: &'static str },
    /// `true` or `false` (also `1`/`0`, `yes`/`no`, `on`/`off`), any case.
    Flag,
    /// A number of seconds, fractions allowed, above 0 and at most `max`.
    Seconds { max: u64 },
    /// A date `YYYY-MM-DD` ([`parse_date`]).
    Date,
    /// A tracing filter ([`parse_log_level`]).
    LogLevel,
    /// An MQTT topic root ([`parse_topic_root`]).
    TopicRoot,
}

/// One setting: its environment variable, default, parser and meaning.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The environment variable, e.g. `LAG_DAYS`.
    pub name: &'static str,
    /// What it is when unset.
    pub default: DefaultIs,
    /// How its text is read.
    pub(crate) parse: Parse,
    /// What it means, in Markdown (docs/configuration.md; [`Setting::meaning`] for a terminal).
    pub doc: &'static str,
}

impl Setting {
    /// The meaning for a terminal: [`Setting::doc`] without its `code` marks and link targets.
    pub fn meaning(&self) -> String {
        let mut out = String::with_capacity(self.doc.len());
        let mut rest = self.doc;
        // `[text](target)` keeps its text.
        while let Some(open) = rest.find('[') {
            let Some((text, after)) = rest[open + 1..].split_once("](") else { break };
            let Some((_, tail)) = after.split_once(')') else { break };
            out.push_str(&rest[..open]);
            out.push_str(text);
            rest = tail;
        }
        out.push_str(rest);
        out.replace('`', "")
    }

    /// The meaning's first sentence, for an error.
    fn summary(&self) -> String {
        let meaning = self.meaning();
        meaning.split_once(". ").map_or(meaning.clone(), |(first, _)| first.to_string())
    }

    /// Trimmed (but [`Parse::Verbatim`]); `None` when unset or empty.
    fn given<'a>(&self, env: &'a Env) -> Option<&'a str> {
        let v = env.get(self.name)?;
        let v = match self.parse {
            Parse::Verbatim => v.as_str(),
            _ => v.trim(),
        };
        (!v.is_empty()).then_some(v)
    }

    /// A programming error: a row read as what its parser is not.
    fn misread(&self, as_what: &str) -> ! {
        panic!("setting {} ({:?}) read as {as_what}", self.name, self.parse)
    }

    fn parse_text(&self, v: &str) -> Result<String> {
        match self.parse {
            Parse::Plain | Parse::Verbatim => Ok(v.to_string()),
            Parse::LogLevel => parse_log_level(v),
            Parse::TopicRoot => parse_topic_root(v),
            _ => self.misread("text"),
        }
    }

    /// The number given, else its default (derived from `env` when [`DefaultIs::Derived`]).
    fn whole<T: TryFrom<u64>>(&self, env: &Env) -> Result<T> {
        let Parse::Whole { min, max, what } = self.parse else { self.misread("a whole number") };
        let fit = |n: u64| T::try_from(n).map_err(|_| bad(self.name, format!("{n} is too large")));
        let Some(v) = self.given(env) else {
            return fit(self.default.figure_in(env));
        };
        let n: u64 =
            v.parse().map_err(|_| bad(self.name, format!("expected {what}, got {}", quote(v))))?;
        if !(min..=max).contains(&n) {
            let range = match (min, max) {
                (_, u64::MAX) => format!("at least {min}"),
                (0, _) => format!("at most {max}"),
                _ => format!("from {min} to {max}"),
            };
            return Err(bad(self.name, format!("must be {range}, got {n} ({})", self.summary())));
        }
        fit(n)
    }
}

/// A field type a setting is read into by its [`Parse`]: the value given, else the default. A
/// parser the type cannot take is a programming error, a panic any read of the row meets.
trait FromSetting: Sized {
    fn from_setting(s: &Setting, env: &Env) -> Result<Self>;
}

impl FromSetting for String {
    fn from_setting(s: &Setting, env: &Env) -> Result<String> {
        match (s.given(env), s.default) {
            (Some(v), _) => s.parse_text(v),
            (None, DefaultIs::Text(t)) => Ok(t.to_string()),
            (None, DefaultIs::Required) => Err(bad(s.name, format!("required: {}", s.summary()))),
            (None, _) => s.misread("text with a default"),
        }
    }
}

impl FromSetting for Option<String> {
    fn from_setting(s: &Setting, env: &Env) -> Result<Option<String>> {
        s.given(env).map(|v| s.parse_text(v)).transpose()
    }
}

macro_rules! whole_numbers {
    ($($t:ty),+) => {$(
        impl FromSetting for $t {
            fn from_setting(s: &Setting, env: &Env) -> Result<$t> {
                s.whole(env)
            }
        }
    )+};
}
whole_numbers!(u16, u32, u64, usize);

impl FromSetting for bool {
    fn from_setting(s: &Setting, env: &Env) -> Result<bool> {
        if s.parse != Parse::Flag {
            s.misread("a flag")
        }
        let Some(v) = s.given(env) else {
            return Ok(match s.default {
                DefaultIs::Bool(b) => b,
                DefaultIs::Derived { .. } => s.default.figure_in(env) == 1,
                _ => s.misread("a flag with a default"),
            });
        };
        match v.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(bad(s.name, format!("expected true or false, got {}", quote(v)))),
        }
    }
}

/// Whole seconds ([`Parse::Whole`]) or [`Parse::Seconds`].
impl FromSetting for Duration {
    fn from_setting(s: &Setting, env: &Env) -> Result<Duration> {
        let Parse::Seconds { max } = s.parse else {
            return s.whole(env).map(Duration::from_secs);
        };
        let secs: f64 = match s.given(env) {
            None => s.default.figure() as f64,
            Some(v) => v.parse().map_err(|_| {
                bad(s.name, format!("expected a number of seconds, got {}", quote(v)))
            })?,
        };
        // Written so that NaN fails too.
        if !(secs > 0.0 && secs <= max as f64) {
            return Err(bad(s.name, format!("must be above 0 and at most {max}, got {secs}")));
        }
        Ok(Duration::from_secs_f64(secs))
    }
}

impl FromSetting for Option<NaiveDate> {
    fn from_setting(s: &Setting, env: &Env) -> Result<Option<NaiveDate>> {
        if s.parse != Parse::Date {
            s.misread("a date")
        }
        s.given(env).map(|v| parse_date(s.name, v)).transpose()
    }
}

/// docs/configuration.md's table of [`SETTINGS`] (`archive-compaction settings --markdown`).
pub fn settings_markdown() -> String {
    use DefaultIs::{Bool, Number, Text};
    let rows: String = (SETTINGS.iter())
        .map(|s| {
            // A value in `code` marks, a description as it is.
            let value = matches!(s.default, Number(_) | Bool(_) | Text(_));
            let default = if value { format!("`{}`", s.default) } else { s.default.to_string() };
            format!("| `{}` | {default} | {} |\n", s.name, s.doc)
        })
        .collect();
    format!("| variable | default | meaning |\n|---|---|---|\n{rows}")
}

/// [`SETTINGS`] for a terminal `width` columns wide: each name and default, its meaning wrapped
/// and indented under it (`archive-compaction settings`).
pub fn settings_text(width: usize) -> String {
    SETTINGS
        .iter()
        .map(|s| {
            let default = match s.default {
                DefaultIs::Required | DefaultIs::Unset => s.default.to_string(),
                d => format!("[default: {d}]"),
            };
            // A default too long for the name's line goes under it, as the meaning.
            let head = format!("{} {default}", s.name);
            let head = match head.chars().count() > width {
                true => format!("{}\n{}", s.name, wrap(&default, width, "    ")),
                false => head + "\n",
            };
            format!("{head}{}", wrap(&s.meaning(), width, "    "))
        })
        .collect()
}

/// `text`'s words in lines of at most `width` characters (a longer word alone), each after `indent`.
pub fn wrap(text: &str, width: usize, indent: &str) -> String {
    let room = width.saturating_sub(indent.len()).max(20);
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= room => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines.iter().map(|l| format!("{indent}{l}\n")).collect()
}

impl Config {
    /// Parses settings from the process environment (see [`Config::from_map`]).
    pub fn from_env() -> Result<Config> {
        Config::from_map(&std::env::vars().collect())
    }

    /// Refuses a `--max-duration` not above `DEADLINE_MARGIN_SECONDS` (no date would start) with an
    /// [`Error::Config`].
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
                storage::S3_DEADLINE_MARGIN.as_secs()
            ),
        ))
    }
}

fn bad(name: &str, reason: impl Into<String>) -> Error {
    Error::Config { name: name.to_string(), reason: reason.into() }
}

/// Checks an `MQTT_TOPIC_ROOT` and drops its trailing `/`s.
///
/// Errors: [`Error::Config`] naming the character when it holds `#`, `+` or NUL,
/// which a published topic may not (MQTT 3.1.1, 4.7.1 and 1.5.3).
pub(crate) fn parse_topic_root(v: &str) -> Result<String> {
    let named = |c: char| match c {
        '#' => "the multi-level wildcard '#'",
        '+' => "the single-level wildcard '+'",
        _ => "the character NUL (U+0000)",
    };
    if let Some(c) = v.chars().find(|c| matches!(c, '#' | '+' | '\0')) {
        return Err(bad(
            MQTT_TOPIC_ROOT.name,
            format!(
                "{} holds {}, which no topic a client publishes to may hold (MQTT 3.1.1, 4.7.1 and 1.5.3): the broker would refuse every statistic; use a root of plain levels such as SkyFollower/archive-compaction",
                quote(v),
                named(c)
            ),
        ));
    }
    let root = v.trim_end_matches('/');
    if root.is_empty() {
        return Err(bad(
            MQTT_TOPIC_ROOT.name,
            "is only '/': give a root such as SkyFollower/archive-compaction",
        ));
    }
    Ok(root.to_string())
}

/// Parses a `YYYY-MM-DD` date for the setting `name`; [`Error::Config`] otherwise.
pub fn parse_date(name: &str, v: &str) -> Result<NaiveDate> {
    let t = v.trim();
    // Exactly YYYY-MM-DD: chrono's %Y alone would take `26-7-12` as the year 26.
    let shaped = t.len() == 10
        && t.bytes()
            .enumerate()
            .all(|(i, c)| if i == 4 || i == 7 { c == b'-' } else { c.is_ascii_digit() });
    let date = NaiveDate::parse_from_str(t, "%Y-%m-%d").ok().filter(|_| shaped);
    date.ok_or_else(|| bad(name, format!("expected a date YYYY-MM-DD, got {}", quote(v))))
}

/// The levels `LOG_LEVEL` takes, alone or after `target=`.
pub(crate) const LOG_LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// Checks a `LOG_LEVEL`: comma-separated directives, each a level of
/// [`LOG_LEVELS`] or `target=level`; levels returned in lower case.
///
/// Errors: [`Error::Config`] naming the directive that is neither: `tracing`'s
/// own filter would take such a word as a target and turn every log line off.
pub(crate) fn parse_log_level(v: &str) -> Result<String> {
    let level = |l: &str| {
        let l = l.trim().to_ascii_lowercase();
        LOG_LEVELS.contains(&l.as_str()).then_some(l)
    };
    let target_ok = |t: &str| {
        !t.is_empty()
            && t.split("::").all(|part| {
                let mut c = part.chars();
                c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
                    && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
    };
    let directives = v.split(',').map(|d| {
        let d = d.trim();
        let parsed = match d.split_once('=') {
            None => level(d),
            Some((t, l)) if target_ok(t.trim()) => level(l).map(|l| format!("{}={l}", t.trim())),
            Some(_) => None,
        };
        parsed.ok_or_else(|| {
            bad(
                LOG_LEVEL.name,
                format!(
                    "{} in {} is neither a level ({}) nor target=level (e.g. info,aws_smithy_runtime=debug)",
                    quote(d),
                    quote(v),
                    LOG_LEVELS.join(", ")
                ),
            )
        })
    });
    Ok(directives.collect::<Result<Vec<_>>>()?.join(","))
}

/// Variables of `env` within two edits of a setting's name (without case, at
/// least 6 characters), each with the setting, sorted: `main` warns of them.
///
/// ```
/// use std::collections::HashMap;
/// use archive_compaction::data::config::mistyped_settings;
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
        .filter(|k| k.len() >= 6 && !SETTINGS.iter().any(|s| s.name == k.as_str()))
        .filter_map(|k| {
            let upper = k.to_ascii_uppercase();
            SETTINGS
                .iter()
                .map(|s| (strsim::osa_distance(&upper, s.name), s.name))
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

    /// Each default a row shows is the value the code takes without it:
    /// setting the variable to its shown default changes nothing. A derived
    /// default shows the figure the code falls back to.
    #[test]
    fn the_settings_table_shows_the_defaults_the_code_takes() {
        let base = env(&[("S3_BUCKET", "b"), ("MQTT_HOST", "h")]);
        let unset = Config::from_map(&base).unwrap();
        let mut shown_as_values = 0;
        for row in SETTINGS {
            let shown = row.default.to_string();
            if let DefaultIs::Number(_) | DefaultIs::Bool(_) | DefaultIs::Text(_) = row.default {
                let mut with = base.clone();
                with.insert(row.name.to_string(), shown.clone());
                assert_eq!(Config::from_map(&with).unwrap(), unset, "{}={shown}", row.name);
                shown_as_values += 1;
            }
        }
        assert_eq!(shown_as_values, 17);
        let budget = crate::data::input::BUDGET_MB_DEFAULT;
        assert_eq!(
            INPUT_BUDGET_MB.default.to_string(),
            format!("a quarter of AWS_LAMBDA_FUNCTION_MEMORY_SIZE; {budget} without it")
        );
        assert_eq!(unset.input_budget, crate::data::input::Budget::default());
        assert_eq!(unset.memory_limit_mb, None);
        assert_eq!(MQTT_TLS.default.to_string(), "true on port 8883");
        assert!(!unset.mqtt.unwrap().tls);
        assert_eq!(PART_FILES.default.figure(), 50_000);
        assert_eq!(unset.spill.limit, crate::data::spill::DEFAULT_IN_MEMORY);
        assert_eq!(
            (unset.multipart_threshold, unset.multipart_part_size),
            (
                crate::infra::storage::MULTIPART_THRESHOLD_DEFAULT,
                crate::infra::storage::MULTIPART_PART_DEFAULT
            )
        );
        let lambda = Config::from_map(&env(&[
            ("S3_BUCKET", "b"),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024"),
        ]))
        .unwrap();
        assert_eq!(lambda.input_budget, crate::data::input::Budget::from_mb(256));
        assert_eq!(lambda.memory_limit_mb, Some(1024));
    }

    #[test]
    fn the_settings_listing_wraps_each_meaning_under_its_setting() {
        let text = settings_text(60);
        assert!(text.starts_with("S3_BUCKET (required)\n    bucket holding flights/, index/"));
        assert!(text.contains("\nLAG_DAYS [default: 2]\n    cutoff = UTC date of"), "{text}");
        // Link targets and code marks are for the Markdown table only.
        assert!(text.contains("128 pays from 1,769 MB (Performance)"), "{text}");
        assert!(!text.contains('`') && !text.contains("](") && !text.contains(".md"), "{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 60 || !line.trim().contains(' '), "{line:?}");
            let setting = SETTINGS.iter().any(|s| line.split(' ').next() == Some(s.name));
            assert!(setting || line.starts_with("    "), "not under its setting: {line:?}");
        }
        assert_eq!(text.lines().filter(|l| !l.starts_with(' ')).count(), SETTINGS.len());
        assert!(text.contains("\nINPUT_BUDGET_MB\n    [default: a quarter of"), "{text}");
        let table = settings_markdown();
        assert_eq!(table.lines().count(), SETTINGS.len() + 2);
        assert!(table.contains("\n| `LAG_DAYS` | `2` | cutoff = UTC date of the invocation time"));
        assert!(table.contains("([Deadline](#deadline)) |\n"), "{table}");
        assert_eq!(
            LAG_DAYS.summary(),
            "cutoff = UTC date of the invocation time minus this many days"
        );
        assert_eq!(MEMORY_LIMIT_MB.summary(), "MB the run may use (0: no limit)");
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
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
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
        assert_eq!(c.spill.limit, crate::data::spill::DEFAULT_IN_MEMORY);
    }

    #[test]
    fn dates_are_exactly_yyyy_mm_dd() {
        assert!(parse_date("--date", "2026-07-20").is_ok());
        assert!(parse_date("--date", " 2026-07-20 ").is_ok());
        for bad in ["26-7-12", "2026-7-20", "20260720", "2026-13-01", "2026-02-30", "+2026-07-2"] {
            let e = parse_date("--date", bad).unwrap_err().to_string();
            assert!(e.contains("--date") && e.contains("YYYY-MM-DD"), "{bad}: {e}");
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
            let e =
                Config::from_map(&env(&[("S3_BUCKET", "b"), ("DEADLINE_MARGIN_SECONDS", margin)]))
                    .unwrap_err()
                    .to_string();
            assert!(
                e.starts_with("setting DEADLINE_MARGIN_SECONDS: ")
                    && e.contains("must be at least 9"),
                "{margin}: {e}"
            );
        }
        let c = Config::from_map(&env(&[("S3_BUCKET", "b"), ("DEADLINE_MARGIN_SECONDS", "9")]))
            .unwrap();
        // ... and a run's own limit must outlast the margin.
        assert!(c.check_max_duration(Duration::from_millis(9_001)).is_ok());
        for within in [0, 8_000, 9_000] {
            let e = c.check_max_duration(Duration::from_millis(within)).unwrap_err().to_string();
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
            (vec![("S3_BUCKET", "b"), ("START_DATE", "2026-13-01")], "START_DATE"),
            (vec![("S3_BUCKET", "b"), ("S3_FORCE_PATH_STYLE", "maybe")], "S3_FORCE_PATH_STYLE"),
            (vec![("S3_BUCKET", "b"), ("MQTT_HOST", "h"), ("MQTT_PORT", "x")], "MQTT_PORT"),
            (vec![("S3_BUCKET", "b"), ("READ_CONCURRENCY", "0")], "READ_CONCURRENCY"),
            (vec![("S3_BUCKET", "b"), ("MULTIPART_PART_BYTES", "1048576")], "MULTIPART_PART_BYTES"),
            (
                vec![("S3_BUCKET", "b"), ("MULTIPART_THRESHOLD_BYTES", "16MB")],
                "MULTIPART_THRESHOLD_BYTES",
            ),
            (vec![("S3_BUCKET", "b"), ("LAG_DAYS", "3651")], "LAG_DAYS"),
            (vec![("S3_BUCKET", "b"), ("SWEEP_DAYS", "367")], "SWEEP_DAYS"),
            (vec![("S3_BUCKET", "b"), ("LEASE_SECONDS", "0")], "LEASE_SECONDS"),
            (vec![("S3_BUCKET", "b"), ("INPUT_BUDGET_MB", "0")], "INPUT_BUDGET_MB"),
            (vec![("S3_BUCKET", "b"), ("METRICS_ENABLED", "2")], "METRICS_ENABLED"),
            (vec![("S3_BUCKET", "b"), ("MQTT_HOST", "h"), ("MQTT_TLS", "tls")], "MQTT_TLS"),
            (
                vec![("S3_BUCKET", "b"), ("MQTT_HOST", "h"), ("MQTT_TIMEOUT_SECONDS", "NaN")],
                "MQTT_TIMEOUT_SECONDS",
            ),
        ] {
            let e = Config::from_map(&env(&pairs)).unwrap_err();
            assert!(matches!(&e, Error::Config { name: n, .. } if n == name), "{e}");
            assert!(e.to_string().contains(name));
        }
    }

    #[test]
    fn log_level_takes_levels_and_target_level_pairs_only() {
        let ok = |v: &str| parse_log_level(v).unwrap();
        assert_eq!(ok("info"), "info");
        assert_eq!(ok("WARN"), "warn");
        assert_eq!(ok("info, aws_smithy_runtime=debug"), "info,aws_smithy_runtime=debug");
        assert_eq!(
            ok("archive_compaction::commands::run=trace"),
            "archive_compaction::commands::run=trace"
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
            assert!(e.contains("LOG_LEVEL") && e.contains("target=level"), "{bad}: {e}");
            let e = Config::from_map(&env(&[("S3_BUCKET", "b"), ("LOG_LEVEL", bad)]));
            assert!(e.is_err(), "{bad} accepted");
        }
        // Every accepted value is a filter tracing takes as meant.
        for v in [
            "info",
            "off",
            "info,aws_smithy_runtime=debug",
            "error,archive_compaction::commands::run=debug",
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
            assert!(e.contains("MQTT_TOPIC_ROOT") && e.contains(named), "{root:?}: {e}");
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
        // A password is taken as given, spaces and all.
        let c = Config::from_map(&env(&[
            ("S3_BUCKET", "b"),
            ("MQTT_HOST", "h"),
            ("MQTT_PASSWORD", " pass word "),
        ]))
        .unwrap();
        assert_eq!(c.mqtt.unwrap().password.as_deref(), Some(" pass word "));
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
