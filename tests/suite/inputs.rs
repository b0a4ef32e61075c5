//! Unreadable, corrupt, drifted and odd inputs never lose or duplicate a row:
//! writer variants (schema drift) are conformed by name; lossy or corrupt
//! files stay in place and fail parity; extra columns are kept; zero-row and
//! multi-row per-flight files; late and rewritten index files (the straggler
//! sweep); keys with unusual or control characters. An unreadable per-flight
//! file is a mismatch until it is rewritten.
//!
//! Inputs are written by pyarrow with the writer options that produce each
//! variant; outputs are read back by pyarrow.

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::commands::status::{self, StatusOptions};
use archive_compaction::data::keys::index_prefix;
use archive_compaction::data::report::{Parity, RunReport, Status, StopReason};
use archive_compaction::infra::storage::PutMode;
use serde_json::{Value, json};

const MERGEABLE: &[&str] = &[
    "default",
    "ts_ms",
    "ts_s",
    "ts_ns_exact",
    "ts_naive",
    "int96",
    "large_string",
    "string_view",
    "dictionary",
    "reordered",
    "military_nullable",
    "missing_registration",
    "kv_metadata",
    "parquet_v1",
    "zstd_v2_pages_no_stats",
    "plain_no_dictionary",
    "brotli",
    "lz4",
];

/// Files that decode but cannot be conformed without loss: left in place,
/// the date still passes (the row is readable where it is).
const UNMERGEABLE: &[&str] =
    &["ts_ns_lossy", "military_null", "military_as_string", "missing_military"];

/// Files that cannot be read at all: their flight's row is in no readable
/// file, so the date fails parity (after its readable flights are folded).
const CORRUPT: &[&str] = &["bad_magic", "truncated"];

#[tokio::test]
async fn writer_variants_are_conformed_by_name_and_lossy_or_corrupt_files_stay_in_place() {
    init_logs();
    let all: Vec<&str> = MERGEABLE.iter().chain(UNMERGEABLE).copied().collect();
    let (store, v) = variants_bucket("drift", 70, "2026-07-20", &all).await;
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(
        r.last_compacted_date,
        Some(date("2026-07-20")),
        "one bad file must not block the day"
    );
    let after = dump(&store, "index/");
    let expected: Vec<Value> = MERGEABLE.iter().map(|m| v[m]["row"].clone()).collect();
    // assert_compacted also requires no per-flight file left: check the
    // unmergeable ones separately, then the rest of the partition.
    let without_bad: std::collections::BTreeMap<_, _> = after
        .iter()
        .filter(|(k, _)| !UNMERGEABLE.iter().any(|u| v[u]["key"] == **k))
        .map(|(k, d)| (k.clone(), d.clone()))
        .collect();
    assert_compacted(&without_bad, "2026-07-20", &expected);
    for u in UNMERGEABLE {
        let key = v[u]["key"].as_str().unwrap();
        assert!(after.contains_key(key), "{u}: {key} was deleted");
        let skipped = r
            .skipped_files
            .iter()
            .find(|s| s.key == key)
            .unwrap_or_else(|| panic!("{u} not reported: {:?}", r.skipped_files));
        assert_eq!(skipped.column.as_deref(), v[u]["column"].as_str(), "{u}: {}", skipped.reason);
        assert!(!skipped.reason.is_empty());
    }
    // A second run (its sweep sees the same bad files) changes nothing.
    let again = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(again.last_run_status, Status::Success, "{:?}", again.errors);
    assert_eq!(dump(&store, "index/"), after);
}

