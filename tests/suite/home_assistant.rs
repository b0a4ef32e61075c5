//! The job's MQTT reporting read by a real Home Assistant (2024.3.3, in its
//! own venv: `scripts/setup-tools.sh hass`), not by a test's idea of it.
//!
//! Home Assistant starts with `--skip-pip`, a pre-seeded MQTT config entry
//! pointing at this test's mosquitto and onboarding marked done. The CLI
//! binary then runs against an S3 bucket five times (Success, Mismatch,
//! Mismatch again, a Mismatch of 3,002 flights whose uuid list is cut in
//! its payload, Failure on an unreadable watermark); after each run the
//! test waits until Home Assistant's recorder holds the states the report
//! says. Then Home Assistant is stopped and its entity and device registries,
//! every recorded state and its log are checked.
//!
//! Without `.tools/hass` the test says so and passes, unless `CI` is set:
//! then a missing Home Assistant is a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use archive_compaction::infra::storage::S3Store;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::{Value, json};

const PREFIX: &str = "sensor.skyfollower_archive_compaction_";

fn entity(name: &str) -> String {
    format!("{PREFIX}{name}")
}

fn hass_bin() -> PathBuf {
    tools().join("hass/bin/hass")
}

fn hass_python() -> PathBuf {
    tools().join("hass/bin/python")
}

/// The Home Assistant config directory: configuration.yaml, the MQTT
/// config entry, onboarding done.
fn write_config(dir: &Path, mqtt_port: u16, http_port: u16) {
    std::fs::create_dir_all(dir.join(".storage")).unwrap();
    // Location, units, zone and country set, so nothing is detected over
    // the network and no repair is raised; the recorder commits at once.
    std::fs::write(
        dir.join("configuration.yaml"),
        format!(
            "homeassistant:\n  name: Test\n  latitude: 52.37\n  longitude: 4.89\n  elevation: 0\n  \
             unit_system: metric\n  time_zone: UTC\n  currency: EUR\n  country: NL\n\
             http:\n  server_host: 127.0.0.1\n  server_port: {http_port}\n\
             recorder:\n  commit_interval: 0\n\
             logger:\n  default: warning\n"
        ),
    )
    .unwrap();
    let entries = json!({
        "version": 1, "minor_version": 1, "key": "core.config_entries",
        "data": {"entries": [{
            "entry_id": "01HTESTMQTTENTRY0000000000", "version": 1, "minor_version": 1,
            "domain": "mqtt", "title": "127.0.0.1",
            "data": {"broker": "127.0.0.1", "port": mqtt_port, "discovery": true},
            "options": {}, "pref_disable_new_entities": false, "pref_disable_polling": false,
            "source": "user", "unique_id": null, "disabled_by": null
        }]}
    });
    std::fs::write(dir.join(".storage/core.config_entries"), entries.to_string()).unwrap();
    let onboarding = json!({
        "version": 4, "minor_version": 1, "key": "onboarding",
        "data": {"done": ["user", "core_config", "analytics", "integration"]}
    });
    std::fs::write(dir.join(".storage/onboarding"), onboarding.to_string()).unwrap();
}

/// `hass` under tests/support/hass.py, which stops it if this process dies.
struct Hass {
    process: Supervised,
    dir: PathBuf,
}

impl Hass {
    fn start(dir: &Path) -> Hass {
        let mut cmd = Command::new(python());
        cmd.arg(root().join("tests/support/hass.py")).arg("run").arg(hass_bin()).arg(dir);
        let process = Supervised::spawn(cmd, "tests/support/hass.py");
        assert_eq!(process.read_line().trim(), "started", "hass.py");
        Hass { process, dir: dir.to_path_buf() }
    }

    /// SIGTERM, wait for Home Assistant to write its registries and exit.
    fn stop(&mut self) -> String {
        self.process.close_stdin(Some("stop"));
        let line = self.process.read_line();
        self.process.stop();
        line.trim().to_string()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("home-assistant.log")).unwrap_or_default()
    }

    /// Every recorded state of the nine entities, oldest first:
    /// (entity id, state, attributes). Empty while there is no database.
    fn states(&self) -> Vec<(String, String, Value)> {
        let db = self.dir.join("home-assistant_v2.db");
        if !db.exists() {
            return vec![];
        }
        let out = Command::new(hass_python())
            .arg(root().join("tests/support/hass.py"))
            .arg("states")
            .arg(&db)
            .arg(PREFIX)
            .output()
            .unwrap();
        if !out.status.success() {
            // The recorder has not created its tables yet.
            return vec![];
        }
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (
                    v[0].as_str().unwrap().to_string(),
                    v[1].as_str().unwrap_or_default().to_string(),
                    v[2].clone(),
                )
            })
            .collect()
    }

    /// The latest state of each entity.
    fn latest(&self) -> BTreeMap<String, (String, Value)> {
        self.states().into_iter().map(|(e, s, a)| (e, (s, a))).collect()
    }
}

