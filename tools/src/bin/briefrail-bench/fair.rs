//! `briefrail-bench fair`: one firm's backlog and many firms' trickle of uploads, served by real
//! nodes through the postgres transport with builds that take time, in the ledger's fair order
//! and, as the baseline in the same run, in arrival order (`ops.fair_order` replaced by "oldest
//! first", which is what the hold queue did before fairness).
//!
//! Measured from where counsel starts waiting: a trickle upload's outbox row `created_at` to its
//! matter's first run `started_at` (the claim), both from the ledger. Throughput is every matter
//! served over the span from the first claim to the last landing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use briefrail::config::TransportKind;
use briefrail::db::{self, Pool, admin};
use briefrail::ledger::{DemandClass, facts};
use briefrail::node::Node;
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use serde_json::json;
use uuid::Uuid;

use super::{NoOp, R, pct, scalar, settings};

/// The backlog firm's matters.
const BACKLOG: usize = 200;
/// Firms uploading one document at a time while the backlog is served.
const TRICKLE_FIRMS: usize = 8;
/// Uploads per trickle firm, one every [`TRICKLE_EVERY`].
const TRICKLE_EACH: usize = 4;
const TRICKLE_EVERY: Duration = Duration::from_millis(1500);
/// One build.
const BUILD: Duration = Duration::from_millis(200);
/// Build slots per node.
const SLOTS: usize = 4;

/// Oldest first, whatever the firm or class: the order of the hold queue before fairness.
const ARRIVAL_ORDER: &str = "
CREATE OR REPLACE FUNCTION ops.fair_order(p_firms uuid[], p_classes text[],
                                          p_waited_secs double precision[], p_pending integer[],
                                          p_promote_secs double precision, p_count integer)
RETURNS integer[] LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(o.n ORDER BY o.waited DESC, o.n), '{}')
      FROM (SELECT c.n::integer AS n, c.waited
              FROM unnest(p_waited_secs) WITH ORDINALITY AS c(waited, n)
             ORDER BY c.waited DESC, c.n LIMIT greatest(p_count, 0)) o
$$;";

/// One run's figures.
struct Figures {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    matters_per_s: f64,
}

async fn upload(pool: &Pool, firm: Uuid, class: DemandClass) -> R<Uuid> {
    let mut c = pool.get().await?;
    let matter = Uuid::new_v4();
    facts::create_matter_as(&mut c, firm, matter, "bench", class).await?;
    facts::add_document_as(
        &mut c,
        facts::NewDocument {
            document_id: Uuid::new_v4(),
            firm_id: firm,
            matter_id: matter,
            title: "upload".into(),
            dated: None,
            body: "text".into(),
        },
        class,
    )
    .await?;
    Ok(matter)
}

