-- The claim batch as 2026-12-07-000001 left it, reading superseded runs with a bitmap scan.

CREATE OR REPLACE FUNCTION ops.claim_batch(p_firms uuid[], p_matters uuid[], p_lease_secs double precision[], p_run_ids uuid[], p_nodes text[], p_trace_ids text[], p_event_ids text[], p_only_unserved boolean[], p_max_attempts integer[])
 RETURNS bigint[]
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_indexscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_tokens  bigint[];
    v_n       bigint;
    v_rows    tid[];
    v_claimed uuid[];
    v_gens    bigint[];
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
    IF (SELECT count(*) FROM unnest(p_firms, p_matters) AS u(firm, matter)
               CROSS JOIN LATERAL (SELECT 1 FROM ops.matter_frame_jobs j
                                    WHERE j.firm_id = u.firm AND j.matter_id = u.matter
                                   OFFSET 0) e)
       = cardinality(p_firms) THEN
        -- Every row exists: lock them in key order, each by its key, and keep where each is
        -- (nobody else can move a row this transaction holds).
        SELECT array_agg(l.row_at) INTO v_rows
          FROM (SELECT u.* FROM unnest(p_firms, p_matters) AS u(firm, matter)
                 ORDER BY u.firm, u.matter) u  -- rule: lock in key order
               CROSS JOIN LATERAL (SELECT j.ctid AS row_at FROM ops.matter_frame_jobs j
                                    WHERE j.firm_id = u.firm AND j.matter_id = u.matter
                                      FOR NO KEY UPDATE) l;
        WITH member AS (
            SELECT x.*, NOT ops.is_archived(x.firm, x.matter) AS live  -- rule: archived matters are not claimed
              FROM unnest(p_firms, p_matters, p_lease_secs, p_run_ids, p_only_unserved,
                          p_max_attempts)
                   AS x(firm, matter, lease_secs, run_id, only_unserved, max_attempts)
        ), claimed AS (
            UPDATE ops.matter_frame_jobs j SET
                run_status           = 'running',
                rebuild_needed       = false,
                requested_generation = j.requested_generation + 1,
                claimed_generation   = j.requested_generation + 1,
                claimed_at           = ops.clock(),
                claimed_snapshot     = pg_current_snapshot()::text,
                claimed_cluster      = ops.cluster_id(),
                claimed_run_id       = a.run_id,
                lease_seconds        = a.lease_secs,
                lease_expires_at     = ops.clock() + make_interval(secs => a.lease_secs),  -- rule: lease from the clock now
                consecutive_failures = CASE WHEN a.only_unserved THEN j.consecutive_failures ELSE 0 END,
                updated_at           = ops.now()
              FROM member a
             WHERE j.ctid = ANY (v_rows)
               AND j.firm_id = a.firm AND j.matter_id = a.matter
               AND (j.run_status <> 'running' OR j.lease_expires_at < ops.now())
               -- rule: retry only the unserved by row
               AND (NOT a.only_unserved OR (j.landed_generation < j.requested_generation
                                            AND j.consecutive_failures < a.max_attempts))
               AND a.live
            RETURNING j.claimed_run_id, j.claimed_generation
        )
        SELECT array_agg(c.claimed_run_id), array_agg(c.claimed_generation)
          INTO v_claimed, v_gens
          FROM claimed c;
    ELSE
        -- A row is missing: 000017's upsert, for every member.
        WITH member AS (
            SELECT x.*
              FROM unnest(p_firms, p_matters, p_lease_secs, p_run_ids, p_only_unserved,
                          p_max_attempts)
                   AS x(firm, matter, lease_secs, run_id, only_unserved, max_attempts)
        ), claimed AS (
            INSERT INTO ops.matter_frame_jobs AS j
                (firm_id, matter_id, run_status, rebuild_needed, requested_generation,
                 claimed_generation, claimed_at, updated_at, claimed_snapshot, claimed_cluster,
                 claimed_run_id, lease_seconds, lease_expires_at)
            SELECT a.firm, a.matter, 'running', false, 1, 1, ops.clock(), ops.now(),
                   pg_current_snapshot()::text, ops.cluster_id(), a.run_id, a.lease_secs,
                   ops.clock() + make_interval(secs => a.lease_secs)
              FROM member a
             WHERE NOT ops.is_archived(a.firm, a.matter)  -- rule: archived matters are not claimed
             ORDER BY a.firm, a.matter  -- rule: lock in key order
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
                lease_expires_at     = ops.clock() + make_interval(secs => excluded.lease_seconds),  -- rule: lease from the clock now
                consecutive_failures = CASE WHEN (SELECT a.only_unserved FROM member a
                                                   WHERE a.run_id = excluded.claimed_run_id)
                                            THEN j.consecutive_failures ELSE 0 END,
                updated_at           = ops.now()
            WHERE (j.run_status <> 'running' OR j.lease_expires_at < ops.now())
              -- rule: retry only the unserved by upsert
              AND (SELECT NOT a.only_unserved OR (j.landed_generation < j.requested_generation
                                                  AND j.consecutive_failures < a.max_attempts)
                     FROM member a WHERE a.run_id = excluded.claimed_run_id)
              AND NOT ops.is_archived(j.firm_id, j.matter_id)  -- rule: archived matters are not claimed
            RETURNING j.claimed_run_id, j.claimed_generation
        )
        SELECT array_agg(c.claimed_run_id), array_agg(c.claimed_generation)
          INTO v_claimed, v_gens
          FROM claimed c;
    END IF;
    IF v_claimed IS NOT NULL THEN
        -- The runs of the claims made: close the runs each supersedes (read by its matter's
        -- key: OFFSET 0 keeps the subquery a probe per claimed row, whatever the statistics
        -- make of a join), and open each claim's own.
        WITH member AS (
            SELECT x.*
              FROM unnest(p_firms, p_matters, p_run_ids, p_nodes, p_trace_ids, p_event_ids)
                   AS x(firm, matter, run_id, node, trace_id, event_ids)
        ), claimed AS (
            SELECT a.*, c.token
              FROM unnest(v_claimed, v_gens) AS c(run_id, token)
                   JOIN member a ON a.run_id = c.run_id
        ), stale AS (
            SELECT s.run_id
              FROM claimed c
                   CROSS JOIN LATERAL (SELECT r.run_id FROM ops.matter_frame_runs r
                                        WHERE r.firm_id = c.firm AND r.matter_id = c.matter
                                          AND r.outcome = 'running' OFFSET 0) s
        ), superseded AS (
            UPDATE ops.matter_frame_runs r
               SET outcome = 'lease_expired', finished_at = ops.now()
             -- rule: superseded runs by key
             WHERE r.run_id = ANY (ARRAY(SELECT run_id FROM stale))
               AND r.outcome IS NOT DISTINCT FROM 'running'
        )
        INSERT INTO ops.matter_frame_runs
            (run_id, firm_id, matter_id, token, node_id, started_at, heartbeat_at,
             outcome, trace_id, event_ids)
        SELECT c.run_id, c.firm, c.matter, c.token, c.node, ops.clock(), ops.clock(),
               'running', c.trace_id, coalesce(c.event_ids::uuid[], '{}')
          FROM claimed c;
    END IF;
    SELECT array_agg(c.token ORDER BY m.n) INTO v_tokens  -- rule: answers in member order
      FROM unnest(p_firms, p_matters, p_run_ids) WITH ORDINALITY AS m(firm, matter, run_id, n)
           LEFT JOIN unnest(v_claimed, v_gens) AS c(run_id, token) ON c.run_id = m.run_id;
    RETURN coalesce(v_tokens, '{}');  -- rule: one answer per member
END
$function$;

DROP FUNCTION ops.open_runs(uuid[], uuid[]);
