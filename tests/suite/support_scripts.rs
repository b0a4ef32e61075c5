//! The test support scripts say what is true:
//! `tests/support/serve.py` never says "ready" for a port another process
//! holds; a helper (`serve.py`, `guard.py`) stops what it started once the
//! test closes its stdin (`stdin_guard.py`, held by `crate::common::Supervised`),
//! so nothing outlives its test; the servers leave `TMPDIR` as they found it;
//! and `archive.py summary` tells index files apart by what their
//! names are (a UUID, `compacted-`, any other name), as the job does
//! (`keys::IndexKey`), not by the length of the name.

use std::process::{Command, Stdio};

use crate::common::*;
use archive_compaction::data::keys::index_prefix;
use archive_compaction::infra::storage::PutMode;
use serde_json::json;

#[test]
fn serve_py_refuses_a_port_already_taken() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = Command::new(python())
        .arg(root().join("tests/support/serve.py"))
        .args(["mosquitto", &port.to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{stdout} {stderr}");
    assert!(!stdout.contains("ready"), "said ready on a taken port: {stdout}");
    assert!(stderr.contains(&format!("port {port} is taken")), "{stderr}");
    // A free port still starts (and says so).
    let server = start_server("mosquitto");
    assert!(std::net::TcpStream::connect(("127.0.0.1", server.port)).is_ok());
}

#[test]
fn a_helper_stops_what_it_started_when_its_stdin_closes() {
    let server = start_server("mosquitto");
    let port = server.port;
    drop(server);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "mosquitto on {port} outlived its serve.py"
    );

    let log = std::env::temp_dir().join(format!("ac-guard-stops-{}.log", free_port()));
    let mut cmd = Command::new(python());
    cmd.arg(root().join("tests/support/guard.py")).arg(&log).args(["--", "sleep", "600"]);
    let guard = Supervised::spawn(cmd, "guard.py");
    assert_eq!(guard.read_line().trim(), "ready");
    let pid = guard.pid();
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let sleep = children.split_whitespace().next().expect("guard.py's child").to_string();
    assert!(std::path::Path::new(&format!("/proc/{sleep}")).exists());
    drop(guard);
    assert!(
        !std::path::Path::new(&format!("/proc/{sleep}")).exists(),
        "guard.py's command {sleep} outlived it"
    );
}

#[tokio::test]
async fn archive_py_summary_tells_index_files_apart_by_what_they_are() {
    let store = bucket("summary").await;
    let day = "2026-07-20";
    generate(&store, json!({"seed": 5, "days": [{"date": day, "flights": 3}]}));
    let prefix = index_prefix(date(day));
    let first = store.list(&prefix).await.unwrap()[0].key.clone();
    // A multi-row file whose name is as long as a per-flight file's
    // ({uuid}.parquet, 44 characters) but is no UUID.
    let export = format!("{prefix}export-2026-07-20-part-00001-of-0001.parquet");
    assert_eq!(export.len() - prefix.len(), 44);
    archive_py("multi-row", &store, json!({"from": [first], "key": export}));
    // A zero-byte compacted-looking object is foreign, as the job sees it.
    store
        .put(
            &format!("{prefix}compacted-empty.parquet"),
            bytes::Bytes::new(),
            PutMode::Create,
            None,
        )
        .await
        .unwrap();
    let out =
        output_ok(Command::new(python()).arg(root().join("tests/support/archive.py")).args([
            "summary",
            "--endpoint",
            &endpoint(),
            "--bucket",
            store.bucket(),
        ]));
    let text = String::from_utf8(out.stdout).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["date", "flights", "per-flight", "compacted", "multi-row", "rows", "foreign"],
        "{text}"
    );
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with(day))
        .unwrap_or_else(|| panic!("{text}"))
        .split_whitespace()
        .collect();
    // 3 flights, 3 per-flight files, no compacted file, 1 multi-row file
    // of 1 row, 3 + 1 rows, 1 foreign object.
    assert_eq!(row, [day, "3", "3", "0", "1", "4", "1"], "{text}");
}

/// The test servers leave the temporary directory as they found it: after a
/// command that succeeds, one that fails, and Ctrl-C (SIGINT to the whole
/// process group, as a terminal sends it), no folder, FIFO, socket, log or
/// pid file of theirs is left in `TMPDIR` (serve.py keeps its server's log
/// and configuration in a folder it removes; `make demo` starts the same
/// serve.py, with its FIFOs under target/).
#[test]
fn the_test_servers_leave_the_temporary_directory_as_they_found_it() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    let servers = || {
        let mut cmd = Command::new(python());
        cmd.arg(root().join("tests/support/servers.py"))
            .args(["ministack", "mosquitto", "forkserver", "--"])
            .env("TMPDIR", tmp.path())
            .env("TOOLS_DIR", tools());
        cmd
    };
    let left = || -> Vec<_> {
        std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect()
    };
    for (command, code) in [("true", 0), ("false", 1)] {
        let out = servers().arg(command).output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(left(), Vec::<std::ffi::OsString>::new(), "after `{command}`");
    }
    let mut running =
        servers().args(["sleep", "600"]).process_group(0).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = std::io::BufReader::new(running.stderr.take().unwrap());
    let mut said = String::new();
    for line in stderr.lines().map(Result::unwrap) {
        said += &line;
        if line.contains("started in") {
            break;
        }
    }
    assert!(!left().is_empty(), "the servers' folders while they run: {said}");
    let group = format!("-{}", running.id());
    assert!(Command::new("kill").args(["-INT", "--", &group]).status().unwrap().success());
    running.wait().unwrap();
    assert_eq!(left(), Vec::<std::ffi::OsString>::new(), "after Ctrl-C");
}
