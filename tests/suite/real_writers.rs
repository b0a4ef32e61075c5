//! Index files as real writers other than the archive's produce them: extra
//! columns of mixed types, names equal but for case, a column twice, a null
//! or empty `s3_key`, all-None columns (pyarrow, fastparquet through pandas,
//! polars; tests/support/writers.py). After each run every value of every
//! input is in the day's compacted file exactly as written, or that input is
//! still in the partition and named in the report; read back with pyarrow
//! and DuckDB (and Spark, in the ignored test that needs pyspark).
//!
//! Runs on both S3 servers (`TEST_S3_SERVER=ministack|moto`).

use std::collections::BTreeMap;

use crate::common::*;
use archive_compaction::commands::run::{RunOptions, run};
use archive_compaction::data::report::{Parity, RunReport, Status};
use archive_compaction::infra::storage::S3Store;
use serde_json::{Value, json};

const D: &str = "2026-07-20";
const P: &str = "index/year=2026/month=07/day=20/";
const NOW: &str = "2026-07-22T04:50:00Z";

/// Runs a `writers.py` subcommand with a JSON spec on stdin.
fn writers(cmd: &str, store: &S3Store, spec: Value) -> Value {
    let out = support_py(
        "writers.py",
        &[cmd, "--endpoint", &endpoint(), "--bucket", store.bucket()],
        Some(&spec.to_string()),
    );
    serde_json::from_str(&out).unwrap()
}

/// Writes flight `i` of [`D`] and its per-flight file (`spec` as in writers.py).
fn put(store: &S3Store, i: u32, writer: &str, mut spec: Value) -> Value {
    spec["date"] = json!(D);
    spec["i"] = json!(i);
    spec["writer"] = json!(writer);
    writers("put", store, spec)
}

async fn run_now(store: &S3Store) -> RunReport {
    run(store, &config(store, &[]), &RunOptions::at(at(NOW))).await
}

fn index_keys(store: &S3Store) -> Vec<String> {
    dump(store, "index/").into_keys().collect()
}

/// The one compacted file of [`D`] as pyarrow and DuckDB read it.
fn read_compacted(store: &S3Store) -> Value {
    let keys: Vec<String> = index_keys(store)
        .into_iter()
        .filter(|k| k.starts_with(&format!("{P}compacted-")))
        .collect();
    assert_eq!(keys.len(), 1, "one compacted file: {keys:?}");
    writers("read", store, json!({"key": keys[0]}))
}

/// The rows as both readers give them, by `s3_key`; the same from both.
fn rows_by_key(read: &Value) -> BTreeMap<String, Value> {
    let by = |rows: &Value| -> BTreeMap<String, Value> {
        (rows.as_array().unwrap().iter())
            .map(|r| (r["s3_key"].as_str().unwrap().to_string(), r.clone()))
            .collect()
    };
    let pa = by(&read["pyarrow"]["rows"]);
    assert_eq!(pa, by(&read["duckdb"]["rows"]), "pyarrow and DuckDB differ");
    pa
}

/// `written` (a row as put) with the output's columns: the nine, then
/// `extra` (name, value) where given, null elsewhere.
fn expect(written: &Value, extra: &[(&str, Value)], all_extra: &[&str]) -> Value {
    let mut r = json!({});
    for c in [
        "icao_hex",
        "registration",
        "type_designator",
        "military",
        "operator_designator",
        "ident",
        "first_message",
        "last_message",
        "s3_key",
    ] {
        r[c] = written["row"][c].clone();
    }
    for c in all_extra {
        r[*c] = Value::Null;
    }
    for (c, v) in extra {
        r[*c] = v.clone();
    }
    r
}

fn skipped<'a>(r: &'a RunReport, key: &str) -> &'a archive_compaction::data::report::SkippedFile {
    (r.skipped_files.iter())
        .find(|s| s.key == key)
        .unwrap_or_else(|| panic!("{key} not named: {:?}", r.skipped_files))
}

fn day<'a>(r: &'a RunReport, d: &str) -> &'a archive_compaction::data::report::DayReport {
    (r.days.iter()).find(|x| x.date == date(d)).unwrap_or_else(|| panic!("{d} not in the report"))
}

