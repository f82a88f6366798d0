-- The ledger clock. This migration once defined every function of schema `ops` in full;
-- later migrations redefine many of them. The text that runs now is src/ledger/live/
-- (generated from a migrated database, checked by tests/schema_drift.rs).
--
-- What changes from 000004 (issue "a way for tests to hand statements a time"):
-- * ops.ledger_clock: one row at most, an offset in seconds added to the database clock. No row
--   (production: nothing but a test ever writes it) is an offset of 0, so production reads the
--   database clock exactly as before. A test advances it (briefrail::testing::
--   advance_ledger_clock) instead of sleeping past a lease, a backoff or a quiet period; as a
--   table row it holds for every connection and every process on the database.
-- * ops.now() (= now() + offset) and ops.clock() (= clock_timestamp() + offset).
-- * Every transition below reads time only through them: each now() of 000004 is ops.now(),
--   each clock_timestamp() is ops.clock(). Nothing else in their text changed.
-- * The defaults of the ledger's time columns (ops.matter_frame_jobs.updated_at, compared by
--   ops.unserved; ops.matter_frame_runs.started_at and heartbeat_at; ops.matter_frames.created_at;
--   ops.domain_event_outbox.created_at; ops.consumed_events.consumed_at) are ops.now(), so a
--   row written by a default and a statement comparing with ops.now() agree under an offset.
--   The outbox's published_at and next_attempt_at are written and compared through ops.now()
--   by src/ledger/outbox.rs. The record's own columns (schema record) keep now(): no statement
--   of the ledger compares them with a time.
-- * The two trigger functions of 000001 (ops.refuse_job_delete, ops.notify_outbox) are repeated
--   unchanged, so that this file holds every function of `ops`.

-- ---------------------------------------------------------------------------------------------
-- The clock
-- ---------------------------------------------------------------------------------------------

-- At most one row: the key can only be true. Written only by tests (advance_ledger_clock);
-- status and readiness never read it. Never behind the database clock.
CREATE TABLE ops.ledger_clock (
    only_row       boolean          PRIMARY KEY DEFAULT true
                                    CONSTRAINT ledger_clock_one_row CHECK (only_row),
    offset_seconds double precision NOT NULL DEFAULT 0
                                    CONSTRAINT ledger_clock_never_behind CHECK (offset_seconds >= 0)
);

-- The ledger's now(): the transaction's start on the database clock, plus the offset.
-- COST 1 (these three): each is one lookup, but a SQL function with a sub-select is not
-- inlined and costs 100 by default, which pushed reconcile's plan over jit_above_cost on a
-- million-row table: 10-40 ms of JIT for a 1 ms statement (measured with briefrail-bench).
CREATE OR REPLACE FUNCTION ops.now() RETURNS timestamptz LANGUAGE sql STABLE COST 1 AS $$
    SELECT now()
           + make_interval(secs => coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0))
$$;

-- The ledger's clock_timestamp(): the database clock at this instant, plus the offset.
CREATE OR REPLACE FUNCTION ops.clock() RETURNS timestamptz LANGUAGE sql VOLATILE COST 1 AS $$
    SELECT clock_timestamp()
           + make_interval(secs => coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0))
$$;

-- ---------------------------------------------------------------------------------------------
-- Time columns: their defaults read the ledger clock
-- ---------------------------------------------------------------------------------------------
ALTER TABLE ops.matter_frame_jobs   ALTER COLUMN updated_at   SET DEFAULT ops.now();
ALTER TABLE ops.matter_frame_runs   ALTER COLUMN started_at   SET DEFAULT ops.now(),
                                    ALTER COLUMN heartbeat_at SET DEFAULT ops.now();
ALTER TABLE ops.matter_frames       ALTER COLUMN created_at   SET DEFAULT ops.now();
ALTER TABLE ops.domain_event_outbox ALTER COLUMN created_at   SET DEFAULT ops.now();
ALTER TABLE ops.consumed_events     ALTER COLUMN consumed_at  SET DEFAULT ops.now();

-- ---------------------------------------------------------------------------------------------
-- Triggers (000001, unchanged)
-- ---------------------------------------------------------------------------------------------

