//! Commands: one module a command, the progress a run sends, and their human text. Only
//! [`crate::app`] and `main.rs` import it.

pub mod audit;
pub mod progress;
pub mod prune;
pub(crate) mod render;
pub mod run;
pub mod status;
