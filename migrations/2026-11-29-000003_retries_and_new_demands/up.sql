-- Retries and new demands, made exact (both found by the model check, tests/model_check.rs).
--
-- 1. A plain claim (p_only_unserved = false) and a recorded lost claim are demands: they bump
--    the dispenser. They now restart the retries of a failing matter the way ops.demand does;
--    before, a new demand that reached a failing matter this way could stop after a single
--    failure of its own build.
-- 2. A claim for a recorded demand or a retry (p_only_unserved = true) no longer takes a row
--    whose retries are exhausted (p_max_attempts). Before, the sweeper's nudge after a lease
--    expired (or any late nudge) claimed it regardless, so a build that kept losing its lease
--    (a node killed by every build) was retried without end, although reconcile stopped.

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
