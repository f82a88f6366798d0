//! Peer benchmark harness for `graphile_worker` (the Rust port of
//! graphile-worker, pinned to 0.14.1 in Cargo.toml).
//!
//! It mirrors the Node harness of graphile-worker's own benchmark shape so both peers
//! run the same workload. Each variant prints ONE JSON line on stdout; progress
//! goes to stderr. See README.md for what the numbers mean.
//!
//!   cargo run --release -- --db postgres://postgres@127.0.0.1:5432/peer_gwrs
//!
//! Options (all optional):
//!   --db URL                connection string (env DATABASE_URL, else the local default)
//!   --scenarios LIST        comma list of throughput,burst (default: both)
//!   --n N                   throughput: number of matters/jobs (default 2000)
//!   --concurrency C         worker concurrency for every scenario (default 8)
//!   --burst B               burst: follow-up demands enqueued while a build runs (default 20)
//!   --build-ms MS           burst: how long each build sleeps before writing its frame (default 2000)
//!   --burst-variants LIST   burst variants, mode[:noqueue] (default
//!                           replace,preserve_run_at,none,unsafe_dedupe,replace:noqueue)
//!   --poll-interval MS      WorkerOptions::poll_interval (default: not set = crate default, 1000 ms)
//!   --local-queue-size S    WorkerOptions::local_queue(LocalQueueConfig::default().with_size(S))
//!                           (default: off, as in the crate)
//!   --complete-batch-ms MS  WorkerOptions::complete_job_batch_delay (default: off)
//!   --timeout-s S           throughput: give up waiting for the N-th frame after S seconds
//!                           (default 120 + 1.5 * ceil(N / C) * poll interval, see README)
//!   --keep-schema           do not DROP the graphile_worker schema at start
//!   --throughput-variants L throughput variants to run (default queue_per_matter,no_queue)

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use graphile_worker::runner::WorkerRuntimeError;
use graphile_worker::{
    IntoTaskHandlerResult, JobKeyMode, JobSpec, LocalQueueConfig, RawJobSpec, TaskHandler, Worker,
    WorkerContext, WorkerOptions, WorkerUtils,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Keep in sync with the `=` pin in Cargo.toml.
const GW_VERSION: &str = "0.14.1";
const PEER: &str = "graphile_worker_rs";
const SCHEMA: &str = "graphile_worker";
/// `WorkerOptions::poll_interval` documents 1000 ms when unset.
const CRATE_DEFAULT_POLL_MS: u64 = 1000;

type AnyError = Box<dyn std::error::Error>;

// ---------------------------------------------------------------- options
#[derive(Debug, Clone)]
struct Opts {
    db: String,
    scenarios: String,
    n: usize,
    concurrency: usize,
    burst: usize,
    build_ms: u64,
    burst_variants: String,
    poll_interval_ms: Option<u64>,
    local_queue_size: Option<usize>,
    complete_batch_ms: Option<u64>,
    timeout_s: Option<u64>,
    keep_schema: bool,
    throughput_variants: String,
}

impl Opts {
    fn poll_ms(&self) -> u64 {
        self.poll_interval_ms.unwrap_or(CRATE_DEFAULT_POLL_MS)
    }
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        db: std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/peer_gwrs".to_string()),
        scenarios: "throughput,burst".to_string(),
        n: 2000,
        concurrency: 8,
        burst: 20,
        build_ms: 2000,
        burst_variants: "replace,preserve_run_at,none,unsafe_dedupe,replace:noqueue".to_string(),
        poll_interval_ms: None,
        local_queue_size: None,
        complete_batch_ms: None,
        timeout_s: None,
        keep_schema: false,
        throughput_variants: "queue_per_matter,no_queue".to_string(),
    };
    fn num<T: FromStr>(flag: &str, v: String) -> Result<T, String> {
        v.parse::<T>()
            .map_err(|_| format!("{flag} needs a non-negative integer, got {v}"))
    }
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut next = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--db" => o.db = next()?,
            "--scenarios" => o.scenarios = next()?,
            "--n" => o.n = num(&a, next()?)?,
            "--concurrency" => o.concurrency = num(&a, next()?)?,
            "--burst" => o.burst = num(&a, next()?)?,
            "--build-ms" => o.build_ms = num(&a, next()?)?,
            "--burst-variants" => o.burst_variants = next()?,
            "--poll-interval" => o.poll_interval_ms = Some(num(&a, next()?)?),
            "--local-queue-size" => o.local_queue_size = Some(num(&a, next()?)?),
            "--complete-batch-ms" => o.complete_batch_ms = Some(num(&a, next()?)?),
            "--timeout-s" => o.timeout_s = Some(num(&a, next()?)?),
            "--keep-schema" => o.keep_schema = true,
            "--throughput-variants" => o.throughput_variants = next()?,
            "-h" | "--help" => {
                println!(
                    "usage: peer-graphile-worker-rs [--db URL] [--scenarios throughput,burst] \
                     [--n 2000] [--concurrency 8] [--burst 20] [--build-ms 2000] \
                     [--burst-variants LIST] [--poll-interval MS] [--local-queue-size S] \
                     [--complete-batch-ms MS] [--timeout-s S] [--keep-schema] \
                     [--throughput-variants queue_per_matter,no_queue] \
                     (see the header of src/main.rs)"
                );
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.concurrency == 0 {
        return Err("--concurrency must be > 0".into());
    }
    if o.n == 0 {
        return Err("--n must be > 0".into());
    }
    if o.poll_interval_ms == Some(0) {
        return Err("--poll-interval must be > 0".into());
    }
    Ok(o)
}

// ---------------------------------------------------------------- output
static T_START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

macro_rules! log {
    ($($arg:tt)*) => {{
        let t = T_START.get_or_init(Instant::now).elapsed().as_secs_f64();
        eprintln!("[bench +{:8.3}s] {}", t, format!($($arg)*));
    }};
}

fn emit(fields: Value) {
    let mut out = Map::new();
    out.insert("peer".into(), json!(PEER));
    out.insert("version".into(), json!(GW_VERSION));
    if let Value::Object(m) = fields {
        out.extend(m);
    }
    println!("{}", Value::Object(out));
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn r1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Nearest-rank percentile over a sorted slice.
fn pct(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank - 1]
}

fn summary(values: &[f64]) -> Value {
    if values.is_empty() {
        return json!({ "n": 0 });
    }
    let mut s = values.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mean = s.iter().sum::<f64>() / s.len() as f64;
    json!({
        "n": s.len(),
        "p50": r1(pct(&s, 50.0)),
        "p99": r1(pct(&s, 99.0)),
        "max": r1(*s.last().unwrap()),
        "mean": r1(mean),
    })
}

// ---------------------------------------------------------------- probe
/// Shared with the task through `WorkerOptions::add_extension`; one per worker
/// (so per scenario variant).
#[derive(Default)]
struct ProbeInner {
    /// throughput: frames written by this worker, and the instant the N-th one landed
    target: usize,
    frames: AtomicUsize,
    all_frames_at: Mutex<Option<Instant>>,
    all_frames: Notify,
    /// builds running now, per matter
    inflight: Mutex<HashMap<String, i64>>,
    /// burst: only builds of this matter are recorded below
    watch: Option<String>,
    starts: AtomicUsize,
    max_concurrent: Mutex<i64>,
    start_times: Mutex<Vec<Instant>>,
    frame_times: Mutex<Vec<Instant>>,
    first_start: Notify,
    task_errors: AtomicUsize,
}

#[derive(Clone, Default)]
struct Probe(Arc<ProbeInner>);

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe")
            .field("target", &self.0.target)
            .field("frames", &self.0.frames.load(Ordering::Relaxed))
            .finish()
    }
}

