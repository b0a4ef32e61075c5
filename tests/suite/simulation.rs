//! Deterministic simulation of the whole job on [`MemoryStore`] and a
//! simulated clock.
//!
//! A seed picks everything in a schedule: the archive (3 days of per-flight
//! index files and flight objects), the sweep setting, the store call at
//! which each invocation is cut off (its run future dropped, as when the
//! process dies), transient and permanent errors before a call, errors after
//! a call (the request took effect, the response was lost), writes whose
//! answer is lost and whose retry fails its own condition
//! ([`MemoryStore::lose_answers`], as the SDK sends a write again), per-key
//! AccessDenied inside DeleteObjects, a second invocation interleaved while
//! the first is paused past its lease expiry (the simulated clock moves past
//! `LEASE_SECONDS`), and the archive writer stitching (rewriting) and adding
//! per-flight index files between calls. Some days start as real buckets
//! have them: backfilled by the legacy migration (one multi-row
//! `legacy-migration.parquet`, rows shuffled) or compacted by the Python job
//! (`compacted-py.parquet`). In about one schedule in ten a manifest that
//! parses but names what its commit did not write (another commit's output,
//! its own output as its input, the watermark as its output) is planted
//! before the first invocation: it must end in `quarantine/` with nothing
//! deleted on its word; the harness then plays the operator (deletes it)
//! and the clean runs go on.
//!
//! Two more holes are planted, each in about one schedule in
//! ten: a manifest that passes every ownership rule beside an output that
//! verifies (named after its job, its job id in the metadata, size and
//! SHA-256 right, holding a day's per-flight rows, as after a crash between
//! the PUT and the deletes) but that lists one more input, a new flight's
//! per-flight file, that the output does not hold: recovery must delete the
//! proven inputs, keep that one and quarantine the manifest; and a
//! per-flight file the merge skips (a torn, unreadable body), which must be
//! left in place. The suite is built with its failpoints, and the commit is made to
//! list that skipped file among its inputs
//! (`commit::read-lists-skipped-input`): the commit's proof must keep it
//! (the manifest stays, recovery quarantines it, the harness deletes it as
//! an operator would); and before the schedules, each of the two proofs is
//! switched off in turn (`commit::proof-off`, `recovery::proof-off`) and the
//! simulation must then fail within 500 schedules, which shows that the
//! holes are planted and that the checks are what closes them.
//!
//! After each schedule the faults stop, clean runs go on until one is a
//! Success (plus one more, whose sweep folds any straggler), and then the
//! invariants are checked:
//!
//! - every flight is in exactly one row of its day's one compacted file, at
//!   its newest version, and no per-flight file is left but the skipped
//!   ones, each still there in the version written (decoded with the
//!   crate's own reader; the pyarrow read-back is in the server tests);
//! - no manifest and nothing quarantined is left, and the watermark is at
//!   the cutoff;
//! - nothing under `index/` was deleted in a version that was never read;
//! - checked at every step: a manifest is deleted only when its output is
//!   missing (nothing was committed) or every input is gone or newer in the
//!   version it was read (the commit protocol's rule for dropping one);
//! - checked after every store call ([`check_outputs`]): no compacted
//!   output of the job appears without a live manifest naming it, and none
//!   outlives its manifest while an input of it is still there in the
//!   version read.
//!
//! Some seeds (one in 16 for each kind, one in 128 for the costly
//! `--date` runs) then run one more kind of schedule on a world of their
//! own ([`kinds`]), each reaching what the scheduled walk does not:
//! `--date` and repair-range runs cut at one call after another, each
//! followed by the walk; a write whose answer is held past the lease's
//! expiry while another invocation takes over; a quarantined manifest
//! kept for several runs (its date blocked and reported, by the run and by
//! `status`). Their days hold multi-row files with a flight twice and rows
//! whose `s3_key` is null or empty, and per-flight files with such a row.
//!
//! `SIM_SEEDS=N` runs N schedules (default 2,000); `SIM_SEED=S` replays one;
//! a failing schedule prints its seed and the command that replays it.
//! Schedules run on two threads, each schedule on its own current-thread
//! runtime, so a seed always gives the same schedule.
//!
//! Two pauses are not simulated: a write delayed past the lease expiry after
//! its fence check and before it takes effect (a lease without
//! storage-side fencing cannot exclude it; `LEASE_SECONDS` above the Lambda
//! timeout bounds it), so the interleaved invocation pauses the first only
//! before a read or, in [`kinds`], after a write took effect; and the wall
//! clock of the deadline (`RunOptions::deadline` is `None` here).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use archive_compaction::commands::run::{self, RunOptions};
use archive_compaction::data::config::Config;
use archive_compaction::data::keys::{
    self, IndexKey, MANIFESTS_ROOT, QUARANTINE_ROOT, WATERMARK_KEY, flights_prefix, index_prefix,
};
use archive_compaction::data::report::{RunReport, Status};
use archive_compaction::data::state::Manifest;
use archive_compaction::infra::clock::ManualClock;
use archive_compaction::infra::error::{Error, Result};
use archive_compaction::infra::storage::{
    DeleteFailure, Fetched, Head, ListPage, MemoryStore, ObjectMeta, PutRequest, Store,
};
use arrow_array::{Array, BooleanArray, RecordBatch, StringArray, TimestampMicrosecondArray};
use bytes::Bytes;
use chrono::{DateTime, NaiveDate, Utc};
use tokio::sync::Notify;
use uuid::Uuid;

/// What the schedules did, summed (printed at the end, so a change that
/// stops faults from firing shows).
static CUTS: AtomicU64 = AtomicU64::new(0);
static PAUSES: AtomicU64 = AtomicU64::new(0);
static ERRORS: AtomicU64 = AtomicU64::new(0);
static DENIED: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);
static LOST: AtomicU64 = AtomicU64::new(0);
static PLANTED: AtomicU64 = AtomicU64::new(0);
static UNPROVEN: AtomicU64 = AtomicU64::new(0);
static UNMERGEABLE: AtomicU64 = AtomicU64::new(0);

/// splitmix64: small, seedable, the same on every platform.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

const DATES: [&str; 3] = ["2026-07-01", "2026-07-02", "2026-07-03"];

fn date(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
}

fn now0() -> DateTime<Utc> {
    // Cutoff with LAG_DAYS=2: 2026-07-03.
    DateTime::parse_from_rfc3339("2026-07-05T03:00:00Z").unwrap().to_utc()
}

/// One flight's index file as the writer writes it: one row, `ident` = `v{version}`.
fn index_file(d: NaiveDate, flight: Uuid, version: u32) -> Bytes {
    // Schedules share flights (ids come from a per-schedule counter): encode once.
    static CACHE: Mutex<BTreeMap<(NaiveDate, Uuid, u32), Bytes>> = Mutex::new(BTreeMap::new());
    if let Some(b) = CACHE.lock().unwrap().get(&(d, flight, version)) {
        return b.clone();
    }
    let b = encode_index_file(d, flight, version);
    CACHE.lock().unwrap().insert((d, flight, version), b.clone());
    b
}

fn encode_index_file(d: NaiveDate, flight: Uuid, version: u32) -> Bytes {
    archive_compaction::data::merge::encode(&[index_row(d, flight, version)], 1024).unwrap().into()
}

/// A multi-row index file (a legacy migration's, the Python job's compacted
/// file): the given flights' rows, in the order given.
fn multi_row_file(d: NaiveDate, rows: &[(Uuid, u32)]) -> Bytes {
    let batches: Vec<RecordBatch> = rows.iter().map(|(u, v)| index_row(d, *u, *v)).collect();
    let one = arrow_select::concat::concat_batches(
        &archive_compaction::data::merge::target_schema(),
        &batches,
    )
    .unwrap();
    archive_compaction::data::merge::encode(&[one], 1024).unwrap().into()
}

fn index_row(d: NaiveDate, flight: Uuid, version: u32) -> RecordBatch {
    let s3_key = format!("{}{flight}.json.gz", flights_prefix(d));
    let t = d.and_hms_opt(12, 0, 0).unwrap().and_utc().timestamp_micros();
    let s = |v: &str| Arc::new(StringArray::from(vec![Some(v.to_string())])) as Arc<dyn Array>;
    let ts = |v: i64| {
        Arc::new(TimestampMicrosecondArray::from(vec![Some(v)]).with_timezone("UTC"))
            as Arc<dyn Array>
    };
    RecordBatch::try_new(
        archive_compaction::data::merge::target_schema(),
        vec![
            s("4b1805"),
            s("HB-JNA"),
            s("B77W"),
            Arc::new(BooleanArray::from(vec![false])),
            s("SWR"),
            s(&format!("v{version}")),
            ts(t),
            ts(t + 3_600_000_000),
            s(&s3_key),
        ],
    )
    .unwrap()
}

/// What the archive should end up holding: per date, flight → newest version.
#[derive(Debug, Default, Clone)]
struct Archive {
    flights: BTreeMap<NaiveDate, BTreeMap<Uuid, u32>>,
    next_flight: u128,
    /// Per-flight files the merge skips (unreadable), by key: their ETag.
    /// Their flights are not in `flights`; the files must stay as written.
    unmergeable: BTreeMap<String, String>,
    /// Flights the writer leaves alone (a planted manifest's extra input).
    pinned: BTreeSet<Uuid>,
    /// Per date, the `ident` of each row without a flight uuid (a null or
    /// empty `s3_key`) that a multi-row file holds: kept, once each.
    keyless: BTreeMap<NaiveDate, Vec<String>>,
}

