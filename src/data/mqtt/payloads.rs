//! The retained messages of a run, pure: each statistic is one entry of
//! [`STATISTIC_TABLE`], so it is added, renamed or dropped in one place.

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::data::report::{MISMATCH_UUIDS_SHOWN, RunReport, StopReason};

/// The most bytes a payload takes: Home Assistant's recorder stores no attributes over 16 KiB.
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024;

const DISCOVERY_PREFIX: &str = "homeassistant";

/// The Home Assistant device, and the prefix of every `unique_id` and `object_id`.
const DEVICE_ID: &str = "SkyFollower_archive_compaction";

/// The date sensors' `value_template`: `None` becomes `unknown`, Home
/// Assistant's "no value" (a template cannot return null, and a `device_class:
/// date` sensor logs "Invalid state message" for any non-date: hence text sensors).
const DATE_TEMPLATE: &str = "{{ 'unknown' if value == 'None' else value }}";

/// The count sensor's template on the `mismatch_uuids` topic: its exact
/// `count`, so list and count change in one state write (a Python job's payload counts its list).
const COUNT_TEMPLATE: &str =
    "{{ value_json.count if value_json.count is defined else value_json.uuids | length }}";

/// One MQTT message, published retained at QoS 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The full topic.
    pub topic: String,
    /// The payload (UTF-8 text or JSON).
    pub payload: String,
}

/// When a run established a statistic ([`is_known`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// Every run that did its own work.
    Always,
    /// Read from the state file: only when the run read it ([`RunReport::state_known`]).
    FromState,
    /// The mismatch: when the state was read and this run found a mismatch or
    /// the state holds none. A run that did not re-check a recorded mismatch
    /// date (a Failure before it, the deadline) does not know whether it persists.
    Mismatch,
}

/// One Home Assistant sensor; its `unique_id` and `object_id` are `{DEVICE_ID}_{name}`.
#[derive(Debug, Clone, Copy)]
struct Sensor {
    title: &'static str,
    icon: &'static str,
    /// The statistic whose topic is the state topic, when not its own.
    state_from: Option<&'static str>,
    value_template: Option<&'static str>,
    /// `measurement` for the numbers (each is a per-run figure, not a running total).
    state_class: Option<&'static str>,
    device_class: Option<&'static str>,
    /// The statistic whose JSON becomes the entity's attributes.
    attributes: Option<&'static str>,
}

const PLAIN: Sensor = Sensor {
    title: "",
    icon: "",
    state_from: None,
    value_template: None,
    state_class: None,
    device_class: None,
    attributes: None,
};

/// A per-run count's sensor.
const fn count(title: &'static str, icon: &'static str) -> Option<Sensor> {
    Some(Sensor { title, icon, state_class: Some("measurement"), ..PLAIN })
}

/// A date's sensor ([`DATE_TEMPLATE`]).
const fn date(title: &'static str, icon: &'static str) -> Option<Sensor> {
    Some(Sensor { title, icon, value_template: Some(DATE_TEMPLATE), ..PLAIN })
}

/// One retained statistic, `{root}/statistic/{name}`.
#[derive(Debug, Clone, Copy)]
pub struct Statistic {
    /// The topic's last part, and the sensor's id suffix.
    pub name: &'static str,
    payload: fn(&RunReport) -> String,
    known: Known,
    /// `None` for `mismatch_uuids`, which is the attributes of `mismatch_uuid_count`'s sensor.
    sensor: Option<Sensor>,
}

impl Statistic {
    /// The payload for `report` (decimal text for numbers).
    pub fn payload(&self, report: &RunReport) -> String {
        (self.payload)(report)
    }

    /// Whether `report`'s run established this statistic ([`is_known`]).
    pub fn is_known(&self, report: &RunReport) -> bool {
        if report.stop_reason == StopReason::LeaseHeld {
            return false;
        }
        match self.known {
            Known::Always => true,
            Known::FromState => report.state_known(),
            Known::Mismatch => {
                report.state_known()
                    && (report.mismatch_date.is_some() || report.mismatch_runs == 0)
            }
        }
    }
}

