//! The protocol: the rules that keep the promise (every flight row in its day's
//! partition exactly once, whatever crashes): a date's listings, parity gate
//! and plan, the read, the proof a delete needs, the lease, the commit and the
//! recovery table.
//!
//! It imports from [`crate::data`] and [`crate::infra`], never a command.
//!
//! - [`day`]: one date as every command sees it: its listings and counts, the
//!   parity check, blocked dates.
//! - [`partition`]: the parity gate over a date's listings, the earliest
//!   partition.
//! - [`plan`]: cutoff, walk start, a partition's inputs by kind, a date's plan
//!   and its parts.
//! - [`sizing`]: a date's estimated peak memory, the largest parts that fit.
//! - [`read`]: a day's read phase: every input read within the budget, merged
//!   into one output.
//! - [`proof`]: which inputs a manifest may delete: each input's rows found in
//!   the output.
//! - [`lease`]: the lease on `lock.json`, confirmed before each destructive
//!   step.
//! - [`manifest`]: a manifest's one owner: parsed and checked, its quarantine
//!   key, its stuck mark.
//! - [`commit`]: the commit protocol after the read, one function a phase.
//! - [`recovery`]: the recovery table: one plan a manifest, carried out or
//!   foreseen.

pub mod commit;
pub mod day;
pub mod lease;
pub mod manifest;
pub mod partition;
pub mod plan;
pub mod proof;
pub mod read;
pub mod recovery;
pub mod sizing;