-- Deleting and re-creating a job row would restart its tokens at 1 and let a zombie that
-- holds token 1 land (ABA). The row is the matter's history of tokens: refuse.
-- (Triggers matter_frame_jobs_no_delete and matter_frame_jobs_no_truncate, of 000001.)
CREATE OR REPLACE FUNCTION ops.refuse_job_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ops.matter_frame_jobs rows are never deleted: tokens must never restart'
        USING ERRCODE = 'restrict_violation';
END
$$;

-- A relay wakes on this instead of polling: the notification is delivered when the inserting
-- transaction commits, never before. (Trigger domain_event_outbox_notify, of 000001.)
CREATE OR REPLACE FUNCTION ops.notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('briefrail_outbox', '');
    RETURN NULL;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Helpers (inlined by the planner)
-- ---------------------------------------------------------------------------------------------

-- This cluster's identity: initdb gives every cluster its own; physical replicas and restores
-- of a physical backup keep it (and with it the history of transaction ids), a logical
-- dump/restore into a new cluster does not.
CREATE OR REPLACE FUNCTION ops.cluster_id() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT system_identifier FROM pg_control_system()
$$;

-- Whether the record says the matter is archived. The rail builds no archived matter.
CREATE OR REPLACE FUNCTION ops.is_archived(p_firm uuid, p_matter uuid) RETURNS boolean LANGUAGE sql STABLE COST 1 AS $$
    SELECT EXISTS (SELECT 1 FROM record.matters m
                    WHERE m.firm_id = p_firm AND m.matter_id = p_matter AND m.archived_at IS NOT NULL)
$$;

-- Whether a fact recorded by transaction p_xact was visible to a claim whose snapshot is
-- p_snapshot, taken on cluster p_cluster. Only a snapshot this cluster took may say yes: a
-- logical dump/restore gives the rows a new cluster whose transaction ids start afresh, so an
-- old snapshot would see every new fact as long committed. Anything else (a restored row, a
-- snapshot of unknown provenance) covers nothing, which costs at most one build.
-- (Comparing the snapshot's xmax with the current one instead is not enough: it stops judging
-- once the new cluster's ids pass the old ones, and it races a claim that commits while the
-- demand waits for the row.)
CREATE OR REPLACE FUNCTION ops.snapshot_covers(p_xact bigint, p_snapshot text, p_cluster bigint)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT p_xact IS NOT NULL AND p_snapshot IS NOT NULL
       AND p_cluster IS NOT NULL AND p_cluster = ops.cluster_id()
       AND pg_visible_in_snapshot(p_xact::text::xid8, p_snapshot::pg_snapshot)
$$;

-- ---------------------------------------------------------------------------------------------
-- The transitions, one statement each
-- ---------------------------------------------------------------------------------------------

-- demand: a fact asked for a fresh Brief. Bumps the dispenser; a demand that lands while a
-- build runs leaves the breadcrumb. A new demand restarts the retries of a failing matter.
-- p_xact is the fact's transaction, read from the outbox row by the trigger (never from the
-- wire). When the running claim, or the claim whose frame landed last, saw that transaction
-- committed (ops.snapshot_covers), its build reads the fact already: the demand is covered,
-- adds no generation and no follow-up (returns NULL), and still restarts the retries.
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

-- claim: the seed's statement. Wins when nobody is building or the row's own deadline has
-- passed (the claimer's lease, not the caller's); the returned claimed_generation is the
-- fencing token, and p_run_id, stored beside it, makes the claim's identity unique even if a
-- lost transaction lets the number be handed out again. The deadline is ops.now() plus the
-- caller's lease. An archived matter is never claimed.
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
        SELECT p_firm, p_matter, 'running', false, 1, 1, ops.now(), ops.now(),
               pg_current_snapshot()::text, ops.cluster_id(), p_run_id, p_lease_secs,
               ops.now() + make_interval(secs => p_lease_secs)
         WHERE NOT ops.is_archived(p_firm, p_matter)
        ON CONFLICT (firm_id, matter_id) DO UPDATE SET
            run_status           = 'running',
            rebuild_needed       = false,
            requested_generation = j.requested_generation + 1,
            claimed_generation   = j.requested_generation + 1,
            claimed_at           = ops.now(),
            claimed_snapshot     = pg_current_snapshot()::text,
            claimed_cluster      = ops.cluster_id(),
            claimed_run_id       = p_run_id,
            lease_seconds        = p_lease_secs,
            lease_expires_at     = ops.now() + make_interval(secs => p_lease_secs),
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
        SELECT p_run_id, firm_id, matter_id, claimed_generation, p_node, ops.now(), ops.now(),
               'running', p_trace_id, coalesce(p_event_ids, '{}')
          FROM claimed
    )
    SELECT claimed_generation FROM claimed
