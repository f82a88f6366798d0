//! `briefrail-faults`: three real `briefrail run` processes (the `command` builder, a build time
//! drawn per build) against the machine's Postgres and RabbitMQ, a seeded random schedule of
//! demand bursts and faults, then quiescence and the invariants of docs/protocol.md checked over the
//! tables. Same seed, same schedule. Exits non-zero on any violation, naming matter and rows.
//!
//! ```sh
//! cargo run --release --bin briefrail-faults -- --seed 7            # short (CI) configuration
//! cargo run --release --bin briefrail-faults -- --seed 7 --long      # ten minutes of faults
//! ```
//!
//! Faults: SIGSTOP/SIGCONT of a node holding a build, past the lease; kill -9 mid-build and
//! restart; RabbitMQ `stop_app`/`start_app`; `pg_terminate_backend` on the nodes' connections;
//! duplicate publishes of outbox events; a purge of the trigger queue; and one node runs with
//! its clock five hours ahead (libfaketime, when installed). It stops RabbitMQ's app: run it
//! alone, never beside the parallel test suite. The broker's app is restarted on every exit path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use briefrail::db::{self, Pool, admin};
use briefrail::ledger::EventName;
use briefrail::ledger::facts;
use briefrail::ledger::outbox::{NewEvent, record_event};
use briefrail::transport::amqp::{self, Topology};
use clap::Parser;
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, RunQueryDsl};
use uuid::Uuid;

#[derive(Parser, Debug)]
#[command(about = "Multi-process fault suite for briefrail")]
struct Args {
    /// Seed of the schedule: the same seed gives the same demands and faults.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run ten minutes of faults instead of the short CI configuration.
    #[arg(long)]
    long: bool,
    /// Postgres server (a fresh database is created on it).
    #[arg(
        long,
        default_value = "postgres://postgres@127.0.0.1:5432/briefrail_faults"
    )]
    database_url: String,
    /// Keep the database afterwards, to investigate a violation.
    #[arg(long)]
    keep: bool,
    /// The briefrail binary to run (default: next to this one).
    #[arg(long)]
    binary: Option<PathBuf>,
}

/// splitmix64: small, seedable, good enough for schedules.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Stop,
    Kill,
    BrokerDown,
    TerminateBackends,
    Duplicates,
    Purge,
    MemoryAlarm,
}

#[derive(Debug, Clone)]
enum Step {
    Burst { matter: usize, demands: usize },
    Fault(Fault),
    Pause(Duration),
}

/// The whole schedule, from the seed alone.
fn schedule(seed: u64, long: bool, matters: usize) -> Vec<Step> {
    let mut rng = Rng(seed);
    let rounds = if long { 400 } else { 40 };
    let mut faults = vec![
        Fault::Stop,
        Fault::Kill,
        Fault::BrokerDown,
        Fault::TerminateBackends,
        Fault::Duplicates,
        Fault::Purge,
        Fault::MemoryAlarm,
    ];
    if long {
        faults = faults.repeat(8);
    }
    // Faults land at seeded rounds, spread over the run.
    let mut at: BTreeMap<u64, Fault> = BTreeMap::new();
    for f in faults {
        loop {
            let r = 3 + rng.below(rounds - 6);
            if let std::collections::btree_map::Entry::Vacant(e) = at.entry(r) {
                e.insert(f);
                break;
            }
        }
    }
    let mut steps = Vec::new();
    let mut last_burst: Vec<i64> = vec![-100; matters];
    for r in 0..rounds {
        // A burst on a matter that has had none for the last 8 rounds (its builds can settle).
        let mut m = rng.below(matters as u64) as usize;
        while r as i64 - last_burst[m] < 8 {
            m = (m + 1) % matters;
        }
        last_burst[m] = r as i64;
        let demands = match rng.below(10) {
            0 => 300 + rng.below(700) as usize, // up to 1,000
            1..=3 => 10 + rng.below(90) as usize,
            _ => 1 + rng.below(9) as usize,
        };
        steps.push(Step::Burst { matter: m, demands });
        if let Some(f) = at.get(&r) {
            steps.push(Step::Fault(*f));
        }
        steps.push(Step::Pause(Duration::from_millis(200 + rng.below(400))));
    }
    steps
}

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

