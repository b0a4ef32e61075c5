//! `archive-compaction`: a Lambda function when `AWS_LAMBDA_RUNTIME_API` is set, a command-line
//! tool otherwise; both thin shells over [`archive_compaction::app::invoke`].

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use archive_compaction::app::aws::{check_endpoints, region};
use archive_compaction::app::{Deps, dispatch};
use archive_compaction::commands::audit;
use archive_compaction::commands::progress::{self, BarWriter};
use archive_compaction::commands::prune::{self, PruneOptions};
use archive_compaction::commands::run::RunOptions;
use archive_compaction::commands::status::{self, StatusOptions};
use archive_compaction::data::config::{
    Config, MqttConfig, mistyped_settings, parse_date, settings_markdown, settings_text, wrap,
};
use archive_compaction::data::report::{RunReport, Status, StopReason};
use archive_compaction::infra::stop::exit_code;
use archive_compaction::protocol::day::{DateRange, RangeOf};
use chrono::{DateTime, Utc};
use clap::{CommandFactory, Parser, Subcommand};
use indicatif::ProgressBar;
use lambda_runtime::{LambdaEvent, service_fn};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Where each subcommand's help sends a reader for the settings.
const SETTINGS_POINTER: &str =
    "Settings (environment variables: S3_BUCKET, ...): see `archive-compaction settings`.";

/// How `run` answers SIGTERM and SIGINT (`archive_compaction::infra::stop`).
const RUN_AFTER: &str = "Exit codes: 0 Success, 2 Mismatch (a day failed parity), 1 Failure.\n\
    SIGTERM or Ctrl-C stops a run cleanly (no new date or destructive step, lease released, report \
    with stop_reason interrupted, exit 1); a second signal exits at once (130 or 143).";

