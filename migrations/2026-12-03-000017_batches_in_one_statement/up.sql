-- Batches in one statement. It redefines (the live text: src/ledger/live/): ops.claim_batch, ops.claim,
-- ops.commit_claims, ops.commit_claim, ops.commit_frames (docs/protocol.md, "Speed: batches").
-- Expand only: one new function (ops.commit_claims) and four redefined with the same signature,
-- the same rows changed and the same answers, so a node of the previous release keeps working
-- across it.
--
-- 000011 ran a batch as a loop that called the single transition once per member: one statement
-- per member, each with its own executor start, its own parse of the job row's four CHECK
-- constraints (Postgres parses a table's CHECKs again for every statement that writes it) and
-- its own foreign-key and index set-up. A claim and a commit are now each written once, for a
-- set of members, as one statement: the single transition is that statement with one member.
-- Measured with pgbench on a ledger of 200,000 matters (4 clients, batches of 32): claims
-- 171-179 → 225-240 batches/s, commits (with their frames) 185-215 → 340-355 batches/s.
--
-- What each member gets is what it got alone:
--   * every compare-and-swap is a condition on its own row: its own token and run id for a
--     commit, the row's own status and deadline (and, for a claim that serves a recorded
--     demand, its own attempts) for a claim; the answer at position i is member i's;
--   * rows are taken in (firm_id, matter_id) order, the order ops.apply_events locks job rows
--     in: the claim inserts its members in that order and the commit joins them to the job rows
--     by locking them first, each by its key, in that order, so two batches over the same
--     rows, or a batch and a trigger batch, cannot deadlock;
--   * a claim batch that names a matter twice runs its members one at a time, in lock order,
--     each a batch of one that sees the one before (what the loop did: a member that declines
--     does not stop the next); a commit batch that names one claim twice lands it for its
--     first member only (the loop's second found the row no longer running under that claim);
--   * a member without a run id is refused (23502), as the run's NOT NULL refused it before.
-- The members share one snapshot: they touch different rows, so none of them could see another's
-- effect in the loop either.
-- Each keeps 000012's and 000016's settings (CREATE OR REPLACE drops a setting it does not
-- repeat); `tests/plans.rs` runs them on a ledger analyzed while empty and counts what they read.

-- claim_batch: the claim (docs/protocol.md, "claim") for each member. p_event_ids[i] is member
-- i's event ids as an array literal ('{}' for none): a SQL array cannot hold arrays of
-- different lengths. Element i of the answer: member i's token, or NULL where it was not
-- claimed (a live build holds the row, the matter is archived, or, serving a recorded demand,
-- every demand is served or its attempts are spent).
CREATE OR REPLACE FUNCTION ops.claim_batch(p_firms uuid[], p_matters uuid[],
                          p_lease_secs double precision[], p_run_ids uuid[], p_nodes text[],
                          p_trace_ids text[], p_event_ids text[], p_only_unserved boolean[],
                          p_max_attempts integer[])
RETURNS bigint[] LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_indexscan = off SET jit = off
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_tokens bigint[];
    v_n      bigint;
BEGIN
    IF p_run_ids IS NULL OR array_position(p_run_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'not_null_violation',
                              MESSAGE = 'ops.claim_batch: every member needs a run id';
    END IF;
    IF (SELECT count(*) FROM (SELECT DISTINCT u.firm, u.matter
                                FROM unnest(p_firms, p_matters) AS u(firm, matter)) d)
       < cardinality(p_firms) THEN
        -- A matter named twice: the members one at a time, in lock order, each seeing the last.
        v_tokens := array_fill(NULL::bigint, ARRAY[cardinality(p_firms)]);
        FOR v_n IN SELECT x.n FROM unnest(p_firms, p_matters) WITH ORDINALITY AS x(firm, matter, n)
                    ORDER BY x.firm, x.matter, x.n LOOP
            v_tokens[v_n] := (ops.claim_batch(
                ARRAY[p_firms[v_n]], ARRAY[p_matters[v_n]], ARRAY[p_lease_secs[v_n]],
                ARRAY[p_run_ids[v_n]], ARRAY[p_nodes[v_n]], ARRAY[p_trace_ids[v_n]],
                ARRAY[p_event_ids[v_n]], ARRAY[p_only_unserved[v_n]], ARRAY[p_max_attempts[v_n]]))[1];
        END LOOP;
        RETURN v_tokens;
    END IF;
    WITH member AS (
        SELECT x.*
          FROM unnest(p_firms, p_matters, p_lease_secs, p_run_ids, p_nodes, p_trace_ids,
                      p_event_ids, p_only_unserved, p_max_attempts)
               WITH ORDINALITY AS x(firm, matter, lease_secs, run_id, node, trace_id, event_ids,
                                    only_unserved, max_attempts, n)
    ), claimed AS (
        INSERT INTO ops.matter_frame_jobs AS j
            (firm_id, matter_id, run_status, rebuild_needed, requested_generation,
             claimed_generation, claimed_at, updated_at, claimed_snapshot, claimed_cluster,
             claimed_run_id, lease_seconds, lease_expires_at)
        SELECT a.firm, a.matter, 'running', false, 1, 1, ops.clock(), ops.now(),
               pg_current_snapshot()::text, ops.cluster_id(), a.run_id, a.lease_secs,
               ops.clock() + make_interval(secs => a.lease_secs)
          FROM member a
         WHERE NOT ops.is_archived(a.firm, a.matter)
         ORDER BY a.firm, a.matter
        ON CONFLICT (firm_id, matter_id) DO UPDATE SET
            run_status           = 'running',
            rebuild_needed       = false,
            requested_generation = j.requested_generation + 1,
            claimed_generation   = j.requested_generation + 1,
            claimed_at           = ops.clock(),
            claimed_snapshot     = pg_current_snapshot()::text,
            claimed_cluster      = ops.cluster_id(),
            claimed_run_id       = excluded.claimed_run_id,
            lease_seconds        = excluded.lease_seconds,
            lease_expires_at     = ops.clock() + make_interval(secs => excluded.lease_seconds),
            consecutive_failures = CASE WHEN (SELECT a.only_unserved FROM member a
                                               WHERE a.run_id = excluded.claimed_run_id)
                                        THEN j.consecutive_failures ELSE 0 END,
            updated_at           = ops.now()
        WHERE (j.run_status <> 'running' OR j.lease_expires_at < ops.now())
          AND (SELECT NOT a.only_unserved OR (j.landed_generation < j.requested_generation
                                              AND j.consecutive_failures < a.max_attempts)
                 FROM member a WHERE a.run_id = excluded.claimed_run_id)
          AND NOT ops.is_archived(j.firm_id, j.matter_id)
        RETURNING j.firm_id, j.matter_id, j.claimed_generation, j.claimed_run_id
    ), stale AS (
        -- The runs a claim supersedes, read by each claimed matter's key (OFFSET 0 keeps the
        -- subquery a probe per claimed row, whatever the statistics make of a join).
        SELECT s.run_id
          FROM claimed c
               CROSS JOIN LATERAL (SELECT r.run_id FROM ops.matter_frame_runs r
                                    WHERE r.firm_id = c.firm_id AND r.matter_id = c.matter_id
                                      AND r.outcome = 'running' OFFSET 0) s
    ), superseded AS (
        UPDATE ops.matter_frame_runs r
           SET outcome = 'lease_expired', finished_at = ops.now()
         WHERE r.run_id = ANY (ARRAY(SELECT run_id FROM stale))
           AND r.outcome IS NOT DISTINCT FROM 'running'
    ), run AS (
        INSERT INTO ops.matter_frame_runs
            (run_id, firm_id, matter_id, token, node_id, started_at, heartbeat_at,
             outcome, trace_id, event_ids)
        SELECT c.claimed_run_id, c.firm_id, c.matter_id, c.claimed_generation, a.node,
               ops.clock(), ops.clock(), 'running', a.trace_id, coalesce(a.event_ids::uuid[], '{}')
          FROM claimed c JOIN member a ON a.run_id = c.claimed_run_id
    )
    SELECT array_agg(c.claimed_generation ORDER BY m.n) INTO v_tokens
      FROM member m LEFT JOIN claimed c ON c.claimed_run_id = m.run_id;
    RETURN coalesce(v_tokens, '{}');
END
$$;

-- claim: a batch of one (the transition is written once, above).
CREATE OR REPLACE FUNCTION ops.claim(p_firm uuid, p_matter uuid, p_lease_secs double precision,
                          p_run_id uuid, p_node text, p_trace_id text, p_event_ids uuid[],
                          p_only_unserved boolean, p_max_attempts integer)
RETURNS bigint LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN (ops.claim_batch(ARRAY[p_firm], ARRAY[p_matter], ARRAY[p_lease_secs], ARRAY[p_run_id],
                            ARRAY[p_node], ARRAY[p_trace_id],
                            ARRAY[coalesce(p_event_ids, '{}')::text], ARRAY[p_only_unserved],
                            ARRAY[p_max_attempts]))[1];
END
$$;

-- commit_claims: the commit's compare-and-swap (docs/protocol.md, "commit") for each member,
-- with its follow-up claim where demands piled up on the build (and the matter is live). Element
-- i: NULL when member i's claim is not current (fenced: nothing written for it), 0 when it
-- landed and the matter is idle, else the follow-up's token (its run is p_next_run_ids[i]).
CREATE OR REPLACE FUNCTION ops.commit_claims(p_firms uuid[], p_matters uuid[], p_tokens bigint[],
                          p_run_ids uuid[], p_next_run_ids uuid[], p_nodes text[])
RETURNS bigint[] LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_indexscan = off SET jit = off
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_rows  tid[];
    v_after bigint[];
BEGIN
    -- Lock the members' job rows in key order, each by its key (a probe per member: the
    -- lateral subquery with its row lock cannot be turned into a join the planner may reorder),
    -- and keep where each row is: nobody else can move a row this transaction holds, so the
    -- compare-and-swap below finds them by position whatever the statistics say.
    SELECT array_agg(l.row_at) INTO v_rows
      FROM (SELECT u.* FROM unnest(p_firms, p_matters) WITH ORDINALITY AS u(firm, matter, n)
             ORDER BY u.firm, u.matter) u
           CROSS JOIN LATERAL (SELECT j.ctid AS row_at FROM ops.matter_frame_jobs j
                                WHERE j.firm_id = u.firm AND j.matter_id = u.matter
                                  FOR NO KEY UPDATE) l;
    WITH member AS (
        SELECT x.*, NOT ops.is_archived(x.firm, x.matter) AS live
          FROM unnest(p_firms, p_matters, p_tokens, p_run_ids, p_next_run_ids, p_nodes)
               WITH ORDINALITY AS x(firm, matter, token, run_id, next_run_id, node, n)
    ), landed AS (
        UPDATE ops.matter_frame_jobs j SET
            landed_generation    = m.token,
            run_status           = CASE WHEN j.rebuild_needed AND m.live THEN 'running' ELSE 'idle' END,
            requested_generation = j.requested_generation
                                   + CASE WHEN j.rebuild_needed AND m.live THEN 1 ELSE 0 END,
            claimed_generation   = CASE WHEN j.rebuild_needed AND m.live THEN j.requested_generation + 1
                                        ELSE j.claimed_generation END,
            claimed_run_id       = CASE WHEN j.rebuild_needed AND m.live THEN m.next_run_id
                                        ELSE j.claimed_run_id END,
            claimed_at           = CASE WHEN j.rebuild_needed AND m.live THEN ops.clock()
                                        ELSE j.claimed_at END,
            lease_expires_at     = CASE WHEN j.rebuild_needed AND m.live
                                        THEN ops.clock() + make_interval(secs => j.lease_seconds)
                                        ELSE j.lease_expires_at END,
            claimed_snapshot     = CASE WHEN j.rebuild_needed AND m.live THEN pg_current_snapshot()::text
                                        ELSE j.claimed_snapshot END,
            claimed_cluster      = CASE WHEN j.rebuild_needed AND m.live THEN ops.cluster_id()
                                        ELSE j.claimed_cluster END,
            rebuild_needed       = false,
            consecutive_failures = 0,
            not_before           = NULL,
            updated_at           = ops.now()
          FROM (SELECT DISTINCT ON (d.firm, d.matter, d.token, d.run_id) d.*
                  FROM member d ORDER BY d.firm, d.matter, d.token, d.run_id, d.n) m
         WHERE j.ctid = ANY (v_rows)
           AND j.firm_id = m.firm AND j.matter_id = m.matter AND j.run_status IS NOT DISTINCT FROM 'running'
           AND j.claimed_generation = m.token AND j.claimed_run_id = m.run_id
        RETURNING j.firm_id, j.matter_id, j.run_status, j.claimed_generation, m.run_id,
                  m.next_run_id, m.node, m.n
    ), run AS (
        UPDATE ops.matter_frame_runs r
           SET outcome = 'landed', finished_at = ops.now(), heartbeat_at = ops.now()
          FROM landed l
         WHERE r.run_id = ANY (p_run_ids) AND r.run_id = l.run_id
    ), follow_up AS (
        INSERT INTO ops.matter_frame_runs
            (run_id, firm_id, matter_id, token, node_id, started_at, heartbeat_at, outcome)
        SELECT l.next_run_id, l.firm_id, l.matter_id, l.claimed_generation, l.node,
               ops.clock(), ops.clock(), 'running'
          FROM landed l WHERE l.run_status = 'running'
    )
    SELECT array_agg(CASE WHEN l.run_status = 'running' THEN l.claimed_generation
                          WHEN l.n IS NOT NULL THEN 0 END ORDER BY m.n) INTO v_after
      FROM member m LEFT JOIN landed l ON l.n = m.n;
    RETURN coalesce(v_after, '{}');
