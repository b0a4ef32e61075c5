//! MQTT reporting: Home Assistant discovery configs ([`discovery`]), then
//! the run's figures as retained topics under `{MQTT_TOPIC_ROOT}/statistic/`
//! ([`statistics`]: only those the run established, see [`is_known`]).
//!
//! The topics and payloads are the Python job's, so other subscribers keep
//! working; the discovery configs keep its `unique_id`s, `object_id`s and
//! device identifier, so Home Assistant entities, their ids and history
//! carry over. The contract, and where the configs differ from the Python
//! job's: `specs/reporting.md`.
//!
//! Guarantees of [`publish`]:
//!
//! - Every message is published retained at QoS 1, and `Ok` means the broker
//!   acknowledged every one (PUBACK) and the client then disconnected
//!   cleanly (DISCONNECT sent, so no will or session is left behind).
//! - The whole exchange (DNS, TCP, TLS, CONNECT, publishes, DISCONNECT) is
//!   bounded by [`MqttConfig::timeout`]; the error says what was under way.
//! - The client id is unique per call (`archive-compaction-{UUIDv7}`) and
//!   the session is clean, so two invocations never take over each other's
//!   connection.
//! - TLS (rustls) when [`MqttConfig::tls`]: the system's roots, or only the
//!   certificates of `MQTT_CA_FILE` (PEM) when set.
//! - Every payload is at most [`MAX_PAYLOAD_BYTES`] (16 KiB: Home
//!   Assistant's recorder keeps no attributes over 16,384 bytes; AWS IoT
//!   Core takes 128 KB) and the client's packet limit is set on purpose
//!   ([`MAX_PACKET_BYTES`]), not left at rumqttc's 10 KiB default. A
//!   message that is still too big is not queued: the others are published,
//!   and the error names it. A failed exchange names the topics the broker
//!   did not acknowledge.
//!
//! What is published is a pure function of the report:
//!
//! ```
//! use archive_compaction::mqtt::{discovery, statistics};
//! use archive_compaction::report::RunReport;
//!
//! // A run that read the state publishes all ten statistics.
//! let report = RunReport { files_compacted: 95, watermark_lag_days: Some(0), ..Default::default() };
//! let stats = statistics(&report, "SkyFollower/archive-compaction");
//! assert_eq!(stats.len(), 10);
//! assert_eq!(stats[0].topic, "SkyFollower/archive-compaction/statistic/files_compacted");
//! assert_eq!(stats[0].payload, "95");
//! let by_topic = |t: &str| stats.iter().find(|m| m.topic.ends_with(t)).unwrap().payload.clone();
//! assert_eq!(by_topic("/mismatch_date"), "None");
//! assert_eq!(by_topic("/mismatch_uuids"), r#"{"uuids":[],"count":0,"truncated":false}"#);
//!
//! // One that could not read it publishes only what it knows.
//! let failed = RunReport { watermark_lag_days: None, ..Default::default() };
//! assert_eq!(statistics(&failed, "root").len(), 5);
//!
//! let configs = discovery("SkyFollower/archive-compaction", "my-archive");
//! assert_eq!(configs.len(), 9);
//! assert_eq!(
//!     configs[0].topic,
//!     "homeassistant/sensor/SkyFollower_archive_compaction_files_compacted/config"
//! );
//! ```

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use rumqttc::tokio_rustls::rustls::pki_types::CertificateDer;
use rumqttc::tokio_rustls::rustls::pki_types::pem::PemObject;
use rumqttc::tokio_rustls::rustls::{ClientConfig, RootCertStore};
use rumqttc::{
    AsyncClient, Event, EventLoop, MqttOptions, Outgoing, Packet, QoS, TlsConfiguration, Transport,
};
use serde_json::{Value, json};

use crate::config::MqttConfig;
use crate::error::ReportError;
use crate::report::{RunReport, StopReason, UUIDS_SHOWN};

/// The most bytes a payload the job publishes takes: 16 KiB, Home
/// Assistant's limit for a state's attributes in its recorder (16,384
/// bytes; over it the attributes are not stored and a warning is logged).
/// The largest payload, `mismatch_uuids` with [`UUIDS_SHOWN`] uuids, is
/// about 3.9 KB.
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024;

/// The client's packet limit (rumqttc's `max_packet_size`, incoming and
/// outgoing): 32 KiB, room for a [`MAX_PAYLOAD_BYTES`] payload and its
/// topic, and well under AWS IoT Core's 128 KB. rumqttc's default (10 KiB)
/// would refuse a payload it does not need to, and its refusal ends the
/// whole exchange; here a message over the limit is refused before it is
/// queued ([`publish`]).
pub const MAX_PACKET_BYTES: usize = 32 * 1024;

