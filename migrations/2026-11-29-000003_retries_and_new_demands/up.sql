-- Retries and new demands, made exact (found by the model check, tests/model_check.rs, and
-- its review against the runtime).
--
-- 1. A plain claim (p_only_unserved = false) and a recorded lost claim are demands: they bump
--    the dispenser. They now restart the retries of a failing matter the way ops.demand does;
--    before, a new demand that reached a failing matter this way could stop after a single
--    failure of its own build.
-- 2. A claim for a recorded demand or a retry (p_only_unserved = true) no longer takes a row
--    whose retries are exhausted (p_max_attempts). Before, the sweeper's nudge after a lease
--    expired (or any late nudge) claimed it regardless, so a build that kept losing its lease
--    (a node killed by every build) was retried without end, although reconcile stopped.
-- 3. A failure (or an expired lease) of a build claimed before a demand arrived no longer
--    counts against that demand (rebuild_needed marks such demands). Before, a permanent
--    failure of the old build exhausted the retries the demand had just restarted, and the
--    demand was never built.

DROP FUNCTION ops.claim(uuid, uuid, double precision, uuid, text, text, uuid[], boolean);

CREATE FUNCTION ops.claim(p_firm uuid, p_matter uuid, p_lease_secs double precision,
                          p_run_id uuid, p_node text, p_trace_id text, p_event_ids uuid[],
                          p_only_unserved boolean, p_max_attempts integer)
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
            -- A plain claim is itself a demand: like ops.demand, it restarts the retries.
            consecutive_failures = CASE WHEN p_only_unserved THEN j.consecutive_failures ELSE 0 END,
            updated_at           = now()
        WHERE (j.run_status <> 'running'
               OR j.claimed_at < now() - make_interval(secs => p_lease_secs))
          -- A claim for a recorded demand (or a retry) takes only an unserved row whose
          -- retries are not exhausted, whoever nudged it.
          AND (NOT p_only_unserved OR (j.landed_generation < j.requested_generation
                                       AND j.consecutive_failures < p_max_attempts))
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
           -- A new demand: retries of a failing matter restart (as in ops.demand).
           consecutive_failures = 0,
           not_before           = NULL,
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
            -- A build claimed before the demands that piled up on it (rebuild_needed) failing
            -- says nothing about them: it does not count against their retries.
            consecutive_failures = CASE WHEN j.rebuild_needed THEN j.consecutive_failures
                                        WHEN p_permanent
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
            consecutive_failures = j.consecutive_failures
                                   + CASE WHEN j.rebuild_needed THEN 0 ELSE 1 END,
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