async fn one_run(server: &str, arrival: bool, nodes: usize) -> R<Figures> {
    let url = format!("{server}_fair");
    let name = admin::split_url(&url)?.0;
    admin::drop_database(server, &name).await?;
    admin::create_database_if_missing(&url).await?;
    db::migrate::run_pending(&url).await?;
    let pool = db::connect(&db::PoolOptions::new(url.clone()).size(24)).await?;
    if arrival {
        pool.get().await?.batch_execute(ARRIVAL_ORDER).await?;
    }
    let backlog_firm = Uuid::new_v4();
    for _ in 0..BACKLOG {
        upload(&pool, backlog_firm, DemandClass::Interactive).await?;
    }
    let mut running = Vec::new();
    for i in 0..nodes {
        let mut s = settings(&url);
        s.transport.kind = TransportKind::Postgres;
        s.builders.concurrency = SLOTS;
        s.node.id = format!("fair-{i}");
        s.database.pool_size = 10;
        running.push(
            Node::builder(Arc::new(s), Arc::new(NoOp(BUILD)))
                .start()
                .await?,
        );
    }
    let firms: Vec<Uuid> = (0..TRICKLE_FIRMS).map(|_| Uuid::new_v4()).collect();
    let mut trickle = Vec::new();
    // Uploads spread over the backlog's service, firm by firm in turn.
    let step = TRICKLE_EVERY / TRICKLE_FIRMS as u32;
    for _ in 0..TRICKLE_EACH {
        for f in &firms {
            trickle.push(upload(&pool, *f, DemandClass::Interactive).await?);
            tokio::time::sleep(step).await;
        }
    }
    let total = BACKLOG + trickle.len();
    let deadline = Instant::now() + Duration::from_secs(600);
    while scalar(
        &pool,
        "SELECT count(*) AS n FROM ops.matter_frame_jobs WHERE landed_generation < requested_generation",
    )
    .await?
        > 0
    {
        if Instant::now() > deadline {
            return Err("the fair run did not finish in 600 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for n in &running {
        n.shutdown().await;
    }
    #[derive(diesel::QueryableByName)]
    struct Wait {
        #[diesel(sql_type = diesel::sql_types::Double)]
        ms: f64,
    }
    let mut waits: Vec<f64> = diesel::sql_query(
        "SELECT extract(epoch FROM (SELECT min(r.started_at) FROM ops.matter_frame_runs r
                                     WHERE r.matter_id = m.id
                                       AND r.started_at >= (SELECT max(o.created_at)
                                                              FROM ops.domain_event_outbox o
                                                             WHERE o.matter_id = m.id))
                            - (SELECT max(o.created_at) FROM ops.domain_event_outbox o
                                WHERE o.matter_id = m.id))::float8 * 1000 AS ms
           FROM unnest($1::uuid[]) AS m(id)",
    )
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(&trickle)
    .load::<Wait>(&mut pool.get().await?)
    .await?
    .into_iter()
    .map(|w| w.ms)
    .collect();
    waits.sort_by(f64::total_cmp);
    let span: Wait = diesel::sql_query(
        "SELECT extract(epoch FROM max(finished_at) - min(started_at))::float8 * 1000 AS ms
           FROM ops.matter_frame_runs",
    )
    .get_result(&mut pool.get().await?)
    .await?;
    drop(pool);
    admin::drop_database(server, &name).await?;
    Ok(Figures {
        p50_ms: pct(&waits, 0.5),
        p99_ms: pct(&waits, 0.99),
        max_ms: waits.last().copied().unwrap_or(f64::NAN),
        matters_per_s: total as f64 / (span.ms / 1000.0),
    })
}

/// The fair runs against the arrival-order runs, one and two nodes, printed and kept.
pub async fn fair_section(
    server: &str,
    results: &mut serde_json::Map<String, serde_json::Value>,
) -> R<()> {
    println!(
        "\nfair share: {BACKLOG} uploads of one firm, then {TRICKLE_FIRMS} firms × {TRICKLE_EACH} uploads \
         ({} ms builds, {SLOTS} slots a node); trickle wait = upload recorded → claimed",
        BUILD.as_millis()
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>10}",
        "run", "p50 ms", "p99 ms", "max ms", "matters/s"
    );
    for nodes in [1usize, 2] {
        let fair = one_run(server, false, nodes).await?;
        let arrival = one_run(server, true, nodes).await?;
        for (label, f) in [("fair", &fair), ("arrival order", &arrival)] {
            println!(
                "{:<34} {:>9.0} {:>9.0} {:>9.0} {:>10.1}",
                format!("{label}, {nodes} node(s)"),
                f.p50_ms,
                f.p99_ms,
                f.max_ms,
                f.matters_per_s
            );
        }
        println!(
            "{:<34} p99 {:.2} of arrival order's; throughput {:.2} of arrival order's; p99 {:.1} builds",
            format!("  ratio, {nodes} node(s)"),
            fair.p99_ms / arrival.p99_ms,
            fair.matters_per_s / arrival.matters_per_s,
            fair.p99_ms / BUILD.as_millis() as f64
        );
        results.insert(
            format!("fair_share_{nodes}_nodes"),
            json!({
                "backlog": BACKLOG, "trickle_uploads": TRICKLE_FIRMS * TRICKLE_EACH,
                "build_ms": BUILD.as_millis() as u64, "slots_per_node": SLOTS,
                "fair": {"p50_ms": fair.p50_ms, "p99_ms": fair.p99_ms, "max_ms": fair.max_ms,
                         "matters_per_s": fair.matters_per_s},
                "arrival_order": {"p50_ms": arrival.p50_ms, "p99_ms": arrival.p99_ms,
                                  "max_ms": arrival.max_ms, "matters_per_s": arrival.matters_per_s},
                "p99_ratio": fair.p99_ms / arrival.p99_ms,
                "throughput_ratio": fair.matters_per_s / arrival.matters_per_s,
                "p99_in_builds": fair.p99_ms / BUILD.as_millis() as f64,
            }),
        );
    }
    Ok(())
}
