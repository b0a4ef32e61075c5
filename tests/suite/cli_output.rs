//! What the CLI shows besides its report: logs written to a file are plain
//! text (no escape codes, for a run and for a bad configuration), the
//! progress bar follows a real run, and each command's help is one screen.

use std::process::{Command, Output};

use crate::common::*;
use archive_compaction::commands::progress::bar_sink;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::report::{RunReport, Status};
use serde_json::json;

/// Logs written to a file (stderr redirected: not a terminal) are plain
/// text, without one escape byte (terminal colours are `ESC [ ... m`), for a
/// real run (INFO lines, one `date done` per date, the empty 2026-07-19
/// included) and for a bad configuration (an ERROR line). `NO_COLOR` is
/// removed from the environment so that only the terminal check decides.
#[tokio::test]
async fn logs_written_to_a_file_carry_no_escape_codes() {
    init_logs();
    let store = bucket("op-logs").await;
    generate(
        &store,
        json!({"seed": 89, "days": [
            {"date": "2026-07-18", "flights": 3},
            {"date": "2026-07-20", "flights": 2}
        ]}),
    );
    let dir = tempfile::tempdir().unwrap();
    let read_log = |name: &str, cmd: &mut Command| -> (Output, String) {
        let path = dir.path().join(name);
        let file = std::fs::File::create(&path).unwrap();
        let out = cmd
            .env_remove("NO_COLOR")
            .stderr(file)
            .output()
            .expect("run the archive-compaction binary");
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        assert!(
            !bytes.contains(&0x1b),
            "{name}: escape bytes in a log file:\n{}",
            text.escape_debug()
        );
        (out, text)
    };

    let (out, log) = read_log("run.log", &mut cli_command(&store, &["run", "--now", NOW]));
    assert_eq!(out.status.code(), Some(0), "run failed:\n{log}");
    let r: RunReport = stdout_json(&out);
    assert_eq!(r.days.len(), 3, "{r:?}");
    assert_eq!(log.matches("date done").count(), 3, "one line per date:\n{log}");
    assert!(log.contains(" INFO "), "plain level names:\n{log}");
    // For people: each compacted date before → after, durations in milliseconds, the
    // run's internals (pass, part_files, an empty event_id) at debug only.
    let compacted = log.lines().filter(|l| l.contains("date done: ")).collect::<Vec<_>>();
    assert!(
        compacted
            .iter()
            .any(|l| l.contains("3 index files (") && l.contains(") → 1 compacted file (")),
        "{log}"
    );
    for seconds in log.split("seconds=").skip(1) {
        let value = seconds.split_whitespace().next().unwrap();
        let decimals = value.split_once('.').map_or(0, |(_, d)| d.len());
        assert!(decimals <= 3, "seconds={value}:\n{log}");
    }
    for internal in [" pass=", " part_files=", "event_id=\"\""] {
        assert!(!log.contains(internal), "{internal} at info:\n{log}");
    }
    // At debug, each commit phase's duration in milliseconds too.
    generate(&store, json!({"seed": 90, "days": [{"date": "2026-07-21", "flights": 2}]}));
    let mut debug = cli_command(&store, &["run", "--now", NOW, "--date", "2026-07-21"]);
    let (out, debug_log) = read_log("debug.log", debug.env("LOG_LEVEL", "debug"));
    assert_eq!(out.status.code(), Some(0), "run --date failed:\n{debug_log}");
    let ours = debug_log.lines().filter(|l| l.contains(" archive_compaction::"));
    let phases = ours.filter(|l| l.contains("phase=")).collect::<Vec<_>>();
    assert!(phases.len() >= 4, "the phases' debug lines:\n{debug_log}");
    for line in phases {
        let value = line.split("seconds=").nth(1).expect("a duration").split_whitespace().next();
        let decimals = value.unwrap().split_once('.').map_or(0, |(_, d)| d.len());
        assert!(decimals <= 3, "{line}");
    }

    let mut bad = cli_command(&store, &["run", "--now", NOW]);
    bad.env_remove("S3_BUCKET");
    let (out, log) = read_log("bad-config.log", &mut bad);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        log.contains("ERROR") && log.contains("bad configuration") && log.contains("S3_BUCKET"),
        "the configuration error is logged:\n{log}"
    );
}

