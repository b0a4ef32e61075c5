//! Reporting end to end: real runs against the S3 server, published to a
//! real mosquitto (started per test, so retained topics never mix) and to
//! ministack's CloudWatch, read back by an independent subscriber / the
//! CloudWatch API. Nothing is mocked.
//!
//! CloudWatch always uses ministack: under `TEST_S3_SERVER=moto` a dedicated
//! ministack is started for it (moto does not speak the CBOR protocol of the
//! current aws-sdk-cloudwatch).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::common::*;
use archive_compaction::app::{Deps, invoke};
use archive_compaction::commands::run::RunOptions;
use archive_compaction::data::report::{RunReport, Status, StopReason};
use archive_compaction::infra::storage::S3Store;
use aws_sdk_cloudwatch::types::{Dimension, StandardUnit, Statistic};
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS, TlsConfiguration, Transport};
use serde_json::{Value, json};

const ROOT: &str = "SkyFollower/archive-compaction";
const NUMERIC: [&str; 5] = [
    "files_compacted",
    "files_delete_failed",
    "days_compacted",
    "mismatch_uuid_count",
    "mismatch_runs",
];

// ---------------------------------------------------------------------------
// Brokers and subscribers
// ---------------------------------------------------------------------------

/// A mosquitto of this test's own (serve.py), stopped when dropped or when
/// the test process exits. `env`: MOSQUITTO_PASSWORD_FILE,
/// MOSQUITTO_TLS_DIR, MOSQUITTO_MAX_PACKET_SIZE (see serve.py).
fn start_broker(env: &[(&str, &Path)]) -> Server {
    let port = free_port();
    let env: Vec<(&str, &std::ffi::OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let process = Supervised::spawn(
        serve_py("mosquitto", port, &env),
        "serve.py (run scripts/setup-tools.sh)",
    );
    assert_eq!(
        process.read_line().trim(),
        "ready",
        "mosquitto did not start; see /tmp/ac-mosquitto-{port}.log"
    );
    Server { port, process }
}

/// A topic of its own for a subscriber's end marker (not retained, so it
/// is never among the topics a test reads back).
fn end_marker() -> String {
    format!("test-end/{}", uuid::Uuid::now_v7().simple())
}

/// Every retained message on the broker, topic -> payload, as a fresh
/// subscriber to `#` sees it. Panics if a message is not retained.
async fn retained(port: u16, tls_ca: Option<&Path>) -> BTreeMap<String, String> {
    let mut opts = MqttOptions::new(
        format!("test-subscriber-{}", uuid::Uuid::now_v7().simple()),
        "127.0.0.1",
        port,
    );
    opts.set_clean_session(true);
    if let Some(ca) = tls_ca {
        opts.set_transport(Transport::tls_with_config(TlsConfiguration::Simple {
            ca: std::fs::read(ca).unwrap(),
            alpn: None,
            client_auth: None,
        }));
    }
    let (client, mut events) = AsyncClient::new(opts, 10);
    client.subscribe("#", QoS::AtLeastOnce).await.unwrap();
    let mut got = BTreeMap::new();
    let end = end_marker();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // mosquitto queues every retained message when it handles the
        // SUBSCRIBE; a message published after the SUBACK is queued behind
        // them: once it is back, all were delivered (no quiet moment
        // guessed, which a loaded machine can stretch).
        match tokio::time::timeout(left, events.poll()).await {
            Err(_) => panic!("the end marker {end} did not come back within 60 s"),
            Ok(Ok(Event::Incoming(Packet::SubAck(_)))) => {
                client.publish(end.as_str(), QoS::AtLeastOnce, false, "end").await.unwrap()
            }
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) if p.topic == end => break,
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) => {
                assert!(p.retain, "{} was delivered but is not retained", p.topic);
                got.insert(p.topic, String::from_utf8(p.payload.to_vec()).unwrap());
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("subscriber: {e}"),
        }
    }
    let _ = client.disconnect().await;
    got
}

/// The ten statistic payloads, by name.
fn statistics(all: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let prefix = format!("{ROOT}/statistic/");
    all.iter()
        .filter_map(|(t, p)| t.strip_prefix(&prefix).map(|n| (n.to_string(), p.clone())))
        .collect()
}

fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Exactly the ten statistic topics and the nine discovery configs, every
/// config field checked (`bucket`: the one in `configuration_url`).
fn assert_topics(
    all: &BTreeMap<String, String>,
    want_stats: &BTreeMap<String, String>,
    bucket: &str,
) {
    let topics: BTreeSet<String> = all.keys().cloned().collect();
    let mut want: BTreeSet<String> =
        want_stats.keys().map(|n| format!("{ROOT}/statistic/{n}")).collect();
    want.extend(
        SENSORS
            .iter()
            .map(|n| format!("homeassistant/sensor/SkyFollower_archive_compaction_{n}/config")),
    );
    assert_eq!(topics, want, "retained topics");
    assert_eq!(want_stats.len(), 10);
    assert_eq!(&statistics(all), want_stats, "statistic payloads");

    let mut unique_ids = BTreeSet::new();
    for name in SENSORS {
        let topic = format!("homeassistant/sensor/SkyFollower_archive_compaction_{name}/config");
        let c: Value = serde_json::from_str(&all[&topic]).expect("discovery config is JSON");
        let keys: BTreeSet<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
        // The count's state is the exact count its uuids payload carries
        // (the list may be cut), read from the list's own topic so that
        // state and attributes change together.
        let (state_from, template) = match name {
            "mismatch_uuid_count" => (
                "mismatch_uuids",
                Some(
                    "{{ value_json.count if value_json.count is defined else value_json.uuids | length }}",
                ),
            ),
            "last_compacted_date" | "mismatch_date" => {
                (name, Some("{{ 'unknown' if value == 'None' else value }}"))
            }
            _ => (name, None),
        };
        assert_eq!(c["state_topic"], format!("{ROOT}/statistic/{state_from}"), "{name}");
        assert_eq!(c["value_template"].as_str(), template, "{name}: value_template");
        assert!(c["name"].as_str().is_some_and(|n| !n.is_empty()), "{name}: name");
        let id = format!("SkyFollower_archive_compaction_{name}");
        assert_eq!(c["unique_id"], id, "{name}");
        assert_eq!(c["object_id"], id, "{name}: object_id (the entity id)");
        assert!(unique_ids.insert(c["unique_id"].to_string()), "{name}");
        assert!(
            c["icon"].as_str().is_some_and(|i| i.starts_with("mdi:")),
            "{name}: icon {}",
            c["icon"]
        );
        assert_eq!(
            c["device"],
            json!({
                "identifiers": ["SkyFollower_archive_compaction"],
                "name": "SkyFollower Archive Compaction",
                "manufacturer": "SkyFollower",
                "model": "Archive Compaction",
                "configuration_url": format!("https://s3.console.aws.amazon.com/s3/buckets/{bucket}"),
                "sw_version": env!("CARGO_PKG_VERSION"),
            }),
            "{name}: device"
        );
        if NUMERIC.contains(&name) {
            assert_eq!(c["state_class"], "measurement", "{name}");
        } else {
            assert!(!keys.contains("state_class"), "{name}: not a number");
        }
        if name == "last_run_at" {
            assert_eq!(c["device_class"], "timestamp");
        } else {
            assert!(!keys.contains("device_class"), "{name}: device_class");
        }
        if name == "mismatch_uuid_count" {
            assert_eq!(c["json_attributes_topic"], format!("{ROOT}/statistic/mismatch_uuids"));
        } else {
            assert!(!keys.contains("json_attributes_topic"), "{name}");
        }
        let allowed: BTreeSet<&str> = [
            "name",
            "unique_id",
            "object_id",
            "state_topic",
            "value_template",
            "icon",
            "device",
            "state_class",
            "device_class",
            "json_attributes_topic",
        ]
        .into();
        assert!(keys.is_subset(&allowed), "{name}: unexpected keys {keys:?}");
    }
    let uuids: Value = serde_json::from_str(&want_stats["mismatch_uuids"]).unwrap();
    assert!(uuids["uuids"].is_array(), "mismatch_uuids is {{\"uuids\": [...]}}");
}