#[tokio::test]
async fn corrupt_per_flight_files_fail_parity_and_stay_in_place() {
    init_logs();
    let all: Vec<&str> = ["default"].iter().chain(CORRUPT).copied().collect();
    let (store, v) = variants_bucket("corrupt", 74, "2026-07-20", &all).await;
    let before = dump(&store, "index/");
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.mismatch_date, Some(date("2026-07-20")));
    let mut want: Vec<String> =
        (CORRUPT.iter()).map(|c| flight_uuid(v[c]["key"].as_str().unwrap()).to_string()).collect();
    want.sort();
    assert_eq!(r.mismatch_uuids, want);
    assert_eq!(r.last_compacted_date, None, "the watermark does not pass it");
    let unread: Vec<&str> = (r.days[0].unread_files.iter()).map(|f| f.key.as_str()).collect();
    for c in CORRUPT {
        assert!(unread.contains(&v[c]["key"].as_str().unwrap()), "{c}: {unread:?}");
    }
    // The readable flight is folded (it does not wait on the corrupt
    // files); the corrupt files stay exactly as they were.
    let after = dump(&store, "index/");
    for c in CORRUPT {
        let key = v[c]["key"].as_str().unwrap();
        assert_eq!(after.get(key), before.get(key), "{c}: left as it was");
    }
    assert_compacted(
        &(after.into_iter()).filter(|(k, _)| !CORRUPT.iter().any(|c| v[c]["key"] == **k)).collect(),
        "2026-07-20",
        &[v["default"]["row"].clone()],
    );
}

#[tokio::test]
async fn extra_columns_are_kept_after_the_known_ones_and_reported() {
    init_logs();
    let (store, v) =
        variants_bucket("extra-col", 71, "2026-07-20", &["default", "extra_column"]).await;
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.days[0].extra_columns, vec!["squawk".to_string()]);
    let after = dump(&store, "index/");
    let (_, out) = after.iter().find(|(k, _)| k.contains("compacted-")).unwrap();
    assert_eq!(
        out.arrow_schema.as_deref(),
        Some(format!("{ARROW_SCHEMA}\nsquawk: int32").as_str())
    );
    let mut rows = out.rows.clone().unwrap();
    rows.sort_by_key(|r| r["s3_key"].as_str().unwrap().to_string());
    let mut default = v["default"]["row"].clone();
    default["squawk"] = Value::Null;
    let mut want = vec![default, v["extra_column"]["row"].clone()];
    want.sort_by_key(|r| r["s3_key"].as_str().unwrap().to_string());
    assert_eq!(rows, want);
}

#[tokio::test]
async fn a_per_flight_file_without_a_row_of_its_flight_fails_parity_and_stays() {
    // Parity counts a per-flight file by its name; a file that holds no row
    // (zero rows), or only another flight's row, would leave its flight
    // without an index row once merged and deleted. The day is a mismatch
    // and nothing is written or deleted.
    init_logs();
    let (store, v) =
        variants_bucket("zero-rows", 72, "2026-07-20", &["zero_rows", "default"]).await;
    let before = dump(&store, "index/");
    let zero_uuid = flight_uuid(v["zero_rows"]["key"].as_str().unwrap());
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.mismatch_date, Some(date("2026-07-20")));
    assert_eq!(r.mismatch_uuids, vec![zero_uuid.to_string()]);
    assert_eq!(r.last_compacted_date, None, "the watermark does not pass it");
    assert_eq!(dump(&store, "index/"), before, "nothing written or deleted");
    assert!(!dump(&store, "").keys().any(|k| k.starts_with("_compaction_state/manifests/")));

    // Another flight's row under a flight's name: the same.
    let store = bucket("other-row").await;
    let g = generate(&store, json!({"seed": 73, "days": [{"date": "2026-07-20", "flights": 3}]}));
    let keys = &g.index_keys["2026-07-20"];
    let victim = flight_uuid(&keys[0]);
    archive_py("multi-row", &store, json!({"key": &keys[0], "from": [&keys[1]]}));
    let before = dump(&store, "index/");
    let mut dry = RunOptions::at(at(NOW));
    dry.dry_run = true;
    let d = run(&store, &config(&store, &[]), &dry).await;
    assert_eq!(d.last_run_status, Status::Mismatch, "the dry run says so too");
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.mismatch_uuids, vec![victim.to_string()]);
    assert_eq!(dump(&store, "index/"), before, "nothing written or deleted");
}

