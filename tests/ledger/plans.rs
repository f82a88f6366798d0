//! Plans that read a matter's rows by key whatever the statistics say (`docs/protocol.md`
//! "Speed: plans by key").
//!
//! A ledger whose tables were analyzed while empty (a fresh install after `vacuumdb --analyze`,
//! or an `ANALYZE` before the first import) made every transition plan sequential scans, kept
//! for the session's life: serving N matters read O(N²) rows until autovacuum analyzed again.
//! The test runs every transition the rail calls, many times, in one transaction on such a
//! ledger, and counts that transaction's sequential scans of the ledger's tables, and its reads
//! of the partial indexes, which a generic plan preferred to the primary key: each
//! claim leaves an entry there that stays, dead, until vacuum, so reading a row through one
//! grew slower the longer a burst lasted.

use crate::common;

use briefrail::testing::TestDb;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};

/// Each transition, thirty times (plpgsql keeps a generic plan from the sixth call): the trigger
/// (one event applied, then one drained), the relay's lease, read, consumption and mark of another, the claim and its lost-claim path, the heartbeat, the
/// commit with its follow-up, the follow-up's lease, a failure, claims and commits in batches,
/// the multi-statement commit (compare-and-swap, then the frame), a release and a fenced run.
const WORKLOAD: &str = r#"
DO $$
DECLARE
    f     uuid := gen_random_uuid();
    heard text[] := ARRAY['document.uploaded'];
    m     uuid;
    e     uuid;
    r1    uuid;
    r2    uuid;
    r3    uuid;
    t     bigint;
    at    timestamptz;
BEGIN
    FOR i IN 1..30 LOOP
        m := gen_random_uuid();
        INSERT INTO record.matters (firm_id, matter_id, title) VALUES (f, m, 'Plan ' || i);
        e := gen_random_uuid();
        INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name)
        VALUES (e, f, m, 'document.uploaded');
        PERFORM ops.apply_events('plans', ARRAY[e], heard);

        r1 := gen_random_uuid();
        t := ops.claim(f, m, 600, r1, 'n', NULL, ARRAY[e], true, 5);
        IF t IS NULL THEN RAISE EXCEPTION 'matter %: the nudged claim was not won', i; END IF;
        IF NOT ops.heartbeat(f, m, t, r1) THEN RAISE EXCEPTION 'matter %: heartbeat fenced', i; END IF;
        IF ops.claim(f, m, 600, gen_random_uuid(), 'n', NULL, '{}', false, 5) IS NOT NULL THEN
            RAISE EXCEPTION 'matter %: a second claim won over a live build', i;
        END IF;
        IF ops.record_lost_claim(f, m) IS NULL THEN RAISE EXCEPTION 'matter %: lost claim not recorded', i; END IF;

        r2 := gen_random_uuid();
        t := ops.commit_frame(f, m, t, r1, r2, 'n', '{"step": 1}');
        IF coalesce(t, 0) = 0 THEN RAISE EXCEPTION 'matter %: no follow-up claimed', i; END IF;
        IF NOT ops.start_lease(f, m, r2) THEN RAISE EXCEPTION 'matter %: follow-up lease', i; END IF;
        IF NOT ops.fail_claim(f, m, t, r2, 'planned failure', false, 5, 1, 10) THEN
            RAISE EXCEPTION 'matter %: failure not recorded', i;
        END IF;

        INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name)
        VALUES (gen_random_uuid(), f, m, 'document.uploaded');
        PERFORM ops.drain_outbox('plans', 10, heard);
        e := gen_random_uuid();
        INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name)
        VALUES (e, f, m, 'document.uploaded') RETURNING created_at INTO at;
        IF (SELECT count(*) FROM ops.lease_events(10, 30)) <> 1 THEN
            RAISE EXCEPTION 'matter %: the lease did not take the one unpublished event', i;
        END IF;
        IF (SELECT count(*) FROM ops.events_aged(ARRAY[e])) <> 1 THEN
            RAISE EXCEPTION 'matter %: the event was not read', i;
        END IF;
        IF (SELECT count(*) FROM ops.consume_events(
                'plans-consumer', ARRAY[e], ARRAY['document.uploaded'], ARRAY[f], ARRAY[m],
                ARRAY[at],
                ARRAY[NULL::bigint], ARRAY[NULL::text], heard, true)
             WHERE outcome IS NOT NULL) <> 1 THEN
            RAISE EXCEPTION 'matter %: the consumer did not apply the event', i;
        END IF;
        IF ops.mark_published(ARRAY[e]) <> 1 THEN RAISE EXCEPTION 'matter %: not marked', i; END IF;
        r3 := gen_random_uuid();
        t := (ops.claim_batch(ARRAY[f], ARRAY[m], ARRAY[600::float8], ARRAY[r3], ARRAY['n'],
                              ARRAY[NULL::text], ARRAY['{}'], ARRAY[true], ARRAY[5]))[1];
        IF t IS NULL THEN RAISE EXCEPTION 'matter %: the batched claim was not won', i; END IF;
        IF (ops.commit_frames(ARRAY[f], ARRAY[m], ARRAY[t], ARRAY[r3], ARRAY[gen_random_uuid()],
                              ARRAY['n'], ARRAY['{"step": 2}']))[1] IS DISTINCT FROM 0 THEN
            RAISE EXCEPTION 'matter %: the batched commit did not land', i;
        END IF;

        r1 := gen_random_uuid();
        t := ops.claim(f, m, 600, r1, 'n', NULL, '{}', false, 5);
        IF ops.commit_claim(f, m, t, r1, gen_random_uuid(), 'n') IS DISTINCT FROM 0 THEN
            RAISE EXCEPTION 'matter %: the compare-and-swap did not land', i;
        END IF;
        IF ops.insert_frame(f, m, t, r1, '{"step": 3}') IS NOT NULL THEN
            RAISE EXCEPTION 'matter %: the frame was refused', i;
        END IF;

        r1 := gen_random_uuid();
        t := ops.claim(f, m, 600, r1, 'n', NULL, '{}', false, 5);
        IF NOT ops.release_claim(f, m, t, r1, 'planned release') THEN
            RAISE EXCEPTION 'matter %: release not recorded', i;
        END IF;
        PERFORM ops.record_fenced(r1, 'planned fence');
    END LOOP;
