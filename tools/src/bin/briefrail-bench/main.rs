//! `cargo run --release --bin briefrail-bench`: every figure next to a baseline measured in
//! the same run (raw SQL through tokio-postgres, a raw lapin publisher), printed as a table and
//! written to `bench/results.json`. Absolute times drift on a shared machine; ratios do not.
//! `briefrail-bench retention` runs only the retention measurement ([`retention`]; its size is
//! `BRIEFRAIL_BENCH_RETENTION_ROWS`, default 10,000,000) and updates its entry in the file;
//! `briefrail-bench e2e` only the end-to-end runs of the release binary ([`e2e`]; which runs:
//! `BRIEFRAIL_BENCH_E2E`); `briefrail-bench fair` only the multi-firm fairness runs ([`fair`]);
//! `briefrail-bench idle` only the idle latency on the user's path ([`idle`]); `briefrail-bench
//! rebuilds` only the claim and commit loop over matters rebuilt often ([`rebuilds`]);
//! `briefrail-bench core` everything but retention.

mod batched;
mod e2e;
mod fair;
mod idle;
mod peer;
mod rebuilds;
mod retention;

use std::sync::Arc;
use std::time::{Duration, Instant};

use briefrail::actors::Nudge;
use briefrail::builders::{BuildContext, Builder};
use briefrail::config::{Settings, TransportKind};
use briefrail::db::{self, Pool, admin};
use briefrail::ledger::{Frame, facts, outbox};
use briefrail::metrics::Metrics;
use briefrail::node::Node;
use briefrail::secret::SecretUrl;
use briefrail::transport::amqp::{self, AmqpOptions, Topology, message, relay};
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use serde_json::json;
use uuid::Uuid;

/// Builds nothing, at once (or after `delay`).
struct NoOp(Duration);

impl Builder for NoOp {
    fn build<'a>(&'a self, _ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
        async move {
            if !self.0.is_zero() {
                tokio::time::sleep(self.0).await;
            }
            Ok(Frame::new(json!({})))
        }
        .boxed_local()
    }
}

type R<T> = Result<T, Box<dyn std::error::Error>>;

fn settings(url: &str) -> Settings {
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(url.to_owned());
    s.trigger.debounce_ms = 0;
    s.trigger.max_wait_ms = 0;
    s.sweeper.interval_seconds = 3600.0;
    s.relay.poll_ms = 1000;
    s
}

/// A node nudged by hand (no transport), sweeping only when asked.
async fn node(
    url: &str,
    pool: &Pool,
    conns: usize,
    builder: Arc<dyn Builder>,
    tweak: impl FnOnce(&mut Settings),
) -> R<Node> {
    let mut s = settings(url);
    s.builders.concurrency = conns;
    tweak(&mut s);
    Ok(Node::builder(Arc::new(s), builder)
        .pool(pool.clone())
        .without_transport()
        .without_periodic_sweeper()
        .start()
        .await?)
}

async fn exec(pool: &Pool, sql: &str) -> R<()> {
    pool.get().await?.batch_execute(sql).await?;
    Ok(())
}

async fn scalar(pool: &Pool, sql: &str) -> R<i64> {
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    Ok(diesel::sql_query(sql)
        .get_result::<N>(&mut pool.get().await?)
        .await?
        .n)
}

