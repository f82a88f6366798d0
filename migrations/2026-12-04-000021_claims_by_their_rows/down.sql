-- 000017's claim batch again: one upsert over every member.
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
