//! Every file in `events/` is a payload the Lambda handler accepts, and it
//! means what its name says. No servers: each file is deserialised into
//! [`InvokeEvent`] exactly as the handler does, and [`options_from_event`]
//! turns it into the run options checked here.
//!
//! A new file in `events/` must get a row in `expected()`; the runtime-path
//! test (`tests/suite/lambda_runtime.rs`) sends these same files to the real
//! binary through a local Lambda Runtime API.

use std::collections::BTreeMap;
use std::path::PathBuf;

use archive_compaction::app::{InvokeEvent, options_from_event};
use chrono::{DateTime, NaiveDate, Utc};

/// What one event must turn into.
struct Expected {
    /// `Some(t)`: the invocation time is pinned to `t`; `None`: the wall clock.
    now: Option<&'static str>,
    event_id: Option<&'static str>,
    dry_run: bool,
    only_date: Option<&'static str>,
}

fn expected() -> BTreeMap<&'static str, Expected> {
    BTreeMap::from([
        // `sam local generate-event cloudwatch scheduled-event`, byte for byte.
        (
            "eventbridge-scheduled.json",
            Expected {
                now: Some("1970-01-01T00:00:00Z"),
                event_id: Some("cdc73f9d-aea9-11e3-9d5a-835b769c0d9c"),
                dry_run: false,
                only_date: None,
            },
        ),
        // The deployed rule's event on 2026-07-22 at 04:50 UTC.
        (
            "eventbridge-scheduled-2026-07-22.json",
            Expected {
                now: Some("2026-07-22T04:50:00Z"),
                event_id: Some("8f6d3c1e-2b4a-4f6e-9d0c-5a7b1e2f3c4d"),
                dry_run: false,
                only_date: None,
            },
        ),
        (
            "console-dry-run.json",
            Expected { now: None, event_id: None, dry_run: true, only_date: None },
        ),
        (
            "console-now.json",
            Expected {
                now: Some("2026-07-22T04:50:00Z"),
                event_id: None,
                dry_run: false,
                only_date: None,
            },
        ),
        (
            "console-date.json",
            Expected { now: None, event_id: None, dry_run: false, only_date: Some("2026-07-18") },
        ),
    ])
}

fn events_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("events")
}

fn parse(name: &str) -> InvokeEvent {
    let path = events_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // The handler receives a serde_json::Value and converts it: do the same.
    let value: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"));
    serde_json::from_value(value)
        .unwrap_or_else(|e| panic!("{name} is rejected by the handler: {e}"))
}

#[test]
fn every_event_file_has_an_expectation_and_the_other_way_round() {
    let mut on_disk: Vec<String> = std::fs::read_dir(events_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    let listed: Vec<String> = expected().keys().map(|k| k.to_string()).collect();
    assert_eq!(on_disk, listed, "events/ and the table in tests/suite/events.rs differ");
}

#[test]
fn each_event_gives_the_run_options_its_name_promises() {
    for (name, want) in expected() {
        let event = parse(name);
        let before = Utc::now();
        let opts = options_from_event(&event, "req-1", None);
        let after = Utc::now();
        match want.now {
            Some(t) => {
                let t: DateTime<Utc> = DateTime::parse_from_rfc3339(t).unwrap().to_utc();
                assert_eq!(opts.now, t, "{name}: invocation time");
            }
            None => assert!(
                before <= opts.now && opts.now <= after,
                "{name}: expected the wall clock, got {}",
                opts.now
            ),
        }
        assert_eq!(opts.event_id.as_deref(), want.event_id, "{name}: event id");
        assert_eq!(opts.dry_run, want.dry_run, "{name}: dry_run");
        let only: Option<NaiveDate> = want.only_date.map(|d| d.parse().unwrap());
        assert_eq!(opts.only_date, only, "{name}: only_date");
        assert_eq!(
            opts.invocation_id, "req-1",
            "{name}: the Lambda request id is the invocation id"
        );
        assert_eq!(opts.deadline, None);
    }
}

#[test]
fn the_scheduled_event_is_exactly_what_sam_generates() {
    // `sam local generate-event cloudwatch scheduled-event` (SAM CLI 1.170).
    let sam = serde_json::json!({
        "id": "cdc73f9d-aea9-11e3-9d5a-835b769c0d9c",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "1970-01-01T00:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/ExampleRule"],
        "detail": {}
    });
    let text = std::fs::read_to_string(events_dir().join("eventbridge-scheduled.json")).unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), sam);
}

#[test]
fn a_pinned_time_wins_over_the_eventbridge_time() {
    let event: InvokeEvent = serde_json::from_value(serde_json::json!({
        "id": "e-1",
        "time": "2026-07-22T04:50:00Z",
        "now": "2026-07-25T00:00:00Z",
        "detail-type": "Scheduled Event"
    }))
    .unwrap();
    let opts = options_from_event(&event, "", None);
    assert_eq!(opts.now, DateTime::parse_from_rfc3339("2026-07-25T00:00:00Z").unwrap().to_utc());
    assert!(!opts.invocation_id.is_empty(), "an empty request id gets a fresh invocation id");
}

#[test]
fn events_are_parsed_strictly_naming_the_field_and_the_accepted_ones() {
    use archive_compaction::app::InvokeEvent;
    for (bad, needle) in [
        (serde_json::json!({"dry-run": true, "now": "2026-07-22T04:50:00Z"}), "\"dry-run\""),
        (serde_json::json!({"dryrun": true}), "\"dryrun\""),
        (serde_json::json!({"Date": "2026-07-18"}), "\"Date\""),
        (serde_json::json!([]), "an array"),
        (serde_json::json!(null), "null"),
        (serde_json::json!("2026-07-18"), "a string"),
        (serde_json::json!({"date": "2026-7-18"}), "\"date\""),
        (serde_json::json!({"date": "20260718"}), "\"date\""),
        (serde_json::json!({"from": "2026-07-01", "to": "2026-7-18"}), "\"to\""),
        (serde_json::json!({"dry_run": "yes"}), "\"dry_run\""),
        (serde_json::json!({"now": "2026-07-22"}), "\"now\""),
    ] {
        let e = InvokeEvent::from_value(bad.clone()).unwrap_err();
        assert!(e.contains(needle), "{bad}: {e}");
        if !matches!(needle, "\"date\"" | "\"to\"" | "\"dry_run\"" | "\"now\"") {
            assert!(
                e.contains("accepted fields: id, time, now, dry_run, date, from, to"),
                "{bad}: {e}"
            );
        }
    }
    // Every event file, and EventBridge's envelope with a replay's name.
    for name in expected().keys() {
        let text = std::fs::read_to_string(events_dir().join(name)).unwrap();
        InvokeEvent::from_value(serde_json::from_str(&text).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let replayed = serde_json::json!({
        "version": "0", "id": "e", "detail-type": "Scheduled Event", "source": "aws.events",
        "account": "123456789012", "time": "2026-07-22T04:50:00Z", "region": "eu-west-1",
        "resources": [], "detail": {}, "replay-name": "r"
    });
    let e = InvokeEvent::from_value(replayed).unwrap();
    assert_eq!(e.id.as_deref(), Some("e"));
    assert!(!e.dry_run);
}

#[test]
fn malformed_console_events_are_rejected() {
    for bad in [
        serde_json::json!({"date": "2026-13-01"}),
        serde_json::json!({"now": "yesterday"}),
        serde_json::json!({"dry_run": "yes"}),
    ] {
        assert!(serde_json::from_value::<InvokeEvent>(bad.clone()).is_err(), "{bad} was accepted");
    }
}