/// The cases 1 and 2: `source` as int64, string and float in three
/// files; `n` as int32 7 and int64 2^40; `pos` as a struct, then as a list.
#[tokio::test]
async fn extra_columns_of_mixed_types_are_kept_exactly_or_their_file_left_in_place() {
    init_logs();
    let store = bucket("w-mixed").await;
    let w = [
        put(
            &store,
            0,
            "pyarrow",
            json!({"extra": [["source", "int64", 1], ["pos", "struct", {"lat": 1.5}]]}),
        ),
        put(&store, 1, "pyarrow", json!({"extra": [["source", "string", "adsb-exchange"]]})),
        put(
            &store,
            2,
            "pyarrow",
            json!({"extra": [["source", "float64", 2.75], ["n", "int32", 7]]}),
        ),
        put(&store, 3, "pyarrow", json!({"extra": [["n", "int64", 1u64 << 40]]})),
        put(&store, 4, "pyarrow", json!({"extra": [["pos", "list", [1, 2]]]})),
        put(&store, 5, "pyarrow", json!({})),
    ];
    let r = run_now(&store).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let d = day(&r, D);
    assert_eq!(d.action, "compacted");
    assert_eq!(d.extra_columns, ["source", "pos", "n"]);
    assert_eq!(d.files_skipped, 1, "{:?}", r.skipped_files);
    let list = w[4]["key"].as_str().unwrap();
    let s = skipped(&r, list);
    assert_eq!(s.column.as_deref(), Some("pos"), "{s:?}");
    assert!(s.reason.contains("no type holds"), "{}", s.reason);
    let left = index_keys(&store);
    assert!(left.contains(&list.to_string()), "the list's file stays");
    assert_eq!(left.len(), 2, "{left:?}");

    let read = read_compacted(&store);
    assert_eq!(
        read["pyarrow"]["schema"].as_str().unwrap(),
        format!(
            "{ARROW_SCHEMA}\nsource: string\npos: struct<lat: double>\n  child 0, lat: double\nn: int64"
        )
    );
    let all = ["source", "pos", "n"];
    let want: BTreeMap<String, Value> = [
        expect(&w[0], &[("source", json!("1")), ("pos", json!({"lat": 1.5}))], &all),
        expect(&w[1], &[("source", json!("adsb-exchange"))], &all),
        expect(&w[2], &[("source", json!("2.75")), ("n", json!(7))], &all),
        expect(&w[3], &[("n", json!(1u64 << 40))], &all),
        expect(&w[5], &[], &all),
    ]
    .into_iter()
    .map(|r| (r["s3_key"].as_str().unwrap().to_string(), r))
    .collect();
    assert_eq!(rows_by_key(&read), want);

    // The next run leaves it again and is a success, not a failure.
    let again = run_now(&store).await;
    assert_eq!(again.last_run_status, Status::Success, "{:?}", again.errors);
    assert!(index_keys(&store).contains(&list.to_string()));
}

/// The cases 4 and 5: names equal but for case are one column, as
/// Glue, Athena and Spark see them; merged where the values agree, else
/// the file is left in place and named.
#[tokio::test]
async fn column_names_match_without_case_and_duplicates_merge_only_where_they_agree() {
    init_logs();
    let store = bucket("w-case").await;
    let w0 = put(&store, 0, "pyarrow", json!({"rename": {"icao_hex": "Icao_Hex"}}));
    let w1 = put(&store, 1, "pyarrow", json!({"extra": [["ICAO_HEX", "string", "=icao_hex"]]}));
    let w2 = put(&store, 2, "pyarrow", json!({"extra": [["Icao_Hex", "string", "FFFFFF"]]}));
    let w3 = put(&store, 3, "pyarrow", json!({"extra": [["ident", "string", "=ident"]]}));
    let w4 = put(&store, 4, "pyarrow", json!({"extra": [["ident", "string", "OTHER"]]}));
    let w5 = put(&store, 5, "pyarrow", json!({"extra": [["Source", "string", "a"]]}));
    let w6 = put(&store, 6, "pyarrow", json!({"extra": [["source", "string", "b"]]}));
    let r = run_now(&store).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let d = day(&r, D);
    assert_eq!(d.files_skipped, 2, "{:?}", r.skipped_files);
    for (w, col) in [(&w2, "Icao_Hex"), (&w4, "ident")] {
        let s = skipped(&r, w["key"].as_str().unwrap());
        assert_eq!(s.column.as_deref(), Some(col), "{s:?}");
        assert!(s.reason.contains("disagree"), "{}", s.reason);
    }
    assert_eq!(index_keys(&store).len(), 3, "the compacted file and the two left");
    let read = read_compacted(&store);
    let cols: Vec<String> = (read["duckdb"]["columns"].as_array().unwrap().iter())
        .map(|c| c.as_str().unwrap().to_lowercase())
        .collect();
    let mut unique = cols.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), cols.len(), "no two columns equal but for case: {cols:?}");
    assert_eq!(
        read["pyarrow"]["schema"].as_str().unwrap(),
        format!("{ARROW_SCHEMA}\nSource: string")
    );
    let mut r0 = expect(&w0, &[("Source", Value::Null)], &[]);
    r0["icao_hex"] = w0["row"]["Icao_Hex"].clone();
    let want: BTreeMap<String, Value> = [
        r0,
        expect(&w1, &[("Source", Value::Null)], &[]),
        expect(&w3, &[("Source", Value::Null)], &[]),
        expect(&w5, &[("Source", json!("a"))], &[]),
        expect(&w6, &[("Source", json!("b"))], &[]),
    ]
    .into_iter()
    .map(|r| (r["s3_key"].as_str().unwrap().to_string(), r))
    .collect();
    let got = rows_by_key(&read);
    assert!(!got[w0["row"]["s3_key"].as_str().unwrap()]["icao_hex"].is_null());
    assert_eq!(got, want);
}