#[derive(Debug, Parser)]
#[command(name = "archive-compaction", version, about, after_help = SETTINGS_POINTER)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one invocation: compact the dates from the watermark to the cutoff; the report as JSON
    /// on stdout.
    #[command(after_help = RUN_AFTER, after_long_help = format!("{RUN_AFTER}\n{SETTINGS_POINTER}"))]
    Run {
        /// Invocation time (RFC 3339, e.g. 2026-07-22T04:50:00Z); fixes the cutoff. Default: the
        /// current time.
        #[arg(long, value_parser = parse_now)]
        now: Option<DateTime<Utc>>,
        /// Stop starting new dates after this long (e.g. 600s, 14m; a bare number is seconds);
        /// more than DEADLINE_MARGIN_SECONDS, else refused.
        #[arg(long, value_parser = parse_duration)]
        max_duration: Option<Duration>,
        /// List, plan (reading every input) and check parity as a run would, and say what
        /// recovery would do with the manifests found; write, delete and report nothing (no lease).
        #[arg(long)]
        dry_run: bool,
        /// Compact only this date (YYYY-MM-DD) now, before or after the watermark (stragglers),
        /// through the same lease, recovery, parity gate and manifests; the watermark never moves.
        #[arg(long, conflicts_with_all = ["from", "to"], value_parser = |s: &str| parse_date("--date", s))]
        date: Option<chrono::NaiveDate>,
        /// Repair the dates from this one (YYYY-MM-DD) to --to, both included: each holding more
        /// than one compacted file, or any other index file, is folded as by --date (one compacted
        /// file, or one a part). A mismatch is reported and the range goes on (exit 2); near the
        /// deadline it stops at `resume_date`, where the same command continues. The watermark
        /// never moves.
        #[arg(long, requires = "to", value_parser = |s: &str| parse_date("--from", s))]
        from: Option<chrono::NaiveDate>,
        /// Last date of a repair range (YYYY-MM-DD, with --from), included.
        #[arg(long, requires = "from", value_parser = |s: &str| parse_date("--to", s))]
        to: Option<chrono::NaiveDate>,
        /// An id equal across retries of the same scheduled run (counts a mismatch once).
        #[arg(long)]
        event_id: Option<String>,
    },
    /// Show the state, read-only: watermark, lag, lease, manifests, mismatch, next dates.
    ///
    /// The watermark, cutoff and lag, the lease, live and quarantined manifests, the mismatch and
    /// its missing flights, and the file counts of the next dates to compact.
    #[command(after_long_help = format!(
        "Exit codes: 0, or 1 when something could not be read (listed under errors).\n{SETTINGS_POINTER}"
    ))]
    Status {
        /// Invocation time the cutoff is computed for (RFC 3339). Default: the current time.
        #[arg(long, value_parser = parse_now)]
        now: Option<DateTime<Utc>>,
        /// How many upcoming dates (up to the cutoff) to count files for.
        #[arg(long, default_value_t = status::DEFAULT_DAYS)]
        days: usize,
        /// Print JSON (specs/status.schema.json) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Prove, read-only, that every date of a range holds every flight exactly once.
    ///
    /// No lease, write or delete. Counts flights, index rows, missing, duplicated, orphans,
    /// other-day rows and unreadable files per date, with examples and what fixes each. JSON on
    /// stdout (a summary on stderr on a terminal). Exit codes: 0 clean, 2 something found, 1 a
    /// date could not be audited.
    #[command(after_long_help = SETTINGS_POINTER)]
    Audit {
        /// First date (YYYY-MM-DD), included.
        #[arg(long, value_parser = |s: &str| parse_date("--from", s))]
        from: chrono::NaiveDate,
        /// Last date (YYYY-MM-DD), included.
        #[arg(long, value_parser = |s: &str| parse_date("--to", s))]
        to: chrono::NaiveDate,
        /// Stop starting new dates after this long, as `run --max-duration` (more than
        /// DEADLINE_MARGIN_SECONDS, else refused); the report's resume_date is the first date not
        /// audited.
        #[arg(long, value_parser = parse_duration)]
        max_duration: Option<Duration>,
    },
    /// Prune the archive host's local index cache of what S3 holds compacted.
    ///
    /// The cache is the folder archive-processor writes a copy of every per-flight index file to,
    /// mounted at /app/index-cache. Deletes a copy only when its
    /// date is at or before the watermark, not blocked, its S3 object is gone and its flight is
    /// listed; keeps everything else. Prints a JSON summary on stdout (a line on a terminal, on
    /// stderr). Needs s3:ListBucket and s3:GetObject on the watermark only; writes nothing to S3.
    #[command(after_long_help = PRUNE_AFTER)]
    PruneCache {
        /// The cache directory (the host path mounted at /app/index-cache).
        #[arg(long)]
        dir: std::path::PathBuf,
        /// Plan only: delete nothing, report what would be deleted.
        #[arg(long)]
        dry_run: bool,
    },
    /// List the settings (environment variables), each with its default and meaning.
    ///
    /// Every command and the Lambda function read them; docs/configuration.md has the same table.
    Settings {
        /// docs/configuration.md's Markdown table instead (`make docs-settings` writes it).
        #[arg(long, hide = true)]
        markdown: bool,
    },
}

const PRUNE_AFTER: &str = "Only S3_BUCKET, S3_FORCE_PATH_STYLE and LOG_LEVEL matter here (and the \
    AWS SDK's own: AWS_REGION, credentials, AWS_ENDPOINT_URL).\n\
    Exit codes: 0, or 1 when nothing was deleted because of an error (missing directory, unreadable \
    watermark, listing error) or when a delete failed, or 3 when unreadable folders were skipped \
    (named under skipped_folders) and the rest pruned.";

fn parse_now(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.to_utc())
        .map_err(|e| format!("expected RFC 3339 like 2026-07-22T04:50:00Z: {e}"))
}

/// `--max-duration`: a bare number is seconds, anything else a humantime duration.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("expected a non-negative duration like 600s or 14m, got {s:?}"));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("expected a duration like 600s, 14m or 1h 30m, got {s:?}: {e}"))
}

/// Logs to stderr, filtered by `level` (`info` when it is bad): JSON lines in Lambda, else text,
/// on a terminal without targets (module paths) and coloured unless `NO_COLOR`; above the progress
/// bar when there is one.
fn init_tracing(level: &str, json: bool, bar: Option<ProgressBar>) {
    let terminal = !json && std::io::stderr().is_terminal();
    let ansi = terminal && std::env::var_os("NO_COLOR").is_none();
    let filter: Targets =
        level.parse().or_else(|_| "info".parse()).expect("info is a valid filter");
    let filter = quiet_sdk_fallbacks(filter);
    let writer = match bar {
        Some(bar) => BoxMakeWriter::new(BarWriter::new(bar)),
        None => BoxMakeWriter::new(std::io::stderr),
    };
    let layer =
        tracing_subscriber::fmt::layer().with_ansi(ansi).with_target(!terminal).with_writer(writer);
    let layer = if json {
        layer.json().with_current_span(false).without_time().boxed()
    } else {
        // Fields escaped and bounded: a newline in a key cannot forge a line.
        layer.fmt_fields(archive_compaction::infra::text::log_fields()).boxed()
    };
    tracing_subscriber::registry().with(layer.with_filter(filter)).init();
}

