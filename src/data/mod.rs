//! Data: the job's values and formats, each with its reads and writes. It
//! imports from [`crate::infra`] only and knows no rule of the protocol (but
//! for `input`'s import of `proof::RowFlights`, which the docs test lists).

pub mod config;
pub mod input;
pub mod keys;
pub mod merge;
pub mod metrics;
pub mod mqtt;
pub mod report;
pub mod spill;
pub mod state;