/// The ten statistic topics, in publish order (`{root}/statistic/{name}`).
/// `mismatch_uuids` comes before `mismatch_uuid_count`: a subscriber that
/// reacts to the count finds the list it counts already retained.
pub const STATISTICS: [&str; 10] = [
    "files_compacted",
    "files_delete_failed",
    "days_compacted",
    "last_compacted_date",
    "mismatch_date",
    "mismatch_uuids",
    "mismatch_uuid_count",
    "mismatch_runs",
    "last_run_at",
    "last_run_status",
];

/// Home Assistant's discovery prefix.
pub const DISCOVERY_PREFIX: &str = "homeassistant";

/// The Home Assistant device (and the prefix of every `unique_id` and
/// `object_id`, so entity ids are `sensor.skyfollower_archive_compaction_{name}`).
pub const DEVICE_ID: &str = "SkyFollower_archive_compaction";

/// The date sensors' `value_template`: the payload `None` (no date) becomes
/// `unknown`, Home Assistant's own state for "no value"; a date passes as it
/// is. Home Assistant 2024.3 renders every template to text, so a template
/// cannot hand it a real null (`{{ none }}` shows as the text `None`), and a
/// sensor with `device_class: date` logs "Invalid state message 'None'" for
/// any payload that is not a date: hence text sensors with this template.
pub const DATE_TEMPLATE: &str = "{{ 'unknown' if value == 'None' else value }}";

/// The count sensor's `value_template` on the `mismatch_uuids` topic: its
/// state is the payload's exact `count` (the list may be cut at
/// [`UUIDS_SHOWN`]), read from the topic that is also its attributes, so
/// both change in the one state Home Assistant writes for the one message.
/// A retained payload of the Python job (`{"uuids": [...]}` only) counts
/// its list.
pub const COUNT_TEMPLATE: &str =
    "{{ value_json.count if value_json.count is defined else value_json.uuids | length }}";

/// One MQTT message, published retained at QoS 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The full topic.
    pub topic: String,
    /// The payload (UTF-8 text or JSON).
    pub payload: String,
}

/// The statistic topic for `name` under `topic_root`.
pub fn statistic_topic(topic_root: &str, name: &str) -> String {
    format!("{topic_root}/statistic/{name}")
}

/// The discovery config topic for the sensor `name`.
pub fn discovery_topic(name: &str) -> String {
    format!("{DISCOVERY_PREFIX}/sensor/{DEVICE_ID}_{name}/config")
}

/// `YYYY-MM-DD`, or the string `None` when unset (the Python job's format).
pub fn format_date(date: Option<NaiveDate>) -> String {
    date.map_or_else(|| "None".to_string(), |d| d.format("%Y-%m-%d").to_string())
}

/// ISO 8601 in UTC with microseconds and `+00:00`, as Python's
/// `datetime.isoformat()` prints it, e.g. `2026-07-22T04:50:00.000000+00:00`.
pub fn format_timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, false)
}

/// Whether the run established the statistic `name`; one it did not is not
/// published, so the broker keeps the last known value retained.
///
/// - The per-run figures (`files_compacted`, `files_delete_failed`,
///   `days_compacted`), `last_run_at` and `last_run_status`: always.
/// - `last_compacted_date` and `mismatch_runs` come from the state file:
///   only when the run read it ([`RunReport::state_known`]).
/// - `mismatch_date`, `mismatch_uuids`, `mismatch_uuid_count`: when the
///   state was read and either this run found a mismatch or the state holds
///   none (`mismatch_runs` 0). A run that read a state still blocked on an
///   earlier mismatch date but did not check that date again (a Failure
///   before it, the deadline) does not know whether the mismatch persists.
/// - Nothing, when another invocation held the lease
///   ([`StopReason::LeaseHeld`]): this run did no work, and its `Success`
///   would overwrite the holder's retained status (a `Mismatch`, say) and
///   per-run figures; the holder publishes its own.
pub fn is_known(report: &RunReport, name: &str) -> bool {
    if report.stop_reason == StopReason::LeaseHeld {
        return false;
    }
    match name {
        "last_compacted_date" | "mismatch_runs" => report.state_known(),
        "mismatch_date" | "mismatch_uuids" | "mismatch_uuid_count" => {
            report.state_known() && (report.mismatch_date.is_some() || report.mismatch_runs == 0)
        }
        _ => true,
    }
}