$$;

-- lost claim: the claim returned no row because a build is running. Record this demand on the
-- running row so the build's commit re-claims for it. NULL when the row is no longer running
-- (the build finished in between): the caller claims again. A new demand restarts retries.
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

-- heartbeat: renew the claim's deadline by its own lease, fenced by the claim's identity.
-- false: this build has been fenced; cancel it.
CREATE OR REPLACE FUNCTION ops.heartbeat(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH renewed AS (
        UPDATE ops.matter_frame_jobs
           SET claimed_at = ops.now(),
               lease_expires_at = ops.now() + make_interval(secs => lease_seconds),
               updated_at = ops.now()
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status = 'running'
           AND claimed_generation = p_token AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET heartbeat_at = ops.now()
         WHERE run_id = p_run_id AND EXISTS (SELECT 1 FROM renewed)
    )
    SELECT EXISTS (SELECT 1 FROM renewed)
$$;

-- commit: the compare-and-swap on the claim's identity. Lands the token and either idles the
-- row or, when demands piled up during the build (rebuild_needed) and the matter is not
-- archived, re-claims it in the same statement: a fresh token and run id, the flag cleared,
-- the same lease length, a run opened for the follow-up, its deadline from ops.clock()
-- (the commit's own start may be long past). Called first in the commit's transaction;
-- ops.insert_frame follows. NULL when fenced (the caller rolls back), 0 when landed with
-- nothing pending, or the follow-up token.
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

-- The frame of a commit whose compare-and-swap just succeeded (same transaction). The body
-- arrives as text and is turned into jsonb here, so a body the database refuses the same way
-- every time (a data exception such as 22P05, or a program limit) comes back as
-- 'SQLSTATE: message' instead of an error the caller could not classify; nothing is
-- inserted then and the caller rolls back. NULL: the frame is in.
CREATE OR REPLACE FUNCTION ops.insert_frame(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                 p_body text)
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_body jsonb;
BEGIN
    BEGIN
        v_body := p_body::jsonb;
    EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
        RETURN SQLSTATE || ': ' || SQLERRM;
    END;
    INSERT INTO ops.matter_frames (firm_id, matter_id, generation, run_id, body)
    VALUES (p_firm, p_matter, p_token, p_run_id, v_body);
    RETURN NULL;
END
$$;

-- A follow-up's lease starts when the commit's work is done: called last in a commit whose
-- application writes ran after the compare-and-swap (they may take a while).
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

-- fail: the build ended without a frame. Fenced by the claim's identity; sets the backoff
-- (exponential on the consecutive failures, capped). A permanent failure (the same input fails
-- the same way) jumps straight to p_max_attempts so retries stop until a new demand. A build
-- claimed before the demands that piled up on it (rebuild_needed) does not count against them.
-- The run is closed in the same statement: 'failed' when the claim was current, else 'fenced'.
CREATE OR REPLACE FUNCTION ops.fail_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                               p_error text, p_permanent boolean, p_max_attempts integer,
                               p_backoff_base_secs double precision,
                               p_backoff_max_secs double precision)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH failed AS (
        UPDATE ops.matter_frame_jobs j SET
            run_status           = 'failed',
            consecutive_failures = CASE WHEN j.rebuild_needed THEN j.consecutive_failures
                                        WHEN p_permanent
                                        THEN greatest(p_max_attempts, j.consecutive_failures + 1)
                                        ELSE j.consecutive_failures + 1 END,
            not_before           = ops.now() + make_interval(secs => least(
                                        p_backoff_max_secs,
                                        p_backoff_base_secs * power(2, least(j.consecutive_failures, 30)))),
            updated_at           = ops.now()
         WHERE j.firm_id = p_firm AND j.matter_id = p_matter AND j.run_status = 'running'
           AND j.claimed_generation = p_token AND j.claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome     = CASE WHEN EXISTS (SELECT 1 FROM failed) THEN 'failed' ELSE 'fenced' END,
               error       = p_error,
               finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
    )
    SELECT EXISTS (SELECT 1 FROM failed)
$$;

-- release: a node shutting down gives its claim back at once, fenced by the claim's
-- identity, so another node takes the matter over without waiting out the lease. Not a failure.
CREATE OR REPLACE FUNCTION ops.release_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                  p_reason text)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH released AS (
        UPDATE ops.matter_frame_jobs
           SET run_status = 'failed', not_before = NULL, updated_at = ops.now()
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status = 'running'
           AND claimed_generation = p_token AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome     = CASE WHEN EXISTS (SELECT 1 FROM released) THEN 'failed' ELSE 'fenced' END,
               error       = p_reason,
               finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
    )
    SELECT EXISTS (SELECT 1 FROM released)