END
$$;
"#;

#[derive(diesel::QueryableByName)]
struct Scans {
    #[diesel(sql_type = Text)]
    tables: String,
}

#[derive(diesel::QueryableByName)]
struct IndexReads {
    #[diesel(sql_type = BigInt)]
    deadline_scans: i64,
    #[diesel(sql_type = BigInt)]
    unserved_scans: i64,
    #[diesel(sql_type = BigInt)]
    open_runs_scans: i64,
    #[diesel(sql_type = BigInt)]
    open_runs_read: i64,
    #[diesel(sql_type = BigInt)]
    job_key_scans: i64,
    #[diesel(sql_type = BigInt)]
    job_key_read: i64,
}

#[derive(diesel::QueryableByName)]
struct Frames {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_analyzed_while_empty_still_reads_each_row_by_key() {
    let db = TestDb::new(1).await.expect("test db");
    let mut c = db.connection().await.expect("connection");
    // Every table is empty now: the planner will believe them empty.
    c.batch_execute("ANALYZE").await.expect("analyze");
    c.batch_execute("BEGIN").await.expect("begin");
    c.batch_execute(WORKLOAD)
        .await
        .expect("every transition answered as it should");
    // This transaction's own scans (read before anything here scans a table itself).
    // ops.ledger_clock is one row without an index: reading it is a scan by design.
    let seen: Scans = diesel::sql_query(
        "SELECT coalesce(string_agg(schemaname || '.' || relname || ': ' || seq_scan, ', '
                                    ORDER BY relname), '') AS tables
           FROM pg_stat_xact_user_tables
          WHERE seq_scan > 0 AND schemaname IN ('ops', 'record') AND relname <> 'ledger_clock'",
    )
    .get_result(&mut c)
    .await
    .expect("read the transaction's scans");
    // The partial indexes are for the sweep and reconcile (which this workload never runs): a
    // transition that read its row through one would read every entry it holds, dead ones too.
    let index: IndexReads = diesel::sql_query(
        // Postgres 15 has no pg_stat_xact_user_indexes; its functions take an index too.
        "SELECT pg_stat_get_xact_numscans('ops.matter_frame_jobs_running_by_deadline'::regclass) AS deadline_scans,
                pg_stat_get_xact_numscans('ops.matter_frame_jobs_unserved'::regclass) AS unserved_scans,
                pg_stat_get_xact_numscans('ops.matter_frame_runs_open'::regclass) AS open_runs_scans,
                pg_stat_get_xact_tuples_returned('ops.matter_frame_runs_open'::regclass) AS open_runs_read,
                pg_stat_get_xact_numscans('ops.matter_frame_jobs_pkey'::regclass) AS job_key_scans,
                pg_stat_get_xact_tuples_returned('ops.matter_frame_jobs_pkey'::regclass) AS job_key_read",
    )
    .get_result(&mut c)
    .await
    .expect("read the transaction's index scans");
    let frames: Frames = diesel::sql_query("SELECT count(*) AS n FROM ops.matter_frames")
        .get_result(&mut c)
        .await
        .expect("count the frames");
    c.batch_execute("ROLLBACK").await.expect("rollback");
    assert_eq!(frames.n, 90, "thirty matters, three frames each");
    assert_eq!(
        (index.deadline_scans, index.unserved_scans),
        (0, 0),
        "a transition read its job row through a partial index instead of its primary key"
    );
    // Each claim closes the superseded runs of its own matter: by the matter's key, it reads
    // that matter's entries only (each matter opens five runs here, and in this one transaction
    // their old entries are not yet dead), not the index's hundreds.
    assert!(
        index.open_runs_scans > 0 && index.open_runs_read <= 6 * index.open_runs_scans,
        "closing superseded runs read {} entries of matter_frame_runs_open in {} scans: the whole index, not the matter's own",
        index.open_runs_read,
        index.open_runs_scans
    );
    // A job row is found by its key: a probe reads that row's entries (here each matter's
    // versions from this one transaction, about seven), never the index's hundreds, which a
    // set-based statement joined to its members by a plan made on empty tables did (000017).
    assert!(
        index.job_key_scans > 0 && index.job_key_read <= 12 * index.job_key_scans,
        "transitions read {} entries of the job rows' primary key in {} scans: whole scans, not probes by key",
        index.job_key_read,
        index.job_key_scans
    );
    assert!(
        seen.tables.is_empty(),
        "transitions scanned whole ledger tables on a ledger analyzed while empty: {}",
        seen.tables
    );
}