#[tokio::test]
async fn late_and_rewritten_index_files_are_folded_in_exactly_once_by_the_sweep() {
    init_logs();
    let store = bucket("stragglers").await;
    let generated = generate(
        &store,
        json!({"seed": 73, "days": [
            {"date": "2026-07-18", "flights": 6}, {"date": "2026-07-19", "flights": 4}
        ]}),
    );
    let cfg = config(&store, &[]);
    let r = run(&store, &cfg, &RunOptions::at(at("2026-07-21T04:50:00Z"))).await;
    assert_eq!(r.last_compacted_date, Some(date("2026-07-19")));

    // After compaction: a late flight lands on 07-18, and the writer stitches
    // an existing 07-18 flight, writing its index file again (same key).
    let late = archive_py("put-row", &store, json!({"seed": 74, "date": "2026-07-18"}));
    let old = generated.rows["2026-07-18"][1].clone();
    let stitched = archive_py(
        "put-row",
        &store,
        json!({"seed": 75, "date": "2026-07-18", "flight_key": old["s3_key"], "set": {"ident": "STITCHED"}}),
    );
    let r = run(&store, &cfg, &RunOptions::at(at("2026-07-21T04:50:00Z"))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.stragglers_folded, 2, "{:?}", r.days);
    assert_eq!(r.duplicates_removed, 1);
    let swept: Vec<_> = r.days.iter().filter(|d| d.action == "swept").collect();
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].date, date("2026-07-18"));

    let mut expected: Vec<Value> = generated.rows["2026-07-18"]
        .iter()
        .filter(|r| r["s3_key"] != old["s3_key"])
        .cloned()
        .collect();
    expected.push(stitched["row"].clone());
    expected.push(late["row"].clone());
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-18", &expected);
    assert_compacted(&after, "2026-07-19", &generated.rows["2026-07-19"]);

    // Nothing left to fold: the next run's sweep is one listing per day and changes nothing.
    let r = run(&store, &cfg, &RunOptions::at(at("2026-07-21T04:50:00Z"))).await;
    assert_eq!(r.stragglers_folded, 0);
    assert_eq!(dump(&store, ""), after);
}

#[tokio::test]
async fn keys_with_unusual_characters_survive_list_get_and_delete() {
    init_logs();
    let store = bucket("odd-keys").await;
    let generated =
        generate(&store, json!({"seed": 76, "days": [{"date": "2026-07-20", "flights": 3}]}));
    let p = "index/year=2026/month=07/day=20/";
    let odd = ["a b+c%20~ü.txt", "ßpace dir/x.parquet", "_ünïcödé.parquet", "plus+sign.json"];
    for (i, name) in odd.iter().enumerate() {
        store
            .put(
                &format!("{p}{name}"),
                format!("foreign {i}").into_bytes().into(),
                archive_compaction::infra::storage::PutMode::Create,
                None,
            )
            .await
            .unwrap();
    }
    // Flights whose ident has spaces, '+', '%', '~' and non-ASCII (the uuid is still the last part).
    let mut extra = Vec::new();
    for (i, ident) in ["UAL 12", "A+B", "X%20Y", "Z~1", "ÅÄÖ"].iter().enumerate() {
        let flight_key = format!(
            "flights/2026/07/20/ABC12{i}_{ident}_019f8{i:03}-0000-7000-8000-00000000000{i}.json.gz"
        );
        store
            .put(
                &flight_key,
                b"{}".to_vec().into(),
                archive_compaction::infra::storage::PutMode::Create,
                None,
            )
            .await
            .unwrap();
        let row = archive_py(
            "put-row",
            &store,
            json!({"seed": 77, "date": "2026-07-20", "flight_key": flight_key}),
        );
        extra.push(row["row"].clone());
    }
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let after = dump(&store, "");
    let mut expected = generated.rows["2026-07-20"].clone();
    expected.extend(extra);
    assert_compacted(&after, "2026-07-20", &expected);
    for name in odd {
        assert!(after.contains_key(&format!("{p}{name}")), "{name} was touched");
    }
}

