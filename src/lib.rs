//! archive-compaction: compacts a flight archive's per-flight Parquet index
//! files in S3 into one `compacted-*.parquet` per day, crash-safely.
//!
//! `docs/ARCHITECTURE.md` is the contract (bucket layout, one invocation,
//! commit protocol, recovery table, state formats). The crate is layered:
//!
//! - [`config`]: typed settings from environment variables.
//! - [`keys`]: bucket layout, pure.
//! - [`plan`]: pure planning (cutoff, walk start, partition listing, parity, day plan).
//! - [`day`]: one date's listings and counts as every command sees them, the blocked
//!   dates with each command's policy, the dates of a range (read-only).
//! - [`partition`]: the parity gate, the earliest partition (read-only).
//! - [`spill`]: sorted uuid sets that spill to local disk past a memory limit (a date's flights).
//! - [`merge`]: decode, conform to the target schema, dedupe, encode.
//! - [`input`]: bounded reads of index inputs (limits from the footer before
//!   any decode; ranged, projected, row group by row group).
//! - [`storage`]: the one S3 seam, the [`storage::Store`] trait (list, get, head,
//!   conditional put/delete), over aws-sdk-s3 and in memory; [`clock`]: the time seam.
//! - [`state`], [`lease`]: state files with conditional writes.
//! - [`read`]: a day's inputs read within the budget and merged into one output.
//! - [`commit`], [`recovery`]: the commit protocol and the recovery table.
//! - [`run`]: the driver producing one [`report::RunReport`].
//! - [`reporting`] ([`metrics`], [`mqtt`]): the report to CloudWatch and MQTT.
//! - [`status`]: the read-only `status` command; [`progress`]: the CLI's progress bar.
//! - [`prune`]: the `prune-cache` command (the archive host's local index cache).
//! - [`audit`]: the read-only `audit` command (every flight exactly once, per date).
//! - [`stop`]: a clean stop on SIGTERM / SIGINT.
//! - [`text`]: untrusted text (keys, field names) escaped and bounded for messages and logs.
//! - [`app`]: clients built once, the Lambda handler and the CLI's shared entry point.
#![warn(missing_docs)]

/// `as_str` and comparison with `&str` for a unit enum whose strum and serde
/// names are the same snake case, so logs, reports and tests use one
/// spelling (`logged_names_are_the_json_names` holds the derives to it).
macro_rules! named_enum {
    ($t:ident) => {
        impl $t {
            /// The name as in the report's JSON.
            pub fn as_str(&self) -> &'static str {
                self.into()
            }
        }
        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }
    };
}

pub mod app;
pub mod audit;
pub mod clock;
pub mod commit;
pub mod config;
pub mod day;
pub mod deadline;
pub mod error;
pub mod input;
pub mod keys;
pub mod lease;
pub mod merge;
pub mod metrics;
pub mod mqtt;
pub mod partition;
pub mod plan;
pub mod progress;
pub mod proof;
pub mod prune;
pub mod read;
pub mod recovery;
pub mod report;
pub mod reporting;
pub mod run;
pub mod sizing;
pub mod spill;
pub mod state;
pub mod status;
pub mod stop;
pub mod storage;
pub mod text;

/// A named failpoint (the `fail` crate): compiled in only with the
/// `failpoints` feature. Configured `return` it makes the enclosing function
/// return [`error::Error::Failpoint`]; `panic` panics there (a crash).
#[macro_export]
macro_rules! failpoint {
    ($name:expr) => {
        fail::fail_point!($name, |_| Err($crate::error::Error::Failpoint(
            $name.to_string()
        )))
    };
}
