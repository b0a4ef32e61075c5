//! The real Lambda runtime path, locally: the `archive-compaction` binary
//! built by this `cargo test`, started with `AWS_LAMBDA_RUNTIME_API` set (so
//! `main` serves `lambda_runtime` exactly as in AWS), polling the Lambda
//! Runtime API that `cargo lambda watch --only-lambda-apis` emulates; each
//! test invokes it through the emulator's Invoke API with the files in
//! `events/`, against a real S3-protocol server (ministack, or moto with
//! `TEST_S3_SERVER=moto`) holding an archive written by pyarrow.
//!
//! A Success answers the run report; a Mismatch or a Failure answers a Lambda
//! error whose `errorType` names the outcome and whose `errorMessage` is the
//! report as JSON. `cargo lambda watch` without `--only-lambda-apis` would
//! run `cargo build` itself, which blocks on the lock this `cargo test`
//! holds; `make invoke-local` runs it that way.
//!
//! cargo-lambda comes from `scripts/setup-tools.sh` (`.tools/lambda/`, or
//! `cargo-lambda` on `PATH`). Without it these tests say SKIPPED and pass,
//! except under CI (`CI` set), where a missing cargo-lambda fails them.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use archive_compaction::data::report::{RunReport, Status, StopReason};
use archive_compaction::infra::storage::{PutMode, S3Store};
use serde_json::{Value, json};

/// cargo-lambda from `.tools/lambda/bin`, else from `PATH`.
fn cargo_lambda() -> Option<PathBuf> {
    let local = tools().join("lambda/bin/cargo-lambda");
    if local.is_file() {
        return Some(local);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("cargo-lambda")).find(|p| p.is_file())
}

/// `Some(cargo-lambda)`, or `None` after saying why the test is skipped.
fn require_cargo_lambda(test: &str) -> Option<PathBuf> {
    let found = cargo_lambda();
    if found.is_none() {
        let msg = "cargo-lambda not found in .tools/lambda/bin or on PATH \
                   (install it with `scripts/setup-tools.sh lambda`)";
        if std::env::var_os("CI").is_some() {
            panic!("{test}: {msg}; CI must run the Lambda runtime tests");
        }
        eprintln!("SKIPPED {test}: {msg}");
    }
    found
}

/// A process started through `tests/support/guard.py`: stopped (its whole
/// process group) when this value drops or the test process dies.
struct Guarded {
    process: Supervised,
    log: PathBuf,
}

impl Guarded {
    fn start(
        name: &str,
        wait_port: Option<u16>,
        cmd: &Path,
        args: &[&str],
        env: &BTreeMap<String, String>,
    ) -> Guarded {
        let log = std::env::temp_dir().join(format!("ac-{name}-{}.log", free_port()));
        let mut c = Command::new(python());
        c.arg(root().join("tests/support/guard.py")).arg(&log);
        if let Some(p) = wait_port {
            c.arg(p.to_string());
        }
        c.arg("--").arg(cmd).args(args).current_dir(root());
        // The function gets exactly the AWS settings below, never a profile
        // or credentials of the machine.
        for k in ["AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE", "AWS_CONFIG_FILE"] {
            c.env_remove(k);
        }
        c.envs(env);
        let process = Supervised::spawn(c, name);
        assert_eq!(
            process.read_line().trim(),
            "ready",
            "{name} did not start; see {}",
            log.display()
        );
        Guarded { process, log }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        let start = (start..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
        format!("--- {} (tail)\n{}", self.log.display(), &text[start..])
    }
}

impl Guarded {
    /// The `run report` log lines (one JSON object each) of every
    /// invocation so far, in order: their `fields.report`.
    fn run_reports(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|j| j["fields"]["message"] == "run report")
            .map(|j| j["fields"]["report"].clone())
            .collect()
    }
}

/// What an invocation answered.
#[derive(Debug)]
enum Answer {
    /// HTTP 200: the function returned this report (status Success).
    Report(RunReport),
    /// The function returned an error: `errorType`, and the report carried
    /// in `errorMessage` when it is one.
    Error { error_type: String, message: String, report: Option<RunReport> },
}

impl Answer {
    fn expect_success(self) -> RunReport {
        match self {
            Answer::Report(r) => {
                assert_eq!(r.last_run_status, Status::Success);
                r
            }
            other => panic!("expected a Success report, got {other:?}"),
        }
    }