impl Probe {
    fn throughput(target: usize) -> Self {
        Probe(Arc::new(ProbeInner {
            target,
            ..Default::default()
        }))
    }

    fn burst(matter: &str) -> Self {
        Probe(Arc::new(ProbeInner {
            target: usize::MAX,
            watch: Some(matter.to_string()),
            ..Default::default()
        }))
    }

    fn on_start(&self, m: &str, t: Instant) {
        let inflight = {
            let mut map = self.0.inflight.lock().unwrap();
            let e = map.entry(m.to_string()).or_insert(0);
            *e += 1;
            *e
        };
        if self.0.watch.as_deref() == Some(m) {
            self.0.starts.fetch_add(1, Ordering::SeqCst);
            self.0.start_times.lock().unwrap().push(t);
            let mut mx = self.0.max_concurrent.lock().unwrap();
            if inflight > *mx {
                *mx = inflight;
            }
            self.0.first_start.notify_one();
        }
    }

    fn on_frame(&self, m: &str, t: Instant) {
        if self.0.watch.as_deref() == Some(m) {
            self.0.frame_times.lock().unwrap().push(t);
        }
        let n = self.0.frames.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.0.target {
            *self.0.all_frames_at.lock().unwrap() = Some(t);
            self.0.all_frames.notify_one();
        }
    }

