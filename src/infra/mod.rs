//! Infrastructure: what any job of the kind needs and none of this one's rules:
//! the S3 seam, the clock and the deadline, a clean stop on signals, the error
//! type, untrusted text made safe to show.
//!
//! The bottom layer: it imports no other.
//!
//! - [`storage`]: the S3 seam: the `Store` trait, over aws-sdk-s3 and in
//!   memory.
//! - [`clock`]: the wall clock, injectable.
//! - [`deadline`]: the deadline: S3 calls and new work end before it.
//! - [`stop`]: a clean stop on SIGTERM / SIGINT.
//! - [`error`]: `Error`: each variant names what failed and what to do.
//! - [`text`]: untrusted text escaped and bounded for messages and logs.

pub mod clock;
pub mod deadline;
pub mod error;
pub mod stop;
pub mod storage;
pub mod text;