/// The retained statistic messages for `report`, in [`STATISTICS`] order,
/// leaving out what the run did not establish ([`is_known`]): all ten after
/// a run that read the state, five (`files_compacted`,
/// `files_delete_failed`, `days_compacted`, `last_run_at`,
/// `last_run_status`) after one that could not, none after one that found
/// the lease held. Numbers are decimal text;
/// `last_run_at` is the invocation time.
pub fn statistics(report: &RunReport, topic_root: &str) -> Vec<Message> {
    let payload = |name: &str| -> String {
        match name {
            "files_compacted" => report.files_compacted.to_string(),
            "files_delete_failed" => report.files_delete_failed.to_string(),
            "days_compacted" => report.days_compacted.to_string(),
            "last_compacted_date" => format_date(report.last_compacted_date),
            "mismatch_date" => format_date(report.mismatch_date),
            "mismatch_uuid_count" => report.mismatch_uuid_count.to_string(),
            "mismatch_uuids" => mismatch_uuids_payload(report),
            "mismatch_runs" => report.mismatch_runs.to_string(),
            "last_run_at" => format_timestamp(report.last_run_at),
            "last_run_status" => report.last_run_status.as_str().to_string(),
            other => unreachable!("unknown statistic {other}"),
        }
    };
    STATISTICS
        .iter()
        .filter(|name| is_known(report, name))
        .map(|name| Message {
            topic: statistic_topic(topic_root, name),
            payload: payload(name),
        })
        .collect()
}

/// The `mismatch_uuids` payload: the Python job's `{"uuids": [...]}` with
/// at most [`UUIDS_SHOWN`] uuids (the first, sorted), then `count`, the
/// exact number of flights without an index row (`mismatch_uuid_count`),
/// and `truncated`, true when the list holds fewer than `count`; e.g.
/// `{"uuids":["0198…",…],"count":20000,"truncated":true}`. At most about
/// 3.9 KB.
pub fn mismatch_uuids_payload(report: &RunReport) -> String {
    let shown = &report.mismatch_uuids[..report.mismatch_uuids.len().min(UUIDS_SHOWN)];
    let count = report.mismatch_uuid_count.max(shown.len() as u64);
    format!(
        r#"{{"uuids":{},"count":{count},"truncated":{}}}"#,
        Value::from(shown.to_vec()),
        (shown.len() as u64) < count
    )
}

/// One Home Assistant sensor: the statistic it shows and how.
struct Sensor {
    /// The statistic; the sensor's `unique_id` and `object_id` are
    /// `{DEVICE_ID}_{name}`.
    name: &'static str,
    title: &'static str,
    icon: &'static str,
    /// The statistic whose topic is the state topic, when not `name`.
    state_from: Option<&'static str>,
    value_template: Option<&'static str>,
    /// `measurement` for the numbers (each is a per-run figure, not a running total).
    state_class: Option<&'static str>,
    device_class: Option<&'static str>,
    /// The statistic whose JSON becomes the entity's attributes.
    attributes: Option<&'static str>,
}

const PLAIN: Sensor = Sensor {
    name: "",
    title: "",
    icon: "",
    state_from: None,
    value_template: None,
    state_class: None,
    device_class: None,
    attributes: None,
};

/// The nine sensors (every statistic but `mismatch_uuids`, which is the
/// attributes of `mismatch_uuid_count`), in discovery order. No
/// `unit_of_measurement`, since adding one to an entity with recorded
/// statistics makes Home Assistant flag a unit change. Where and why these
/// differ from the Python job's configs: `specs/reporting.md`.
const SENSORS: [Sensor; 9] = [
    Sensor {
        name: "files_compacted",
        title: "Files Compacted",
        icon: "mdi:file-multiple",
        state_class: Some("measurement"),
        ..PLAIN
    },
    Sensor {
        name: "files_delete_failed",
        title: "Delete Failures",
        icon: "mdi:alert",
        state_class: Some("measurement"),
        ..PLAIN
    },
    Sensor {
        name: "days_compacted",
        title: "Days Compacted",
        icon: "mdi:calendar-check",
        state_class: Some("measurement"),
        ..PLAIN
    },
    Sensor {
        name: "last_compacted_date",
        title: "Last Compacted Date",
        icon: "mdi:calendar",
        value_template: Some(DATE_TEMPLATE),
        ..PLAIN
    },
    Sensor {
        name: "mismatch_date",
        title: "Mismatch Date",
        icon: "mdi:calendar-alert",
        value_template: Some(DATE_TEMPLATE),
        ..PLAIN
    },
    Sensor {
        name: "mismatch_uuid_count",
        title: "Mismatch Flight Count",
        icon: "mdi:alert-circle",
        state_from: Some("mismatch_uuids"),
        value_template: Some(COUNT_TEMPLATE),
        state_class: Some("measurement"),
        attributes: Some("mismatch_uuids"),
        ..PLAIN
    },
    Sensor {
        name: "mismatch_runs",
        title: "Mismatch Consecutive Runs",
        icon: "mdi:counter",
        state_class: Some("measurement"),
        ..PLAIN
    },
    Sensor {
        name: "last_run_at",
        title: "Last Run At",
        icon: "mdi:clock",
        device_class: Some("timestamp"),
        ..PLAIN
    },
    Sensor {
        name: "last_run_status",
        title: "Last Run Status",
        icon: "mdi:check-circle",
        ..PLAIN
    },
];