/// `aws_config` at error only, unless the level is debug or more or names it: its region and
/// credential fallbacks warn at length (HTTP headers and bodies) outside AWS.
fn quiet_sdk_fallbacks(filter: Targets) -> Targets {
    use tracing_subscriber::filter::LevelFilter;
    let level = filter.default_level().unwrap_or(LevelFilter::OFF);
    let named = filter.iter().any(|(target, _)| target.starts_with("aws_config"));
    if named || level == LevelFilter::OFF || level >= LevelFilter::DEBUG {
        return filter;
    }
    filter.with_target("aws_config", LevelFilter::ERROR)
}

/// A report as pretty JSON on stdout, one document (what scripts parse).
fn print_json(report: &impl serde::Serialize) {
    println!("{}", serde_json::to_string_pretty(report).expect("a report serialises to JSON"));
}

/// A command's report that stops: logged, one line on stderr, exit code 1.
fn command_failed(command: &str, e: &dyn std::fmt::Display) -> ExitCode {
    tracing::error!(error = %e, command, "stopped without a report");
    eprintln!("archive-compaction {command}: {e}");
    ExitCode::from(1)
}

/// A command's report: JSON on stdout, `human` on stderr on a terminal; exit `code`.
fn print_report(
    report: &impl serde::Serialize,
    human: impl FnOnce() -> String,
    code: u8,
) -> ExitCode {
    print_json(report);
    if std::io::stderr().is_terminal() {
        eprint!("{}", human());
    }
    ExitCode::from(code)
}

fn print_status(s: &status::StatusReport, json: bool) {
    if json {
        print_json(s);
    } else {
        print!("{}", status::format_human(s));
    }
}

/// mimalloc instead of glibc's malloc: the per-file path makes many small short-lived allocations
/// (docs/performance.md, "CPU per file"). Feature `system-allocator` leaves it out, for profilers.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    let cli = match parse_cli(lambda) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let repair = match repair_range(cli.as_ref()) {
        Ok(range) => range,
        Err(code) => return code,
    };
    let config = load_config(cli.as_ref());
    let bar = date_bar(config.is_ok(), cli.as_ref());
    let level = config.as_ref().map_or("info", |c| c.log_level.as_str());
    init_tracing(level, lambda, bar.clone());
    for (variable, setting) in mistyped_settings(&std::env::vars().collect()) {
        tracing::warn!(
            variable,
            setting,
            "environment variable {variable} is not a setting and is ignored: did you mean {setting}?"
        );
    }
    // One thread: the work is I/O-bound and a Lambda below 1,769 MB has under one vCPU.
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    rt.block_on(async move {
        // What the SDK needs of the environment, before any request.
        let env = std::env::vars().collect();
        let region = match config.and_then(|c| check_endpoints(&env).map(|()| c)) {
            Ok(c) => region().await.map(|r| (c, r)),
            Err(e) => Err(e),
        };
        let (config, region) = match region {
            Ok(ok) => ok,
            Err(e) => return bad_config(cli.map(|c| c.command), &e),
        };
        let deps = Deps::new(config, region).await;
        listen_for_signals(&deps, cli.as_ref());
        let Some(cli) = cli else {
            // Inline: one async fn more around the runtime's future overflows rustc's layout
            // query depth limit. Each invocation's future on the heap: inline, a debug build's
            // (megabytes) overflows the main thread's stack.
            let deps = &deps;
            return match lambda_runtime::run(service_fn(
                move |ev: LambdaEvent<serde_json::Value>| Box::pin(dispatch(deps, ev)),
            ))
            .await
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "Lambda runtime stopped");
                    ExitCode::from(1)
                }
            };
        };
        // On the heap, as each Lambda invocation's: a debug build's future is large.
        Box::pin(run_command(&deps, cli.command, repair, bar)).await
    })
}

