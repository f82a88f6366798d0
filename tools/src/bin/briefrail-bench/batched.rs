//! The batched raw ceiling: what a minimal client reaches writing the same rows a served matter
//! writes (its inbox row, its demand, its claim, its run, its frame, its commit), in batches of
//! the size the rail made in the run it is compared with. The per-transaction ceiling (one claim
//! and one compare-and-swap per transaction) is passed by any batching rail; this one says how
//! far the rail is from what the database can do with the same batches.
//!
//! Three statements per batch, each its own transaction, as the rail's consumer, claimer and
//! committer are: the inbox rows and the demands; the claims and their open runs; the
//! compare-and-swaps, their frames and their closed runs. The matters have been served before
//! (a job row at generation 1, its run and its frame), as real matters have.

use std::time::Instant;

use briefrail::db::{Pool, admin};
use uuid::Uuid;

use super::e2e::{clients_rate, fresh, job_matters};
use super::{R, exec};

/// The inbox rows and the demands of a batch.
const DEMAND: &str = "
WITH inbox AS (
    INSERT INTO ops.consumed_events (consumer, event_id)
    SELECT 'ceiling', e FROM unnest($3::uuid[]) AS e
)
UPDATE ops.matter_frame_jobs j
   SET requested_generation = j.requested_generation + 1, updated_at = now()
  FROM unnest($1::uuid[], $2::uuid[]) AS u(f, m)
 WHERE j.firm_id = u.f AND j.matter_id = u.m";

/// The claims of a batch and their runs; answers each claim's token.
const CLAIM: &str = "
WITH claimed AS (
    UPDATE ops.matter_frame_jobs j
       SET run_status = 'running', claimed_generation = j.requested_generation,
           claimed_at = now(), claimed_run_id = u.r, lease_seconds = 60,
           lease_expires_at = now() + interval '60 seconds', updated_at = now()
      FROM unnest($1::uuid[], $2::uuid[], $3::uuid[]) AS u(f, m, r)
     WHERE j.firm_id = u.f AND j.matter_id = u.m
       AND (j.run_status <> 'running' OR j.lease_expires_at < now())
    RETURNING j.firm_id, j.matter_id, j.claimed_generation, u.r
)
INSERT INTO ops.matter_frame_runs (run_id, firm_id, matter_id, token, node_id, started_at,
                                   heartbeat_at, outcome)
SELECT c.r, c.firm_id, c.matter_id, c.claimed_generation, 'ceiling', now(), now(), 'running'
  FROM claimed c
RETURNING matter_id, token, run_id";

/// The compare-and-swaps of a batch, their frames and their runs closed.
const COMMIT: &str = "
WITH landed AS (
    UPDATE ops.matter_frame_jobs j
       SET run_status = 'idle', landed_generation = u.t, updated_at = now()
      FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::uuid[]) AS u(f, m, t, r)
     WHERE j.firm_id = u.f AND j.matter_id = u.m AND j.run_status = 'running'
       AND j.claimed_generation = u.t AND j.claimed_run_id = u.r
    RETURNING j.firm_id, j.matter_id, u.t, u.r
), closed AS (
    UPDATE ops.matter_frame_runs r
       SET outcome = 'landed', finished_at = now(), heartbeat_at = now()
      FROM landed l WHERE r.run_id = l.r
)
INSERT INTO ops.matter_frames (firm_id, matter_id, generation, run_id, body)
SELECT l.firm_id, l.matter_id, l.t, l.r, $5::text::jsonb FROM landed l";

/// Matters a client cycles through: enough that a matter's rows are cold again by its turn.
const MATTERS_PER_CLIENT: usize = 256;

/// How many matters each statement takes at once: the inbox rows and demands, the claims, the
/// commits.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub inbox: usize,
    pub claim: usize,
    pub commit: usize,
}

impl Sizes {
    /// The mean sizes a run made, rounded, each at least 1.
    pub fn of(b: &super::e2e::Batches) -> Self {
        let n = |x: f64| (x.round().max(1.0) as usize).min(MATTERS_PER_CLIENT);
        Sizes {
            inbox: n(b.inbox),
            claim: n(b.claim),
            commit: n(b.commit),
        }
    }
}

