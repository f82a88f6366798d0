-- The ledger's state transitions, one SQL statement each (PROTOCOL.md, "Transitions").
--
-- Why functions: diesel caches prepared statements for SELECTs but re-parses every UPDATE,
-- upsert and sql_query on each call. Calling `SELECT ops.claim(...)` makes each transition a
-- cached prepared statement (measured 2x on the claim + commit cycle, PITFALLS.md).
-- Each function body is exactly one statement (data-modifying CTEs keep the run bookkeeping in
-- the same statement as the job-row change), so it runs atomically on the database clock:
-- every time comparison uses now(), never a process clock.
--
-- The Rust side of each transition lives in src/ledger/transitions.rs under the same name.

-- demand: a fact asked for a fresh Brief. Bumps the dispenser; a demand that lands while a
-- build runs leaves the breadcrumb. A new demand also restarts retries of a failing matter.
-- When the fact's transaction (p_xact, from the outbox row) is visible in the snapshot of the
-- running claim, or of the claim whose frame landed last, that build reads the fact already:
-- the demand is covered: it adds no generation and no follow-up (returns NULL), though it still
-- restarts the retries of a failing matter. This is what keeps a burst that
-- reaches the trigger slowly (a backlog, several consumers) at no more than one follow-up.
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

-- claim: the seed's statement. Wins when nobody is building or the lease has expired; the
-- returned claimed_generation is the fencing token. Any run still open on an older token is
-- closed as lease_expired (its worker is a zombie; if it ever tries to write, it is fenced).
-- Returns NULL when a live build holds the matter: the caller must record a lost claim.
-- With p_only_unserved, a row whose demand is all served is not claimed either (a stale or
-- duplicated nudge costs no build); NULL is then ambiguous and the caller reads the row.
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

-- lost claim: the claim returned no row, so a build is running. Record this demand on the
-- running row so the build's commit re-claims for it. Returns NULL when the row is no longer
-- running (the build finished in between): the caller claims again. No demand is dropped.
CREATE FUNCTION ops.record_lost_claim(p_firm uuid, p_matter uuid)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    UPDATE ops.matter_frame_jobs
       SET requested_generation = requested_generation + 1,
           rebuild_needed       = true,
           updated_at           = now()
     WHERE firm_id = p_firm AND matter_id = p_matter AND run_status = 'running'
    RETURNING requested_generation
$$;

-- heartbeat: renew the lease, fenced by token. false: this build has been fenced; cancel it.
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

-- commit: the compare-and-swap. Lands the token and either idles the row or, when demands
-- piled up during the build (rebuild_needed), re-claims it in the same statement: a fresh
-- token, the flag cleared, a run opened for the follow-up. Called inside the transaction that
-- then inserts the frame. Returns NULL when fenced (the caller rolls back), 0 when landed with
-- nothing pending, or the follow-up token.
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

-- fail: the build ended without a frame. Fenced by token; sets the backoff (exponential on
-- the consecutive failures, capped). A permanent failure (the same input fails the same way)
-- jumps straight to p_max_attempts so reconcile stops retrying until a new demand.
-- The run is closed in the same statement: 'failed' when the token was current, else 'fenced'.
-- Returns whether the token was current.
CREATE FUNCTION ops.fail_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
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

-- release: a node shutting down gives its claim back at once, fenced by token, so another
-- node takes the matter over without waiting out the lease. Not counted as a failure.
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

-- fenced: a commit whose compare-and-swap matched no row rolled back; record why, outside
-- that transaction. A run the sweep already closed as lease_expired ends as fenced: its
-- worker did try to write, and the ledger refused.
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

-- sweep: fail every running row whose lease has expired (oldest first, bounded) and close
-- its run as lease_expired. Rows being changed right now are skipped, not waited for.
-- Returns the matters to nudge.
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

-- reconcile: matters with unserved demand that nobody is building, past their backoff and
-- below the retry limit, and quiet for p_quiet_secs (a demand whose own nudge is on its way is
-- left to it, so a sweeper on another node does not race it into a needless follow-up).
-- Nudging them is what makes a dropped nudge harmless.
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
