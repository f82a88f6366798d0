//! A matter rebuilt often, between two vacuums of the runs table (`docs/protocol.md`, "Speed:
//! plans by key"). Every run a claim closes leaves its entry in `matter_frame_runs_open`, dead,
//! until the runs table is vacuumed, and each claim of the matter reads that matter's entries
//! to close the runs it supersedes. Read by index scan, an entry found dead to every
//! transaction is marked so, and the next claim skips it; a bitmap scan never marks them, so
//! every claim visited every one.
//!
//! Whether an entry is dead to every transaction depends on every open transaction of the
//! whole cluster (one that started before the build keeps its versions alive for the fast
//! check), so this binary holds these tests only: cargo runs test binaries one at a time, never
//! beside the parallel suite, and the two tests here take [`ALONE`] in turn.

mod common;

use briefrail::testing::TestDb;
use diesel::sql_types::BigInt;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

/// Held by each test of this binary while it builds: the mutation control's runs of the test
/// (child processes) and the test itself must not run at once.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One build of one matter: a claim batch of one and its commit, in one transaction (one
/// statement), which closes the build's run.
const ONE_BUILD: &str = r#"
DO $$
DECLARE
    f uuid := '00000000-0000-0000-0000-0000000000f1';
    m uuid := '00000000-0000-0000-0000-0000000000a1';
    r uuid := gen_random_uuid();
    t bigint;
BEGIN
    INSERT INTO record.matters (firm_id, matter_id, title) VALUES (f, m, 'Often rebuilt')
    ON CONFLICT DO NOTHING;
    t := (ops.claim_batch(ARRAY[f], ARRAY[m], ARRAY[600::float8], ARRAY[r], ARRAY['n'],
                          ARRAY[NULL::text], ARRAY['{}'], ARRAY[false], ARRAY[5]))[1];
    IF t IS NULL THEN RAISE EXCEPTION 'the claim was not won'; END IF;
    IF (ops.commit_frames(ARRAY[f], ARRAY[m], ARRAY[t], ARRAY[r], ARRAY[gen_random_uuid()],
                          ARRAY['n'], ARRAY['{"step": 1}']))[1] IS DISTINCT FROM 0 THEN
        RAISE EXCEPTION 'the commit did not land';
    END IF;
END
$$;
"#;

#[derive(diesel::QueryableByName)]
struct EntriesRead {
    #[diesel(sql_type = BigInt)]
    scans: i64,
    #[diesel(sql_type = BigInt)]
    read: i64,
}

/// The session's reads of `matter_frame_runs_open` so far: they hold what the session has not
/// reported yet, earlier transactions' reads among them, so a test takes a difference.
async fn open_runs_read(c: &mut AsyncPgConnection) -> EntriesRead {
    diesel::sql_query(
        "SELECT pg_stat_get_xact_numscans('ops.matter_frame_runs_open'::regclass) AS scans,
                pg_stat_get_xact_tuples_returned('ops.matter_frame_runs_open'::regclass) AS read",
    )
    .get_result(c)
    .await
    .expect("read the session's index reads")
}

/// After forty builds of one matter, the next claim reads a few entries of the open runs'
/// index, not the forty its matter's closed runs left there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_visits_each_dead_entry_of_the_open_runs_index_once() {
    const BUILDS: i64 = 40;
    let _alone = ALONE.lock().await;
    let db = TestDb::new(1).await.expect("test db");
    let mut c = db.connection().await.expect("connection");
    for _ in 0..BUILDS {
        c.batch_execute(ONE_BUILD).await.expect("one build");
    }
    c.batch_execute("BEGIN").await.expect("begin");
    let before = open_runs_read(&mut c).await;
    c.batch_execute(ONE_BUILD).await.expect("one more build");
    let after = open_runs_read(&mut c).await;
    c.batch_execute("ROLLBACK").await.expect("rollback");
    let (scans, read) = (after.scans - before.scans, after.read - before.read);
    assert_eq!(
        scans, 1,
        "the claim read its matter's open runs through matter_frame_runs_open, once"
    );
    // The builds before it marked what they found dead; a few may be left to a transaction
    // open elsewhere at the time (autovacuum's analyze), never the whole history.
    assert!(
        read <= 5,
        "the claim read {read} entries of matter_frame_runs_open after {BUILDS} builds: the dead ones of every build since vacuum, not the last few"
    );
}

/// The mutation controls (`tests/common/mutations.rs`) whose killers are in this binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_bug_fails_a_guarantee_test() {
    let _alone = ALONE.lock().await;
    common::mutations::assert_caught(module_path!()).await;
}