impl Archive {
    fn new_flight(&mut self, mem: &MemoryStore, d: NaiveDate) -> Uuid {
        let u = self.next_uuid(d);
        self.write(mem, d, u, 1);
        mem.put_now(&format!("{}{u}.json.gz", flights_prefix(d)), "{}".into());
        u
    }

    /// UUIDv7-shaped, deterministic: time part from the date (a minute per
    /// flight, so listings can be cut by time), then a counter.
    fn next_uuid(&mut self, d: NaiveDate) -> Uuid {
        self.next_flight += 1;
        let ms = d.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp_millis() as u128
            + (self.next_flight % 1440) * 60_000;
        Uuid::from_u128((ms << 80) | (0x7u128 << 76) | (0x8u128 << 60) | self.next_flight)
    }

    /// A per-flight file the merge cannot read (a torn body) whose flight
    /// is not under `flights/` (an orphan row): the merge skips it, and it
    /// must stay in place, whatever a manifest says. (With its flight
    /// object the date would fail parity until the file is rewritten,
    /// `partition::unread_rows`, and no commit would ever list it.)
    fn unmergeable_flight(&mut self, mem: &MemoryStore, d: NaiveDate) -> String {
        let u = self.next_uuid(d);
        let key = format!("{}{u}.parquet", index_prefix(d));
        let etag = mem.put_now(&key, Bytes::from_static(b"PAR1 torn by the writer"));
        self.unmergeable.insert(key.clone(), etag);
        UNMERGEABLE.fetch_add(1, Ordering::Relaxed);
        key
    }

    /// Moves a day's per-flight files into one multi-row file named `name`
    /// (rows shuffled): a legacy migration's backfill, or the Python job's
    /// compaction (`compacted-py.parquet`).
    fn fold_into(&mut self, mem: &MemoryStore, d: NaiveDate, name: &str, rng: &mut Rng) {
        let mut rows: Vec<(Uuid, u32)> = self
            .flights
            .get(&d)
            .map(|m| m.iter().map(|(u, v)| (*u, *v)).collect())
            .unwrap_or_default();
        for i in (1..rows.len()).rev() {
            rows.swap(i, rng.below(i as u64 + 1) as usize);
        }
        mem.put_now(&format!("{}{name}", index_prefix(d)), multi_row_file(d, &rows));
        for (u, _) in &rows {
            mem.remove_now(&format!("{}{u}.parquet", index_prefix(d)));
        }
    }

    fn write(&mut self, mem: &MemoryStore, d: NaiveDate, u: Uuid, version: u32) {
        mem.put_now(&format!("{}{u}.parquet", index_prefix(d)), index_file(d, u, version));
        self.flights.entry(d).or_default().insert(u, version);
    }

    /// Stitch an existing flight (a new version of its index file) or add one.
    fn step(&mut self, mem: &MemoryStore, rng: &mut Rng) {
        let d = date(DATES[rng.below(DATES.len() as u64) as usize]);
        let day: Vec<(Uuid, u32)> = self
            .flights
            .get(&d)
            .map(|m| {
                m.iter().filter(|(u, _)| !self.pinned.contains(u)).map(|(u, v)| (*u, *v)).collect()
            })
            .unwrap_or_default();
        if day.is_empty() || rng.chance(400) {
            self.new_flight(mem, d);
        } else {
            let (u, v) = day[rng.below(day.len() as u64) as usize];
            self.write(mem, d, u, v + 1);
        }
    }
}

/// What one invocation's store does to the calls going through it.
#[derive(Debug, Default)]
struct Faults {
    /// Call number (1-based) at which the invocation is cut off.
    cut_at: Option<u64>,
    /// Call number at which the invocation is paused (before a read).
    pause_at: Option<u64>,
    /// Per mille of calls failing before / after they take effect.
    error_before: u64,
    error_after: u64,
    /// Per mille of DeleteObjects keys refused with AccessDenied.
    deny_key: u64,
    /// Per mille of writes applied whose answer is lost: the SDK's retry's
    /// answer (412 for a conditional write) is returned.
    lose_answer: u64,
    /// Per mille of calls before which the archive writer acts.
    writer: u64,
}

#[derive(Debug)]
struct World {
    mem: MemoryStore,
    clock: ManualClock,
    archive: Mutex<Archive>,
    /// (key, ETag) of every version the job read.
    reads: Mutex<BTreeSet<(String, String)>>,
    /// Protocol violations seen at a step.
    violations: Mutex<Vec<String>>,
    /// DeleteObjects requests a commit sends at once.
    batches_in_flight: usize,
    /// Compacted outputs seen, for the check after every call
    /// ([`check_outputs`]).
    outputs: Mutex<OutputsSeen>,
    /// `PART_FILES` of every run in this world: 2 or 3 in some (a date is
    /// then committed in parts, several compacted files), else the default.
    part_files: Option<u64>,
}

/// The store an invocation sees: the world's [`MemoryStore`] behind a fault plan.
#[derive(Debug, Clone)]
struct SimStore {
    world: Arc<World>,
    ctl: Arc<Ctl>,
}

#[derive(Debug)]
struct Ctl {
    faults: Faults,
    rng: Mutex<Rng>,
    calls: AtomicU64,
    cut: AtomicBool,
    pause_done: AtomicBool,
    cut_signal: Notify,
    paused: Notify,
    resume: Notify,
}

enum Gate {
    Go,
    Fail(Error),
}

impl SimStore {
    fn new(world: &Arc<World>, faults: Faults, seed: u64) -> SimStore {
        SimStore {
            world: world.clone(),
            ctl: Arc::new(Ctl {
                faults,
                rng: Mutex::new(Rng(seed)),
                calls: AtomicU64::new(0),
                cut: AtomicBool::new(false),
                pause_done: AtomicBool::new(false),
                cut_signal: Notify::new(),
                paused: Notify::new(),
                resume: Notify::new(),
            }),
        }
    }

    fn err(&self, op: &'static str, key: &str, transient: bool) -> Error {
        Error::S3 {
            op,
            bucket: "sim".into(),
            key: key.to_string(),
            code: if transient { "SlowDown" } else { "AccessDenied" }.into(),
            message: "injected by the simulation".into(),
            transient,
        }
    }

    /// Before every call: time passes, the writer may act, the call may be
    /// the cut-off or the pause, or fail before it reaches the store.
    async fn before(&self, op: &'static str, key: &str, read: bool) -> Gate {
        if self.ctl.cut.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let n = self.ctl.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let f = &self.ctl.faults;
        let (writer, fail, transient, ms) = {
            let mut rng = self.ctl.rng.lock().unwrap();
            let writer = rng.chance(f.writer);
            let fail = rng.chance(f.error_before);
            (writer, fail, rng.chance(700), 1 + rng.below(40))
        };
        self.world.clock.advance(Duration::from_millis(ms));
        if writer {
            WRITES.fetch_add(1, Ordering::Relaxed);
            let mut rng = self.ctl.rng.lock().unwrap().clone();
            self.world.archive.lock().unwrap().step(&self.world.mem, &mut rng);
            *self.ctl.rng.lock().unwrap() = rng;
        }
        if f.cut_at == Some(n) {
            CUTS.fetch_add(1, Ordering::Relaxed);
            self.ctl.cut.store(true, Ordering::SeqCst);
            self.ctl.cut_signal.notify_one();
            std::future::pending::<()>().await;
        }
        if read
            && f.pause_at.is_some_and(|p| n >= p)
            && !self.ctl.pause_done.swap(true, Ordering::SeqCst)
        {
            PAUSES.fetch_add(1, Ordering::Relaxed);
            self.ctl.paused.notify_one();
            self.ctl.resume.notified().await;
        }
        if fail {
            ERRORS.fetch_add(1, Ordering::Relaxed);
            return Gate::Fail(self.err(op, key, transient));
        }
        Gate::Go
    }

    fn after<T>(&self, op: &'static str, key: &str, r: Result<T>) -> Result<T> {
        check_outputs(&self.world);
        let lost = self.ctl.rng.lock().unwrap().chance(self.ctl.faults.error_after);
        match r {
            Ok(_) if lost => {
                ERRORS.fetch_add(1, Ordering::Relaxed);
                Err(self.err(op, key, true))
            }
            r => r,
        }
    }

    fn record_read(&self, key: &str, etag: &str) {
        self.world.reads.lock().unwrap().insert((key.to_string(), etag.to_string()));
    }

    /// The rule for dropping a manifest, checked as it is dropped.
    fn check_manifest_drop(&self, key: &str) {
        let snapshot = self.world.mem.snapshot();
        let Some((body, _)) = snapshot.get(key) else {
            return;
        };
        let Ok(m) = serde_json::from_slice::<Manifest>(body) else {
            return;
        };
        // Moved aside (quarantined), not dropped: nothing was done on its word.
        if snapshot.contains_key(&key.replacen(MANIFESTS_ROOT, QUARANTINE_ROOT, 1)) {
            return;
        }
        let committed = match &m.output {
            None => true,
            Some(o) => snapshot.contains_key(&o.key),
        };
        if !committed {
            return;
        }
        for i in &m.inputs {
            if snapshot.get(&i.key).is_some_and(|(_, e)| *e == i.etag) {
                self.world.violations.lock().unwrap().push(format!(
                    "manifest {key} dropped while its input {} is still there in the version read",
                    i.key
                ));
            }
        }
    }
}