    /// The report an error answer of type `want` carries in its
    /// `errorMessage` (panics on another answer, or a message that is not a
    /// report).
    fn expect_error(self, want: &str) -> RunReport {
        match self {
            Answer::Error { error_type, message, report } => {
                assert_eq!(error_type, want, "error type; message: {message}");
                if let Some(r) = &report {
                    assert_eq!(
                        r.last_run_status.as_str(),
                        want,
                        "the report's status names the error type"
                    );
                }
                report.unwrap_or_else(|| panic!("errorMessage is not a run report: {message}"))
            }
            other => panic!("expected a {want} error, got {other:?}"),
        }
    }
}

/// The emulated Lambda service and the function process serving it, with
/// the environment a deployment gives the function for `store`'s bucket.
struct LocalLambda {
    port: u16,
    // Field order: the function stops before its runtime API does.
    function: Guarded,
    emulator: Guarded,
}

/// The function process: the test build, or a release bootstrap for arm64.
enum Function {
    /// The host binary this `cargo test` built.
    TestBuild,
    /// `bootstrap` run by `qemu` with the arm64 C library under `sysroot`
    /// (`qemu: None` on an aarch64 host: run directly), its Runtime API
    /// calls passing through a [`FirstPoll`] recorder.
    Arm64 { bootstrap: PathBuf, qemu: Option<PathBuf>, sysroot: PathBuf },
}

impl LocalLambda {
    fn start(cargo_lambda: &Path, store: &S3Store, extra: &[(&str, &str)]) -> LocalLambda {
        LocalLambda::start_with(cargo_lambda, store, extra, &Function::TestBuild).0
    }

    /// As [`LocalLambda::start`], with `function` as the function process;
    /// for [`Function::Arm64`] also the recorder of its first poll.
    fn start_with(
        cargo_lambda: &Path,
        store: &S3Store,
        extra: &[(&str, &str)],
        function: &Function,
    ) -> (LocalLambda, Option<FirstPoll>) {
        let port = free_port();
        let port_s = port.to_string();
        let emulator = Guarded::start(
            "cargo-lambda-watch",
            Some(port),
            cargo_lambda,
            &[
                "lambda",
                "watch",
                "--only-lambda-apis",
                "--invoke-address",
                "127.0.0.1",
                "--invoke-port",
                &port_s,
            ],
            &BTreeMap::new(),
        );
        let mut env: BTreeMap<String, String> = env_for(store, extra).into_iter().collect();
        for (k, v) in [
            // What `cargo lambda watch --only-lambda-apis` asks the function to have.
            ("AWS_LAMBDA_RUNTIME_API", format!("http://127.0.0.1:{port}/.rt")),
            ("AWS_LAMBDA_FUNCTION_NAME", "_".into()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "1".into()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512".into()),
            ("AWS_ENDPOINT_URL", endpoint()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ] {
            env.insert(k.into(), v);
        }
        let (function, recorder) = match function {
            Function::TestBuild => {
                let bin = PathBuf::from(env!("CARGO_BIN_EXE_archive-compaction"));
                (Guarded::start("function", None, &bin, &[], &env), None)
            }
            Function::Arm64 { bootstrap, qemu, sysroot } => {
                let recorder = FirstPoll::start(port);
                env.insert(
                    "AWS_LAMBDA_RUNTIME_API".into(),
                    format!("http://127.0.0.1:{}/.rt", recorder.port),
                );
                let guarded = match qemu {
                    Some(qemu) => {
                        let sysroot = sysroot.to_string_lossy().into_owned();
                        let bootstrap = bootstrap.to_string_lossy().into_owned();
                        Guarded::start(
                            "function-arm64",
                            None,
                            qemu,
                            &["-L", &sysroot, &bootstrap],
                            &env,
                        )
                    }
                    None => Guarded::start("function-arm64", None, bootstrap, &[], &env),
                };
                (guarded, Some(recorder))
            }
        };
        (LocalLambda { port, function, emulator }, recorder)
    }

    /// Invokes the function with `payload` through the emulator's Invoke API
    /// (`POST /2015-03-31/functions/_/invocations`).
    fn invoke(&self, payload: &str) -> Answer {
        let (status, body) = http_post(self.port, "/2015-03-31/functions/_/invocations", payload)
            .unwrap_or_else(|e| {
                panic!(
                    "invoke failed: {e}\n{}\n{}",
                    self.function.log_tail(),
                    self.emulator.log_tail()
                )
            });
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| {
            panic!("answer is not JSON ({e}): HTTP {status} {body}\n{}", self.function.log_tail())
        });
        match status {
            200 => Answer::Report(
                serde_json::from_value(v)
                    .unwrap_or_else(|e| panic!("not a run report ({e}): {body}")),
            ),
            _ => {
                let error_type = v["errorType"]
                    .as_str()
                    .unwrap_or_else(|| panic!("HTTP {status}: {body}"))
                    .to_string();
                let message = v["errorMessage"].as_str().unwrap_or_default().to_string();
                let report = serde_json::from_str(&message).ok();
                Answer::Error { error_type, message, report }
            }
        }
    }

    fn invoke_file(&self, name: &str) -> Answer {
        let path = root().join("events").join(name);
        self.invoke(
            &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
    }
}

/// A TCP relay in front of the emulated Runtime API that notes when the
/// function first asks for an invocation (`GET
/// /.rt/2018-06-01/runtime/invocation/next`), in seconds since boot
/// (`/proc/uptime`, the clock of a process's start time in `/proc/PID/stat`).
struct FirstPoll {
    port: u16,
    at: std::sync::Arc<std::sync::Mutex<Option<f64>>>,
}

impl FirstPoll {
    fn start(upstream: u16) -> FirstPoll {
        use std::sync::{Arc, Mutex};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let at: Arc<Mutex<Option<f64>>> = Arc::new(Mutex::new(None));
        let seen = at.clone();
        // Threads that end with the connections (or the test process).
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                        return;
                    };
                    let (Ok(mut from_server), Ok(mut to_client)) =
                        (server.try_clone(), client.try_clone())
                    else {
                        return;
                    };
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from_server, &mut to_client);
                        let _ = to_client.shutdown(std::net::Shutdown::Write);
                    });
                    let (mut from_client, mut to_server) = (client, server);
                    let mut buf = [0u8; 16 * 1024];
                    loop {
                        let n = match from_client.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if String::from_utf8_lossy(&buf[..n]).contains("/runtime/invocation/next") {
                            let mut first = seen.lock().unwrap();
                            if first.is_none() {
                                *first = Some(uptime());
                            }
                        }
                        if to_server.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to_server.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        FirstPoll { port, at }
    }

    /// Seconds since boot of the first poll, waiting up to `timeout` for it.
    fn wait(&self, timeout: Duration) -> Option<f64> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(t) = *self.at.lock().unwrap() {
                return Some(t);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Seconds since boot (`/proc/uptime`, 10 ms resolution).
fn uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/uptime")
}

