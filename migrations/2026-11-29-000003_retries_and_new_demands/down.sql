-- Back to the definitions of 2026-11-29-000002_ledger_transitions.

DROP FUNCTION ops.claim(uuid, uuid, double precision, uuid, text, text, uuid[], boolean, integer);

CREATE FUNCTION ops.claim(p_firm uuid, p_matter uuid, p_lease_secs double precision,
                          p_run_id uuid, p_node text, p_trace_id text, p_event_ids uuid[],
                          p_only_unserved boolean)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    WITH claimed AS (
        INSERT INTO ops.matter_frame_jobs AS j
            (firm_id, matter_id, run_status, rebuild_needed,
             requested_generation, claimed_generation, claimed_at, updated_at, claimed_snapshot)
        VALUES (p_firm, p_matter, 'running', false, 1, 1, now(), now(), pg_current_snapshot()::text)
        ON CONFLICT (firm_id, matter_id) DO UPDATE SET
            run_status           = 'running',
            rebuild_needed       = false,
            requested_generation = j.requested_generation + 1,
            claimed_generation   = j.requested_generation + 1,
            claimed_at           = now(),
            claimed_snapshot     = pg_current_snapshot()::text,
            updated_at           = now()
        WHERE (j.run_status <> 'running'
               OR j.claimed_at < now() - make_interval(secs => p_lease_secs))
          AND (NOT p_only_unserved OR j.landed_generation < j.requested_generation)
        RETURNING j.firm_id, j.matter_id, j.claimed_generation
    ), superseded AS (
        UPDATE ops.matter_frame_runs r
           SET outcome = 'lease_expired', finished_at = now()
          FROM claimed c
         WHERE r.firm_id = c.firm_id AND r.matter_id = c.matter_id AND r.outcome = 'running'
    ), run AS (
        INSERT INTO ops.matter_frame_runs
            (run_id, firm_id, matter_id, token, node_id, started_at, heartbeat_at,
             outcome, trace_id, event_ids)
        SELECT p_run_id, firm_id, matter_id, claimed_generation, p_node, now(), now(),
               'running', p_trace_id, coalesce(p_event_ids, '{}')
          FROM claimed
    )
    SELECT claimed_generation FROM claimed
$$;

CREATE OR REPLACE FUNCTION ops.record_lost_claim(p_firm uuid, p_matter uuid)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    UPDATE ops.matter_frame_jobs
       SET requested_generation = requested_generation + 1,
           rebuild_needed       = true,
           updated_at           = now()
     WHERE firm_id = p_firm AND matter_id = p_matter AND run_status = 'running'
    RETURNING requested_generation
$$;

CREATE OR REPLACE FUNCTION ops.fail_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                               p_error text, p_permanent boolean, p_max_attempts integer,
                               p_backoff_base_secs double precision,
                               p_backoff_max_secs double precision)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH failed AS (
        UPDATE ops.matter_frame_jobs j SET
            run_status           = 'failed',
            consecutive_failures = CASE WHEN p_permanent
                                        THEN greatest(p_max_attempts, j.consecutive_failures + 1)
                                        ELSE j.consecutive_failures + 1 END,
            not_before           = now() + make_interval(secs => least(
                                        p_backoff_max_secs,
                                        p_backoff_base_secs * power(2, least(j.consecutive_failures, 30)))),
            updated_at           = now()
         WHERE j.firm_id = p_firm AND j.matter_id = p_matter
           AND j.claimed_generation = p_token AND j.run_status = 'running'
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome     = CASE WHEN EXISTS (SELECT 1 FROM failed) THEN 'failed' ELSE 'fenced' END,
               error       = p_error,
               finished_at = now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
    )
    SELECT EXISTS (SELECT 1 FROM failed)
$$;

CREATE OR REPLACE FUNCTION ops.sweep(p_lease_secs double precision, p_limit integer)
RETURNS TABLE (firm_id uuid, matter_id uuid, token bigint) LANGUAGE sql VOLATILE AS $$
    WITH expired AS (
        SELECT j.firm_id, j.matter_id
          FROM ops.matter_frame_jobs j
         WHERE j.run_status = 'running'
           AND j.claimed_at < now() - make_interval(secs => p_lease_secs)
         ORDER BY j.claimed_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), failed AS (
        UPDATE ops.matter_frame_jobs j SET
            run_status           = 'failed',
            consecutive_failures = j.consecutive_failures + 1,
            not_before           = now(),
            updated_at           = now()
          FROM expired e
         WHERE j.firm_id = e.firm_id AND j.matter_id = e.matter_id
        RETURNING j.firm_id, j.matter_id, j.claimed_generation
    ), runs AS (
        UPDATE ops.matter_frame_runs r
           SET outcome = 'lease_expired', finished_at = now()
          FROM failed f
         WHERE r.firm_id = f.firm_id AND r.matter_id = f.matter_id
           AND r.token = f.claimed_generation AND r.outcome = 'running'
    )
    SELECT f.firm_id, f.matter_id, f.claimed_generation FROM failed f
$$;