impl Drop for Hass {
    fn drop(&mut self) {
        if self.process.holds_stdin() {
            self.stop();
        }
    }
}

/// Waits for Home Assistant's birth message (`homeassistant/status`
/// `online`): it is sent once Home Assistant has started and MQTT discovery
/// has settled.
async fn wait_online(port: u16, hass: &Hass, within: Duration) {
    let mut opts = MqttOptions::new("test-birth-watch", "127.0.0.1", port);
    opts.set_clean_session(true);
    let (client, mut events) = AsyncClient::new(opts, 10);
    client.subscribe("homeassistant/status", QoS::AtLeastOnce).await.unwrap();
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "Home Assistant sent no birth message within {within:?}; log:\n{}",
            hass.log()
        );
        match tokio::time::timeout(left, events.poll()).await {
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) if &p.payload[..] == b"online" => break,
            Ok(Ok(_)) | Err(_) => {}
            Ok(Err(e)) => panic!("birth watch: {e}"),
        }
    }
    let _ = client.disconnect().await;
}

/// The CLI binary's run at `now`: (exit code, JSON report).
fn cli(store: &S3Store, mqtt_port: u16, now: &str) -> (Option<i32>, Value) {
    let out = cli_command(store, &["run", "--now", now])
        .env("MQTT_HOST", "127.0.0.1")
        .env("MQTT_PORT", mqtt_port.to_string())
        .env("MQTT_TIMEOUT_SECONDS", "5")
        .env("LOG_LEVEL", "warn")
        .output()
        .unwrap();
    let report = report_of(&out);
    assert_eq!(report["report_errors"], json!([]), "{report}");
    (out.status.code(), report)
}