/// When the process `pid` started, in seconds since boot (`/proc/PID/stat`
/// field 22, in clock ticks of `getconf CLK_TCK`).
fn started_at(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // The command name (field 2) is in parentheses and may hold blanks.
    let after = &stat[stat.rfind(')').expect("stat") + 2..];
    let ticks: f64 = after.split_whitespace().nth(19).unwrap().parse().unwrap();
    let hz: f64 = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0);
    ticks / hz
}

/// The process `tests/support/guard.py` started (its only child).
fn guarded_pid(guard: &Guarded) -> u32 {
    let pid = guard.process.pid();
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .expect("/proc/PID/task/PID/children");
    children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("guard.py {pid} has no child"))
}

/// A minimal HTTP/1.1 POST to the local emulator (Connection: close;
/// Content-Length or chunked answers).
fn http_post(port: u16, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(300)))?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("bad answer: {text}")))?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Ok((status, rest.to_string()));
    }
    let mut body = String::new();
    let mut rest = rest;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).map_err(std::io::Error::other)?;
        if n == 0 {
            break;
        }
        body.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    Ok((status, body))
}

fn date_of(report: &RunReport, d: &str) -> Option<String> {
    report.days.iter().find(|x| x.date == date(d)).map(|x| x.action.to_string())
}