impl Store for SimStore {
    fn bucket(&self) -> &str {
        "sim"
    }

    fn delete_batch_size(&self) -> usize {
        self.world.mem.delete_batch_size()
    }

    fn delete_batches_in_flight(&self) -> usize {
        self.world.batches_in_flight
    }

    fn list_page_size(&self) -> usize {
        self.world.mem.list_page_size()
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        if let Gate::Fail(e) = self.before("ListObjectsV2", prefix, true).await {
            return Err(e);
        }
        let r = self.world.mem.list(prefix).await;
        self.after("ListObjectsV2", prefix, r)
    }

    async fn list_prefixes(&self, prefix: &str) -> Result<Vec<String>> {
        if let Gate::Fail(e) = self.before("ListObjectsV2", prefix, true).await {
            return Err(e);
        }
        let r = self.world.mem.list_prefixes(prefix).await;
        self.after("ListObjectsV2", prefix, r)
    }

    async fn list_page(&self, prefix: &str, start_after: Option<&str>) -> Result<ListPage> {
        if let Gate::Fail(e) = self.before("ListObjectsV2", prefix, true).await {
            return Err(e);
        }
        let r = self.world.mem.list_page(prefix, start_after).await;
        self.after("ListObjectsV2", prefix, r)
    }

    async fn get(&self, key: &str) -> Result<Fetched> {
        if let Gate::Fail(e) = self.before("GetObject", key, true).await {
            return Err(e);
        }
        let r = self.world.mem.get(key).await;
        if let Ok(f) = &r {
            self.record_read(key, &f.etag);
        }
        self.after("GetObject", key, r)
    }

    async fn head(&self, key: &str) -> Result<Option<Head>> {
        if let Gate::Fail(e) = self.before("HeadObject", key, true).await {
            return Err(e);
        }
        let r = self.world.mem.head(key).await;
        self.after("HeadObject", key, r)
    }

    async fn put_object(&self, key: &str, body: Bytes, request: PutRequest) -> Result<String> {
        if let Gate::Fail(e) = self.before("PutObject", key, false).await {
            return Err(e);
        }
        let lose = self.ctl.rng.lock().unwrap().chance(self.ctl.faults.lose_answer);
        let r = if lose {
            LOST.fetch_add(1, Ordering::Relaxed);
            self.world.mem.lose_answers().put_object(key, body, request).await
        } else {
            self.world.mem.put_object(key, body, request).await
        };
        self.after("PutObject", key, r)
    }

    async fn delete(&self, key: &str, if_match: Option<&str>) -> Result<()> {
        if let Gate::Fail(e) = self.before("DeleteObject", key, false).await {
            return Err(e);
        }
        if key.starts_with(MANIFESTS_ROOT) {
            self.check_manifest_drop(key);
        }
        let r = self.world.mem.delete(key, if_match).await;
        self.after("DeleteObject", key, r)
    }

    async fn delete_batch(&self, batch: &[(String, String)]) -> Result<Vec<DeleteFailure>> {
        let first = batch.first().map(|b| b.0.clone()).unwrap_or_default();
        if let Gate::Fail(e) = self.before("DeleteObjects", &first, false).await {
            return Err(e);
        }
        let (mut denied, mut pass) = (Vec::new(), Vec::new());
        {
            let mut rng = self.ctl.rng.lock().unwrap();
            for b in batch {
                if rng.chance(self.ctl.faults.deny_key) {
                    DENIED.fetch_add(1, Ordering::Relaxed);
                    denied.push(DeleteFailure {
                        key: b.0.clone(),
                        code: "AccessDenied".into(),
                        message: "injected by the simulation".into(),
                    });
                } else {
                    pass.push(b.clone());
                }
            }
        }
        let r = self.world.mem.delete_batch(&pass).await.map(|mut f| {
            f.extend(denied);
            f
        });
        self.after("DeleteObjects", &first, r)
    }
}

fn config(world: &World, sweep_days: u32) -> Config {
    let parts = world.part_files.map(|n| ("PART_FILES", n.to_string()));
    let env: HashMap<String, String> = [
        ("S3_BUCKET", "sim".to_string()),
        ("METRICS_ENABLED", "false".into()),
        ("LOG_LEVEL", "error".into()),
        ("READ_CONCURRENCY", "4".into()),
        ("SWEEP_DAYS", sweep_days.to_string()),
    ]
    .into_iter()
    .chain(parts)
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Config::from_map(&env).unwrap()
}

fn opts(world: &World, now: DateTime<Utc>, n: u64) -> RunOptions {
    let mut o = RunOptions::at(now);
    o.invocation_id = format!("sim-{n}");
    o.event_id = Some(format!("event-{n}"));
    o.clock = Arc::new(world.clock.clone());
    o
}

/// Runs one invocation; `None` when it was cut off (its future dropped).
async fn invoke(store: &SimStore, config: &Config, opts: &RunOptions) -> Option<RunReport> {
    tokio::select! {
        biased;
        r = run::run(store, config, opts) => Some(r),
        _ = store.ctl.cut_signal.notified() => None,
    }
}

/// Invocation A paused at a read, the clock moved `gap` on, invocation B run
/// whole, then A resumed (or cut).
async fn interleaved(
    a: &SimStore,
    b: &SimStore,
    config: &Config,
    oa: &RunOptions,
    ob: &RunOptions,
    world: &World,
    gap: Duration,
) {
    let fut = run::run(a, config, oa);
    tokio::pin!(fut);
    tokio::select! {
        biased;
        _ = &mut fut => return,
        _ = a.ctl.cut_signal.notified() => return,
        _ = a.ctl.paused.notified() => {}
    }
    world.clock.advance(gap);
    invoke(b, config, ob).await;
    a.ctl.resume.notify_one();
    tokio::select! {
        biased;
        _ = &mut fut => {}
        _ = a.ctl.cut_signal.notified() => {}
    }
}

