//! Commands: one module a command, each the whole of what `run`, `status`,
//! `audit` and `prune-cache` do, and the progress a run sends as it goes.
//!
//! It imports from the layers below; only [`crate::app`] and `main.rs` import
//! it.
//!
//! - [`run`]: `run`: lease, recovery, the walk (or `--date`, or a range), the
//!   straggler sweep, one `RunReport`.
//! - [`status`]: the read-only `status` command.
//! - [`audit`]: the read-only `audit` command: per date, every flight exactly
//!   once.
//! - [`prune`]: the `prune-cache` command: the archive host's local index
//!   cache.
//! - [`progress`]: a run's progress events, and the CLI's bar over them.
//! - [`render`]: the human text of `status`, `audit` and `prune-cache`.

pub mod audit;
pub mod progress;
pub mod prune;
pub mod render;
pub mod run;
pub mod status;