    fn on_end(&self, m: &str) {
        let mut map = self.0.inflight.lock().unwrap();
        if let Some(e) = map.get_mut(m) {
            *e -= 1;
        }
    }

    fn total_inflight(&self) -> i64 {
        self.0.inflight.lock().unwrap().values().sum()
    }
}

// ---------------------------------------------------------------- the task
/// One task, "build": optionally sleep `sleep_ms` (burst only), then write one
/// frame for `m` through the worker's own pool (`ctx.pg_pool()`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Build {
    m: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sleep_ms: Option<u64>,
}

impl TaskHandler for Build {
    const IDENTIFIER: &'static str = "build";

    async fn run(self, ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        let probe = ctx.get_ext::<Probe>().cloned();
        if let Some(p) = &probe {
            p.on_start(&self.m, Instant::now());
        }
        if let Some(sleep_ms) = self.sleep_ms.filter(|&s| s > 0) {
            tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
        }
        let res = sqlx::query("insert into peer.frames (matter_id, built_at) values ($1, now())")
            .bind(&self.m)
            .execute(ctx.pg_pool())
            .await;
        if let Some(p) = &probe {
            if res.is_ok() {
                p.on_frame(&self.m, Instant::now());
            } else {
                p.0.task_errors.fetch_add(1, Ordering::SeqCst);
            }
            p.on_end(&self.m);
        }
        res.map(|_| ()).map_err(|e| {
            log!("task build({}) failed: {e}", self.m);
            e.to_string()
        })
    }
}

// ---------------------------------------------------------------- database
async fn ensure_database(url: &str) -> Result<(), AnyError> {
    let opts = PgConnectOptions::from_str(url)?;
    let name = opts
        .get_database()
        .ok_or("--db URL must name a database")?
        .to_string();
    let admin = opts.clone().database("postgres");
    let mut c = PgConnection::connect_with(&admin).await?;
    let exists: Option<i32> = sqlx::query_scalar("select 1 from pg_database where datname = $1")
        .bind(&name)
        .fetch_optional(&mut c)
        .await?;
    if exists.is_none() {
        log!("creating database {name}");
        let sql = format!("create database \"{}\"", name.replace('"', "\"\""));
        sqlx::query(AssertSqlSafe(sql)).execute(&mut c).await?;
    }
    c.close().await?;
    Ok(())
}

