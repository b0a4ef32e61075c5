//! A signal stops a run cleanly: SIGTERM or SIGINT sent to the real binary at
//! several moments of a run (listing, reading, between commit phases) leaves
//! a bucket the next run is not blocked by, and that run leaves every row
//! exactly once. A signal with no run under way, or a second one, exits at
//! once; Lambda's shutdown signal stops an invocation as the CLI's signals
//! do.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::common::*;
use archive_compaction::app::{Deps, handle};
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::report::{Status, StopReason};
use archive_compaction::infra::storage::S3Store;
use serde_json::json;

/// The real binary through the proxy, sent `signal` while the proxy holds
/// the first request matching `hold` (see faultproxy.py), which is let go
/// once the run has logged the stop request: the signal lands in the phase
/// that request belongs to however loaded the machine is (a signal sent
/// on a log line raced the run: 200 ms late it hit the next phase).
/// Returns its output.
fn signalled_run(store: &S3Store, proxy: &Proxy, hold: &str, signal: &str) -> Output {
    let held_before = proxy.stats()["held"].as_u64();
    proxy.set(json!({ "hold": hold }));
    let mut cmd = cli_command(store, &["run", "--now", NOW]);
    cmd.env("AWS_ENDPOINT_URL", proxy.endpoint())
        .env("LOG_LEVEL", "info,archive_compaction=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn the binary");
    let pid = child.id().to_string();
    let stderr = child.stderr.take().unwrap();
    let (stop_logged, stop_seen) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            if line.contains("stop requested") {
                let _ = stop_logged.send(());
            }
            log.push_str(&line);
            log.push('\n');
        }
        log
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let held = loop {
        if proxy.stats()["held"].as_u64() > held_before {
            break true;
        }
        if child.try_wait().unwrap().is_some() || std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if held {
        let ok =
            std::process::Command::new("kill").args([format!("-{signal}"), pid]).status().unwrap();
        assert!(ok.success());
        let _ = stop_seen.recv_timeout(Duration::from_secs(60));
    }
    proxy.set(json!({}));
    let out = child.wait_with_output().unwrap();
    let log = reader.join().unwrap();
    assert!(held, "no request matched {hold:?}:\n{log}");
    Output { stderr: log.into_bytes(), ..out }
}