/// The ten statistics, in publish order (nine have a sensor). `mismatch_uuids`
/// precedes `mismatch_uuid_count`, so a subscriber reacting to the count finds
/// the list retained. No `unit_of_measurement`: adding one to an entity with
/// recorded statistics makes Home Assistant flag a unit change.
pub const STATISTIC_TABLE: [Statistic; 10] = [
    Statistic {
        name: "files_compacted",
        payload: |r| r.files_compacted.to_string(),
        known: Known::Always,
        sensor: count("Files Compacted", "mdi:file-multiple"),
    },
    Statistic {
        name: "files_delete_failed",
        payload: |r| r.files_delete_failed.to_string(),
        known: Known::Always,
        sensor: count("Delete Failures", "mdi:alert"),
    },
    Statistic {
        name: "days_compacted",
        payload: |r| r.days_compacted.to_string(),
        known: Known::Always,
        sensor: count("Days Compacted", "mdi:calendar-check"),
    },
    Statistic {
        name: "last_compacted_date",
        payload: |r| format_date(r.last_compacted_date),
        known: Known::FromState,
        sensor: date("Last Compacted Date", "mdi:calendar"),
    },
    Statistic {
        name: "mismatch_date",
        payload: |r| format_date(r.mismatch_date),
        known: Known::Mismatch,
        sensor: date("Mismatch Date", "mdi:calendar-alert"),
    },
    Statistic {
        name: "mismatch_uuids",
        payload: mismatch_uuids_payload,
        known: Known::Mismatch,
        sensor: None,
    },
    Statistic {
        name: "mismatch_uuid_count",
        payload: |r| r.mismatch_uuid_count.to_string(),
        known: Known::Mismatch,
        sensor: Some(Sensor {
            title: "Mismatch Flight Count",
            icon: "mdi:alert-circle",
            state_from: Some("mismatch_uuids"),
            value_template: Some(COUNT_TEMPLATE),
            state_class: Some("measurement"),
            attributes: Some("mismatch_uuids"),
            ..PLAIN
        }),
    },
    Statistic {
        name: "mismatch_runs",
        payload: |r| r.mismatch_runs.to_string(),
        known: Known::FromState,
        sensor: count("Mismatch Consecutive Runs", "mdi:counter"),
    },
    Statistic {
        name: "last_run_at",
        payload: |r| format_timestamp(r.last_run_at),
        known: Known::Always,
        sensor: Some(Sensor {
            title: "Last Run At",
            icon: "mdi:clock",
            device_class: Some("timestamp"),
            ..PLAIN
        }),
    },
    Statistic {
        name: "last_run_status",
        payload: |r| r.last_run_status.as_str().to_string(),
        known: Known::Always,
        sensor: Some(Sensor { title: "Last Run Status", icon: "mdi:check-circle", ..PLAIN }),
    },
];

/// The names of [`STATISTIC_TABLE`], in publish order.
pub const STATISTICS: [&str; STATISTIC_TABLE.len()] = {
    let mut names = [""; STATISTIC_TABLE.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = STATISTIC_TABLE[i].name;
        i += 1;
    }
    names
};

pub(super) fn statistic_topic(topic_root: &str, name: &str) -> String {
    format!("{topic_root}/statistic/{name}")
}

/// `YYYY-MM-DD`, or the string `None` when unset (the Python job's format).
fn format_date(date: Option<NaiveDate>) -> String {
    date.map_or_else(|| "None".to_string(), |d| d.format("%Y-%m-%d").to_string())
}

/// ISO 8601 in UTC as Python's `datetime.isoformat()` prints it: `2026-07-22T04:50:00.000000+00:00`.
fn format_timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, false)
}

/// Whether the run established the statistic `name`; one it did not is not
/// published, so the broker keeps the last value. Nothing is known on
/// [`StopReason::LeaseHeld`]: it would overwrite the holder's figures.
pub fn is_known(report: &RunReport, name: &str) -> bool {
    (STATISTIC_TABLE.iter()).any(|s| s.name == name && s.is_known(report))
}

/// The retained statistic messages, leaving out what the run did not establish ([`is_known`]).
pub fn statistics(report: &RunReport, topic_root: &str) -> Vec<Message> {
    (STATISTIC_TABLE.iter())
        .filter(|s| s.is_known(report))
        .map(|s| Message { topic: statistic_topic(topic_root, s.name), payload: s.payload(report) })
        .collect()
}

/// The `mismatch_uuids` payload: the Python job's `{"uuids": [...]}` (at
/// most [`MISMATCH_UUIDS_SHOWN`], sorted), then the exact `count` and `truncated`.
fn mismatch_uuids_payload(report: &RunReport) -> String {
    let shown = &report.mismatch_uuids[..report.mismatch_uuids.len().min(MISMATCH_UUIDS_SHOWN)];
    let count = report.mismatch_uuid_count.max(shown.len() as u64);
    format!(
        r#"{{"uuids":{},"count":{count},"truncated":{}}}"#,
        Value::from(shown.to_vec()),
        (shown.len() as u64) < count
    )
}