async fn setup_schema(pool: &PgPool, keep_schema: bool) -> Result<(), AnyError> {
    if !keep_schema {
        sqlx::query("drop schema if exists graphile_worker cascade")
            .execute(pool)
            .await?;
    }
    sqlx::query("create schema if not exists peer")
        .execute(pool)
        .await?;
    sqlx::query("drop table if exists peer.frames")
        .execute(pool)
        .await?;
    sqlx::query(
        "create table peer.frames (matter_id text not null, built_at timestamptz not null default now())",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Between variants: empty frames, jobs and named queues. Tasks table is left alone.
async fn reset_state(pool: &PgPool) -> Result<(), AnyError> {
    sqlx::query("truncate peer.frames").execute(pool).await?;
    sqlx::query(
        "truncate graphile_worker._private_jobs, graphile_worker._private_job_queues cascade",
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn jobs_in_table(pool: &PgPool) -> Result<i64, AnyError> {
    Ok(
        sqlx::query_scalar::<_, i64>("select count(*) from graphile_worker._private_jobs")
            .fetch_one(pool)
            .await?,
    )
}

async fn frames_in_table(pool: &PgPool) -> Result<i64, AnyError> {
    Ok(
        sqlx::query_scalar::<_, i64>("select count(*) from peer.frames")
            .fetch_one(pool)
            .await?,
    )
}

// ---------------------------------------------------------------- worker
struct Running {
    worker: Arc<Worker>,
    handle: JoinHandle<Result<(), WorkerRuntimeError>>,
}

/// Builds the worker the way `bench.mjs` calls `run()`: its own pool of
/// concurrency + 2 connections, OS signal handlers off, crate defaults for
/// everything not given on the command line.
async fn start_worker(opts: &Opts, probe: Probe) -> Result<Running, AnyError> {
    let mut wo = WorkerOptions::default()
        .database_url(&opts.db)
        .max_pg_conn((opts.concurrency + 2) as u32)
        .schema(SCHEMA)
        .concurrency(opts.concurrency)
        .listen_os_shutdown_signals(false)
        .define_job::<Build>()
        .add_extension(probe);
    if let Some(p) = opts.poll_interval_ms {
        wo = wo.poll_interval(Duration::from_millis(p));
    }
    if let Some(s) = opts.local_queue_size {
        wo = wo.local_queue(LocalQueueConfig::default().with_size(s));
    }
    if let Some(d) = opts.complete_batch_ms {
        wo = wo.complete_job_batch_delay(Duration::from_millis(d));
    }
    let worker = Arc::new(wo.init().await?);
    let w = worker.clone();
    let handle = tokio::spawn(async move { w.run().await });
    Ok(Running { worker, handle })
}

async fn stop_worker(r: Running) -> Option<String> {
    r.worker.request_shutdown();
    match tokio::time::timeout(Duration::from_secs(30), r.handle).await {
        Ok(Ok(Ok(()))) => None,
        Ok(Ok(Err(e))) => Some(format!("worker.run() returned an error: {e}")),
        Ok(Err(e)) => Some(format!("worker task panicked: {e}")),
        Err(_) => Some("worker did not stop within 30 s of request_shutdown".into()),
    }
}

fn config_fields(opts: &Opts) -> Value {
    json!({
        "poll_interval_ms": opts.poll_ms(),
        "poll_interval_is_crate_default": opts.poll_interval_ms.is_none(),
        "local_queue_size": opts.local_queue_size,
        "complete_batch_ms": opts.complete_batch_ms,
        "max_pg_conn": opts.concurrency + 2,
    })
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Value::Object(am), Value::Object(bm)) = (&mut a, b) {
        am.extend(bm);
    }
    a
}

/// Quiescent = no task running in this process and no job row left,
/// stable across `settle`.
async fn wait_quiescent(
    pool: &PgPool,
    probe: &Probe,
    timeout: Duration,
    settle: Duration,
) -> Result<bool, AnyError> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if probe.total_inflight() == 0 && jobs_in_table(pool).await? == 0 {
            tokio::time::sleep(settle).await;
            if probe.total_inflight() == 0 && jobs_in_table(pool).await? == 0 {
                return Ok(true);
            }
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(false)
}

// ---------------------------------------------------------------- scenario 1
async fn throughput(
    opts: &Opts,
    pool: &PgPool,
    utils: &WorkerUtils,
    use_queue: bool,
) -> Result<(), AnyError> {
    let variant = if use_queue {
        "queue_per_matter"
    } else {
        "no_queue"
    };
    let n = opts.n;
    log!(
        "throughput {variant}: N={n} concurrency={}",
        opts.concurrency
    );
    reset_state(pool).await?;

    // Enqueue everything before the worker starts (not part of the measured time).
    let t_enq0 = Instant::now();
    const CHUNK: usize = 500;
    let mut i = 0;
    while i < n {
        let end = (i + CHUNK).min(n);
        let specs: Vec<RawJobSpec> = (i..end)
            .map(|j| {
                let m = format!("matter-{j}");
                let mut spec = JobSpec::default();
                spec.job_key = Some(m.clone());
                if use_queue {
                    spec.queue_name = Some(m.clone());
                }
                RawJobSpec {
                    identifier: Build::IDENTIFIER.to_string(),
                    payload: json!({ "m": m }),
                    spec,
                }
            })
            .collect();
        utils.add_raw_jobs(&specs).await?;
        i = end;
    }
    let enqueue = t_enq0.elapsed();
    let queued = jobs_in_table(pool).await?;

    // Without a local queue the crate's worker slots fetch one job per job
    // signal (a poll tick or a NOTIFY), so pre-enqueued work drains at about
    // `concurrency` jobs per poll interval: size the wait accordingly.
    let timeout = Duration::from_secs(opts.timeout_s.unwrap_or_else(|| {
        let ticks = n.div_ceil(opts.concurrency) as u64;
        120 + (ticks * opts.poll_ms() * 3 / 2) / 1000
    }));

    let probe = Probe::throughput(n);
    let t0 = Instant::now();
    let running = start_worker(opts, probe.clone()).await?;
    let t_ready = Instant::now();

    let mut error: Option<String> = None;
    let mut t_frames: Option<Instant> = None;
    let mut t_drained: Option<Instant> = None;
    let mut partial: Option<(usize, Duration)> = None;
    match tokio::time::timeout(timeout, probe.0.all_frames.notified()).await {
        Ok(()) => {
            t_frames = *probe.0.all_frames_at.lock().unwrap();
            // Until the worker has also deleted every completed job row.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if jobs_in_table(pool).await? == 0 {
                    t_drained = Some(Instant::now());
                    break;
                }
                if Instant::now() > deadline {
                    error = Some("job rows left 60 s after the last frame".into());
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Err(_) => {
            let written = probe.0.frames.load(Ordering::SeqCst);
            partial = Some((written, t0.elapsed()));
            error = Some(format!(
                "timeout after {} ms waiting for all frames ({written} of {n} written)",
                timeout.as_millis(),
            ));
        }
    }
    if let Some(e) = stop_worker(running).await {
        log!("{e}");
        error.get_or_insert(e);
    }

    let db_frames = frames_in_table(pool).await?;
    let distinct: i64 = sqlx::query_scalar("select count(distinct matter_id) from peer.frames")
        .fetch_one(pool)
        .await?;
    let wall = t_frames.map(|t| t - t0);
    let ok = error.is_none() && db_frames == n as i64 && distinct == n as i64;
    let mut out = json!({
        "scenario": "throughput",
        "variant": variant,
        "n": n,
        "concurrency": opts.concurrency,
        "jobs_queued_before_start": queued,
        "enqueue_ms": r1(ms(enqueue)),
        "worker_startup_ms": r1(ms(t_ready - t0)),
        "wall_ms_to_all_frames": wall.map(|w| r1(ms(w))),
        "jobs_per_s": wall.map(|w| r1(n as f64 / w.as_secs_f64())),
        "jobs_per_s_excl_startup": t_frames.map(|t| r1(n as f64 / (t - t_ready).as_secs_f64())),
        "wall_ms_to_jobs_table_empty": t_drained.map(|t| r1(ms(t - t0))),
        "frames_in_db": db_frames,
        "distinct_matters_in_db": distinct,
        "task_errors": probe.0.task_errors.load(Ordering::SeqCst),
        "ok": ok,
    });
    out = merge(out, config_fields(opts));
    if let Some((written, elapsed)) = partial {
        // Rate over the part that did run, so a timed-out variant still says something.
        out = merge(
            out,
            json!({
                "frames_before_timeout": written,
                "jobs_per_s_before_timeout": r1(written as f64 / elapsed.as_secs_f64()),
            }),
        );
    }
    if let Some(e) = error {
        out = merge(out, json!({ "error": e }));
    }
    emit(out);
    Ok(())
}

// ---------------------------------------------------------------- scenario 2
async fn burst(
    opts: &Opts,
    pool: &PgPool,
    utils: &WorkerUtils,
    variant_spec: &str,
) -> Result<(), AnyError> {
    let mut parts = variant_spec.splitn(2, ':');
    let mode = parts.next().unwrap_or("replace").to_string();
    let flag = parts.next();
    let use_queue = flag != Some("noqueue");
    let use_key = mode != "none";
    let key_mode = match mode.as_str() {
        "replace" => Some(JobKeyMode::Replace),
        "preserve_run_at" => Some(JobKeyMode::PreserveRunAt),
        "unsafe_dedupe" => Some(JobKeyMode::UnsafeDedupe),
        "none" => None,
        other => return Err(format!("unknown burst mode {other}").into()),
    };
    let m = format!("burst-{mode}-{}", if use_queue { "q" } else { "noq" });
    log!(
        "burst mode={mode} queue={use_queue}: 1 running build + {} demands",
        opts.burst
    );
    reset_state(pool).await?;

    let mut spec = JobSpec::default();
    if use_queue {
        spec.queue_name = Some(m.clone());
    }
    if use_key {
        spec.job_key = Some(m.clone());
        spec.job_key_mode = key_mode;
    }
    let payload = Build {
        m: m.clone(),
        sleep_ms: Some(opts.build_ms),
    };

    let probe = Probe::burst(&m);
    let running = start_worker(opts, probe.clone()).await?;
    let t0 = Instant::now();
    let mut error: Option<String> = None;
    let mut burst_ms: Option<f64> = None;
    let mut pending_after_burst: Option<i64> = None;
    let mut returned_ids: HashSet<i64> = HashSet::new();
    let mut first_job_id: Option<i64> = None;

    let body: Result<(), AnyError> = async {
        let first = utils.add_job(payload.clone(), spec.clone()).await?;
        first_job_id = Some(*first.id());
        if tokio::time::timeout(Duration::from_secs(10), probe.0.first_start.notified())
            .await
            .is_err()
        {
            return Err("timeout after 10000 ms waiting for first build to start".into());
        }
        let t_b0 = Instant::now();
        for _ in 0..opts.burst {
            let j = utils.add_job(payload.clone(), spec.clone()).await?;
            returned_ids.insert(*j.id());
        }
        burst_ms = Some(ms(t_b0.elapsed()));
        pending_after_burst = Some(jobs_in_table(pool).await?); // includes the running (locked) one
        let budget = Duration::from_millis((opts.burst as u64 + 2) * opts.build_ms + 20_000);
        if !wait_quiescent(pool, &probe, budget, Duration::from_millis(500)).await? {
            return Err(format!("not quiescent after {} ms", budget.as_millis()).into());
        }
        Ok::<(), AnyError>(())
    }
    .await;
    if let Err(e) = body {
        error = Some(e.to_string());
    }
    if let Some(e) = stop_worker(running).await {
        log!("{e}");
        error.get_or_insert(e);
    }

    let builds = frames_in_table(pool).await?;
    if let Some(id) = first_job_id {
        returned_ids.remove(&id);
    }
    // Gap between build k's frame write and build k+1's start (serial case):
    // how quickly the follow-up is picked up once the queue frees.
    let starts = probe.0.start_times.lock().unwrap().clone();
    let frames = probe.0.frame_times.lock().unwrap().clone();
    let mut gaps = Vec::new();
    let mut k = 0;
    while k + 1 < starts.len() && k < frames.len() {
        let gap = if starts[k + 1] >= frames[k] {
            ms(starts[k + 1] - frames[k])
        } else {
            -ms(frames[k] - starts[k + 1])
        };
        gaps.push(gap);
        k += 1;
    }
    let job_key_mode_out: Option<String> = use_key.then(|| mode.clone());
    let queue_name_out: Option<&str> = use_queue.then_some("per_matter");
    let mut out = json!({
        "scenario": "burst",
        "job_key_mode": job_key_mode_out,
        "queue_name": queue_name_out,
        "concurrency": opts.concurrency,
        "build_ms": opts.build_ms,
        "demands_during_build": opts.burst,
        "burst_enqueue_ms": burst_ms.map(r1),
        "job_rows_after_burst": pending_after_burst,
        "distinct_new_job_ids_from_burst": returned_ids.len(),
        "builds_total": builds,
        "task_starts": probe.0.starts.load(Ordering::SeqCst),
        "max_concurrent_builds_same_matter": *probe.0.max_concurrent.lock().unwrap(),
        "next_start_after_prev_frame_ms": summary(&gaps),
        "ours_expected_builds": 2,
        "wall_ms_to_quiescent": r1(ms(t0.elapsed())),
        "task_errors": probe.0.task_errors.load(Ordering::SeqCst),
    });
    out = merge(out, config_fields(opts));
    if let Some(e) = error {
        out = merge(out, json!({ "error": e }));
    }
    emit(out);
    Ok(())
}

// ---------------------------------------------------------------- main
/// `scheme://user:password@rest` -> `scheme://user:***@rest`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, tail)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{tail}")
        }
        _ => url.to_string(),
    }
}

async fn real_main(opts: Opts) -> Result<(), AnyError> {
    let t_all = Instant::now();
    let scen: HashSet<String> = opts
        .scenarios
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    for s in &scen {
        if s != "throughput" && s != "burst" {
            return Err(format!("unknown scenario {s} (this harness has throughput,burst)").into());
        }
    }
    log!(
        "graphile_worker {GW_VERSION} (rust), db {}",
        redact(&opts.db)
    );
    ensure_database(&opts.db).await?;
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .connect(&opts.db)
        .await?;
    setup_schema(&pool, opts.keep_schema).await?;
    let utils = WorkerUtils::new(pool.clone(), SCHEMA);
    utils.migrate().await?;
    let pgv: String = sqlx::query_scalar("show server_version")
        .fetch_one(&pool)
        .await?;
    log!("postgres {pgv}; {SCHEMA} schema migrated");

    if scen.contains("throughput") {
        for v in opts.throughput_variants.split(',').map(str::trim) {
            match v {
                "queue_per_matter" => throughput(&opts, &pool, &utils, true).await?,
                "no_queue" => throughput(&opts, &pool, &utils, false).await?,
                "" => {}
                _ => {
                    return Err(format!(
                        "unknown throughput variant {v} (this harness has queue_per_matter,no_queue)"
                    )
                    .into())
                }
            }
        }
    }
    if scen.contains("burst") {
        for v in opts
            .burst_variants
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            burst(&opts, &pool, &utils, v).await?;
        }
    }
    pool.close().await;
    log!("done in {:.1} s", t_all.elapsed().as_secs_f64());
    Ok(())
}

#[tokio::main]
async fn main() {
    T_START.get_or_init(Instant::now);
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = real_main(opts).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
