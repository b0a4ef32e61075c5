//! Test harness: real servers on 127.0.0.1, real pyarrow fixtures, an
//! independent reader (pyarrow) for outputs.
//!
//! - `TEST_S3_SERVER=ministack|moto` picks the S3 implementation (default
//!   ministack). `make test` starts one ministack, one moto and one
//!   mosquitto for the whole run (`tests/support/servers.py`) and hands
//!   their ports to every test process as `TEST_PORT_MINISTACK`,
//!   `TEST_PORT_MOTO`, `TEST_PORT_MOSQUITTO` ([`shared_port`]); without
//!   them (a plain `cargo test`), a test process starts its own on a free
//!   port with `tests/support/serve.py`, stopped when the process exits.
//! - Every helper process (servers, the fault proxy, the Lambda runtime,
//!   Home Assistant) is a [`Supervised`]: stopped when its stdin closes.
//! - Each test gets its own bucket.
#![allow(dead_code)]

mod scenes;
mod supervised;
#[allow(unused_imports)]
pub use scenes::*;
pub use supervised::Supervised;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use archive_compaction::data::config::Config;
use archive_compaction::infra::storage::S3Store;
/// The storage seam: every test calls S3Store through it (as the job does).
pub use archive_compaction::infra::storage::Store;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use serde::Deserialize;
use serde_json::Value;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn tools() -> PathBuf {
    std::env::var_os("TOOLS_DIR").map(PathBuf::from).unwrap_or_else(|| root().join(".tools"))
}

pub fn python() -> PathBuf {
    tools().join("py/bin/python")
}

/// A server started for this test process on `port`; stopped when dropped
/// or when the process exits (serve.py watches its stdin).
pub struct Server {
    pub port: u16,
    pub process: Supervised,
}

/// A port free now and never handed out before in this test process: the
/// tests of one binary run in parallel, and the kernel may give a port
/// released here to the next caller before the first one's server binds it.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<std::collections::BTreeSet<u16>> =
        Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if GIVEN.lock().unwrap().insert(port) {
            return port;
        }
    }
}

/// Starts `kind` with serve.py on a free port. serve.py refuses a port
/// another process took since [`free_port`] found it free (and never says
/// "ready" for a server that exited): then another port is tried, three
/// times at most.
pub fn start_server(kind: &str) -> Server {
    start_server_with(kind, &[])
}

/// [`start_server`] with `env` added to serve.py's environment (see
/// serve.py for the variables each kind reads).
pub fn start_server_with(kind: &str, env: &[(&str, &std::ffi::OsStr)]) -> Server {
    let mut port = 0;
    for _ in 0..3 {
        port = free_port();
        let process = Supervised::spawn(
            serve_py(kind, port, env),
            &format!("{kind} via serve.py; run scripts/setup-tools.sh"),
        );
        if process.read_line().trim() == "ready" {
            return Server { port, process };
        }
    }
    panic!("{kind} did not start; see serve.py's message above and /tmp/ac-{kind}-{port}.log")
}

/// `serve.py kind port` in the test venv's python, with `env` added.
pub fn serve_py(kind: &str, port: u16, env: &[(&str, &std::ffi::OsStr)]) -> Command {
    let mut cmd = Command::new(python());
    cmd.arg(root().join("tests/support/serve.py"))
        .arg(kind)
        .arg(port.to_string())
        .envs(env.iter().copied());
    cmd
}

pub fn s3_kind() -> String {
    std::env::var("TEST_S3_SERVER").unwrap_or_else(|_| "ministack".into())
}

/// The port of the run's shared `kind` server (ministack, moto,
/// mosquitto): the one `tests/support/servers.py` started, named by
/// `TEST_PORT_{KIND}`, else one started for this test process (once).
pub fn shared_port(kind: &str) -> u16 {
    let var = format!("TEST_PORT_{}", kind.to_uppercase());
    if let Ok(port) = std::env::var(&var) {
        return port.parse().unwrap_or_else(|_| panic!("{var}={port}: expected a port number"));
    }
    static STARTED: Mutex<BTreeMap<String, &'static Server>> = Mutex::new(BTreeMap::new());
    let mut started = STARTED.lock().unwrap();
    if let Some(server) = started.get(kind) {
        return server.port;
    }
    let server: &'static Server = Box::leak(Box::new(start_server(kind)));
    started.insert(kind.to_string(), server);
    server.port
}

