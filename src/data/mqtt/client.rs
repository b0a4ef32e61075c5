//! The MQTT client: one bounded exchange per call ([`publish`], [`read_retained`]), each with a
//! unique client id and a clean session, so two invocations never take over each other's
//! connection.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rumqttc::tokio_rustls::rustls::pki_types::CertificateDer;
use rumqttc::tokio_rustls::rustls::pki_types::pem::PemObject;
use rumqttc::tokio_rustls::rustls::{ClientConfig, RootCertStore};
use rumqttc::{
    AsyncClient, Event, EventLoop, MqttOptions, Outgoing, Packet, QoS, TlsConfiguration, Transport,
};

use super::payloads::{MAX_PAYLOAD_BYTES, Message, short_name, statistic_topic};
use crate::data::config::MqttConfig;
use crate::infra::error::ReportError;

/// The client's packet limit (rumqttc's `max_packet_size`, both ways): room
/// for a [`MAX_PAYLOAD_BYTES`] payload and its topic, under AWS IoT Core's
/// 128 KB; rumqttc's 10 KiB default refuses, which ends the whole exchange.
pub const MAX_PACKET_BYTES: usize = 32 * 1024;

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

/// Connections [`publish`] makes at most (all within `MQTT_TIMEOUT_SECONDS`).
pub(crate) const MAX_CONNECTIONS: usize = 4;

/// The bytes of `m`'s PUBLISH packet at QoS 1 (fixed header at most 5 bytes).
pub(super) fn packet_len(m: &Message) -> usize {
    5 + 2 + m.topic.len() + 2 + m.payload.len()
}

/// Publishes `messages` retained at QoS 1, waits for every PUBACK, then disconnects, within
/// `config.timeout`. When the broker closes the connection (its own packet limit closes it at the
/// message it refuses), the messages not acknowledged go again on a new connection, that one last
/// and alone; closed at again, it is left out ([`ReportError::MqttDropped`]).
///
/// Errors (returned, never failing the run): [`ReportError::MqttTooLarge`] for a message over
/// [`MAX_PAYLOAD_BYTES`] or [`MAX_PACKET_BYTES`] (not queued: the others go on),
/// [`ReportError::MqttTls`], [`ReportError::Mqtt`], [`ReportError::MqttTimeout`], naming the
/// topics not acknowledged.
pub async fn publish(config: &MqttConfig, messages: &[Message]) -> Vec<ReportError> {
    let broker = format!("{}:{}", config.host, config.port);
    let (mut messages, mut errors) = sendable(&broker, messages);
    let started = std::time::Instant::now();
    let deadline = tokio::time::Instant::now() + config.timeout;
    // Topics the broker closed a connection at, once.
    let mut closed_at: HashSet<String> = HashSet::new();
    for attempt in 1..=MAX_CONNECTIONS {
        let client_id = format!("archive-compaction-{}", uuid::Uuid::now_v7().simple());
        let (result, progress) =
            connect_once(config, &client_id, &broker, &messages, attempt, deadline).await;
        let Err(error) = result else {
            let seconds = crate::infra::text::millis(started.elapsed().as_secs_f64());
            tracing::info!(%broker, client_id, messages = messages.len(), attempt, seconds,
                "MQTT statistics and discovery configs published");
            break;
        };
        // Closed while publishing: the rest go again one at a time.
        let dropped = matches!(error, ReportError::Mqtt { .. }) && progress.connected;
        let mut done = progress.done;
        let mut again_last = false;
        // One at a time, the connection closed at the first message not acknowledged.
        if let Some(i) = done.iter().position(|done| !done).filter(|_| dropped && attempt > 1) {
            again_last = closed_at_message(&broker, &messages[i], &mut closed_at, &mut errors);
            done[i] = !again_last;
        }
        let left = done.iter().filter(|done| !**done).count();
        let go_on = dropped && left > 0 && attempt < MAX_CONNECTIONS;
        if !go_on {
            if left > 0 {
                errors.push(error);
            }
            break;
        }
        tracing::warn!(%broker, error = %error, attempt,
            "MQTT connection closed while publishing; the messages not acknowledged go again on a new connection");
        messages =
            messages.into_iter().zip(done).filter_map(|(m, done)| (!done).then_some(m)).collect();
        if again_last {
            // It was the first left.
            messages.rotate_left(1);
        }
    }
    errors
}

fn sendable(broker: &str, messages: &[Message]) -> (Vec<Message>, Vec<ReportError>) {
    let (sendable, too_large): (Vec<&Message>, Vec<&Message>) = (messages.iter())
        .partition(|m| m.payload.len() <= MAX_PAYLOAD_BYTES && packet_len(m) <= MAX_PACKET_BYTES);
    let errors = (too_large.iter())
        .map(|m| ReportError::MqttTooLarge {
            broker: broker.to_string(),
            topic: m.topic.clone(),
            bytes: m.payload.len(),
            limit: MAX_PAYLOAD_BYTES,
        })
        .collect();
    (sendable.into_iter().cloned().collect(), errors)
}