/// The case 3: a per-flight file whose `s3_key` is null and one
/// whose `s3_key` is empty are treated alike: left in place, named, their
/// flights missing (nothing written for the date). A multi-row file's rows
/// without an `s3_key` are merged, counted and named.
#[tokio::test]
async fn null_or_empty_s3_key_files_stay_and_their_flights_are_missing_and_keyless_rows_are_counted()
 {
    init_logs();
    let store = bucket("w-s3key").await;
    // 07-19: three flights, and an export holding one of them again without
    // its s3_key.
    let g = generate(&store, json!({"seed": 240, "days": [{"date": "2026-07-19", "flights": 3}]}));
    let export = "index/year=2026/month=07/day=19/export.parquet";
    archive_py(
        "multi-row",
        &store,
        json!({"key": export, "from": [&g.index_keys["2026-07-19"][0]], "set": {"s3_key": null, "ident": "KEYLESS"}}),
    );
    // 07-20: null, empty, and a good one.
    let w0 = put(&store, 0, "pyarrow", json!({"s3_key": "null"}));
    let w1 = put(&store, 1, "pyarrow", json!({"s3_key": "empty"}));
    put(&store, 2, "pyarrow", json!({}));
    let before: Vec<String> = index_keys(&store).into_iter().filter(|k| k.starts_with(P)).collect();
    let r = run_now(&store).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    let d19 = day(&r, "2026-07-19");
    assert_eq!(d19.action, "compacted");
    assert_eq!(d19.rows_without_flight, 1);
    assert_eq!(d19.rows_without_flight_keys, [export]);
    let d20 = day(&r, D);
    assert_eq!(d20.parity, Some(Parity::Mismatch));
    let mut missing =
        vec![w0["uuid"].as_str().unwrap().to_string(), w1["uuid"].as_str().unwrap().to_string()];
    missing.sort();
    assert_eq!(d20.mismatch_uuids, missing);
    for w in [&w0, &w1] {
        let s = skipped(&r, w["key"].as_str().unwrap());
        assert_eq!(s.column.as_deref(), Some("s3_key"), "{s:?}");
    }
    let after: Vec<String> = index_keys(&store).into_iter().filter(|k| k.starts_with(P)).collect();
    assert_eq!(after, before, "nothing written or deleted on 07-20");
    // 07-19's output: the three flights with their uuids, and the keyless
    // row after them.
    let out = dump(&store, "index/year=2026/month=07/day=19/");
    let rows: Vec<&Value> = out.values().flat_map(|o| o.rows.iter().flatten()).collect();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows.iter().filter(|r| r["s3_key"].is_null()).count(), 1);
    assert!(rows[3]["s3_key"].is_null() && rows[3]["ident"] == "KEYLESS");
}

/// A late per-flight file with a null `s3_key` found by the straggler sweep
/// (which does not list flights) is left in place and named; the compacted
/// file keeps only rows that carry their flight's uuid.
#[tokio::test]
async fn the_sweep_leaves_a_late_file_without_s3_key_in_place() {
    init_logs();
    let store = bucket("w-sweep").await;
    let w0 = put(&store, 0, "pyarrow", json!({}));
    let w1 = put(&store, 1, "pyarrow", json!({}));
    let r = run_now(&store).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let late = put(&store, 2, "pyarrow", json!({"s3_key": "null"}));
    let r = run_now(&store).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let s = skipped(&r, late["key"].as_str().unwrap());
    assert_eq!(s.column.as_deref(), Some("s3_key"), "{s:?}");
    let keys = index_keys(&store);
    assert!(keys.contains(&late["key"].as_str().unwrap().to_string()));
    assert_eq!(keys.len(), 2, "{keys:?}");
    let got = rows_by_key(&read_compacted(&store));
    let mut want: Vec<String> =
        [&w0, &w1].iter().map(|w| w["row"]["s3_key"].as_str().unwrap().to_string()).collect();
    want.sort();
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), want);
    // The date run again with its flights listed (`--date`): beside one
    // compacted file nothing else is merged, and the flight still counts
    // as missing; nothing is written or deleted.
    let mut opts = RunOptions::at(at(NOW));
    opts.only_date = Some(date(D));
    let r = run(&store, &config(&store, &[]), &opts).await;
    assert_eq!(r.last_run_status, Status::Mismatch, "{:?}", r.errors);
    let d = day(&r, D);
    assert_eq!(d.parity, Some(Parity::Mismatch));
    assert_eq!(d.mismatch_uuids, [late["uuid"].as_str().unwrap()]);
    assert!(d.reason.contains("s3_key"), "{}", d.reason);
    assert_eq!(index_keys(&store), keys);
}

