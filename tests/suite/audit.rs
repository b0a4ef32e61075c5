//! `audit` against a real S3-protocol server (ministack, or moto with
//! `TEST_S3_SERVER=moto`), on a bucket the Python job left, written with
//! pyarrow (tests/support/archive.py): each finding counted exactly, the
//! bucket unchanged by an audit (every key and ETag), a repair range then
//! leaves only what a repair cannot fix, and a clean compacted range
//! audits to 0 with exit code 0; a date that cannot be read (a file in
//! Glacier) or a Lambda deadline too close to start one leaves the audit
//! `incomplete`, exit code 1. The CLI binary is run for the exit codes;
//! the Lambda event `{"audit": {...}}` through `app::dispatch`. Every
//! report, as printed or returned, matches `specs/audit-report.schema.json`,
//! and broken copies of a real one are refused by it.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

use crate::common::*;
use archive_compaction::app::{Deps, dispatch};
use archive_compaction::commands::audit::{AuditReport, AuditStatus};
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::infra::storage::{PutMode, S3Store};
use serde_json::{Value, json};

const NOW: &str = "2026-07-22T04:50:00Z";

/// The report's schema in specs/.
const SCHEMA: &str = "audit-report.schema.json";

fn pre(d: &str) -> String {
    format!("index/year=2026/month=07/day={}/", &d[8..])
}

/// S3's LastModified has second precision: a later file must be a second later.
fn next_second() {
    std::thread::sleep(Duration::from_millis(1100));
}

/// Every key with its ETag and size.
async fn keys_and_etags(store: &S3Store) -> BTreeMap<String, (String, u64)> {
    store.list("").await.unwrap().into_iter().map(|o| (o.key, (o.etag, o.size))).collect()
}

/// `archive-compaction audit --from {from} --to {to}` and `extra`.
fn audit_command(store: &S3Store, from: &str, to: &str, extra: &[&str]) -> std::process::Command {
    let mut args = vec!["audit", "--from", from, "--to", to];
    args.extend_from_slice(extra);
    cli_command(store, &args)
}

fn cli_audit(store: &S3Store, from: &str, to: &str) -> (Output, AuditReport) {
    run_audit(audit_command(store, from, to, &[]))
}

/// Runs an audit command: its output and the report it printed, which
/// must match the schema.
fn run_audit(mut command: std::process::Command) -> (Output, AuditReport) {
    let out = command.output().expect("run the archive-compaction binary");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    // The printed report, as printed (not as AuditReport reads it back).
    assert_valid(SCHEMA, &json);
    let r: AuditReport = serde_json::from_value(json)
        .unwrap_or_else(|e| panic!("stdout is not an audit report ({e})"));
    (out, r)
}

