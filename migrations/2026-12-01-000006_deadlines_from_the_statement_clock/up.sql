-- Deadlines from the statement's clock (fault catalogue row 15, "stale now()").
-- It redefines (the live text: src/ledger/live/): ops.claim, ops.heartbeat. Every other function of schema `ops` lives in
-- 000005_ledger_clock; tests/schema_drift.rs takes each function's last definition across the
-- two and fails when the database runs any other body.
--
-- now() is the start of the transaction. A claim or heartbeat made late in a long transaction
-- (an embedding application's own, say) wrote a deadline already in the past: its lease was
-- born expired and any sweep took the build away. The deadlines and the times they are
-- measured from (claimed_at, the run's started_at and heartbeat_at) now come from ops.clock(),
-- the statement's time; comparisons keep ops.now(), whose staleness can only delay an expiry,
-- never bring one forward. Signatures are unchanged: nodes of the previous build keep working
-- across this migration.

-- claim: the seed's statement. Wins when nobody is building or the row's own deadline has
-- passed (the claimer's lease, not the caller's); the returned claimed_generation is the
-- fencing token, and p_run_id, stored beside it, makes the claim's identity unique even if a
-- lost transaction lets the number be handed out again. The deadline is ops.clock() plus the
-- caller's lease (the statement's clock: a claim late in a long transaction is not born expired). An archived matter is never claimed.
-- With p_only_unserved (a nudge that follows a recorded demand, or a retry), only an unserved
-- row whose retries are not exhausted is claimed; a plain claim is itself a demand and
-- restarts the retries. Any run still open on an older claim is closed as lease_expired.
-- NULL: not claimed (a live build holds it, or nothing to do, or archived): the caller reads.
CREATE OR REPLACE FUNCTION ops.claim(p_firm uuid, p_matter uuid, p_lease_secs double precision,
                          p_run_id uuid, p_node text, p_trace_id text, p_event_ids uuid[],
                          p_only_unserved boolean, p_max_attempts integer)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
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
          FROM claimed c
         WHERE r.firm_id = c.firm_id AND r.matter_id = c.matter_id AND r.outcome = 'running'
    ), run AS (
        INSERT INTO ops.matter_frame_runs
            (run_id, firm_id, matter_id, token, node_id, started_at, heartbeat_at,
             outcome, trace_id, event_ids)
        SELECT p_run_id, firm_id, matter_id, claimed_generation, p_node, ops.clock(), ops.clock(),
               'running', p_trace_id, coalesce(p_event_ids, '{}')
          FROM claimed
    )
    SELECT claimed_generation FROM claimed
$$;

-- heartbeat: renew the claim's deadline by its own lease (from the statement's clock), fenced by
-- the claim's identity.
-- false: this build has been fenced; cancel it.
CREATE OR REPLACE FUNCTION ops.heartbeat(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH renewed AS (
        UPDATE ops.matter_frame_jobs
           SET claimed_at = ops.clock(),
               lease_expires_at = ops.clock() + make_interval(secs => lease_seconds),
               updated_at = ops.now()
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status = 'running'
           AND claimed_generation = p_token AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET heartbeat_at = ops.clock()
         WHERE run_id = p_run_id AND EXISTS (SELECT 1 FROM renewed)
    )
    SELECT EXISTS (SELECT 1 FROM renewed)
$$;
