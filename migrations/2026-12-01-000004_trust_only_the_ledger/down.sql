-- Back to the definitions of 000002 as amended by 000003 (generated from those files).

DROP FUNCTION ops.demand(uuid, uuid, bigint);
DROP FUNCTION ops.claim(uuid, uuid, double precision, uuid, text, text, uuid[], boolean, integer);
DROP FUNCTION ops.record_lost_claim(uuid, uuid);
DROP FUNCTION ops.heartbeat(uuid, uuid, bigint, uuid);
DROP FUNCTION ops.commit_claim(uuid, uuid, bigint, uuid, uuid, text);
DROP FUNCTION ops.insert_frame(uuid, uuid, bigint, uuid, text);
DROP FUNCTION ops.start_lease(uuid, uuid, uuid);
DROP FUNCTION ops.fail_claim(uuid, uuid, bigint, uuid, text, boolean, integer, double precision, double precision);
DROP FUNCTION ops.release_claim(uuid, uuid, bigint, uuid, text);
DROP FUNCTION ops.record_fenced(uuid, text);
DROP FUNCTION ops.sweep(integer);
DROP FUNCTION ops.unserved(integer, integer, double precision);
DROP FUNCTION ops.snapshot_covers(bigint, text, bigint);
DROP FUNCTION ops.is_archived(uuid, uuid);
DROP FUNCTION ops.cluster_id();

DROP INDEX ops.domain_event_outbox_republished;
ALTER TABLE ops.domain_event_outbox DROP COLUMN republish_count;
DROP INDEX ops.matter_frame_jobs_running_by_deadline;
CREATE INDEX matter_frame_jobs_running_by_claimed_at
    ON ops.matter_frame_jobs (claimed_at) WHERE run_status = 'running';
ALTER TABLE ops.matter_frame_jobs
    DROP CONSTRAINT matter_frame_jobs_running_has_a_deadline,
    DROP COLUMN claimed_run_id,
    DROP COLUMN lease_seconds,
    DROP COLUMN lease_expires_at,
    DROP COLUMN claimed_cluster;

CREATE FUNCTION ops.demand(p_firm uuid, p_matter uuid, p_xact bigint)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    WITH prior AS (
        -- Locks the row (re-reading its latest version) before judging coverage.
        SELECT (p_xact IS NOT NULL AND j.claimed_snapshot IS NOT NULL
                AND (j.run_status = 'running'
                     OR (j.run_status = 'idle' AND j.landed_generation = j.claimed_generation))
                AND pg_visible_in_snapshot(p_xact::text::xid8, j.claimed_snapshot::pg_snapshot)) AS covered
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
            -- Even a covered demand is a new demand: retries of a failing matter restart.
            consecutive_failures = 0,
            not_before           = NULL,
            updated_at           = now()
        RETURNING requested_generation
    )
    SELECT CASE WHEN coalesce((SELECT covered FROM prior), false) THEN NULL ELSE requested_generation END
      FROM upserted
$$;

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

CREATE FUNCTION ops.record_lost_claim(p_firm uuid, p_matter uuid)
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

CREATE FUNCTION ops.heartbeat(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH renewed AS (
        UPDATE ops.matter_frame_jobs
           SET claimed_at = now(), updated_at = now()
         WHERE firm_id = p_firm AND matter_id = p_matter
           AND claimed_generation = p_token AND run_status = 'running'
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET heartbeat_at = now()
         WHERE run_id = p_run_id AND EXISTS (SELECT 1 FROM renewed)
    )
    SELECT EXISTS (SELECT 1 FROM renewed)
$$;

CREATE FUNCTION ops.commit_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                 p_next_run_id uuid, p_node text)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    WITH landed AS (
        UPDATE ops.matter_frame_jobs j SET
            landed_generation    = p_token,
            run_status           = CASE WHEN j.rebuild_needed THEN 'running' ELSE 'idle' END,
            requested_generation = j.requested_generation + CASE WHEN j.rebuild_needed THEN 1 ELSE 0 END,
            claimed_generation   = CASE WHEN j.rebuild_needed THEN j.requested_generation + 1
                                        ELSE j.claimed_generation END,
            claimed_at           = CASE WHEN j.rebuild_needed THEN now() ELSE j.claimed_at END,
            claimed_snapshot     = CASE WHEN j.rebuild_needed THEN pg_current_snapshot()::text
                                        ELSE j.claimed_snapshot END,
            rebuild_needed       = false,
            consecutive_failures = 0,
            not_before           = NULL,
            updated_at           = now()
         WHERE j.firm_id = p_firm AND j.matter_id = p_matter
           AND j.claimed_generation = p_token AND j.run_status = 'running'
        RETURNING j.firm_id, j.matter_id, j.run_status, j.claimed_generation
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome = 'landed', finished_at = now(), heartbeat_at = now()
         WHERE run_id = p_run_id AND EXISTS (SELECT 1 FROM landed)
    ), follow_up AS (
        INSERT INTO ops.matter_frame_runs
            (run_id, firm_id, matter_id, token, node_id, started_at, heartbeat_at, outcome)
        SELECT p_next_run_id, firm_id, matter_id, claimed_generation, p_node, now(), now(), 'running'
          FROM landed WHERE run_status = 'running'
    )
    SELECT CASE WHEN run_status = 'running' THEN claimed_generation ELSE 0 END FROM landed
$$;

CREATE FUNCTION ops.fail_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
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

CREATE FUNCTION ops.release_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                  p_reason text)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH released AS (
        UPDATE ops.matter_frame_jobs
           SET run_status = 'failed', not_before = NULL, updated_at = now()
         WHERE firm_id = p_firm AND matter_id = p_matter
           AND claimed_generation = p_token AND run_status = 'running'
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome     = CASE WHEN EXISTS (SELECT 1 FROM released) THEN 'failed' ELSE 'fenced' END,
               error       = p_reason,
               finished_at = now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
    )
    SELECT EXISTS (SELECT 1 FROM released)
$$;

CREATE FUNCTION ops.record_fenced(p_run_id uuid, p_error text)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH closed AS (
        UPDATE ops.matter_frame_runs
           SET outcome = 'fenced', error = p_error, finished_at = now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM closed)
$$;

CREATE FUNCTION ops.sweep(p_lease_secs double precision, p_limit integer)
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

CREATE FUNCTION ops.unserved(p_max_attempts integer, p_limit integer, p_quiet_secs double precision)
RETURNS TABLE (firm_id uuid, matter_id uuid) LANGUAGE sql STABLE AS $$
    SELECT j.firm_id, j.matter_id
      FROM ops.matter_frame_jobs j
     WHERE j.landed_generation < j.requested_generation
       AND j.run_status <> 'running'
       AND (j.not_before IS NULL OR j.not_before <= now())
       AND j.consecutive_failures < p_max_attempts
       AND j.updated_at <= now() - make_interval(secs => p_quiet_secs)
     ORDER BY j.not_before NULLS FIRST
     LIMIT p_limit
$$;
