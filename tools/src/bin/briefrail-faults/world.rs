//! Everything a fault acts on: the database clusters, the broker cluster, one proxy and one
//! process per node, the suite's own pool, and what the run has recorded so far.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use briefrail::db::{self, Pool};
use briefrail::ledger::EventName;
use briefrail::ledger::outbox::{NewEvent, record_event};
use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, RunQueryDsl};
use uuid::Uuid;

use crate::broker::BrokerCluster;
use crate::nodes::{NodeProc, NodeSpec};
use crate::postgres::PgCluster;
use crate::proxy::DbProxy;
use crate::schedule::{Fault, Rng};

pub const DB_NAME: &str = "briefrail_faults";

/// A time span (database clock) in which a fault may make a node's claims lapse: `node` none
/// means every node.
pub struct Window {
    pub fault: Fault,
    pub node: Option<String>,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

/// What a logical move lost: the facts and claims of the old cluster after its dump.
#[derive(Default)]
pub struct LostPast {
    pub events: HashSet<Uuid>,
    pub runs: HashSet<Uuid>,
    /// (matter, token, run) of every claim the old cluster handed out after the dump.
    pub tokens: Vec<(Uuid, i64, Uuid)>,
}

/// A message the suite put on the bus itself, by its `message_id`.
pub struct Injected {
    pub message_id: String,
    /// Whether it must be dead-lettered (malformed or forged) or consumed (valid).
    pub dead: bool,
}

pub struct World {
    pub seed: u64,
    pub dir: PathBuf,
    pub bin: PathBuf,
    pub prefix: String,
    /// Every cluster the ledger has lived in; the last is the current one.
    pub clusters: Vec<PgCluster>,
    pub pool: Pool,
    pub broker: BrokerCluster,
    pub proxies: Vec<DbProxy>,
    pub nodes: Vec<NodeProc>,
    pub firm: Uuid,
    pub matters: Vec<Uuid>,
    pub started: Instant,
    pub rng: Rng,
    pub windows: Vec<Window>,
    pub injected: BTreeMap<Fault, Vec<String>>,
    pub not_landed: Vec<String>,
    /// The kinds of the faults that did not land (their rows go into the verdict).
    pub missed: Vec<Fault>,
    pub bursts: Vec<(Uuid, DateTime<Utc>)>,
    pub demands_total: usize,
    pub messages: Vec<Injected>,
    pub lost: LostPast,
    /// Where node-0's next clock-skew restart takes it.
    pub skews: usize,
}

#[derive(QueryableByName, Debug)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

#[derive(QueryableByName, Debug)]
struct Line {
    #[diesel(sql_type = diesel::sql_types::Text)]
    what: String,
}

impl World {
    pub fn cluster(&self) -> &PgCluster {
        self.clusters.last().expect("a cluster")
    }

    pub fn db_url(&self) -> String {
        self.cluster().url(DB_NAME)
    }

    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// A matter drawn from the run's generator.
    pub fn any_matter(&mut self) -> Uuid {
        self.matters[self.rng.below(self.matters.len() as u64) as usize]
    }

    /// A one-number query (`... AS n`); -1 when the database does not answer.
    pub async fn count(&self, sql: &str) -> i64 {
        count(&self.pool, sql).await
    }

    /// A query returning one text row per violation (`... AS what`).
    pub async fn lines(&self, sql: &str) -> Vec<String> {
        lines(&self.pool, sql).await
    }

    /// The ledger clock now (the process clock if the database does not answer).
    pub async fn db_now(&self) -> DateTime<Utc> {
        db_now(&self.pool).await
    }

    /// Records `n` demands on `matter` in one transaction, retried whole while faults cut
    /// connections: counsel's uploads land together or not at all.
    pub async fn demand(&mut self, matter: Uuid, n: usize) -> Result<(), String> {
        let at = self.db_now().await;
        self.record(&[(matter, n)]).await?;
        self.demands_total += n;
        self.bursts.push((matter, at));
        Ok(())
    }

    /// Records demands on several matters, in one transaction per call.
    pub async fn record(&self, demands: &[(Uuid, usize)]) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let firm = self.firm;
        loop {
            let demands = demands.to_vec();
            let r = match self.pool.get().await {
                Ok(mut c) => c
                    .transaction(async move |tx| {
                        for (m, n) in demands {
                            for _ in 0..n {
                                let e = NewEvent::new(firm, m, EventName::BRIEF_REQUESTED)?;
                                record_event(tx, &e).await?;
                            }
                        }
                        Ok::<_, briefrail::Error>(())
                    })
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match r {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("demands not recorded for 60 s: {e}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Records a window in which `node`'s (or every node's) claims may lapse.
    pub async fn window(&mut self, fault: Fault, node: Option<&str>, from: DateTime<Utc>) {
        let to = self.db_now().await;
        self.windows.push(Window {
            fault,
            node: node.map(str::to_owned),
            from,
            to,
        });
    }

    /// Replaces the suite's pool with one on the current cluster.
    pub async fn reconnect(&mut self) -> Result<(), String> {
        self.pool = db::connect(&db::PoolOptions::new(self.db_url()).size(8))
            .await
            .map_err(|e| format!("the suite's pool on {}: {e}", self.cluster().name))?;
        Ok(())
    }

    pub fn node_spec(&self, i: usize) -> NodeSpec {
        self.nodes[i].spec.clone()
    }
}

pub async fn count(pool: &Pool, sql: &str) -> i64 {
    match pool.get().await {
        Ok(mut c) => diesel::sql_query(sql)
            .get_result::<Count>(&mut c)
            .await
            .map(|c| c.n)
            .unwrap_or(-1),
        Err(_) => -1,
    }
}

pub async fn lines(pool: &Pool, sql: &str) -> Vec<String> {
    match pool.get().await {
        Ok(mut c) => match diesel::sql_query(sql).load::<Line>(&mut c).await {
            Ok(v) => v.into_iter().map(|v| v.what).collect(),
            Err(e) => vec![format!("query failed: {e}")],
        },
        Err(e) => vec![format!("no connection: {e}")],
    }
}

pub async fn db_now(pool: &Pool) -> DateTime<Utc> {
    #[derive(QueryableByName)]
    struct T {
        #[diesel(sql_type = diesel::sql_types::Timestamptz)]
        t: DateTime<Utc>,
    }
    match pool.get().await {
        Ok(mut c) => diesel::sql_query("SELECT ops.now() AS t")
            .get_result::<T>(&mut c)
            .await
            .map(|t| t.t)
            .unwrap_or_else(|_| Utc::now()),
        Err(_) => Utc::now(),
    }
}
