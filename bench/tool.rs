//! `bench-tool`: the Rust parts of `make bench` (see docs/performance.md).
//!
//! ```text
//! bench-tool proxy  LISTEN_PORT UPSTREAM_PORT [--latency-ms 20]
//! bench-tool upload --dir D --bucket B [--concurrency 64]
//! bench-tool floor  --bucket B --prefix P [--concurrency 64]
//! bench-tool sets   --flights N [--window 200000] [--compacted C] [--limit 524288]
//! ```
//!
//! - `proxy`: an HTTP/1.1 latency proxy in front of a local S3 server. Every
//!   request waits `latency_ms` before it is forwarded (S3's time to first
//!   byte), and is counted by kind. `GET /__proxy/stats` returns the counts,
//!   `POST /__proxy/config` `{"latency_ms": N}` changes the delay (the same
//!   control endpoints as tests/support/faultproxy.py). Tokio, a minimal
//!   HTTP/1.1 server loop (keep-alive, Content-Length or chunked bodies) and
//!   hyper's pooled client upstream: a few microseconds of CPU per request,
//!   so unlike the Python fault proxy it is not the bottleneck at hundreds of
//!   requests in flight.
//!   Prints `ready` when listening and exits when stdin closes.
//! - `upload`: PUTs every file under `--dir` to the bucket, keyed by its path
//!   relative to the directory (the bench's cached archive), `--concurrency`
//!   PUTs at once. Fast enough that moto, not the client, sets the pace.
//! - `floor`: the I/O floor: lists `--prefix`, then GETs every object with
//!   exactly the job's read path ([`S3Store::get_opt`], `buffered(concurrency)`)
//!   and throws the bodies away. Prints JSON: objects, bytes, seconds for the
//!   listing and for the GETs. With `--date`, it also lists the prefix in
//!   key ranges as the job does (`storage::ranges::list_partition`), checks
//!   it equals the page-by-page listing, and reports its seconds
//!   (`ranges_list_seconds`; -1 without `--date`).
//! - `sets`: what a date of `--flights` flights holds of its uuids in the
//!   run, without S3: the run's own code over generated uuids (random
//!   order): the flights' set ([`UuidSetBuilder`], as `Day::list_window`
//!   fills it), the flights of the per-flight files past a window of
//!   `--window`, the parity gate's first look
//!   ([`PartitionListing::flights_not_named`]) and its multi-row batches
//!   (`--compacted` flights named only by compacted files of 50,000 rows,
//!   taken off in batches of `--limit`, as `partition::parity_gate` does),
//!   the parts' grouping ([`Groups::of_holders`] over the (flight, input)
//!   pairs) and one part's membership checks. Prints JSON: seconds per
//!   phase, the sets' bytes on disk and the process's peak RSS (`VmHWM`).
//!   With `--limit` at least the flights, every set stays in memory (the
//!   run before `spill`): under `ulimit -v` that is where it dies.
//!
//! The S3 endpoint and credentials come from the AWS SDK's variables
//! (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...), path-style addressing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use archive_compaction::infra::storage::{S3Store, Store};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

#[derive(Parser)]
#[command(name = "bench-tool")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Latency proxy in front of a local S3 server.
    Proxy {
        listen_port: u16,
        upstream_port: u16,
        /// Delay before each request is forwarded, in milliseconds.
        #[arg(long, default_value_t = 20)]
        latency_ms: u64,
    },
    /// PUT every file under a directory.
    Upload {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        bucket: String,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
    },
    /// The I/O floor: list, then only the GETs.
    Floor {
        #[arg(long)]
        bucket: String,
        #[arg(long)]
        prefix: String,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// The partition's date (YYYY-MM-DD): also list the prefix in key
        /// ranges, as the job does, and report that listing's time.
        #[arg(long)]
        date: Option<chrono::NaiveDate>,
    },
    /// A date's uuid sets as the run holds them, without S3.
    Sets {
        #[arg(long)]
        flights: u64,
        #[arg(long, default_value_t = 200_000)]
        window: u64,
        /// Flights named only by compacted files (the date's earlier parts).
        #[arg(long, default_value_t = 0)]
        compacted: u64,
        /// FLIGHTS_IN_MEMORY.
        #[arg(long, default_value_t = archive_compaction::data::spill::DEFAULT_IN_MEMORY)]
        limit: usize,
    },
}