/// One schedule; `Err` says which invariant broke.
async fn schedule(seed: u64) -> std::result::Result<(), String> {
    let mut rng = Rng(seed);
    let clock = ManualClock::new(now0());
    // Odd seeds: a bucket with SSE-KMS default encryption, whose ETags are
    // not the MD5 of the body (from the seed, not the generator, so that the
    // rest of a schedule is the same either way).
    let mem = if seed % 2 == 1 {
        MemoryStore::sse_kms("sim", Arc::new(clock.clone()))
    } else {
        MemoryStore::with_clock("sim", Arc::new(clock.clone()))
    };
    let mem = mem
        .with_delete_batch_size(1 + rng.below(3) as usize)
        // Pages of 1 to 3 keys, or S3's 1,000: partitions of a few files
        // then list in several pages and in concurrent key ranges.
        .with_list_page_size([1, 2, 3, 1000][rng.below(4) as usize]);
    let world = Arc::new(World {
        mem: mem.clone(),
        clock: clock.clone(),
        archive: Mutex::new(Archive::default()),
        reads: Mutex::new(BTreeSet::new()),
        violations: Mutex::new(Vec::new()),
        batches_in_flight: 1 + rng.below(3) as usize,
        outputs: Mutex::default(),
        part_files: rng.chance(300).then(|| 2 + rng.below(2)),
    });
    {
        let mut a = world.archive.lock().unwrap();
        for d in DATES {
            for _ in 0..1 + rng.below(4) {
                a.new_flight(&mem, date(d));
            }
            // Days as real buckets have them: backfilled by the legacy
            // migration (one multi-row file), or compacted by the Python job.
            match rng.below(8) {
                0 => a.fold_into(&mem, date(d), "legacy-migration.parquet", &mut rng),
                1 => a.fold_into(&mem, date(d), "compacted-py.parquet", &mut rng),
                _ => {}
            }
        }
        // A per-flight file the merge skips; through a failpoint
        // the commit is made to list it among its inputs.
        if rng.chance(100) {
            let d = date(DATES[rng.below(DATES.len() as u64) as usize]);
            a.unmergeable_flight(&mem, d);
        }
    }
    // Manifests that must end in quarantine/ (the harness then deletes
    // them as an operator would).
    let mut planted = Vec::new();
    // A manifest that parses but names what its commit did not write (a
    // restored backup, a hand edit): recovery must quarantine it and delete
    // nothing on its word.
    if rng.chance(100) {
        planted.push(plant_wrong_manifest(&mem, &mut rng));
    }
    // A manifest beside a verified output that lists one input more than
    // the output holds: that input must not be deleted.
    if rng.chance(100) {
        planted.push(plant_unproven_manifest(&world, &mut rng).await);
    }
    // A commit may leave a manifest listing a skipped input (the failpoint
    // build): recovery quarantines it, the operator deletes it.
    let holes = !planted.is_empty() || !world.archive.lock().unwrap().unmergeable.is_empty();
    // The sweep on (covering every date) or off; with it off the writer is
    // quiet: a file landing in a compacted day is, by design, the sweep's.
    let sweep = if rng.chance(750) { 3 } else { 0 };
    let config = config(&world, sweep);
    let lease = config.lease;
    let mut n = 0;
    let invocations = 1 + rng.below(4);
    for _ in 0..invocations {
        n += 1;
        let faults = |rng: &mut Rng| Faults {
            cut_at: rng.chance(700).then(|| 1 + rng.below(60)),
            pause_at: None,
            error_before: [0, 5, 20, 60][rng.below(4) as usize],
            error_after: [0, 5, 20][rng.below(3) as usize],
            deny_key: [0, 0, 50, 300][rng.below(4) as usize],
            lose_answer: [0, 50, 200][rng.below(3) as usize],
            writer: if sweep > 0 { [0, 30, 100][rng.below(3) as usize] } else { 0 },
        };
        let mut fa = faults(&mut rng);
        if rng.chance(250) {
            // A second invocation through the first's lease expiry (or, now
            // and then, before it: then B finds the lease held).
            fa.pause_at = Some(1 + rng.below(50));
            let a = SimStore::new(&world, fa, rng.next());
            n += 1;
            let b = SimStore::new(&world, faults(&mut rng), rng.next());
            let gap = if rng.chance(800) {
                lease + Duration::from_secs(1 + rng.below(120))
            } else {
                lease / 4
            };
            let (oa, ob) = (opts(&world, now0(), n - 1), opts(&world, now0(), n));
            interleaved(&a, &b, &config, &oa, &ob, &world, gap).await;
        } else {
            let s = SimStore::new(&world, fa, rng.next());
            if invoke(&s, &config, &opts(&world, now0(), n)).await.is_none() {
                // Died: sometimes the next invocation comes before the lease lapses.
                if rng.chance(700) {
                    clock.advance(lease + Duration::from_secs(1));
                }
            }
        }
        clock.advance(Duration::from_secs(rng.below(600)));
    }
    // Clean runs: no faults, no writer, lease lapsed.
    clock.advance(lease + Duration::from_secs(1));
    let mut last = None;
    for _ in 0..6 {
        n += 1;
        let s = SimStore::new(&world, Faults::default(), 0);
        let r =
            invoke(&s, &config, &opts(&world, now0(), n)).await.expect("no cut-off in a clean run");
        let ok = r.last_run_status == Status::Success;
        // A quarantined manifest blocks its date until an operator acts.
        let blocked =
            r.stop_reason == archive_compaction::data::report::StopReason::BlockedByManifest;
        last = Some(r);
        if ok || (blocked && holes) {
            break;
        }
    }
    for p in &planted {
        let q = p.replacen(MANIFESTS_ROOT, QUARANTINE_ROOT, 1);
        if mem.snapshot().contains_key(p) || !mem.snapshot().contains_key(&q) {
            return Err(format!("planted manifest {p} was not quarantined as {q}"));
        }
    }
    if holes {
        // The operator inspects the quarantined manifests, deletes them and
        // runs again (a commit made to list a skipped input may take a few
        // rounds: each pass over the day lists it again).
        for _ in 0..8 {
            let quarantined: Vec<String> =
                (mem.snapshot().into_keys()).filter(|k| k.starts_with(QUARANTINE_ROOT)).collect();
            if quarantined.is_empty() && last.as_ref().unwrap().last_run_status == Status::Success {
                break;
            }
            for q in &quarantined {
                mem.remove_now(q);
            }
            n += 1;
            let s = SimStore::new(&world, Faults::default(), 0);
            last = invoke(&s, &config, &opts(&world, now0(), n)).await;
        }
    }
    let r = last.unwrap();
    if r.last_run_status != Status::Success {
        return Err(format!(
            "no Success after 6 clean runs: {:?} {:?}",
            r.last_run_status, r.errors
        ));
    }
    n += 1;
    let s = SimStore::new(&world, Faults::default(), 0);
    let r = invoke(&s, &config, &opts(&world, now0(), n)).await.unwrap();
    if r.last_run_status != Status::Success {
        return Err(format!("the run after Success: {:?} {:?}", r.last_run_status, r.errors));
    }
    check(&world)
}

/// A current-version manifest for `d` by `job_id`, made at the simulation's
/// start by `invocation_id` (who planted it), and the key it goes under;
/// not written.
fn planted_manifest(
    d: NaiveDate,
    job_id: Uuid,
    output: archive_compaction::data::state::ManifestOutput,
    inputs: Vec<archive_compaction::data::state::ManifestInput>,
    invocation_id: &str,
) -> (String, Manifest) {
    let m = Manifest {
        schema_version: archive_compaction::data::state::MANIFEST_VERSION,
        job_id,
        date: d,
        output: Some(output),
        inputs,
        created_at: now0(),
        invocation_id: invocation_id.into(),
    };
    (keys::manifest_key(d, job_id), m)
}

/// Writes one of three wrong manifests for a random date,
/// each of which recovery would use to delete data if it obeyed: (0) its
/// output is another commit's compacted file (or a key its job id does not
/// give), size off by one; (1) its only input is its own, verified output;
/// (2) its output is the watermark, size off by one. Returns its key.
fn plant_wrong_manifest(mem: &MemoryStore, rng: &mut Rng) -> String {
    use archive_compaction::data::state::{ManifestInput, ManifestOutput};
    use archive_compaction::infra::storage::sha256_b64;
    let d = date(DATES[rng.below(DATES.len() as u64) as usize]);
    let snapshot = mem.snapshot();
    let in_day: Vec<(&String, &Bytes, &String)> = snapshot
        .iter()
        .filter(|(k, _)| k.starts_with(&index_prefix(d)) && keys::is_index_input(k))
        .map(|(k, (b, e))| (k, b, e))
        .collect();
    let job_id = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 | rng.next() as u128);
    let target =
        in_day.iter().find(|(k, _, _)| k.contains("/compacted-")).or(in_day.first()).copied();
    let output = |key: &str, body: &[u8], exact: bool| ManifestOutput {
        key: key.to_string(),
        size: body.len() as u64 + u64::from(!exact),
        sha256: sha256_b64(body),
        rows: 1,
    };
    let input = |(k, b, e): (&String, &Bytes, &String)| ManifestInput {
        key: k.clone(),
        etag: e.clone(),
        size: b.len() as u64,
    };
    let all: Vec<ManifestInput> = in_day.iter().copied().map(input).collect();
    let (output, inputs) = match (rng.below(3), target) {
        (0, Some((k, b, _))) if k.contains("/compacted-") => (output(k, b, false), all),
        (0, _) => (output(&keys::compacted_key(d, Uuid::now_v7()), b"x", false), all),
        (1, Some(t)) => (output(t.0, t.1, true), vec![input(t)]),
        _ => {
            let wm = snapshot.get(WATERMARK_KEY).map(|(b, _)| b.clone());
            (output(WATERMARK_KEY, &wm.unwrap_or_default(), false), all)
        }
    };
    let (key, m) = planted_manifest(d, job_id, output, inputs, "restored-from-a-backup");
    mem.put_now(&key, serde_json::to_vec(&m).unwrap().into());
    PLANTED.fetch_add(1, Ordering::Relaxed);
    key
}

/// Plants a finished-looking commit for a random date whose manifest lists
/// one input more than its output holds: the output (named after the job,
/// its job id in the metadata, stored with its SHA-256) holds the rows of
/// the date's per-flight files at their current versions, which stay (a
/// crash between the PUT and the deletes); the manifest lists those files
/// and a new flight's per-flight file (the writer leaves it alone, so the
/// manifest's version stays), whose row is in no output. Recovery must
/// delete the proven inputs and keep that one. The per-flight files are
/// recorded as read (the planted commit read them). Returns its key.
async fn plant_unproven_manifest(world: &World, rng: &mut Rng) -> String {
    use archive_compaction::data::state::{ManifestInput, ManifestOutput};
    use archive_compaction::infra::storage::{JOB_ID_METADATA, PutMode, sha256_b64};
    let mem = &world.mem;
    let d = date(DATES[rng.below(DATES.len() as u64) as usize]);
    let prefix = index_prefix(d);
    let (inputs, rows) = {
        let mut archive = world.archive.lock().unwrap();
        let mut inputs = Vec::new();
        let mut rows = Vec::new();
        for (key, (body, etag)) in mem.snapshot().range(prefix.clone()..) {
            if !key.starts_with(&prefix) {
                break;
            }
            if let IndexKey::PerFlight(u) = keys::classify_index_key(key)
                && let Some(v) = archive.flights.get(&d).and_then(|f| f.get(&u))
            {
                rows.push((u, *v));
                inputs.push(ManifestInput {
                    key: key.clone(),
                    etag: etag.clone(),
                    size: body.len() as u64,
                });
            }
        }
        if rows.is_empty() {
            let u = archive.new_flight(mem, d);
            let key = format!("{prefix}{u}.parquet");
            let (body, etag) = mem.snapshot()[&key].clone();
            rows.push((u, 1));
            inputs.push(ManifestInput { key, etag, size: body.len() as u64 });
        }
        {
            let mut reads = world.reads.lock().unwrap();
            for i in &inputs {
                reads.insert((i.key.clone(), i.etag.clone()));
            }
        }
        let extra = archive.new_flight(mem, d);
        archive.pinned.insert(extra);
        let extra_key = format!("{prefix}{extra}.parquet");
        let (extra_body, extra_etag) = mem.snapshot()[&extra_key].clone();
        inputs.push(ManifestInput {
            key: extra_key,
            etag: extra_etag,
            size: extra_body.len() as u64,
        });
        (inputs, rows)
    };
    let job_id = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 | rng.next() as u128);
    let body = multi_row_file(d, &rows);
    let output = ManifestOutput {
        key: keys::compacted_key(d, job_id),
        size: body.len() as u64,
        sha256: sha256_b64(&body),
        rows: rows.len() as u64,
    };
    let mut request = PutRequest::new(PutMode::Create);
    request.sha256_b64 = Some(output.sha256.clone());
    request.metadata.insert(JOB_ID_METADATA.to_string(), job_id.to_string());
    mem.put_object(&output.key, body, request).await.unwrap();
    let (key, m) =
        planted_manifest(d, job_id, output, inputs, "a-commit-that-listed-one-more-input");
    assert_eq!(
        archive_compaction::protocol::manifest::validate_manifest(&key, &m),
        Ok(()),
        "the planted manifest must pass every ownership rule"
    );
    mem.put_now(&key, serde_json::to_vec(&m).unwrap().into());
    UNPROVEN.fetch_add(1, Ordering::Relaxed);
    key
}