END
$$;

-- commit_claim: a batch of one (the compare-and-swap is written once, above).
CREATE OR REPLACE FUNCTION ops.commit_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                 p_next_run_id uuid, p_node text)
RETURNS bigint LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN (ops.commit_claims(ARRAY[p_firm], ARRAY[p_matter], ARRAY[p_token], ARRAY[p_run_id],
                              ARRAY[p_next_run_id], ARRAY[p_node]))[1];
END
$$;

-- commit_frames: ops.commit_claims, then each landed member's frame, in the caller's
-- transaction (BEGIN, this, COMMIT). A body the database refuses (not JSON, too large) raises
-- BRF01 as ops.commit_frame does and aborts the whole batch: the caller then commits each
-- member alone, so the refusal reaches its own build and the others land. A fenced member's
-- body is never read.
CREATE OR REPLACE FUNCTION ops.commit_frames(p_firms uuid[], p_matters uuid[], p_tokens bigint[],
                          p_run_ids uuid[], p_next_run_ids uuid[], p_nodes text[], p_bodies text[])
RETURNS bigint[] LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_after bigint[] := ops.commit_claims(p_firms, p_matters, p_tokens, p_run_ids,
                                          p_next_run_ids, p_nodes);
BEGIN
    BEGIN
        INSERT INTO ops.matter_frames (firm_id, matter_id, generation, run_id, body)
        SELECT x.firm, x.matter, x.token, x.run_id, x.body::jsonb
          FROM unnest(p_firms, p_matters, p_tokens, p_run_ids, p_bodies)
               WITH ORDINALITY AS x(firm, matter, token, run_id, body, n)
         WHERE v_after[x.n] IS NOT NULL;
    EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
        RAISE EXCEPTION USING ERRCODE = 'BRF01', MESSAGE = SQLSTATE || ': ' || SQLERRM,
                              HINT = 'briefrail: frame refused';
    END;
    RETURN v_after;
END
$$;