/// A subscriber to `#` connected before a run: the messages the run
/// publishes, in the order the broker delivers them.
struct Live {
    client: AsyncClient,
    got: std::sync::Arc<Mutex<Vec<(String, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Live {
    async fn start(port: u16) -> Live {
        let mut opts = MqttOptions::new(
            format!("test-live-{}", uuid::Uuid::now_v7().simple()),
            "127.0.0.1",
            port,
        );
        opts.set_clean_session(true);
        let (client, mut events) = AsyncClient::new(opts, 10);
        client.subscribe("#", QoS::AtLeastOnce).await.unwrap();
        let got = std::sync::Arc::new(Mutex::new(Vec::new()));
        let (ready, subscribed) = tokio::sync::oneshot::channel();
        let mut ready = Some(ready);
        let sink = got.clone();
        let task = tokio::spawn(async move {
            loop {
                match events.poll().await {
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                    }
                    // Retained messages sent on subscribing are not this run's.
                    Ok(Event::Incoming(Packet::Publish(p))) if !p.retain => {
                        sink.lock()
                            .unwrap()
                            .push((p.topic, String::from_utf8(p.payload.to_vec()).unwrap()));
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), subscribed)
            .await
            .expect("live subscriber: no SUBACK")
            .unwrap();
        Live { client, got, task }
    }

    /// What came, once an end marker published now has come back: the run
    /// awaited the PUBACK of each of its messages, so the broker queued
    /// them for this subscriber before the marker (no quiet moment guessed).
    async fn finish(self) -> Vec<(String, String)> {
        let end = end_marker();
        self.client.publish(end.as_str(), QoS::AtLeastOnce, false, "end").await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let got = loop {
            {
                let mut got = self.got.lock().unwrap();
                if let Some(i) = got.iter().position(|(t, _)| *t == end) {
                    got.truncate(i);
                    break std::mem::take(&mut *got);
                }
            }
            assert!(
                Instant::now() < deadline,
                "the end marker {end} did not come back within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let _ = self.client.disconnect().await;
        self.task.abort();
        got
    }
}

/// The nine configs first, then the statistics a run publishes, in order.
fn assert_order(got: &[(String, String)], stats: &[&str]) {
    let topics: Vec<String> = got.iter().map(|(t, _)| t.clone()).collect();
    let mut want: Vec<String> = SENSORS
        .iter()
        .map(|n| format!("homeassistant/sensor/SkyFollower_archive_compaction_{n}/config"))
        .collect();
    want.extend(stats.iter().map(|n| format!("{ROOT}/statistic/{n}")));
    assert_eq!(topics, want, "publish order");
}

/// Settings for a run, as (variable, value).
type Env = Vec<(&'static str, String)>;

fn mqtt_env(port: u16, extra: &[(&'static str, String)]) -> Env {
    let mut env = vec![
        ("MQTT_HOST", "127.0.0.1".to_string()),
        ("MQTT_PORT", port.to_string()),
        ("MQTT_TIMEOUT_SECONDS", "2".to_string()),
    ];
    env.extend(extra.iter().cloned());
    env
}

fn deps_with(
    store: &S3Store,
    env: &[(&str, String)],
    cloudwatch: Option<aws_sdk_cloudwatch::Client>,
) -> Deps {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Deps::from_parts(config(store, &env), store.clone(), cloudwatch, None)
}

/// Overwrites watermark.json with something that is not JSON: the next run is a Failure.
async fn break_watermark(store: &S3Store) {
    sdk_client(&endpoint())
        .put_object()
        .bucket(store.bucket())
        .key("_compaction_state/watermark.json")
        .body(b"{not json".to_vec().into())
        .send()
        .await
        .unwrap();
}

/// Deletes the flight objects of `date` whose uuids have no index row, so
/// that the date passes parity.
async fn resolve_mismatch(store: &S3Store, generated: &Generated, date: &str) {
    let client = sdk_client(&endpoint());
    let missing = &generated.missing[date];
    assert!(!missing.is_empty());
    for key in &generated.flights[date] {
        if missing.iter().any(|u| key.contains(u.as_str())) {
            client.delete_object().bucket(store.bucket()).key(key).send().await.unwrap();
        }
    }
}

fn assert_clean(report: &RunReport) {
    assert!(report.report_errors.is_empty(), "report_errors: {:?}", report.report_errors);
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

// ---------------------------------------------------------------------------
// MQTT
// ---------------------------------------------------------------------------

#[tokio::test]
async fn mqtt_topics_and_discovery_after_success_mismatch_and_failure() {
    init_logs();
    let broker = start_broker(&[]);
    let store = bucket("rep-mqtt").await;
    let generated = generate(
        &store,
        json!({"seed": 41, "days": [
            {"date": "2026-07-18", "flights": 6},
            {"date": "2026-07-19", "flights": 8, "unindexed": 2}
        ]}),
    );
    let deps = deps_with(&store, &mqtt_env(broker.port, &[]), None);
    let b = store.bucket().to_string();

    // Success: cutoff 2026-07-18.
    let live = Live::start(broker.port).await;
    let r = invoke(&deps, &RunOptions::at(at("2026-07-20T04:50:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_clean(&r);
    assert_order(&live.finish().await, &archive_compaction::data::mqtt::STATISTICS);
    let all = retained(broker.port, None).await;
    assert_topics(
        &all,
        &expect(&[
            ("files_compacted", "6"),
            ("files_delete_failed", "0"),
            ("days_compacted", "1"),
            ("last_compacted_date", "2026-07-18"),
            ("mismatch_date", "None"),
            ("mismatch_uuid_count", "0"),
            ("mismatch_uuids", r#"{"uuids":[],"count":0,"truncated":false}"#),
            ("mismatch_runs", "0"),
            ("last_run_at", "2026-07-20T04:50:00.000000+00:00"),
            ("last_run_status", "Success"),
        ]),
        &b,
    );

    // Mismatch: 2026-07-19 has two flights without an index row.
    let r = invoke(&deps, &RunOptions::at(at("2026-07-21T04:50:00.25Z"))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_clean(&r);
    let missing = sorted(&generated.missing["2026-07-19"]);
    assert_eq!(missing.len(), 2);
    let mismatch_uuids = format!(r#"{{"uuids":{},"count":2,"truncated":false}}"#, json!(missing));
    let all = retained(broker.port, None).await;
    assert_topics(
        &all,
        &expect(&[
            ("files_compacted", "0"),
            ("files_delete_failed", "0"),
            ("days_compacted", "0"),
            ("last_compacted_date", "2026-07-18"),
            ("mismatch_date", "2026-07-19"),
            ("mismatch_uuid_count", "2"),
            ("mismatch_uuids", &mismatch_uuids),
            ("mismatch_runs", "1"),
            ("last_run_at", "2026-07-21T04:50:00.250000+00:00"),
            ("last_run_status", "Mismatch"),
        ]),
        &b,
    );

    // Failure: watermark.json is not JSON. The run knows its time, its
    // status and that it compacted nothing; the watermark and the mismatch
    // it could not read are not published, so the last known ones stay.
    break_watermark(&store).await;
    let live = Live::start(broker.port).await;
    let r = invoke(&deps, &RunOptions::at(at("2026-07-22T04:50:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Failure);
    assert_eq!(r.stop_reason, StopReason::Error);
    assert_clean(&r);
    assert_order(
        &live.finish().await,
        &[
            "files_compacted",
            "files_delete_failed",
            "days_compacted",
            "last_run_at",
            "last_run_status",
        ],
    );
    let all = retained(broker.port, None).await;
    assert_topics(
        &all,
        &expect(&[
            ("files_compacted", "0"),
            ("files_delete_failed", "0"),
            ("days_compacted", "0"),
            ("last_compacted_date", "2026-07-18"),
            ("mismatch_date", "2026-07-19"),
            ("mismatch_uuid_count", "2"),
            ("mismatch_uuids", &mismatch_uuids),
            ("mismatch_runs", "1"),
            ("last_run_at", "2026-07-22T04:50:00.000000+00:00"),
            ("last_run_status", "Failure"),
        ]),
        &b,
    );
}

#[tokio::test]
async fn mismatch_runs_counts_consecutive_blocked_invocations() {
    init_logs();
    let broker = start_broker(&[]);
    let store = bucket("rep-runs").await;
    let generated = generate(
        &store,
        json!({"seed": 42, "days": [
            {"date": "2026-07-18", "flights": 5},
            {"date": "2026-07-19", "flights": 6, "unindexed": 2},
            {"date": "2026-07-20", "flights": 4, "unindexed": 1}
        ]}),
    );
    let deps = deps_with(&store, &mqtt_env(broker.port, &[]), None);
    let now = at("2026-07-22T04:50:00Z"); // cutoff 2026-07-20
    let mut step = 0;
    let mut check = async |event: &str, runs: u32, mismatch: Option<&str>| {
        step += 1;
        let mut opts = RunOptions::at(now);
        opts.event_id = Some(event.to_string());
        let r = invoke(&deps, &opts).await;
        assert_clean(&r);
        assert!(r.errors.is_empty(), "step {step}: {:?}", r.errors);
        let want_status = if mismatch.is_some() { Status::Mismatch } else { Status::Success };
        assert_eq!(r.last_run_status, want_status, "step {step}");
        assert_eq!(r.mismatch_runs, runs, "step {step}: report");
        assert_eq!(r.mismatch_date, mismatch.map(date), "step {step}");
        let wm = watermark(&dump(&store, "_compaction_state/")).unwrap();
        assert_eq!(wm["mismatch_runs"], runs, "step {step}: watermark.json {wm}");
        let stats = statistics(&retained(broker.port, None).await);
        assert_eq!(stats["mismatch_runs"], runs.to_string(), "step {step}: MQTT");
        assert_eq!(stats["mismatch_date"], mismatch.unwrap_or("None"), "step {step}: MQTT");
    };
    check("event-1", 1, Some("2026-07-19")).await;
    check("event-2", 2, Some("2026-07-19")).await;
    // EventBridge redelivers event-2: the same blocked invocation, counted once.
    check("event-2", 2, Some("2026-07-19")).await;
    // 2026-07-19 passes now; the walk stops at 2026-07-20: a new date starts at 1.
    resolve_mismatch(&store, &generated, "2026-07-19").await;
    check("event-3", 1, Some("2026-07-20")).await;
    // Everything passes: cleared.
    resolve_mismatch(&store, &generated, "2026-07-20").await;
    check("event-4", 0, None).await;
}

/// A day of 20,000 flights whose index rows never
/// landed (no index file at all). The CLI run stops there (exit 2) and
/// still publishes every topic: `mismatch_uuids` carries the first 100
/// uuids with the exact count, every payload is within 16 KiB, the report
/// within its bound, no log line near CloudWatch Logs' 256 KB, and `status
/// --json` lists all 20,000 missing flights.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twenty_thousand_flight_mismatch_reaches_every_topic_within_its_limits() {
    init_logs();
    const FLIGHTS: usize = 20_000;
    let broker = start_broker(&[]);
    let store = bucket("rep-big").await;
    // A day before, written by pyarrow, so the walk has an index/
    // partition to start from.
    generate(&store, json!({"seed": 46, "days": [{"date": "2026-07-18", "flights": 3}]}));
    let t0 = Instant::now();
    let missing = put_flights(&store, "2026-07-19", FLIGHTS).await;
    let generating = t0.elapsed();
    assert_eq!(missing.len(), FLIGHTS);

    let live = Live::start(broker.port).await;
    let out = cli_command(&store, &["run", "--now", "2026-07-21T04:50:00Z"])
        .env("MQTT_HOST", "127.0.0.1")
        .env("MQTT_PORT", broker.port.to_string())
        .env("MQTT_TIMEOUT_SECONDS", "10")
        .output()
        .unwrap();
    let r = report_of(&out);
    assert_eq!(out.status.code(), Some(2), "{r}");
    assert_eq!(r["report_errors"], json!([]), "{r}");
    assert_eq!(r["last_run_status"], "Mismatch");
    assert_eq!(r["mismatch_date"], "2026-07-19");
    assert_eq!(r["mismatch_uuid_count"], FLIGHTS);
    assert_eq!(r["mismatch_uuids"], json!(missing[..100]));
    assert_eq!(r["mismatch_uuids_truncated"], true);
    let day = &r["days"][1];
    assert_eq!(
        (&day["date"], &day["mismatch_uuid_count"]),
        (&json!("2026-07-19"), &json!(FLIGHTS))
    );
    assert_eq!(day["mismatch_uuids"], json!(missing[..20]));
    assert_eq!(day["mismatch_uuids_truncated"], true);
    let report_bytes = out.stdout.len();
    assert!(
        report_bytes <= archive_compaction::data::report::REPORT_MAX_BYTES,
        "the report is {report_bytes} bytes"
    );
    let longest_log_line = out.stderr.split(|b| *b == b'\n').map(<[u8]>::len).max();
    assert!(longest_log_line.unwrap_or(0) < 16 * 1024, "a log line of {longest_log_line:?} bytes");

    // Every topic arrived, each payload within 16 KiB.
    let got = live.finish().await;
    assert_order(&got, &archive_compaction::data::mqtt::STATISTICS);
    for (topic, payload) in &got {
        assert!(
            payload.len() <= archive_compaction::data::mqtt::MAX_PAYLOAD_BYTES,
            "{topic}: {} bytes",
            payload.len()
        );
    }
    let stats = statistics(&retained(broker.port, None).await);
    assert_eq!(stats["last_run_status"], "Mismatch");
    assert_eq!(stats["mismatch_uuid_count"], FLIGHTS.to_string());
    assert_eq!(stats["mismatch_date"], "2026-07-19");
    let uuids: Value = serde_json::from_str(&stats["mismatch_uuids"]).unwrap();
    assert_eq!(uuids, json!({"uuids": missing[..100], "count": FLIGHTS, "truncated": true}));
    let largest = got.iter().map(|(_, p)| p.len()).max().unwrap();

    // The full list has its place: status.
    let out = cli_command(&store, &["status", "--json", "--now", "2026-07-21T05:00:00Z"])
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(status["mismatch"]["missing_uuid_count"], FLIGHTS);
    assert_eq!(status["mismatch"]["missing_uuids"], json!(missing));
    eprintln!(
        "20,000-flight mismatch: generated in {:.1} s; report {report_bytes} bytes, \
         largest payload {largest} bytes, longest log line {longest_log_line:?} bytes",
        generating.as_secs_f64()
    );
}

/// A broker with a packet limit of its own, lower than the
/// `mismatch_uuids` payload of a big mismatch (mosquitto's `max_packet_size`:
/// it disconnects the client at that message). The message is left out and
/// named, every other topic is published on a new connection.
#[tokio::test]
async fn a_broker_that_closes_the_connection_at_one_message_still_gets_the_others() {
    init_logs();
    let broker = start_broker(&[("MOSQUITTO_MAX_PACKET_SIZE", Path::new("2000"))]);
    let mut report = RunReport {
        last_run_status: Status::Mismatch,
        watermark_lag_days: Some(1),
        ..Default::default()
    };
    let missing: Vec<uuid::Uuid> = (0..150).map(|_| uuid::Uuid::now_v7()).collect();
    report.set_mismatch(date("2026-07-19"), missing.len() as u64, &missing);
    let mut messages = archive_compaction::data::mqtt::discovery(ROOT, "b");
    messages.extend(archive_compaction::data::mqtt::statistics(&report, ROOT));
    let big = format!("{ROOT}/statistic/mismatch_uuids");
    assert!(messages.iter().all(|m| m.payload.len() < 2000 || m.topic == big));
    let store = bucket("rep-dropped").await;
    let config = deps_with(&store, &mqtt_env(broker.port, &[]), None).config.mqtt.clone().unwrap();
    let errors: Vec<String> = archive_compaction::data::mqtt::publish(&config, &messages)
        .await
        .iter()
        .map(ToString::to_string)
        .collect();
    // One final failure: the message the broker refused (closed the
    // connection at it twice, the second time alone). The first
    // connection's close is no error: every other message went on the
    // next connections, so naming it ("1 of 19 messages acknowledged")
    // would report as undelivered what was delivered.
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].contains(&format!("closed the connection at {big}")), "{errors:#?}");
    let all = retained(broker.port, None).await;
    assert_eq!(all.len(), 18, "every topic but mismatch_uuids: {:?}", all.keys());
    let stats = statistics(&all);
    assert!(!stats.contains_key("mismatch_uuids"));
    assert_eq!(stats["mismatch_uuid_count"], "150");
    assert_eq!(stats["last_run_status"], "Mismatch");
}

/// Writes `n` flight objects for `date` (`YYYY-MM-DD`) under `flights/`,
/// with no index row: UUIDv7 names within the date, half of them in the
/// writer's `{icao_hex}_{callsign}_{uuid}.json.gz` form, half `{uuid}.json.gz`,
/// 64 PUTs at a time from this process (the parity gate reads the names
/// only). Returns the uuids, sorted.
async fn put_flights(store: &S3Store, date: &str, n: usize) -> Vec<String> {
    use futures::StreamExt;
    let day = chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").unwrap();
    let start = day.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp() as u64;
    let prefix = format!("flights/{}/", day.format("%Y/%m/%d"));
    let client = sdk_client(&endpoint());
    let mut uuids: Vec<String> = Vec::with_capacity(n);
    let mut keys = Vec::with_capacity(n);
    for i in 0..n {
        let secs = start + (i as u64 * 86_399) / n as u64;
        let ts = uuid::Timestamp::from_unix(uuid::NoContext, secs, (i % 1000) as u32 * 1_000_000);
        let u = uuid::Uuid::new_v7(ts).to_string();
        keys.push(if i % 2 == 0 {
            format!("{prefix}{:06X}_UAL{}_{u}.json.gz", i, i % 9999)
        } else {
            format!("{prefix}{u}.json.gz")
        });
        uuids.push(u);
    }
    let puts = futures::stream::iter(keys).map(|key| {
        let client = client.clone();
        let bucket = store.bucket().to_string();
        async move {
            client
                .put_object()
                .bucket(bucket)
                .key(&key)
                .body(b"{}".to_vec().into())
                .send()
                .await
                .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
        }
    });
    puts.buffer_unordered(64).collect::<Vec<()>>().await;
    uuids.sort();
    uuids
}

/// A message over the payload limit is left out and named; the others are
/// published and acknowledged all the same.
#[tokio::test]
async fn a_payload_over_the_limit_does_not_keep_the_other_topics_back() {
    init_logs();
    let broker = start_broker(&[]);
    let report = RunReport {
        files_compacted: 3,
        last_run_status: Status::Mismatch,
        watermark_lag_days: Some(1),
        ..Default::default()
    };
    let mut messages = archive_compaction::data::mqtt::statistics(&report, ROOT);
    let big = format!("{ROOT}/statistic/too_big");
    messages.insert(
        3,
        archive_compaction::data::mqtt::Message {
            topic: big.clone(),
            payload: "x".repeat(archive_compaction::data::mqtt::MAX_PAYLOAD_BYTES + 1),
        },
    );
    let store = bucket("rep-too-big").await;
    let config = deps_with(&store, &mqtt_env(broker.port, &[]), None).config.mqtt.clone().unwrap();
    let errors = archive_compaction::data::mqtt::publish(&config, &messages).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = errors[0].to_string();
    assert!(e.contains(&big) && e.contains("16385 bytes") && e.contains("16384-byte limit"), "{e}");
    let stats = statistics(&retained(broker.port, None).await);
    assert_eq!(stats.len(), 10, "{stats:?}");
    assert!(!stats.contains_key("too_big"));
    assert_eq!(stats["last_run_status"], "Mismatch");
    assert_eq!(stats["files_compacted"], "3");
}

/// A run that finds the lease held did no work: it publishes no statistic,
/// so the retained `Mismatch` (and its date and figures) of the last run
/// that worked stays what Home Assistant shows.
#[tokio::test]
async fn a_run_that_finds_the_lease_held_leaves_the_retained_status() {
    init_logs();
    let broker = start_broker(&[]);
    let store = bucket("rep-held").await;
    generate(
        &store,
        json!({"seed": 44, "days": [{"date": "2026-07-18", "flights": 3, "unindexed": 1}]}),
    );
    let deps = deps_with(&store, &mqtt_env(broker.port, &[]), None);
    let opts = RunOptions::at(at("2026-07-20T04:50:00Z"));
    let first = invoke(&deps, &opts).await;
    assert_eq!(first.last_run_status, Status::Mismatch, "{:?}", first.errors);
    let before = retained(broker.port, None).await;
    assert_eq!(statistics(&before)["last_run_status"], "Mismatch");
    let _held = archive_compaction::protocol::lease::LeaseGuard::acquire(
        &store,
        "another-invocation",
        Duration::from_secs(600),
    )
    .await
    .unwrap();
    let second = invoke(&deps, &RunOptions::at(at("2026-07-20T05:50:00Z"))).await;
    assert_eq!(second.stop_reason, StopReason::LeaseHeld, "{:?}", second.errors);
    assert_eq!(
        retained(broker.port, None).await,
        before,
        "a lease-held run changed retained topics"
    );
}

#[tokio::test]
async fn dry_runs_are_not_reported() {
    init_logs();
    let broker = start_broker(&[]);
    let store = bucket("rep-dry").await;
    generate(&store, json!({"seed": 43, "days": [{"date": "2026-07-18", "flights": 3}]}));
    let deps = deps_with(&store, &mqtt_env(broker.port, &[]), None);
    let mut opts = RunOptions::at(at("2026-07-20T04:50:00Z"));
    opts.dry_run = true;
    let r = invoke(&deps, &opts).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_clean(&r);
    assert_eq!(retained(broker.port, None).await, BTreeMap::new());
}

/// A listener that accepts TCP connections (the kernel does) but never
/// answers: connect succeeds, CONNACK never comes.
fn black_hole() -> (std::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

fn password_file(dir: &Path, user: &str, password: &str) -> PathBuf {
    let file = dir.join("passwords");
    let status = Command::new("mosquitto_passwd")
        .args(["-b", "-c"])
        .arg(&file)
        .args([user, password])
        .status()
        .expect("mosquitto_passwd (run scripts/setup-tools.sh)");
    assert!(status.success());
    world_readable(dir);
    file
}

/// mosquitto drops root privileges: let it read the files in `dir`.
fn world_readable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

#[tokio::test]
async fn mqtt_failures_never_change_the_outcome_and_stay_within_the_timeout() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let passwords = password_file(dir.path(), "compactor", "right");
    let secured = start_broker(&[("MOSQUITTO_PASSWORD_FILE", &passwords)]);
    let (_hole, hole_port) = black_hole();
    let down_port = free_port();
    let timeout = 2.0;
    // (case, settings, what the error says)
    let cases: Vec<(&str, Env, &str)> = vec![
        ("broker down", mqtt_env(down_port, &[]), "refused"),
        (
            // An HTTP server where the broker should be.
            "wrong port",
            mqtt_env(s3_port(), &[]),
            "",
        ),
        ("black hole", mqtt_env(hole_port, &[]), "timed out"),
        (
            "bad password",
            mqtt_env(
                secured.port,
                &[("MQTT_USERNAME", "compactor".into()), ("MQTT_PASSWORD", "wrong".into())],
            ),
            "refused",
        ),
    ];
    for (i, (case, env, says)) in cases.into_iter().enumerate() {
        let store = bucket(&format!("rep-fail-{i}")).await;
        let generated = generate(
            &store,
            json!({"seed": 44, "days": [
                {"date": "2026-07-18", "flights": 4},
                {"date": "2026-07-19", "flights": 4, "unindexed": 1}
            ]}),
        );
        let deps = deps_with(&store, &env, None);
        let t0 = Instant::now();
        let r = invoke(&deps, &RunOptions::at(at("2026-07-21T04:50:00Z"))).await;
        let reporting = t0.elapsed().as_secs_f64() - r.duration_seconds;
        // The data work decided Mismatch (exit code 2); reporting changed nothing.
        assert_eq!(r.last_run_status, Status::Mismatch, "{case}: {:?}", r.errors);
        assert_eq!(r.last_run_status.exit_code(), 2, "{case}");
        assert!(r.errors.is_empty(), "{case}: {:?}", r.errors);
        assert_eq!(r.mismatch_uuids, sorted(&generated.missing["2026-07-19"]));
        assert_eq!(r.files_compacted, 4, "{case}");
        assert_eq!(r.report_errors.len(), 1, "{case}: {:?}", r.report_errors);
        let e = &r.report_errors[0];
        assert!(e.starts_with("MQTT 127.0.0.1:"), "{case}: {e}");
        assert!(e.contains(says), "{case}: {e:?} should say {says:?}");
        // Slack for a loaded 2-core CI machine: what this bounds is an
        // attempt without the timeout, minutes (TCP's SYN retries) or never.
        assert!(
            reporting < timeout + 10.0,
            "{case}: reporting took {reporting:.1} s with a {timeout} s timeout"
        );
        // The data work is done: the compacted day stays compacted.
        assert_compacted(&dump(&store, "index/"), "2026-07-18", &generated.rows["2026-07-18"]);
    }

    // Control: the right password works on the same broker.
    let store = bucket("rep-fail-ok").await;
    generate(&store, json!({"seed": 45, "days": [{"date": "2026-07-18", "flights": 2}]}));
    let env = mqtt_env(
        secured.port,
        &[("MQTT_USERNAME", "compactor".into()), ("MQTT_PASSWORD", "right".into())],
    );
    let r =
        invoke(&deps_with(&store, &env, None), &RunOptions::at(at("2026-07-20T04:50:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_clean(&r);
    assert_eq!(statistics(&retained(secured.port, None).await)["files_compacted"], "2");
}

/// A CA and a server certificate for 127.0.0.1 (openssl), in `dir`.
fn certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=archive-compaction test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    ]
    .concat());
    run(&[
        &["req"][..],
        &ec,
        &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"],
    ]
    .concat());
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    world_readable(dir);
}

#[tokio::test]
async fn mqtt_over_tls_with_a_ca_file() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let broker = start_broker(&[("MOSQUITTO_TLS_DIR", dir.path())]);
    let ca = dir.path().join("ca.crt");

    // System roots do not trust the test CA: reported, outcome unchanged.
    let store = bucket("rep-tls-untrusted").await;
    generate(&store, json!({"seed": 46, "days": [{"date": "2026-07-18", "flights": 2}]}));
    let env = mqtt_env(broker.port, &[("MQTT_TLS", "true".into())]);
    let r =
        invoke(&deps_with(&store, &env, None), &RunOptions::at(at("2026-07-20T04:50:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.report_errors.len(), 1, "{:?}", r.report_errors);
    assert!(
        r.report_errors[0].starts_with("MQTT")
            && r.report_errors[0].to_lowercase().contains("certificate"),
        "{}",
        r.report_errors[0]
    );
    assert_eq!(retained(broker.port, Some(&ca)).await, BTreeMap::new());

    // MQTT_CA_FILE: verified, published.
    let store = bucket("rep-tls").await;
    generate(&store, json!({"seed": 47, "days": [{"date": "2026-07-18", "flights": 3}]}));
    let env = mqtt_env(
        broker.port,
        &[("MQTT_TLS", "true".into()), ("MQTT_CA_FILE", ca.to_str().unwrap().into())],
    );
    let r =
        invoke(&deps_with(&store, &env, None), &RunOptions::at(at("2026-07-20T04:50:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_clean(&r);
    let all = retained(broker.port, Some(&ca)).await;
    assert_eq!(all.len(), 19, "{:?}", all.keys());
    assert_eq!(statistics(&all)["files_compacted"], "3");
}

/// The real binary: exit code and stdout report with MQTT up and down.
#[tokio::test]
async fn cli_exit_code_is_the_runs_whatever_mqtt_does() {
    init_logs();
    let broker = start_broker(&[]);
    let store = bucket("rep-cli").await;
    generate(
        &store,
        json!({"seed": 48, "days": [
            {"date": "2026-07-18", "flights": 3},
            {"date": "2026-07-19", "flights": 3, "unindexed": 1}
        ]}),
    );
    // The CLI with MQTT at `port` (2 s timeout).
    let with_broker = |args: &[&str], port: u16| {
        cli_command(&store, args)
            .env("MQTT_HOST", "127.0.0.1")
            .env("MQTT_PORT", port.to_string())
            .env("MQTT_TIMEOUT_SECONDS", "2")
            .env("LOG_LEVEL", "warn")
            .output()
            .unwrap()
    };
    let cli = |port: u16| {
        let out = with_broker(&["run", "--now", "2026-07-21T04:50:00Z"], port);
        let report = report_of(&out);
        (out.status.code(), report)
    };
    let (code, report) = cli(broker.port);
    assert_eq!(code, Some(2), "{report}");
    assert_eq!(report["last_run_status"], "Mismatch");
    assert_eq!(report["report_errors"], json!([]));
    let stats = statistics(&retained(broker.port, None).await);
    assert_eq!(stats["last_run_status"], "Mismatch");
    assert_eq!(stats["mismatch_uuid_count"], "1");
    // `status` shows the last run from the retained topics,
    // read-only: the broker's retained messages are unchanged after it.
    let status = |port: u16| {
        let out = with_broker(&["status", "--json", "--now", "2026-07-21T04:50:00Z"], port);
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("status --json: {e}: {out:?}"))
    };
    let before = retained(broker.port, None).await;
    let s = status(broker.port);
    let last = &s["last_run"];
    assert_eq!(
        (&last["at"], &last["status"], &last["error"]),
        (&json!("2026-07-21T04:50:00.000000+00:00"), &json!("Mismatch"), &Value::Null),
        "{s}"
    );
    assert!(last["age_hours"].as_i64().unwrap() > 0, "aged against the wall clock: {s}");
    assert_valid("status.schema.json", &s);
    assert_eq!(retained(broker.port, None).await, before);
    let s = status(free_port());
    assert!(s["last_run"]["error"].as_str().unwrap_or("").contains("MQTT"), "{s}");

    let (code, report) = cli(free_port());
    assert_eq!(code, Some(2), "{report}");
    assert_eq!(report["last_run_status"], "Mismatch");
    let errors = report["report_errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{report}");
    assert!(errors[0].as_str().unwrap().starts_with("MQTT"), "{report}");
}

// ---------------------------------------------------------------------------
// CloudWatch (ministack)
// ---------------------------------------------------------------------------

/// ministack's endpoint: the S3 server itself under ministack, else a
/// ministack of its own.
fn cloudwatch_endpoint() -> String {
    format!("http://127.0.0.1:{}", shared_port("ministack"))
}

fn cloudwatch_client(endpoint: &str) -> aws_sdk_cloudwatch::Client {
    aws_sdk_cloudwatch::Client::from_conf(
        aws_sdk_cloudwatch::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(archive_compaction::app::https_client())
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
            .retry_config(archive_compaction::app::retry_config())
            .build(),
    )
}

/// Every metric in `namespace` for `bucket`, read back: name -> (sum, samples, unit).
async fn read_metrics(
    client: &aws_sdk_cloudwatch::Client,
    namespace: &str,
    bucket: &str,
) -> BTreeMap<String, (f64, f64, Option<StandardUnit>)> {
    let dimension = Dimension::builder().name("Bucket").value(bucket).build();
    let listed = client
        .list_metrics()
        .namespace(namespace)
        .dimensions(
            aws_sdk_cloudwatch::types::DimensionFilter::builder()
                .name("Bucket")
                .value(bucket)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    let now = SystemTime::now();
    for m in listed.metrics() {
        let name = m.metric_name().unwrap().to_string();
        assert_eq!(m.dimensions(), std::slice::from_ref(&dimension), "{name}");
        let stats = client
            .get_metric_statistics()
            .namespace(namespace)
            .metric_name(&name)
            .dimensions(dimension.clone())
            .start_time((now - Duration::from_secs(900)).into())
            .end_time((now + Duration::from_secs(300)).into())
            .period(60)
            .statistics(Statistic::Sum)
            .statistics(Statistic::SampleCount)
            .send()
            .await
            .unwrap();
        let points = stats.datapoints();
        let sum: f64 = points.iter().map(|p| p.sum().unwrap()).sum();
        let samples: f64 = points.iter().map(|p| p.sample_count().unwrap()).sum();
        let unit = points.first().and_then(|p| p.unit().cloned());
        out.insert(name, (sum, samples, unit));
    }
    out
}

#[tokio::test]
async fn cloudwatch_metrics_are_readable_back() {
    init_logs();
    let cw = cloudwatch_client(&cloudwatch_endpoint());
    let namespace = format!("ArchiveCompactionTest/{}", uuid::Uuid::now_v7().simple());
    let env = |store: &S3Store| {
        deps_with(
            store,
            &[("METRICS_ENABLED", "true".to_string()), ("METRICS_NAMESPACE", namespace.clone())],
            Some(cw.clone()),
        )
    };
    let count = Some(StandardUnit::Count);

    // A Mismatch run that compacted a day first.
    let store = bucket("rep-cw").await;
    generate(
        &store,
        json!({"seed": 49, "days": [
            {"date": "2026-07-17", "flights": 7},
            {"date": "2026-07-18", "flights": 5, "unindexed": 2}
        ]}),
    );
    let r = invoke(&env(&store), &RunOptions::at(at("2026-07-22T04:50:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_clean(&r);
    assert!(r.bytes_written > 0);
    let got = read_metrics(&cw, &namespace, store.bucket()).await;
    let want: BTreeMap<String, (f64, f64, Option<StandardUnit>)> = [
        ("FilesCompacted", 7.0, count.clone()),
        ("FilesDeleteFailed", 0.0, count.clone()),
        ("DaysCompacted", 1.0, count.clone()),
        ("MismatchUuidCount", 2.0, count.clone()),
        ("MismatchRuns", 1.0, count.clone()),
        // cutoff 2026-07-20, watermark 2026-07-17.
        ("WatermarkLagDays", 3.0, count.clone()),
        ("ManifestsRecovered", 0.0, count.clone()),
        ("FilesSkipped", 0.0, count.clone()),
        ("RowsWritten", 7.0, count.clone()),
        ("BytesWritten", r.bytes_written as f64, Some(StandardUnit::Bytes)),
        ("DuplicatesRemoved", 0.0, count.clone()),
        ("RunDurationSeconds", r.duration_seconds, Some(StandardUnit::Seconds)),
        ("RunSuccess", 0.0, count.clone()),
        ("RunMismatch", 1.0, count.clone()),
        ("RunFailure", 0.0, count.clone()),
    ]
    .into_iter()
    .map(|(n, v, u)| (n.to_string(), (v, 1.0, u)))
    .collect();
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (name, (sum, samples, unit)) in &want {
        let (gsum, gsamples, gunit) = &got[name];
        assert!((gsum - sum).abs() < 1e-6, "{name}: {gsum} != {sum}");
        assert_eq!(gsamples, samples, "{name}: one data point per run");
        assert_eq!(gunit, unit, "{name}");
    }

    // A Failure run (unreadable watermark): one-hot RunFailure, no lag.
    let store = bucket("rep-cw-fail").await;
    break_watermark(&store).await;
    let r = invoke(&env(&store), &RunOptions::at(at("2026-07-22T04:50:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Failure);
    assert_clean(&r);
    let got = read_metrics(&cw, &namespace, store.bucket()).await;
    assert_eq!(got.len(), 13, "{:?}", got.keys());
    assert!(!got.contains_key("WatermarkLagDays"));
    assert!(!got.contains_key("MismatchUuidCount"));
    for (name, v) in [("RunSuccess", 0.0), ("RunMismatch", 0.0), ("RunFailure", 1.0)] {
        assert_eq!(got[name].0, v, "{name}");
    }
}

#[tokio::test]
async fn cloudwatch_outage_never_changes_the_outcome() {
    init_logs();
    let store = bucket("rep-cw-down").await;
    generate(&store, json!({"seed": 50, "days": [{"date": "2026-07-18", "flights": 2}]}));
    let dead = cloudwatch_client(&format!("http://127.0.0.1:{}", free_port()));
    let deps = deps_with(&store, &[("METRICS_ENABLED", "true".to_string())], Some(dead));
    let t0 = Instant::now();
    let r = invoke(&deps, &RunOptions::at(at("2026-07-20T04:50:00Z"))).await;
    let reporting = t0.elapsed().as_secs_f64() - r.duration_seconds;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.files_compacted, 2);
    assert_eq!(r.report_errors.len(), 1, "{:?}", r.report_errors);
    assert!(
        r.report_errors[0]
            .starts_with("CloudWatch PutMetricData to namespace SkyFollower/ArchiveCompaction"),
        "{}",
        r.report_errors[0]
    );
    // Slack for a loaded CI machine, as in the MQTT failures above.
    let bound = archive_compaction::data::metrics::CLOUDWATCH_TIMEOUT.as_secs_f64() + 10.0;
    assert!(reporting < bound, "reporting took {reporting:.1} s");
}

/// The Lambda handler reports a payload it cannot read as a Failure too.
#[tokio::test]
async fn a_bad_lambda_event_is_reported_as_a_failure() {
    init_logs();
    let broker = start_broker(&[]);
    let store = bucket("rep-bad-event").await;
    let deps = deps_with(&store, &mqtt_env(broker.port, &[]), None);
    let event =
        lambda_runtime::LambdaEvent::new(json!("not an event"), lambda_runtime::Context::default());
    let err =
        archive_compaction::app::handle(&deps, event).await.expect_err("a bad event is an error");
    assert_eq!(err.0.last_run_status, Status::Failure);
    assert_clean(&err.0);
    // It read no state: only what it knows is published.
    let stats = statistics(&retained(broker.port, None).await);
    let names: Vec<&str> = stats.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "days_compacted",
            "files_compacted",
            "files_delete_failed",
            "last_run_at",
            "last_run_status"
        ],
        "{stats:?}"
    );
    assert_eq!(stats["last_run_status"], "Failure");
}
