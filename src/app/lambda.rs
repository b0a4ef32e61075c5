//! The Lambda side: the event parsed strictly, dispatched, answered and logged in one line.

use std::time::{Instant, SystemTime};

use chrono::{DateTime, NaiveDate, Utc};
use lambda_runtime::{Context, Diagnostic, LambdaEvent};
use serde::Deserialize;

use super::{Deps, invoke};
use crate::commands::audit::{self, AuditOptions, AuditStatus};
use crate::commands::run::RunOptions;
use crate::data::report::{RunReport, Status};
use crate::infra::text::{escape, quote};
use crate::protocol::day::{DateRange, RangeOf};

/// An EventBridge scheduled event or a console test event; an unknown field is an error.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[allow(dead_code)] // the envelope's fields are read by nobody
pub struct InvokeEvent {
    /// EventBridge event id (equal on redelivery).
    pub id: Option<String>,
    /// EventBridge event time: the invocation time (fixes the cutoff).
    pub time: Option<DateTime<Utc>>,
    /// Pins the invocation time (console tests); wins over `time`.
    pub now: Option<DateTime<Utc>>,
    /// Plan only; write nothing.
    pub dry_run: bool,
    /// Compact only this date (exactly `YYYY-MM-DD`).
    #[serde(deserialize_with = "strict_date")]
    pub date: Option<NaiveDate>,
    /// First date of a repair range ([`RunOptions::repair`]).
    #[serde(deserialize_with = "strict_date")]
    pub from: Option<NaiveDate>,
    /// Last date of a repair range, included.
    #[serde(deserialize_with = "strict_date")]
    pub to: Option<NaiveDate>,
    /// [`EVENTBRIDGE_ENVELOPE`], accepted and not used.
    version: Option<serde_json::Value>,
    #[serde(rename = "detail-type")]
    detail_type: Option<serde_json::Value>,
    source: Option<serde_json::Value>,
    account: Option<serde_json::Value>,
    region: Option<serde_json::Value>,
    resources: Option<serde_json::Value>,
    detail: Option<serde_json::Value>,
    #[serde(rename = "replay-name")]
    replay_name: Option<serde_json::Value>,
}

/// The fields of an EventBridge event other than `id` and `time`
/// (<https://docs.aws.amazon.com/eventbridge/latest/ref/overiew-event-structure.html>),
/// plus `replay-name` of a replayed event: accepted in an event and ignored.
const EVENTBRIDGE_ENVELOPE: &[&str] = &[
    "version",
    "detail-type",
    "source",
    "account",
    "region",
    "resources",
    "detail",
    "replay-name",
];

/// Exactly `YYYY-MM-DD`, as the CLI takes it.
fn strict_date<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<NaiveDate>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    s.map(|s| {
        crate::data::config::parse_date("", &s).map_err(|_| {
            serde::de::Error::custom(format!("expected a date YYYY-MM-DD, got {}", quote(&s)))
        })
    })
    .transpose()
}

impl InvokeEvent {
    /// Parses an event, each field alone first, so an error names it and lists the accepted ones.
    pub fn from_value(payload: serde_json::Value) -> Result<InvokeEvent, String> {
        let accepted = || {
            // The fields this version reads, from serde's derive.
            let fields = serde_aux::serde_introspection::serde_introspect::<InvokeEvent>();
            let read: Vec<&str> =
                fields.iter().copied().filter(|f| !EVENTBRIDGE_ENVELOPE.contains(f)).collect();
            format!(
                "accepted fields: {}; EventBridge's envelope fields ({}) are accepted and ignored",
                read.join(", "),
                EVENTBRIDGE_ENVELOPE.join(", ")
            )
        };
        let serde_json::Value::Object(map) = payload else {
            let kind = crate::data::state::json_type(&payload);
            return Err(format!(
                "the event must be a JSON object (an EventBridge event or a test event such as {{\"dry_run\": true}}), got {kind}; {}",
                accepted()
            ));
        };
        let alone = |name: &String, v: &serde_json::Value| {
            let one = serde_json::Value::Object([(name.clone(), v.clone())].into_iter().collect());
            serde_json::from_value::<InvokeEvent>(one)
        };
        // Unknown fields first: a field alone fails as unknown only for its own name.
        let unknown = |e: &serde_json::Error| e.to_string().starts_with("unknown field");
        for (name, v) in &map {
            if alone(name, v).as_ref().is_err_and(unknown) {
                return Err(format!("unknown field {} in the event; {}", quote(name), accepted()));
            }
        }
        for (name, v) in &map {
            if let Err(e) = alone(name, v) {
                return Err(format!(
                    "field {} of the event: {}",
                    quote(name),
                    escape(&e.to_string())
                ));
            }
        }
        let event: InvokeEvent =
            serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| {
                format!(
                    "the event is not an EventBridge event or a test event: {}; {}",
                    escape(&e.to_string()),
                    accepted()
                )
            })?;
        event.repair()?;
        Ok(event)
    }

    /// The repair range, checked with the fields that only make sense together. Errors: a message
    /// naming the fields (as [`DateRange::new`]'s do).
    pub fn repair(&self) -> Result<Option<DateRange>, String> {
        match (self.from, self.to) {
            (None, None) => Ok(None),
            (Some(_), None) | (None, Some(_)) => {
                Err("a repair range needs both \"from\" and \"to\" (YYYY-MM-DD, both included)"
                    .into())
            }
            (Some(_), Some(_)) if self.date.is_some() => {
                Err("\"date\" and \"from\"/\"to\" exclude each other: give one date or one range"
                    .into())
            }
            (Some(f), Some(t)) => {
                DateRange::new(f, t, RangeOf::Repair).map(Some).map_err(|e| e.to_string())
            }
        }
    }
}