/// A per-flight file that also carries copies of two other flights' rows is
/// irregular: the streaming merge cannot place its rows, so the day is read
/// again and merged in memory. Every flight still ends up once.
#[tokio::test]
async fn a_multi_row_per_flight_file_falls_back_to_the_in_memory_merge() {
    init_logs();
    let store = bucket("multi-row").await;
    let generated =
        generate(&store, json!({"seed": 76, "days": [{"date": "2026-07-20", "flights": 5}]}));
    let originals: Vec<String> = store
        .list("index/year=2026/month=07/day=20/")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    let multi = archive_py(
        "put-row",
        &store,
        json!({"seed": 77, "date": "2026-07-20", "copies_of": [originals[1], originals[3]]}),
    );
    let input_bytes: u64 =
        store.list("index/year=2026/month=07/day=20/").await.unwrap().iter().map(|o| o.size).sum();
    let r = run(&store, &config(&store, &[]), &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.files_compacted, 6);
    assert_eq!(r.rows_written, 6);
    assert_eq!(r.duplicates_removed, 2);
    assert!(
        r.days[0].bytes_read > input_bytes,
        "the day should have been read twice (streamed pass stopped, then in memory): {} <= {input_bytes}",
        r.days[0].bytes_read
    );
    let mut expected = generated.rows["2026-07-20"].clone();
    expected.push(multi["row"].clone());
    assert_compacted(&dump(&store, ""), "2026-07-20", &expected);
}

/// Keys holding control characters (ESC, `\x01`, a newline that would start
/// a forged log line) under `flights/YYYY/MM/DD/`, an index partition and
/// `_compaction_state/manifests/`. S3 cannot write such a key into a
/// listing's XML 1.0 unless asked for `encoding-type=url`; without it every
/// listing of the prefix failed (`HTTP 200: ` with an empty reason) and the
/// watermark never moved. Now: each key is classified like any other (a
/// flight with its row, a multi-row input merged and deleted, foreign
/// objects left, a stray manifest quarantined), the day is compacted, and
/// the CLI's log carries no control character raw, so no line is forged.
#[tokio::test]
async fn keys_with_control_characters_block_nothing_and_never_reach_a_log_raw() {
    init_logs();
    let store = bucket("ctl-keys").await;
    let day = "2026-07-20";
    let generated = generate(&store, json!({"seed": 78, "days": [{"date": day, "flights": 3}]}));
    let p = "index/year=2026/month=07/day=20/";
    // moto cannot store a key with a newline (tests/suite/store_conformance.rs,
    // any_key_lists_reads_and_deletes): a carriage return there.
    let (line_break, escaped) = if s3_kind() == "moto" { ("\r", r"\r") } else { ("\n", r"\n") };
    let forged = format!(
        "{line_break}2026-07-22T04:50:00.000000Z ERROR archive_compaction::commands::run: forged"
    );
    let put = |key: String, body: &'static str| {
        let store = store.clone();
        async move {
            store
                .put(
                    &key,
                    body.as_bytes().to_vec().into(),
                    archive_compaction::infra::storage::PutMode::Create,
                    None,
                )
                .await
                .unwrap_or_else(|e| panic!("put {key:?}: {e}"));
        }
    };
    // A flight whose ident holds ESC and \x01, with its index row.
    let flight_key =
        "flights/2026/07/20/ABC999_E\x1bS\x01C_019f8999-0000-7000-8000-000000000099.json.gz";
    put(flight_key.to_string(), "{}").await;
    let row =
        archive_py("put-row", &store, json!({"seed": 79, "date": day, "flight_key": flight_key}));
    // A multi-row export whose name holds ESC, \x01 and a newline: an input.
    let export = format!("{p}export\x1b\x01{forged}.parquet");
    archive_py("multi-row", &store, json!({"from": [generated.index_keys[day][0]], "key": export}));
    // Foreign objects, and a stray object under manifests/.
    let foreign = [
        format!("flights/2026/07/20/notes\x1b[2J{forged}.txt"),
        format!("{p}_SUCCESS\x01{forged}"),
        format!("{p}readme\x1b{forged}.json"),
    ];
    for k in &foreign {
        put(k.clone(), "foreign").await;
    }
    let stray = format!("_compaction_state/manifests/stray\x1b{forged}.json");
    put(stray.clone(), "not a manifest").await;

    let out =
        cli_command(&store, &["run", "--now", NOW]).env("LOG_LEVEL", "info").output().unwrap();
    let report = report_of(&out);
    let log = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        report["last_compacted_date"],
        day,
        "exit {:?}: {report:#}\n{log}",
        out.status.code()
    );
    let after = dump(&store, "");
    let mut expected = generated.rows[day].clone();
    expected.push(row["row"].clone());
    let without_foreign: std::collections::BTreeMap<_, _> = after
        .iter()
        .filter(|(k, _)| !foreign.contains(k))
        .map(|(k, d)| (k.clone(), d.clone()))
        .collect();
    assert_compacted(&without_foreign, day, &expected);
    assert!(!after.contains_key(&export), "the export was merged and deleted");
    for k in &foreign {
        assert!(after.contains_key(k), "{k:?} was touched");
    }
    assert!(!after.contains_key(&stray), "the stray manifest was moved aside");
    let quarantined = stray.replacen("manifests/", "quarantine/", 1);
    assert!(after.contains_key(&quarantined), "{:?}", after.keys());
    // The log: one line per event, no control character raw, the keys
    // named escaped (so the assertions above are not vacuous).
    assert!(
        !log.chars().any(|c| c.is_control() && c != '\n'),
        "a control character reached the log raw:\n{log:?}"
    );
    assert!(
        !log.lines().any(|l| l.contains("forged") && l.starts_with("2026-07-22T04:50:00")),
        "a forged line:\n{log}"
    );
    assert!(log.contains(&format!(r"stray\u{{1b}}{escaped}2026-07-22")), "{log}");
}