/// The device block shared by every discovery config: identifiers, name,
/// manufacturer, model, `configuration_url` (the S3 console page of
/// `bucket`, the archive the job compacts) and `sw_version` (this crate's
/// version, from the build).
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

/// The nine retained Home Assistant discovery configs (JSON), one per
/// statistic except `mismatch_uuids`, for the job compacting `bucket`.
pub fn discovery(topic_root: &str, bucket: &str) -> Vec<Message> {
    SENSORS
        .iter()
        .map(|s| {
            let id = format!("{DEVICE_ID}_{}", s.name);
            let mut config = json!({
                "name": s.title,
                "unique_id": id,
                "object_id": id,
                "state_topic": statistic_topic(topic_root, s.state_from.unwrap_or(s.name)),
                "icon": s.icon,
                "device": device(bucket),
            });
            if let Some(t) = s.value_template {
                config["value_template"] = t.into();
            }
            if let Some(c) = s.state_class {
                config["state_class"] = c.into();
            }
            if let Some(c) = s.device_class {
                config["device_class"] = c.into();
            }
            if let Some(a) = s.attributes {
                config["json_attributes_topic"] = statistic_topic(topic_root, a).into();
            }
            Message {
                topic: discovery_topic(s.name),
                payload: config.to_string(),
            }
        })
        .collect()
}

/// How far an exchange got (for the errors).
#[derive(Debug, Default)]
struct Progress {
    connected: bool,
    acked: usize,
    disconnecting: bool,
    /// Per message: whether the broker acknowledged it.
    done: Vec<bool>,
    /// PUBLISH packets written so far.
    published: usize,
    /// Packet id -> message index, for the messages sent and not acknowledged.
    sent: std::collections::HashMap<u16, usize>,
}

impl Progress {
    fn stage(&self) -> &'static str {
        match (self.connected, self.disconnecting) {
            (false, _) => "connecting",
            (true, false) => "publishing",
            (true, true) => "disconnecting",
        }
    }

    /// The messages of `messages` not acknowledged: `all` when none was,
    /// else their short names ([`short_name`]), comma-separated.
    fn pending(&self, messages: &[Message]) -> String {
        let pending: Vec<String> = (messages.iter().enumerate())
            .filter(|(i, _)| !self.done.get(*i).copied().unwrap_or(false))
            .map(|(_, m)| short_name(&m.topic))
            .collect();
        match pending.len() {
            0 => "none".into(),
            n if n == messages.len() => "all".into(),
            _ => pending.join(", "),
        }
    }
}

/// A topic as the errors name it: a statistic by its name
/// (`mismatch_uuids`), a discovery config as `{name} config`, any other
/// topic in full.
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

/// How many connections [`publish`] makes at most: after the broker closes
/// one while publishing, the message it closed at is left out and the rest
/// go on a new one (all within `MQTT_TIMEOUT_SECONDS`).
pub const MAX_CONNECTIONS: usize = 4;

/// The bytes of the PUBLISH packet for `m` at QoS 1: fixed header (at most
/// 5 bytes), topic length and topic, packet id, payload.
fn packet_len(m: &Message) -> usize {
    5 + 2 + m.topic.len() + 2 + m.payload.len()
}