/// A Mismatch or Failure run as a Lambda error: type `Mismatch`/`Failure`, message the report.
#[derive(Debug)]
pub struct RunError(pub RunReport);

impl From<RunError> for Diagnostic {
    fn from(e: RunError) -> Diagnostic {
        Diagnostic {
            error_type: e.0.last_run_status.as_str().to_string(),
            error_message: serde_json::to_string(&e.0).expect("report serialises"),
        }
    }
}

/// [`RunOptions`] from an event; a bad range (see [`InvokeEvent::repair`]) is left out.
pub fn options_from_event(
    event: &InvokeEvent,
    request_id: &str,
    deadline: Option<Instant>,
) -> RunOptions {
    let mut opts = RunOptions::at(event.now.or(event.time).unwrap_or_else(Utc::now));
    if !request_id.is_empty() {
        opts.invocation_id = request_id.to_string();
    }
    RunOptions {
        event_id: event.id.clone(),
        deadline,
        dry_run: event.dry_run,
        only_date: event.date,
        repair: event.repair().ok().flatten(),
        ..opts
    }
}

/// The event `{"audit": {"from": "YYYY-MM-DD", "to": "YYYY-MM-DD"}}` and nothing else.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditEvent {
    audit: AuditRange,
}

/// The range of an [`AuditEvent`], both dates included.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditRange {
    #[serde(deserialize_with = "strict_date_required")]
    from: NaiveDate,
    #[serde(deserialize_with = "strict_date_required")]
    to: NaiveDate,
}

fn strict_date_required<'de, D: serde::Deserializer<'de>>(d: D) -> Result<NaiveDate, D::Error> {
    strict_date(d)?.ok_or_else(|| serde::de::Error::custom("expected a date YYYY-MM-DD, got null"))
}

/// The runtime's deadline; `None` when already past at the start (`cargo lambda watch`'s may be).
fn deadline(ctx: &Context) -> Option<Instant> {
    let left = ctx.deadline().duration_since(SystemTime::now()).ok()?;
    (!left.is_zero()).then(|| Instant::now() + left)
}

/// The Lambda entry point: an event with an `audit` field is an `AuditEvent` (clean: the report;
/// else an `AuditFindings` or `AuditIncomplete` error; nothing published), any other to [`handle`].
pub async fn dispatch(
    deps: &Deps,
    event: LambdaEvent<serde_json::Value>,
) -> Result<serde_json::Value, Diagnostic> {
    if event.payload.get("audit").is_none() {
        return handle(deps, event)
            .await
            .map(|r| serde_json::to_value(r).expect("report serialises"))
            .map_err(Diagnostic::from);
    }
    let failure = |message: String| Diagnostic {
        error_type: "AuditIncomplete".into(),
        error_message: message,
    };
    let AuditEvent { audit: AuditRange { from, to } } = serde_json::from_value(event.payload)
        .map_err(|e| {
            failure(format!(
                "an audit event is {{\"audit\": {{\"from\": \"YYYY-MM-DD\", \"to\": \"YYYY-MM-DD\"}}}} and nothing else: {e}"
            ))
        })?;
    let opts = AuditOptions { deadline: deadline(&event.context), ..AuditOptions::range(from, to) };
    let report =
        audit::audit(&deps.store, &deps.config, &opts).await.map_err(|e| failure(e.to_string()))?;
    let json = serde_json::to_value(&report).expect("report serialises");
    match report.status {
        AuditStatus::Clean => Ok(json),
        AuditStatus::Findings => {
            Err(Diagnostic { error_type: "AuditFindings".into(), error_message: json.to_string() })
        }
        AuditStatus::Incomplete => Err(failure(json.to_string())),
    }
}

