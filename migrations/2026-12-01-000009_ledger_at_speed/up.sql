-- The ledger at speed. It redefines (the live text: src/ledger/live/): ops.apply_events, ops.drain_outbox,
-- ops.commit_frame, ops.now, ops.clock, ops.cluster_id, ops.is_archived, ops.snapshot_covers, ops.demand,
-- ops.claim, ops.record_lost_claim, ops.heartbeat, ops.commit_claim, ops.start_lease
-- (docs/protocol.md, "The trigger", "commit" and "Speed"). Expand only: three new functions, and
-- eleven redefined with the same signature, the same statement and the same answers, so a
-- node of the previous release keeps working across it and it is applied while those nodes
-- run (README, "Upgrading").
--
-- A LANGUAGE sql function that is not inlined is parsed and planned again at every call: the
-- claim's three-CTE statement cost 2 ms of database CPU per call, forty times the statement it
-- wraps, and the rail runs one claim, one commit and one demand per matter (measured with
-- briefrail-bench and EXPLAIN). A plpgsql function keeps its plans for the session's life, so
-- the hot transitions and the helpers every one of them calls (the ledger clock, the cluster,
-- the archive gate, snapshot coverage) are plpgsql now: each runs the very statement or
-- expression it ran before (its text is unchanged but for INTO or RETURN). Measured with
-- pgbench, one claim and one commit per statement: 367 → 738 per second on one connection,
-- 820 → 1,478 on sixteen (the same two statements as raw SQL: 1,650).

-- ops.apply_events is the inbox, the gates and the demand for many events in one statement,
-- so a transport applies a batch of deliveries in one round trip and one transaction instead of
-- five round trips and one commit each. Every value comes from the event's outbox row; the
-- caller passes event ids only (and the names the rail hears). Each event decides for itself:
--   duplicate       its (consumer, event_id) inbox row was already there: no second effect;
--   not_heard       consumed; the rail does not hear this event name;
--   unknown_firm,
--   unknown_matter,
--   archived        consumed; a gate said no;
--   covered         consumed; a running or landed build already reads this fact;
--   demand          consumed; the demand was recorded (requested_generation is the row's).
-- An id with no outbox row yields no row: the caller decides (refused or expired).
-- Events are applied in (firm_id, matter_id, seq) order, so two batches that touch the same
-- job rows lock them in one global order and cannot deadlock; the outbox rows are read
-- FOR KEY SHARE (retention cannot remove an event a batch is applying).
CREATE OR REPLACE FUNCTION ops.apply_events(p_consumer text, p_event_ids uuid[], p_heard text[])
RETURNS TABLE (event_id uuid, outcome text, requested_generation bigint)
LANGUAGE plpgsql VOLATILE SET jit = off AS $$
#variable_conflict use_column
DECLARE
    r       record;
    fresh   integer;
    m_found boolean;
    m_gone  boolean;
BEGIN
    FOR r IN
        SELECT o.event_id, o.event_name, o.firm_id, o.matter_id, o.xact_id
          FROM ops.domain_event_outbox o
         WHERE o.event_id = ANY (p_event_ids)
         ORDER BY o.firm_id, o.matter_id, o.seq
           FOR KEY SHARE OF o
    LOOP
        event_id := r.event_id;
        requested_generation := NULL;
        INSERT INTO ops.consumed_events AS c (consumer, event_id)
        VALUES (p_consumer, r.event_id)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS fresh = ROW_COUNT;
        IF fresh = 0 THEN
            outcome := 'duplicate';
        ELSIF NOT (r.event_name = ANY (p_heard)) THEN
            outcome := 'not_heard';
        ELSE
            SELECT true, m.archived_at IS NOT NULL INTO m_found, m_gone
              FROM record.matters m
             WHERE m.firm_id = r.firm_id AND m.matter_id = r.matter_id;
            IF NOT FOUND THEN
                outcome := CASE WHEN EXISTS (SELECT 1 FROM record.matters m WHERE m.firm_id = r.firm_id)
                                THEN 'unknown_matter' ELSE 'unknown_firm' END;
            ELSIF m_gone THEN
                outcome := 'archived';
            ELSE
                requested_generation := ops.demand(r.firm_id, r.matter_id, r.xact_id);
                outcome := CASE WHEN requested_generation IS NULL THEN 'covered' ELSE 'demand' END;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- The ledger's now() and clock_timestamp() (000005 says why they exist), the cluster's
-- identity, the archive gate and snapshot coverage: each evaluated many times per transition,
-- so each keeps its plan too. COST 1 stays (000005: reconcile's plan and jit_above_cost).
CREATE OR REPLACE FUNCTION ops.now() RETURNS timestamptz LANGUAGE plpgsql STABLE COST 1 AS $$
BEGIN
    RETURN now()
           + make_interval(secs => coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0));
END
$$;

CREATE OR REPLACE FUNCTION ops.clock() RETURNS timestamptz LANGUAGE plpgsql VOLATILE COST 1 AS $$
BEGIN
    RETURN clock_timestamp()
           + make_interval(secs => coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0));