#[derive(diesel::QueryableByName)]
struct Unguarded {
    #[diesel(sql_type = Text)]
    functions: String,
}

/// The functions of `ops` that disable sequential scans (the transitions of 000012) but do not
/// run with `setting` (as `pg_proc.proconfig` spells it), comma-separated.
async fn without_setting(c: &mut diesel_async::AsyncPgConnection, setting: &str) -> String {
    diesel::sql_query(
        "SELECT coalesce(string_agg(p.oid::regprocedure::text, ', ' ORDER BY p.proname), '') AS functions
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'ops' AND 'enable_seqscan=off' = ANY (p.proconfig)
            AND NOT ($1 = ANY (p.proconfig))",
    )
    .bind::<Text, _>(setting)
    .get_result::<Unguarded>(c)
    .await
    .expect("read the functions' settings")
    .functions
}

/// A disabled scan is costed past `jit_above_cost`: a transition that disables sequential
/// scans and leaves JIT on compiled the one statement that still scans (the ledger clock's
/// single row) at every transaction, 30 ms each (a plain claim ran 22 times a second instead of
/// 1,273; perf showed LLVM in every frame). Every function that disables them turns JIT off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transition_that_disables_scans_never_compiles_its_statements() {
    let db = TestDb::new(1).await.expect("test db");
    let mut c = db.connection().await.expect("connection");
    let seen = without_setting(&mut c, "jit=off").await;
    assert!(
        seen.is_empty(),
        "functions that disable sequential scans but leave JIT on: {seen}"
    );
    let guarded: Frames = diesel::sql_query(
        "SELECT count(*) AS n FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'ops' AND 'enable_seqscan=off' = ANY (p.proconfig)",
    )
    .get_result(&mut c)
    .await
    .expect("count the guarded functions");
    assert_eq!(
        guarded.n, 23,
        "every transition, the batch transitions ops.commit_claims and ops.demands, the outbox and consumer statements and the claim's read of open runs disable sequential scans"
    );
}