/// The scheduled event `sam local generate-event` makes, the console events
/// and a scheduled event of the deployed rule, one after the other on one
/// archive: each answers Success and does what its name says.
#[tokio::test]
async fn every_event_file_runs_through_the_lambda_runtime_and_compacts_the_archive() {
    let Some(cargo_lambda) =
        require_cargo_lambda("every_event_file_runs_through_the_lambda_runtime")
    else {
        return;
    };
    init_logs();
    let store = bucket("rt-events").await;
    let generated = generate(
        &store,
        json!({"seed": 11, "days": [
            {"date": "2026-07-17", "flights": 12, "foreign": true},
            {"date": "2026-07-18", "flights": 9},
            {"date": "2026-07-19", "flights": 7},
            {"date": "2026-07-20", "flights": 10}
        ]}),
    );
    let lambda = LocalLambda::start(&cargo_lambda, &store, &[]);
    let before = dump(&store, "");

    // 1970: the cutoff is before every partition, nothing to do.
    let r = lambda.invoke_file("eventbridge-scheduled.json").expect_success();
    assert_eq!(r.stop_reason, StopReason::NothingToDo, "{r:?}");
    assert_eq!(r.last_run_at, at("1970-01-01T00:00:00Z"));
    assert_eq!(r.bucket, store.bucket());
    assert!(!r.invocation_id.is_empty(), "the Lambda request id is the invocation id");
    assert_eq!(dump(&store, ""), before, "a no-op run changed the bucket");

    // Dry run at the wall clock: plans every date, writes nothing.
    let t0 = Instant::now();
    let r = lambda.invoke_file("console-dry-run.json").expect_success();
    assert!(r.dry_run);
    assert_eq!(r.stop_reason, StopReason::ReachedCutoff, "{r:?}");
    for d in ["2026-07-17", "2026-07-18", "2026-07-19", "2026-07-20"] {
        assert_eq!(date_of(&r, d).as_deref(), Some("planned"), "{d} in {:?}", r.days);
    }
    assert_eq!(dump(&store, ""), before, "the dry run changed the bucket");
    eprintln!("dry run over {} dates took {:?}", r.days.len(), t0.elapsed());

    // One date: compacted, the watermark not moved, the other dates untouched.
    let r = lambda.invoke_file("console-date.json").expect_success();
    assert_eq!(r.days.len(), 1);
    assert_eq!(date_of(&r, "2026-07-18").as_deref(), Some("compacted"));
    assert_eq!(r.files_compacted, 9);
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-18", &generated.rows["2026-07-18"]);
    assert_eq!(watermark(&after), None);
    for d in ["2026-07-17", "2026-07-19", "2026-07-20"] {
        for k in &generated.index_keys[d] {
            assert_eq!(after.get(k), before.get(k), "{k} touched by a run for 2026-07-18 only");
        }
    }

    // Pinned time 2026-07-22T04:50Z: cutoff 2026-07-20, everything compacted.
    let r = lambda.invoke_file("console-now.json").expect_success();
    assert_eq!(r.last_run_at, at("2026-07-22T04:50:00Z"));
    assert_eq!(r.cutoff, Some(date("2026-07-20")));
    assert_eq!(r.stop_reason, StopReason::ReachedCutoff);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-20")));
    assert_eq!(r.days_compacted, 4);
    assert_eq!(r.files_compacted, 12 + 7 + 10, "07-18 was compacted already");
    assert_eq!(r.watermark_lag_days, Some(0));
    let after = assert_all_compacted(&store, &generated, "2026-07-20", "console-now.json");
    for f in &generated.foreign {
        assert_eq!(after.get(f), before.get(f), "foreign object {f} was touched");
    }
    assert!(!after.contains_key("_compaction_state/lock.json"), "lease not released");

    // The deployed rule's event the same morning: nothing left to do.
    let r = lambda.invoke_file("eventbridge-scheduled-2026-07-22.json").expect_success();
    assert_eq!(r.stop_reason, StopReason::NothingToDo);
    assert_eq!(r.watermark_before, Some(date("2026-07-20")));
    assert_eq!(dump(&store, ""), after, "a second run changed the bucket");
}

/// Asserts what the scheduled event's run over `generated` (07-18
/// compactable, 07-19 with flights lacking an index row, 07-20 after it)
/// reported and left: a first mismatch on 07-19 naming exactly the
/// generated missing flights, the watermark at 07-18 with 07-18 compacted,
/// and every index file of 07-19 and 07-20 still there. Returns the bucket
/// as read back.
fn assert_first_mismatch(
    r: &RunReport,
    store: &S3Store,
    generated: &Generated,
) -> BTreeMap<String, Dumped> {
    assert_eq!(r.mismatch_date, Some(date("2026-07-19")));
    assert_eq!(r.mismatch_uuids, generated.missing["2026-07-19"]);
    assert_eq!(r.mismatch_runs, 1);
    assert_eq!(r.stop_reason, StopReason::Mismatch);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-18")));
    let after = dump(store, "");
    assert_compacted(&after, "2026-07-18", &generated.rows["2026-07-18"]);
    for d in ["2026-07-19", "2026-07-20"] {
        for k in &generated.index_keys[d] {
            assert!(after.contains_key(k), "{k} touched past the mismatch");
        }
    }
    after
}

