-- Back to 000013's claim and commit_claim and 000011's claim_batch and commit_frames (the loops
-- over the single transitions), each with 000012's and 000016's settings.
DROP FUNCTION ops.commit_claims(uuid[], uuid[], bigint[], uuid[], uuid[], text[]);

CREATE OR REPLACE FUNCTION ops.claim(p_firm uuid, p_matter uuid, p_lease_secs double precision,
                          p_run_id uuid, p_node text, p_trace_id text, p_event_ids uuid[],
                          p_only_unserved boolean, p_max_attempts integer)
RETURNS bigint LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off
SET plan_cache_mode = force_generic_plan AS $$
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

CREATE OR REPLACE FUNCTION ops.commit_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                 p_next_run_id uuid, p_node text)
RETURNS bigint LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off
SET plan_cache_mode = force_generic_plan AS $$
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

CREATE OR REPLACE FUNCTION ops.claim_batch(p_firms uuid[], p_matters uuid[],
                          p_lease_secs double precision[], p_run_ids uuid[], p_nodes text[],
                          p_trace_ids text[], p_event_ids text[], p_only_unserved boolean[],
                          p_max_attempts integer[])
RETURNS bigint[] LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    r        record;
    v_tokens bigint[] := array_fill(NULL::bigint, ARRAY[cardinality(p_firms)]);
BEGIN
    FOR r IN
        SELECT x.*
          FROM unnest(p_firms, p_matters, p_lease_secs, p_run_ids, p_nodes, p_trace_ids, p_event_ids,
                      p_only_unserved, p_max_attempts)
               WITH ORDINALITY AS x(firm, matter, lease_secs, run_id, node, trace_id, event_ids,
                                    only_unserved, max_attempts, n)
         ORDER BY x.firm, x.matter, x.n
    LOOP
        v_tokens[r.n] := ops.claim(r.firm, r.matter, r.lease_secs, r.run_id, r.node, r.trace_id,
                                   r.event_ids::uuid[], r.only_unserved, r.max_attempts);
    END LOOP;
    RETURN v_tokens;
END
$$;

CREATE OR REPLACE FUNCTION ops.commit_frames(p_firms uuid[], p_matters uuid[], p_tokens bigint[],
                          p_run_ids uuid[], p_next_run_ids uuid[], p_nodes text[], p_bodies text[])
RETURNS bigint[] LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    r       record;
    v_after bigint[] := array_fill(NULL::bigint, ARRAY[cardinality(p_firms)]);
BEGIN
    FOR r IN
        SELECT x.*
          FROM unnest(p_firms, p_matters, p_tokens, p_run_ids, p_next_run_ids, p_nodes, p_bodies)
               WITH ORDINALITY AS x(firm, matter, token, run_id, next_run_id, node, body, n)
         ORDER BY x.firm, x.matter, x.n
    LOOP
        v_after[r.n] := ops.commit_frame(r.firm, r.matter, r.token, r.run_id, r.next_run_id,
                                         r.node, r.body);
    END LOOP;
    RETURN v_after;
END
$$;