/// The port of the S3 server `TEST_S3_SERVER` picks (see [`shared_port`]).
pub fn s3_port() -> u16 {
    shared_port(&s3_kind())
}

pub fn endpoint() -> String {
    format!("http://127.0.0.1:{}", s3_port())
}

pub fn sdk_client(endpoint: &str) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(archive_compaction::app::https_client())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .force_path_style(true)
        .retry_config(archive_compaction::app::retry_config())
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// A fresh, empty bucket named after the test.
pub async fn bucket(hint: &str) -> S3Store {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let name: String = format!("t-{}-{}-{n}", hint.replace('_', "-"), std::process::id())
        .chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches('-')
        .to_lowercase();
    let client = sdk_client(&endpoint());
    client.create_bucket().bucket(&name).send().await.expect("create bucket");
    S3Store::new(client, name).with_delete_backoff(std::time::Duration::from_millis(50))
}

/// Environment for the job against `store`'s bucket.
pub fn env_for(store: &S3Store, extra: &[(&str, &str)]) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = [
        ("S3_BUCKET", store.bucket()),
        ("S3_FORCE_PATH_STYLE", "true"),
        ("METRICS_ENABLED", "false"),
        ("LOG_LEVEL", "info"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        env.insert(k.to_string(), v.to_string());
    }
    env
}

pub fn config(store: &S3Store, extra: &[(&str, &str)]) -> Config {
    Config::from_map(&env_for(store, extra)).unwrap()
}

pub fn init_logs() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        use tracing_subscriber::Layer;
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let filter: tracing_subscriber::filter::Targets = std::env::var("TEST_LOG")
            .unwrap_or_else(|_| "warn".into())
            .parse()
            .expect("TEST_LOG: a tracing Targets filter such as warn or archive_compaction=debug");
        let _ = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_test_writer().with_filter(filter))
            .try_init();
    });
}

fn py(args: &[&str], stdin: Option<&str>) -> String {
    support_py("archive.py", args, stdin)
}

