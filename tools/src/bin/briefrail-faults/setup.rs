//! Bringing the world up (clusters, proxies, nodes, the record), proving the faults that are
//! configuration, reading the queues at the end, and tearing everything down.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use briefrail::db::{self, admin};
use briefrail::ledger::facts;
use briefrail::secret::SecretUrl;
use briefrail::transport::amqp::{self, Topology, message};
use lapin::options::BasicGetOptions;
use lapin::types::AMQPValue;
use uuid::Uuid;

use crate::Args;
use crate::broker::BrokerCluster;
use crate::invariants::DeadLetter;
use crate::nodes::{self, NodeSpec};
use crate::postgres::{self, PgCluster};
use crate::proxy::DbProxy;
use crate::schedule::{Fault, Rng};
use crate::world::{DB_NAME, LostPast, World};

const MATTERS: usize = 300;
const RABBIT_BIN: &str = "/usr/lib/rabbitmq/bin";

/// Everything the suite needs, each missing piece named: a fault that cannot be injected
/// fails the run before it starts, never silently later.
fn preflight(bin: &Path) -> Result<(), String> {
    let mut missing = Vec::new();
    if let Err(e) = postgres::bindir() {
        missing.push(e);
    }
    for p in ["rabbitmq-server", "rabbitmqctl"] {
        if !Path::new(RABBIT_BIN).join(p).exists() {
            missing.push(format!(
                "{RABBIT_BIN}/{p} (Debian's rabbitmq-server package)"
            ));
        }
    }
    if !Path::new(nodes::FAKETIME_LIB).exists() {
        missing.push(format!(
            "{} (Debian's libfaketime package): the clock-skew fault needs it",
            nodes::FAKETIME_LIB
        ));
    }
    if !bin.exists() {
        missing.push(format!(
            "the node binary {} (cargo build --release --bin briefrail)",
            bin.display()
        ));
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join("; "))
    }
}

/// The command builder: reads its context, sleeps 0.3 to 1.8 s (drawn from the seed and the
/// token), and answers a frame; for the matter named in `refuse`, a frame with a \u0000 the
/// database refuses.
const BUILDER: &str = r#"#!/bin/sh
ctx=$(cat)
sleep $(awk -v t="$BRIEFRAIL_TOKEN" -v s="$SEED" 'BEGIN { srand(t * 7919 + s); printf "%.2f", 0.3 + rand() * 1.5 }')
if [ -f "$FAULTS_DIR/refuse" ] && printf '%s' "$ctx" | grep -qF "$(cat "$FAULTS_DIR/refuse")"; then
  printf '{"token":%s,"bad":"\\u0000"}' "$BRIEFRAIL_TOKEN"
  exit 0
fi
printf '{"token":%s}' "$BRIEFRAIL_TOKEN"
"#;

