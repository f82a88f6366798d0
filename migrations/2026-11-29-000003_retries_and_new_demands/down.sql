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