/// Waits until the latest recorded state of every sensor is `want`'s.
async fn wait_states(hass: &Hass, want: &BTreeMap<String, String>, step: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got: BTreeMap<String, String> =
            hass.latest().into_iter().map(|(e, (s, _))| (e, s)).collect();
        if &got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{step}: Home Assistant's states are not the report's after 30 s\n got: {got:#?}\nwant: {want:#?}\nlog:\n{}",
            hass.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn states(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    assert_eq!(pairs.len(), 9);
    pairs.iter().map(|(n, s)| (entity(n), s.to_string())).collect()
}

/// [`states`] after a run that compacted nothing with 2026-07-18 the last
/// compacted date (files, failed deletes and days 0), and the other five
/// sensors as `pairs` say.
fn states_after_nothing_compacted(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut all = vec![
        ("files_compacted", "0"),
        ("files_delete_failed", "0"),
        ("days_compacted", "0"),
        ("last_compacted_date", "2026-07-18"),
    ];
    all.extend_from_slice(pairs);
    states(&all)
}

/// The Home Assistant state of a report's `YYYY-MM-DD` or null.
fn date_state(v: &Value) -> String {
    v.as_str().unwrap_or("unknown").to_string()
}

/// Home Assistant's state for a timestamp: UTC, to the second
/// (`isoformat(timespec="seconds")`).
fn timestamp_state(v: &Value) -> String {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .to_utc()
        .format("%Y-%m-%dT%H:%M:%S+00:00")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn home_assistant_shows_the_python_jobs_sensors_as_the_reports_say() {
    init_logs();
    let started = Instant::now();
    if !hass_bin().exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is missing (CI is set): run scripts/setup-tools.sh hass",
            hass_bin().display()
        );
        eprintln!("SKIPPED: {} is missing; run scripts/setup-tools.sh hass", hass_bin().display());
        return;
    }
    let broker = start_server("mosquitto");
    let store = bucket("hass").await;
    let generated = generate(
        &store,
        json!({"seed": 61, "days": [
            {"date": "2026-07-18", "flights": 6},
            {"date": "2026-07-19", "flights": 8, "unindexed": 2}
        ]}),
    );
    let mut missing = generated.missing["2026-07-19"].clone();
    missing.sort();
    assert_eq!(missing.len(), 2);

    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), broker.port, free_port());
    let mut hass = Hass::start(dir.path());
    wait_online(broker.port, &hass, Duration::from_secs(90)).await;
    let up = started.elapsed();

    // 1. Success: 2026-07-18 compacted.
    let (code, r) = cli(&store, broker.port, "2026-07-20T04:50:00Z");
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(
        (&r["files_compacted"], &r["days_compacted"], &r["last_compacted_date"]),
        (&json!(6), &json!(1), &json!("2026-07-18")),
        "{r}"
    );
    assert_eq!(r["mismatch_date"], Value::Null, "{r}");
    let run_1 = timestamp_state(&r["last_run_at"]);
    wait_states(
        &hass,
        &states(&[
            ("files_compacted", "6"),
            ("files_delete_failed", "0"),
            ("days_compacted", "1"),
            ("last_compacted_date", &date_state(&r["last_compacted_date"])),
            ("mismatch_date", "unknown"),
            ("mismatch_uuid_count", "0"),
            ("mismatch_runs", "0"),
            ("last_run_at", &run_1),
            ("last_run_status", "Success"),
        ]),
        "Success",
    )
    .await;

    // 2. and 3. Mismatch on 2026-07-19, twice (two invocations).
    for (runs, now) in [(1, "2026-07-21T04:50:00.25Z"), (2, "2026-07-22T04:50:00Z")] {
        let (code, r) = cli(&store, broker.port, now);
        assert_eq!(code, Some(2), "{r}");
        assert_eq!(r["mismatch_uuids"], json!(missing));
        assert_eq!(r["mismatch_uuid_count"], 2);
        assert_eq!(r["mismatch_runs"], runs);
        assert_eq!(r["last_compacted_date"], "2026-07-18");
        assert_eq!(r["files_compacted"], 0);
        wait_states(
            &hass,
            &states_after_nothing_compacted(&[
                ("mismatch_date", &date_state(&r["mismatch_date"])),
                ("mismatch_uuid_count", "2"),
                ("mismatch_runs", &runs.to_string()),
                ("last_run_at", &timestamp_state(&r["last_run_at"])),
                ("last_run_status", "Mismatch"),
            ]),
            &format!("Mismatch {runs}"),
        )
        .await;
    }

    // 4. A big mismatch: 3,000 more flights of 2026-07-19 without an index
    // row. The payload carries the first 100 uuids; the count is exact, and
    // Home Assistant records it without a warning.
    const MORE: usize = 3_000;
    let more = generate(
        &store,
        json!({"seed": 62, "days": [
            {"date": "2026-07-19", "flights": MORE, "unindexed": MORE}
        ]}),
    );
    missing.extend(more.missing["2026-07-19"].iter().cloned());
    missing.sort();
    let total = missing.len();
    assert_eq!(total, MORE + 2);
    let (code, r) = cli(&store, broker.port, "2026-07-22T16:50:00Z");
    assert_eq!(code, Some(2), "{r}");
    assert_eq!(r["mismatch_uuid_count"], total);
    assert_eq!(r["mismatch_uuids"], json!(missing[..100]));
    assert_eq!(r["mismatch_runs"], 3);
    let total_state = total.to_string();
    let big_mismatch = [
        ("mismatch_date", "2026-07-19"),
        ("mismatch_uuid_count", total_state.as_str()),
        ("mismatch_runs", "3"),
    ];
    let last_run_at = timestamp_state(&r["last_run_at"]);
    wait_states(
        &hass,
        &states_after_nothing_compacted(
            &[&big_mismatch[..], &[("last_run_at", &last_run_at), ("last_run_status", "Mismatch")]]
                .concat(),
        ),
        "big Mismatch",
    )
    .await;

    // 5. Failure: watermark.json is not JSON. What the run could not read
    // keeps its last known value.
    sdk_client(&endpoint())
        .put_object()
        .bucket(store.bucket())
        .key("_compaction_state/watermark.json")
        .body(b"{not json".to_vec().into())
        .send()
        .await
        .unwrap();
    let (code, r) = cli(&store, broker.port, "2026-07-23T04:50:00Z");
    assert_eq!(code, Some(1), "{r}");
    assert_eq!(r["last_compacted_date"], Value::Null, "the report knows no watermark");
    wait_states(
        &hass,
        &states_after_nothing_compacted(
            &[
                // The mismatch sensors keep the big mismatch's values.
                &big_mismatch[..],
                &[("last_run_at", "2026-07-23T04:50:00+00:00"), ("last_run_status", "Failure")],
            ]
            .concat(),
        ),
        "Failure",
    )
    .await;
    let runs = started.elapsed();

    let stopped = hass.stop();
    assert_eq!(stopped, "stopped 0", "Home Assistant did not stop cleanly");

    // The registries: nine sensors with the Python job's entity ids, on one device.
    let read = |name: &str| -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(".storage").join(name)).unwrap(),
        )
        .unwrap()
    };
    let entities: Vec<Value> = read("core.entity_registry")["data"]["entities"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["platform"] == "mqtt")
        .cloned()
        .collect();
    let ids: BTreeSet<String> =
        entities.iter().map(|e| e["entity_id"].as_str().unwrap().to_string()).collect();
    let want_ids: BTreeSet<String> = SENSORS.iter().map(|n| entity(n)).collect();
    assert_eq!(ids, want_ids, "entity ids");
    for e in &entities {
        let name = e["entity_id"].as_str().unwrap().strip_prefix(PREFIX).unwrap();
        assert_eq!(e["unique_id"], format!("SkyFollower_archive_compaction_{name}"));
    }
    let devices: BTreeSet<&str> =
        entities.iter().map(|e| e["device_id"].as_str().unwrap()).collect();
    assert_eq!(devices.len(), 1, "one device: {devices:?}");
    let device_id = *devices.iter().next().unwrap();
    let registry = read("core.device_registry");
    let device = registry["data"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == device_id)
        .expect("the device is registered");
    assert_eq!(device["identifiers"], json!([["mqtt", "SkyFollower_archive_compaction"]]));
    assert_eq!(device["name"], "SkyFollower Archive Compaction");
    assert_eq!(device["manufacturer"], "SkyFollower");
    assert_eq!(device["model"], "Archive Compaction");
    assert_eq!(device["sw_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        device["configuration_url"],
        format!("https://s3.console.aws.amazon.com/s3/buckets/{}", store.bucket())
    );

    // Every recorded state: never the text "None", the count always the
    // count its attributes carry (the length of the uuids list up to 100,
    // the list cut beyond), dates either a date or unknown.
    let recorded = hass.states();
    assert!(!recorded.is_empty());
    for (e, s, attrs) in &recorded {
        assert_ne!(s, "None", "{e} recorded the text None");
        if *e == entity("mismatch_uuid_count") && s != "unknown" {
            let uuids = attrs["uuids"]
                .as_array()
                .unwrap_or_else(|| panic!("{e} = {s} recorded without its uuids: {attrs}"));
            assert_eq!(s, &attrs["count"].to_string(), "{e}: {attrs}");
            let count: usize = s.parse().unwrap();
            assert_eq!(uuids.len(), count.min(100), "{e}: {attrs}");
            assert_eq!(attrs["truncated"], json!(count > 100), "{e}: {attrs}");
        }
        if *e == entity("last_compacted_date") || *e == entity("mismatch_date") {
            assert!(
                s == "unknown" || chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
                "{e}: {s}"
            );
        }
    }
    let last_uuids = recorded
        .iter()
        .rev()
        .find(|(e, _, _)| *e == entity("mismatch_uuid_count"))
        .map(|(_, _, a)| a["uuids"].clone())
        .unwrap();
    assert_eq!(last_uuids, json!(missing[..100]));
    // The watermark date was set once and never replaced.
    let dates: Vec<&str> = recorded
        .iter()
        .filter(|(e, _, _)| *e == entity("last_compacted_date"))
        .map(|(_, s, _)| s.as_str())
        .collect();
    assert_eq!(dates.last(), Some(&"2026-07-18"));
    assert!(dates.iter().all(|s| *s == "unknown" || *s == "2026-07-18"), "{dates:?}");

    // The log: no warning or error about these entities or their topics,
    // none from MQTT or the sensor platform at all.
    let log = hass.log();
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARNING ") || l.contains(" ERROR ") || l.contains(" CRITICAL "))
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("skyfollower")
                || l.contains("archive_compaction")
                || l.contains("archive-compaction")
                || l.contains("[homeassistant.components.mqtt")
                || l.contains("[homeassistant.components.sensor")
                || l.contains("[homeassistant.components.recorder")
        })
        .collect();
    assert!(bad.is_empty(), "Home Assistant logged:\n{}", bad.join("\n"));
    eprintln!(
        "home_assistant: up in {:.1} s, five runs seen by {:.1} s, done in {:.1} s; other log lines at warning or above:\n{}",
        up.as_secs_f64(),
        runs.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        log.lines()
            .filter(|l| l.contains(" WARNING ") || l.contains(" ERROR "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
