//! Infrastructure: what any job of the kind needs and none of this one's rules (the S3 seam, clock,
//! deadline, signals, errors, safe text). The bottom layer: it imports no other.

pub mod clock;
pub mod deadline;
pub mod error;
pub mod stop;
pub mod storage;
pub mod text;