/// Runs `tests/support/{script}` with `args` in the test venv's python,
/// `stdin` (if any) on its standard input; returns its standard output.
/// Panics (naming the script and arguments) when it exits non-zero.
///
/// With `TEST_PY_FORKSERVER` (set by `tests/support/servers.py`), archive.py
/// and hostile.py run in a child of `tests/support/forkserver.py`, which
/// has boto3 and pyarrow imported already; the same script, arguments and
/// stdin, its stderr printed here.
pub fn support_py(script: &str, args: &[&str], stdin: Option<&str>) -> String {
    if let Some(socket) = std::env::var_os("TEST_PY_FORKSERVER")
        && matches!(script, "archive.py" | "hostile.py")
    {
        return forked_py(std::path::Path::new(&socket), script, args, stdin);
    }
    let mut child = Command::new(python())
        .arg(root().join("tests/support").join(script))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python (run scripts/setup-tools.sh)");
    if let Some(s) = stdin {
        child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    } else {
        drop(child.stdin.take());
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{script} {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// One request to the fork server (see [`support_py`] and
/// tests/support/forkserver.py for the protocol).
fn forked_py(socket: &std::path::Path, script: &str, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Read;
    let mut conn = std::os::unix::net::UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("forkserver at {} ({e})", socket.display()));
    let request = serde_json::json!({"script": script, "args": args, "stdin": stdin});
    conn.write_all(request.to_string().as_bytes()).unwrap();
    conn.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    #[derive(Deserialize)]
    struct Answer {
        code: i32,
        stdout: String,
        stderr: String,
    }
    let a: Answer = serde_json::from_str(&answer)
        .unwrap_or_else(|e| panic!("forkserver's answer to {script} {args:?} ({e}): {answer:?}"));
    eprint!("{}", a.stderr);
    assert_eq!(a.code, 0, "{script} {args:?} failed (through the forkserver)");
    a.stdout
}

/// What `archive.py gen` wrote.
#[derive(Debug, Deserialize)]
pub struct Generated {
    pub rows: BTreeMap<String, Vec<Value>>,
    pub missing: BTreeMap<String, Vec<String>>,
    pub flights: BTreeMap<String, Vec<String>>,
    pub index_keys: BTreeMap<String, Vec<String>>,
    pub foreign: Vec<String>,
}

/// Writes an archive with pyarrow (see tests/support/archive.py for `spec`).
pub fn generate(store: &S3Store, mut spec: Value) -> Generated {
    spec["create_bucket"] = Value::Bool(false);
    let out = py(
        &["gen", "--endpoint", &endpoint(), "--bucket", store.bucket()],
        Some(&spec.to_string()),
    );
    serde_json::from_str(&out).unwrap()
}

/// One object as the independent reader (pyarrow) sees it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Dumped {
    pub size: u64,
    pub etag: String,
    pub arrow_schema: Option<String>,
    pub parquet_schema: Option<Vec<String>>,
    pub compression: Option<Vec<String>>,
    pub rows: Option<Vec<Value>>,
    pub json: Option<Value>,
    pub error: Option<String>,
}

/// Every object under `prefix`, read back with pyarrow.
pub fn dump(store: &S3Store, prefix: &str) -> BTreeMap<String, Dumped> {
    let out = py(
        &["dump", "--endpoint", &endpoint(), "--bucket", store.bucket(), "--prefix", prefix],
        None,
    );
    serde_json::from_str(&out).unwrap()
}

/// Rewrites an index file in place with pyarrow (new ETag, ident changed);
/// returns the new rows.
pub fn rewrite(store: &S3Store, key: &str, ident: &str) -> Vec<Value> {
    let out = py(
        &[
            "rewrite",
            "--endpoint",
            &endpoint(),
            "--bucket",
            store.bucket(),
            "--key",
            key,
            "--ident",
            ident,
        ],
        None,
    );
    serde_json::from_str(&out).unwrap()
}

/// Runs an `archive.py` subcommand that reads a JSON spec on stdin.
pub fn archive_py(cmd: &str, store: &S3Store, spec: Value) -> Value {
    let out =
        py(&[cmd, "--endpoint", &endpoint(), "--bucket", store.bucket()], Some(&spec.to_string()));
    serde_json::from_str(&out).unwrap()
}

/// The exact schema the Glue table expects, as pyarrow prints it.
pub const ARROW_SCHEMA: &str = "icao_hex: string\nregistration: string\ntype_designator: string\nmilitary: bool not null\noperator_designator: string\nident: string\nfirst_message: timestamp[us, tz=UTC]\nlast_message: timestamp[us, tz=UTC]\ns3_key: string";

pub fn parquet_schema() -> Vec<String> {
    let s = |n: &str| format!("{n}:BYTE_ARRAY:String:OPTIONAL");
    let ts = |n: &str| {
        format!(
            "{n}:INT64:Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false):OPTIONAL"
        )
    };
    vec![
        s("icao_hex"),
        s("registration"),
        s("type_designator"),
        "military:BOOLEAN:None:REQUIRED".into(),
        s("operator_designator"),
        s("ident"),
        ts("first_message"),
        ts("last_message"),
        s("s3_key"),
    ]
}

fn sort_key(v: &Value) -> String {
    v["s3_key"].as_str().unwrap_or_default().to_string() + &v.to_string()
}

/// Asserts the invariant users buy, for each date given: the partition holds
/// exactly one compacted file with the exact schema, no per-flight file, and
/// exactly the expected rows (each once, identical values).
pub fn assert_compacted(objects: &BTreeMap<String, Dumped>, date: &str, expected: &[Value]) {
    let d = chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").unwrap();
    let prefix = archive_compaction::data::keys::index_prefix(d);
    let in_day: Vec<(&String, &Dumped)> =
        objects.iter().filter(|(k, _)| k.starts_with(&prefix)).collect();
    let compacted: Vec<_> =
        in_day.iter().filter(|(k, _)| k[prefix.len()..].starts_with("compacted-")).collect();
    // Every other index input (per-flight files, other multi-row files such
    // as a legacy migration's) must be gone: only foreign objects stay.
    let per_flight: Vec<_> = in_day
        .iter()
        .filter(|(k, _)| {
            archive_compaction::data::keys::classify_index_key(k).is_input()
                && !k[prefix.len()..].starts_with("compacted-")
        })
        .filter(|(_, d)| d.size > 0)
        .collect();
    if expected.is_empty() {
        assert!(compacted.is_empty(), "{date}: no rows, yet {} compacted file(s)", compacted.len());
    } else {
        assert_eq!(
            compacted.len(),
            1,
            "{date}: expected exactly one compacted file, found {:?}",
            compacted.iter().map(|c| c.0).collect::<Vec<_>>()
        );
    }
    assert!(
        per_flight.is_empty(),
        "{date}: index inputs left beside the compacted file: {:?}",
        per_flight.iter().map(|p| p.0).collect::<Vec<_>>()
    );
    let mut got: Vec<Value> = Vec::new();
    for (key, c) in &compacted {
        assert_eq!(c.error, None, "{key}");
        assert_eq!(c.arrow_schema.as_deref(), Some(ARROW_SCHEMA), "{key}: schema");
        assert_eq!(c.parquet_schema.as_ref(), Some(&parquet_schema()), "{key}: parquet schema");
        got.extend(c.rows.clone().unwrap());
    }
    let mut want = expected.to_vec();
    got.sort_by_key(sort_key);
    want.sort_by_key(sort_key);
    assert_eq!(got.len(), want.len(), "{date}: row count");
    assert_eq!(got, want, "{date}: rows differ");
}

/// Asserts that a run left `store` done: every day of `generated` holds
/// exactly its rows in one compacted file ([`assert_compacted`]), no
/// manifest is left, and the watermark reads `last_date`. `context` starts
/// each failure message. Returns the bucket as read back, for the caller's
/// own checks.
pub fn assert_all_compacted(
    store: &S3Store,
    generated: &Generated,
    last_date: &str,
    context: &str,
) -> BTreeMap<String, Dumped> {
    let after = dump(store, "");
    for (d, rows) in &generated.rows {
        assert_compacted(&after, d, rows);
    }
    assert!(
        !after.keys().any(|k| k.starts_with("_compaction_state/manifests/")),
        "{context}: a manifest is left"
    );
    assert_eq!(
        watermark(&after).expect("watermark written")["last_compacted_date"],
        last_date,
        "{context}: the watermark"
    );
    after
}

/// A fresh bucket (named after `hint`) holding one flight and its index
/// file per writer variant of `archive.py variants`, all on `date`.
/// Returns the store and archive.py's answer: for each variant its index
/// file (`key`), flight object (`flight`), `mergeable`, `column` and `row`.
pub async fn variants_bucket(
    hint: &str,
    seed: u64,
    date: &str,
    variants: &[&str],
) -> (S3Store, Value) {
    let store = bucket(hint).await;
    let v = archive_py(
        "variants",
        &store,
        serde_json::json!({"seed": seed, "date": date, "variants": variants}),
    );
    (store, v)
}

/// The flight uuid a per-flight index key is named after
/// (`index/year=…/{uuid}.parquet`), read off the key itself rather than by
/// the code under test.
pub fn flight_uuid(index_key: &str) -> &str {
    index_key.rsplit('/').next().unwrap().trim_end_matches(".parquet")
}

/// Every object of `store`'s bucket as its key followed by its ETag, in
/// listing order: what a test compares to show the bucket unchanged
/// without reading bodies.
pub async fn object_versions(store: &S3Store) -> Vec<String> {
    store.list("").await.unwrap().into_iter().map(|o| o.key + &o.etag).collect()
}

/// The watermark file as JSON, if present.
pub fn watermark(objects: &BTreeMap<String, Dumped>) -> Option<Value> {
    objects.get("_compaction_state/watermark.json").and_then(|d| d.json.clone())
}

/// The repair range `from` to `to` (`YYYY-MM-DD`), checked.
pub fn range(from: &str, to: &str) -> archive_compaction::protocol::day::DateRange {
    archive_compaction::protocol::day::DateRange::new(
        date(from),
        date(to),
        archive_compaction::protocol::day::RangeOf::Repair,
    )
    .unwrap()
}

pub fn date(s: &str) -> chrono::NaiveDate {
    chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
}

pub fn at(s: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

/// The system clock moved `seconds` ahead: what the lease of a run reads
/// when it starts after an earlier run's lease has lapsed, without waiting
/// for it (only the lease reads the wall clock: `archive_compaction::infra::clock`).
#[derive(Debug)]
pub struct AheadClock(pub i64);

impl archive_compaction::infra::clock::Clock for AheadClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::Utc::now() + chrono::Duration::seconds(self.0)
    }
}

