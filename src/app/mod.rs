//! Wiring: the AWS clients built once ([`aws`]: [`Deps`]), the Lambda
//! handler ([`lambda`]: [`dispatch`], [`handle`]) and the entry point both
//! shells share ([`invoke`]).

pub mod aws;
pub mod lambda;

pub use aws::{Deps, https_client, retry_config, s3_config};
pub use lambda::{
    AuditEvent, AuditRange, EVENTBRIDGE_ENVELOPE, InvokeEvent, REPORT_LOG_MESSAGE, RunError,
    deadline, dispatch, event_fields, handle, options_from_event, report_log_line,
};

use crate::report::RunReport;
use crate::run::{RunOptions, run};

/// Runs one invocation and reports it (CloudWatch, MQTT). Reporting never
/// changes the status.
pub async fn invoke(deps: &Deps, opts: &RunOptions) -> RunReport {
    let mut report = run(&deps.store, &deps.config, opts).await;
    crate::reporting::publish_by(deps, &mut report, opts.deadline).await;
    report.bound();
    report
}