/// A run's report as one log line shaped like the others, in `fields.report` (docs/runbook.md), to
/// stderr, where the tracing lines go, as one write.
fn log_report(report: &RunReport) {
    use std::io::Write as _;
    let level = match report.last_run_status {
        Status::Success => "INFO",
        Status::Mismatch => "WARN",
        Status::Failure => "ERROR",
    };
    let line = serde_json::json!({
        "level": level,
        "target": module_path!(),
        "fields": {"message": "run report", "report": report},
    });
    let _ = std::io::stderr().lock().write_all(format!("{line}\n").as_bytes());
}

/// Success returns the report; Mismatch and Failure a [`RunError`].
pub async fn handle(
    deps: &Deps,
    event: LambdaEvent<serde_json::Value>,
) -> Result<RunReport, RunError> {
    let (payload, ctx) = event.into_parts();
    let parsed = match InvokeEvent::from_value(payload) {
        Ok(e) => e,
        Err(e) => {
            let mut r = RunReport {
                last_run_at: Utc::now(),
                bucket: deps.config.bucket.clone(),
                stop_reason: crate::data::report::StopReason::Error,
                ..Default::default()
            };
            r.fail(e);
            // A Failure like any other: reported too.
            crate::app::reporting::publish_by(deps, &mut r, None).await;
            r.bound();
            log_report(&r);
            return Err(RunError(r));
        }
    };
    let deadline = deadline(&ctx);
    if deadline.is_none() && ctx.deadline > 0 {
        tracing::warn!(
            deadline_ms = ctx.deadline,
            "runtime deadline already past: running without one"
        );
    }
    let mut opts = options_from_event(&parsed, &ctx.request_id, deadline);
    opts.stop = Some(deps.stop.clone());
    let report = invoke(deps, &opts).await;
    log_report(&report);
    match report.last_run_status {
        Status::Success => Ok(report),
        _ => Err(RunError(report)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(v: serde_json::Value) -> InvokeEvent {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn repair_range_fields_are_checked_together() {
        let ok = event(serde_json::json!({"from": "2024-01-01", "to": "2024-01-31"}));
        assert!(ok.repair().is_ok_and(|r| r.is_some()));
        let opts = options_from_event(&ok, "req", None);
        assert_eq!(
            opts.repair.map(|r| (r.from().to_string(), r.to().to_string())),
            Some(("2024-01-01".into(), "2024-01-31".into()))
        );
        for (v, needle) in [
            (serde_json::json!({"from": "2024-01-01"}), "needs both"),
            (serde_json::json!({"to": "2024-01-01"}), "needs both"),
            (
                serde_json::json!({"from": "2024-01-01", "to": "2024-01-02", "date": "2024-01-01"}),
                "exclude each other",
            ),
            (serde_json::json!({"from": "2024-02-01", "to": "2024-01-01"}), "is after to"),
            (serde_json::json!({"from": "2000-01-01", "to": "2024-01-01"}), "at most 3660"),
        ] {
            let err = event(v.clone()).repair().unwrap_err();
            assert!(err.contains(needle), "{v}: {err}");
        }
        assert_eq!(event(serde_json::json!({})).repair(), Ok(None));
    }

    #[test]
    fn a_huge_or_strange_field_name_or_value_is_quoted_bounded() {
        let name = format!("\n2026-07-20T00:00:00Z ERROR forged{}", "x".repeat(6_000_000));
        let e = InvokeEvent::from_value(serde_json::json!({ name.clone(): 1 })).unwrap_err();
        assert!(e.len() < 4_000, "{} bytes", e.len());
        assert!(!e.contains('\n') && e.contains("bytes)"), "{}", &e[..200]);
        let e = InvokeEvent::from_value(serde_json::json!({"date": "x".repeat(6_000_000)}))
            .unwrap_err();
        assert!(e.len() < 4_000, "{} bytes", e.len());
    }
}