/// The default lease length, `LEASE_SECONDS` (960 s), plus one second.
pub const PAST_A_LEASE: i64 = 961;

/// A run at [`NOW`] whose lease clock is `laps` default leases (961 s
/// each) ahead of the system clock: run `k` of a test that leaves leases
/// behind (a crash) takes over those of runs `0..k` without a real wait,
/// and a loaded machine cannot make a lease lapse under a run, as a 1 s
/// lease with a 1.1 s sleep could.
pub fn options_after_leases(laps: i64) -> archive_compaction::commands::run::RunOptions {
    archive_compaction::commands::run::RunOptions {
        clock: std::sync::Arc::new(AheadClock(laps * PAST_A_LEASE)),
        ..archive_compaction::commands::run::RunOptions::at(at(NOW))
    }
}

/// A fault-injecting proxy (tests/support/faultproxy.py) in front of the S3
/// server; one per call, stopped when the test process exits.
pub struct Proxy {
    pub server: Server,
}

impl Proxy {
    pub fn start() -> Proxy {
        let port = free_port();
        let mut cmd = Command::new(python());
        cmd.arg(root().join("tests/support/faultproxy.py"))
            .arg(port.to_string())
            .arg(s3_port().to_string());
        let process = Supervised::spawn(cmd, "faultproxy.py");
        assert_eq!(process.read_line().trim(), "ready");
        Proxy { server: Server { port, process } }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port)
    }

    fn http(&self, method: &str, path: &str, body: &str) -> String {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.server.port)).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: proxy\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string()
    }

    /// Replaces the proxy's rules (see faultproxy.py).
    pub fn set(&self, rules: Value) {
        self.http("POST", "/__proxy/config", &rules.to_string());
    }

    /// Request counts so far.
    pub fn stats(&self) -> Value {
        serde_json::from_str(&self.http("GET", "/__proxy/stats", "")).unwrap()
    }

    /// A store for `bucket` that goes through the proxy, with fast SDK retries
    /// (same strategy and attempt count as production, 10 ms initial backoff).
    pub fn store(&self, bucket: &S3Store) -> S3Store {
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(archive_compaction::app::https_client())
            .endpoint_url(self.endpoint())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
            .force_path_style(true)
            .retry_config(
                archive_compaction::app::retry_config()
                    .with_initial_backoff(std::time::Duration::from_millis(10)),
            )
            .build();
        S3Store::new(aws_sdk_s3::Client::from_conf(conf), bucket.bucket())
            .with_delete_backoff(std::time::Duration::from_millis(20))
    }
}

