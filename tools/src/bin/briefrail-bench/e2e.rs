//! End to end, as users run it: N matters of several firms that have been served before (a
//! first round, not measured), each with one new document recorded while no node runs; then
//! `briefrail run` (the release binary, the brief builder, JSON logs at info) serves them all.
//! The rate is matters over the time from node start to the last frame, both read from the
//! database clock. Beside it, in the same run: the best peer ([`super::peer`]), the raw
//! per-transaction ceiling with the same number of connections (one claim and one
//! compare-and-swap per transaction, from a minimal client), and the batched raw ceiling
//! ([`super::batched`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use briefrail::db::{self, Pool, admin};
use briefrail::ledger::facts::{self, NewDocument};
use diesel_async::RunQueryDsl;
use serde_json::json;
use uuid::Uuid;

use super::{R, exec, scalar};

/// One end-to-end run.
#[derive(Debug, Clone)]
pub struct Run {
    pub transport: &'static str,
    pub matters: usize,
    pub concurrency: usize,
    pub nodes: usize,
    /// `database.batch_lanes`; `None`: the node's default.
    pub lanes: Option<usize>,
}

impl Run {
    /// How the tables name the run.
    pub fn label(&self) -> String {
        format!(
            "{} {} matters, concurrency {}, {} node{}{}",
            self.transport,
            self.matters,
            self.concurrency,
            self.nodes,
            if self.nodes == 1 { "" } else { "s" },
            self.lanes
                .map(|l| format!(", lanes {l}"))
                .unwrap_or_default()
        )
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Served {
    pub per_s: f64,
    pub wall_s: f64,
    /// Every matter, the probes too, over the time to the last frame of any.
    pub with_probes_per_s: f64,
    pub log_bytes_per_matter: f64,
    /// The longest `spans` array of any log line: a line carries its own chain only.
    pub longest_span_chain: usize,
    pub node_cpu_s: f64,
    /// Outbox commit → build start of probe uploads made while the load is served, ms.
    pub loaded_latency_ms: Option<(f64, f64)>,
    /// Seconds from the node's start to the end of each stage.
    pub phases: Vec<(&'static str, f64)>,
    /// The batches the rail made.
    pub batches: Batches,
    /// How many firms the load's matters belong to ([`firms`]).
    pub firms: usize,
}

/// The node's pool, and the ceiling's client count.
pub const POOL: usize = 16;

/// How many firms the load's matters belong to: `BRIEFRAIL_BENCH_FIRMS`, 8 by default. With
/// more than one, matters of several firms wait for the node's holds at once, so every hold
/// goes to the firm the ledger's fair order names (`ops.fair_order`), as in an installation
/// that serves several firms; 1 measures without that choice.
pub fn firms() -> R<usize> {
    match std::env::var("BRIEFRAIL_BENCH_FIRMS") {
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(
                format!("BRIEFRAIL_BENCH_FIRMS={v:?}: a whole number of firms, at least 1").into(),
            ),
        },
        Err(_) => Ok(8),
    }
}

/// The binary users run: `target/release/briefrail`, next to this benchmark's own binary; or
/// `BRIEFRAIL_BENCH_BINARY`, another build's binary, to compare two builds on the same load (a
/// release's migrations keep every statement the previous release calls, so an older binary
/// serves this tree's schema).
pub fn binary() -> R<PathBuf> {
    if let Some(path) = std::env::var_os("BRIEFRAIL_BENCH_BINARY") {
        let b = PathBuf::from(path);
        if !b.is_file() {
            return Err(format!("BRIEFRAIL_BENCH_BINARY={}: no such file", b.display()).into());
        }
        println!("    (nodes run {})", b.display());
        return Ok(b);
    }
    let me = std::env::current_exe()?;
    let b = me
        .parent()
        .map(|d| d.join("briefrail"))
        .ok_or("no directory")?;
    if !b.exists() {
        return Err(format!(
            "{} is missing: run the benchmark with `cargo run --release -p briefrail-tools --bin briefrail-bench` after `cargo build --release`",
            b.display()
        )
        .into());
    }
    Ok(b)
}

/// A fresh database for one run, migrated.
pub(super) async fn fresh(server: &str, name: &str) -> R<(String, Pool)> {
    let url = admin::with_database(server, name)?;
    admin::drop_database(server, name).await?;
    admin::create_database_if_missing(&url).await?;
    db::migrate::run_pending(&url).await?;
    let pool = db::connect(&db::PoolOptions::new(url.clone()).size(10)).await?;
    Ok((url, pool))
}

/// A trial of a ledger change against the build before it, in one binary: SQL run on a run's
/// fresh database after its migrations (e.g. a migration's down.sql), named in the output. The
/// ceiling's databases are left as migrated: its raw SQL calls no ledger function.
pub(super) async fn trial_sql(pool: &Pool) -> R<()> {
    if let Ok(path) = std::env::var("BRIEFRAIL_BENCH_SQL") {
        let sql = std::fs::read_to_string(&path)
            .map_err(|e| format!("BRIEFRAIL_BENCH_SQL {path}: {e}"))?;
        println!("    (after the migrations: {path})");
        exec(pool, &sql).await?;
    }
    Ok(())
}

/// `n` matters of one firm (as if they had long been served), then one uploaded document each,
/// through the library (one transaction and one outbox event per upload), 8 at a time.
pub(super) async fn load(pool: &Pool, n: usize) -> R<(Uuid, Vec<Uuid>)> {
    let firm = Uuid::new_v4();
    let pairs = load_spread(pool, n, &[firm]).await?;
    Ok((firm, pairs.into_iter().map(|(_, m)| m).collect()))
}

/// `n` matters dealt round robin to `firms`, then one uploaded document each, as [`load`];
/// answers each matter with its firm.
pub(super) async fn load_spread(pool: &Pool, n: usize, firms: &[Uuid]) -> R<Vec<(Uuid, Uuid)>> {
    let (list, count) = (quoted(firms), firms.len());
    exec(
        pool,
        &format!(
            "INSERT INTO record.matters (firm_id, matter_id, title)
             SELECT (ARRAY[{list}]::uuid[])[1 + i % {count}], gen_random_uuid(), 'Bench ' || i || ' v. Mark'
               FROM generate_series(1, {n}) i"
        ),
    )
    .await?;
    #[derive(diesel::QueryableByName)]
    struct M {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        firm_id: Uuid,
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        matter_id: Uuid,
    }
    let pairs: Vec<(Uuid, Uuid)> = diesel::sql_query(format!(
        "SELECT firm_id, matter_id FROM record.matters WHERE firm_id IN ({list})"
    ))
    .load::<M>(&mut pool.get().await?)
    .await?
    .into_iter()
    .map(|m| (m.firm_id, m.matter_id))
    .collect();
    upload_each(pool, &pairs).await?;
    Ok(pairs)
}

/// One new document for each matter, each in its own transaction (8 at a time).
pub(super) async fn upload_each(pool: &Pool, matters: &[(Uuid, Uuid)]) -> R<()> {
    let mut tasks = Vec::new();
    for chunk in matters.chunks(matters.len().div_ceil(8).max(1)) {
        let (pool, chunk) = (pool.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            let mut c = pool.get().await?;
            for (firm, m) in chunk {
                upload(&mut c, firm, m).await?;
            }
            Ok::<_, briefrail::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

pub(super) async fn upload(
    c: &mut diesel_async::AsyncPgConnection,
    firm: Uuid,
    matter: Uuid,
) -> briefrail::Result<Uuid> {
    facts::add_document(
        c,
        NewDocument {
            document_id: Uuid::new_v4(),
            firm_id: firm,
            matter_id: matter,
            title: "Deposition of the witness".into(),
            dated: chrono::NaiveDate::from_ymd_opt(2026, 3, 14),
            body: "The witness saw the truck at noon. It was red. Nothing else was seen.".into(),
        },
    )
    .await
}

pub(super) struct NodeProc {
    pub(super) child: Child,
    log: PathBuf,
}

fn spawn(bin: &Path, url: &str, run: &Run, i: usize, dir: &Path, prefix: &str) -> R<NodeProc> {
    spawn_with(bin, url, run, i, dir, prefix, &[])
}

/// [`spawn`] with more settings (`BRIEFRAIL__…` variables) than those it always sets.
pub(super) fn spawn_with(
    bin: &Path,
    url: &str,
    run: &Run,
    i: usize,
    dir: &Path,
    prefix: &str,
    settings: &[(&str, &str)],
) -> R<NodeProc> {
    let log = dir.join(format!("node-{i}.log"));
    let out = std::fs::File::create(&log)?;
    let mut cmd = Command::new(bin);
    if let Some(lanes) = run.lanes {
        cmd.env("BRIEFRAIL__DATABASE__BATCH_LANES", lanes.to_string());
    }
    cmd.envs(settings.iter().copied());
    let child = cmd
        .arg("run")
        .env("BRIEFRAIL__DATABASE__URL", url)
        .env("BRIEFRAIL__DATABASE__POOL_SIZE", POOL.to_string())
        .env("BRIEFRAIL__NODE__ID", format!("bench-{i}"))
        .env("BRIEFRAIL__TRANSPORT__KIND", run.transport)
        .env("BRIEFRAIL__TRANSPORT__PREFIX", prefix)
        .env("BRIEFRAIL__BUILDER__KIND", "brief")
        .env(
            "BRIEFRAIL__BUILDERS__CONCURRENCY",
            run.concurrency.to_string(),
        )
        .env("BRIEFRAIL__HTTP__BIND", "127.0.0.1:0")
        .env("BRIEFRAIL__LOG__FORMAT", "json")
        .env("BRIEFRAIL__LOG__LEVEL", "info")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()?;
    Ok(NodeProc { child, log })
}

/// utime + stime of a process, seconds (`/proc/PID/stat`, clock ticks of 100 Hz).
fn cpu_s(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1;
            let f: Vec<&str> = after.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(f64::NAN)
}

/// The database clock, as seconds since the epoch.
async fn db_now(pool: &Pool) -> R<f64> {
    #[derive(diesel::QueryableByName)]
    struct T {
        #[diesel(sql_type = diesel::sql_types::Double)]
        t: f64,
    }
    Ok(
        diesel::sql_query("SELECT extract(epoch FROM clock_timestamp())::float8 AS t")
            .get_result::<T>(&mut pool.get().await?)
            .await?
            .t,
    )
}

/// Starts `run.nodes` node processes on `url`.
fn start_nodes(bin: &Path, url: &str, run: &Run, dir: &Path, prefix: &str) -> R<Vec<NodeProc>> {
    (0..run.nodes)
        .map(|i| spawn(bin, url, run, i, dir, prefix))
        .collect()
}

/// Stops nodes as an operator does (TERM) and waits for them.
fn stop_nodes(nodes: &mut [NodeProc]) {
    for n in nodes.iter() {
        let _ = Command::new("kill")
            .args(["-TERM", &n.child.id().to_string()])
            .status();
    }
    for n in nodes.iter_mut() {
        let _ = n.child.wait();
    }
}

/// Waits until `want` matters of `firms` (an SQL list) have a frame made since `t0` (the
/// database clock).
async fn until_served(
    pool: &Pool,
    nodes: &mut [NodeProc],
    firms: &str,
    t0: f64,
    want: usize,
    dir: &Path,
) -> R<()> {
    let started = Instant::now();
    let limit = Duration::from_secs(60 + want as u64 / 20);
    let landed = format!(
        "SELECT count(DISTINCT matter_id) AS n FROM ops.matter_frames
          WHERE firm_id IN {firms} AND created_at >= to_timestamp({t0})"
    );
    loop {
        if scalar(pool, &landed).await? as usize >= want {
            return Ok(());
        }
        for n in nodes.iter_mut() {
            if let Some(status) = n.child.try_wait()? {
                return Err(
                    format!("a node exited early ({status}); see {}", n.log.display()).into(),
                );
            }
        }
        if started.elapsed() > limit {
            return Err(format!(
                "not every matter was served within {limit:?}; logs in {}",
                dir.display()
            )
            .into());
        }
        // The count reads every frame of the firm: polled often, the harness itself would take
        // a share of the database it measures. The rate comes from the last frame's own time.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Serves `run.matters` matters with `run.nodes` node processes; measures. The matters are
/// served once first (not measured), as real matters have been: their job rows, runs, frames,
/// outbox and inbox rows exist when each gets the new document the measured round serves.
pub async fn serve(server: &str, run: &Run) -> R<Served> {
    let bin = binary()?;
    let name = format!("{}_e2e", admin::split_url(server)?.0);
    let (url, pool) = fresh(server, &name).await?;
    trial_sql(&pool).await?;
    let firm_ids: Vec<Uuid> = (0..firms()?).map(|_| Uuid::new_v4()).collect();
    let matters = load_spread(&pool, run.matters, &firm_ids).await?;
    // The load's firms, as the statements below name them; the probes are the first firm's.
    let firms = format!("({})", quoted(&firm_ids));
    let firm = firm_ids[0];
    let dir = std::env::temp_dir().join(format!("briefrail-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let prefix = format!("bench-{}", &Uuid::new_v4().simple().to_string()[..8]);
    let before = db_now(&pool).await?;
    let mut nodes = start_nodes(&bin, &url, run, &dir, &prefix)?;
    until_served(&pool, &mut nodes, &firms, before, run.matters, &dir).await?;
    stop_nodes(&mut nodes);
    upload_each(&pool, &matters).await?;
    exec(&pool, "CHECKPOINT; ANALYZE").await?;
    let profile = std::env::var("BRIEFRAIL_BENCH_PROFILE").is_ok_and(|v| v == "1");
    if profile {
        // Each new session of the node reads the setting; the counters start from here.
        exec(
            &pool,
            &format!(
                "ALTER DATABASE \"{name}\" SET track_functions = 'pl'; SELECT pg_stat_reset()"
            ),
        )
        .await?;
    }
    let t0 = db_now(&pool).await?;
    let mut nodes = start_nodes(&bin, &url, run, &dir, &prefix)?;
    // Probe uploads while the load is served: one new matter every 20 ms.
    let probes = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut c = pool.get().await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            for _ in 0..25 {
                let m = Uuid::new_v4();
                facts::create_matter(&mut c, firm, m, "Probe v. Latency").await?;
                ids.push(m);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok::<_, briefrail::Error>(ids)
        })
    };
    let want = run.matters + 25;
    until_served(&pool, &mut nodes, &firms, t0, want, &dir).await?;
    let cpu: f64 = nodes.iter().map(|n| cpu_s(n.child.id())).sum();
    #[derive(diesel::QueryableByName)]
    struct T {
        #[diesel(sql_type = diesel::sql_types::Double)]
        t: f64,
    }
    let probe_ids = probes.await??;
    // Every frame, the probes' too: the rate beside the loaded matters' own (see `phases`).
    let last_any: T = diesel::sql_query(format!(
        "SELECT extract(epoch FROM max(f.created_at))::float8 AS t
           FROM ops.matter_frames f WHERE f.firm_id IN {firms} AND f.created_at >= to_timestamp({t0})"
    ))
    .get_result(&mut pool.get().await?)
    .await?;
    let loaded_latency_ms = probe_latency(&pool, &probe_ids).await?;
    let phases = phases(&pool, t0, &firms, &probe_ids).await?;
    let batches = batches(&pool, t0, &firms).await?;
    // Stopped before the profile is read: a session reports its function counters when it
    // ends, or only ten seconds after it last did while it lives, which misses most of a run.
    stop_nodes(&mut nodes);
    if profile {
        print_function_times(&pool, run.matters).await?;
        print_timeline(&pool, t0, &firms).await?;
    }
    let mut bytes = 0u64;
    let mut longest = 0usize;
    for n in &nodes {
        let text = std::fs::read_to_string(&n.log)?;
        bytes += text.len() as u64;
        for line in text.lines() {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
                let chain = v
                    .get("spans")
                    .and_then(|s| s.as_array())
                    .map_or(0, |a| a.len());
                longest = longest.max(chain);
            }
        }
    }
    if run.transport == "amqp" {
        briefrail::transport::amqp::Topology::new(&prefix)
            .delete(&briefrail::config::Settings::defaults().transport.amqp_url)
            .await;
    }
    drop(pool);
    admin::drop_database(server, &name).await?;
    let _ = std::fs::remove_dir_all(&dir);
    // The rate is the loaded matters' own: their last frame. The probes start 300 ms in and
    // each waits the trigger's debounce, so in a run of about a second the last probe's frame
    // would bound the figure, not the load (it is reported beside it).
    let wall = phases
        .iter()
        .find(|(k, _)| *k == LAST_FRAME)
        .map_or(f64::NAN, |(_, t)| *t);
    Ok(Served {
        per_s: run.matters as f64 / wall,
        wall_s: wall,
        with_probes_per_s: want as f64 / (last_any.t - t0),
        log_bytes_per_matter: bytes as f64 / want as f64,
        longest_span_chain: longest,
        node_cpu_s: cpu,
        loaded_latency_ms,
        phases,
        batches,
        firms: firm_ids.len(),
    })
}

/// The phase the rate is measured to.
const LAST_FRAME: &str = "last frame";

/// Ids as an SQL list of literals (`'a','b'`); empty for none.
fn quoted(ids: &[Uuid]) -> String {
    ids.iter()
        .map(|m| format!("'{m}'"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Where a run's time went: seconds from the node's start (the same database clock as the
/// rate) to the first and the last event of each stage, for the loaded matters (not the probes).
async fn phases(pool: &Pool, t0: f64, firms: &str, probes: &[Uuid]) -> R<Vec<(&'static str, f64)>> {
    let not_probe = if probes.is_empty() {
        String::new()
    } else {
        format!(" AND matter_id NOT IN ({})", quoted(probes))
    };
    // The measured round's rows only: the first round's are older than its start.
    let loaded = |at: &str| format!("firm_id IN {firms}{not_probe} AND {at} >= to_timestamp({t0})");
    let inbox = |at: &str| {
        format!(
            "ops.consumed_events c JOIN ops.domain_event_outbox USING (event_id) WHERE {}",
            loaded(at)
        )
    };
    let stages = [
        (
            "node up",
            "min(started_at)",
            format!("ops.nodes WHERE started_at >= to_timestamp({t0})"),
        ),
        (
            "first published",
            "min(published_at)",
            format!("ops.domain_event_outbox WHERE {}", loaded("published_at")),
        ),
        ("first demand", "min(c.consumed_at)", inbox("c.consumed_at")),
        (
            "first claim",
            "min(started_at)",
            format!("ops.matter_frame_runs WHERE {}", loaded("started_at")),
        ),
        (
            "first frame",
            "min(created_at)",
            format!("ops.matter_frames WHERE {}", loaded("created_at")),
        ),
        (
            "last published",
            "max(published_at)",
            format!("ops.domain_event_outbox WHERE {}", loaded("published_at")),
        ),
        ("last demand", "max(c.consumed_at)", inbox("c.consumed_at")),
        (
            "last claim",
            "max(started_at)",
            format!("ops.matter_frame_runs WHERE {}", loaded("started_at")),
        ),
        (
            LAST_FRAME,
            "max(created_at)",
            format!("ops.matter_frames WHERE {}", loaded("created_at")),
        ),
    ];
    #[derive(diesel::QueryableByName)]
    struct T {
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Double>)]
        t: Option<f64>,
    }
    let mut out = Vec::new();
    for (name, agg, from) in stages {
        let sql = format!("SELECT extract(epoch FROM {agg})::float8 AS t FROM {from}");
        let t: T = diesel::sql_query(sql)
            .get_result(&mut pool.get().await?)
            .await?;
        out.push((name, t.t.map_or(f64::NAN, |t| t - t0)));
    }
    Ok(out)
}

/// The ledger's functions by the time spent in their own bodies in the measured round (the
/// statistics collector's `pg_stat_user_functions`, with `track_functions`), per served matter.
async fn print_function_times(pool: &Pool, matters: usize) -> R<()> {
    #[derive(diesel::QueryableByName)]
    struct F {
        #[diesel(sql_type = diesel::sql_types::Text)]
        name: String,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        calls: i64,
        #[diesel(sql_type = diesel::sql_types::Double)]
        self_ms: f64,
        #[diesel(sql_type = diesel::sql_types::Double)]
        total_ms: f64,
    }
    // The node's sessions have ended (see the caller); the last report of each is in.
    let rows: Vec<F> = diesel::sql_query(
        "SELECT funcname::text AS name, calls, self_time AS self_ms, total_time AS total_ms
           FROM pg_stat_user_functions ORDER BY self_time DESC LIMIT 12",
    )
    .load(&mut pool.get().await?)
    .await?;
    println!("    functions by own time (µs per served matter: own / with callees, calls):");
    for f in rows {
        println!(
            "      {:<22} {:>7.1} {:>7.1} {:>8}",
            f.name,
            f.self_ms * 1000.0 / matters as f64,
            f.total_ms * 1000.0 / matters as f64,
            f.calls
        );
    }
    Ok(())
}

/// Per quarter second of the measured round: events published, demands applied, claims made
/// and frames landed, so a stage that falls behind shows where.
async fn print_timeline(pool: &Pool, t0: f64, firms: &str) -> R<()> {
    #[derive(diesel::QueryableByName)]
    struct Q {
        #[diesel(sql_type = diesel::sql_types::Integer)]
        q: i32,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        published: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        demands: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        claims: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        frames: i64,
    }
    let bucket = |col: &str| format!("floor((extract(epoch FROM {col}) - {t0}) * 4)::int");
    let rows: Vec<Q> = diesel::sql_query(format!(
        "WITH p AS (SELECT {pb} AS q, count(*) AS n FROM ops.domain_event_outbox
                     WHERE firm_id IN {firms} AND published_at >= to_timestamp({t0}) GROUP BY 1),
              d AS (SELECT {db} AS q, count(*) AS n FROM ops.consumed_events c
                      JOIN ops.domain_event_outbox o USING (event_id)
                     WHERE o.firm_id IN {firms} AND c.consumed_at >= to_timestamp({t0}) GROUP BY 1),
              c AS (SELECT {cb} AS q, count(*) AS n FROM ops.matter_frame_runs
                     WHERE firm_id IN {firms} AND started_at >= to_timestamp({t0}) GROUP BY 1),
              f AS (SELECT {fb} AS q, count(*) AS n FROM ops.matter_frames
                     WHERE firm_id IN {firms} AND created_at >= to_timestamp({t0}) GROUP BY 1),
              qs AS (SELECT q FROM p UNION SELECT q FROM d UNION SELECT q FROM c UNION SELECT q FROM f)
         SELECT qs.q, coalesce(p.n, 0) AS published, coalesce(d.n, 0) AS demands,
                coalesce(c.n, 0) AS claims, coalesce(f.n, 0) AS frames
           FROM qs LEFT JOIN p USING (q) LEFT JOIN d USING (q) LEFT JOIN c USING (q)
                LEFT JOIN f USING (q)
          ORDER BY qs.q",
        pb = bucket("published_at"),
        db = bucket("c.consumed_at"),
        cb = bucket("started_at"),
        fb = bucket("created_at"),
    ))
    .load(&mut pool.get().await?)
    .await?;
    println!("    per 0.25 s from start: published / demands / claims / frames");
    for r in rows {
        println!(
            "      {:>5.2} s {:>6} {:>6} {:>6} {:>6}",
            r.q as f64 / 4.0,
            r.published,
            r.demands,
            r.claims,
            r.frames
        );
    }
    Ok(())
}

/// The batches the rail made in the measured round, read back from the database: the inbox
/// rows and the frames one transaction wrote share its id (`xmin`: neither is updated after),
/// and the job rows one claim transaction claimed share its `claimed_snapshot` (two claim
/// transactions that took the same snapshot count as one, so the claim size is an upper
/// bound).
#[derive(Debug, Clone, Copy, diesel::QueryableByName)]
pub struct Batches {
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub inbox: f64,
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub claim: f64,
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub commit: f64,
    /// The mean frame body, bytes of its text.
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub body_bytes: f64,
}

async fn batches(pool: &Pool, t0: f64, firms: &str) -> R<Batches> {
    let since = format!("to_timestamp({t0})");
    Ok(diesel::sql_query(format!(
        "SELECT (SELECT count(*)::float8 / greatest(count(DISTINCT c.xmin::text), 1)
                   FROM ops.consumed_events c JOIN ops.domain_event_outbox o USING (event_id)
                  WHERE o.firm_id IN {firms} AND c.consumed_at >= {since}) AS inbox,
                (SELECT count(*)::float8 / greatest(count(DISTINCT claimed_snapshot), 1)
                   FROM ops.matter_frame_jobs WHERE firm_id IN {firms} AND claimed_at >= {since}) AS claim,
                (SELECT count(*)::float8 / greatest(count(DISTINCT xmin::text), 1)
                   FROM ops.matter_frames WHERE firm_id IN {firms} AND created_at >= {since}) AS commit,
                (SELECT coalesce(avg(length(body::text)), 0)::float8
                   FROM ops.matter_frames WHERE firm_id IN {firms} AND created_at >= {since}) AS body_bytes"
    ))
    .get_result(&mut pool.get().await?)
    .await?)
}

/// p50 and p99 of outbox commit → build start of the probe matters.
async fn probe_latency(pool: &Pool, ids: &[Uuid]) -> R<Option<(f64, f64)>> {
    #[derive(diesel::QueryableByName)]
    struct L {
        #[diesel(sql_type = diesel::sql_types::Double)]
        ms: f64,
    }
    let list = quoted(ids);
    if list.is_empty() {
        return Ok(None);
    }
    let mut l: Vec<f64> = diesel::sql_query(format!(
        "SELECT (extract(epoch FROM (min(r.started_at) - min(o.created_at))) * 1000)::float8 AS ms
           FROM ops.domain_event_outbox o JOIN ops.matter_frame_runs r USING (firm_id, matter_id)
          WHERE o.matter_id IN ({list}) GROUP BY o.matter_id"
    ))
    .load::<L>(&mut pool.get().await?)
    .await?
    .into_iter()
    .map(|l| l.ms)
    .collect();
    l.sort_by(|a, b| a.total_cmp(b));
    Ok(Some((super::pct(&l, 0.5), super::pct(&l, 0.99))))
}

/// The raw ceiling: `conns` clients, each transaction one claim and one CAS (BEGIN, the two
/// statements as raw SQL, COMMIT: what pgbench would run), for `secs` seconds, each client on
/// its own 64 rows.
pub async fn ceiling(server: &str, conns: usize, secs: f64) -> R<f64> {
    let name = format!("{}_ceiling", admin::split_url(server)?.0);
    let (url, pool) = fresh(server, &name).await?;
    let firm = Uuid::new_v4();
    exec(
        &pool,
        &format!(
            "INSERT INTO ops.matter_frame_jobs (firm_id, matter_id, requested_generation)
             SELECT '{firm}', gen_random_uuid(), 1 FROM generate_series(1, {})",
            conns * 64
        ),
    )
    .await?;
    let ms = job_matters(&pool, firm).await?;
    drop(pool);
    clients_rate(server, &name, conns, &ms, secs, |mine, deadline| {
        per_transaction(url.clone(), firm, mine, deadline)
    })
    .await
}

/// One client of the per-transaction ceiling: claim → CAS transactions over its own matters
/// until `deadline`; answers how many it made.
async fn per_transaction(
    url: String,
    firm: Uuid,
    mine: Vec<Uuid>,
    deadline: Instant,
) -> Result<u64, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    // The seed's two statements, as raw SQL: the conditional upsert that claims, and the
    // compare-and-swap on the token it returned.
    let claim = client
        .prepare(
            "INSERT INTO ops.matter_frame_jobs AS j (firm_id, matter_id, run_status, requested_generation,
                                                     claimed_generation, claimed_at, lease_expires_at)
             VALUES ($1, $2, 'running', 1, 1, now(), now() + interval '60 seconds')
             ON CONFLICT (firm_id, matter_id) DO UPDATE SET
                 run_status = 'running', requested_generation = j.requested_generation + 1,
                 claimed_generation = j.requested_generation + 1, claimed_at = now(),
                 lease_expires_at = now() + interval '60 seconds'
              WHERE j.run_status <> 'running' OR j.lease_expires_at < now()
             RETURNING claimed_generation",
        )
        .await?;
    let cas = client
        .prepare(
            "UPDATE ops.matter_frame_jobs SET run_status = 'idle', landed_generation = $3
              WHERE firm_id = $1 AND matter_id = $2 AND claimed_generation = $3
                AND run_status = 'running'",
        )
        .await?;
    let mut n = 0u64;
    for m in mine.iter().cycle() {
        if Instant::now() > deadline {
            break;
        }
        client.batch_execute("BEGIN").await?;
        let token: i64 = client.query_one(&claim, &[&firm, m]).await?.get(0);
        tokio_postgres::Client::execute(&client, &cas, &[&firm, m, &token]).await?;
        client.batch_execute("COMMIT").await?;
        n += 1;
    }
    Ok(n)
}

/// The matters of `firm` that have a job row.
pub(super) async fn job_matters(pool: &Pool, firm: Uuid) -> R<Vec<Uuid>> {
    #[derive(diesel::QueryableByName)]
    struct M {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        matter_id: Uuid,
    }
    Ok(diesel::sql_query(format!(
        "SELECT matter_id FROM ops.matter_frame_jobs WHERE firm_id = '{firm}'"
    ))
    .load::<M>(&mut pool.get().await?)
    .await?
    .into_iter()
    .map(|m| m.matter_id)
    .collect())
}

/// A ceiling's reading: `conns` clients at once for `secs` seconds, client `w` on every
/// `conns`-th of `matters`, each answering how many matters it served by the deadline it is
/// handed. Answers their total per second, and drops the database `name` they ran in.
pub(super) async fn clients_rate<F, Fut>(
    server: &str,
    name: &str,
    conns: usize,
    matters: &[Uuid],
    secs: f64,
    client: F,
) -> R<f64>
where
    F: Fn(Vec<Uuid>, Instant) -> Fut,
    Fut: std::future::Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'static,
{
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let tasks: Vec<_> = (0..conns)
        .map(|w| {
            let mine = matters.iter().skip(w).step_by(conns).copied().collect();
            tokio::spawn(client(mine, deadline))
        })
        .collect();
    let mut served = 0u64;
    for t in tasks {
        served += t.await??;
    }
    let rate = served as f64 / start.elapsed().as_secs_f64();
    admin::drop_database(server, name).await?;
    Ok(rate)
}

/// The raw ceiling read just before and just after a run.
#[derive(Debug, Clone, Copy)]
pub struct Ceiling {
    pub before: f64,
    pub after: f64,
}

impl Ceiling {
    /// What the run is compared with.
    pub fn mean(&self) -> f64 {
        (self.before + self.after) / 2.0
    }
}

/// The JSON entry of one run.
pub fn entry(
    run: &Run,
    s: &Served,
    c: Ceiling,
    batched: f64,
    peer: super::peer::PeerRun,
) -> serde_json::Value {
    let ceiling = c.mean();
    json!({
        "transport": run.transport,
        "matters": run.matters,
        "builders_concurrency": run.concurrency,
        "nodes": run.nodes,
        "batch_lanes": run.lanes,
        "firms": s.firms,
        "matters_per_s": s.per_s,
        "peer_jobs_per_s": peer.per_s,
        "peer_jobs_per_s_excl_startup": peer.per_s_excl_startup,
        "vs_peer": s.per_s / peer.per_s,
        "ceiling_tps": ceiling,
        "ceiling_tps_before": c.before,
        "ceiling_tps_after": c.after,
        "ratio": s.per_s / ceiling,
        "batched_ceiling_matters_per_s": batched,
        "vs_batched_ceiling": s.per_s / batched,
        "batch_sizes": {
            "inbox": s.batches.inbox,
            "claim": s.batches.claim,
            "commit": s.batches.commit,
        },
        "frame_body_bytes": s.batches.body_bytes,
        "seconds": s.wall_s,
        "with_probes_matters_per_s": s.with_probes_per_s,
        "with_probes_ratio": s.with_probes_per_s / ceiling,
        "log_bytes_per_matter": s.log_bytes_per_matter,
        "longest_span_chain": s.longest_span_chain,
        "node_cpu_s": s.node_cpu_s,
        "phases_s": s.phases.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "latency_while_serving_ms": s.loaded_latency_ms.map(|(p50, p99)| json!({"p50": p50, "p99": p99})),
    })
}