END
$$;

-- The cluster's identity cannot change under a session (a session is connected to one
-- server), so each session reads pg_control once (a file read, 40 µs a call) and keeps it in a
-- session setting; a rolled-back transaction only drops the cached copy. Nothing stored in a
-- table: a restored dump must never carry another cluster's identity.
CREATE OR REPLACE FUNCTION ops.cluster_id() RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_cached text := current_setting('briefrail.cluster_id', true);
BEGIN
    IF v_cached IS NULL OR v_cached = '' THEN
        v_cached := (SELECT system_identifier FROM pg_control_system())::text;
        PERFORM set_config('briefrail.cluster_id', v_cached, false);
    END IF;
    RETURN v_cached::bigint;
END
$$;

CREATE OR REPLACE FUNCTION ops.is_archived(p_firm uuid, p_matter uuid) RETURNS boolean LANGUAGE plpgsql STABLE COST 1 AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM record.matters m
                    WHERE m.firm_id = p_firm AND m.matter_id = p_matter AND m.archived_at IS NOT NULL);
END
$$;

CREATE OR REPLACE FUNCTION ops.snapshot_covers(p_xact bigint, p_snapshot text, p_cluster bigint)
RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN p_xact IS NOT NULL AND p_snapshot IS NOT NULL
       AND p_cluster IS NOT NULL AND p_cluster = ops.cluster_id()
       AND pg_visible_in_snapshot(p_xact::text::xid8, p_snapshot::pg_snapshot);
END
$$;