fn check(world: &World) -> std::result::Result<(), String> {
    if let Some(v) = world.violations.lock().unwrap().first() {
        return Err(v.clone());
    }
    let snapshot = world.mem.snapshot();
    let archive = world.archive.lock().unwrap().clone();
    for (key, etag) in &archive.unmergeable {
        if snapshot.get(key).map(|(_, e)| e) != Some(etag) {
            return Err(format!(
                "the skipped per-flight file {key} was deleted or changed: its flight is lost"
            ));
        }
    }
    for key in snapshot.keys() {
        if key.starts_with(MANIFESTS_ROOT) || key.starts_with(QUARANTINE_ROOT) {
            return Err(format!("{key} left"));
        }
    }
    let wm: serde_json::Value =
        serde_json::from_slice(&snapshot.get(WATERMARK_KEY).ok_or("no watermark")?.0)
            .map_err(|e| e.to_string())?;
    if wm["last_compacted_date"] != DATES[DATES.len() - 1] {
        return Err(format!("watermark {wm} is not at the cutoff"));
    }
    for d in DATES.map(date) {
        let prefix = index_prefix(d);
        let mut compacted = Vec::new();
        for (key, (body, _)) in snapshot.iter().filter(|(k, _)| k.starts_with(&prefix)) {
            match keys::classify_index_key(key) {
                IndexKey::Compacted => compacted.push((key.clone(), body.clone())),
                IndexKey::PerFlight(_) if archive.unmergeable.contains_key(key) => {}
                IndexKey::PerFlight(_) => return Err(format!("per-flight file {key} left")),
                IndexKey::MultiRow => return Err(format!("multi-row file {key} left")),
                IndexKey::Foreign(_) => {}
            }
        }
        if compacted.len() != 1 && world.part_files.is_none() {
            return Err(format!(
                "{d}: {} compacted files: {:?}",
                compacted.len(),
                compacted.iter().map(|c| &c.0).collect::<Vec<_>>()
            ));
        }
        if compacted.is_empty() {
            return Err(format!("{d}: no compacted file"));
        }
        if compacted.len() > 1 {
            kinds::DATES_IN_PARTS.fetch_add(1, Ordering::Relaxed);
        }
        // Every flight once over all the date's compacted files (one, or
        // one a part).
        let mut got: BTreeMap<Uuid, Vec<String>> = BTreeMap::new();
        let mut keyless = Vec::new();
        for (key, body) in &compacted {
            let decoded = archive_compaction::data::merge::decode(body.clone())
                .map_err(|e| format!("{key}: {e}"))?;
            let b = &decoded.batch;
            let col = |name: &str| {
                b.column_by_name(name)
                    .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
                    .ok_or(format!("{d}: no {name} column"))
            };
            let (s3_key, ident) = (col("s3_key")?, col("ident")?);
            for i in 0..b.num_rows() {
                match keys::flight_uuid(s3_key.value(i)) {
                    Some(u) => got.entry(u).or_default().push(ident.value(i).to_string()),
                    None => keyless.push(ident.value(i).to_string()),
                }
            }
        }
        keyless.sort();
        if keyless != archive.keyless.get(&d).cloned().unwrap_or_default() {
            return Err(format!(
                "{d}: rows without a flight uuid {keyless:?}, want {:?}",
                archive.keyless.get(&d)
            ));
        }
        let want: BTreeMap<Uuid, Vec<String>> = archive
            .flights
            .get(&d)
            .map(|m| m.iter().map(|(u, v)| (*u, vec![format!("v{v}")])).collect())
            .unwrap_or_default();
        if got != want {
            return Err(format!(
                "{d}: rows {got:?}, want every flight once at its newest version {want:?}"
            ));
        }
    }
    let reads = world.reads.lock().unwrap();
    for del in world.mem.deleted() {
        if del.key == WATERMARK_KEY {
            return Err(format!("{WATERMARK_KEY} was deleted"));
        }
        if del.key.starts_with(keys::INDEX_ROOT)
            && !reads.contains(&(del.key.clone(), del.etag.clone()))
        {
            return Err(format!(
                "{} deleted in version {}, which was never read",
                del.key, del.etag
            ));
        }
    }
    Ok(())
}

fn run_seed(seed: u64) -> std::result::Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        schedule(seed).await?;
        kinds::schedule(seed).await
    })
}

