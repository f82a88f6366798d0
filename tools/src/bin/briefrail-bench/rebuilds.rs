//! Matters rebuilt often: one connection claims and commits the same 2,000 matters in batches
//! of 20 (`ops.claim_batch`, then `ops.commit_frames`, each its own transaction), round after
//! round, as a node does for matters rebuilt many times between two vacuums of the runs table.
//! It prints the rate in each 3-second window after a `VACUUM`, and the last window's rate over
//! the first's, measured in the same run. A rate that falls is the cost of what each build
//! leaves behind until vacuum: the entry of every closed run in `matter_frame_runs_open`, which
//! each later claim of the matter reads.

use std::time::{Duration, Instant};

use briefrail::db::admin;
use uuid::Uuid;

use super::R;
use super::e2e::{fresh, trial_sql};

const MATTERS: usize = 2_000;
const BATCH: usize = 20;
const WINDOW: Duration = Duration::from_secs(3);
const WINDOWS: usize = 5;

/// One batch of `matters` built once: its claims, then its commits.
async fn build(
    client: &tokio_postgres::Client,
    claim: &tokio_postgres::Statement,
    commit: &tokio_postgres::Statement,
    firm: Uuid,
    matters: &[Uuid],
) -> R<()> {
    let n = matters.len();
    let firms = vec![firm; n];
    let runs: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    let tokens: Vec<Option<i64>> = client
        .query_one(
            claim,
            &[
                &firms,
                &matters,
                &vec![600f64; n],
                &runs,
                &vec!["bench"; n],
                &vec![None::<String>; n],
                &vec!["{}"; n],
                &vec![false; n],
                &vec![5i32; n],
            ],
        )
        .await?
        .get(0);
    if tokens.iter().any(Option::is_none) {
        return Err("a claim of the loop was not won".into());
    }
    let next: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    let landed: Vec<Option<i64>> = client
        .query_one(
            commit,
            &[
                &firms,
                &matters,
                &tokens,
                &runs,
                &next,
                &vec!["bench"; n],
                &vec![r#"{"step": 1}"#; n],
            ],
        )
        .await?
        .get(0);
    if landed.iter().any(|t| *t != Some(0)) {
        return Err("a commit of the loop did not land".into());
    }
    Ok(())
}

pub(super) async fn rebuilds_section(server: &str) -> R<()> {
    let name = "briefrail_bench_rebuilds";
    let (url, pool) = fresh(server, name).await?;
    trial_sql(&pool).await?;
    drop(pool);
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    let conn = tokio::spawn(conn);
    let firm = Uuid::new_v4();
    let matters: Vec<Uuid> = (0..MATTERS).map(|_| Uuid::new_v4()).collect();
    client
        .execute(
            "INSERT INTO record.matters (firm_id, matter_id, title)
             SELECT $1, m, 'Rebuilt often' FROM unnest($2::uuid[]) AS m",
            &[&firm, &matters],
        )
        .await?;
    let claim = client
        .prepare("SELECT ops.claim_batch($1, $2, $3, $4, $5, $6, $7, $8, $9)")
        .await?;
    let commit = client
        .prepare("SELECT ops.commit_frames($1, $2, $3, $4, $5, $6, $7)")
        .await?;
    // Every matter served once (its job row made), then vacuumed: the measured rounds start
    // with nothing dead.
    for batch in matters.chunks(BATCH) {
        build(&client, &claim, &commit, firm, batch).await?;
    }
    client
        .batch_execute("VACUUM ANALYZE ops.matter_frame_runs, ops.matter_frame_jobs")
        .await?;
    let batches: Vec<&[Uuid]> = matters.chunks(BATCH).collect();
    let mut next = 0usize;
    let mut rates = Vec::with_capacity(WINDOWS);
    let mut builds = 0usize;
    for _ in 0..WINDOWS {
        let start = Instant::now();
        let mut cycles = 0usize;
        while start.elapsed() < WINDOW {
            build(
                &client,
                &claim,
                &commit,
                firm,
                batches[next % batches.len()],
            )
            .await?;
            next += 1;
            cycles += 1;
        }
        builds += cycles * BATCH;
        rates.push(cycles as f64 / start.elapsed().as_secs_f64());
    }
    let per_matter = builds as f64 / MATTERS as f64;
    println!(
        "\nrebuilt often: claim and commit batches of {BATCH}, one connection, {MATTERS} matters, after a VACUUM"
    );
    println!(
        "    cycles/s per {} s window: {}",
        WINDOW.as_secs(),
        rates
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "    last window over the first: {:.2} ({per_matter:.0} builds per matter since the vacuum)",
        rates[WINDOWS - 1] / rates[0]
    );
    drop(client);
    let _ = conn.await;
    admin::drop_database(server, name).await?;
    Ok(())
}