#[tokio::test]
async fn sigterm_and_sigint_stop_a_run_cleanly_at_each_moment_and_the_next_run_is_not_blocked() {
    init_logs();
    let proxy = Proxy::start();
    // (moment, the request the proxy holds while the signal lands, signal)
    let day18 = "/[^/?]+/index/year=2026/month=07/day=18/";
    for (n, (when, hold, signal)) in [
        // Listing the first date.
        (
            "walking dates",
            "^GET /[^/?]+/\\?.*prefix=index/year=2026/month=07/day=18/".to_string(),
            "TERM",
        ),
        // Reading its inputs (listed, then the GETs).
        ("partition listed", format!("^GET {day18}"), "TERM"),
        // Between commit phases: manifest and output written, inputs not
        // yet verified or deleted.
        ("manifest and output written", format!("^HEAD {day18}compacted-"), "INT"),
        // Between dates: the first date done, its watermark not yet written.
        ("date done", "^PUT /[^/?]+/_compaction_state/watermark".to_string(), "TERM"),
    ]
    .into_iter()
    .enumerate()
    {
        let store = bucket(&format!("slip-sigterm-{n}")).await;
        let generated = generate(&store, three_days(270 + n as u64));
        let out = signalled_run(&store, &proxy, &hold, signal);
        let log = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{when}: {log}");
        let r = report_of(&out);
        assert_eq!(r["stop_reason"], "interrupted", "{when}: {r}");
        assert_eq!(r["last_run_status"], "Failure");
        let err = r["errors"][0].as_str().unwrap();
        assert!(err.contains(&format!("stopped by SIG{signal}")), "{when}: {err}");
        assert!(log.contains("stop requested"), "{when}: {log}");
        let mid = dump(&store, "");
        let manifests = |o: &BTreeMap<String, Dumped>| {
            o.keys().filter(|k| k.starts_with("_compaction_state/manifests/")).count()
        };
        let wm = watermark(&mid).map(|w| w["last_compacted_date"].clone());
        let days: Vec<(String, String)> = (r["days"].as_array().unwrap().iter())
            .map(|d| (d["date"].as_str().unwrap().into(), d["action"].as_str().unwrap().into()))
            .collect();
        if when == "date done" {
            // 07-18 went through whole (its watermark written, or left for
            // the next run to pass); 07-19 was not started.
            assert_eq!(days, [("2026-07-18".into(), "compacted".into())], "{when}");
            assert!(err.contains("date 2026-07-19 was not started") || wm.is_none(), "{err}");
            assert_eq!(manifests(&mid), 0);
        } else {
            // The date under way stopped before its next write: before
            // its manifest (listing, reading: nothing written), or with
            // its manifest and output written, its inputs left for
            // recovery, as at a crash.
            assert_eq!(days, [("2026-07-18".into(), "failed".into())], "{when}");
            assert!(err.contains("a destructive step was not started"), "{err}");
            assert_eq!(wm, None, "{when}");
            let left = usize::from(when == "manifest and output written");
            assert_eq!(manifests(&mid), left, "{when}: manifests left");
        }
        // Stopped: not every date went through.
        assert_ne!(
            watermark(&mid).map(|w| w["last_compacted_date"].clone()),
            Some(json!("2026-07-20")),
            "{when}: the run was not stopped"
        );

        // The next run (as the scheduled one would be) is not blocked and
        // leaves every row exactly once.
        let next = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
        let recovered: Vec<&str> = next.recovered.iter().map(|m| m.action.as_str()).collect();
        let want: &[&str] = if n == 2 { &["completed"] } else { &[] };
        assert_eq!(recovered, want, "{when}: what the next run's recovery did");
        assert_eq!(next.last_run_status, Status::Success, "{when}: {:?}", next.errors);
        assert_ne!(next.stop_reason, StopReason::LeaseHeld);
        assert_all_compacted(&store, &generated, "2026-07-20", when);
    }
}

#[tokio::test]
async fn a_signal_with_no_run_under_way_or_a_second_one_exits_at_once() {
    init_logs();
    let store = bucket("slip-second-signal").await;
    generate(&store, three_days(275));
    let proxy = Proxy::start();
    proxy.set(json!({"latency_ms": 400}));
    let mut cmd = cli_command(&store, &["run", "--now", NOW]);
    cmd.env("AWS_ENDPOINT_URL", proxy.endpoint()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id().to_string();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            if line.unwrap().contains("walking dates") {
                for _ in 0..2 {
                    std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap();
                    std::thread::sleep(Duration::from_millis(100));
                }
                break;
            }
        }
    });
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
}

#[tokio::test]
async fn lambdas_shutdown_signal_stops_an_invocation_like_the_cli() {
    let (store, before) = slip_world("slip-lambda-stop", 276, &[]).await;
    let deps = Deps::from_parts(config(&store, &[]), store.clone(), None, None);
    // What the listener in `main` does on SIGTERM while an invocation runs.
    deps.stop.request("SIGTERM");
    let e = handle(
        &deps,
        lambda_runtime::LambdaEvent::new(json!({"now": NOW}), lambda_runtime::Context::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(e.0.last_run_status, Status::Failure);
    assert_eq!(e.0.stop_reason, StopReason::Interrupted);
    assert_eq!(e.0.resume_date, Some(date("2026-07-18")));
    assert!(e.0.errors[0].contains("stopped by SIGTERM: date 2026-07-18 was not started"));
    assert_eq!(dump(&store, ""), before, "the lease is released, nothing else written");
}
