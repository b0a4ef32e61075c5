//! MQTT reporting: Home Assistant discovery configs, then the run's figures as retained topics
//! under `{MQTT_TOPIC_ROOT}/statistic/`. Topics, payloads and discovery ids are the Python job's,
//! so Home Assistant history carries over (`specs/reporting.md`).
//!
//! ```
//! use archive_compaction::data::mqtt::{discovery, statistics};
//! use archive_compaction::data::report::RunReport;
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

pub mod client;
pub mod payloads;

pub use client::{MAX_PACKET_BYTES, RETAINED_WAIT, publish, read_retained, tls_hint};
pub use payloads::{
    MAX_PAYLOAD_BYTES, Message, STATISTIC_TABLE, STATISTICS, Statistic, device, discovery,
    is_known, short_name, statistics,
};
