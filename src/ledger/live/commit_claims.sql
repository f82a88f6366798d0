-- ops.commit_claims: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.commit_claims(p_firms uuid[], p_matters uuid[], p_tokens bigint[], p_run_ids uuid[], p_next_run_ids uuid[], p_nodes text[])
 RETURNS bigint[]
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_indexscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_nestloop TO 'off'
AS $function$
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
             ORDER BY u.firm, u.matter) u  -- rule: lock in key order
           CROSS JOIN LATERAL (SELECT j.ctid AS row_at FROM ops.matter_frame_jobs j
                                WHERE j.firm_id = u.firm AND j.matter_id = u.matter
                                  FOR NO KEY UPDATE) l;
    WITH member AS (
        SELECT x.*, NOT ops.is_archived(x.firm, x.matter) AS live  -- rule: archived matters get no follow-up
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
         -- rule: job rows by position
         WHERE j.ctid = ANY (v_rows)
           AND j.firm_id = m.firm AND j.matter_id = m.matter AND j.run_status IS NOT DISTINCT FROM 'running'
           AND j.claimed_generation = m.token AND j.claimed_run_id = m.run_id  -- rule: fenced by its own claim
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
                          WHEN l.n IS NOT NULL THEN 0 END ORDER BY m.n) INTO v_after  -- rule: answers in member order
      FROM member m LEFT JOIN landed l ON l.n = m.n;
    RETURN coalesce(v_after, '{}');
END
$function$;