/// Every transition that reads by key keeps the generic plan from its first call
/// (`plan_cache_mode = force_generic_plan`): custom plans, made anew at each of a session's first five calls of
/// each statement, cost every fresh pooled connection that much planning, and a node serving a
/// backlog right after it starts paid it on all its connections at once. A later
/// `CREATE OR REPLACE` that leaves the setting out fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transition_plans_generically_from_its_first_call() {
    let db = TestDb::new(1).await.expect("test db");
    let mut c = db.connection().await.expect("connection");
    let seen = without_setting(&mut c, "plan_cache_mode=force_generic_plan").await;
    assert!(
        seen.is_empty(),
        "transitions that plan their first calls anew each time (custom plans): {seen}"
    );
}

/// The mutation controls (`tests/common/mutations.rs`) whose killers are in this binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_bug_fails_a_guarantee_test() {
    common::mutations::assert_caught(module_path!()).await;
}

/// A batch of 64 members through every batch function, one at a time: the trigger batch as the
/// postgres transport drains it and as the broker's consumer applies it, the claim batch, and
/// the commit batch.
const BATCHES: &str = r#"
DO $$
DECLARE
    f       uuid := gen_random_uuid();
    heard   text[] := ARRAY['document.uploaded'];
    ms      uuid[];
    runs    uuid[];
    tokens  bigint[];
BEGIN
    INSERT INTO record.matters (firm_id, matter_id, title)
    SELECT f, gen_random_uuid(), 'Batch ' || i FROM generate_series(1, 64) i;
    SELECT array_agg(matter_id ORDER BY matter_id) INTO ms FROM record.matters WHERE firm_id = f;
    INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name)
    SELECT gen_random_uuid(), f, m, 'document.uploaded' FROM unnest(ms) m;
    IF (SELECT count(*) FROM ops.drain_outbox('batches', 64, heard)) <> 64 THEN
        RAISE EXCEPTION 'the drain did not apply the 64 events';
    END IF;
    INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name)
    SELECT gen_random_uuid(), f, m, 'document.uploaded' FROM unnest(ms) m;
    IF (SELECT count(*)
          FROM (SELECT array_agg(o.event_id) AS ids, array_agg(o.event_name) AS names,
                       array_agg(o.firm_id) AS firms, array_agg(o.matter_id) AS matters,
                       array_agg(o.created_at) AS at, array_agg(o.xact_id) AS xacts,
                       array_agg(o.traceparent) AS traces
                  FROM ops.domain_event_outbox o
                 WHERE o.firm_id = f AND o.published_at IS NULL) e
               CROSS JOIN LATERAL ops.consume_events('batches', e.ids, e.names, e.firms,
                                                     e.matters, e.at, e.xacts, e.traces, heard,
                                                     false) c
         WHERE c.outcome IS NOT NULL) <> 64 THEN
        RAISE EXCEPTION 'the consumer did not apply the 64 events';
    END IF;
    SELECT array_agg(gen_random_uuid()) INTO runs FROM unnest(ms);
    tokens := ops.claim_batch(array_fill(f, ARRAY[64]), ms, array_fill(600::float8, ARRAY[64]),
                              runs, array_fill('n'::text, ARRAY[64]),
                              array_fill(NULL::text, ARRAY[64]), array_fill('{}'::text, ARRAY[64]),
                              array_fill(true, ARRAY[64]), array_fill(5, ARRAY[64]));
    IF array_position(tokens, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'a claim of the batch was not won';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(ops.commit_frames(
                   array_fill(f, ARRAY[64]), ms, tokens, runs,
                   (SELECT array_agg(gen_random_uuid()) FROM unnest(ms)),
                   array_fill('n'::text, ARRAY[64]), array_fill('{"batch": 1}'::text, ARRAY[64]))) a
                WHERE a IS DISTINCT FROM 0) THEN
        RAISE EXCEPTION 'a commit of the batch did not land';
    END IF;