/// One connection's exchange (`attempt`, from 1), cut at `deadline`.
async fn connect_once(
    config: &MqttConfig,
    client_id: &str,
    broker: &str,
    messages: &[Message],
    attempt: usize,
    deadline: tokio::time::Instant,
) -> (Result<(), ReportError>, Progress) {
    let mut progress = Progress { done: vec![false; messages.len()], ..Progress::default() };
    let result = tokio::time::timeout_at(
        deadline,
        exchange(config, client_id, broker, messages, attempt > 1, &mut progress),
    )
    .await
    .unwrap_or_else(|_| {
        Err(ReportError::MqttTimeout {
            broker: broker.to_string(),
            timeout: config.timeout,
            stage: progress.stage(),
            acked: progress.acked,
            total: messages.len(),
            pending: progress.pending(messages),
        })
    });
    (result, progress)
}

/// The broker closed the connection at `message` ([`publish`]): whether it goes again (last and
/// alone, the first time) or is left out (the second).
fn closed_at_message(
    broker: &str,
    message: &Message,
    closed_at: &mut HashSet<String>,
    errors: &mut Vec<ReportError>,
) -> bool {
    if closed_at.insert(message.topic.clone()) {
        tracing::warn!(%broker, topic = %message.topic,
            "MQTT broker closed the connection at this message: it goes again last, alone");
        return true;
    }
    tracing::warn!(%broker, topic = %message.topic,
        "MQTT broker closed the connection at this message again: left out, the others sent");
    errors.push(ReportError::MqttDropped {
        broker: broker.to_string(),
        topic: message.topic.clone(),
    });
    false
}

/// How long [`read_retained`] waits after the SUBACK (a broker sends retained
/// messages right after it; a topic never published has none).
pub const RETAINED_WAIT: Duration = Duration::from_secs(2);

/// Reads the retained statistics `names` under `config.topic_root` (read-only)
/// until all arrived or [`RETAINED_WAIT`], within `config.timeout`.
///
/// Errors: refused, not authorised, lost, TLS or timeout, one line naming the broker.
pub async fn read_retained(
    config: &MqttConfig,
    names: &[&str],
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let broker = format!("{}:{}", config.host, config.port);
    let client_id = format!("archive-compaction-status-{}", uuid::Uuid::now_v7().simple());
    let options = options(config, &client_id, &broker).map_err(|e| e.to_string())?;
    let (client, mut events) = AsyncClient::new(options, names.len() + 2);
    let topics: Vec<(String, &str)> =
        (names.iter()).map(|n| (statistic_topic(&config.topic_root, n), *n)).collect();
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
    let secs = config.timeout.as_secs();
    let no_answer = format!("MQTT {broker}: no answer within {secs} s (MQTT_TIMEOUT_SECONDS)");
    let result = tokio::time::timeout(config.timeout, read).await.unwrap_or(Err(no_answer));
    let _ = client.try_disconnect();
    result.map(|()| got)
}

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
        let tls = tls_config(config.ca_file.as_deref())
            .map_err(|reason| ReportError::MqttTls { broker: broker.to_string(), reason })?;
        options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(Arc::new(tls))));
    }
    Ok(options)
}

/// Trusting the PEM certificates of `ca_file`, or the system's roots when `None`.
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
    Ok(ClientConfig::builder().with_root_certificates(roots).with_no_client_auth())
}

/// A hint when a connection failed before CONNACK and TLS and the port
/// disagree (plain on 8883 is reset at the first bytes); empty otherwise.
///
/// ```
/// # use archive_compaction::data::mqtt::tls_hint;
/// # use archive_compaction::data::config::MqttConfig;
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
    let reset = ["reset", "broken pipe", "eof", "closed", "aborted"].iter().any(|w| e.contains(w));
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

/// Connect, publish, await every PUBACK, disconnect; not bounded by itself.
/// `one_at_a_time`: one in flight, so a closed connection names the message.
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
            .try_publish(m.topic.as_str(), QoS::AtLeastOnce, true, m.payload.as_bytes())
            .map_err(|e| fail(format!("cannot queue {}: {e}", m.topic), progress))?;
    }
    if total == 0 {
        return Ok(());
    }
    loop {
        let event = events.poll().await.map_err(|e| {
            let reason = format!("{e}{}", tls_hint(config, &e.to_string(), progress.connected));
            fail(reason, progress)
        })?;
        match event {
            Event::Incoming(Packet::ConnAck(_)) => progress.connected = true,
            Event::Outgoing(Outgoing::Publish(pkid)) => {
                // Sent in the order queued: the n-th PUBLISH is messages[n].
                progress.sent.insert(pkid, progress.published);
                progress.published += 1;
            }
            Event::Incoming(Packet::PubAck(ack)) => {
                if let Some(i) = progress.sent.remove(&ack.pkid) {
                    progress.acked += 1;
                    progress.done[i] = true;
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
    use crate::data::mqtt::payloads::{discovery, statistics, tests::full_report};

    #[test]
    fn errors_name_the_messages_not_acknowledged() {
        let messages: Vec<Message> = discovery("root", "b")
            .into_iter()
            .take(2)
            .chain(statistics(&full_report(), "root").into_iter().take(2))
            .collect();
        let mut p = Progress { done: vec![false; 4], ..Progress::default() };
        assert_eq!(p.pending(&messages), "all");
        p.done[0] = true;
        p.done[2] = true;
        assert_eq!(p.pending(&messages), "files_delete_failed config, files_delete_failed");
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