/// Publishes `messages` retained at QoS 1 and waits for every PUBACK, then
/// disconnects; all within `config.timeout`. Returns the errors, none when
/// every message was acknowledged.
///
/// A message whose payload is over [`MAX_PAYLOAD_BYTES`] (or whose packet
/// is over [`MAX_PACKET_BYTES`]) is not queued
/// ([`ReportError::MqttTooLarge`], naming its topic); the others are
/// published all the same. When the broker closes the connection while
/// publishing (a broker with a lower packet limit of its own does so at
/// the message it refuses), the messages not acknowledged go again on a
/// new connection one at a time; the one the broker closes that
/// connection at goes again last, alone, and is left out
/// ([`ReportError::MqttDropped`]) only when the broker closes the
/// connection at it again; the rest go on, up to [`MAX_CONNECTIONS`]
/// connections in all. Only what is finally not delivered is an error: a
/// connection closed and made good by the next is logged, not returned.
///
/// Errors: [`ReportError::MqttTls`] (TLS roots), [`ReportError::Mqtt`]
/// (refused, not authorised, connection lost), [`ReportError::MqttTimeout`];
/// the last two name the topics not acknowledged.
pub async fn publish(config: &MqttConfig, messages: &[Message]) -> Vec<ReportError> {
    let broker = format!("{}:{}", config.host, config.port);
    let (sendable, too_large): (Vec<&Message>, Vec<&Message>) = (messages.iter())
        .partition(|m| m.payload.len() <= MAX_PAYLOAD_BYTES && packet_len(m) <= MAX_PACKET_BYTES);
    let mut errors: Vec<ReportError> = (too_large.iter())
        .map(|m| ReportError::MqttTooLarge {
            broker: broker.clone(),
            topic: m.topic.clone(),
            bytes: m.payload.len(),
            limit: MAX_PAYLOAD_BYTES,
        })
        .collect();
    let mut messages: Vec<Message> = sendable.into_iter().cloned().collect();
    let started = std::time::Instant::now();
    let deadline = tokio::time::Instant::now() + config.timeout;
    // Topics the broker closed a connection at, once.
    let mut closed_at: HashSet<String> = HashSet::new();
    for attempt in 1..=MAX_CONNECTIONS {
        let client_id = format!("archive-compaction-{}", uuid::Uuid::now_v7().simple());
        let mut progress = Progress {
            done: vec![false; messages.len()],
            ..Progress::default()
        };
        let result = tokio::time::timeout_at(
            deadline,
            exchange(
                config,
                &client_id,
                &broker,
                &messages,
                attempt > 1,
                &mut progress,
            ),
        )
        .await
        .unwrap_or_else(|_| {
            Err(ReportError::MqttTimeout {
                broker: broker.clone(),
                timeout: config.timeout,
                stage: progress.stage(),
                acked: progress.acked,
                total: messages.len(),
                pending: progress.pending(&messages),
            })
        });
        let error = match result {
            Ok(()) => {
                tracing::info!(
                    %broker,
                    client_id,
                    messages = messages.len(),
                    attempt,
                    seconds = started.elapsed().as_secs_f64(),
                    "MQTT statistics and discovery configs published"
                );
                break;
            }
            Err(e) => e,
        };
        // The broker closed the connection while messages were going out
        // (a broker's own packet limit closes it at the message it
        // refuses; the acknowledgements before it may be lost with the
        // connection). The messages not acknowledged go again on a new
        // connection, one at a time: a close then comes at the one message
        // in flight. That message goes again last, alone: closed at a
        // second time, it is refused for real and left out (named); the
        // rest go on. Only what is finally not delivered is an error: a
        // connection closed and made good by the next one is logged only.
        let dropped = matches!(error, ReportError::Mqtt { .. }) && progress.connected;
        let first_pending = progress.done.iter().position(|done| !done);
        let at = first_pending.filter(|_| dropped && attempt > 1);
        let (mut refused, mut again_last) = (None, None);
        if let Some(i) = at {
            if closed_at.insert(messages[i].topic.clone()) {
                tracing::warn!(%broker, topic = %messages[i].topic,
                    "MQTT broker closed the connection at this message: it goes again last, alone");
                again_last = Some(i);
            } else {
                tracing::warn!(%broker, topic = %messages[i].topic,
                    "MQTT broker closed the connection at this message again: left out, the others sent");
                errors.push(ReportError::MqttDropped {
                    broker: broker.clone(),
                    topic: messages[i].topic.clone(),
                });
                refused = Some(i);
            }
        }
        let left = (0..messages.len())
            .filter(|i| Some(*i) != refused && !progress.done[*i])
            .count();
        let go_on = dropped && left > 0 && attempt < MAX_CONNECTIONS;
        if !go_on {
            if left > 0 {
                errors.push(error);
            }
            break;
        }
        tracing::warn!(%broker, error = %error, attempt,
            "MQTT connection closed while publishing; the messages not acknowledged go again on a new connection");
        let mut next: Vec<Message> = Vec::with_capacity(left);
        let mut last = None;
        for (i, m) in messages.into_iter().enumerate() {
            if Some(i) == refused || progress.done[i] {
                continue;
            }
            if Some(i) == again_last {
                last = Some(m);
            } else {
                next.push(m);
            }
        }
        next.extend(last);
        messages = next;
    }
    errors
}

/// How long [`read_retained`] waits for retained messages once the broker
/// acknowledged the subscription (a broker sends them right after the
/// SUBACK; a topic never published has none).
pub const RETAINED_WAIT: Duration = Duration::from_secs(2);

