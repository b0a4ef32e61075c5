//! What the CLI shows besides its report: logs written to a file are plain
//! text (no escape codes, for a run and for a bad configuration), and the
//! progress bar follows a real run.

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
