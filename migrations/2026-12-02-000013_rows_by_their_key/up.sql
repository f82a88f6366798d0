-- Rows by their key. It redefines (the live text: src/ledger/live/): ops.claim, ops.record_lost_claim,
-- ops.heartbeat, ops.commit_claim, ops.start_lease, ops.fail_claim, ops.release_claim
-- (docs/protocol.md, "Speed: plans by key"). Expand only: seven functions redefined with the same signature, the same rows changed and the
-- same answers, so a node of the previous release keeps working across it.
--
-- Each of these reads one matter's job row (and its runs) by key, but its generic plan (kept
-- for the session's life) read them through a partial index instead: the planner costs
-- matter_frame_jobs_running_by_deadline (rows WHERE run_status = 'running') and
-- matter_frame_runs_open as a few entries, but every claim adds an entry that stays, dead, until
-- vacuum, and a scan with the key only as a filter reads all of them. After 20,000 claims
-- between two vacuums a commit's and a heartbeat's update read 58 index pages, the claim's
-- close of superseded runs 112 (auto_explain; 9 and 2 on a vacuumed ledger), so a sustained
-- burst made every transition slower the longer it lasted. Now:
--   * the status test is `run_status IS NOT DISTINCT FROM 'running'` (the same test: the column
--     is NOT NULL), which the planner cannot match to a partial index's predicate, so the row
--     is read through the primary key whatever the statistics say;
--   * the claim closes superseded runs by the matter's key (`r.firm_id = p_firm ...`), an index
--     condition on matter_frame_runs_open, instead of a join to the claimed row that the plan
--     evaluated as a filter over the whole index.
-- Each keeps 000012's `SET enable_seqscan = off SET jit = off` (a CREATE OR REPLACE drops a
-- setting it does not repeat). tests/plans.rs counts, over every transition, the scans of these indexes and the
-- entries they read.

CREATE OR REPLACE FUNCTION ops.claim(p_firm uuid, p_matter uuid, p_lease_secs double precision,
                          p_run_id uuid, p_node text, p_trace_id text, p_event_ids uuid[],
                          p_only_unserved boolean, p_max_attempts integer)
RETURNS bigint LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_result bigint;
BEGIN
    WITH claimed AS (
        INSERT INTO ops.matter_frame_jobs AS j
            (firm_id, matter_id, run_status, rebuild_needed, requested_generation,
             claimed_generation, claimed_at, updated_at, claimed_snapshot, claimed_cluster,
             claimed_run_id, lease_seconds, lease_expires_at)
        SELECT p_firm, p_matter, 'running', false, 1, 1, ops.clock(), ops.now(),
               pg_current_snapshot()::text, ops.cluster_id(), p_run_id, p_lease_secs,
               ops.clock() + make_interval(secs => p_lease_secs)
         WHERE NOT ops.is_archived(p_firm, p_matter)
        ON CONFLICT (firm_id, matter_id) DO UPDATE SET
            run_status           = 'running',
            rebuild_needed       = false,
            requested_generation = j.requested_generation + 1,
            claimed_generation   = j.requested_generation + 1,
            claimed_at           = ops.clock(),
            claimed_snapshot     = pg_current_snapshot()::text,
            claimed_cluster      = ops.cluster_id(),
            claimed_run_id       = p_run_id,
            lease_seconds        = p_lease_secs,
            lease_expires_at     = ops.clock() + make_interval(secs => p_lease_secs),
            consecutive_failures = CASE WHEN p_only_unserved THEN j.consecutive_failures ELSE 0 END,
            updated_at           = ops.now()
        WHERE (j.run_status <> 'running' OR j.lease_expires_at < ops.now())
          AND (NOT p_only_unserved OR (j.landed_generation < j.requested_generation
                                       AND j.consecutive_failures < p_max_attempts))
          AND NOT ops.is_archived(j.firm_id, j.matter_id)
        RETURNING j.firm_id, j.matter_id, j.claimed_generation
    ), superseded AS (
        UPDATE ops.matter_frame_runs r
           SET outcome = 'lease_expired', finished_at = ops.now()
         WHERE r.firm_id = p_firm AND r.matter_id = p_matter AND r.outcome = 'running'
           AND EXISTS (SELECT 1 FROM claimed)
    ), run AS (
        INSERT INTO ops.matter_frame_runs
            (run_id, firm_id, matter_id, token, node_id, started_at, heartbeat_at,
             outcome, trace_id, event_ids)
        SELECT p_run_id, firm_id, matter_id, claimed_generation, p_node, ops.clock(), ops.clock(),
               'running', p_trace_id, coalesce(p_event_ids, '{}')
          FROM claimed
    )
    SELECT claimed_generation INTO v_result FROM claimed;
    RETURN v_result;
END
$$;

CREATE OR REPLACE FUNCTION ops.record_lost_claim(p_firm uuid, p_matter uuid)
RETURNS bigint LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_result bigint;
BEGIN
    UPDATE ops.matter_frame_jobs
       SET requested_generation = requested_generation + 1,
           rebuild_needed       = true,
           consecutive_failures = 0,
           not_before           = NULL,
           updated_at           = ops.now()
     WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
    RETURNING requested_generation INTO v_result;
    RETURN v_result;
END
$$;