-- demand: a fact asked for a fresh Brief. Bumps the dispenser; a demand that lands while a
-- build runs leaves the breadcrumb. A new demand restarts the retries of a failing matter.
-- p_xact is the fact's transaction, read from the outbox row by the trigger (never from the
-- wire). When the running claim, or the claim whose frame landed last, saw that transaction
-- committed (ops.snapshot_covers), its build reads the fact already: the demand is covered,
-- adds no generation and no follow-up (returns NULL), and still restarts the retries.
CREATE OR REPLACE FUNCTION ops.demand(p_firm uuid, p_matter uuid, p_xact bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_result bigint;
BEGIN
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
      INTO v_result
      FROM upserted;
    RETURN v_result;
END
$$;

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
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_result bigint;
BEGIN
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
    SELECT claimed_generation INTO v_result FROM claimed;
    RETURN v_result;
END
$$;

-- lost claim: the claim returned no row because a build is running. Record this demand on the
-- running row so the build's commit re-claims for it. NULL when the row is no longer running
-- (the build finished in between): the caller claims again. A new demand restarts retries.
CREATE OR REPLACE FUNCTION ops.record_lost_claim(p_firm uuid, p_matter uuid)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_result bigint;
BEGIN
    UPDATE ops.matter_frame_jobs
       SET requested_generation = requested_generation + 1,
           rebuild_needed       = true,
           consecutive_failures = 0,
           not_before           = NULL,
           updated_at           = ops.now()
     WHERE firm_id = p_firm AND matter_id = p_matter AND run_status = 'running'
    RETURNING requested_generation INTO v_result;
    RETURN v_result;
END
$$;

-- heartbeat: renew the claim's deadline by its own lease (from the statement's clock), fenced by
-- the claim's identity.
-- false: this build has been fenced; cancel it.
CREATE OR REPLACE FUNCTION ops.heartbeat(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_result boolean;
BEGIN
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
    SELECT EXISTS (SELECT 1 FROM renewed) INTO v_result;
    RETURN v_result;
END
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
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_result bigint;
BEGIN
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
    SELECT CASE WHEN run_status = 'running' THEN claimed_generation ELSE 0 END INTO v_result FROM landed;
    RETURN v_result;
END
$$;

-- A follow-up's lease starts when the commit's work is done: called last in a commit whose
-- application writes ran after the compare-and-swap (they may take a while).
CREATE OR REPLACE FUNCTION ops.start_lease(p_firm uuid, p_matter uuid, p_run_id uuid)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_result boolean;
BEGIN
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
    SELECT EXISTS (SELECT 1 FROM started) INTO v_result;
    RETURN v_result;
END
$$;

-- commit_frame: the commit of a frame that carries no extra writes, as one statement in the
-- commit's transaction (BEGIN, this, COMMIT: three round trips instead of four):
-- ops.commit_claim, then ops.insert_frame, the very two calls the multi-statement commit makes.
-- NULL: fenced, nothing written. A body the database refuses raises SQLSTATE BRF01 with
-- insert_frame's refusal ('SQLSTATE: message') as the message and the hint
-- 'briefrail: frame refused', which aborts the transaction with the compare-and-swap before
-- it: the caller rolls back and fails the claim as permanent. Otherwise what commit_claim returned (0, or the follow-up's token).
CREATE OR REPLACE FUNCTION ops.commit_frame(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                 p_next_run_id uuid, p_node text, p_body text)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_after   bigint;
    v_refused text;
BEGIN
    v_after := ops.commit_claim(p_firm, p_matter, p_token, p_run_id, p_next_run_id, p_node);
    IF v_after IS NULL THEN
        RETURN NULL;
    END IF;
    v_refused := ops.insert_frame(p_firm, p_matter, p_token, p_run_id, p_body);
    IF v_refused IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BRF01', MESSAGE = v_refused,
                              HINT = 'briefrail: frame refused';
    END IF;
    RETURN v_after;
END
$$;

-- drain_outbox: the embedded transport's batch in one statement (and, called alone, one
-- transaction): lock up to p_limit publishable outbox rows in sequence order (SKIP LOCKED:
-- another node's drain takes other rows), apply them through ops.apply_events, mark them
-- published. One row per event applied, with what the trigger made of it and the ids a nudge
-- needs (every value from the outbox row).
CREATE OR REPLACE FUNCTION ops.drain_outbox(p_consumer text, p_limit integer, p_heard text[])
RETURNS TABLE (event_id uuid, firm_id uuid, matter_id uuid, traceparent text, outcome text,
               requested_generation bigint)
LANGUAGE plpgsql VOLATILE SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_ids uuid[];
BEGIN
    SELECT array_agg(t.event_id) INTO v_ids
      FROM (SELECT o.event_id
              FROM ops.domain_event_outbox o
             WHERE o.published_at IS NULL
               AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= ops.now())
             ORDER BY o.seq
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) t;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT a.event_id, o.firm_id, o.matter_id, o.traceparent, a.outcome, a.requested_generation
          FROM ops.apply_events(p_consumer, v_ids, p_heard) a
          JOIN ops.domain_event_outbox o ON o.event_id = a.event_id;
    UPDATE ops.domain_event_outbox o SET published_at = ops.now() WHERE o.event_id = ANY (v_ids);
END
$$;