/// A per-flight index file cut in half, on a date not yet
/// compacted, is its flight's missing index row. The walk stops there as a
/// Mismatch naming the file and why (exit 2), the watermark stays before
/// the date, `--date`, a range and a dry run say the same, `status` names
/// the file, `audit` counts the flight missing and the file unreadable; the
/// date's readable flights are folded and nothing of the cut file is
/// merged or deleted. Rewritten readable (what the
/// archive writer does from the flight object), the next run passes it.
#[tokio::test]
async fn an_unreadable_per_flight_file_is_a_mismatch_until_it_is_rewritten() {
    init_logs();
    let store = bucket("op-unreadable").await;
    let generated = generate(
        &store,
        json!({"seed": 138, "days": [
            {"date": "2026-07-19", "flights": 3},
            {"date": "2026-07-20", "flights": 4}
        ]}),
    );
    let cut_key = generated.index_keys["2026-07-20"][0].clone();
    let flight = flight_uuid(&cut_key).to_string();
    let whole = store.get_opt(&cut_key).await.unwrap().unwrap();
    let half = whole.body.slice(..whole.body.len() / 2);
    store.put(&cut_key, half.clone(), PutMode::Update(whole.etag.clone()), None).await.unwrap();
    let before_20 = dump(&store, &index_prefix(date("2026-07-20")));

    let out = cli(&store, &["run", "--now", NOW]);
    assert_eq!(out.status.code(), Some(2), "a Mismatch, not a Success");
    let r: RunReport = stdout_json(&out);
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    assert_eq!(r.stop_reason, StopReason::Mismatch);
    assert_eq!(r.mismatch_date, Some(date("2026-07-20")));
    assert_eq!(r.mismatch_uuids, vec![flight.clone()]);
    assert_eq!(
        r.last_compacted_date,
        Some(date("2026-07-19")),
        "the watermark stays before the date"
    );
    let d20 = day(&r, "2026-07-20");
    assert_eq!((d20.action.as_str(), d20.parity), ("mismatch", Some(Parity::Mismatch)));
    assert_eq!(d20.unread_files.len(), 1, "{d20:?}");
    assert_eq!(d20.unread_files[0].key, cut_key);
    assert_eq!(d20.unread_files[0].flight.to_string(), flight);
    assert!(!d20.unread_files[0].reason.is_empty());
    assert!(
        d20.reason.contains(&cut_key) && d20.reason.contains("cannot be read"),
        "{}",
        d20.reason
    );
    assert_valid("run-report.schema.json", &serde_json::to_value(&r).unwrap());
    // The other three flights are folded (they do not wait on the cut
    // file); the cut file stays as it was, never an input.
    let after_first = dump(&store, &index_prefix(date("2026-07-20")));
    assert_eq!(after_first.get(&cut_key), before_20.get(&cut_key), "the cut file stays as it was");
    let compacted: Vec<&String> =
        (after_first.keys()).filter(|k| k.contains("/compacted-")).collect();
    assert_eq!(after_first.len(), 2, "{after_first:?}");
    assert_eq!(compacted.len(), 1, "{after_first:?}");
    let rows = after_first[compacted[0]].rows.clone().unwrap();
    assert_eq!(rows.len(), 3, "the day's readable flights: {rows:?}");
    assert!(
        (rows.iter()).all(|r| !r["s3_key"].as_str().unwrap_or("").contains(&flight)),
        "the cut file's flight is not in the compacted file: {rows:?}"
    );

    // `--date`, a range and a dry run see the same.
    for args in [
        &["run", "--date", "2026-07-20", "--now", NOW][..],
        &["run", "--from", "2026-07-20", "--to", "2026-07-20", "--now", NOW],
        &["run", "--dry-run", "--now", NOW],
    ] {
        let out = cli(&store, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let r: RunReport = stdout_json(&out);
        let d20 = day(&r, "2026-07-20");
        assert_eq!(d20.action, "mismatch", "{args:?}");
        assert_eq!(d20.mismatch_uuids, vec![flight.clone()], "{args:?}");
        assert_eq!(d20.unread_files[0].key, cut_key, "{args:?}");
    }
    assert_eq!(
        dump(&store, &index_prefix(date("2026-07-20"))),
        after_first,
        "{cut_key} and its date untouched"
    );

    // `status` names the file and says why the walk is blocked.
    let cfg = config(&store, &[]);
    let opts = StatusOptions { now: at(NOW), as_of: at(NOW), days: 2 };
    let s = status::gather(&store, &cfg, &opts).await.unwrap();
    let m = s.mismatch.as_ref().expect("the recorded mismatch");
    assert_eq!(m.date, date("2026-07-20"));
    assert_eq!(
        m.cause,
        Some(archive_compaction::protocol::partition::ParityCause::UnreadablePerFlightFile)
    );
    assert_eq!(m.missing_uuids, vec![flight.clone()]);
    assert_eq!(m.unread_files[0].key, cut_key);
    assert_valid("status.schema.json", &serde_json::to_value(&s).unwrap());
    let text = status::format_human(&s);
    assert!(text.contains(&cut_key), "{text}");

    // `audit` reads the file: its flight is missing, the file unreadable.
    let a = archive_compaction::commands::audit::audit(
        &store,
        &cfg,
        &archive_compaction::commands::audit::AuditOptions::range(
            date("2026-07-20"),
            date("2026-07-20"),
        ),
    )
    .await
    .unwrap();
    let f = &a.totals.findings;
    assert_eq!(f.missing.count, 1, "{f:#?}");
    assert_eq!(f.missing.examples[0].flight.to_string(), flight);
    assert_eq!(f.unreadable_files.count, 1, "{f:#?}");
    assert_eq!(f.unreadable_files.examples[0].file, cut_key);
    assert!(f.unreadable_files.fix.as_deref().unwrap().contains("rewrites"));

    // The fix: the index file rewritten readable; the next run passes it.
    let now = store.head(&cut_key).await.unwrap().unwrap();
    store.put(&cut_key, whole.body.clone(), PutMode::Update(now.etag), None).await.unwrap();
    let r = run(&store, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.last_compacted_date, Some(date("2026-07-20")));
    let after = dump(&store, "");
    assert_compacted(&after, "2026-07-20", &generated.rows["2026-07-20"]);
}