CREATE OR REPLACE FUNCTION ops.heartbeat(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid)
RETURNS boolean LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_result boolean;
BEGIN
    WITH renewed AS (
        UPDATE ops.matter_frame_jobs
           SET claimed_at = ops.clock(),
               lease_expires_at = ops.clock() + make_interval(secs => lease_seconds),
               updated_at = ops.now()
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
           AND claimed_generation = p_token AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET heartbeat_at = ops.clock()
         WHERE run_id = p_run_id AND EXISTS (SELECT 1 FROM renewed)
    )
    SELECT EXISTS (SELECT 1 FROM renewed) INTO v_result;
    RETURN v_result;
END
$$;

CREATE OR REPLACE FUNCTION ops.commit_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                 p_next_run_id uuid, p_node text)
RETURNS bigint LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_result bigint;
BEGIN
    WITH landed AS (
        UPDATE ops.matter_frame_jobs j SET
            landed_generation    = p_token,
            run_status           = CASE WHEN j.rebuild_needed AND m.live THEN 'running' ELSE 'idle' END,
            requested_generation = j.requested_generation
                                   + CASE WHEN j.rebuild_needed AND m.live THEN 1 ELSE 0 END,
            claimed_generation   = CASE WHEN j.rebuild_needed AND m.live THEN j.requested_generation + 1
                                        ELSE j.claimed_generation END,
            claimed_run_id       = CASE WHEN j.rebuild_needed AND m.live THEN p_next_run_id
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
          FROM (SELECT NOT ops.is_archived(p_firm, p_matter) AS live) m
         WHERE j.firm_id = p_firm AND j.matter_id = p_matter AND j.run_status IS NOT DISTINCT FROM 'running'
           AND j.claimed_generation = p_token AND j.claimed_run_id = p_run_id
        RETURNING j.firm_id, j.matter_id, j.run_status, j.claimed_generation
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome = 'landed', finished_at = ops.now(), heartbeat_at = ops.now()
         WHERE run_id = p_run_id AND EXISTS (SELECT 1 FROM landed)
    ), follow_up AS (
        INSERT INTO ops.matter_frame_runs
            (run_id, firm_id, matter_id, token, node_id, started_at, heartbeat_at, outcome)
        SELECT p_next_run_id, firm_id, matter_id, claimed_generation, p_node,
               ops.clock(), ops.clock(), 'running'
          FROM landed WHERE run_status = 'running'
    )
    SELECT CASE WHEN run_status = 'running' THEN claimed_generation ELSE 0 END INTO v_result FROM landed;
    RETURN v_result;
END
$$;

CREATE OR REPLACE FUNCTION ops.start_lease(p_firm uuid, p_matter uuid, p_run_id uuid)
RETURNS boolean LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_result boolean;
BEGIN
    WITH started AS (
        UPDATE ops.matter_frame_jobs
           SET claimed_at = ops.clock(),
               lease_expires_at = ops.clock() + make_interval(secs => lease_seconds)
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
           AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET started_at = ops.clock(), heartbeat_at = ops.clock()
         WHERE run_id = p_run_id AND EXISTS (SELECT 1 FROM started)
    )
    SELECT EXISTS (SELECT 1 FROM started) INTO v_result;
    RETURN v_result;
END
$$;

-- fail_claim (000005) and release_claim (000010) stay LANGUAGE sql (planned at each call,
-- by the statistics of the moment): the same status test keeps them off the partial index.
CREATE OR REPLACE FUNCTION ops.fail_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                               p_error text, p_permanent boolean, p_max_attempts integer,
                               p_backoff_base_secs double precision,
                               p_backoff_max_secs double precision)
RETURNS boolean LANGUAGE sql VOLATILE SET enable_seqscan = off SET jit = off AS $$
    WITH failed AS (
        UPDATE ops.matter_frame_jobs j SET
            run_status           = 'failed',
            consecutive_failures = CASE WHEN j.rebuild_needed THEN j.consecutive_failures
                                        WHEN p_permanent
                                        THEN greatest(p_max_attempts, j.consecutive_failures + 1)
                                        ELSE j.consecutive_failures + 1 END,
            not_before           = ops.now() + make_interval(secs => least(
                                        p_backoff_max_secs,
                                        p_backoff_base_secs * power(2, least(j.consecutive_failures, 30)))),
            updated_at           = ops.now()
         WHERE j.firm_id = p_firm AND j.matter_id = p_matter AND j.run_status IS NOT DISTINCT FROM 'running'
           AND j.claimed_generation = p_token AND j.claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome     = CASE WHEN EXISTS (SELECT 1 FROM failed) THEN 'failed' ELSE 'fenced' END,
               error       = p_error,
               finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
    )
    SELECT EXISTS (SELECT 1 FROM failed)
$$;

CREATE OR REPLACE FUNCTION ops.release_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                  p_reason text)
RETURNS boolean LANGUAGE sql VOLATILE SET enable_seqscan = off SET jit = off AS $$
    WITH released AS (
        UPDATE ops.matter_frame_jobs
           SET run_status = 'idle', not_before = NULL, updated_at = ops.now()
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
           AND claimed_generation = p_token AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome     = CASE WHEN EXISTS (SELECT 1 FROM released) THEN 'released' ELSE 'fenced' END,
               error       = p_reason,
               finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
    )
    SELECT EXISTS (SELECT 1 FROM released)
$$;