/// The device block of every discovery config (`configuration_url`: the bucket's S3 console page).
pub fn device(bucket: &str) -> Value {
    json!({
        "identifiers": [DEVICE_ID],
        "name": "SkyFollower Archive Compaction",
        "manufacturer": "SkyFollower",
        "model": "Archive Compaction",
        "configuration_url": format!("https://s3.console.aws.amazon.com/s3/buckets/{bucket}"),
        "sw_version": env!("CARGO_PKG_VERSION"),
    })
}

/// The nine discovery configs, one per statistic but `mismatch_uuids`.
pub fn discovery(topic_root: &str, bucket: &str) -> Vec<Message> {
    (STATISTIC_TABLE.iter())
        .filter_map(|stat| stat.sensor.map(|s| (stat.name, s)))
        .map(|(name, s)| {
            let id = format!("{DEVICE_ID}_{name}");
            let mut config = json!({
                "name": s.title,
                "unique_id": id,
                "object_id": id,
                "state_topic": statistic_topic(topic_root, s.state_from.unwrap_or(name)),
                "icon": s.icon,
                "device": device(bucket),
            });
            let optional = [
                ("value_template", s.value_template),
                ("state_class", s.state_class),
                ("device_class", s.device_class),
            ];
            for (key, value) in optional {
                if let Some(value) = value {
                    config[key] = value.into();
                }
            }
            if let Some(a) = s.attributes {
                config["json_attributes_topic"] = statistic_topic(topic_root, a).into();
            }
            let topic = format!("{DISCOVERY_PREFIX}/sensor/{DEVICE_ID}_{name}/config");
            Message { topic, payload: config.to_string() }
        })
        .collect()
}