END
$$;
"#;

/// The nodes of a plan (`auto_explain`'s JSON) that ran more than once and read a whole set
/// each time (a CTE, an array, a sort or a materialized copy of either, the rows at a list of
/// positions): a batch of n members that has one under a join reads n × n rows. A probe of one
/// member's row by its key (an index scan under `LATERAL`) runs once per member by design and
/// is not one of them.
fn rescanned_sets(plan: &serde_json::Value, statement: &str, out: &mut Vec<String>) {
    let kind = plan["Node Type"].as_str().unwrap_or_default();
    let loops = plan["Actual Loops"].as_u64().unwrap_or(0);
    if loops > 1
        && matches!(
            kind,
            "CTE Scan" | "Function Scan" | "Sort" | "Materialize" | "Tid Scan"
        )
    {
        let name = plan["CTE Name"]
            .as_str()
            .or(plan["Alias"].as_str())
            .unwrap_or("");
        out.push(format!("{kind} {name} ×{loops} in «{statement}»"));
    }
    for child in plan["Plans"].as_array().into_iter().flatten() {
        rescanned_sets(child, statement, out);
    }
}

/// `docs/protocol.md` "Speed: a batch costs its size, not its square": the batch functions plan
/// generically, for a guessed ten members, and a nested loop that joins one set of members to
/// another read the inner set again for every outer row (the consumer's batch of 256 events
/// spent half its time so). Every statement the batch functions run is reported with its
/// executed plan (`auto_explain`, as notices on this session), and none may read a set of
/// members more than once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_joins_its_members_never_joins_them_in_a_loop() {
    use futures_util::StreamExt;

    let db = TestDb::new(1).await.expect("test db");
    let (client, mut connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let (tx, mut notices) = tokio::sync::mpsc::unbounded_channel::<String>();
    let reader = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notice(n) = message {
                let _ = tx.send(n.message().to_owned());
            }
        }
    });
    client
        .batch_execute(
            "LOAD 'auto_explain';
             SET auto_explain.log_min_duration = 0;
             SET auto_explain.log_analyze = on;
             SET auto_explain.log_timing = off;
             SET auto_explain.log_nested_statements = on;
             SET auto_explain.log_format = json;
             SET auto_explain.log_level = notice;",
        )
        .await
        .expect("auto_explain (a contrib module of the server) reports plans as notices");
    client
        .batch_execute(BATCHES)
        .await
        .expect("every batch answered as it should");
    drop(client);
    reader.await.expect("the notice reader");
    let mut plans = 0;
    let mut rescans = Vec::new();
    // A statement of each batch function, by a CTE only it names: the test must have seen them.
    let mut unseen = vec![
        ("wire AS", "ops.consume_events"),
        ("fresh AS", "ops.apply_events"),
        ("upserted AS", "ops.demands"),
        ("claimed AS", "ops.claim_batch"),
        ("landed AS", "ops.commit_claims"),
    ];
    while let Ok(notice) = notices.try_recv() {
        let Some(at) = notice.find('{') else { continue };
        let explained: serde_json::Value =
            serde_json::from_str(&notice[at..]).expect("auto_explain's JSON");
        let text = explained["Query Text"]
            .as_str()
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let statement: String = text.chars().take(90).collect();
        plans += 1;
        unseen.retain(|(cte, _)| !text.contains(cte));
        rescanned_sets(&explained["Plan"], &statement, &mut rescans);
    }
    assert!(
        unseen.is_empty(),
        "{plans} plans were reported, none of {:?}",
        unseen.iter().map(|(_, f)| f).collect::<Vec<_>>()
    );
    assert!(
        rescans.is_empty(),
        "batch statements read a set of members once per row of another:\n  {}",
        rescans.join("\n  ")
    );
}
