//! archive-compaction: compacts a flight archive's per-flight Parquet index
//! files in S3 into one `compacted-*.parquet` per day, crash-safely.
//!
//! `docs/ARCHITECTURE.md` is the contract (bucket layout, one invocation,
//! commit protocol, recovery table, state formats).
//!
//! The crate is layered, one folder a layer, top to bottom; a module imports
//! from its own layer or a lower one (`tests/suite/docs.rs` checks it):
//!
//! - [`app`]: the Lambda handler and the CLI's shared entry point (`invoke`),
//!   the AWS clients built once, and the finished run's report sent to
//!   CloudWatch and MQTT ([`aws`](app::aws), [`lambda`](app::lambda),
//!   [`reporting`](app::reporting)).
//! - [`commands`]: one module a command, each the whole of what `run`,
//!   `status`, `audit` and `prune-cache` do, and the progress a run sends as it
//!   goes ([`run`](commands::run), [`status`](commands::status),
//!   [`audit`](commands::audit), [`prune`](commands::prune),
//!   [`progress`](commands::progress)).
//! - [`protocol`]: the rules that keep the promise (every flight row in its
//!   day's partition exactly once, whatever crashes): a date's listings, parity
//!   gate and plan, the read, the proof a delete needs, the lease, the commit
//!   and the recovery table ([`day`](protocol::day),
//!   [`partition`](protocol::partition), [`plan`](protocol::plan),
//!   [`sizing`](protocol::sizing), [`read`](protocol::read),
//!   [`proof`](protocol::proof), [`lease`](protocol::lease),
//!   [`commit`](protocol::commit), [`recovery`](protocol::recovery)).
//! - [`data`]: the job's values and formats, each with its reads and writes:
//!   bucket keys, index rows and their merge, index inputs, spilling uuid sets,
//!   the state files, the settings, the report and its CloudWatch and MQTT
//!   forms ([`keys`](data::keys), [`merge`](data::merge),
//!   [`input`](data::input), [`spill`](data::spill), [`state`](data::state),
//!   [`config`](data::config), [`report`](data::report),
//!   [`metrics`](data::metrics), [`mqtt`](data::mqtt)).
//! - [`infra`]: what any job of the kind needs and none of this one's rules:
//!   the S3 seam, the clock and the deadline, a clean stop on signals, the
//!   error type, untrusted text made safe to show ([`storage`](infra::storage),
//!   [`clock`](infra::clock), [`deadline`](infra::deadline),
//!   [`stop`](infra::stop), [`error`](infra::error), [`text`](infra::text)).
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
pub mod commands;
pub mod data;
pub mod infra;
pub mod protocol;

/// A named failpoint (the `fail` crate): compiled in only with the
/// `failpoints` feature. Configured `return` it makes the enclosing function
/// return [`infra::error::Error::Failpoint`]; `panic` panics there (a crash).
#[macro_export]
macro_rules! failpoint {
    ($name:expr) => {
        fail::fail_point!($name, |_| Err($crate::infra::error::Error::Failpoint(
            $name.to_string()
        )))
    };
}
