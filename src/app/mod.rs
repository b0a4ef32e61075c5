//! Wiring: the AWS clients, the Lambda handler, and [`invoke`], the entry
//! point both shells share. The top layer: nothing imports it but `main.rs`.

pub mod aws;
pub mod lambda;
pub mod reporting;

pub use aws::{Deps, https_client, retry_config, s3_config};
pub use lambda::{InvokeEvent, RunError, dispatch, handle, options_from_event};

use crate::commands::run::{RunOptions, run};
use crate::data::report::RunReport;

/// Runs one invocation and reports it ([`reporting`]).
pub async fn invoke(deps: &Deps, opts: &RunOptions) -> RunReport {
    let mut report = run(&deps.store, &deps.config, opts).await;
    crate::app::reporting::publish_by(deps, &mut report, opts.deadline).await;
    report.bound();
    report
}