#[tokio::main]
async fn main() {
    match Cli::parse().cmd {
        Cmd::Proxy { listen_port, upstream_port, latency_ms } => {
            proxy(listen_port, upstream_port, latency_ms).await
        }
        Cmd::Upload { dir, bucket, concurrency } => upload(&dir, &bucket, concurrency).await,
        Cmd::Floor { bucket, prefix, concurrency, date } => {
            floor(&bucket, &prefix, concurrency, date).await
        }
        Cmd::Sets { flights, window, compacted, limit } => sets(flights, window, compacted, limit),
    }
}

/// Flight `i`'s uuid: a fixed mix of `i` (splitmix64, twice), so the
/// flights come in no order and each phase can name the same ones again.
fn flight(i: u64) -> uuid::Uuid {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    uuid::Uuid::from_u64_pair(mix(i), mix(i ^ 0x5555_5555_5555_5555))
}

/// The `VmHWM` (peak resident set) of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (status.lines())
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `bench-tool sets` (see the module docs). Flights `0..compacted` are
/// named only by compacted files, the next `window` by the window's
/// per-flight files, the rest by per-flight files past the window.
fn sets(n: u64, window: u64, compacted: u64, limit: usize) {
    use archive_compaction::data::spill::{SortedSetBuilder, SpillSettings, UuidSetBuilder};
    use archive_compaction::protocol::plan::{BeyondWindow, Groups, PartitionListing};
    const PART_ROWS: u64 = 50_000;
    let spill = SpillSettings { limit };
    let (compacted, window) = (compacted.min(n), window.min(n - compacted.min(n)));
    let mut phases = serde_json::Map::new();
    let mut t = Instant::now();
    let mut lap = |name: &str, t: &mut Instant| {
        phases.insert(name.into(), t.elapsed().as_secs_f64().into());
        *t = Instant::now();
    };
    let mut b = UuidSetBuilder::new(spill);
    (0..n).for_each(|i| b.push(flight(i)).expect("flights"));
    let flights = b.finish().expect("flights");
    lap("flights", &mut t);
    let mut b = UuidSetBuilder::new(spill);
    (compacted + window..n).for_each(|i| b.push(flight(i)).expect("past the window"));
    let listing = PartitionListing {
        per_flight: (compacted..compacted + window)
            .map(|i| (flight(i), Default::default()))
            .collect(),
        beyond_window: BeyondWindow {
            files: (n - compacted - window) as usize,
            bytes: 0,
            flights: b.finish().expect("past the window"),
        },
        ..Default::default()
    };
    lap("past_window", &mut t);
    let mut missing = listing.flights_not_named(&flights, spill).expect("gate");
    assert_eq!(missing.len(), compacted, "the gate's first look");
    let candidates_bytes = missing.disk_bytes();
    lap("gate_first_look", &mut t);
    let mut found = Vec::new();
    for i in 0..compacted {
        found.push(flight(i));
        if found.len() >= limit || i + 1 == compacted {
            let batch =
                archive_compaction::protocol::plan::Flights::from(std::mem::take(&mut found));
            missing = missing.retain(spill, |u| !batch.contains(u)).expect("batch");
        }
    }
    assert!(missing.is_empty(), "every compacted flight found");
    lap("gate_multi_row", &mut t);
    let mut pairs = SortedSetBuilder::<(uuid::Uuid, u32)>::new(spill);
    for i in 0..window {
        pairs.push((flight(compacted + i), i as u32)).expect("pairs");
    }
    let inputs = window + compacted.div_ceil(PART_ROWS);
    for i in 0..compacted {
        pairs.push((flight(i), (window + i / PART_ROWS) as u32)).expect("pairs");
    }
    let pairs = pairs.finish().expect("pairs");
    let groups = Groups::of_holders(inputs as usize, pairs.iter()).expect("groups");
    drop(groups);
    lap("parts_grouping", &mut t);
    let part = window.min(PART_ROWS);
    let held =
        (compacted..compacted + part).filter(|i| flights.contains(&flight(*i)).expect("contains"));
    assert_eq!(held.count() as u64, part);
    lap("part_checks", &mut t);
    let out = serde_json::json!({
        "flights": n, "window": window, "compacted": compacted, "limit": limit,
        "spilled": flights.spilled(),
        "disk_bytes": flights.disk_bytes() + listing.beyond_window.flights.disk_bytes()
            + candidates_bytes + pairs.disk_bytes(),
        "phases_s": phases, "peak_rss_kib": peak_rss_kib(),
    });
    println!("{out}");
}