/// Asserts that a run over the unreadable watermark `wm_key` reported a
/// failure naming that file and stopped on the error, and that `store`'s
/// `index/` is still `index_before`.
fn assert_watermark_failure(
    r: &RunReport,
    store: &S3Store,
    wm_key: &str,
    index_before: &BTreeMap<String, Dumped>,
) {
    assert!(r.errors.iter().any(|e| e.contains(wm_key)), "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::Error);
    assert_eq!(&dump(store, "index/"), index_before, "a failed run changed index/");
}

/// A parity mismatch answers a `Mismatch` error carrying the report; the
/// same EventBridge event delivered again (Lambda's async retry) does not
/// count twice, another invocation does.
#[tokio::test]
async fn a_mismatch_is_a_mismatch_error_and_a_redelivered_event_counts_once() {
    let Some(cargo_lambda) = require_cargo_lambda("a_mismatch_is_a_mismatch_error") else {
        return;
    };
    init_logs();
    let store = bucket("rt-mismatch").await;
    let generated = generate(
        &store,
        json!({"seed": 12, "days": [
            {"date": "2026-07-18", "flights": 6},
            {"date": "2026-07-19", "flights": 8, "unindexed": 2},
            {"date": "2026-07-20", "flights": 5}
        ]}),
    );
    let lambda = LocalLambda::start(&cargo_lambda, &store, &[]);

    let r = lambda.invoke_file("eventbridge-scheduled-2026-07-22.json").expect_error("Mismatch");
    assert_first_mismatch(&r, &store, &generated);
    assert_eq!(r.mismatch_uuid_count, 2);

    // Lambda retries a failed asynchronous invocation with the same event.
    let again =
        lambda.invoke_file("eventbridge-scheduled-2026-07-22.json").expect_error("Mismatch");
    assert_eq!(again.mismatch_runs, 1, "a redelivered event counted twice");

    // A console invocation is another run.
    let other = lambda.invoke_file("console-now.json").expect_error("Mismatch");
    assert_eq!(other.mismatch_runs, 2);
    let wm = watermark(&dump(&store, "_compaction_state/")).unwrap();
    assert_eq!(wm["mismatch_date"], "2026-07-19");
    assert_eq!(wm["mismatch_runs"], 2);
    assert_eq!(wm["last_compacted_date"], "2026-07-18");
}

/// A run that fails answers a `Failure` error with the report; an event the
/// handler cannot read too; and the same function process goes on serving.
#[tokio::test]
async fn a_failure_is_a_failure_error_and_the_function_keeps_serving() {
    let Some(cargo_lambda) = require_cargo_lambda("a_failure_is_a_failure_error") else {
        return;
    };
    init_logs();
    let store = bucket("rt-failure").await;
    let generated =
        generate(&store, json!({"seed": 13, "days": [{"date": "2026-07-18", "flights": 4}]}));
    let wm_key = "_compaction_state/watermark.json";
    store.put(wm_key, b"{not json".to_vec().into(), PutMode::Create, None).await.unwrap();
    let lambda = LocalLambda::start(&cargo_lambda, &store, &[]);
    let before = dump(&store, "index/");

    let r = lambda.invoke_file("console-now.json").expect_error("Failure");
    assert_watermark_failure(&r, &store, wm_key, &before);

    let r = lambda.invoke(r#"{"date": "2026-13-45"}"#).expect_error("Failure");
    assert!(
        r.errors[0].contains("field \"date\"") && r.errors[0].contains("YYYY-MM-DD"),
        "{:?}",
        r.errors
    );

    // The operator fixes the watermark (the Python job's format); the same
    // process compacts on the next invocation.
    let etag = dump(&store, wm_key)[wm_key].etag.clone();
    let python = br#"{"last_compacted_date": "2026-07-17"}"#.to_vec();
    store.put(wm_key, python.into(), PutMode::Update(etag), None).await.unwrap();
    let r = lambda.invoke_file("console-now.json").expect_success();
    assert_eq!(r.watermark_before, Some(date("2026-07-17")));
    assert_eq!(r.last_compacted_date, Some(date("2026-07-20")));
    assert_compacted(&dump(&store, "index/"), "2026-07-18", &generated.rows["2026-07-18"]);
    // The whole log: the report's JSON line after "run finished" can be longer than the tail.
    let log = std::fs::read_to_string(&lambda.function.log).unwrap_or_default();
    assert!(log.contains("run finished"), "function logs go to its log file");
    // Every outcome logs its report as one JSON line, the report itself
    // (not escaped in a Diagnostic), the Success's too.
    let logged = lambda.function.run_reports();
    let statuses: Vec<&str> =
        (logged.iter()).map(|r| r["last_run_status"].as_str().unwrap_or("?")).collect();
    assert_eq!(statuses, ["Failure", "Failure", "Success"], "{}", lambda.function.log_tail());
    assert_eq!(logged[2], serde_json::to_value(&r).unwrap());
}

/// `qemu-aarch64-static` or `qemu-aarch64` on `PATH`.
fn qemu_aarch64() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["qemu-aarch64-static", "qemu-aarch64"]
        .iter()
        .find_map(|name| std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()))
}