/// The nine Home Assistant sensors the Python job's discovery configs made
/// (every statistic but `mismatch_uuids`, which is the count's attributes),
/// in discovery order: what the tests expect of `mqtt::discovery`, written
/// down independently of it.
pub const SENSORS: [&str; 9] = [
    "files_compacted",
    "files_delete_failed",
    "days_compacted",
    "last_compacted_date",
    "mismatch_date",
    "mismatch_uuid_count",
    "mismatch_runs",
    "last_run_at",
    "last_run_status",
];

/// Asserts that every `(name, doc)` is valid against `specs/{schema}`
/// (`tests/support/check_schema.py`: jsonschema with formats checked); the
/// failure names the documents and what is wrong.
pub fn assert_all_valid(schema: &str, docs: &[(&str, Value)]) {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for (i, (name, doc)) in docs.iter().enumerate() {
        let file = format!("{i:02}-{}.json", name.replace(['/', ' '], "_"));
        let p = dir.path().join(file);
        std::fs::write(&p, serde_json::to_vec_pretty(doc).unwrap()).unwrap();
        paths.push(p);
    }
    let out = Command::new(python())
        .arg(root().join("tests/support/check_schema.py"))
        .arg(root().join("specs").join(schema))
        .args(&paths)
        .output()
        .expect("python (run scripts/setup-tools.sh)");
    assert!(
        out.status.success(),
        "{schema}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`assert_all_valid`] for one document.
pub fn assert_valid(schema: &str, doc: &Value) {
    assert_all_valid(schema, &[("doc", doc.clone())]);
}

/// The CLI binary (`CARGO_BIN_EXE_archive-compaction`) against `store`'s
/// bucket on the test S3 server, not yet started: a clean environment (no
/// AWS profile or Lambda variables of the caller's) with the job's settings
/// (`env_for`) and the server's endpoint and test credentials.
pub fn cli_command(store: &S3Store, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_archive-compaction"));
    cmd.args(args)
        .env_clear()
        .envs(env_for(store, &[]))
        .env("AWS_ENDPOINT_URL", endpoint())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1");
    cmd
}

/// The JSON report a CLI run printed on stdout (panics with its stderr
/// when stdout is not one).
pub fn report_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("stdout is not a report ({e}); stderr: {}", String::from_utf8_lossy(&out.stderr))
    })
}

/// Runs `cmd` to its end and asserts it exited 0 (the failure shows its
/// stderr); returns its output.
pub fn output_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{:?} exited {:?}: {}",
        cmd.get_program(),
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