async fn store(bucket: &str) -> S3Store {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(archive_compaction::app::https_client())
        .retry_config(archive_compaction::app::retry_config())
        .load()
        .await;
    let client = aws_sdk_s3::Client::from_conf(archive_compaction::app::s3_config(&sdk, true));
    S3Store::new(client, bucket)
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

async fn upload(dir: &Path, bucket: &str, concurrency: usize) {
    let s = store(bucket).await;
    let mut files = Vec::new();
    files_under(dir, &mut files);
    files.sort();
    let t0 = Instant::now();
    let n = files.len();
    futures::stream::iter(files.iter().map(|p| {
        let s = &s;
        async move {
            let key = p.strip_prefix(dir).unwrap().to_string_lossy().to_string();
            let body = Bytes::from(std::fs::read(p).unwrap());
            // Overwrite freely: the bench re-uploads a day before each run.
            let mut tries = 0;
            loop {
                match s
                    .client()
                    .put_object()
                    .bucket(s.bucket())
                    .key(&key)
                    .body(body.clone().into())
                    .send()
                    .await
                {
                    Ok(_) => break,
                    Err(e) if tries < 5 => {
                        tries += 1;
                        eprintln!("upload {key}: {e:?}; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => panic!("upload {key}: {e:?}"),
                }
            }
        }
    }))
    .buffer_unordered(concurrency.max(1))
    .collect::<Vec<()>>()
    .await;
    println!("{{\"objects\": {n}, \"seconds\": {:.3}}}", t0.elapsed().as_secs_f64());
}

async fn floor(bucket: &str, prefix: &str, concurrency: usize, date: Option<chrono::NaiveDate>) {
    let s = store(bucket).await;
    let t0 = Instant::now();
    let objects = s.list(prefix).await.expect("list");
    let listed = t0.elapsed().as_secs_f64();
    let mut ranges_listed = -1.0;
    if let Some(d) = date {
        let t = Instant::now();
        let again =
            archive_compaction::infra::storage::ranges::list_partition(&s, prefix, d, |o| {
                Ok(Some(o))
            })
            .await
            .expect("list in ranges");
        ranges_listed = t.elapsed().as_secs_f64();
        assert_eq!(again, objects, "the listing in ranges differs from the sequential one");
    }
    let t1 = Instant::now();
    let mut bytes = 0u64;
    let mut gets = futures::stream::iter(objects.iter().map(|o| s.get_opt(&o.key)))
        .buffered(concurrency.max(1));
    while let Some(r) = gets.next().await {
        if let Some(f) = r.expect("get") {
            bytes += f.body.len() as u64;
        }
    }
    println!(
        "{{\"objects\": {}, \"bytes\": {bytes}, \"list_seconds\": {listed:.3}, \"ranges_list_seconds\": {ranges_listed:.3}, \"get_seconds\": {:.3}}}",
        objects.len(),
        t1.elapsed().as_secs_f64()
    );
}

#[derive(Default)]
struct ProxyState {
    latency_ms: AtomicU64,
    requests: AtomicU64,
    by_kind: Mutex<BTreeMap<&'static str, u64>>,
}

fn kind(method: &hyper::Method, path: &str, query: &str) -> &'static str {
    if query.split('&').any(|q| q == "delete" || q == "delete=") && method == hyper::Method::POST {
        return "DeleteObjects";
    }
    if method == hyper::Method::GET
        && (query.contains("list-type") || path.matches('/').count() <= 1)
    {
        return "ListObjectsV2";
    }
    match *method {
        hyper::Method::GET => "GetObject",
        hyper::Method::PUT => "PutObject",
        hyper::Method::HEAD => "HeadObject",
        hyper::Method::DELETE => "DeleteObject",
        hyper::Method::POST => "POST",
        _ => "other",
    }
}

type Upstream = Client<HttpConnector, Full<Bytes>>;

/// One response to write back: status, headers, body.
struct Reply {
    status: StatusCode,
    headers: Vec<(String, String)>,
    body: Bytes,
}

fn reply(status: StatusCode, body: String) -> Reply {
    Reply {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: Bytes::from(body),
    }
}

async fn handle(
    method: hyper::Method,
    target: &str,
    headers: Vec<(String, String)>,
    body: Bytes,
    state: &ProxyState,
    client: &Upstream,
    upstream: u16,
) -> Reply {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path == "/__proxy/stats" {
        let by_kind = state.by_kind.lock().unwrap().clone();
        let v = serde_json::json!({
            "requests": state.requests.load(Ordering::Relaxed),
            "by_kind": by_kind,
            "latency_ms": state.latency_ms.load(Ordering::Relaxed),
        });
        return reply(StatusCode::OK, v.to_string());
    }
    if path == "/__proxy/config" {
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let ms = v.get("latency_ms").and_then(|x| x.as_u64()).unwrap_or(0);
        state.latency_ms.store(ms, Ordering::Relaxed);
        return reply(StatusCode::OK, "{}".into());
    }
    let k = kind(&method, path, query);
    state.requests.fetch_add(1, Ordering::Relaxed);
    *state.by_kind.lock().unwrap().entry(k).or_default() += 1;
    let delay = state.latency_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let mut req =
        Request::builder().method(method).uri(format!("http://127.0.0.1:{upstream}{target}"));
    // The client's Host header goes upstream unchanged: it is part of the
    // SigV4 signature, which servers that check signatures (s3s-fs) verify.
    for (h, v) in &headers {
        if !matches!(
            h.as_str(),
            "connection" | "content-length" | "transfer-encoding" | "keep-alive"
        ) {
            req = req.header(h, v);
        }
    }
    let resp = match req.body(Full::new(body)) {
        Ok(r) => client.request(r).await,
        Err(e) => return reply(StatusCode::BAD_REQUEST, format!("bad request: {e}")),
    };
    let resp = match resp {
        Ok(r) => r,
        Err(e) => return reply(StatusCode::BAD_GATEWAY, format!("upstream: {e}")),
    };
    let (parts, b) = resp.into_parts();
    let body = match b.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => return reply(StatusCode::BAD_GATEWAY, format!("upstream body: {e}")),
    };
    Reply {
        status: parts.status,
        headers: parts
            .headers
            .iter()
            .filter(|(h, _)| {
                !matches!(h.as_str(), "connection" | "transfer-encoding" | "keep-alive")
            })
            .map(|(h, v)| (h.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body,
    }
}

/// A minimal HTTP/1.1 server loop for one client connection (keep-alive;
/// bodies by Content-Length or chunked), forwarding with hyper's client.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    state: Arc<ProxyState>,
    client: Upstream,
    upstream: u16,
) -> std::io::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    loop {
        let mut line = String::new();
        if rd.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
            return Ok(());
        };
        let method: hyper::Method = method.parse().unwrap_or(hyper::Method::GET);
        let target = target.to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if rd.read_line(&mut h).await? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let get = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                let mut size = String::new();
                rd.read_line(&mut size).await?;
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                    .unwrap_or(0);
                if n == 0 {
                    // trailers, then the empty line
                    loop {
                        let mut t = String::new();
                        if rd.read_line(&mut t).await? == 0 || t.trim().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                let at = body.len();
                body.resize(at + n, 0);
                rd.read_exact(&mut body[at..]).await?;
                let mut crlf = String::new();
                rd.read_line(&mut crlf).await?;
            }
        } else if let Some(n) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body.resize(n, 0);
            rd.read_exact(&mut body).await?;
        }
        let close = get("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let is_head = method == hyper::Method::HEAD;
        let r =
            handle(method, &target, headers, Bytes::from(body), &state, &client, upstream).await;
        let mut out = format!(
            "HTTP/1.1 {} {}\r\n",
            r.status.as_u16(),
            r.status.canonical_reason().unwrap_or("")
        );
        for (h, v) in &r.headers {
            if h != "content-length" {
                out.push_str(&format!("{h}: {v}\r\n"));
            }
        }
        if is_head {
            // A HEAD answer carries the object's length, not its own.
            if let Some((_, v)) = r.headers.iter().find(|(h, _)| h == "content-length") {
                out.push_str(&format!("content-length: {v}\r\n"));
            }
        } else {
            out.push_str(&format!("content-length: {}\r\n", r.body.len()));
        }
        out.push_str("\r\n");
        wr.write_all(out.as_bytes()).await?;
        if !is_head {
            wr.write_all(&r.body).await?;
        }
        if close {
            return Ok(());
        }
    }
}

async fn proxy(listen_port: u16, upstream: u16, latency_ms: u64) {
    let state = Arc::new(ProxyState::default());
    state.latency_ms.store(latency_ms, Ordering::Relaxed);
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Upstream =
        Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1024).build(connector);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", listen_port)).await.expect("bind");
    println!("ready");
    // Stop when stdin closes (the bench driver holds it open), like serve.py.
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(stream, state.clone(), client.clone(), upstream));
    }
}
