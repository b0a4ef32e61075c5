//! Data: the job's values and formats, each with its reads and writes: bucket
//! keys, index rows and their merge, index inputs, spilling uuid sets, the
//! state files, the settings, the report and its CloudWatch and MQTT forms.
//!
//! It imports from [`crate::infra`] only, and knows no rule of the protocol
//! (but for one import the docs test lists, `input` of `proof::RowFlights`).
//!
//! - [`keys`]: the bucket layout: key builders, index keys classified.
//! - [`merge`]: one row per flight, the newest version: decode, conform, merge,
//!   encode.
//! - [`input`]: bounded reads of index inputs, their limits decided before any
//!   decode.
//! - [`spill`]: sorted uuid sets that spill to local disk past a memory limit.
//! - [`state`]: the state files (`watermark.json`, manifests, `lock.json`) and
//!   their conditional writes.
//! - [`config`]: the settings, typed, from environment variables, with their
//!   defaults.
//! - [`report`]: `RunReport`, `DayReport`: the one report type.
//! - [`metrics`]: the report as CloudWatch metrics.
//! - [`mqtt`]: the report as MQTT topics, with Home Assistant discovery.

pub mod config;
pub mod input;
pub mod keys;
pub mod merge;
pub mod metrics;
pub mod mqtt;
pub mod report;
pub mod spill;
pub mod state;
