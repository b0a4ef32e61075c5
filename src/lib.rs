//! archive-compaction: compacts a flight archive's per-flight Parquet index files in S3 into one
//! `compacted-*.parquet` per day, crash-safely. `docs/ARCHITECTURE.md` is the contract.
//!
//! One folder a layer, top to bottom; a module imports from its own layer or a lower one
//! (`tests/suite/docs.rs`): [`app`] (Lambda handler, CLI entry point, AWS clients), [`commands`]
//! (one module a command), [`protocol`] (every flight row in its day's partition exactly once,
//! whatever crashes), [`data`] (the job's values and formats), [`infra`] (any job of the kind).
#![warn(missing_docs)]

/// `as_str` and comparison with `&str` for a unit enum whose strum and serde names are the same
/// snake case (`logged_names_are_the_json_names` holds the derives to it).
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
    };
}

pub mod app;
pub mod commands;
pub mod data;
pub mod infra;
pub mod protocol;

/// A named failpoint (the `fail` crate), only with the `failpoints` feature: `return` makes the
/// enclosing function return [`infra::error::Error::Failpoint`], `panic` panics there (a crash).
#[macro_export]
macro_rules! failpoint {
    ($name:expr) => {
        fail::fail_point!($name, |_| Err($crate::infra::error::Error::Failpoint($name.to_string())))
    };
}