async fn until(pool: &Pool, sql: &str, limit: Duration) -> R<()> {
    let deadline = Instant::now() + limit;
    while scalar(pool, sql).await? != 0 {
        if Instant::now() > deadline {
            return Err(format!("timed out: {sql}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Raw baseline: the same statements (claim; BEGIN, commit CAS, `ops.insert_frame`, COMMIT) from
/// tokio-postgres with prepared statements, `conns` connections, over `matters`.
async fn raw_cycles(url: &str, conns: usize, matters: &[(Uuid, Uuid)], rounds: usize) -> R<f64> {
    let mut handles = Vec::new();
    let per = matters.len() / conns;
    let start = Instant::now();
    for w in 0..conns {
        let mine: Vec<(Uuid, Uuid)> = matters[w * per..(w + 1) * per].to_vec();
        let url = url.to_owned();
        handles.push(tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
            tokio::spawn(conn);
            let claim = client
                .prepare("SELECT ops.claim($1, $2, 60, $3, 'raw', NULL, '{}', false, 5)")
                .await?;
            let cas = client
                .prepare("SELECT ops.commit_claim($1, $2, $3, $4, $5, 'raw')")
                .await?;
            let frame = client
                .prepare("SELECT ops.insert_frame($1, $2, $3, $4, '{}')")
                .await?;
            let mut n = 0u64;
            for _ in 0..rounds {
                for (f, m) in &mine {
                    let run = Uuid::new_v4();
                    let token: Option<i64> = client.query_one(&claim, &[f, m, &run]).await?.get(0);
                    let Some(token) = token else { continue };
                    client.batch_execute("BEGIN").await?;
                    let _: Option<i64> = client
                        .query_one(&cas, &[f, m, &token, &run, &Uuid::new_v4()])
                        .await?
                        .get(0);
                    let _: Option<String> = client
                        .query_one(&frame, &[f, m, &token, &run])
                        .await?
                        .get(0);
                    client.batch_execute("COMMIT").await?;
                    n += 1;
                }
            }
            Ok::<u64, Box<dyn std::error::Error + Send + Sync>>(n)
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await?.map_err(|e| e.to_string())?;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// Through the full runtime: demand every matter (one statement), nudge each, wait for all to
/// land; repeated `rounds` times.
async fn runtime_cycles(
    url: &str,
    pool: &Pool,
    conns: usize,
    firm: Uuid,
    matters: &[(Uuid, Uuid)],
    rounds: usize,
) -> R<f64> {
    let n = node(url, pool, conns, Arc::new(NoOp(Duration::ZERO)), |_| {}).await?;
    let start = Instant::now();
    for _ in 0..rounds {
        exec(pool, &format!("UPDATE ops.matter_frame_jobs SET requested_generation = requested_generation + 1 WHERE firm_id = '{firm}'")).await?;
        for (f, m) in matters {
            n.nudge(Nudge::matter(*f, *m));
        }
        until(pool, &format!("SELECT count(*) AS n FROM ops.matter_frame_jobs WHERE firm_id = '{firm}' AND (landed_generation < requested_generation OR run_status = 'running')"), Duration::from_secs(120)).await?;
    }
    let rate = (matters.len() * rounds) as f64 / start.elapsed().as_secs_f64();
    n.shutdown_within(Duration::from_secs(1)).await;
    Ok(rate)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Idle latency, fact commit to build start: percentiles over `n` facts after [`WARM_UP`]
/// facts, and the slowest of those first facts apart.
struct Latency {
    p50: f64,
    p99: f64,
    max: f64,
    /// The slowest of the first [`WARM_UP`] facts after the node started: each new pooled
    /// session compiles the transitions on its first call of each (docs/performance.md).
    cold_max: f64,
    /// Every measured fact, stage by stage, slowest first.
    stages: Vec<Stages>,
}

/// Facts served before the measured ones: a node that just started serves its first facts on
/// sessions that compile each transition on their first call (a few milliseconds each), which
/// a node at idle has long done. They are reported apart (`cold_max`), never left out unsaid.
const WARM_UP: usize = 20;

/// Fact commit → build start (both read from the database clock: the fact's transaction just
/// before its COMMIT, the run's start), `n` events on distinct matters, one at a time, after
/// [`WARM_UP`] more.
async fn latency(url: &str, pool: &Pool, kind: TransportKind, n: usize) -> R<Latency> {
    let prefix = format!("bench-{}", &Uuid::new_v4().simple().to_string()[..8]);
    let mut s = settings(url);
    s.transport.prefix = prefix.clone();
    s.transport.kind = kind;
    s.relay.poll_ms = 1000;
    s.relay.batch = 100;
    s.builders.concurrency = 4;
    // The node as users run it: its own transport, started by the node.
    let nd = Node::builder(Arc::new(s.clone()), Arc::new(NoOp(Duration::ZERO)))
        .pool(pool.clone())
        .without_periodic_sweeper()
        .start()
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let firm = Uuid::new_v4();
    let mut c = pool.get().await?;
    let mut lat = Vec::new();
    let mut facts = Vec::new();
    for _ in 0..WARM_UP + n {
        let matter = Uuid::new_v4();
        // The fact's transaction reads the clock just before its COMMIT: the latency counts
        // the commit itself (an outbox row's created_at is its transaction's start instead).
        let committing: f64 = c
            .transaction(async move |tx| {
                facts::create_matter(tx, firm, matter, "Bench v. Mark").await?;
                #[derive(diesel::QueryableByName)]
                struct T {
                    #[diesel(sql_type = diesel::sql_types::Double)]
                    t: f64,
                }
                let t: T = diesel::sql_query(
                    "SELECT extract(epoch FROM clock_timestamp())::float8 * 1000 AS t",
                )
                .get_result(tx)
                .await?;
                Ok::<_, briefrail::Error>(t.t)
            })
            .await?;
        // When the COMMIT came back, on the same host's clock: a slow flush shows here.
        let committed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
            - committing;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            #[derive(diesel::QueryableByName)]
            struct L {
                #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Double>)]
                ms: Option<f64>,
            }
            let l: L = diesel::sql_query(format!(
                "SELECT (extract(epoch FROM r.started_at) * 1000)::float8 - {committing} AS ms
                   FROM ops.matter_frame_runs r WHERE r.matter_id = '{matter}'"
            ))
            .get_result(&mut c)
            .await
            .unwrap_or(L { ms: None });
            if let Some(ms) = l.ms {
                lat.push(ms);
                facts.push((matter, committing, committed));
                break;
            }
            if Instant::now() > deadline {
                return Err("a nudge never arrived".into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    nd.shutdown_within(Duration::from_secs(1)).await;
    if kind == TransportKind::Amqp {
        Topology::new(&prefix).delete(&s.transport.amqp_url).await;
    }
    let by_stage = stages(pool, &facts[WARM_UP.min(facts.len())..]).await?;
    // `lat` keeps the warm-up facts; the measured ones follow them.
    let mut measured = lat.split_off(WARM_UP.min(lat.len()));
    let cold_max = lat.iter().copied().fold(f64::NAN, f64::max);
    measured.sort_by(|a, b| a.total_cmp(b));
    Ok(Latency {
        p50: pct(&measured, 0.5),
        p99: pct(&measured, 0.99),
        max: *measured.last().unwrap_or(&f64::NAN),
        cold_max,
        stages: by_stage,
    })
}

/// Where a fact's time went, from what the ledger recorded, in ms after the fact's commit: its
/// event marked published (the relay's mark, after the broker's confirm; the embedded drain's
/// own transaction), its inbox row (the trigger's transaction), its run (the claim: the fact's
/// whole latency). On the broker the mark may follow the trigger: the confirm and the delivery
/// race.
#[derive(Debug, Clone, Copy)]
struct Stages {
    claimed: f64,
    /// The fact's own COMMIT, as its client saw it return.
    commit: f64,
    published: f64,
    consumed: f64,
}

/// The stages of every one of `facts` (matter, commit time in ms since the epoch, how long its
/// COMMIT took to come back), slowest first.
async fn stages(pool: &Pool, facts: &[(Uuid, f64, f64)]) -> R<Vec<Stages>> {
    #[derive(diesel::QueryableByName)]
    struct S {
        #[diesel(sql_type = diesel::sql_types::Double)]
        claimed: f64,
        #[diesel(sql_type = diesel::sql_types::Double)]
        commit: f64,
        #[diesel(sql_type = diesel::sql_types::Double)]
        published: f64,
        #[diesel(sql_type = diesel::sql_types::Double)]
        consumed: f64,
    }
    if facts.is_empty() {
        return Ok(Vec::new());
    }
    let values: Vec<String> = facts
        .iter()
        .map(|(m, t, c)| format!("('{m}'::uuid, {t}::float8, {c}::float8)"))
        .collect();
    let ms = |col: &str| format!("(extract(epoch FROM {col}) * 1000)::float8 - f.t");
    let rows: Vec<S> = diesel::sql_query(format!(
        "SELECT {claimed} AS claimed, f.c AS commit, coalesce({published}, 'NaN') AS published,
                coalesce({consumed}, 'NaN') AS consumed
           FROM (VALUES {v}) AS f(matter, t, c)
           JOIN ops.matter_frame_runs r ON r.matter_id = f.matter
           JOIN ops.domain_event_outbox o ON o.matter_id = f.matter
           LEFT JOIN LATERAL (SELECT min(c.consumed_at) AS at FROM ops.consumed_events c
                               WHERE c.event_id = o.event_id) c ON true
          ORDER BY 1 DESC",
        claimed = ms("r.started_at"),
        published = ms("o.published_at"),
        consumed = ms("c.at"),
        v = values.join(", ")
    ))
    .load(&mut pool.get().await?)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Stages {
            claimed: r.claimed,
            commit: r.commit,
            published: r.published,
            consumed: r.consumed,
        })
        .collect())
}

/// Where the facts' time went: the median and the 99th percentile of each stage's own share
/// (its COMMIT coming back, commit to inbox, inbox to claim), printed with one line for each of
/// the three slowest facts; returned for `bench/results.json`.
fn print_stages(all: &[Stages]) -> serde_json::Value {
    let share = |f: &dyn Fn(&Stages) -> f64| {
        let mut v: Vec<f64> = all.iter().map(f).filter(|x| x.is_finite()).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        (pct(&v, 0.5), pct(&v, 0.99))
    };
    let commit = share(&|s| s.commit);
    let inbox = share(&|s| s.consumed);
    let claim = share(&|s| s.claimed - s.consumed);
    println!(
        "    stages p50 / p99: its COMMIT back {:.1} / {:.1}, commit to inbox {:.1} / {:.1}, inbox to claim {:.1} / {:.1} ms",
        commit.0, commit.1, inbox.0, inbox.1, claim.0, claim.1
    );
    for s in all.iter().take(3) {
        println!(
            "    slow fact, claimed {:.1} ms after it committed: its COMMIT back {:.1}, published {:.1}, inbox {:.1} ms",
            s.claimed, s.commit, s.published, s.consumed
        );
    }
    json!({
        "commit_back": {"p50": commit.0, "p99": commit.1},
        "commit_to_inbox": {"p50": inbox.0, "p99": inbox.1},
        "inbox_to_claim": {"p50": claim.0, "p99": claim.1},
    })
}

/// Relay (lease rows, publish with confirms, mark) against a raw lapin publisher with the same
/// confirm window. Four alternating rounds of `n` events (raw, relay, raw, relay), so a queue
/// warming up favours neither; the best round of each is reported.
async fn relay_rates(url: &str, pool: &Pool, n: usize, window: i64) -> R<(f64, f64)> {
    let mut s = settings(url);
    s.transport.prefix = format!("bench-{}", &Uuid::new_v4().simple().to_string()[..8]);
    s.relay.batch = window as u32;
    let topo = Topology::new(&s.transport.prefix);
    let conn = amqp::connect(&s.transport.amqp_url, "bench-relay").await?;
    let ch = conn.create_channel().await?;
    ch.confirm_select(Default::default()).await?;
    topo.declare(&ch).await?;
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut opts = AmqpOptions::from_settings(&s, pool.clone(), Arc::new(Metrics::default()));
    opts.relay_batch = window;
    let (mut best_raw, mut best_ours) = (0f64, 0f64);
    for _ in 0..2 {
        exec(pool, &format!(
            "INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name)
             SELECT gen_random_uuid(), '{firm}', '{matter}', 'brief.requested' FROM generate_series(1, {n})"
        ))
        .await?;
        // Raw: the same messages, `window` publishes then all their confirms.
        let rows = {
            let mut c = pool.get().await?;
            outbox::lock_unpublished(&mut c, n as i64).await?
        };
        let start = Instant::now();
        for chunk in rows.chunks(window as usize) {
            let mut confirms = Vec::with_capacity(chunk.len());
            for r in chunk {
                let (body, props) = message::encode(&r.envelope());
                confirms.push(
                    ch.basic_publish(
                        topo.events_exchange.as_str().into(),
                        r.event_name.as_str().into(),
                        lapin::options::BasicPublishOptions {
                            mandatory: true,
                            ..Default::default()
                        },
                        &body,
                        props,
                    )
                    .await?,
                );
            }
            for c in confirms {
                c.await?;
            }
        }
        best_raw = best_raw.max(n as f64 / start.elapsed().as_secs_f64());
        ch.queue_purge(topo.trigger_queue.as_str().into(), Default::default())
            .await?;
        // Ours: the relay's own batch loop over the same rows.
        let start = Instant::now();
        relay::drain(&ch, &opts).await?;
        best_ours = best_ours.max(n as f64 / start.elapsed().as_secs_f64());
        ch.queue_purge(topo.trigger_queue.as_str().into(), Default::default())
            .await?;
    }
    topo.delete(&s.transport.amqp_url).await;
    Ok((best_ours, best_raw))
}

/// Builds caused by a burst of `n` demands on one matter (build time 50 ms, default debounce).
async fn coalescing(url: &str, pool: &Pool, n: usize) -> R<i64> {
    let nd = node(
        url,
        pool,
        4,
        Arc::new(NoOp(Duration::from_millis(50))),
        |s| {
            s.trigger.debounce_ms = 250;
            s.trigger.max_wait_ms = 2000;
        },
    )
    .await?;
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = pool.get().await?;
    for _ in 0..n {
        briefrail::ledger::transitions::demand(&mut c, firm, matter).await?;
        nd.nudge(Nudge::matter(firm, matter));
    }
    until(pool, &format!("SELECT count(*) AS n FROM ops.matter_frame_jobs WHERE matter_id = '{matter}' AND (landed_generation < requested_generation OR run_status = 'running')"), Duration::from_secs(60)).await?;
    nd.shutdown_within(Duration::from_secs(1)).await;
    scalar(
        pool,
        &format!("SELECT count(*) AS n FROM ops.matter_frame_runs WHERE matter_id = '{matter}'"),
    )
    .await
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// Resident memory with `n` matters demanded once: at the peak of live matter actors.
async fn scale(url: &str, pool: &Pool, n: usize) -> R<(f64, f64, usize)> {
    let before = rss_mib();
    let nd = node(url, pool, 8, Arc::new(NoOp(Duration::ZERO)), |s| {
        s.trigger.idle_seconds = 600.0
    })
    .await?;
    let firm = Uuid::new_v4();
    exec(
        pool,
        &format!(
            "INSERT INTO ops.matter_frame_jobs (firm_id, matter_id, requested_generation)
         SELECT '{firm}', gen_random_uuid(), 1 FROM generate_series(1, {n})"
        ),
    )
    .await?;
    #[derive(diesel::QueryableByName)]
    struct M {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        matter_id: Uuid,
    }
    let ms: Vec<M> = diesel::sql_query(format!(
        "SELECT matter_id FROM ops.matter_frame_jobs WHERE firm_id = '{firm}'"
    ))
    .load(&mut pool.get().await?)
    .await?;
    for m in &ms {
        nd.nudge(Nudge::matter(firm, m.matter_id));
    }
    until(pool, &format!("SELECT count(*) AS n FROM ops.matter_frame_jobs WHERE firm_id = '{firm}' AND (landed_generation < requested_generation OR run_status = 'running')"), Duration::from_secs(600)).await?;
    let actors = nd.actor_count().await;
    let peak = rss_mib();
    nd.shutdown_within(Duration::from_secs(1)).await;
    Ok((before, peak, actors))
}

/// Median time of the sweep and reconcile statements with `n` job rows.
async fn big_table(pool: &Pool, n: usize) -> R<(f64, f64)> {
    let firm = Uuid::new_v4();
    exec(pool, &format!(
        "INSERT INTO ops.matter_frame_jobs (firm_id, matter_id, requested_generation, claimed_generation, landed_generation, run_status, claimed_at)
         SELECT '{firm}', gen_random_uuid(), 3, 3, 3, 'idle', ops.now() - interval '1 hour' FROM generate_series(1, {n});
         UPDATE ops.matter_frame_jobs SET run_status = 'running', claimed_at = ops.now() - interval '2 hours',
                lease_seconds = 10800, lease_expires_at = ops.now() + interval '1 hour'
          WHERE firm_id = '{firm}' AND matter_id IN (SELECT matter_id FROM ops.matter_frame_jobs WHERE firm_id = '{firm}' LIMIT 50);
         UPDATE ops.matter_frame_jobs SET requested_generation = 4, updated_at = ops.now() - interval '1 hour'
          WHERE firm_id = '{firm}' AND run_status = 'idle' AND matter_id IN (SELECT matter_id FROM ops.matter_frame_jobs WHERE firm_id = '{firm}' AND run_status = 'idle' LIMIT 50);
         ANALYZE ops.matter_frame_jobs;"
    ))
    .await?;
    retention::sweep_and_reconcile_ms(pool).await
}

/// What was measured before, so a partial run (`retention`) updates only its own entries.
fn earlier_results() -> serde_json::Map<String, serde_json::Value> {
    std::fs::read_to_string("bench/results.json")
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn write_results(results: serde_json::Map<String, serde_json::Value>) -> R<()> {
    std::fs::create_dir_all("bench")?;
    std::fs::write(
        "bench/results.json",
        serde_json::to_string_pretty(&serde_json::Value::Object(results))?,
    )?;
    println!("\nwritten: bench/results.json");
    Ok(())
}

/// The runs of the end-to-end section: `BRIEFRAIL_BENCH_E2E` =
/// `transport:matters:concurrency:nodes[:lanes],...` picks some; by default both transports at
/// 2,000 and 10,000 matters, `builders.concurrency` 1, 4, 8 and 32, two nodes, and amqp at
/// 10,000 with `database.batch_lanes` 1 and 4 beside the default.
fn e2e_runs() -> R<Vec<e2e::Run>> {
    let spec = std::env::var("BRIEFRAIL_BENCH_E2E").unwrap_or_else(|_| {
        let mut v = Vec::new();
        for t in ["amqp", "postgres"] {
            v.push(format!("{t}:2000:8:1"));
            v.push(format!("{t}:10000:8:1"));
            for c in [1, 4, 32] {
                v.push(format!("{t}:2000:{c}:1"));
            }
            v.push(format!("{t}:2000:8:2"));
        }
        for lanes in [1, 4] {
            v.push(format!("amqp:10000:8:1:{lanes}"));
        }
        v.join(",")
    });
    spec.split(',')
        .map(|r| {
            let f: Vec<&str> = r.split(':').collect();
            let bad = || {
                format!(
                    "BRIEFRAIL_BENCH_E2E: {r:?} is not transport:matters:concurrency:nodes[:lanes]"
                )
            };
            if !(4..=5).contains(&f.len()) {
                return Err(bad().into());
            }
            Ok(e2e::Run {
                transport: match f[0] {
                    "amqp" => "amqp",
                    "postgres" => "postgres",
                    _ => return Err(format!("{}: transport is amqp or postgres", bad()).into()),
                },
                matters: f[1].parse().map_err(|_| bad())?,
                concurrency: f[2].parse().map_err(|_| bad())?,
                nodes: f[3].parse().map_err(|_| bad())?,
                lanes: match f.get(4) {
                    Some(l) => Some(l.parse().map_err(|_| bad())?),
                    None => None,
                },
            })
        })
        .collect()
}

/// How long each reading of the ceiling lasts.
const CEILING_SECONDS: f64 = 4.0;

/// End to end through `briefrail run`, beside the best peer serving the same number of matters
/// with the same number of build slots, the raw per-transaction ceiling at the same connection
/// count, and the batched raw ceiling at the batch size the run made.
async fn e2e_section(
    server: &str,
    results: &mut serde_json::Map<String, serde_json::Value>,
) -> R<()> {
    let runs = e2e_runs()?;
    let peer_bin = peer::binary()?;
    println!(
        "\n{:<54} {:>9} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>15}",
        "end to end (brief builder, json logs)",
        "matters/s",
        "peer",
        "vs peer",
        "vs tx",
        "vs batch",
        "log B/m",
        "cpu s",
        "loaded p50/p99"
    );
    // The ceiling is read just before and just after each run (the reading after one run is
    // the reading before the next at the same connection count), and the run is compared with
    // their mean: on a shared machine the ceiling moved by half within an hour, and a ceiling
    // read minutes away from its run made a ratio of that drift. The peer runs just before
    // each run, and the batched ceiling just after it, with the batch size the run made.
    let mut last_reading = std::collections::BTreeMap::new();
    let mut list = Vec::new();
    for run in &runs {
        let conns = e2e::POOL * run.nodes;
        let before = match last_reading.get(&conns) {
            Some(c) => *c,
            None => e2e::ceiling(server, conns, CEILING_SECONDS).await?,
        };
        let peer =
            peer::throughput(&peer_bin, server, run.matters, run.concurrency * run.nodes).await?;
        let s = e2e::serve(server, run).await?;
        let after = e2e::ceiling(server, conns, CEILING_SECONDS).await?;
        let sizes = batched::Sizes::of(&s.batches);
        let batched = batched::ceiling(
            server,
            conns,
            sizes,
            s.batches.body_bytes as usize,
            CEILING_SECONDS,
        )
        .await?;
        last_reading.insert(conns, after);
        let ceiling = e2e::Ceiling { before, after };
        println!(
            "{:<54} {:>9.0} {:>7.0} {:>7.2} {:>7.2} {:>7.2} {:>7.0} {:>8.1} {:>15}",
            run.label(),
            s.per_s,
            peer.per_s,
            s.per_s / peer.per_s,
            s.per_s / ceiling.mean(),
            s.per_s / batched,
            s.log_bytes_per_matter,
            s.node_cpu_s,
            s.loaded_latency_ms
                .map(|(a, b)| format!("{a:.0}/{b:.0} ms"))
                .unwrap_or_default()
        );
        println!(
            "    peer {:.0}/s ({:.0} without its start); per-transaction ceiling {:.0} before, {:.0} after; \
             batched ceiling {batched:.0} matters/s; the rail's batches (the ceiling's, rounded): \
             inbox {:.1}, claim {:.1}, commit {:.1}",
            peer.per_s,
            peer.per_s_excl_startup,
            ceiling.before,
            ceiling.after,
            s.batches.inbox,
            s.batches.claim,
            s.batches.commit,
        );
        println!(
            "    s from start: {}; with probes {:.0}/s",
            s.phases
                .iter()
                .map(|(k, v)| format!("{k} {v:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
            s.with_probes_per_s,
        );
        list.push(e2e::entry(run, &s, ceiling, batched, peer));
    }
    results.insert("end_to_end".into(), serde_json::Value::Array(list));
    Ok(())
}

/// The retention measurement, in its own fresh database (it loads tens of millions of rows).
async fn retention_section(
    server: &str,
    results: &mut serde_json::Map<String, serde_json::Value>,
) -> R<()> {
    let rows: usize = match std::env::var("BRIEFRAIL_BENCH_RETENTION_ROWS") {
        Ok(v) => v
            .parse()
            .map_err(|e| format!("BRIEFRAIL_BENCH_RETENTION_ROWS={v:?}: {e}"))?,
        Err(_) => 10_000_000,
    };
    let url = admin::with_database(
        server,
        &format!("{}_retention", admin::split_url(server)?.0),
    )?;
    let name = admin::split_url(&url)?.0;
    // BRIEFRAIL_BENCH_KEEP=1 keeps the loaded database for the next run (loading 10,000,000
    // rows of each kind takes minutes); a kept database of that size is used as it is.
    let keep = std::env::var("BRIEFRAIL_BENCH_KEEP").is_ok_and(|v| v == "1");
    if !keep {
        admin::drop_database(server, &name).await?;
    }
    admin::create_database_if_missing(&url).await?;
    db::migrate::run_pending(&url).await?;
    let pool = db::connect(&db::PoolOptions::new(url.clone()).size(12)).await?;
    let figures = retention::at_scale(&url, &pool, rows, Duration::from_secs(20)).await;
    drop(pool);
    if !keep {
        admin::drop_database(server, &name).await?;
    }
    results.insert("retention".into(), figures?);
    Ok(())
}

#[actix_rt::main]
async fn main() -> R<()> {
    let server = std::env::var("BRIEFRAIL_BENCH_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/briefrail_bench".into());
    let only = std::env::args().nth(1);
    println!(
        "briefrail-bench ({}, {} cores)",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    match only.as_deref() {
        None | Some("core") => {}
        Some("retention") => {
            let mut results = earlier_results();
            println!(
                "\n{:<58} {:>10} {:>10} {:>7}",
                "figure", "briefrail", "baseline", "ratio"
            );
            retention_section(&server, &mut results).await?;
            results.insert("retention_measured_at".into(), json!(chrono::Utc::now()));
            return write_results(results);
        }
        Some("latency") => {
            let name = admin::split_url(&server)?.0;
            admin::drop_database(&server, &name).await?;
            admin::create_database_if_missing(&server).await?;
            db::migrate::run_pending(&server).await?;
            let pool = db::connect(&db::PoolOptions::new(server.clone()).size(10)).await?;
            for kind in [TransportKind::Amqp, TransportKind::Postgres] {
                let l = latency(&server, &pool, kind, 200).await?;
                println!(
                    "nudge latency {kind:?}: p50 {:.1} p99 {:.1} max {:.1} ms (first {WARM_UP} facts after start: max {:.1} ms)",
                    l.p50, l.p99, l.max, l.cold_max
                );
                print_stages(&l.stages);
            }
            drop(pool);
            admin::drop_database(&server, &name).await?;
            return Ok(());
        }
        Some("scale") => {
            let name = admin::split_url(&server)?.0;
            admin::drop_database(&server, &name).await?;
            admin::create_database_if_missing(&server).await?;
            db::migrate::run_pending(&server).await?;
            let pool = db::connect(&db::PoolOptions::new(server.clone()).size(18)).await?;
            let (before, peak, actors) = scale(&server, &pool, 100_000).await?;
            println!(
                "resident MiB with 100000 matters demanded once: {peak:.0} (before {before:.0}, {actors} actors)"
            );
            drop(pool);
            admin::drop_database(&server, &name).await?;
            return Ok(());
        }
        Some("relay") => {
            let name = admin::split_url(&server)?.0;
            admin::drop_database(&server, &name).await?;
            admin::create_database_if_missing(&server).await?;
            db::migrate::run_pending(&server).await?;
            let pool = db::connect(&db::PoolOptions::new(server.clone()).size(4)).await?;
            let (ours, raw) = relay_rates(&server, &pool, 10_000, 100).await?;
            println!(
                "relay events/s with confirms, window 100: {ours:.0} vs raw lapin {raw:.0}: {:.2}",
                ours / raw
            );
            drop(pool);
            admin::drop_database(&server, &name).await?;
            return Ok(());
        }
        Some("fair") => {
            let mut results = earlier_results();
            fair::fair_section(&server, &mut results).await?;
            results.insert("fair_measured_at".into(), json!(chrono::Utc::now()));
            return write_results(results);
        }
        Some("idle") => {
            let mut results = earlier_results();
            results.insert("idle_user_path".into(), idle::idle_section(&server).await?);
            results.insert("idle_measured_at".into(), json!(chrono::Utc::now()));
            return write_results(results);
        }
        Some("rebuilds") => {
            return rebuilds::rebuilds_section(&server).await;
        }
        Some("e2e") => {
            let mut results = earlier_results();
            e2e_section(&server, &mut results).await?;
            results.insert("e2e_measured_at".into(), json!(chrono::Utc::now()));
            return write_results(results);
        }
        Some(other) => {
            return Err(format!(
                "unknown section {other:?}: give none (everything), `core` (everything but retention), `e2e`, `fair`, `idle`, `latency`, `rebuilds`, `scale`, `relay` or `retention`"
            )
            .into());
        }
    }
    let name = admin::split_url(&server)?.0;
    admin::drop_database(&server, &name).await?;
    admin::create_database_if_missing(&server).await?;
    db::migrate::run_pending(&server).await?;
    let url = server.clone();
    let conns = 4usize;
    let pool = db::connect(&db::PoolOptions::new(url.clone()).size(conns as u32 * 2 + 2)).await?;
    // `core` keeps the retention figures of an earlier run (loading its rows takes minutes).
    let core = only.as_deref() == Some("core");
    let mut results = if core {
        let mut kept = serde_json::Map::new();
        for (k, v) in earlier_results() {
            if k.starts_with("retention") {
                kept.insert(k, v);
            }
        }
        kept
    } else {
        serde_json::Map::new()
    };

    // 1. Ledger throughput.
    let firm = Uuid::new_v4();
    let matters: Vec<(Uuid, Uuid)> = (0..1000).map(|_| (firm, Uuid::new_v4())).collect();
    {
        let mut c = pool.get().await?;
        for (f, m) in &matters {
            briefrail::ledger::transitions::demand(&mut c, *f, *m).await?;
        }
    }
    let raw = raw_cycles(&url, conns, &matters, 3).await?;
    let ours = runtime_cycles(&url, &pool, conns, firm, &matters, 3).await?;
    println!(
        "\n{:<58} {:>10} {:>10} {:>7}",
        "figure", "briefrail", "baseline", "ratio"
    );
    println!(
        "{:<58} {:>10.0} {:>10.0} {:>7.2}",
        format!("ledger claim→commit cycles/s, 1,000 matters, {conns} conns"),
        ours,
        raw,
        ours / raw
    );
    results.insert("ledger_cycles_per_s".into(), json!({"briefrail": ours, "raw_sql": raw, "ratio": ours / raw, "connections": conns, "matters": 1000}));

    // 2. Nudge latency.
    for (label, kind) in [
        ("amqp", TransportKind::Amqp),
        ("postgres", TransportKind::Postgres),
    ] {
        match latency(&url, &pool, kind, 200).await {
            Ok(l) => {
                println!(
                    "{:<58} {:>10} {:>10} {:>7}",
                    format!("nudge latency {label}: fact commit → build start, ms"),
                    format!("p50 {:.1}", l.p50),
                    format!("p99 {:.1}", l.p99),
                    format!("max {:.0}", l.max)
                );
                println!(
                    "    the first {WARM_UP} facts after the node started (not in the percentiles): max {:.1} ms",
                    l.cold_max
                );
                let stages = print_stages(&l.stages);
                results.insert(
                    format!("nudge_latency_ms_{label}"),
                    json!({"p50": l.p50, "p99": l.p99, "max": l.max, "events": 200, "debounce_ms": 0,
                           "warm_up_events": WARM_UP, "warm_up_max": l.cold_max, "stages": stages}),
                );
            }
            Err(e) => println!("nudge latency {label}: skipped ({e})"),
        }
    }

    // 3. Relay.
    match relay_rates(&url, &pool, 10_000, 100).await {
        Ok((ours, raw)) => {
            println!(
                "{:<58} {:>10.0} {:>10.0} {:>7.2}",
                "relay events/s with confirms, window 100 (vs raw lapin)",
                ours,
                raw,
                ours / raw
            );
            results.insert("relay_events_per_s".into(), json!({"briefrail": ours, "raw_lapin": raw, "ratio": ours / raw, "window": 100, "events_per_round": 10000, "rounds": 2}));
        }
        Err(e) => println!("relay: skipped ({e})"),
    }

    // 4. Coalescing.
    let mut co = serde_json::Map::new();
    for n in [1usize, 10, 100, 1000] {
        let builds = coalescing(&url, &pool, n).await?;
        println!(
            "{:<58} {:>10} {:>10} {:>7}",
            format!("builds per burst of {n} demands on one matter"),
            builds,
            "≤ 2",
            if builds <= 2 { "ok" } else { "OVER" }
        );
        co.insert(n.to_string(), json!(builds));
    }
    results.insert("builds_per_burst".into(), serde_json::Value::Object(co));

    // 5. Scale.
    for n in [10_000usize, 100_000] {
        let (before, peak, left) = scale(&url, &pool, n).await?;
        println!(
            "{:<58} {:>10.0} {:>10.0} {:>7}",
            format!("resident MiB with {n} matters demanded once (vs before)"),
            peak,
            before,
            format!("{left} act")
        );
        results.insert(
            format!("rss_mib_{n}_matters"),
            json!({"after": peak, "before": before, "live_actors": left}),
        );
    }
    let (sweep, rec) = big_table(&pool, 1_000_000).await?;
    println!(
        "{:<58} {:>10.2} {:>10} {:>7}",
        "sweep statement, 1,000,000 job rows, median ms",
        sweep,
        "< 50",
        if sweep < 50.0 { "ok" } else { "SLOW" }
    );
    println!(
        "{:<58} {:>10.2} {:>10} {:>7}",
        "reconcile statement, 1,000,000 job rows, median ms",
        rec,
        "< 50",
        if rec < 50.0 { "ok" } else { "SLOW" }
    );
    results.insert("sweep_ms_1m_rows".into(), json!(sweep));
    results.insert("reconcile_ms_1m_rows".into(), json!(rec));

    drop(pool);
    admin::drop_database(&server, &name).await?;
    e2e_section(&server, &mut results).await?;
    fair::fair_section(&server, &mut results).await?;
    if !core {
        retention_section(&server, &mut results).await?;
        results.insert("retention_measured_at".into(), json!(chrono::Utc::now()));
    }
    results.insert("measured_at".into(), json!(chrono::Utc::now()));
    write_results(results)
}