#[tokio::test]
async fn the_progress_bar_follows_a_real_run() {
    let store = bucket("op-progress").await;
    generate(
        &store,
        json!({"seed": 90, "days": [
            {"date": "2026-07-18", "flights": 3},
            {"date": "2026-07-19", "flights": 2},
            {"date": "2026-07-20", "flights": 2}
        ]}),
    );
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::hidden());
    let mut opts = RunOptions::at(at(NOW));
    opts.progress = Some(bar_sink(bar.clone()));
    let r = run(&store, &config(&store, &[]), &opts).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!((bar.position(), bar.length()), (3, Some(3)));
    assert!(bar.is_finished(), "the end of the run clears the bar");
    assert!(bar.message().starts_with("2026-07-20 compacted: 2 files, "), "{}", bar.message());
}

/// `archive-compaction` with `args` at 100 columns: its stdout, after it exited 0.
fn help_of(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_archive-compaction"))
        .args(args)
        .env_clear()
        .env("COLUMNS", "100")
        .output()
        .expect("run the archive-compaction binary");
    assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
    assert!(out.stderr.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Each command's `--help` fits a screen (40 lines at 100 columns): what it
/// does, its options and exit codes, and one pointer to `archive-compaction
/// settings` instead of every setting; each wrapped line is indented under
/// its entry, never back at the margin. The settings listing wraps each
/// meaning under its setting. The program alone prints its short help on
/// stdout and exits 0 (it was asked nothing, so nothing failed).
#[test]
fn each_help_is_one_screen_wrapped_under_its_entries() {
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["status", "--help"],
        &["audit", "--help"],
        &["prune-cache", "--help"],
        &["settings", "--help"],
        &[],
    ] {
        let text = help_of(args);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() <= 40, "{args:?}: {} lines:\n{text}", lines.len());
        assert!(lines.iter().all(|l| l.chars().count() <= 100), "{args:?}:\n{text}");
        assert!(!text.contains("MULTIPART_PART_BYTES"), "{args:?} lists the settings:\n{text}");
        assert!(text.contains("Usage: archive-compaction"), "{args:?}:\n{text}");
        // In each list (Commands:, Options:), a line is an entry or indented under one.
        let mut in_list = false;
        for line in lines.iter().filter(|l| !l.is_empty()) {
            if !line.starts_with(' ') {
                in_list = *line == "Commands:" || *line == "Options:";
                continue;
            }
            let entry = (line.starts_with("  ") && !line.starts_with("   "))
                || line.starts_with("      --");
            assert!(
                !in_list || entry || line.starts_with("        "),
                "{args:?}: a wrapped line back at the margin: {line:?}\n{text}"
            );
        }
        // Where the settings are, or the few this command reads.
        let pointer = text.contains("archive-compaction settings") || text.contains("matter here");
        assert!(args.first() == Some(&"settings") || pointer, "{args:?}:\n{text}");
    }
    let settings = help_of(&["settings"]);
    assert!(
        settings.contains("\nMULTIPART_PART_BYTES [default: 8388608]\n    multipart part size")
    );
    for line in settings.lines().skip_while(|l| !l.starts_with("S3_BUCKET")) {
        assert!(line.chars().count() <= 100, "{line:?}");
        let setting = line.split(' ').next().is_some_and(|w| {
            archive_compaction::data::config::SETTINGS.iter().any(|s| s.name == w)
        });
        assert!(setting || line.starts_with("    "), "not under its setting: {line:?}");
    }
    assert_eq!(
        help_of(&["settings", "--markdown"]),
        archive_compaction::data::config::settings_markdown()
    );
}

/// On a terminal, log lines carry no target (`archive_compaction::...`
/// module paths); to a file they do (`logs_written_to_a_file...` above). The
/// terminal is a pseudo-terminal of Python's `pty`.
#[test]
fn log_lines_on_a_terminal_carry_no_module_path() {
    let script = "import pty, sys; pty.spawn(sys.argv[1:])";
    let out = Command::new(python())
        .args(["-c", script, env!("CARGO_BIN_EXE_archive-compaction"), "run"])
        .env_clear()
        .env("NO_COLOR", "1")
        .output()
        .expect("run the binary under a pseudo-terminal");
    let text = String::from_utf8_lossy(&out.stdout);
    let line =
        text.lines().find(|l| l.contains("bad configuration")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(" ERROR bad configuration") && line.contains("S3_BUCKET"), "{line}");
    assert!(!line.contains("archive_compaction"), "{line}");
}
