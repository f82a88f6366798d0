-- Back to 000008: the trigger one event at a time, and the hot transitions as LANGUAGE sql
-- (their definitions in 000005 and 000006, repeated here unchanged).
DROP FUNCTION ops.drain_outbox(text, integer, text[]);
DROP FUNCTION ops.commit_frame(uuid, uuid, bigint, uuid, uuid, text, text);
DROP FUNCTION ops.apply_events(text, uuid[], text[]);

CREATE OR REPLACE FUNCTION ops.demand(p_firm uuid, p_matter uuid, p_xact bigint)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    WITH prior AS (
        -- Locks the row (re-reading its latest version) before judging coverage.
        SELECT ((j.run_status = 'running'
                 OR (j.run_status = 'idle' AND j.landed_generation = j.claimed_generation))
                AND ops.snapshot_covers(p_xact, j.claimed_snapshot, j.claimed_cluster)) AS covered
          FROM ops.matter_frame_jobs j
         WHERE j.firm_id = p_firm AND j.matter_id = p_matter
           FOR UPDATE
    ), upserted AS (
        INSERT INTO ops.matter_frame_jobs AS j (firm_id, matter_id, requested_generation)
        VALUES (p_firm, p_matter, 1)
        ON CONFLICT (firm_id, matter_id) DO UPDATE SET
            requested_generation = j.requested_generation
                                   + CASE WHEN coalesce((SELECT covered FROM prior), false) THEN 0 ELSE 1 END,
            rebuild_needed       = j.rebuild_needed
                                   OR (j.run_status = 'running' AND NOT coalesce((SELECT covered FROM prior), false)),
            consecutive_failures = 0,
            not_before           = NULL,
            updated_at           = ops.now()
        RETURNING requested_generation
    )
    SELECT CASE WHEN coalesce((SELECT covered FROM prior), false) THEN NULL ELSE requested_generation END
      FROM upserted
$$;

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

CREATE OR REPLACE FUNCTION ops.record_lost_claim(p_firm uuid, p_matter uuid)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    UPDATE ops.matter_frame_jobs
       SET requested_generation = requested_generation + 1,
           rebuild_needed       = true,
           consecutive_failures = 0,
           not_before           = NULL,
           updated_at           = ops.now()
     WHERE firm_id = p_firm AND matter_id = p_matter AND run_status = 'running'
    RETURNING requested_generation
$$;

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

CREATE OR REPLACE FUNCTION ops.commit_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                 p_next_run_id uuid, p_node text)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
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
         WHERE j.firm_id = p_firm AND j.matter_id = p_matter AND j.run_status = 'running'
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
    SELECT CASE WHEN run_status = 'running' THEN claimed_generation ELSE 0 END FROM landed
$$;

CREATE OR REPLACE FUNCTION ops.start_lease(p_firm uuid, p_matter uuid, p_run_id uuid)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH started AS (
        UPDATE ops.matter_frame_jobs
           SET claimed_at = ops.clock(),
               lease_expires_at = ops.clock() + make_interval(secs => lease_seconds)
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status = 'running'
           AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET started_at = ops.clock(), heartbeat_at = ops.clock()
         WHERE run_id = p_run_id AND EXISTS (SELECT 1 FROM started)
    )
    SELECT EXISTS (SELECT 1 FROM started)
$$;

CREATE OR REPLACE FUNCTION ops.now() RETURNS timestamptz LANGUAGE sql STABLE COST 1 AS $$
    SELECT now()
           + make_interval(secs => coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0))
$$;

CREATE OR REPLACE FUNCTION ops.clock() RETURNS timestamptz LANGUAGE sql VOLATILE COST 1 AS $$
    SELECT clock_timestamp()
           + make_interval(secs => coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0))
$$;

CREATE OR REPLACE FUNCTION ops.cluster_id() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT system_identifier FROM pg_control_system()
$$;

CREATE OR REPLACE FUNCTION ops.is_archived(p_firm uuid, p_matter uuid) RETURNS boolean LANGUAGE sql STABLE COST 1 AS $$
    SELECT EXISTS (SELECT 1 FROM record.matters m
                    WHERE m.firm_id = p_firm AND m.matter_id = p_matter AND m.archived_at IS NOT NULL)
$$;

CREATE OR REPLACE FUNCTION ops.snapshot_covers(p_xact bigint, p_snapshot text, p_cluster bigint)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT p_xact IS NOT NULL AND p_snapshot IS NOT NULL
       AND p_cluster IS NOT NULL AND p_cluster = ops.cluster_id()
       AND pg_visible_in_snapshot(p_xact::text::xid8, p_snapshot::pg_snapshot)
$$;