/// The command line, `None` in Lambda. `Err` is the exit code of a command line that ends here,
/// printed: a usage error's 1 (nothing was done), never 2, which means Mismatch; 0 for --help,
/// --version, `settings` and no arguments at all (the short help on stdout: nothing was asked, so
/// nothing failed).
fn parse_cli(lambda: bool) -> Result<Option<Cli>, ExitCode> {
    if lambda {
        return Ok(None);
    }
    if std::env::args_os().len() == 1 {
        print!("{}", Cli::command().render_help());
        return Err(ExitCode::SUCCESS);
    }
    let cli = Cli::try_parse().map_err(|e| {
        let _ = e.print();
        ExitCode::from(if e.use_stderr() { 1 } else { 0 })
    })?;
    if let Command::Settings { markdown } = cli.command {
        if markdown {
            print!("{}", settings_markdown());
        } else {
            let width = terminal_width();
            print!("{}\n{}", wrap(SETTINGS_HEAD, width, ""), settings_text(width));
        }
        return Err(ExitCode::SUCCESS);
    }
    Ok(Some(cli))
}

/// What `archive-compaction settings` says before the list.
const SETTINGS_HEAD: &str = "Settings are environment variables, read by every command and by \
    the Lambda function; a malformed one is refused before anything is read. The AWS SDK reads its \
    own: AWS_REGION (or a profile's region), credentials (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...), \
    AWS_ENDPOINT_URL for S3-compatible servers.\n";

/// Columns of the terminal on stdout, else `COLUMNS`, else 100; at most 100, as clap's help.
fn terminal_width() -> usize {
    let width = terminal_size::terminal_size_of(std::io::stdout())
        .map(|(w, _)| usize::from(w.0))
        .or_else(|| std::env::var("COLUMNS").ok()?.trim().parse().ok());
    width.unwrap_or(100).min(100)
}

/// `run --from --to`'s range; reversed or too long is a usage error (exit 1, no report).
fn repair_range(cli: Option<&Cli>) -> Result<Option<DateRange>, ExitCode> {
    let Some(Cli { command: Command::Run { from: Some(from), to: Some(to), .. } }) = cli else {
        return Ok(None);
    };
    match DateRange::new(*from, *to, RangeOf::Repair) {
        Ok(range) => Ok(Some(range)),
        Err(e) => {
            eprintln!("error: {e}\n\nFor more information, try '--help'.");
            Err(ExitCode::from(1))
        }
    }
}

/// The settings; a --max-duration within DEADLINE_MARGIN_SECONDS is refused like a bad setting.
fn load_config(cli: Option<&Cli>) -> archive_compaction::infra::error::Result<Config> {
    Config::from_env().and_then(|c| match cli {
        Some(Cli {
            command:
                Command::Run { max_duration: Some(d), .. }
                | Command::Audit { max_duration: Some(d), .. },
        }) => c.check_max_duration(*d).map(|()| c),
        _ => Ok(c),
    })
}

fn date_bar(config_ok: bool, cli: Option<&Cli>) -> Option<ProgressBar> {
    (config_ok
        && matches!(cli, Some(Cli { command: Command::Run { .. } | Command::Audit { .. } }))
        && std::io::stderr().is_terminal())
    .then(progress::date_bar)
}

/// SIGTERM / SIGINT, in Lambda and for `run`, as [`archive_compaction::infra::stop::Stop::listen`].
fn listen_for_signals(deps: &Deps, cli: Option<&Cli>) {
    let runs = cli.is_none_or(|c| matches!(c.command, Command::Run { .. }));
    if runs
        && let Err(e) = deps.stop.listen(|signal| std::process::exit(i32::from(exit_code(signal))))
    {
        tracing::warn!(error = %e, "cannot listen for SIGTERM/SIGINT: a signal ends the process at once");
    }
}