/// Runs `seeds` schedules from `base` on two threads; the first failing
/// one (lowest seed) as (seed, message, schedules run), if any.
fn run_seeds(base: u64, seeds: u64) -> Option<(u64, String, u64)> {
    let next = Arc::new(AtomicU64::new(0));
    let failed: Arc<Mutex<Option<(u64, String, u64)>>> = Arc::new(Mutex::new(None));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (next, failed) = (next.clone(), failed.clone());
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= seeds || failed.lock().unwrap().is_some() {
                        return;
                    }
                    let seed = base + i;
                    if let Err(e) = run_seed(seed) {
                        let mut f = failed.lock().unwrap();
                        if f.as_ref().is_none_or(|(s, _, _)| seed < *s) {
                            *f = Some((seed, e, i + 1));
                        }
                        return;
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    failed.lock().unwrap().take()
}

#[test]
fn simulation() {
    // The failpoint build plants the commit's hole in every schedule with a
    // skipped file, then shows each proof is needed (module docs).
    fail::cfg("commit::read-lists-skipped-input", "return").unwrap();
    if let Ok(s) = std::env::var("SIM_SEED") {
        let seed: u64 = s.parse().expect("SIM_SEED is a number");
        if let Err(e) = run_seed(seed) {
            panic!("seed {seed}: {e}");
        }
        return;
    }
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .map(|s| s.parse().expect("SIM_SEEDS is a number"))
        .unwrap_or(2000);
    let base: u64 = std::env::var("SIM_BASE").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    for off in ["commit::proof-off", "recovery::proof-off"] {
        let t = Instant::now();
        fail::cfg(off, "return").unwrap();
        let found = run_seeds(base, 500);
        fail::remove(off);
        let Some((seed, e, count)) = found else {
            panic!(
                "with {off} the simulation found nothing in 500 schedules: the holes are not planted"
            )
        };
        eprintln!(
            "with {off}: schedule {seed} failed after ~{count} schedules, {:.1} s, as it must: {e}",
            t.elapsed().as_secs_f64()
        );
    }
    let t0 = Instant::now();
    let failed = run_seeds(base, seeds);
    let secs = t0.elapsed().as_secs_f64();
    if let Some((seed, e, count)) = failed {
        panic!(
            "schedule {seed} failed after ~{count} schedules, {secs:.1} s: {e}\nreplay: SIM_SEED={seed} cargo nextest run --test suite --no-capture simulation::"
        );
    }
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    eprintln!(
        "simulation: {seeds} schedules in {secs:.1} s: {} cut-offs, {} pauses past or before a lease expiry, {} injected errors, {} keys refused in DeleteObjects, {} writer steps, {} wrong manifests planted, {} manifests listing an input their output lacks, {} skipped per-flight files",
        c(&CUTS),
        c(&PAUSES),
        c(&ERRORS),
        c(&DENIED),
        c(&WRITES),
        c(&PLANTED),
        c(&UNPROVEN),
        c(&UNMERGEABLE)
    );
    eprintln!("simulation: {} writes applied with their answer lost", c(&LOST));
    assert!(seeds < 100 || c(&LOST) > 0, "no write's answer was ever lost");
    assert!(
        seeds < 100
            || [&CUTS, &PAUSES, &ERRORS, &DENIED, &WRITES, &PLANTED, &UNPROVEN, &UNMERGEABLE]
                .iter()
                .all(|a| c(a) > 0),
        "a kind of fault never fired"
    );
    kinds::report(seeds);
}

/// Schedule kinds the scheduled walk does not reach, each run
/// after the schedule of some seeds ([`kinds::schedule`]), and the check
/// made after every store call ([`check_outputs`]).
///
/// - `--date` and repair-range runs on a bucket whose dates the walk has
///   passed (`SWEEP_DAYS=0`, so only recovery can finish what they leave),
///   cut at one call after another, each cut followed by the schedule's
///   walk; after each, every flight must be indexed exactly once.
/// - A write that took effect but whose answer comes back only after the
///   lease expired and another invocation took it over and ran: the
///   confirmation taken beside that write does not cover the next step.
/// - A quarantined manifest left for one to three later runs: its date
///   stays blocked and reported, and `status` says so, until the operator
///   deletes it.
/// - Days whose multi-row file (a legacy migration's, the Python job's)
///   holds a flight twice (in uuid order or not) and rows whose `s3_key`
///   is null or empty; per-flight files holding such a row beside their
///   own, which must stay in place.
mod kinds {
    use super::*;
    use archive_compaction::commands::status::{StatusOptions, gather};
    use archive_compaction::data::report::{RecoveryAction, StopReason};
    use archive_compaction::infra::clock::Clock;

    static DATE_CUTS: AtomicU64 = AtomicU64::new(0);
    static HELD: AtomicU64 = AtomicU64::new(0);
    static TAKEN_OVER: AtomicU64 = AtomicU64::new(0);
    static KEPT_QUARANTINED: AtomicU64 = AtomicU64::new(0);
    static TWICE: AtomicU64 = AtomicU64::new(0);
    static TWICE_SORTED: AtomicU64 = AtomicU64::new(0);
    static KEYLESS_ROWS: AtomicU64 = AtomicU64::new(0);
    static KEYLESS_FILES: AtomicU64 = AtomicU64::new(0);
    pub(super) static OUTPUTS_CHECKED: AtomicU64 = AtomicU64::new(0);
    pub(super) static DATES_IN_PARTS: AtomicU64 = AtomicU64::new(0);

    /// The kind seed `seed` runs after its schedule, if any: one seed in
    /// 16 each, and a run of `--date` cut call by call, which costs about a
    /// hundred schedules, one in 128 (seeds 1, 129, ...): the default seed
    /// count then costs about a third more CPU than the schedules alone
    /// (49 s against 36 s, measured on a loaded 2-core machine).
    pub(super) async fn schedule(seed: u64) -> std::result::Result<(), String> {
        let (kind, r) = match seed % 16 {
            1 if seed % 128 == 1 => ("date runs", date_runs_cut_at_every_call(seed).await),
            3 => ("held answer", held_write_answer(seed).await),
            5 => ("quarantine kept", quarantine_kept(seed).await),
            _ => return Ok(()),
        };
        r.map_err(|e| format!("(kind {kind}) {e}"))
    }

    /// Prints what the kinds did; with `seeds` of 100 or more, each must
    /// have happened.
    pub(super) fn report(seeds: u64) {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        eprintln!(
            "kinds: {} --date/repair runs cut, {} write answers held past the lease ({} taken over meanwhile), {} runs with a quarantined manifest kept, {} multi-row files holding a flight twice ({} in uuid order), {} rows without a flight uuid in multi-row files, {} per-flight files with such a row, {} compacted outputs checked after every call, {} dates checked in several compacted files (PART_FILES)",
            c(&DATE_CUTS),
            c(&HELD),
            c(&TAKEN_OVER),
            c(&KEPT_QUARANTINED),
            c(&TWICE),
            c(&TWICE_SORTED),
            c(&KEYLESS_ROWS),
            c(&KEYLESS_FILES),
            c(&OUTPUTS_CHECKED),
            c(&DATES_IN_PARTS),
        );
        let all = [
            &DATE_CUTS,
            &HELD,
            &TAKEN_OVER,
            &KEPT_QUARANTINED,
            &TWICE,
            &TWICE_SORTED,
            &KEYLESS_ROWS,
            &KEYLESS_FILES,
            &OUTPUTS_CHECKED,
            &DATES_IN_PARTS,
        ];
        assert!(seeds < 100 || all.iter().all(|a| c(a) > 0), "a schedule kind never happened");
    }

    /// One row of the index schema whose `s3_key` is null (or empty, when
    /// `empty`) and whose `ident` is `ident`.
    fn keyless_row(d: NaiveDate, ident: &str, empty: bool) -> RecordBatch {
        let b = index_row(d, Uuid::nil(), 0);
        let mut cols = b.columns().to_vec();
        cols[5] = Arc::new(StringArray::from(vec![Some(ident)]));
        cols[8] = Arc::new(StringArray::from(vec![empty.then_some("")]));
        RecordBatch::try_new(b.schema(), cols).unwrap()
    }

    fn file_of(rows: &[RecordBatch]) -> Bytes {
        let one = arrow_select::concat::concat_batches(
            &archive_compaction::data::merge::target_schema(),
            rows,
        )
        .unwrap();
        archive_compaction::data::merge::encode(&[one], 1024).unwrap().into()
    }

    impl Archive {
        /// [`Archive::fold_into`], with one flight twice (an older row
        /// `v0` before its current one: the later row wins) and up to two
        /// rows without a flight uuid; in uuid order (rows without one
        /// last) when `sorted`, else shuffled.
        fn fold_twice(
            &mut self,
            mem: &MemoryStore,
            d: NaiveDate,
            name: &str,
            rng: &mut Rng,
            sorted: bool,
        ) {
            let flights: Vec<(Uuid, u32)> = self
                .flights
                .get(&d)
                .map(|m| m.iter().map(|(u, v)| (*u, *v)).collect())
                .unwrap_or_default();
            if flights.is_empty() {
                return;
            }
            let mut rows: Vec<RecordBatch> =
                flights.iter().map(|(u, v)| index_row(d, *u, *v)).collect();
            if !sorted {
                for i in (1..rows.len()).rev() {
                    rows.swap(i, rng.below(i as u64 + 1) as usize);
                }
            }
            // The flight twice: its stale row goes right before (sorted) or
            // anywhere before (shuffled) its current one.
            let (u, v) = flights[rng.below(flights.len() as u64) as usize];
            let current = index_row(d, u, v);
            let at = rows.iter().position(|r| *r == current).unwrap();
            let before = if sorted { at } else { rng.below(at as u64 + 1) as usize };
            rows.insert(before, index_row(d, u, 0));
            TWICE.fetch_add(1, Ordering::Relaxed);
            if sorted {
                TWICE_SORTED.fetch_add(1, Ordering::Relaxed);
            }
            for i in 0..rng.below(3) {
                let ident = format!("keyless-{d}-{name}-{i}");
                let row = keyless_row(d, &ident, rng.chance(500));
                let at =
                    if sorted { rows.len() } else { rng.below(rows.len() as u64 + 1) as usize };
                rows.insert(at, row);
                let k = self.keyless.entry(d).or_default();
                k.push(ident);
                k.sort();
                KEYLESS_ROWS.fetch_add(1, Ordering::Relaxed);
            }
            mem.put_now(&format!("{}{name}", index_prefix(d)), file_of(&rows));
            for (u, _) in &flights {
                mem.remove_now(&format!("{}{u}.parquet", index_prefix(d)));
            }
        }

        /// A new flight whose per-flight file holds its own row and one
        /// whose `s3_key` is null or empty: merged, that row would lose the
        /// flight's uuid, so the file is left in place, as written, like
        /// an unreadable one (`unmergeable`).
        fn keyless_per_flight(&mut self, mem: &MemoryStore, d: NaiveDate, empty: bool) {
            let u = self.next_uuid(d);
            let key = format!("{}{u}.parquet", index_prefix(d));
            let body = file_of(&[index_row(d, u, 1), keyless_row(d, "keyless", empty)]);
            let etag = mem.put_now(&key, body);
            mem.put_now(&format!("{}{u}.json.gz", flights_prefix(d)), "{}".into());
            self.unmergeable.insert(key, etag);
            KEYLESS_FILES.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A world as [`super::schedule`] makes one, with the days of this
    /// module: multi-row files holding a flight twice and rows without a
    /// flight uuid, per-flight files with such a row.
    fn world(seed: u64, rng: &mut Rng) -> (Arc<World>, ManualClock) {
        let clock = ManualClock::new(now0());
        let mem = if seed % 2 == 1 {
            MemoryStore::sse_kms("sim", Arc::new(clock.clone()))
        } else {
            MemoryStore::with_clock("sim", Arc::new(clock.clone()))
        };
        let mem = mem
            .with_delete_batch_size(1 + rng.below(3) as usize)
            .with_list_page_size([1, 2, 3, 1000][rng.below(4) as usize]);
        let world = Arc::new(World {
            mem: mem.clone(),
            clock: clock.clone(),
            archive: Mutex::new(Archive::default()),
            reads: Mutex::new(BTreeSet::new()),
            violations: Mutex::new(Vec::new()),
            batches_in_flight: 1 + rng.below(3) as usize,
            outputs: Mutex::default(),
            part_files: rng.chance(300).then(|| 2 + rng.below(2)),
        });
        let mut a = world.archive.lock().unwrap();
        for d in DATES.map(date) {
            for _ in 0..1 + rng.below(4) {
                a.new_flight(&mem, d);
            }
            // A legacy migration's file is always folded; a day that is
            // the Python job's compacted file alone is taken as compacted,
            // so that one holds each flight once.
            let sorted = rng.chance(500);
            match rng.below(4) {
                0 | 1 => a.fold_twice(&mem, d, "legacy-migration.parquet", rng, sorted),
                2 => a.fold_into(&mem, d, "compacted-py.parquet", rng),
                _ => {}
            }
            if rng.chance(150) {
                a.keyless_per_flight(&mem, d, rng.chance(500));
            }
        }
        drop(a);
        (world, clock)
    }

    /// Clean runs (no faults, the lease lapsed first) until one is a
    /// Success; the last report.
    async fn walk_to_success(
        world: &Arc<World>,
        config: &Config,
        n: &mut u64,
    ) -> std::result::Result<RunReport, String> {
        world.clock.advance(config.lease + Duration::from_secs(1));
        let mut last = None;
        for _ in 0..6 {
            *n += 1;
            let s = SimStore::new(world, Faults::default(), 0);
            let r = invoke(&s, config, &opts(world, now0(), *n))
                .await
                .expect("no cut-off in a clean run");
            if r.last_run_status == Status::Success {
                return Ok(r);
            }
            last = Some(r);
        }
        let r = last.unwrap();
        Err(format!(
            "no Success after 6 clean runs: {:?} {:?} {:?}",
            r.last_run_status, r.stop_reason, r.errors
        ))
    }

    /// Every flight of every day is in exactly one row of the day's index
    /// files (per-flight files not folded yet count), at its newest
    /// version; rows without a flight uuid are each there once; the files
    /// left in place are there as written; no manifest is left. Holds
    /// whenever no commit is under way, compacted or not.
    fn indexed_once(world: &World) -> std::result::Result<(), String> {
        if let Some(v) = world.violations.lock().unwrap().first() {
            return Err(v.clone());
        }
        let snapshot = world.mem.snapshot();
        let archive = world.archive.lock().unwrap().clone();
        if let Some(k) = snapshot.keys().find(|k| k.starts_with(MANIFESTS_ROOT)) {
            return Err(format!("{k} left after the walk"));
        }
        for (key, etag) in &archive.unmergeable {
            if snapshot.get(key).map(|(_, e)| e) != Some(etag) {
                return Err(format!("{key}, left in place by design, was deleted or changed"));
            }
        }
        for d in DATES.map(date) {
            let prefix = index_prefix(d);
            let mut got: BTreeMap<Uuid, Vec<String>> = BTreeMap::new();
            let mut keyless = Vec::new();
            for (key, (body, _)) in snapshot.range(prefix.clone()..) {
                if !key.starts_with(&prefix) {
                    break;
                }
                if archive.unmergeable.contains_key(key)
                    || matches!(keys::classify_index_key(key), IndexKey::Foreign(_))
                {
                    continue;
                }
                let b = archive_compaction::data::merge::decode(body.clone())
                    .map_err(|e| format!("{key}: {e}"))?
                    .batch;
                let col = |name: &str| {
                    b.column_by_name(name)
                        .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
                        .ok_or(format!("{key}: no {name} column"))
                };
                let (s3_key, ident) = (col("s3_key")?, col("ident")?);
                for i in 0..b.num_rows() {
                    let id = ident.value(i).to_string();
                    match keys::flight_uuid(s3_key.value(i)) {
                        Some(u) => got.entry(u).or_default().push(format!("{id} in {key}")),
                        None => keyless.push(id),
                    }
                }
            }
            keyless.sort();
            if keyless != archive.keyless.get(&d).cloned().unwrap_or_default() {
                return Err(format!(
                    "{d}: rows without a flight uuid {keyless:?}, want {:?} once each",
                    archive.keyless.get(&d)
                ));
            }
            for (u, v) in archive.flights.get(&d).into_iter().flatten() {
                let rows = got.remove(u).unwrap_or_default();
                if rows.len() != 1 || !rows[0].starts_with(&format!("v{v} in ")) {
                    return Err(format!("{d}: flight {u} indexed as {rows:?}, want once at v{v}"));
                }
            }
            if let Some((u, rows)) = got.into_iter().next() {
                return Err(format!("{d}: rows of an unknown flight {u}: {rows:?}"));
            }
        }
        Ok(())
    }

    /// `--date` or a repair range over every date, on a bucket the walk has
    /// compacted, each time after a late flight landed on a passed date:
    /// cut at call 1, 2, 3, ... (a step or two at a time, sparser past the
    /// first calls, at most forty cuts) until a run ends uncut; each cut is followed by the schedule's walk (SWEEP_DAYS=0: it
    /// does not go back to the date, so recovery alone must finish or undo
    /// the commit), and then every flight must be indexed exactly once.
    async fn date_runs_cut_at_every_call(seed: u64) -> std::result::Result<(), String> {
        let mut rng = Rng(seed ^ 0xDA7E_5EED);
        let (world, clock) = world(seed, &mut rng);
        let config = config(&world, 0);
        let mut n = 1000;
        walk_to_success(&world, &config, &mut n).await?;
        indexed_once(&world).map_err(|e| format!("after the first walk: {e}"))?;
        let range = rng.chance(400);
        let mut k = 1 + rng.below(2);
        let mut cuts = 0;
        loop {
            let d = date(DATES[rng.below(DATES.len() as u64) as usize]);
            world.archive.lock().unwrap().new_flight(&world.mem, d);
            n += 1;
            let mut o = opts(&world, now0(), n);
            if range {
                o.repair = Some(crate::common::range(DATES[0], DATES[DATES.len() - 1]));
            } else {
                o.only_date = Some(d);
            }
            let faults = Faults { cut_at: Some(k), ..Faults::default() };
            let s = SimStore::new(&world, faults, rng.next());
            let what = if range { "repair run" } else { "--date run" };
            if std::env::var_os("SIM_TRACE").is_some() {
                eprintln!("{what} cut at call {k}");
            }
            let done = invoke(&s, &config, &o).await;
            if done.is_none() {
                DATE_CUTS.fetch_add(1, Ordering::Relaxed);
                clock.advance(Duration::from_secs(rng.below(600)));
            }
            walk_to_success(&world, &config, &mut n)
                .await
                .map_err(|e| format!("{what} cut at call {k}, then: {e}"))?;
            indexed_once(&world)
                .map_err(|e| format!("{what} cut at call {k}, then the walk: {e}"))?;
            if let Some(r) = done {
                if r.last_run_status != Status::Success {
                    return Err(format!("uncut {what}: {:?} {:?}", r.last_run_status, r.errors));
                }
                break;
            }
            // Every call early in the run, sparser later (a repair run of
            // pages of one key is hundreds of calls); forty cuts at most.
            if cuts == 40 {
                break;
            }
            cuts += 1;
            k += 1 + rng.below(1 + k / 8);
        }
        // What the runs left unfolded (late flights of other dates): a
        // repair of every date, then the schedule's final check.
        n += 1;
        let mut o = opts(&world, now0(), n);
        o.repair = Some(crate::common::range(DATES[0], DATES[DATES.len() - 1]));
        let s = SimStore::new(&world, Faults::default(), 0);
        let r = invoke(&s, &config, &o).await.unwrap();
        if r.last_run_status != Status::Success {
            return Err(format!("the last repair: {:?} {:?}", r.last_run_status, r.errors));
        }
        check(&world)
    }

    /// [`SimStore`] whose first write from call `hold_from` on takes
    /// effect, then holds its answer until the harness lets it go.
    #[derive(Debug, Clone)]
    struct Held {
        inner: SimStore,
        hold_from: u64,
        held: Arc<AtomicBool>,
        paused: Arc<Notify>,
        resume: Arc<Notify>,
    }

    impl Held {
        async fn answer<T>(&self, r: Result<T>) -> Result<T> {
            if r.is_ok()
                && self.inner.ctl.calls.load(Ordering::SeqCst) >= self.hold_from
                && !self.held.swap(true, Ordering::SeqCst)
            {
                HELD.fetch_add(1, Ordering::Relaxed);
                self.paused.notify_one();
                self.resume.notified().await;
            }
            r
        }
    }

    impl Store for Held {
        fn bucket(&self) -> &str {
            self.inner.bucket()
        }
        fn delete_batch_size(&self) -> usize {
            self.inner.delete_batch_size()
        }
        fn delete_batches_in_flight(&self) -> usize {
            self.inner.delete_batches_in_flight()
        }
        fn list_page_size(&self) -> usize {
            self.inner.list_page_size()
        }
        async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
            self.inner.list(prefix).await
        }
        async fn list_prefixes(&self, prefix: &str) -> Result<Vec<String>> {
            self.inner.list_prefixes(prefix).await
        }
        async fn list_page(&self, prefix: &str, start_after: Option<&str>) -> Result<ListPage> {
            self.inner.list_page(prefix, start_after).await
        }
        async fn get(&self, key: &str) -> Result<Fetched> {
            self.inner.get(key).await
        }
        async fn head(&self, key: &str) -> Result<Option<Head>> {
            self.inner.head(key).await
        }
        async fn put_object(&self, key: &str, body: Bytes, request: PutRequest) -> Result<String> {
            let r = self.inner.put_object(key, body, request).await;
            self.answer(r).await
        }
        async fn delete(&self, key: &str, if_match: Option<&str>) -> Result<()> {
            let r = self.inner.delete(key, if_match).await;
            self.answer(r).await
        }
        async fn delete_batch(&self, batch: &[(String, String)]) -> Result<Vec<DeleteFailure>> {
            let r = self.inner.delete_batch(batch).await;
            self.answer(r).await
        }
    }

    /// Invocation A's write answer held past its lease's expiry (or, now
    /// and then, not past it) while invocation B runs whole, then A goes
    /// on. The confirmation A took beside that write is no good for its
    /// next step: the fence must confirm again and stop A.
    async fn held_write_answer(seed: u64) -> std::result::Result<(), String> {
        let mut rng = Rng(seed ^ 0x4E1D_A45E);
        let (world, clock) = world(seed, &mut rng);
        let config = config(&world, if rng.chance(500) { 3 } else { 0 });
        let lease = config.lease;
        let mut n = 2000;
        // Now and then the days are compacted first and late flights land:
        // A's run is then a sweep or a recovery's.
        if config.sweep_days > 0 && rng.chance(300) {
            walk_to_success(&world, &config, &mut n).await?;
            for _ in 0..1 + rng.below(3) {
                let d = date(DATES[rng.below(DATES.len() as u64) as usize]);
                world.archive.lock().unwrap().new_flight(&world.mem, d);
            }
        }
        let a = Held {
            inner: SimStore::new(&world, Faults::default(), rng.next()),
            hold_from: 1 + rng.below(40),
            held: Arc::new(AtomicBool::new(false)),
            paused: Arc::new(Notify::new()),
            resume: Arc::new(Notify::new()),
        };
        let b_faults =
            Faults { cut_at: rng.chance(250).then(|| 1 + rng.below(40)), ..Faults::default() };
        let b = SimStore::new(&world, b_faults, rng.next());
        let past = rng.chance(850);
        let gap = if past { lease + Duration::from_secs(1 + rng.below(120)) } else { lease / 4 };
        n += 2;
        let (mut oa, ob) = (opts(&world, now0(), n - 1), opts(&world, now0(), n));
        if rng.chance(250) {
            oa.only_date = Some(date(DATES[rng.below(DATES.len() as u64) as usize]));
        }
        {
            let fut = run::run(&a, &config, &oa);
            tokio::pin!(fut);
            let held = tokio::select! {
                biased;
                _ = &mut fut => false,
                _ = a.paused.notified() => true,
            };
            if held {
                clock.advance(gap);
                if past {
                    TAKEN_OVER.fetch_add(1, Ordering::Relaxed);
                }
                invoke(&b, &config, &ob).await;
                a.resume.notify_one();
                fut.await;
            }
        }
        walk_to_success(&world, &config, &mut n).await?;
        check(&world)
    }

    /// A manifest recovery must quarantine, then one to three runs (some
    /// cut, some with errors) while it stays in `quarantine/`: its date
    /// stays blocked and untouched, each clean run reports the quarantined
    /// manifest and stops before the date, and `status` lists it with its
    /// date and shows the date blocked. Then the operator deletes it and
    /// the walk finishes.
    async fn quarantine_kept(seed: u64) -> std::result::Result<(), String> {
        let mut rng = Rng(seed ^ 0x0_9A7A_4714);
        let (world, _clock) = world(seed, &mut rng);
        let config = config(&world, if rng.chance(600) { 3 } else { 0 });
        let mut n = 3000;
        let key = plant_wrong_manifest(&world.mem, &mut rng);
        let d = keys::manifest_date(&key).unwrap();
        let q = key.replacen(MANIFESTS_ROOT, QUARANTINE_ROOT, 1);
        let day = |world: &World| -> Vec<(String, String)> {
            let prefix = index_prefix(d);
            (world.mem.snapshot().into_iter())
                .filter(|(k, _)| k.starts_with(&prefix))
                .map(|(k, (_, e))| (k, e))
                .collect()
        };
        let before = day(&world);
        for run in 0..2 + rng.below(3) {
            world.clock.advance(config.lease + Duration::from_secs(1));
            let clean = run == 0 || rng.chance(500);
            let faults = if clean {
                Faults::default()
            } else {
                Faults {
                    cut_at: rng.chance(500).then(|| 1 + rng.below(40)),
                    error_before: [0, 20, 60][rng.below(3) as usize],
                    ..Faults::default()
                }
            };
            n += 1;
            let s = SimStore::new(&world, faults, rng.next());
            let r = invoke(&s, &config, &opts(&world, now0(), n)).await;
            let snapshot = world.mem.snapshot();
            if run > 0 && snapshot.contains_key(&q) {
                KEPT_QUARANTINED.fetch_add(1, Ordering::Relaxed);
            }
            if snapshot.contains_key(&key) && run == 0 {
                return Err(format!("{key} was not quarantined by a clean run"));
            }
            if !snapshot.contains_key(&key) && !snapshot.contains_key(&q) {
                return Err(format!("{q} was deleted, not by the operator"));
            }
            if day(&world) != before {
                return Err(format!(
                    "run {run}: {d} was touched while {q} blocks it: {:?} -> {:?}",
                    before,
                    day(&world)
                ));
            }
            if let Some(wm) = snapshot.get(WATERMARK_KEY) {
                let wm: serde_json::Value = serde_json::from_slice(&wm.0).unwrap();
                let at = wm["last_compacted_date"].as_str().map(date);
                if at.is_some_and(|w| w >= d) {
                    return Err(format!("run {run}: the watermark passed the blocked {d}: {wm}"));
                }
            }
            let Some(r) = r.filter(|_| clean) else {
                continue;
            };
            let reported = r.recovered.iter().any(|m| {
                m.date == Some(d)
                    && ((m.key == q && m.action == RecoveryAction::QuarantinedEarlier)
                        || (run == 0 && m.key == key && m.action == RecoveryAction::Quarantined))
            });
            if !reported || r.stop_reason != StopReason::BlockedByManifest {
                return Err(format!(
                    "run {run}: the quarantined {q} is not reported or the walk did not stop at {d}: {:?} {:?}",
                    r.stop_reason, r.recovered
                ));
            }
            let status = gather(
                &world.mem,
                &config,
                &StatusOptions { now: now0(), as_of: world.clock.now(), days: DATES.len() },
            )
            .await
            .map_err(|e| e.to_string())?;
            let listed = status.quarantined.iter().any(|x| x.key == q && x.date == Some(d));
            let blocked =
                (status.next_days.iter()).filter(|x| x.date == d).all(|x| x.blocked_by.is_some());
            if !listed || !blocked {
                return Err(format!(
                    "run {run}: status does not show {d} blocked by {q}: {:?} {:?}",
                    status.quarantined, status.next_days
                ));
            }
        }
        // The operator inspects it and deletes it: the walk goes on.
        world.mem.remove_now(&key);
        world.mem.remove_now(&q);
        walk_to_success(&world, &config, &mut n).await?;
        n += 1;
        let s = SimStore::new(&world, Faults::default(), 0);
        invoke(&s, &config, &opts(&world, now0(), n)).await.unwrap();
        check(&world)
    }
}

/// What [`check_outputs`] has seen: each compacted output of the job a
/// manifest named (its inputs in the version read, and whether a
/// quarantined manifest named it: then the operator decides), and the
/// outputs there at the last check.
#[derive(Debug, Default)]
struct OutputsSeen {
    named: BTreeMap<String, (Vec<(String, String)>, bool)>,
    present: BTreeSet<String>,
}

/// Checked after every store call: no compacted output of the job
/// (`compacted-{job_id}.parquet`) appears without a live manifest naming
/// it, and none outlives its manifest while one of that manifest's inputs
/// is still there in the version read (the commit deletes the manifest only
/// once its inputs are gone; recovery deletes a differing output before its
/// manifest). An output a quarantined manifest named is the operator's.
fn check_outputs(world: &World) {
    let snapshot = world.mem.snapshot();
    let mut seen = world.outputs.lock().unwrap();
    let mut live = BTreeSet::new();
    let state = snapshot
        .range(keys::STATE_ROOT.to_string()..)
        .take_while(|(k, _)| k.starts_with(keys::STATE_ROOT));
    for (key, (body, _)) in state {
        let quarantined = key.starts_with(QUARANTINE_ROOT);
        if !quarantined && !key.starts_with(MANIFESTS_ROOT) {
            continue;
        }
        let Ok(m) = serde_json::from_slice::<Manifest>(body) else {
            continue;
        };
        let Some(o) = &m.output else {
            continue;
        };
        let entry = seen.named.entry(o.key.clone()).or_insert_with(|| {
            let inputs = m.inputs.iter().map(|i| (i.key.clone(), i.etag.clone()));
            (inputs.collect(), false)
        });
        entry.1 |= quarantined;
        if !quarantined {
            live.insert(o.key.clone());
        }
    }
    let ours = |key: &str| {
        key.rsplit('/')
            .next()
            .and_then(|n| n.strip_prefix(keys::COMPACTED_PREFIX))
            .and_then(|n| n.strip_suffix(".parquet"))
            .is_some_and(|id| Uuid::parse_str(id).is_ok())
    };
    let mut present = BTreeSet::new();
    let mut violations = Vec::new();
    for key in snapshot.keys().filter(|k| k.starts_with(keys::INDEX_ROOT) && ours(k)) {
        present.insert(key.clone());
        if live.contains(key) {
            continue;
        }
        match seen.named.get(key) {
            Some((_, true)) => {}
            _ if !seen.present.contains(key) => violations
                .push(format!("compacted output {key} appeared without a manifest naming it")),
            None => {
                violations.push(format!("compacted output {key} was never named by a manifest"))
            }
            Some((inputs, false)) => {
                if let Some((i, _)) =
                    inputs.iter().find(|(i, e)| snapshot.get(i).is_some_and(|(_, now)| now == e))
                {
                    violations.push(format!(
                        "compacted output {key} left without its manifest while its input {i} is still there in the version read"
                    ));
                }
            }
        }
    }
    kinds::OUTPUTS_CHECKED
        .fetch_add(present.difference(&seen.present).count() as u64, Ordering::Relaxed);
    seen.present = present;
    drop(seen);
    if !violations.is_empty() {
        world.violations.lock().unwrap().extend(violations);
    }
}
