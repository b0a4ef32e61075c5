//! The protocol: the rules that keep the promise (every flight row in its day's partition exactly
//! once, whatever crashes). Each module's header says what it owns. It imports from [`crate::data`]
//! and [`crate::infra`], never a command.

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