/// One command of the command line (`repair`: `run --from --to`'s range).
async fn run_command(
    deps: &Deps,
    command: Command,
    repair: Option<DateRange>,
    bar: Option<ProgressBar>,
) -> ExitCode {
    let deadline = |max_duration: Option<Duration>| max_duration.map(|d| Instant::now() + d);
    match command {
        Command::Run { now, max_duration, dry_run, date, event_id, .. } => {
            let opts = RunOptions {
                dry_run,
                only_date: date,
                repair,
                event_id,
                deadline: deadline(max_duration),
                progress: bar.map(progress::bar_sink),
                stop: Some(deps.stop.clone()),
                ..RunOptions::at(now.unwrap_or_else(Utc::now))
            };
            let report = archive_compaction::app::invoke(deps, &opts).await;
            print_json(&report);
            ExitCode::from(report.last_run_status.exit_code() as u8)
        }
        Command::Audit { from, to, max_duration } => {
            let opts = audit::AuditOptions { from, to, deadline: deadline(max_duration), bar };
            match audit::audit(&deps.store, &deps.config, &opts).await {
                Ok(r) => print_report(&r, || audit::format_human(&r), r.status.exit_code()),
                Err(e) => command_failed("audit", &e),
            }
        }
        // An error deletes nothing.
        Command::PruneCache { dir, dry_run } => {
            match prune::prune(&deps.store, &PruneOptions { dir, dry_run }).await {
                Ok(r) => {
                    print_report(&r, || format!("{}\n", prune::format_human(&r)), r.exit_code())
                }
                Err(e) => command_failed("prune-cache", &e),
            }
        }
        Command::Status { now, days, json } => status(deps, now, days, json).await,
        Command::Settings { .. } => unreachable!("parse_cli prints the settings"),
    }
}

/// A bad configuration: nothing is read, written or deleted, exit 1; said once on stderr (the
/// log's line, or the command's own); `run` (and Lambda) print a Failure report, `status` a status.
fn bad_config(command: Option<Command>, e: &archive_compaction::infra::error::Error) -> ExitCode {
    if matches!(command, None | Some(Command::Run { .. } | Command::Status { .. })) {
        tracing::error!(error = %e, "bad configuration");
    }
    let dry_run = matches!(command, Some(Command::Run { dry_run: true, .. }));
    match command {
        Some(Command::Status { now, json, days }) => {
            let as_of = Utc::now();
            let opts = StatusOptions { now: now.unwrap_or(as_of), as_of, days };
            let bucket = std::env::var("S3_BUCKET").unwrap_or_default();
            print_status(&status::StatusReport::unavailable(&bucket, None, &opts, e), json);
        }
        Some(Command::Audit { .. }) => {
            eprintln!("archive-compaction audit: {e}; nothing was read, written or deleted");
        }
        Some(Command::PruneCache { .. }) => {
            eprintln!("archive-compaction prune-cache: {e}; nothing was read, written or deleted");
        }
        None | Some(Command::Run { .. } | Command::Settings { .. }) => {
            // As `RunReport::fail`, whose log line would say it a second time.
            print_json(&RunReport {
                bucket: std::env::var("S3_BUCKET").unwrap_or_default(),
                dry_run,
                last_run_at: Utc::now(),
                stop_reason: StopReason::Error,
                last_run_status: Status::Failure,
                errors: vec![e.to_string()],
                errors_total: 1,
                ..Default::default()
            });
        }
    }
    ExitCode::from(1)
}

/// `status`, with the last run from MQTT when set; exit 1 when something could not be read.
async fn status(deps: &Deps, now: Option<DateTime<Utc>>, days: usize, json: bool) -> ExitCode {
    let as_of = Utc::now();
    let opts = StatusOptions { now: now.unwrap_or(as_of), as_of, days };
    let mut s = status::gather(&deps.store, &deps.config, &opts).await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "status could not be read");
        status::StatusReport::unavailable(&deps.config.bucket, Some(deps.config.lag_days), &opts, e)
    });
    if !s.bucket_unreadable {
        s.versioning = Some(status::versioning(&deps.store).await);
    }
    if let Some(mqtt) = &deps.config.mqtt {
        s.last_run = Some(match deps.mqtt_password().await {
            Ok(password) => {
                let mqtt = MqttConfig { password, ..mqtt.clone() };
                status::last_run_from_mqtt(&mqtt, as_of).await
            }
            Err(e) => status::LastRunStatus { error: Some(e.to_string()), ..Default::default() },
        });
    }
    print_status(&s, json);
    if s.errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