/// A topic as errors name it: a statistic by name, a discovery config as `{name} config`, else in full.
pub fn short_name(topic: &str) -> String {
    if let Some((_, name)) = topic.rsplit_once("/statistic/") {
        return name.to_string();
    }
    let sensor = topic
        .strip_prefix(&format!("{DISCOVERY_PREFIX}/sensor/{DEVICE_ID}_"))
        .and_then(|t| t.strip_suffix("/config"));
    match sensor {
        Some(name) => format!("{name} config"),
        None => topic.to_string(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::data::mqtt::client::{MAX_PACKET_BYTES, packet_len};
    use crate::data::report::Status;
    use std::collections::HashSet;

    pub(crate) fn full_report() -> RunReport {
        RunReport {
            files_compacted: 95,
            files_delete_failed: 2,
            days_compacted: 4,
            last_compacted_date: Some(NaiveDate::from_ymd_opt(2026, 7, 21).unwrap()),
            mismatch_date: Some(NaiveDate::from_ymd_opt(2026, 7, 22).unwrap()),
            mismatch_uuid_count: 2,
            mismatch_uuids: vec!["a".into(), "b".into()],
            mismatch_runs: 3,
            last_run_at: DateTime::parse_from_rfc3339("2026-07-24T04:50:03.5Z").unwrap().to_utc(),
            last_run_status: Status::Mismatch,
            watermark_lag_days: Some(2),
            ..Default::default()
        }
    }

    fn names(messages: &[Message]) -> Vec<&str> {
        messages.iter().map(|m| m.topic.strip_prefix("root/statistic/").unwrap()).collect()
    }

    #[test]
    fn statistics_payloads() {
        let got: Vec<(String, String)> =
            statistics(&full_report(), "root").into_iter().map(|m| (m.topic, m.payload)).collect();
        let want: Vec<(String, String)> = [
            ("files_compacted", "95"),
            ("files_delete_failed", "2"),
            ("days_compacted", "4"),
            ("last_compacted_date", "2026-07-21"),
            ("mismatch_date", "2026-07-22"),
            ("mismatch_uuids", r#"{"uuids":["a","b"],"count":2,"truncated":false}"#),
            ("mismatch_uuid_count", "2"),
            ("mismatch_runs", "3"),
            ("last_run_at", "2026-07-24T04:50:03.500000+00:00"),
            ("last_run_status", "Mismatch"),
        ]
        .iter()
        .map(|(n, p)| (format!("root/statistic/{n}"), p.to_string()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_run_that_found_the_lease_held_publishes_no_statistic() {
        let report = RunReport {
            stop_reason: StopReason::LeaseHeld,
            last_run_status: Status::Success,
            ..full_report()
        };
        assert!(statistics(&report, "root").is_empty());
        // The holder's own report is published whole.
        assert_eq!(statistics(&full_report(), "root").len(), STATISTICS.len());
    }

    #[test]
    fn a_run_that_could_not_read_the_state_publishes_only_what_it_knows() {
        let report = RunReport {
            watermark_lag_days: None,
            last_run_status: Status::Failure,
            ..full_report()
        };
        assert_eq!(
            names(&statistics(&report, "root")),
            [
                "files_compacted",
                "files_delete_failed",
                "days_compacted",
                "last_run_at",
                "last_run_status"
            ]
        );
    }

    #[test]
    fn a_run_that_did_not_revisit_a_standing_mismatch_leaves_it_alone() {
        // The state is blocked on an earlier date (mismatch_runs 3), this
        // run found no mismatch (it failed before that date).
        let report = RunReport {
            mismatch_date: None,
            mismatch_uuid_count: 0,
            mismatch_uuids: vec![],
            last_run_status: Status::Failure,
            ..full_report()
        };
        let published = statistics(&report, "root");
        let got = names(&published);
        assert!(
            !got.iter().any(|n| n.starts_with("mismatch_") && *n != "mismatch_runs"),
            "{got:?}"
        );
        assert!(got.contains(&"last_compacted_date") && got.contains(&"mismatch_runs"));
        // A state with no mismatch: "no mismatch" is known and published.
        let clear = RunReport { mismatch_runs: 0, ..report };
        assert_eq!(statistics(&clear, "root").len(), 10);
    }

    #[test]
    fn discovery_configs() {
        let configs = discovery("root", "my-archive");
        let names: Vec<&str> =
            STATISTICS.iter().copied().filter(|n| *n != "mismatch_uuids").collect();
        let discovered: Vec<&str> =
            (STATISTIC_TABLE.iter()).filter(|s| s.sensor.is_some()).map(|s| s.name).collect();
        let mut sorted_names = names.clone();
        sorted_names.sort();
        let mut sorted_discovered = discovered.clone();
        sorted_discovered.sort();
        assert_eq!(sorted_names, sorted_discovered);
        let mut ids = HashSet::new();
        for (m, name) in configs.iter().zip(discovered) {
            assert_eq!(
                m.topic,
                format!("homeassistant/sensor/SkyFollower_archive_compaction_{name}/config")
            );
            let c: Value = serde_json::from_str(&m.payload).unwrap();
            let state_from = if name == "mismatch_uuid_count" { "mismatch_uuids" } else { name };
            assert_eq!(c["state_topic"], format!("root/statistic/{state_from}"));
            assert!(ids.insert(c["unique_id"].as_str().unwrap().to_string()));
            assert_eq!(c["object_id"], c["unique_id"]);
            assert_eq!(c["device"], device("my-archive"));
            assert!(c["icon"].as_str().unwrap().starts_with("mdi:"));
        }
        assert_eq!(
            device("my-archive")["configuration_url"],
            "https://s3.console.aws.amazon.com/s3/buckets/my-archive"
        );
    }

    #[test]
    fn a_big_mismatch_is_cut_in_its_payload_and_exact_in_its_count() {
        let missing: Vec<uuid::Uuid> =
            (0..20_000u128).map(|i| uuid::Uuid::from_u128(u128::MAX - i)).collect();
        let mut report = full_report();
        let d = NaiveDate::from_ymd_opt(2026, 7, 22).unwrap();
        report.set_mismatch(d, missing.len() as u64, &missing);
        let stats = statistics(&report, "root");
        let by_topic =
            |t: &str| stats.iter().find(|m| m.topic.ends_with(t)).unwrap().payload.clone();
        assert_eq!(by_topic("/mismatch_uuid_count"), "20000");
        let payload = by_topic("/mismatch_uuids");
        let v: Value = serde_json::from_str(&payload).unwrap();
        assert_eq!(v["uuids"].as_array().unwrap().len(), MISMATCH_UUIDS_SHOWN);
        assert_eq!(v["uuids"][0], missing[0].to_string());
        assert_eq!((&v["count"], &v["truncated"]), (&json!(20_000), &json!(true)));
        assert!(payload.len() < MAX_PAYLOAD_BYTES / 3, "{}", payload.len());
        // Every message of a run, with a long topic root, is within the limits.
        let root = "r".repeat(200);
        for m in statistics(&report, &root).iter().chain(&discovery(&root, "b")) {
            assert!(m.payload.len() <= MAX_PAYLOAD_BYTES, "{}", m.topic);
            assert!(packet_len(m) <= MAX_PACKET_BYTES, "{}", m.topic);
        }
    }
}