struct NodeProc {
    id: String,
    child: Child,
    env: Vec<(String, String)>,
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(
    bin: &Path,
    id: &str,
    env: &[(String, String)],
    dir: &Path,
    faketime: Option<&str>,
) -> std::io::Result<NodeProc> {
    let log = dir.join(format!("{id}.log"));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)?;
    // libfaketime is preloaded into the node itself (not through the `faketime` wrapper, whose
    // child would outlive a kill of the wrapper).
    let mut cmd = Command::new(bin);
    if let Some(ft) = faketime {
        cmd.env("LD_PRELOAD", FAKETIME_LIB).env("FAKETIME", ft);
    }
    cmd.arg("run")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("BRIEFRAIL__NODE__ID", id)
        .env_remove("RUST_LOG");
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    let child = cmd.spawn()?;
    Ok(NodeProc {
        id: id.into(),
        child,
        env: env.to_vec(),
    })
}

fn rabbitmqctl(args: &[&str]) -> bool {
    Command::new("rabbitmqctl")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Restarts the broker's app on every exit path.
struct BrokerGuard;
impl Drop for BrokerGuard {
    fn drop(&mut self) {
        rabbitmqctl(&["set_vm_memory_high_watermark", "0.4"]);
        rabbitmqctl(&["start_app"]);
        rabbitmqctl(&["await_startup"]);
    }
}

#[derive(QueryableByName, Debug)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

async fn count(pool: &Pool, sql: &str) -> i64 {
    match pool.get().await {
        Ok(mut c) => diesel::sql_query(sql)
            .get_result::<Count>(&mut c)
            .await
            .map(|c| c.n)
            .unwrap_or(-1),
        Err(_) => -1,
    }
}

#[derive(QueryableByName, Debug)]
struct Violation {
    #[diesel(sql_type = diesel::sql_types::Text)]
    what: String,
}

/// Runs an invariant query returning one text row per violation.
async fn violations(pool: &Pool, sql: &str) -> Vec<String> {
    match pool.get().await {
        Ok(mut c) => match diesel::sql_query(sql).load::<Violation>(&mut c).await {
            Ok(v) => v.into_iter().map(|v| v.what).collect(),
            Err(e) => vec![format!("query failed: {e}")],
        },
        Err(e) => vec![format!("no connection: {e}")],
    }
}

/// The nodes holding a live claim now: a run still `running` that is its row's current claim.
async fn busy_nodes(pool: &Pool) -> Vec<String> {
    let Ok(mut c) = pool.get().await else {
        return Vec::new();
    };
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::Text)]
        node_id: String,
    }
    diesel::sql_query(
        "SELECT r.node_id FROM ops.matter_frame_runs r
           JOIN ops.matter_frame_jobs j ON j.firm_id = r.firm_id AND j.matter_id = r.matter_id
          WHERE r.outcome = 'running' AND j.run_status = 'running' AND j.claimed_run_id = r.run_id
          ORDER BY r.started_at DESC",
    )
    .load::<N>(&mut c)
    .await
    .map(|v| v.into_iter().map(|n| n.node_id).collect())
    .unwrap_or_default()
}

/// The node of the newest live claim, if a build is running now.
async fn busy_node(pool: &Pool) -> Option<String> {
    busy_nodes(pool).await.into_iter().next()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let code = match run(args).await {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("briefrail-faults: {e}");
            2
        }
    };
    std::process::exit(code);
}