/// The case 6 and the writers that differ from pyarrow: fastparquet
/// (through pandas: an all-None string column as plain binary, no Arrow
/// schema) and polars (large strings), with extra and renamed columns.
#[tokio::test]
async fn files_written_by_fastparquet_and_polars_merge_exactly() {
    init_logs();
    let store = bucket("w-writers").await;
    let w0 = put(
        &store,
        0,
        "fastparquet",
        json!({"nulls": ["registration", "type_designator"], "extra": [["note", "null", null], ["n", "int64", 5]]}),
    );
    let w1 = put(&store, 1, "fastparquet", json!({"extra": [["note", "string", "x"]]}));
    let w2 = put(
        &store,
        2,
        "polars",
        json!({"rename": {"icao_hex": "ICAO_hex"}, "extra": [["N", "int32", 6], ["note", "string", "y"]]}),
    );
    let w3 = put(&store, 3, "polars", json!({"nulls": ["ident"]}));
    let r = run_now(&store).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let d = day(&r, D);
    assert_eq!(d.files_skipped, 0, "{:?}", r.skipped_files);
    assert_eq!(d.action, "compacted");
    assert_eq!(index_keys(&store).len(), 1, "every input merged");
    let read = read_compacted(&store);
    assert_eq!(
        read["pyarrow"]["schema"].as_str().unwrap(),
        format!("{ARROW_SCHEMA}\nnote: string\nn: int64")
    );
    let all = ["note", "n"];
    let mut r2 = expect(&w2, &[("note", json!("y")), ("n", json!(6))], &all);
    r2["icao_hex"] = w2["row"]["ICAO_hex"].clone();
    let want: BTreeMap<String, Value> = [
        expect(&w0, &[("n", json!(5))], &all),
        expect(&w1, &[("note", json!("x"))], &all),
        r2,
        expect(&w3, &[], &all),
    ]
    .into_iter()
    .map(|r| (r["s3_key"].as_str().unwrap().to_string(), r))
    .collect();
    let got = rows_by_key(&read);
    assert!(got[w0["row"]["s3_key"].as_str().unwrap()]["registration"].is_null());
    assert_eq!(got, want);
}

/// What Spark reads from a compacted file that carries an extra column and
/// held a column named without case: the whole file (no
/// `COLUMN_ALREADY_EXISTS`), `ICAO_HEX` resolved to `icao_hex`, the extra
/// column's values as written. Needs pyspark (and Java 17):
/// `scripts/setup-tools.sh spark`, then
/// `cargo test --test real_writers -- --ignored`.
#[tokio::test]
#[ignore = "needs pyspark: scripts/setup-tools.sh spark"]
async fn spark_reads_a_compacted_file_with_an_extra_column() {
    init_logs();
    let store = bucket("w-spark").await;
    let w0 = put(
        &store,
        0,
        "pyarrow",
        json!({"rename": {"icao_hex": "Icao_Hex"}, "extra": [["source", "int64", 1]]}),
    );
    let w1 = put(&store, 1, "pyarrow", json!({"extra": [["source", "string", "adsb-exchange"]]}));
    let r = run_now(&store).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    let keys: Vec<String> = index_keys(&store);
    assert_eq!(keys.len(), 1, "{keys:?}");
    let spark = writers("spark", &store, json!({"key": keys[0]}));
    let cols: Vec<&str> =
        (spark["columns"].as_array().unwrap().iter()).map(|c| c.as_str().unwrap()).collect();
    assert_eq!(cols.len(), 10, "{cols:?}");
    assert_eq!(cols[9], "source");
    let rows = spark["rows"].as_array().unwrap();
    let mut by: Vec<(&Value, Value)> = vec![(&w0, json!("1")), (&w1, json!("adsb-exchange"))];
    by.sort_by_key(|(w, _)| w["row"]["s3_key"].as_str().unwrap().to_string());
    for ((w, source), row) in by.iter().zip(rows) {
        assert_eq!(&row["source"], source);
        assert_eq!(row["s3_key"], w["row"]["s3_key"]);
        assert_eq!(row["first_message"], w["row"]["first_message"]);
    }
    let icao: Vec<&Value> = spark["icao_hex"].as_array().unwrap().iter().collect();
    let want0 = &w0["row"]["Icao_Hex"];
    assert!(icao.contains(&want0), "{icao:?}");
    assert!(icao.iter().all(|v| !v.is_null()));
}