/// Matters served per second by `conns` clients in batches of `sizes`, each frame's body
/// `body_bytes` long, over `secs` seconds, in a fresh database on `server`.
pub async fn ceiling(
    server: &str,
    conns: usize,
    sizes: Sizes,
    body_bytes: usize,
    secs: f64,
) -> R<f64> {
    let name = format!("{}_batched", admin::split_url(server)?.0);
    let (url, pool) = fresh(server, &name).await?;
    let firm = Uuid::new_v4();
    let matters = served_before(&pool, firm, conns * MATTERS_PER_CLIENT).await?;
    drop(pool);
    let body =
        serde_json::json!({ "brief": "x".repeat(body_bytes.saturating_sub(12)) }).to_string();
    clients_rate(server, &name, conns, &matters, secs, |mine, deadline| {
        let (url, body) = (url.clone(), body.clone());
        async move { client(&url, firm, mine, sizes, &body, deadline).await }
    })
    .await
}

/// `n` matters of `firm` served once: each a job row at generation 1, a landed run and a frame.
async fn served_before(pool: &Pool, firm: Uuid, n: usize) -> R<Vec<Uuid>> {
    exec(
        pool,
        &format!(
            "CREATE TEMP TABLE m AS SELECT gen_random_uuid() AS matter_id, gen_random_uuid() AS run_id
               FROM generate_series(1, {n});
             INSERT INTO ops.matter_frame_jobs (firm_id, matter_id, run_status, requested_generation,
                                                claimed_generation, landed_generation, claimed_run_id)
             SELECT '{firm}', matter_id, 'idle', 1, 1, 1, run_id FROM m;
             INSERT INTO ops.matter_frame_runs (run_id, firm_id, matter_id, token, node_id,
                                                finished_at, outcome)
             SELECT run_id, '{firm}', matter_id, 1, 'ceiling', now(), 'landed' FROM m;
             INSERT INTO ops.matter_frames (firm_id, matter_id, generation, run_id, body)
             SELECT '{firm}', matter_id, 1, run_id, '{{}}' FROM m;
             ANALYZE"
        ),
    )
    .await?;
    job_matters(pool, firm).await
}

/// One client: rounds of its own matters, each round's demands, then its claims, then its
/// commits, each in batches of its stage's size, until `deadline`; answers the matters served.
async fn client(
    url: &str,
    firm: Uuid,
    mine: Vec<Uuid>,
    sizes: Sizes,
    body: &str,
    deadline: Instant,
) -> Result<u64, tokio_postgres::Error> {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    // Each batch is planned for its own arrays. A plan kept for any array guesses ten elements
    // and joins the job rows to the array by a nested loop that reads the whole array again
    // for every row: with batches of 200 the ceiling fell to half of what the same rows allow.
    c.batch_execute("SET plan_cache_mode = force_custom_plan")
        .await?;
    let (demand, claim, commit) = (
        c.prepare(DEMAND).await?,
        c.prepare(CLAIM).await?,
        c.prepare(COMMIT).await?,
    );
    let round = sizes.inbox.max(sizes.claim).max(sizes.commit);
    let mut served = 0u64;
    for matters in mine.chunks(round).cycle() {
        if Instant::now() > deadline {
            break;
        }
        for chunk in matters.chunks(sizes.inbox) {
            let events: Vec<Uuid> = chunk.iter().map(|_| Uuid::new_v4()).collect();
            c.execute(&demand, &[&vec![firm; chunk.len()], &chunk, &events])
                .await?;
        }
        let mut claimed: Vec<(Uuid, i64, Uuid)> = Vec::new();
        for chunk in matters.chunks(sizes.claim) {
            let runs: Vec<Uuid> = chunk.iter().map(|_| Uuid::new_v4()).collect();
            for r in c
                .query(&claim, &[&vec![firm; chunk.len()], &chunk, &runs])
                .await?
            {
                claimed.push((r.get(0), r.get(1), r.get(2)));
            }
        }
        for chunk in claimed.chunks(sizes.commit) {
            let ms: Vec<Uuid> = chunk.iter().map(|x| x.0).collect();
            let tokens: Vec<i64> = chunk.iter().map(|x| x.1).collect();
            let runs: Vec<Uuid> = chunk.iter().map(|x| x.2).collect();
            served += c
                .execute(
                    &commit,
                    &[&vec![firm; chunk.len()], &ms, &tokens, &runs, &body],
                )
                .await?;
        }
    }
    Ok(served)
}