async fn run(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let _broker = BrokerGuard;
    let bin = args.binary.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("briefrail")))
            .unwrap_or_else(|| "briefrail".into())
    });
    let name = admin::split_url(&args.database_url)?.0;
    admin::drop_database(&args.database_url, &name).await?;
    admin::create_database_if_missing(&args.database_url).await?;
    db::migrate::run_pending(&args.database_url).await?;
    let pool = db::connect(&db::PoolOptions::new(args.database_url.clone()).size(8)).await?;
    let dir = std::env::temp_dir().join(format!("briefrail-faults-{}", args.seed));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let script = dir.join("builder.sh");
    // Build time drawn per build, from the seed and the token: 0.3 to 1.8 s.
    std::fs::write(
        &script,
        "#!/bin/sh\ncat > /dev/null\nsleep $(awk -v t=\"$BRIEFRAIL_TOKEN\" -v s=\"$SEED\" 'BEGIN { srand(t * 7919 + s); printf \"%.2f\", 0.3 + rand() * 1.5 }')\nprintf '{\"token\":%s}' \"$BRIEFRAIL_TOKEN\"\n",
    )?;
    let prefix = format!("faults-{}", args.seed);
    let matters_n = 100;
    println!(
        "briefrail-faults: seed {} ({} configuration), 3 nodes, {matters_n} matters",
        args.seed,
        if args.long { "long" } else { "short" }
    );
    let env: Vec<(String, String)> = [
        ("BRIEFRAIL__DATABASE__URL", args.database_url.as_str()),
        ("BRIEFRAIL__DATABASE__POOL_SIZE", "6"),
        ("BRIEFRAIL__TRANSPORT__KIND", "amqp"),
        ("BRIEFRAIL__TRANSPORT__PREFIX", prefix.as_str()),
        ("BRIEFRAIL__BUILDER__KIND", "command"),
        (
            "BRIEFRAIL__BUILDER__COMMAND",
            &format!("/bin/sh {}", script.display()),
        ),
        ("BRIEFRAIL__BUILDERS__CONCURRENCY", "4"),
        ("BRIEFRAIL__LEASE__SECONDS", "2"),
        ("BRIEFRAIL__LEASE__HEARTBEAT_SECONDS", "0.4"),
        ("BRIEFRAIL__SWEEPER__INTERVAL_SECONDS", "0.5"),
        ("BRIEFRAIL__RECONCILE__AFTER_SECONDS", "4"),
        ("BRIEFRAIL__RELAY__POLL_MS", "250"),
        ("BRIEFRAIL__TRIGGER__DEBOUNCE_MS", "100"),
        ("BRIEFRAIL__TRIGGER__MAX_WAIT_MS", "1000"),
        ("BRIEFRAIL__RETRY__BACKOFF_BASE_SECONDS", "0.5"),
        ("BRIEFRAIL__RETRY__MAX_ATTEMPTS", "20"),
        ("BRIEFRAIL__SHUTDOWN__GRACE_SECONDS", "1"),
        ("BRIEFRAIL__HTTP__BIND", "127.0.0.1:0"),
        ("BRIEFRAIL__LOG__LEVEL", "warn"),
        ("SEED", &args.seed.to_string()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let faketime = Command::new("faketime")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    let mut nodes = Vec::new();
    for i in 0..3 {
        // node-2 lives five hours in the future: only the database clock may count.
        let skew = (i == 2 && faketime).then_some("+5h");
        nodes.push(spawn(&bin, &format!("node-{i}"), &env, &dir, skew)?);
    }
    println!(
        "clock skew: {}",
        if faketime {
            "node-2 runs five hours ahead (libfaketime +5h)"
        } else {
            "skipped (libfaketime not installed)"
        }
    );

    // The record: 100 matters (each creation is itself a demand).
    let firm = Uuid::new_v4();
    let mut matters = Vec::new();
    {
        let mut c = pool.get().await?;
        for i in 0..matters_n {
            let m = Uuid::new_v4();
            facts::create_matter(&mut c, firm, m, &format!("Matter {i} v. Chaos")).await?;
            matters.push(m);
        }
    }
    let steps = schedule(args.seed, args.long, matters_n);
    let started = Instant::now();
    let mut injected: Vec<String> = Vec::new();
    // Faults that did not take effect: each fails the run (a fault that silently did nothing
    // would let the invariants pass for the wrong reason).
    let mut not_landed: Vec<String> = Vec::new();
    let mut bursts: Vec<(Uuid, chrono::DateTime<chrono::Utc>)> = Vec::new();
    let mut demands_total = 0usize;
    for step in &steps {
        match step {
            Step::Burst { matter, demands } => {
                let m = matters[*matter];
                let at = db_now(&pool).await;
                // A burst: counsel's uploads land together, in one transaction. Faults may be
                // cutting connections right now: a refused burst is retried whole.
                loop {
                    let mut c = pool.get().await?;
                    let n = *demands;
                    let r = c
                        .transaction(async move |tx| {
                            for _ in 0..n {
                                let e = NewEvent::new(firm, m, EventName::BRIEF_REQUESTED)?;
                                record_event(tx, &e).await?;
                            }
                            Ok::<_, briefrail::Error>(())
                        })
                        .await;
                    if r.is_ok() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                demands_total += demands;
                bursts.push((m, at));
            }
            Step::Pause(d) => tokio::time::sleep(*d).await,
            Step::Fault(f) => {
                let t = started.elapsed().as_secs_f64();
                match inject(*f, &mut nodes, &bin, &dir, &pool, &prefix).await {
                    Ok(what) => {
                        println!("  +{t:>6.1}s fault: {what}");
                        injected.push(what);
                    }
                    Err(why) => {
                        println!("  +{t:>6.1}s fault {f:?} DID NOT LAND: {why}");
                        not_landed.push(format!("{f:?}: {why}"));
                    }
                }
            }
        }
    }
    println!(
        "schedule done: {} bursts, {demands_total} demands, {} faults in {:.1} s",
        bursts.len(),
        injected.len(),
        started.elapsed().as_secs_f64()
    );

    // Quiescence: everything published, consumed, and every demand served.
    let deadline = Instant::now() + Duration::from_secs(if args.long { 600 } else { 120 });
    loop {
        let unpublished = count(
            &pool,
            "SELECT count(*) AS n FROM ops.domain_event_outbox WHERE published_at IS NULL",
        )
        .await;
        let unserved = count(&pool, "SELECT count(*) AS n FROM ops.matter_frame_jobs WHERE landed_generation < requested_generation OR run_status <> 'idle'").await;
        let unconsumed = count(&pool, "SELECT count(*) AS n FROM ops.domain_event_outbox o WHERE NOT EXISTS
                                         (SELECT 1 FROM ops.consumed_events c WHERE c.event_id = o.event_id)").await;
        if unpublished == 0 && unserved == 0 && unconsumed == 0 {
            break;
        }
        if Instant::now() > deadline {
            println!(
                "no quiescence: {unpublished} unpublished events, {unserved} matters unserved or busy"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!("quiescent after {:.1} s", started.elapsed().as_secs_f64());

    let mut ok = true;
    let mut check = |name: &str, checked: i64, v: Vec<String>| {
        println!(
            "  {} {name}: {checked} checked, {} violation(s)",
            if v.is_empty() { "✓" } else { "✗" },
            v.len()
        );
        for x in v.iter().take(10) {
            println!("      {x}");
        }
        ok &= v.is_empty();
    };
    let frames = count(&pool, "SELECT count(*) AS n FROM ops.matter_frames").await;
    let runs = count(&pool, "SELECT count(*) AS n FROM ops.matter_frame_runs").await;
    let jobs = count(&pool, "SELECT count(*) AS n FROM ops.matter_frame_jobs").await;
    let events = count(&pool, "SELECT count(*) AS n FROM ops.domain_event_outbox").await;
    println!("invariants ({frames} frames, {runs} runs, {jobs} matters, {events} events):");
    check("every frame's generation is the token of a run recorded landed", frames, violations(&pool,
        "SELECT format('matter %s: frame %s has run outcome %s', f.matter_id, f.generation, coalesce(r.outcome, 'none')) AS what
           FROM ops.matter_frames f LEFT JOIN ops.matter_frame_runs r
             ON r.firm_id = f.firm_id AND r.matter_id = f.matter_id AND r.token = f.generation
          WHERE r.outcome IS DISTINCT FROM 'landed' OR r.run_id <> f.run_id").await);
    check("no fenced or lease_expired run has a frame", runs, violations(&pool,
        "SELECT format('matter %s: %s run token %s has a frame', r.matter_id, r.outcome, r.token) AS what
           FROM ops.matter_frame_runs r JOIN ops.matter_frames f
             ON f.firm_id = r.firm_id AND f.matter_id = r.matter_id AND f.generation = r.token
          WHERE r.outcome IN ('fenced', 'lease_expired')").await);
    check("frames of each matter land in increasing generation order", frames, violations(&pool,
        "SELECT format('matter %s: frame %s landed after frame %s', matter_id, generation, prev) AS what FROM (
           SELECT matter_id, generation, lag(generation) OVER (PARTITION BY firm_id, matter_id ORDER BY created_at, generation) AS prev
             FROM ops.matter_frames) x WHERE prev >= generation").await);
    check("every matter's landed_generation caught up with requested_generation", jobs, violations(&pool,
        "SELECT format('matter %s: %s, requested %s, landed %s, failures %s', matter_id, run_status, requested_generation, landed_generation, consecutive_failures) AS what
           FROM ops.matter_frame_jobs WHERE landed_generation < requested_generation OR run_status <> 'idle'").await);
    check("every outbox row published", events, violations(&pool,
        "SELECT format('event %s (%s, seq %s) unpublished: %s', event_id, event_name, seq, coalesce(last_error, '')) AS what
           FROM ops.domain_event_outbox WHERE published_at IS NULL").await);
    check("every event consumed once in effect", events, violations(&pool,
        "SELECT format('event %s (%s) consumed %s times', o.event_id, o.event_name, count(c.event_id)) AS what
           FROM ops.domain_event_outbox o LEFT JOIN ops.consumed_events c ON c.event_id = o.event_id AND c.consumer = 'brief-rail'
          WHERE o.event_name IN ('matter.created', 'document.uploaded', 'brief.requested')
          GROUP BY o.event_id, o.event_name HAVING count(c.event_id) <> 1").await);
    // Builds per burst: landed builds that started between a burst on a matter and its next.
    let mut over = Vec::new();
    let mut per_matter: BTreeMap<Uuid, Vec<chrono::DateTime<chrono::Utc>>> = BTreeMap::new();
    for (m, at) in &bursts {
        per_matter.entry(*m).or_default().push(*at);
    }
    for (m, ats) in &per_matter {
        for (i, at) in ats.iter().enumerate() {
            let until = ats
                .get(i + 1)
                .map(|t| format!("'{}'", t.to_rfc3339()))
                .unwrap_or_else(|| "'infinity'".into());
            let n = count(&pool, &format!(
                "SELECT count(*) AS n FROM ops.matter_frame_runs WHERE matter_id = '{m}' AND outcome = 'landed'
                   AND started_at >= '{}' AND started_at < {until}", at.to_rfc3339())).await;
            if n > 2 {
                let detail = violations(&pool, &format!(
                    "SELECT string_agg(format('token %s %s on %s at %s (%s events)', token, outcome, node_id,
                                              to_char(started_at, 'MI:SS.MS'), cardinality(event_ids)), '; ' ORDER BY token) AS what
                       FROM ops.matter_frame_runs WHERE matter_id = '{m}' AND started_at >= '{}'::timestamptz - interval '2 seconds' AND started_at < {until}",
                    at.to_rfc3339())).await;
                over.push(format!(
                    "matter {m}: burst at {} cost {n} landed builds: {}",
                    at.format("%M:%S%.3f"),
                    detail.join("")
                ));
            }
        }
    }
    check(
        "builds per burst of demands on one matter at most two",
        bursts.len() as i64,
        over,
    );
    check(
        "every scheduled fault took effect",
        (injected.len() + not_landed.len()) as i64,
        not_landed,
    );
    let fenced = count(
        &pool,
        "SELECT count(*) AS n FROM ops.matter_frame_runs WHERE outcome = 'fenced'",
    )
    .await;
    let expired = count(
        &pool,
        "SELECT count(*) AS n FROM ops.matter_frame_runs WHERE outcome = 'lease_expired'",
    )
    .await;
    println!(
        "zombies refused: {fenced} fenced runs, {expired} lease-expired runs; faults: {}",
        injected.join("; ")
    );
    drop(nodes);
    Topology::new(&prefix)
        .delete(&briefrail::secret::SecretUrl::new(
            "amqp://guest:guest@127.0.0.1:5672/%2f",
        ))
        .await;
    drop(pool);
    if args.keep {
        println!("database {name} kept");
    } else {
        admin::drop_database(&args.database_url, &name).await.ok();
    }
    println!(
        "{}",
        if ok {
            "all invariants held"
        } else {
            "INVARIANTS VIOLATED"
        }
    );
    Ok(ok)
}

async fn db_now(pool: &Pool) -> chrono::DateTime<chrono::Utc> {
    #[derive(QueryableByName)]
    struct T {
        #[diesel(sql_type = diesel::sql_types::Timestamptz)]
        t: chrono::DateTime<chrono::Utc>,
    }
    match pool.get().await {
        Ok(mut c) => diesel::sql_query("SELECT ops.now() AS t")
            .get_result::<T>(&mut c)
            .await
            .map(|t| t.t)
            .unwrap_or_else(|_| chrono::Utc::now()),
        Err(_) => chrono::Utc::now(),
    }
}

/// Whether process `pid` is stopped (state `T` in `/proc/<pid>/stat`) within two seconds: a
/// signal is delivered asynchronously, so the state is polled, not read once.
async fn stopped(pid: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let state_t = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                stat.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('T')
            })
            .unwrap_or(false);
        if state_t || Instant::now() > deadline {
            return state_t;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn signal(sig: &str, pid: &str) -> Result<(), String> {
    match Command::new("kill").args([sig, pid]).status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("kill {sig} {pid} exited {s}")),
        Err(e) => Err(format!("kill {sig} {pid}: {e}")),
    }
}

fn broker_answers() -> bool {
    std::net::TcpStream::connect_timeout(
        &"127.0.0.1:5672".parse().expect("address"),
        Duration::from_secs(1),
    )
    .is_ok()
}

/// A node holding a running claim, waiting up to 30 s for one: a pause or a kill of an idle
/// node makes no zombie, so it would not be the fault the schedule asks for.
async fn wait_busy_node(pool: &Pool, nodes: &[NodeProc]) -> Result<usize, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(id) = busy_node(pool).await {
            if let Some(i) = nodes.iter().position(|n| n.id == id) {
                return Ok(i);
            }
        }
        if Instant::now() > deadline {
            return Err("no node held a running claim within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Injects one fault and proves it took effect: `Ok(what happened)`, or `Err(why the fault did
/// not land)`, which fails the run.
async fn inject(
    f: Fault,
    nodes: &mut [NodeProc],
    bin: &Path,
    dir: &Path,
    pool: &Pool,
    prefix: &str,
) -> Result<String, String> {
    match f {
        Fault::Stop => {
            let idx = wait_busy_node(pool, nodes).await?;
            let pid = nodes[idx].child.id().to_string();
            signal("-STOP", &pid)?;
            let took = stopped(&pid).await;
            let holds = busy_nodes(pool).await.contains(&nodes[idx].id);
            tokio::time::sleep(Duration::from_secs(4)).await; // twice the lease
            signal("-CONT", &pid)?;
            if !took {
                return Err(format!(
                    "{} (pid {pid}) was not stopped after SIGSTOP",
                    nodes[idx].id
                ));
            }
            if !holds {
                return Err(format!(
                    "{} held no running claim when it was stopped",
                    nodes[idx].id
                ));
            }
            Ok(format!(
                "SIGSTOP {} for 4 s (lease 2 s) mid-build",
                nodes[idx].id
            ))
        }
        Fault::Kill => {
            let idx = wait_busy_node(pool, nodes).await?;
            nodes[idx]
                .child
                .kill()
                .map_err(|e| format!("kill -9 {}: {e}", nodes[idx].id))?;
            let status = nodes[idx]
                .child
                .wait()
                .map_err(|e| format!("wait for {}: {e}", nodes[idx].id))?;
            use std::os::unix::process::ExitStatusExt;
            if status.signal() != Some(9) {
                return Err(format!(
                    "{} did not die of SIGKILL: {status}",
                    nodes[idx].id
                ));
            }
            let (id, env) = (nodes[idx].id.clone(), nodes[idx].env.clone());
            tokio::time::sleep(Duration::from_millis(500)).await;
            let skew =
                (id == "node-2" && std::path::Path::new(FAKETIME_LIB).exists()).then_some("+5h");
            nodes[idx] = spawn(bin, &id, &env, dir, skew)
                .map_err(|e| format!("restarting {id} after kill -9 failed: {e}"))?;
            Ok(format!("kill -9 {id} mid-build and restart"))
        }
        Fault::BrokerDown => {
            if !rabbitmqctl(&["stop_app"]) {
                return Err("rabbitmqctl stop_app failed".into());
            }
            let refused = !broker_answers();
            tokio::time::sleep(Duration::from_secs(3)).await;
            let started = rabbitmqctl(&["start_app"]) && rabbitmqctl(&["await_startup"]);
            if !refused {
                return Err("the broker still accepted connections after stop_app".into());
            }
            if !started {
                return Err("rabbitmqctl start_app failed: the broker did not come back".into());
            }
            Ok("RabbitMQ stop_app for 3 s, then start_app".into())
        }
        Fault::TerminateBackends => {
            let n = count(
                pool,
                "SELECT count(*) AS n FROM (SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity
                                  WHERE application_name = 'briefrail' AND pid <> pg_backend_pid()
                                    AND datname = current_database()) x WHERE t",
            )
            .await;
            if n <= 0 {
                return Err("no briefrail connection was terminated".into());
            }
            Ok(format!("pg_terminate_backend on {n} briefrail connections"))
        }
        Fault::Duplicates => {
            let n = count(pool, "WITH d AS (UPDATE ops.domain_event_outbox SET published_at = NULL, next_attempt_at = NULL
                                  WHERE event_id IN (SELECT event_id FROM ops.domain_event_outbox WHERE published_at IS NOT NULL
                                                     ORDER BY seq DESC LIMIT 200) RETURNING 1) SELECT count(*) AS n FROM d").await;
            if n <= 0 {
                return Err("no published event to publish again".into());
            }
            Ok(format!("{n} already-published events published again"))
        }
        Fault::MemoryAlarm => {
            // Publishers are blocked while the alarm lasts: the relay must wait, not spin or lose.
            if !rabbitmqctl(&["set_vm_memory_high_watermark", "0.0000001"]) {
                return Err("rabbitmqctl set_vm_memory_high_watermark failed".into());
            }
            let alarmed = memory_alarm_on();
            tokio::time::sleep(Duration::from_secs(3)).await;
            let cleared = rabbitmqctl(&["set_vm_memory_high_watermark", "0.4"]);
            if !alarmed {
                return Err("the broker reported no memory alarm".into());
            }
            if !cleared {
                return Err("the memory watermark could not be restored".into());
            }
            Ok("RabbitMQ memory alarm for 3 s".into())
        }
        Fault::Purge => {
            let t = Topology::new(prefix);
            let conn = amqp::connect(
                &briefrail::secret::SecretUrl::new("amqp://guest:guest@127.0.0.1:5672/%2f"),
                "faults",
            )
            .await
            .map_err(|e| format!("purge: cannot connect: {e}"))?;
            let ch = conn
                .create_channel()
                .await
                .map_err(|e| format!("purge: no channel: {e}"))?;
            let n = ch
                .queue_purge(t.trigger_queue.as_str().into(), Default::default())
                .await
                .map_err(|e| format!("purge of {} failed: {e}", t.trigger_queue))?;
            Ok(format!("purged {n} messages from the trigger queue"))
        }
    }
}

/// Whether the broker reports a memory alarm (`rabbitmqctl status` lists it under alarms).
fn memory_alarm_on() -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let out = Command::new("rabbitmqctl")
            .args(["eval", "rabbit_alarm:get_alarms()."])
            .output();
        if let Ok(o) = out {
            if String::from_utf8_lossy(&o.stdout).contains("memory") {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}