/// Reads the retained statistics `names` (e.g. `last_run_at`) under
/// `config.topic_root`, read-only: subscribes, collects the retained
/// messages the broker sends, and disconnects once every name arrived or
/// [`RETAINED_WAIT`] after the SUBACK, all within `config.timeout`.
/// Returns name → payload for those found (a topic never published is
/// absent). What `status` shows as the last run.
///
/// Errors: the connection refused, not authorised or lost, TLS roots, or
/// the timeout, as one line naming the broker.
pub async fn read_retained(
    config: &MqttConfig,
    names: &[&str],
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let broker = format!("{}:{}", config.host, config.port);
    let client_id = format!(
        "archive-compaction-status-{}",
        uuid::Uuid::now_v7().simple()
    );
    let options = options(config, &client_id, &broker).map_err(|e| e.to_string())?;
    let (client, mut events) = AsyncClient::new(options, names.len() + 2);
    let topics: Vec<(String, &str)> = (names.iter())
        .map(|n| (statistic_topic(&config.topic_root, n), *n))
        .collect();
    for (t, _) in &topics {
        client
            .try_subscribe(t.as_str(), QoS::AtLeastOnce)
            .map_err(|e| format!("MQTT {broker}: cannot subscribe to {t}: {e}"))?;
    }
    let mut got = std::collections::BTreeMap::new();
    let read = async {
        let mut quiet_until: Option<tokio::time::Instant> = None;
        let mut subacks = 0;
        loop {
            let event = match quiet_until {
                Some(at) => match tokio::time::timeout_at(at, events.poll()).await {
                    Ok(e) => e,
                    Err(_) => return Ok(()),
                },
                None => events.poll().await,
            };
            match event.map_err(|e| format!("MQTT {broker}: {e}"))? {
                Event::Incoming(Packet::SubAck(_)) => {
                    subacks += 1;
                    if subacks == topics.len() {
                        quiet_until = Some(tokio::time::Instant::now() + RETAINED_WAIT);
                    }
                }
                Event::Incoming(Packet::Publish(p)) if p.retain => {
                    if let Some((_, name)) = topics.iter().find(|(t, _)| *t == p.topic) {
                        got.insert(
                            name.to_string(),
                            String::from_utf8_lossy(&p.payload).into_owned(),
                        );
                    }
                    if got.len() == topics.len() {
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
    };
    let result: Result<(), String> = tokio::time::timeout(config.timeout, read)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "MQTT {broker}: no answer within {} s (MQTT_TIMEOUT_SECONDS)",
                config.timeout.as_secs()
            ))
        });
    let _ = client.try_disconnect();
    result.map(|()| got)
}

/// The client options: id, clean session, credentials, TLS.
fn options(config: &MqttConfig, client_id: &str, broker: &str) -> Result<MqttOptions, ReportError> {
    let mut options = MqttOptions::new(client_id, config.host.clone(), config.port);
    options.set_clean_session(true);
    options.set_max_packet_size(MAX_PACKET_BYTES, MAX_PACKET_BYTES);
    options.set_keep_alive(Duration::from_secs(30));
    if config.username.is_some() || config.password.is_some() {
        options.set_credentials(
            config.username.clone().unwrap_or_default(),
            config.password.clone().unwrap_or_default(),
        );
    }
    if config.tls {
        let tls = tls_config(config.ca_file.as_deref()).map_err(|reason| ReportError::MqttTls {
            broker: broker.to_string(),
            reason,
        })?;
        options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
            Arc::new(tls),
        )));
    }
    Ok(options)
}