pub async fn world(args: &Args) -> Result<World, String> {
    let bin = nodes::binary(args.binary.clone());
    preflight(&bin)?;
    let dir = std::env::temp_dir().join(format!(
        "briefrail-faults-{}-{}",
        args.seed,
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let t0 = Instant::now();
    let rabbit = dir.join("rabbit");
    let (pg, broker) = tokio::join!(
        PgCluster::start(&dir, "a"),
        BrokerCluster::start(&rabbit, 3)
    );
    let (pg, broker) = (pg?, broker?);
    println!(
        "briefrail-faults: seed {} ({} configuration), 3 nodes, {MATTERS} matters; \
         private Postgres on port {} and 3-node RabbitMQ cluster up in {:.1} s",
        args.seed,
        if args.long { "long" } else { "short" },
        pg.port,
        t0.elapsed().as_secs_f64()
    );
    let url = pg.url(DB_NAME);
    admin::create_database_if_missing(&url)
        .await
        .map_err(|e| format!("create {DB_NAME}: {e}"))?;
    db::migrate::run_pending(&url)
        .await
        .map_err(|e| format!("migrate: {e}"))?;
    let pool = db::connect(&db::PoolOptions::new(url).size(8))
        .await
        .map_err(|e| format!("the suite's pool: {e}"))?;
    std::fs::write(dir.join("builder.sh"), BUILDER).map_err(|e| e.to_string())?;
    let prefix = format!("faults-{}", args.seed);
    let mut proxies = Vec::new();
    for i in 0..3 {
        proxies.push(
            DbProxy::start(&format!("node-{i}"), pg.addr())
                .await
                .map_err(|e| format!("proxy for node-{i}: {e}"))?,
        );
    }
    let mut w = World {
        seed: args.seed,
        bin,
        prefix,
        clusters: vec![pg],
        pool,
        broker,
        proxies,
        nodes: Vec::new(),
        firm: Uuid::new_v4(),
        matters: Vec::new(),
        started: Instant::now(),
        rng: Rng(args.seed ^ 0x5eed),
        windows: Vec::new(),
        injected: BTreeMap::new(),
        not_landed: Vec::new(),
        missed: Vec::new(),
        bursts: Vec::new(),
        demands_total: 0,
        messages: Vec::new(),
        lost: LostPast::default(),
        skews: 0,
        dir,
    };
    start_nodes(&mut w).await?;
    record_matters(&mut w).await?;
    Ok(w)
}

/// node-0: lease 2 s, pool 6, four builders, the true clock (until a clock-skew fault);
/// node-1: lease 8 s (mixed leases), a pool of 2 for six builders (pool exhaustion), two hours
/// behind; node-2: lease 2 s, two hours ahead. Each reaches the ledger through its own proxy
/// and lists the broker members starting from a different one.
async fn start_nodes(w: &mut World) -> Result<(), String> {
    let script = w.dir.join("builder.sh");
    for i in 0..3 {
        let members: Vec<String> = (0..w.broker.len())
            .map(|k| w.broker.amqp_url((i + k) % w.broker.len()))
            .collect();
        let (pool, builders, lease, skew) = match i {
            1 => ("2", "6", 8.0, Some("-2h")),
            2 => ("6", "4", 2.0, Some("+2h")),
            _ => ("6", "4", 2.0, None),
        };
        let env: Vec<(String, String)> = [
            (
                "BRIEFRAIL__DATABASE__URL",
                format!(
                    "postgres://postgres@127.0.0.1:{}/{DB_NAME}",
                    w.proxies[i].port()
                ),
            ),
            ("BRIEFRAIL__DATABASE__POOL_SIZE", pool.into()),
            ("BRIEFRAIL__DATABASE__LOCK_TIMEOUT_MS", "1000".into()),
            (
                "BRIEFRAIL__DATABASE__IDLE_IN_TRANSACTION_TIMEOUT_MS",
                "3000".into(),
            ),
            ("BRIEFRAIL__TRANSPORT__KIND", "amqp".into()),
            ("BRIEFRAIL__TRANSPORT__AMQP_URL", members.join(",")),
            ("BRIEFRAIL__TRANSPORT__PREFIX", w.prefix.clone()),
            ("BRIEFRAIL__BUILDER__KIND", "command".into()),
            (
                "BRIEFRAIL__BUILDER__COMMAND",
                format!("/bin/sh {}", script.display()),
            ),
            ("BRIEFRAIL__BUILDERS__CONCURRENCY", builders.into()),
            ("BRIEFRAIL__SWEEPER__INTERVAL_SECONDS", "0.5".into()),
            ("BRIEFRAIL__RECONCILE__AFTER_SECONDS", "4".into()),
            ("BRIEFRAIL__RELAY__POLL_MS", "250".into()),
            ("BRIEFRAIL__TRIGGER__DEBOUNCE_MS", "100".into()),
            ("BRIEFRAIL__TRIGGER__MAX_WAIT_MS", "1000".into()),
            ("BRIEFRAIL__RETRY__BACKOFF_BASE_SECONDS", "0.5".into()),
            ("BRIEFRAIL__RETRY__MAX_ATTEMPTS", "20".into()),
            ("BRIEFRAIL__SHUTDOWN__GRACE_SECONDS", "1".into()),
            ("BRIEFRAIL__HTTP__BIND", "127.0.0.1:0".into()),
            ("BRIEFRAIL__LOG__LEVEL", "warn".into()),
            ("BRIEFRAIL__LOG__FORMAT", "json".into()),
            ("SEED", w.seed.to_string()),
            ("FAULTS_DIR", w.dir.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let spec = NodeSpec {
            id: format!("node-{i}"),
            env,
            skew: skew.map(str::to_owned),
            lease_seconds: lease,
        };
        w.nodes.push(nodes::spawn(&w.bin, &spec, &w.dir)?);
    }
    for i in [1, 2] {
        crate::inject::proven_skew(w, i).await?;
        let what = format!(
            "{} runs under libfaketime {:?}",
            w.nodes[i].id(),
            w.nodes[i].spec.skew.as_deref().unwrap_or("")
        );
        println!("  +{:>6.1}s clock-skew: {what}", w.elapsed());
        w.injected.entry(Fault::ClockSkew).or_default().push(what);
    }
    Ok(())
}

/// The record: every matter created (each creation is itself a demand).
async fn record_matters(w: &mut World) -> Result<(), String> {
    let mut c = w.pool.get().await.map_err(|e| e.to_string())?;
    for i in 0..MATTERS {
        let m = Uuid::new_v4();
        facts::create_matter(&mut c, w.firm, m, &format!("Matter {i} v. Chaos"))
            .await
            .map_err(|e| e.to_string())?;
        w.matters.push(m);
    }
    Ok(())
}

/// The faults that are configuration count once they showed in the ledger: node-1 (a pool of
/// two for six builders, an 8 s lease) landed builds, with claims of both lease lengths.
pub async fn prove_configuration(w: &mut World) {
    let landed = w
        .count(
            "SELECT count(*) AS n FROM ops.matter_frame_runs WHERE node_id = 'node-1' AND outcome = 'landed'",
        )
        .await;
    let max = w.proxies[1].stats().connections_max;
    let mut prove = |f: Fault, ok: bool, what: String, why: String| {
        if ok {
            println!("  {}: {what}", f.name());
            w.injected.entry(f).or_default().push(what);
        } else {
            w.not_landed
                .push(format!("{} (rows {:?}): {why}", f.name(), f.rows()));
        }
    };
    prove(
        Fault::PoolExhaustion,
        landed > 0,
        format!(
            "node-1 landed {landed} builds with a pool of 2 for 6 builders (at most {max} connections)"
        ),
        "node-1 (pool of 2) landed no build".into(),
    );
    prove(
        Fault::MixedLeases,
        landed > 0,
        format!(
            "node-1 held 8 s leases beside 2 s leases of node-0 and node-2 ({landed} builds landed)"
        ),
        "node-1 (8 s lease) landed no build".into(),
    );
}

/// Empties the dead-letter queue, reading each message's id, reason and event id.
pub async fn drain_dead_letters(w: &World) -> Result<Vec<DeadLetter>, String> {
    let t = Topology::new(&w.prefix);
    let url = SecretUrl::new(w.broker.amqp_url_list());
    let conn = amqp::connect(&url, "briefrail-faults-dlq")
        .await
        .map_err(|e| format!("reading the dead letters: {e}"))?;
    let ch = conn.create_channel().await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(
            t.dead_queue.as_str().into(),
            BasicGetOptions { no_ack: true },
        )
        .await
        .map_err(|e| format!("basic_get on {}: {e}", t.dead_queue))?
    {
        let d = &m.delivery;
        let reason = d
            .properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get(message::REASON).cloned())
            .map(|v| match v {
                AMQPValue::LongString(s) => s.to_string(),
                other => format!("{other:?}"),
            })
            .unwrap_or_else(|| "no reason header".into());
        let event_id = serde_json::from_slice::<serde_json::Value>(&d.data)
            .ok()
            .and_then(|v| v.get("event_id")?.as_str()?.parse().ok());
        out.push(DeadLetter {
            message_id: d.properties.message_id().as_ref().map(|s| s.to_string()),
            reason,
            event_id,
        });
    }
    let _ = conn.close(200, "done".into()).await;
    Ok(out)
}

/// Messages still in the trigger queue once everything is served (ready or unacknowledged).
/// A message may be in flight at quiescence (a duplicate delivery being applied, a late
/// republication): stranded means it stays, so the queue is asked again each second for up to
/// 30 s, and only what is still there then is reported.
pub async fn stranded(w: &World) -> Vec<String> {
    let q = Topology::new(&w.prefix).trigger_queue;
    let mut left = Vec::new();
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        left = match w
            .broker
            .ctl(0, &["list_queues", "-q", "name", "messages_ready", "messages_unacknowledged"])
            .await
        {
            Ok(out) => out
                .lines()
                .filter_map(|l| {
                    let mut f = l.split_whitespace();
                    if f.next() != Some(q.as_str()) {
                        return None;
                    }
                    let (ready, unacked) = (f.next().unwrap_or("?"), f.next().unwrap_or("?"));
                    (ready != "0" || unacked != "0").then(|| {
                        format!("{ready} ready and {unacked} unacknowledged messages left in {q} after 30 s")
                    })
                })
                .collect(),
            Err(e) => vec![format!("cannot list the queues: {e}")],
        };
        if left.is_empty() {
            break;
        }
    }
    left
}

pub async fn tear_down(w: World, keep: bool) {
    let dir = w.dir.clone();
    drop(w.nodes);
    drop(w.pool);
    drop(w.broker);
    drop(w.clusters);
    if keep {
        println!("run directory kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
