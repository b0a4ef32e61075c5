//! `archive-compaction`: a Lambda function when `AWS_LAMBDA_RUNTIME_API` is
//! set, a command-line tool otherwise. Both are thin shells over
//! [`archive_compaction::app::invoke`].

use std::process::ExitCode;
use std::time::{Duration, Instant};

use archive_compaction::app::{Deps, handle};
use archive_compaction::config::{Config, SETTINGS, parse_date};
use archive_compaction::report::RunReport;
use archive_compaction::run::RunOptions;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use lambda_runtime::{LambdaEvent, service_fn};

fn settings_help() -> String {
    let mut s = String::from(
        "Settings are environment variables (the AWS SDK reads its own too: AWS_REGION or \
         AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_ENDPOINT_URL):\n\n",
    );
    for (name, default, meaning) in SETTINGS {
        s.push_str(&format!("  {name:<24} {meaning} [default: {default}]\n"));
    }
    s.push_str("\nExit codes: 0 Success, 2 Mismatch (a day failed parity), 1 Failure.\n");
    s
}

/// Compacts per-flight Parquet index files into one file per day.
#[derive(Debug, Parser)]
#[command(name = "archive-compaction", version, about, after_long_help = settings_help())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one invocation: lease, recover, walk from the watermark to the
    /// cutoff, compact each date; prints the run report as JSON on stdout.
    #[command(after_long_help = settings_help())]
    Run {
        /// Invocation time (RFC 3339, e.g. 2026-07-22T04:50:00Z); fixes the
        /// cutoff. Default: the current time.
        #[arg(long, value_parser = parse_now)]
        now: Option<DateTime<Utc>>,
        /// Stop starting new dates after this long (e.g. 600s, 14m).
        #[arg(long, value_parser = parse_duration)]
        max_duration: Option<Duration>,
        /// List, plan and check parity; write and delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Compact only this date (YYYY-MM-DD), whatever the watermark says.
        #[arg(long, value_parser = |s: &str| parse_date("--date", s).map_err(|e| e.to_string()))]
        date: Option<chrono::NaiveDate>,
        /// An id equal across retries of the same scheduled run (counts a
        /// mismatch once).
        #[arg(long)]
        event_id: Option<String>,
    },
}

fn parse_now(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.to_utc())
        .map_err(|e| format!("expected RFC 3339 like 2026-07-22T04:50:00Z: {e}"))
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        None => (s, 1.0),
        Some((i, _)) => (
            &s[..i],
            match &s[i..] {
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                u => return Err(format!("unknown unit {u:?}: use s, m or h")),
            },
        ),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("expected a duration like 600s or 14m, got {s:?}"))?;
    if v < 0.0 {
        return Err("duration must not be negative".into());
    }
    Ok(Duration::from_secs_f64(v * mult))
}

fn init_tracing(level: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .or_else(|_| tracing_subscriber::EnvFilter::try_new("info"))
        .expect("info is a valid filter");
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        b.json().with_current_span(false).without_time().init();
    } else {
        b.init();
    }
}

fn main() -> ExitCode {
    let lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    let cli = if lambda { None } else { Some(Cli::parse()) };
    let config = Config::from_env();
    init_tracing(
        config
            .as_ref()
            .map(|c| c.log_level.as_str())
            .unwrap_or("info"),
        lambda,
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let config = match config {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "bad configuration");
                let mut r = RunReport {
                    last_run_at: Utc::now(),
                    ..Default::default()
                };
                r.fail(&e);
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r).expect("report serialises")
                );
                return ExitCode::from(1);
            }
        };
        let deps = Deps::new(config).await;
        match cli {
            None => {
                let deps = &deps;
                match lambda_runtime::run(service_fn(move |ev: LambdaEvent<serde_json::Value>| {
                    handle(deps, ev)
                }))
                .await
                {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        tracing::error!(error = %e, "Lambda runtime stopped");
                        ExitCode::from(1)
                    }
                }
            }
            Some(Cli {
                command:
                    Command::Run {
                        now,
                        max_duration,
                        dry_run,
                        date,
                        event_id,
                    },
            }) => {
                let mut opts = RunOptions::at(now.unwrap_or_else(Utc::now));
                opts.deadline = max_duration.map(|d| Instant::now() + d);
                opts.dry_run = dry_run;
                opts.only_date = date;
                opts.event_id = event_id;
                let report = archive_compaction::app::invoke(&deps, &opts).await;
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("report serialises")
                );
                ExitCode::from(report.last_run_status.exit_code() as u8)
            }
        }
    })
}