/// A rustls client config trusting the certificates of `ca_file` (PEM), or
/// the system's roots when `None`.
fn tls_config(ca_file: Option<&str>) -> Result<ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let pem =
                std::fs::read(path).map_err(|e| format!("cannot read MQTT_CA_FILE {path}: {e}"))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("MQTT_CA_FILE {path}: bad PEM: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("MQTT_CA_FILE {path}: bad certificate: {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("MQTT_CA_FILE {path} holds no PEM certificate"));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(format!(
                    "no system root certificates found ({:?}); set MQTT_CA_FILE",
                    found.errors
                ));
            }
        }
    }
    Ok(ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A hint for a connection that failed before the broker's CONNACK when TLS
/// and the port disagree: a plain client on 8883 (MQTT over TLS, the
/// broker resets the connection at the first bytes) or TLS on a plain port
/// (the TLS handshake reads an MQTT answer). Empty otherwise.
///
/// ```
/// # use archive_compaction::mqtt::tls_hint;
/// # use archive_compaction::config::MqttConfig;
/// # use std::time::Duration;
/// let c = MqttConfig { host: "h".into(), port: 8883, username: None, password: None,
///     password_secret_arn: None, tls: false, ca_file: None, topic_root: "r".into(),
///     timeout: Duration::from_secs(5) };
/// assert!(tls_hint(&c, "I/O: Connection reset by peer (os error 104)", false).contains("MQTT_TLS=true"));
/// assert_eq!(tls_hint(&c, "I/O: Connection reset by peer", true), "");
/// ```
pub fn tls_hint(config: &MqttConfig, error: &str, connected: bool) -> String {
    if connected {
        return String::new();
    }
    let e = error.to_ascii_lowercase();
    let reset = ["reset", "broken pipe", "eof", "closed", "aborted"]
        .iter()
        .any(|w| e.contains(w));
    if !config.tls && config.port == 8883 && reset {
        return "; the broker dropped the connection at once, and port 8883 is MQTT over TLS: set MQTT_TLS=true (or use the broker's plain port, 1883)".into();
    }
    let tls_error = [
        "tls",
        "handshake",
        "corrupt message",
        "invalidcontenttype",
        "invalid content type",
        "certificate",
    ]
    .iter()
    .any(|w| e.contains(w));
    if config.tls && config.port != 8883 && (tls_error || reset) {
        return format!(
            "; TLS is on (MQTT_TLS) but port {} may be a plain MQTT port: set MQTT_TLS=false, or MQTT_PORT to the broker's TLS port (8883)",
            config.port
        );
    }
    String::new()
}

/// Connect, publish, await every PUBACK, disconnect. Not bounded by itself.
/// `one_at_a_time`: each message is sent once the one before it is
/// acknowledged (one in flight), so a closed connection names the message.
async fn exchange(
    config: &MqttConfig,
    client_id: &str,
    broker: &str,
    messages: &[Message],
    one_at_a_time: bool,
    progress: &mut Progress,
) -> Result<(), ReportError> {
    let total = messages.len();
    let fail = |reason: String, progress: &Progress| ReportError::Mqtt {
        broker: broker.to_string(),
        reason,
        acked: progress.acked,
        total,
        pending: progress.pending(messages),
    };
    let mut options = options(config, client_id, broker)?;
    if one_at_a_time {
        options.set_inflight(1);
    }
    // The request channel holds every message and the DISCONNECT, so
    // queueing never waits on the event loop.
    let (client, mut events): (AsyncClient, EventLoop) = AsyncClient::new(options, total + 2);
    // The outer timeout is the real bound; keep rumqttc's own network
    // timeout (5 s by default) from cutting in first.
    let mut network = events.network_options();
    network.set_connection_timeout(config.timeout.as_secs().saturating_add(1));
    events.set_network_options(network);
    for m in messages {
        client
            .try_publish(
                m.topic.as_str(),
                QoS::AtLeastOnce,
                true,
                m.payload.as_bytes(),
            )
            .map_err(|e| fail(format!("cannot queue {}: {e}", m.topic), progress))?;
    }
    if total == 0 {
        return Ok(());
    }
    let mut in_flight: HashSet<u16> = HashSet::new();
    loop {
        let event = events.poll().await.map_err(|e| {
            let reason = format!(
                "{e}{}",
                tls_hint(config, &e.to_string(), progress.connected)
            );
            fail(reason, progress)
        })?;
        match event {
            Event::Incoming(Packet::ConnAck(_)) => progress.connected = true,
            Event::Outgoing(Outgoing::Publish(pkid)) => {
                // Sent in the order queued: the n-th PUBLISH is messages[n].
                progress.sent.insert(pkid, progress.published);
                progress.published += 1;
                in_flight.insert(pkid);
            }
            Event::Incoming(Packet::PubAck(ack)) => {
                if in_flight.remove(&ack.pkid) {
                    progress.acked += 1;
                    if let Some(i) = progress.sent.remove(&ack.pkid) {
                        progress.done[i] = true;
                    }
                }
                if progress.acked == total && !progress.disconnecting {
                    progress.disconnecting = true;
                    client
                        .try_disconnect()
                        .map_err(|e| fail(format!("cannot disconnect: {e}"), progress))?;
                }
            }
            // Written and flushed before this event is returned.
            Event::Outgoing(Outgoing::Disconnect) => return Ok(()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Status;

    fn full_report() -> RunReport {
        RunReport {
            files_compacted: 95,
            files_delete_failed: 2,
            days_compacted: 4,
            last_compacted_date: Some(NaiveDate::from_ymd_opt(2026, 7, 21).unwrap()),
            mismatch_date: Some(NaiveDate::from_ymd_opt(2026, 7, 22).unwrap()),
            mismatch_uuid_count: 2,
            mismatch_uuids: vec!["a".into(), "b".into()],
            mismatch_runs: 3,
            last_run_at: DateTime::parse_from_rfc3339("2026-07-24T04:50:03.5Z")
                .unwrap()
                .to_utc(),
            last_run_status: Status::Mismatch,
            watermark_lag_days: Some(2),
            ..Default::default()
        }
    }

    fn names(messages: &[Message]) -> Vec<&str> {
        messages
            .iter()
            .map(|m| m.topic.strip_prefix("root/statistic/").unwrap())
            .collect()
    }

    #[test]
    fn statistics_payloads() {
        let got: Vec<(String, String)> = statistics(&full_report(), "root")
            .into_iter()
            .map(|m| (m.topic, m.payload))
            .collect();
        let want: Vec<(String, String)> = [
            ("files_compacted", "95"),
            ("files_delete_failed", "2"),
            ("days_compacted", "4"),
            ("last_compacted_date", "2026-07-21"),
            ("mismatch_date", "2026-07-22"),
            (
                "mismatch_uuids",
                r#"{"uuids":["a","b"],"count":2,"truncated":false}"#,
            ),
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
            !got.iter()
                .any(|n| n.starts_with("mismatch_") && *n != "mismatch_runs"),
            "{got:?}"
        );
        assert!(got.contains(&"last_compacted_date") && got.contains(&"mismatch_runs"));
        // A state with no mismatch: "no mismatch" is known and published.
        let clear = RunReport {
            mismatch_runs: 0,
            ..report
        };
        assert_eq!(statistics(&clear, "root").len(), 10);
    }

    #[test]
    fn discovery_configs() {
        let configs = discovery("root", "my-archive");
        let names: Vec<&str> = STATISTICS
            .iter()
            .copied()
            .filter(|n| *n != "mismatch_uuids")
            .collect();
        let discovered: Vec<&str> = SENSORS.iter().map(|s| s.name).collect();
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
            let state_from = if name == "mismatch_uuid_count" {
                "mismatch_uuids"
            } else {
                name
            };
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
        let missing: Vec<uuid::Uuid> = (0..20_000u128)
            .map(|i| uuid::Uuid::from_u128(u128::MAX - i))
            .collect();
        let mut report = full_report();
        report.set_mismatch(NaiveDate::from_ymd_opt(2026, 7, 22).unwrap(), &missing);
        let stats = statistics(&report, "root");
        let by_topic = |t: &str| {
            stats
                .iter()
                .find(|m| m.topic.ends_with(t))
                .unwrap()
                .payload
                .clone()
        };
        assert_eq!(by_topic("/mismatch_uuid_count"), "20000");
        let payload = by_topic("/mismatch_uuids");
        let v: Value = serde_json::from_str(&payload).unwrap();
        assert_eq!(v["uuids"].as_array().unwrap().len(), UUIDS_SHOWN);
        assert_eq!(v["uuids"][0], missing[0].to_string());
        assert_eq!(
            (&v["count"], &v["truncated"]),
            (&json!(20_000), &json!(true))
        );
        assert!(payload.len() < MAX_PAYLOAD_BYTES / 3, "{}", payload.len());
        // Every message of a run, with a long topic root, is within the limits.
        let root = "r".repeat(200);
        for m in statistics(&report, &root)
            .iter()
            .chain(&discovery(&root, "b"))
        {
            assert!(m.payload.len() <= MAX_PAYLOAD_BYTES, "{}", m.topic);
            assert!(packet_len(m) <= MAX_PACKET_BYTES, "{}", m.topic);
        }
    }

    #[test]
    fn errors_name_the_messages_not_acknowledged() {
        let messages: Vec<Message> = discovery("root", "b")
            .into_iter()
            .take(2)
            .chain(statistics(&full_report(), "root").into_iter().take(2))
            .collect();
        let mut p = Progress {
            done: vec![false; 4],
            ..Progress::default()
        };
        assert_eq!(p.pending(&messages), "all");
        p.done[0] = true;
        p.done[2] = true;
        assert_eq!(
            p.pending(&messages),
            "files_delete_failed config, files_delete_failed"
        );
        p.done = vec![true; 4];
        assert_eq!(p.pending(&messages), "none");
        assert_eq!(short_name("elsewhere/x"), "elsewhere/x");
    }

    #[test]
    fn the_client_packet_limit_is_set() {
        let config = MqttConfig {
            host: "127.0.0.1".into(),
            port: 1883,
            username: None,
            password: None,
            password_secret_arn: None,
            tls: false,
            ca_file: None,
            topic_root: "root".into(),
            timeout: Duration::from_secs(5),
        };
        let o = options(&config, "id", "127.0.0.1:1883").unwrap();
        assert_eq!(o.max_packet_size(), MAX_PACKET_BYTES);
    }

    #[test]
    fn ca_file_errors_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = tls_config(Some(empty.to_str().unwrap())).unwrap_err();
        assert!(e.contains("holds no PEM certificate"), "{e}");
        let e = tls_config(Some("/nonexistent/ca.pem")).unwrap_err();
        assert!(e.contains("cannot read MQTT_CA_FILE"), "{e}");
    }
}
