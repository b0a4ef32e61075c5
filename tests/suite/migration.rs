//! After the migration from the Python job, against a real S3-protocol
//! server (ministack, or moto with `TEST_S3_SERVER=moto`), through the CLI
//! binary:
//!
//! - `prune-cache` on a local directory mirroring a generated archive the
//!   way archive-processor's `/app/index-cache` does (each per-flight index
//!   file's bytes at its key without `index/`), after a run that compacted
//!   two days and stopped at a mismatching third: exactly the compacted
//!   days' copies go; the mismatching day, the days after the watermark, a
//!   straggler still in S3, a copy without any trace in S3 and every foreign
//!   name stay; `--dry-run`, a second run and every error case (missing
//!   directory, unreadable watermark, listing denied) delete nothing.
//! - rows of other days: a multi-row file holding rows of two days gives the
//!   count and the uuids in the report, one log line, and `status`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;
use archive_compaction::infra::storage::{PutMode, S3Store};
use serde_json::{Value, json};

const NOW: &str = "2026-07-22T04:50:00Z";

fn cli(store: &S3Store, args: &[&str]) -> Output {
    cli_command(store, args).output().expect("run the archive-compaction binary")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file under `dir` (relative path, size), folders walked.
fn snapshot(dir: &Path) -> BTreeMap<String, u64> {
    fn walk(root: &Path, p: &Path, out: &mut BTreeMap<String, u64>) {
        for e in std::fs::read_dir(p).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                walk(root, &e.path(), out);
            } else {
                let rel = e.path().strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, meta.len());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The local copy of an index key, as archive-processor writes it.
fn local(key: &str) -> String {
    key.strip_prefix("index/").unwrap().to_string()
}

/// Writes `rel` under `dir` (folders made).
fn write(dir: &Path, rel: &str, body: &[u8]) {
    let p: PathBuf = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

/// Copies S3 objects to their local place under `dir`; returns their sizes.
async fn mirror(store: &S3Store, dir: &Path, keys: &[String]) -> u64 {
    let mut total = 0;
    for k in keys {
        let body = store.get(k).await.unwrap().body;
        total += body.len() as u64;
        write(dir, &local(k), &body);
    }
    total
}

fn prune(store: &S3Store, dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["prune-cache", "--dir", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    cli(store, &args)
}

#[tokio::test]
async fn prune_cache_removes_exactly_the_compacted_days_copies() {
    init_logs();
    let store = bucket("prune-cache").await;
    let g = generate(
        &store,
        json!({"seed": 28, "days": [
            {"date": "2026-07-17", "flights": 8},
            {"date": "2026-07-18", "flights": 8, "foreign": true},
            {"date": "2026-07-19", "flights": 8, "unindexed": 1},
            {"date": "2026-07-20", "flights": 6},
        ]}),
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut compacted_days_bytes = 0;
    for (date, keys) in &g.index_keys {
        let bytes = mirror(&store, d, keys).await;
        if date.as_str() <= "2026-07-18" {
            compacted_days_bytes += bytes;
        }
    }
    let to_go: Vec<String> = ["2026-07-17", "2026-07-18"]
        .iter()
        .flat_map(|date| g.index_keys[*date].iter().map(|k| local(k)))
        .collect();
    assert_eq!(to_go.len(), 16);
    // Foreign names in the layout, and things outside it.
    let u17 = g.index_keys["2026-07-17"][0].rsplit('/').next().unwrap();
    let u18 = g.index_keys["2026-07-18"][0].rsplit('/').next().unwrap();
    let foreign = [
        "year=2026/month=07/day=17/_SUCCESS".to_string(),
        format!("year=2026/month=07/day=17/{u17}.tmp"),
        "year=2026/month=07/day=18/legacy-export.parquet".into(),
        format!("year=2026/month=07/day=18/sub/{u18}"),
        // Misspelled partition: its S3 key would not be in any listing.
        format!("year=2026/month=7/day=17/{u17}"),
        format!("lost+found/{u17}"),
        "notes.txt".into(),
    ];
    for f in &foreign {
        write(d, f, b"foreign");
    }
    // A copy of a compacted day with neither its object nor its flight in S3.
    let orphan = "year=2026/month=07/day=17/019f7d73-f820-702f-b905-000000000028.parquet";
    write(d, orphan, b"PAR1 only here PAR1");

    // The run compacts 07-17 and 07-18 and stops at 07-19.
    let out = cli(&store, &["run", "--now", NOW]);
    let r = report_of(&out);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(r["days_compacted"], 2);
    assert_eq!(r["last_compacted_date"], "2026-07-18");
    assert_eq!(r["mismatch_date"], "2026-07-19");
    // A straggler of 07-18 arrives (or a delete failed): still in S3.
    let straggler = archive_py("put-row", &store, json!({"date": "2026-07-18", "seed": 7}));
    let straggler_key = straggler["key"].as_str().unwrap().to_string();
    mirror(&store, d, std::slice::from_ref(&straggler_key)).await;
    let s3_before = object_versions(&store).await;
    let before = snapshot(d);

    // --dry-run: says what it would delete, deletes nothing.
    let out = prune(&store, d, &["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let dry = report_of(&out);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["files_to_delete"], 16, "{dry:#}");
    assert_eq!(dry["bytes_to_free"], compacted_days_bytes);
    assert_eq!((dry["files_deleted"].clone(), dry["bytes_freed"].clone()), (json!(0), json!(0)));
    assert_eq!(snapshot(d), before, "a dry run deleted something");

    // Errors delete nothing: a missing directory...
    let out = prune(&store, &d.join("nope"), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    // ...an unreadable watermark...
    let bad = bucket("prune-bad-wm").await;
    bad.put("_compaction_state/watermark.json", "{not json".into(), PutMode::Create, None)
        .await
        .unwrap();
    let out = prune(&bad, d, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot read the watermark"), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "no summary on an error");
    assert_eq!(snapshot(d), before, "an unreadable watermark deleted something");
    // ...a listing error (the watermark reads, every listing is denied).
    let proxy = Proxy::start();
    proxy.set(json!({"deny_kinds": {"ListObjectsV2": "AccessDenied"}}));
    let out = cli_command(&store, &["prune-cache", "--dir", d.to_str().unwrap()])
        .env("AWS_ENDPOINT_URL", proxy.endpoint())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot list") && stderr(&out).contains("AccessDenied"),
        "{}",
        stderr(&out)
    );
    assert!(proxy.stats()["injected"].as_u64().unwrap() >= 1);
    assert_eq!(snapshot(d), before, "a listing error deleted something");

    // The real run: exactly the compacted days' per-flight copies go.
    let out = prune(&store, d, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s = report_of(&out);
    assert_eq!(s["files_deleted"], 16, "{s:#}");
    assert_eq!(s["bytes_freed"], compacted_days_bytes);
    assert_eq!(s["watermark"], "2026-07-18");
    assert_eq!(s["dates_looked_at"], 4);
    assert_eq!(s["dates_listed"], 2);
    assert_eq!(s["errors"], json!([]));
    let kept = &s["kept"];
    assert_eq!(kept["blocked"], 7, "07-19's copies (the mismatch date): {s:#}");
    assert_eq!(kept["after_watermark"], 6, "07-20's copies");
    assert_eq!(kept["still_in_s3"], 1, "the straggler");
    assert_eq!(kept["flight_not_listed"], 1, "the copy without trace in S3");
    assert_eq!(kept["not_per_flight"], 4, "_SUCCESS, .tmp, a multi-row name, a folder");
    assert_eq!(kept["outside_layout"], 3, "month=7, lost+found, notes.txt");
    assert_eq!(s["dates_blocked"]["2026-07-19"], "the watermark's mismatch_date");
    let mut want = before.clone();
    for k in &to_go {
        assert!(want.remove(k).is_some(), "{k} was not in the mirror");
    }
    assert_eq!(snapshot(d), want, "not exactly the compacted days' copies went");
    for f in foreign.iter().map(String::as_str).chain([orphan]) {
        assert!(d.join(f).exists(), "{f} was deleted");
    }
    assert!(d.join(local(&straggler_key)).exists());
    let s3_after = object_versions(&store).await;
    assert_eq!(s3_after, s3_before, "prune-cache changed the bucket");
    assert_valid("prune-cache.schema.json", &s);
    assert_valid("prune-cache.schema.json", &dry);

    // A second run finds nothing to delete.
    let out = prune(&store, d, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let again = report_of(&out);
    assert_eq!(
        (again["files_to_delete"].clone(), again["files_deleted"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(snapshot(d), want, "a second run deleted something");
}

#[tokio::test]
async fn rows_of_other_days_are_counted_named_logged_once_and_shown_by_status() {
    init_logs();
    let store = bucket("other-days").await;
    let g = generate(
        &store,
        json!({"seed": 29, "days": [
            {"date": "2026-07-17", "flights": 4},
            {"date": "2026-07-18", "flights": 4},
        ]}),
    );
    // A backfill file in 07-18 holding three of 07-17's rows and one of its own.
    let from: Vec<String> = (g.index_keys["2026-07-17"][..3].iter())
        .chain(&g.index_keys["2026-07-18"][..1])
        .cloned()
        .collect();
    let backfill = "index/year=2026/month=07/day=18/backfill-mixed.parquet";
    archive_py("multi-row", &store, json!({"key": backfill, "from": from}));
    let others: Vec<String> = from[..3].iter().map(|k| flight_uuid(k).to_string()).collect();

    let out = cli(&store, &["status", "--json", "--now", NOW]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    let day = |v: &Value, key: &str, date: &str| {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["date"] == date)
            .cloned()
            .unwrap_or_else(|| panic!("no {date} in {key}: {v:#}"))
    };
    assert_eq!(day(&st, "next_days", "2026-07-18")["rows_of_other_days"], 3);
    assert_eq!(day(&st, "next_days", "2026-07-18")["other_days_uuids"], json!(others));
    assert_eq!(day(&st, "next_days", "2026-07-17")["rows_of_other_days"], 0);
    assert_valid("status.schema.json", &st);
    let text = cli(&store, &["status", "--now", NOW]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("3 row(s) of other days"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );

    let out = cli(&store, &["run", "--now", NOW]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = report_of(&out);
    assert_eq!(day(&r, "days", "2026-07-18")["rows_of_other_days"], 3);
    assert_eq!(day(&r, "days", "2026-07-18")["other_days_uuids"], json!(others));
    assert_eq!(day(&r, "days", "2026-07-17")["rows_of_other_days"], 0);
    assert_eq!(r["rows_of_other_days"], 3);
    assert_valid("run-report.schema.json", &r);
    let log = stderr(&out);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("rows of other days")).collect();
    assert_eq!(lines.len(), 1, "one log line per date:\n{log}");
    assert!(lines[0].contains("2026-07-18") && lines[0].contains(&others[0]), "{}", lines[0]);

    // The rows stay where they were: 07-18's compacted file holds them too.
    let objects = dump(&store, "index/");
    let keys_in = |date: &str| -> Vec<String> {
        let p = archive_compaction::data::keys::index_prefix(date_of(date));
        objects
            .iter()
            .filter(|(k, _)| k.starts_with(&p) && k.contains("compacted-"))
            .flat_map(|(_, o)| o.rows.clone().unwrap())
            .map(|row| row["s3_key"].as_str().unwrap().to_string())
            .collect()
    };
    let in18 = keys_in("2026-07-18");
    assert_eq!(in18.len(), 4 + 3, "{in18:?}");
    for u in &others {
        assert!(in18.iter().any(|k| k.contains(u.as_str())), "{u} moved");
        assert!(keys_in("2026-07-17").iter().any(|k| k.contains(u.as_str())));
    }
}

fn date_of(s: &str) -> chrono::NaiveDate {
    date(s)
}

#[tokio::test]
async fn a_failed_delete_keeps_its_date_until_recovery_finishes_it() {
    use archive_compaction::commands::run::{RunOptions, run};
    use archive_compaction::data::report::Status;
    init_logs();
    let direct = bucket("prune-failed-delete").await;
    let g = generate(
        &direct,
        json!({"seed": 30, "days": [
            {"date": "2026-07-17", "flights": 4},
            {"date": "2026-07-18", "flights": 4},
        ]}),
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for keys in g.index_keys.values() {
        mirror(&direct, d, keys).await;
    }
    let cfg = config(&direct, &[]);
    let r = run(&direct, &cfg, &RunOptions::at(at(NOW))).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    // A straggler of 07-17 arrives; folding it in, its delete fails.
    let straggler = archive_py("put-row", &direct, json!({"date": "2026-07-17", "seed": 9}));
    let straggler_key = straggler["key"].as_str().unwrap().to_string();
    mirror(&direct, d, std::slice::from_ref(&straggler_key)).await;
    let proxy = Proxy::start();
    let through = proxy.store(&direct);
    proxy.set(json!({"delete_key_errors": [
        {"match": straggler_key.rsplit('/').next().unwrap(), "code": "AccessDenied", "times": -1}
    ]}));
    let mut opts = RunOptions::at(at(NOW));
    opts.only_date = Some(date("2026-07-17"));
    let r = run(&through, &cfg, &opts).await;
    assert_eq!(r.last_run_status, Status::Failure);
    assert_eq!(r.files_delete_failed, 1, "{:?}", r.errors);

    // The date is blocked by its manifest, which the failed delete marked
    // stuck (the run names it so too): none of its copies go.
    let out = prune(&direct, d, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s = report_of(&out);
    assert_eq!(s["files_deleted"], 4, "07-18's copies: {s:#}");
    assert_eq!(s["kept"]["blocked"], 5, "07-17's four and the straggler: {s:#}");
    assert!(
        s["dates_blocked"]["2026-07-17"]
            .as_str()
            .unwrap()
            .starts_with("stuck manifest _compaction_state/manifests/2026-07-17/"),
        "{s:#}"
    );
    for k in &g.index_keys["2026-07-17"] {
        assert!(d.join(local(k)).exists(), "{k}");
    }

    // Fixed: recovery finishes the commit (the straggler is deleted in S3),
    // then its date's copies go, the straggler's too.
    proxy.set(json!({}));
    let r = run(&through, &cfg, &opts).await;
    assert_eq!(r.last_run_status, Status::Success, "{:?}", r.errors);
    assert_eq!(r.recovered.len(), 1);
    let out = prune(&direct, d, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s = report_of(&out);
    assert_eq!(s["files_deleted"], 5, "{s:#}");
    assert_eq!(s["files_kept"], 0, "{s:#}");
    assert_eq!(snapshot(d), BTreeMap::new());
}

/// A month folder swapped for a symbolic link between prune-cache's walk
/// and its deletes (archive-processor writes that folder; anyone who can
/// write there can swap it): the proxy holds the date's `flights/` listing,
/// which comes after the walk and before the first delete, while the test
/// makes the swap. The link points at a folder holding files of the same
/// names: none is deleted (each delete goes through folder handles opened
/// without following links), the copies are named in `errors` (exit 1),
/// and the other month is pruned.
#[tokio::test]
async fn a_folder_swapped_for_a_link_during_prune_cache_deletes_nothing_outside_dir() {
    init_logs();
    let store = bucket("prune-swap").await;
    let g = generate(
        &store,
        json!({"seed": 31, "days": [
            {"date": "2026-06-30", "flights": 3},
            {"date": "2026-07-17", "flights": 3},
        ]}),
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for keys in g.index_keys.values() {
        mirror(&store, d, keys).await;
    }
    let out = cli(&store, &["run", "--now", NOW]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Outside --dir: a folder with files of the same names as 07-17's copies.
    let outside = tempfile::tempdir().unwrap();
    let victims: Vec<PathBuf> = g.index_keys["2026-07-17"]
        .iter()
        .map(|k| outside.path().join("day=17").join(k.rsplit('/').next().unwrap()))
        .collect();
    for v in &victims {
        std::fs::create_dir_all(v.parent().unwrap()).unwrap();
        std::fs::write(v, b"not the cache's").unwrap();
    }
    let proxy = Proxy::start();
    proxy.set(json!({"hold": "prefix=flights/2026/07/17/"}));
    let mut child = cli_command(&store, &["prune-cache", "--dir", d.to_str().unwrap()])
        .env("AWS_ENDPOINT_URL", proxy.endpoint())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while proxy.stats()["held"].as_u64().unwrap_or(0) == 0 {
        assert!(child.try_wait().unwrap().is_none(), "prune-cache ended before its listing");
        assert!(std::time::Instant::now() < deadline, "the listing never came");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Walked, not yet deleted: swap month=07 for a link to `outside`.
    let month = d.join("year=2026/month=07");
    std::fs::rename(&month, d.join("month-07-moved-away")).unwrap();
    std::os::unix::fs::symlink(outside.path(), &month).unwrap();
    proxy.set(json!({}));
    let out = child.wait_with_output().unwrap();
    let s = report_of(&out);
    for v in &victims {
        assert_eq!(
            std::fs::read(v).unwrap(),
            b"not the cache's",
            "{} outside --dir was deleted: {s:#}",
            v.display()
        );
    }
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(s["files_deleted"], 3, "June's copies are pruned: {s:#}");
    assert_eq!(s["kept"]["delete_failed"], 3, "{s:#}");
    let errors = s["errors"].as_array().unwrap();
    assert!(errors.iter().all(|e| e.as_str().unwrap().contains("symbolic link")), "{s:#}");
    assert_valid("prune-cache.schema.json", &s);
}

/// A day folder prune-cache cannot read (mode 000; the command runs without
/// CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, dropped with setpriv, since
/// the tests run as root, who reads any folder): it is named under
/// `skipped_folders` and skipped, the rest of the cache is pruned, and the
/// exit code is 3 (partial). It stopped the whole command before (exit 1,
/// nothing pruned, every day, until someone fixed the folder).
#[tokio::test]
async fn an_unreadable_folder_is_named_and_skipped_and_the_rest_is_pruned() {
    init_logs();
    let store = bucket("prune-unreadable").await;
    let g = generate(
        &store,
        json!({"seed": 32, "days": [
            {"date": "2026-07-16", "flights": 3},
            {"date": "2026-07-17", "flights": 3},
        ]}),
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for keys in g.index_keys.values() {
        mirror(&store, d, keys).await;
    }
    let out = cli(&store, &["run", "--now", NOW]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    use std::os::unix::fs::PermissionsExt;
    let locked = d.join("year=2026/month=07/day=16");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let base = cli_command(&store, &["prune-cache", "--dir", d.to_str().unwrap()]);
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--bounding-set", "-dac_override,-dac_read_search", "--"])
        .arg(base.get_program())
        .args(base.get_args())
        .env_clear()
        .envs(base.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))));
    let out = cmd.output().expect("setpriv (util-linux)");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = report_of(&out);
    assert_eq!(out.status.code(), Some(3), "{}\n{s:#}", stderr(&out));
    let skipped = s["skipped_folders"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{s:#}");
    assert!(skipped[0].as_str().unwrap().contains("day=16"), "{s:#}");
    assert_eq!(s["files_deleted"], 3, "07-17's copies: {s:#}");
    for k in &g.index_keys["2026-07-16"] {
        assert!(d.join(local(k)).exists(), "{k}");
    }
    for k in &g.index_keys["2026-07-17"] {
        assert!(!d.join(local(k)).exists(), "{k}");
    }
    assert_valid("prune-cache.schema.json", &s);
}