/// `scripts/check_elf.py PATH`: its JSON verdict and exit code.
fn check_elf(path: &Path) -> (Value, i32) {
    let out = Command::new(python())
        .arg(root().join("scripts/check_elf.py"))
        .arg(path)
        .args(["--machine", "aarch64", "--max-glibc", "2.34"])
        .output()
        .expect("run scripts/check_elf.py");
    let verdict = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("check_elf.py said no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr))
    });
    (verdict, out.status.code().unwrap_or(-1))
}

/// The file a deployment uploads, run as the function: the arm64 release
/// bootstrap that `sam build` made (`scripts/release-bootstrap.sh`, path in
/// `RELEASE_BOOTSTRAP`; `make test-release`, part of `make test`), checked
/// again to be an aarch64 ELF needing no glibc newer than provided.al2023's
/// 2.34 (and the host test build refused by the same check), then run under
/// qemu-aarch64 on the Runtime API of `cargo lambda watch --only-lambda-apis`
/// over an archive on the S3 server: a Success, a Mismatch and a Failure
/// invocation, each answered as its report says, the bucket read back with
/// pyarrow. Prints the bootstrap's size and its cold start: from the process
/// start to its first poll of the Runtime API (under emulation: an upper
/// bound of what it is on Graviton).
///
/// Ignored in a plain `cargo test` (it needs the release build, minutes of
/// cross-compiling); `make test` runs it with `--ignored`.
#[tokio::test]
#[ignore = "needs RELEASE_BOOTSTRAP from scripts/release-bootstrap.sh: `make test-release`"]
async fn the_release_bootstrap_under_qemu_answers_success_mismatch_and_failure() {
    let bootstrap = PathBuf::from(std::env::var_os("RELEASE_BOOTSTRAP").expect(
        "RELEASE_BOOTSTRAP is not set: `make test-release` builds the bootstrap with \
         scripts/release-bootstrap.sh (sam build) and runs this test with it",
    ));
    let cargo_lambda = cargo_lambda().expect(
        "cargo-lambda not found in .tools/lambda/bin or on PATH (scripts/setup-tools.sh lambda)",
    );
    let qemu =
        if std::env::consts::ARCH == "aarch64" {
            None
        } else {
            Some(qemu_aarch64().expect(
                "qemu-aarch64-static not on PATH: `scripts/setup-tools.sh qemu` installs it",
            ))
        };
    let sysroot = PathBuf::from(
        std::env::var_os("QEMU_LD_PREFIX").unwrap_or_else(|| "/usr/aarch64-linux-gnu".into()),
    );
    assert!(
        qemu.is_none() || sysroot.join("lib/ld-linux-aarch64.so.1").exists(),
        "no arm64 C library under {} (`scripts/setup-tools.sh qemu`)",
        sysroot.display()
    );
    init_logs();

    // The file: aarch64, glibc <= 2.34; the check refuses the host build.
    let (elf, code) = check_elf(&bootstrap);
    assert_eq!(code, 0, "{} fails the check: {elf}", bootstrap.display());
    assert_eq!(elf["machine"], "aarch64", "{elf}");
    let host = PathBuf::from(env!("CARGO_BIN_EXE_archive-compaction"));
    if std::env::consts::ARCH != "aarch64" {
        let (verdict, code) = check_elf(&host);
        assert_eq!(code, 1, "the check passed the host build: {verdict}");
        assert!(verdict["problems"][0].as_str().unwrap().contains("not aarch64"), "{verdict}");
    }
    let bytes = std::fs::read(&bootstrap).unwrap();
    let sha256: String = {
        use sha2::Digest;
        sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
    };
    eprintln!(
        "release bootstrap {}: {} bytes ({:.1} MiB), sha256 {}…, {} ELF, glibc symbols up to {} \
         (provided.al2023: 2.34), needs {}",
        bootstrap.display(),
        bytes.len(),
        bytes.len() as f64 / 1048576.0,
        &sha256[..16],
        elf["machine"].as_str().unwrap(),
        elf["max_glibc"].as_str().unwrap_or("none"),
        elf["needed"]
            .as_array()
            .map(|n| n.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
            .unwrap_or_default()
    );

    let store = bucket("rt-release").await;
    let generated = generate(
        &store,
        json!({"seed": 29, "days": [
            {"date": "2026-07-18", "flights": 6, "foreign": true},
            {"date": "2026-07-19", "flights": 8, "unindexed": 2},
            {"date": "2026-07-20", "flights": 5}
        ]}),
    );
    let function = Function::Arm64 { bootstrap: bootstrap.clone(), qemu: qemu.clone(), sysroot };
    let (lambda, recorder) = LocalLambda::start_with(&cargo_lambda, &store, &[], &function);
    let started = started_at(guarded_pid(&lambda.function));
    let first_poll = recorder.unwrap().wait(Duration::from_secs(120)).unwrap_or_else(|| {
        panic!("the bootstrap never polled the Runtime API\n{}", lambda.function.log_tail())
    });
    eprintln!(
        "cold start: {:.0} ms from the process start to its first GET /runtime/invocation/next \
         ({}; /proc times, 10 ms resolution)",
        (first_poll - started) * 1000.0,
        match &qemu {
            Some(q) => format!("under {}, emulated", q.display()),
            None => "native aarch64".into(),
        }
    );
    let before = dump(&store, "");

    // 1. Success: one date compacted, the rows read back with pyarrow.
    let t = Instant::now();
    let r = lambda.invoke_file("console-date.json").expect_success();
    assert_eq!(r.days.len(), 1, "{:?}", r.days);
    assert_eq!(date_of(&r, "2026-07-18").as_deref(), Some("compacted"));
    assert_eq!(r.files_compacted, 6);
    assert_eq!(r.rows_written, 6);
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-18", &generated.rows["2026-07-18"]);
    for f in &generated.foreign {
        assert_eq!(after.get(f), before.get(f), "foreign object {f} touched");
    }
    eprintln!(
        "invocation 1, events/console-date.json: Success, {} files compacted into one, {} rows \
         ({:.1} s)",
        r.files_compacted,
        r.rows_written,
        t.elapsed().as_secs_f64()
    );

    // 2. Mismatch: the scheduled event stops at 2026-07-19, the report
    // names the two flights without an index row.
    let t = Instant::now();
    let r = lambda.invoke_file("eventbridge-scheduled-2026-07-22.json").expect_error("Mismatch");
    let took = t.elapsed();
    let after = assert_first_mismatch(&r, &store, &generated);
    eprintln!(
        "invocation 2, events/eventbridge-scheduled-2026-07-22.json: errorType Mismatch, \
         mismatch_date {}, {} flights without an index row, mismatch_runs {} ({:.1} s)",
        r.mismatch_date.unwrap(),
        r.mismatch_uuid_count,
        r.mismatch_runs,
        took.as_secs_f64()
    );

    // 3. Failure: an unreadable watermark, named in the report; index/
    // untouched.
    let wm_key = "_compaction_state/watermark.json";
    let etag = after[wm_key].etag.clone();
    store.put(wm_key, b"{not json".to_vec().into(), PutMode::Update(etag), None).await.unwrap();
    let index_before = dump(&store, "index/");
    let t = Instant::now();
    let r = lambda.invoke_file("console-now.json").expect_error("Failure");
    let took = t.elapsed();
    assert_watermark_failure(&r, &store, wm_key, &index_before);
    eprintln!(
        "invocation 3, events/console-now.json over an unreadable watermark: errorType Failure, \
         errors {:?} ({:.1} s)",
        r.errors,
        took.as_secs_f64()
    );
    assert!(
        lambda.function.log_tail().contains("run finished"),
        "the bootstrap's logs go to its log file"
    );
}