/// The schema is no formality: each break of a real findings report
/// (`doc`, one missing flight on its only day) is refused, by name.
fn schema_rejects_broken_reports(doc: &Value) {
    let broken = |f: &dyn Fn(&mut Value)| {
        let mut d = doc.clone();
        f(&mut d);
        d
    };
    let cases = [
        ("fix-in-a-day", broken(&|d| d["days"][0]["missing"]["fix"] = json!("x"))),
        (
            "no-fix-in-totals",
            broken(&|d| {
                d["totals"]["missing"].as_object_mut().unwrap().remove("fix");
            }),
        ),
        (
            "six-examples",
            broken(&|d| {
                let e = d["totals"]["missing"]["examples"][0].clone();
                d["totals"]["missing"]["examples"] = json!([e, e, e, e, e, e]);
            }),
        ),
        ("unknown-field", broken(&|d| d["duration_seconds"] = json!(1))),
        ("bad-uuid", broken(&|d| d["days"][0]["missing"]["examples"][0]["flight"] = json!("F-1"))),
        (
            "clean-but-unfinished",
            broken(&|d| {
                d["status"] = json!("clean");
                d["unfinished"] = json!([{"date": "2026-07-20", "error": "x"}]);
            }),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(python());
    cmd.arg(root().join("tests/support/check_schema.py")).arg(root().join("specs").join(SCHEMA));
    for (name, d) in &cases {
        let p = dir.path().join(format!("{name}.json"));
        std::fs::write(&p, d.to_string()).unwrap();
        cmd.arg(p);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    for (name, _) in &cases {
        assert!(text.contains(&format!("{name}.json")), "{name} accepted:\n{text}");
    }
}

fn day<'a>(r: &'a AuditReport, d: &str) -> &'a archive_compaction::commands::audit::DayAudit {
    r.days
        .iter()
        .find(|x| x.date == date(d))
        .unwrap_or_else(|| panic!("{d} not audited: {:?}", r.unfinished))
}

/// (missing, duplicated, per_flight_beside_compacted, orphans,
/// other_day_rows, unreadable_files) of a day.
fn counts(d: &archive_compaction::commands::audit::DayAudit) -> [u64; 6] {
    let f = &d.findings;
    [
        f.missing.count,
        f.duplicated.count,
        f.per_flight_beside_compacted.count,
        f.orphans.count,
        f.other_day_rows.count,
        f.unreadable_files.count,
    ]
}

/// The Python job's bucket, one finding a day (07-10..07-15), and a large
/// clean compacted day (07-16); the watermark at 07-16.
async fn python_job_bucket(store: &S3Store) {
    let g = generate(
        store,
        json!({"seed": 30, "days": [
            {"date": "2026-07-10", "flights": 6, "unindexed": 1},
            {"date": "2026-07-11", "flights": 8},
            {"date": "2026-07-12", "flights": 8},
            {"date": "2026-07-13", "flights": 8},
            {"date": "2026-07-14", "flights": 8},
            {"date": "2026-07-15", "flights": 5},
            {"date": "2026-07-16", "flights": 2500},
        ]}),
    );
    let compact = |d: &str, name: &str, from: &[String], mv: bool| {
        archive_py(
            "multi-row",
            store,
            json!({"key": format!("{}{name}", pre(d)), "from": from, "move": mv, "shuffle": true}),
        )
    };
    // 07-10: compacted, but one flight never had an index row.
    compact("2026-07-10", "compacted-py-a.parquet", &g.index_keys["2026-07-10"], true);
    // 07-11: compacted, then a late per-flight file for a flight it holds.
    let py = compact("2026-07-11", "compacted-py-a.parquet", &g.index_keys["2026-07-11"], true);
    let s3_key = py["rows"][0]["s3_key"].as_str().unwrap().to_string();
    archive_py(
        "put-row",
        store,
        json!({"seed": 9, "date": "2026-07-11", "flight_key": s3_key, "set": {"ident": "LATE"}}),
    );
    // 07-12: compacted, then two stitched rewrites beside it: flights 0, 1
    // and then 1, 2 again with new values (flight 1 three times).
    let keys = &g.index_keys["2026-07-12"];
    compact("2026-07-12", "compacted-py-a.parquet", keys, false);
    next_second();
    archive_py(
        "multi-row",
        store,
        json!({"key": format!("{}compacted-py-b.parquet", pre("2026-07-12")), "from": &keys[..2],
               "set": {"ident": "STITCHED"}}),
    );
    archive_py(
        "multi-row",
        store,
        json!({"key": format!("{}compacted-py-c.parquet", pre("2026-07-12")), "from": &keys[1..3],
               "set": {"ident": "STITCHED2"}, "delete": keys}),
    );
    // 07-13: compacted twice (the Python job ran again over the same files).
    let keys = &g.index_keys["2026-07-13"];
    compact("2026-07-13", "compacted-py-a.parquet", keys, false);
    compact("2026-07-13", "compacted-py-b.parquet", keys, true);
    // 07-14: one compacted file holding an orphan row (its flight object is
    // gone) and a row whose first_message is the day before.
    let d = "2026-07-14";
    let orphan = archive_py("put-row", store, json!({"seed": 14, "date": d}));
    store.delete(orphan["row"]["s3_key"].as_str().unwrap(), None).await.unwrap();
    // 2026-07-13T12:00:00Z in µs.
    let other = archive_py(
        "put-row",
        store,
        json!({"seed": 15, "date": d, "set": {"first_message": 1_783_944_000_000_000i64}}),
    );
    let mut keys = g.index_keys[d].clone();
    keys.push(orphan["key"].as_str().unwrap().to_string());
    keys.push(other["key"].as_str().unwrap().to_string());
    compact(d, "compacted-py-a.parquet", &keys, true);
    // 07-15: compacted, and an export that is no Parquet file.
    compact("2026-07-15", "compacted-py-a.parquet", &g.index_keys["2026-07-15"], true);
    store
        .put(
            &format!("{}export.parquet", pre("2026-07-15")),
            b"PAR1 this is not a parquet file PAR1".to_vec().into(),
            PutMode::Create,
            None,
        )
        .await
        .unwrap();
    // 07-16: a large day, compacted once: clean.
    compact("2026-07-16", "compacted-py-a.parquet", &g.index_keys["2026-07-16"], true);
    store
        .put(
            "_compaction_state/watermark.json",
            br#"{"last_compacted_date": "2026-07-16"}"#.to_vec().into(),
            PutMode::Create,
            None,
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn an_audit_counts_each_finding_and_a_repair_leaves_only_what_it_cannot_fix() {
    init_logs();
    let store = bucket("audit-findings").await;
    python_job_bucket(&store).await;
    let before = keys_and_etags(&store).await;

    let (out, r) = cli_audit(&store, "2026-07-10", "2026-07-16");
    assert_eq!(out.status.code(), Some(2), "{r:#?}");
    assert_eq!(r.status, AuditStatus::Findings);
    assert_eq!(keys_and_etags(&store).await, before, "an audit changes nothing");
    assert!(r.unfinished.is_empty(), "{:?}", r.unfinished);
    assert_eq!(r.totals.dates_audited, 7);
    //                                   missing dup beside orphan other unreadable
    let want = [
        ("2026-07-10", [1, 0, 0, 0, 0, 0]),
        ("2026-07-11", [0, 1, 1, 0, 0, 0]),
        ("2026-07-12", [0, 3, 0, 0, 0, 0]),
        ("2026-07-13", [0, 8, 0, 0, 0, 0]),
        ("2026-07-14", [0, 0, 0, 1, 1, 0]),
        ("2026-07-15", [0, 0, 0, 0, 0, 1]),
        ("2026-07-16", [0, 0, 0, 0, 0, 0]),
    ];
    for (d, w) in want {
        assert_eq!(counts(day(&r, d)), w, "{d}: {:#?}", day(&r, d).findings);
    }
    let t = &r.totals;
    assert_eq!(t.flights, 6 + 8 * 4 + 1 + 5 + 2500, "07-14's orphan has no flight");
    // Rows: 5 + (8 + 1) + (8 + 2 + 2) + 16 + 10 + 5 + 2500.
    assert_eq!(t.rows, 5 + 9 + 12 + 16 + 10 + 5 + 2500);
    let f = &t.findings;
    assert_eq!(f.duplicated.count, 12);
    let stitched = day(&r, "2026-07-12").findings.duplicated.examples.clone();
    assert!(
        stitched.iter().any(|e| e.rows == 3 && e.files.len() == 3),
        "flight 1 of 07-12 is in three files: {stitched:#?}"
    );
    assert!(f.duplicated.examples.len() <= archive_compaction::commands::audit::EXAMPLES_MAX);
    assert_eq!(
        f.other_day_rows.examples[0].first_message.unwrap().to_rfc3339(),
        "2026-07-13T12:00:00+00:00"
    );
    assert!(f.unreadable_files.examples[0].file.ends_with("export.parquet"));
    for (name, fix) in [
        ("missing", &f.missing.fix),
        ("duplicated", &f.duplicated.fix),
        ("orphans", &f.orphans.fix),
    ] {
        assert!(fix.is_some(), "{name} says what fixes it");
    }
    assert!(f.duplicated.fix.as_deref().unwrap().contains("run --from"));
    assert!(f.orphans.fix.as_deref().unwrap().contains("for a person"));
    // Only the two columns of the large compacted file were read.
    let big = day(&r, "2026-07-16");
    assert!(
        big.bytes_read < big.multi_row_bytes,
        "{} of {} bytes",
        big.bytes_read,
        big.multi_row_bytes
    );

    // The repair range, then a scheduled run.
    let cfg = config(&store, &[]);
    let mut repair = RunOptions::at(at(NOW));
    repair.repair = Some(range("2026-07-10", "2026-07-16"));
    let rr = run(&store, &cfg, &repair).await;
    assert!(rr.errors.is_empty(), "{:?}", rr.errors);
    let rr = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert!(rr.errors.is_empty(), "{:?}", rr.errors);

    let (out, r) = cli_audit(&store, "2026-07-10", "2026-07-16");
    assert_eq!(out.status.code(), Some(2), "{r:#?}");
    let left = [
        ("2026-07-10", [1, 0, 0, 0, 0, 0]),
        ("2026-07-14", [0, 0, 0, 1, 1, 0]),
        ("2026-07-15", [0, 0, 0, 0, 0, 1]),
    ];
    for d in r.days.iter() {
        let w = left.iter().find(|(x, _)| date(x) == d.date).map_or([0; 6], |(_, w)| *w);
        assert_eq!(counts(d), w, "{} after the repair: {:#?}", d.date, d.findings);
    }
    assert_eq!(r.totals.findings.duplicated.count, 0);
    assert_eq!(r.totals.findings.missing.count, 1);

    // A clean compacted range: 0, exit 0.
    let before = keys_and_etags(&store).await;
    let (out, r) = cli_audit(&store, "2026-07-11", "2026-07-13");
    assert_eq!(out.status.code(), Some(0), "{r:#?}");
    assert_eq!(r.status, AuditStatus::Clean);
    assert_eq!(r.totals.findings.total(), 0);
    assert_eq!(r.totals.rows, 24);
    assert_eq!(keys_and_etags(&store).await, before, "an audit changes nothing");
}

#[tokio::test]
async fn the_audit_event_reports_findings_as_an_error_and_refuses_other_fields() {
    init_logs();
    let store = bucket("audit-event").await;
    generate(
        &store,
        json!({"seed": 31, "days": [{"date": "2026-07-20", "flights": 4, "unindexed": 1}]}),
    );
    let deps = Deps::from_parts(config(&store, &[]), store.clone(), None, None);
    let event = |payload: Value| {
        lambda_runtime::LambdaEvent::new(payload, lambda_runtime::Context::default())
    };
    let before = keys_and_etags(&store).await;
    let e = dispatch(&deps, event(json!({"audit": {"from": "2026-07-20", "to": "2026-07-20"}})))
        .await
        .unwrap_err();
    assert_eq!(e.error_type, "AuditFindings");
    let findings: Value = serde_json::from_str(&e.error_message).unwrap();
    let r: AuditReport = serde_json::from_value(findings.clone()).unwrap();
    assert_eq!(r.totals.findings.missing.count, 1);
    assert_eq!(r.totals.rows, 3);
    let ok = dispatch(&deps, event(json!({"audit": {"from": "2026-07-21", "to": "2026-07-22"}})))
        .await
        .unwrap();
    assert_eq!(ok["status"], "clean");
    assert_all_valid(SCHEMA, &[("findings", findings.clone()), ("clean", ok)]);
    schema_rejects_broken_reports(&findings);
    for bad in [
        json!({"audit": {"from": "2026-07-20"}}),
        json!({"audit": {"from": "2026-07-20", "to": "2026-07-20", "dry_run": true}}),
        json!({"audit": {"from": "2026-07-20", "to": "2026-07-20"}, "dry_run": true}),
        json!({"audit": {"from": "2026-07-21", "to": "2026-07-20"}}),
        json!({"audit": {"from": "2026-7-20", "to": "2026-07-20"}}),
        json!({"audit": {"from": "2026-07-20", "to": null}}),
        json!({"audit": null}),
    ] {
        let e = dispatch(&deps, event(bad.clone())).await.unwrap_err();
        assert_eq!(e.error_type, "AuditIncomplete", "{bad}");
    }
    assert_eq!(keys_and_etags(&store).await, before, "an audit changes nothing");
}

/// An audit that cannot finish says so. 07-21's compacted file went to
/// Glacier (a lifecycle rule's doing): GetObject answers 403
/// InvalidObjectState, so 07-21 is `unfinished`, with the error naming the
/// file, while 07-20 and 07-22 are audited and clean: the report is
/// `incomplete` and the exit code 1, not the clean audit's 0. The Lambda
/// event, invoked with less time left than DEADLINE_MARGIN_SECONDS, starts
/// no date: `resume_date` names the first, and the error is AuditIncomplete.
#[tokio::test]
async fn an_audit_that_cannot_read_a_date_or_has_no_time_left_is_incomplete() {
    init_logs();
    let store = bucket("audit-incomplete").await;
    let dates = ["2026-07-20", "2026-07-21", "2026-07-22"];
    let g = generate(
        &store,
        json!({"seed": 32, "days": dates.map(|d| json!({"date": d, "flights": 4}))}),
    );
    for d in dates {
        archive_py(
            "multi-row",
            &store,
            json!({"key": format!("{}compacted-py-a.parquet", pre(d)), "from": &g.index_keys[d], "move": true}),
        );
    }
    let cold = format!("{}compacted-py-a.parquet", pre("2026-07-21"));
    let body = store.get(&cold).await.unwrap().body;
    store
        .client()
        .put_object()
        .bucket(store.bucket())
        .key(&cold)
        .body(body.into())
        .storage_class(aws_sdk_s3::types::StorageClass::Glacier)
        .send()
        .await
        .unwrap();
    let before = keys_and_etags(&store).await;

    let (out, r) = cli_audit(&store, "2026-07-20", "2026-07-22");
    assert_eq!(out.status.code(), Some(1), "{r:#?}");
    assert_eq!(r.status, AuditStatus::Incomplete);
    assert_eq!(r.unfinished.len(), 1, "{:?}", r.unfinished);
    let u = &r.unfinished[0];
    assert_eq!(u.date, date("2026-07-21"));
    assert!(u.error.contains(&cold) && u.error.contains("InvalidObjectState"), "{}", u.error);
    assert_eq!(r.resume_date, None, "the command line has no deadline");
    let audited: Vec<_> = r.days.iter().map(|d| d.date).collect();
    assert_eq!(audited, [date("2026-07-20"), date("2026-07-22")]);
    for d in &r.days {
        assert_eq!(counts(d), [0; 6], "{}: {:#?}", d.date, d.findings);
    }
    assert_eq!((r.dates, r.totals.dates_audited, r.totals.rows), (3, 2, 8));
    assert_eq!(r.totals.findings.total(), 0, "nothing found, yet not clean");

    let deps = Deps::from_parts(
        config(&store, &[("DEADLINE_MARGIN_SECONDS", "60")]),
        store.clone(),
        None,
        None,
    );
    let mut ctx = lambda_runtime::Context::default();
    // 20 s left: less than the margin, so no date is started.
    ctx.deadline = (chrono::Utc::now().timestamp_millis() + 20_000) as u64;
    let e = dispatch(
        &deps,
        lambda_runtime::LambdaEvent::new(
            json!({"audit": {"from": "2026-07-20", "to": "2026-07-22"}}),
            ctx,
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(e.error_type, "AuditIncomplete", "{}", e.error_message);
    let doc: Value = serde_json::from_str(&e.error_message).unwrap();
    assert_valid(SCHEMA, &doc);
    let r: AuditReport = serde_json::from_value(doc).unwrap();
    assert_eq!((r.status, r.resume_date), (AuditStatus::Incomplete, Some(date("2026-07-20"))));
    assert!(r.days.is_empty() && r.unfinished.is_empty(), "{r:#?}");
    assert_eq!(r.totals.dates_audited, 0);

    // The command line keeps the same rule with --max-duration, and the
    // report says where to go on. Eight dates (07-23 to 07-27 empty), more
    // than the DATES_IN_FLIGHT (4) started at once: a fifth starts only once
    // one is done, which takes S3 round trips, more than the millisecond
    // 9.001 s leaves above the 9 s margin.
    let mut command =
        audit_command(&store, "2026-07-20", "2026-07-27", &["--max-duration", "9.001"]);
    command.env("DEADLINE_MARGIN_SECONDS", "9");
    let (out, r) = run_audit(command);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(r.status, AuditStatus::Incomplete, "{r:#?}");
    let resume = r.resume_date.expect("a deadline stop names resume_date");
    assert!(resume <= date("2026-07-24"), "{r:#?}");
    // Every date before resume_date audited, 07-21 (in Glacier) unfinished.
    let (cold, audited): (Vec<_>, Vec<_>) =
        ["2026-07-20", "2026-07-21", "2026-07-22", "2026-07-23"]
            .map(date)
            .into_iter()
            .filter(|d| *d < resume)
            .partition(|d| *d == date("2026-07-21"));
    assert_eq!(r.days.iter().map(|d| d.date).collect::<Vec<_>>(), audited, "{r:#?}");
    assert_eq!(r.unfinished.iter().map(|u| u.date).collect::<Vec<_>>(), cold, "{r:#?}");
    // A --max-duration within the margin would audit nothing: refused as a
    // bad setting before anything is read, no report.
    let out = audit_command(&store, "2026-07-20", "2026-07-22", &["--max-duration", "30"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("setting --max-duration: 30s is not more than DEADLINE_MARGIN_SECONDS (60 s)"),
        "{err}"
    );
    assert_eq!(keys_and_etags(&store).await, before, "an audit changes nothing");
}

/// audit and run judge a per-flight file by one rule, the parity gate's:
/// an index row is a decoded row of its own flight. A file named after
/// flight A that holds flight B's row leaves A missing and gives B a second
/// row (Athena returns B twice); a zero-row file leaves its flight missing.
/// The run stops at the date as a Mismatch naming A; audit says the same
/// date is not clean and why, on the same bucket.
#[tokio::test]
async fn audit_and_run_agree_on_a_per_flight_file_without_its_own_row() {
    init_logs();
    let store = bucket("audit-other-row").await;
    let g = generate(&store, json!({"seed": 73, "days": [{"date": "2026-07-20", "flights": 3}]}));
    let keys = &g.index_keys["2026-07-20"];
    let victim = flight_uuid(&keys[0]).to_string();
    let twice = flight_uuid(&keys[1]).to_string();
    // keys[0] now holds keys[1]'s row only.
    archive_py("multi-row", &store, json!({"key": &keys[0], "from": [&keys[1]]}));
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, archive_compaction::data::report::Status::Mismatch);
    assert_eq!(r.mismatch_uuids, vec![victim.clone()]);

    let (out, a) = cli_audit(&store, "2026-07-20", "2026-07-20");
    assert_eq!(a.status, AuditStatus::Findings, "{}", String::from_utf8_lossy(&out.stderr));
    let d = day(&a, "2026-07-20");
    assert_eq!(counts(d), [1, 1, 0, 0, 0, 0], "{:?}", d.findings);
    assert_eq!(d.findings.missing.examples[0].flight.to_string(), victim);
    // The example names the flight's object (listed again for it alone).
    let key = &d.findings.missing.examples[0].key;
    assert!(
        key.starts_with("flights/2026/07/20/") && key.ends_with(&format!("{victim}.json.gz")),
        "{key}"
    );
    let dup = &d.findings.duplicated.examples[0];
    assert_eq!(dup.flight.to_string(), twice);
    assert_eq!(dup.rows, 2);
    assert_eq!(dup.files.len(), 2, "{:?}", dup.files);
    assert_eq!(d.rows, 3, "three rows, as Athena reads the partition");

    // A zero-row per-flight file: its flight has no row, for both.
    let (store, v) =
        variants_bucket("audit-zero-row", 72, "2026-07-20", &["zero_rows", "default"]).await;
    let zero = flight_uuid(v["zero_rows"]["key"].as_str().unwrap()).to_string();
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.mismatch_uuids, vec![zero.clone()]);
    let (_, a) = cli_audit(&store, "2026-07-20", "2026-07-20");
    let d = day(&a, "2026-07-20");
    assert_eq!(counts(d), [1, 0, 0, 0, 0, 0], "{:?}", d.findings);
    assert_eq!(d.findings.missing.examples[0].flight.to_string(), zero);
}