$$;

-- fenced: a commit whose compare-and-swap matched no row rolled back; record why, outside
-- that transaction. A run the sweep already closed as lease_expired ends as fenced.
CREATE OR REPLACE FUNCTION ops.record_fenced(p_run_id uuid, p_error text)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH closed AS (
        UPDATE ops.matter_frame_runs
           SET outcome = 'fenced', error = p_error, finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM closed)
$$;

-- sweep: fail every running row whose own deadline has passed (oldest first, bounded) and
-- close its run as lease_expired. Rows being changed right now are skipped, not waited for. A
-- build claimed before the demands that piled up on it does not count a failure against them.
-- Returns the matters to nudge.
CREATE OR REPLACE FUNCTION ops.sweep(p_limit integer)
RETURNS TABLE (firm_id uuid, matter_id uuid, token bigint) LANGUAGE sql VOLATILE AS $$
    WITH expired AS (
        SELECT j.firm_id, j.matter_id
          FROM ops.matter_frame_jobs j
         WHERE j.run_status = 'running' AND j.lease_expires_at < ops.now()
         ORDER BY j.lease_expires_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), failed AS (
        UPDATE ops.matter_frame_jobs j SET
            run_status           = 'failed',
            consecutive_failures = j.consecutive_failures
                                   + CASE WHEN j.rebuild_needed THEN 0 ELSE 1 END,
            not_before           = ops.now(),
            updated_at           = ops.now()
          FROM expired e
         WHERE j.firm_id = e.firm_id AND j.matter_id = e.matter_id
        RETURNING j.firm_id, j.matter_id, j.claimed_generation, j.claimed_run_id
    ), runs AS (
        UPDATE ops.matter_frame_runs r
           SET outcome = 'lease_expired', finished_at = ops.now()
          FROM failed f
         WHERE r.run_id = f.claimed_run_id AND r.outcome = 'running'
    )
    SELECT f.firm_id, f.matter_id, f.claimed_generation FROM failed f
$$;

-- reconcile: matters with unserved demand that nobody is building, past their backoff, below
-- the retry limit, not archived, and quiet for p_quiet_secs (a demand whose own nudge is on
-- its way is left to it). Nudging them is what makes a dropped nudge harmless.
CREATE OR REPLACE FUNCTION ops.unserved(p_max_attempts integer, p_limit integer, p_quiet_secs double precision)
RETURNS TABLE (firm_id uuid, matter_id uuid) LANGUAGE sql STABLE AS $$
    SELECT j.firm_id, j.matter_id
      FROM ops.matter_frame_jobs j
     WHERE j.landed_generation < j.requested_generation
       AND j.run_status <> 'running'
       AND (j.not_before IS NULL OR j.not_before <= ops.now())
       AND j.consecutive_failures < p_max_attempts
       AND j.updated_at <= ops.now() - make_interval(secs => p_quiet_secs)
       AND NOT ops.is_archived(j.firm_id, j.matter_id)
     ORDER BY j.not_before NULLS FIRST
     LIMIT p_limit
$$;
