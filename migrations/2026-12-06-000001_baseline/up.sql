-- briefrail 0.1.0: the ledger's schema (schemas ops and record) as one baseline.
--
-- The first release squashed the pre-release migrations into this one. It was produced by
-- pg_dump --schema-only from a database those migrations had built, and tests/schema_drift.rs
-- proves that it builds the same catalog: src/ledger/live/ holds that catalog, one file per
-- function plus catalog.sql, and is the place to read what runs today. This file never
-- changes again: a later schema change is a migration of its own, after this one.
--
-- The `-- rule: <name>` comments in the function bodies name the rules that the planted bugs
-- of tests/common/mutations.rs break: each bug is planted at its marker, so reformatting the
-- SQL does not lose it. A comment changes nothing that runs.
--
-- A database built by the pre-release migrations is adopted without running this file
-- (src/db/migrate.rs): its catalog is this one, but for some of those markers.

-- Function bodies refer to tables created further down; Postgres checks them when called.
SET LOCAL check_function_bodies = false;

--
-- Name: ops; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA ops;

--
-- Name: record; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA record;

--
-- Name: apply_events(text, uuid[], text[]); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.apply_events(p_consumer text, p_event_ids uuid[], p_heard text[]) RETURNS TABLE(event_id uuid, outcome text, requested_generation bigint)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_indexscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_column
DECLARE
    v_ids      uuid[];
    v_outcomes text[];
    v_firms    uuid[];
    v_matters  uuid[];
    v_xacts    bigint[];
    v_asked    integer[];
    v_answers  bigint[];
BEGIN
    WITH ev AS (
        SELECT o.event_id, o.event_name, o.firm_id, o.matter_id, o.xact_id, o.seq
          FROM ops.domain_event_outbox o
         WHERE o.event_id = ANY (p_event_ids)
         ORDER BY o.firm_id, o.matter_id, o.seq
           FOR KEY SHARE OF o
    ), fresh AS (
        INSERT INTO ops.consumed_events AS c (consumer, event_id)
        SELECT p_consumer, ev.event_id FROM ev ORDER BY ev.firm_id, ev.matter_id, ev.seq
        ON CONFLICT DO NOTHING
        RETURNING c.event_id
    ), gated AS (
        SELECT ev.*,
               CASE WHEN NOT EXISTS (SELECT 1 FROM fresh f WHERE f.event_id = ev.event_id)  -- rule: each event once
                    THEN 'duplicate'
                    WHEN NOT (ev.event_name = ANY (p_heard)) THEN 'not_heard'
                    WHEN m.firm_id IS NULL
                    THEN CASE WHEN EXISTS (SELECT 1 FROM record.matters k WHERE k.firm_id = ev.firm_id)
                              THEN 'unknown_matter' ELSE 'unknown_firm' END
                    WHEN m.archived THEN 'archived'  -- rule: archived matters are gated
                    ELSE 'demand' END AS gate
          FROM ev
               LEFT JOIN LATERAL (SELECT r.firm_id, r.archived_at IS NOT NULL AS archived
                                    FROM record.matters r
                                   WHERE r.firm_id = ev.firm_id AND r.matter_id = ev.matter_id
                                  OFFSET 0) m ON true
    )
    SELECT array_agg(g.event_id ORDER BY g.firm_id, g.matter_id, g.seq),
           array_agg(g.gate ORDER BY g.firm_id, g.matter_id, g.seq),
           array_agg(g.firm_id ORDER BY g.firm_id, g.matter_id, g.seq) FILTER (WHERE g.gate = 'demand'),
           array_agg(g.matter_id ORDER BY g.firm_id, g.matter_id, g.seq) FILTER (WHERE g.gate = 'demand'),
           array_agg(g.xact_id ORDER BY g.firm_id, g.matter_id, g.seq) FILTER (WHERE g.gate = 'demand')
      INTO v_ids, v_outcomes, v_firms, v_matters, v_xacts
      FROM gated g;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    IF v_firms IS NOT NULL THEN
        v_answers := ops.demands(v_firms, v_matters, v_xacts);
    END IF;
    RETURN QUERY
        WITH e AS (
            SELECT x.event_id, x.gate, x.n,
                   count(*) FILTER (WHERE x.gate = 'demand') OVER (ORDER BY x.n) AS k
              FROM unnest(v_ids, v_outcomes) WITH ORDINALITY AS x(event_id, gate, n)
        )
        SELECT e.event_id,
               CASE WHEN e.gate <> 'demand' THEN e.gate
                    WHEN v_answers[e.k] IS NULL THEN 'covered' ELSE 'demand' END,
               CASE WHEN e.gate = 'demand' THEN v_answers[e.k] END
          FROM e ORDER BY e.n;
END
$$;

--
-- Name: claim(uuid, uuid, double precision, uuid, text, text, uuid[], boolean, integer); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.claim(p_firm uuid, p_matter uuid, p_lease_secs double precision, p_run_id uuid, p_node text, p_trace_id text, p_event_ids uuid[], p_only_unserved boolean, p_max_attempts integer) RETURNS bigint
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    RETURN (ops.claim_batch(ARRAY[p_firm], ARRAY[p_matter], ARRAY[p_lease_secs], ARRAY[p_run_id],
                            ARRAY[p_node], ARRAY[p_trace_id],
                            ARRAY[coalesce(p_event_ids, '{}')::text], ARRAY[p_only_unserved],
                            ARRAY[p_max_attempts]))[1];
END
$$;

--
-- Name: claim_batch(uuid[], uuid[], double precision[], uuid[], text[], text[], text[], boolean[], integer[]); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.claim_batch(p_firms uuid[], p_matters uuid[], p_lease_secs double precision[], p_run_ids uuid[], p_nodes text[], p_trace_ids text[], p_event_ids text[], p_only_unserved boolean[], p_max_attempts integer[]) RETURNS bigint[]
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_indexscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_tokens  bigint[];
    v_n       bigint;
    v_rows    tid[];
    v_claimed uuid[];
    v_gens    bigint[];
BEGIN
    IF p_run_ids IS NULL OR array_position(p_run_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'not_null_violation',
                              MESSAGE = 'ops.claim_batch: every member needs a run id';
    END IF;
    IF (SELECT count(*) FROM (SELECT DISTINCT u.firm, u.matter
                                FROM unnest(p_firms, p_matters) AS u(firm, matter)) d)
       < cardinality(p_firms) THEN
        -- A matter named twice: the members one at a time, in lock order, each seeing the last.
        v_tokens := array_fill(NULL::bigint, ARRAY[cardinality(p_firms)]);
        FOR v_n IN SELECT x.n FROM unnest(p_firms, p_matters) WITH ORDINALITY AS x(firm, matter, n)
                    ORDER BY x.firm, x.matter, x.n LOOP
            v_tokens[v_n] := (ops.claim_batch(
                ARRAY[p_firms[v_n]], ARRAY[p_matters[v_n]], ARRAY[p_lease_secs[v_n]],
                ARRAY[p_run_ids[v_n]], ARRAY[p_nodes[v_n]], ARRAY[p_trace_ids[v_n]],
                ARRAY[p_event_ids[v_n]], ARRAY[p_only_unserved[v_n]], ARRAY[p_max_attempts[v_n]]))[1];
        END LOOP;
        RETURN v_tokens;
    END IF;
    IF (SELECT count(*) FROM unnest(p_firms, p_matters) AS u(firm, matter)
               CROSS JOIN LATERAL (SELECT 1 FROM ops.matter_frame_jobs j
                                    WHERE j.firm_id = u.firm AND j.matter_id = u.matter
                                   OFFSET 0) e)
       = cardinality(p_firms) THEN
        -- Every row exists: lock them in key order, each by its key, and keep where each is
        -- (nobody else can move a row this transaction holds).
        SELECT array_agg(l.row_at) INTO v_rows
          FROM (SELECT u.* FROM unnest(p_firms, p_matters) AS u(firm, matter)
                 ORDER BY u.firm, u.matter) u  -- rule: lock in key order
               CROSS JOIN LATERAL (SELECT j.ctid AS row_at FROM ops.matter_frame_jobs j
                                    WHERE j.firm_id = u.firm AND j.matter_id = u.matter
                                      FOR NO KEY UPDATE) l;
        WITH member AS (
            SELECT x.*, NOT ops.is_archived(x.firm, x.matter) AS live  -- rule: archived matters are not claimed
              FROM unnest(p_firms, p_matters, p_lease_secs, p_run_ids, p_only_unserved,
                          p_max_attempts)
                   AS x(firm, matter, lease_secs, run_id, only_unserved, max_attempts)
        ), claimed AS (
            UPDATE ops.matter_frame_jobs j SET
                run_status           = 'running',
                rebuild_needed       = false,
                requested_generation = j.requested_generation + 1,
                claimed_generation   = j.requested_generation + 1,
                claimed_at           = ops.clock(),
                claimed_snapshot     = pg_current_snapshot()::text,
                claimed_cluster      = ops.cluster_id(),
                claimed_run_id       = a.run_id,
                lease_seconds        = a.lease_secs,
                lease_expires_at     = ops.clock() + make_interval(secs => a.lease_secs),  -- rule: lease from the clock now
                consecutive_failures = CASE WHEN a.only_unserved THEN j.consecutive_failures ELSE 0 END,
                updated_at           = ops.now()
              FROM member a
             WHERE j.ctid = ANY (v_rows)
               AND j.firm_id = a.firm AND j.matter_id = a.matter
               AND (j.run_status <> 'running' OR j.lease_expires_at < ops.now())
               -- rule: retry only the unserved by row
               AND (NOT a.only_unserved OR (j.landed_generation < j.requested_generation
                                            AND j.consecutive_failures < a.max_attempts))
               AND a.live
            RETURNING j.claimed_run_id, j.claimed_generation
        )
        SELECT array_agg(c.claimed_run_id), array_agg(c.claimed_generation)
          INTO v_claimed, v_gens
          FROM claimed c;
    ELSE
        -- A row is missing: 000017's upsert, for every member.
        WITH member AS (
            SELECT x.*
              FROM unnest(p_firms, p_matters, p_lease_secs, p_run_ids, p_only_unserved,
                          p_max_attempts)
                   AS x(firm, matter, lease_secs, run_id, only_unserved, max_attempts)
        ), claimed AS (
            INSERT INTO ops.matter_frame_jobs AS j
                (firm_id, matter_id, run_status, rebuild_needed, requested_generation,
                 claimed_generation, claimed_at, updated_at, claimed_snapshot, claimed_cluster,
                 claimed_run_id, lease_seconds, lease_expires_at)
            SELECT a.firm, a.matter, 'running', false, 1, 1, ops.clock(), ops.now(),
                   pg_current_snapshot()::text, ops.cluster_id(), a.run_id, a.lease_secs,
                   ops.clock() + make_interval(secs => a.lease_secs)
              FROM member a
             WHERE NOT ops.is_archived(a.firm, a.matter)  -- rule: archived matters are not claimed
             ORDER BY a.firm, a.matter  -- rule: lock in key order
            ON CONFLICT (firm_id, matter_id) DO UPDATE SET
                run_status           = 'running',
                rebuild_needed       = false,
                requested_generation = j.requested_generation + 1,
                claimed_generation   = j.requested_generation + 1,
                claimed_at           = ops.clock(),
                claimed_snapshot     = pg_current_snapshot()::text,
                claimed_cluster      = ops.cluster_id(),
                claimed_run_id       = excluded.claimed_run_id,
                lease_seconds        = excluded.lease_seconds,
                lease_expires_at     = ops.clock() + make_interval(secs => excluded.lease_seconds),  -- rule: lease from the clock now
                consecutive_failures = CASE WHEN (SELECT a.only_unserved FROM member a
                                                   WHERE a.run_id = excluded.claimed_run_id)
                                            THEN j.consecutive_failures ELSE 0 END,
                updated_at           = ops.now()
            WHERE (j.run_status <> 'running' OR j.lease_expires_at < ops.now())
              -- rule: retry only the unserved by upsert
              AND (SELECT NOT a.only_unserved OR (j.landed_generation < j.requested_generation
                                                  AND j.consecutive_failures < a.max_attempts)
                     FROM member a WHERE a.run_id = excluded.claimed_run_id)
              AND NOT ops.is_archived(j.firm_id, j.matter_id)  -- rule: archived matters are not claimed
            RETURNING j.claimed_run_id, j.claimed_generation
        )
        SELECT array_agg(c.claimed_run_id), array_agg(c.claimed_generation)
          INTO v_claimed, v_gens
          FROM claimed c;
    END IF;
    IF v_claimed IS NOT NULL THEN
        -- The runs of the claims made: close the runs each supersedes (read by its matter's
        -- key: OFFSET 0 keeps the subquery a probe per claimed row, whatever the statistics
        -- make of a join), and open each claim's own.
        WITH member AS (
            SELECT x.*
              FROM unnest(p_firms, p_matters, p_run_ids, p_nodes, p_trace_ids, p_event_ids)
                   AS x(firm, matter, run_id, node, trace_id, event_ids)
        ), claimed AS (
            SELECT a.*, c.token
              FROM unnest(v_claimed, v_gens) AS c(run_id, token)
                   JOIN member a ON a.run_id = c.run_id
        ), stale AS (
            SELECT s.run_id
              FROM claimed c
                   CROSS JOIN LATERAL (SELECT r.run_id FROM ops.matter_frame_runs r
                                        WHERE r.firm_id = c.firm AND r.matter_id = c.matter
                                          AND r.outcome = 'running' OFFSET 0) s
        ), superseded AS (
            UPDATE ops.matter_frame_runs r
               SET outcome = 'lease_expired', finished_at = ops.now()
             -- rule: superseded runs by key
             WHERE r.run_id = ANY (ARRAY(SELECT run_id FROM stale))
               AND r.outcome IS NOT DISTINCT FROM 'running'
        )
        INSERT INTO ops.matter_frame_runs
            (run_id, firm_id, matter_id, token, node_id, started_at, heartbeat_at,
             outcome, trace_id, event_ids)
        SELECT c.run_id, c.firm, c.matter, c.token, c.node, ops.clock(), ops.clock(),
               'running', c.trace_id, coalesce(c.event_ids::uuid[], '{}')
          FROM claimed c;
    END IF;
    SELECT array_agg(c.token ORDER BY m.n) INTO v_tokens  -- rule: answers in member order
      FROM unnest(p_firms, p_matters, p_run_ids) WITH ORDINALITY AS m(firm, matter, run_id, n)
           LEFT JOIN unnest(v_claimed, v_gens) AS c(run_id, token) ON c.run_id = m.run_id;
    RETURN coalesce(v_tokens, '{}');  -- rule: one answer per member
END
$$;

--
-- Name: clock(); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.clock() RETURNS timestamp with time zone
    LANGUAGE sql COST 1
    AS $$
    SELECT clock_timestamp() + make_interval(secs => coalesce(
        nullif(current_setting('briefrail.clock_offset', true), '')::double precision,
        ops.clock_offset()))
$$;

--
-- Name: clock_offset(); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.clock_offset() RETURNS double precision
    LANGUAGE plpgsql STABLE COST 1
    AS $$
DECLARE
    v_offset text := current_setting('briefrail.clock_offset', true);
BEGIN
    IF v_offset IS NULL OR v_offset = '' THEN
        v_offset := coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0)::text;
        PERFORM set_config('briefrail.clock_offset', v_offset, true);  -- rule: offset for this transaction only
    END IF;
    RETURN v_offset::double precision;
END
$$;

--
-- Name: cluster_id(); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.cluster_id() RETURNS bigint
    LANGUAGE plpgsql STABLE
    AS $$
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

--
-- Name: commit_claim(uuid, uuid, bigint, uuid, uuid, text); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.commit_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid, p_next_run_id uuid, p_node text) RETURNS bigint
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    RETURN (ops.commit_claims(ARRAY[p_firm], ARRAY[p_matter], ARRAY[p_token], ARRAY[p_run_id],
                              ARRAY[p_next_run_id], ARRAY[p_node]))[1];
END
$$;

--
-- Name: commit_claims(uuid[], uuid[], bigint[], uuid[], uuid[], text[]); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.commit_claims(p_firms uuid[], p_matters uuid[], p_tokens bigint[], p_run_ids uuid[], p_next_run_ids uuid[], p_nodes text[]) RETURNS bigint[]
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_indexscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_rows  tid[];
    v_after bigint[];
BEGIN
    -- Lock the members' job rows in key order, each by its key (a probe per member: the
    -- lateral subquery with its row lock cannot be turned into a join the planner may reorder),
    -- and keep where each row is: nobody else can move a row this transaction holds, so the
    -- compare-and-swap below finds them by position whatever the statistics say.
    SELECT array_agg(l.row_at) INTO v_rows
      FROM (SELECT u.* FROM unnest(p_firms, p_matters) WITH ORDINALITY AS u(firm, matter, n)
             ORDER BY u.firm, u.matter) u  -- rule: lock in key order
           CROSS JOIN LATERAL (SELECT j.ctid AS row_at FROM ops.matter_frame_jobs j
                                WHERE j.firm_id = u.firm AND j.matter_id = u.matter
                                  FOR NO KEY UPDATE) l;
    WITH member AS (
        SELECT x.*, NOT ops.is_archived(x.firm, x.matter) AS live  -- rule: archived matters get no follow-up
          FROM unnest(p_firms, p_matters, p_tokens, p_run_ids, p_next_run_ids, p_nodes)
               WITH ORDINALITY AS x(firm, matter, token, run_id, next_run_id, node, n)
    ), landed AS (
        UPDATE ops.matter_frame_jobs j SET
            landed_generation    = m.token,
            run_status           = CASE WHEN j.rebuild_needed AND m.live THEN 'running' ELSE 'idle' END,
            requested_generation = j.requested_generation
                                   + CASE WHEN j.rebuild_needed AND m.live THEN 1 ELSE 0 END,
            claimed_generation   = CASE WHEN j.rebuild_needed AND m.live THEN j.requested_generation + 1
                                        ELSE j.claimed_generation END,
            claimed_run_id       = CASE WHEN j.rebuild_needed AND m.live THEN m.next_run_id
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
          FROM (SELECT DISTINCT ON (d.firm, d.matter, d.token, d.run_id) d.*
                  FROM member d ORDER BY d.firm, d.matter, d.token, d.run_id, d.n) m
         -- rule: job rows by position
         WHERE j.ctid = ANY (v_rows)
           AND j.firm_id = m.firm AND j.matter_id = m.matter AND j.run_status IS NOT DISTINCT FROM 'running'
           AND j.claimed_generation = m.token AND j.claimed_run_id = m.run_id  -- rule: fenced by its own claim
        RETURNING j.firm_id, j.matter_id, j.run_status, j.claimed_generation, m.run_id,
                  m.next_run_id, m.node, m.n
    ), run AS (
        UPDATE ops.matter_frame_runs r
           SET outcome = 'landed', finished_at = ops.now(), heartbeat_at = ops.now()
          FROM landed l
         WHERE r.run_id = ANY (p_run_ids) AND r.run_id = l.run_id
    ), follow_up AS (
        INSERT INTO ops.matter_frame_runs
            (run_id, firm_id, matter_id, token, node_id, started_at, heartbeat_at, outcome)
        SELECT l.next_run_id, l.firm_id, l.matter_id, l.claimed_generation, l.node,
               ops.clock(), ops.clock(), 'running'
          FROM landed l WHERE l.run_status = 'running'
    )
    SELECT array_agg(CASE WHEN l.run_status = 'running' THEN l.claimed_generation
                          WHEN l.n IS NOT NULL THEN 0 END ORDER BY m.n) INTO v_after  -- rule: answers in member order
      FROM member m LEFT JOIN landed l ON l.n = m.n;
    RETURN coalesce(v_after, '{}');
END
$$;

--
-- Name: commit_frame(uuid, uuid, bigint, uuid, uuid, text, text); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.commit_frame(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid, p_next_run_id uuid, p_node text, p_body text) RETURNS bigint
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_after   bigint;
    v_refused text;
BEGIN
    v_after := ops.commit_claim(p_firm, p_matter, p_token, p_run_id, p_next_run_id, p_node);
    IF v_after IS NULL THEN
        RETURN NULL;
    END IF;
    v_refused := ops.insert_frame(p_firm, p_matter, p_token, p_run_id, p_body);
    IF v_refused IS NOT NULL THEN  -- rule: a refused frame fails the claim
        RAISE EXCEPTION USING ERRCODE = 'BRF01', MESSAGE = v_refused,
                              HINT = 'briefrail: frame refused';
    END IF;
    RETURN v_after;
END
$$;

--
-- Name: commit_frames(uuid[], uuid[], bigint[], uuid[], uuid[], text[], text[]); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.commit_frames(p_firms uuid[], p_matters uuid[], p_tokens bigint[], p_run_ids uuid[], p_next_run_ids uuid[], p_nodes text[], p_bodies text[]) RETURNS bigint[]
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_after bigint[] := ops.commit_claims(p_firms, p_matters, p_tokens, p_run_ids,
                                          p_next_run_ids, p_nodes);
BEGIN
    BEGIN
        INSERT INTO ops.matter_frames (firm_id, matter_id, generation, run_id, body)
        SELECT x.firm, x.matter, x.token, x.run_id, x.body::jsonb
          FROM unnest(p_firms, p_matters, p_tokens, p_run_ids, p_bodies)
               WITH ORDINALITY AS x(firm, matter, token, run_id, body, n)
         WHERE v_after[x.n] IS NOT NULL;
    EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
        RAISE EXCEPTION USING ERRCODE = 'BRF01', MESSAGE = SQLSTATE || ': ' || SQLERRM,
                              HINT = 'briefrail: frame refused';
    END;
    RETURN v_after;
END
$$;

--
-- Name: demand(uuid, uuid, bigint); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.demand(p_firm uuid, p_matter uuid, p_xact bigint) RETURNS bigint
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    RETURN (ops.demands(ARRAY[p_firm], ARRAY[p_matter], ARRAY[p_xact]))[1];
END
$$;

--
-- Name: demands(uuid[], uuid[], bigint[]); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.demands(p_firms uuid[], p_matters uuid[], p_xacts bigint[]) RETURNS bigint[]
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_indexscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_out bigint[];
BEGIN
    WITH member AS (
        SELECT x.*
          FROM unnest(p_firms, p_matters, p_xacts) WITH ORDINALITY AS x(firm, matter, xact, n)
    ), prior AS (
        SELECT k.firm, k.matter, l.open, l.claimed_snapshot, l.claimed_cluster
          FROM (SELECT DISTINCT m.firm, m.matter FROM member m ORDER BY m.firm, m.matter) k
               CROSS JOIN LATERAL (
                   SELECT (j.run_status = 'running'
                           OR (j.run_status = 'idle' AND j.landed_generation = j.claimed_generation)) AS open,
                          j.claimed_snapshot, j.claimed_cluster
                     FROM ops.matter_frame_jobs j
                    WHERE j.firm_id = k.firm AND j.matter_id = k.matter
                      FOR UPDATE) l
    ), judged AS (
        SELECT m.firm, m.matter, m.n,
               coalesce(p.open AND ops.snapshot_covers(m.xact, p.claimed_snapshot, p.claimed_cluster),
                        false) AS covered
          FROM member m LEFT JOIN prior p ON p.firm = m.firm AND p.matter = m.matter
    ), ranked AS (
        SELECT jd.*,
               count(*) FILTER (WHERE NOT jd.covered)
                   OVER (PARTITION BY jd.firm, jd.matter ORDER BY jd.n
                         ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS later
          FROM judged jd
    ), upserted AS (
        INSERT INTO ops.matter_frame_jobs AS j (firm_id, matter_id, requested_generation)
        SELECT jd.firm, jd.matter, count(*) FILTER (WHERE NOT jd.covered)  -- rule: every uncovered demand counts
          FROM judged jd
         GROUP BY jd.firm, jd.matter
         ORDER BY jd.firm, jd.matter
        ON CONFLICT (firm_id, matter_id) DO UPDATE SET
            requested_generation = j.requested_generation + excluded.requested_generation,
            rebuild_needed       = j.rebuild_needed
                                   OR (j.run_status = 'running' AND excluded.requested_generation > 0),
            consecutive_failures = 0,
            not_before           = NULL,
            updated_at           = ops.now()
        RETURNING j.firm_id, j.matter_id, j.requested_generation
    )
    SELECT array_agg(CASE WHEN r.covered THEN NULL ELSE u.requested_generation - r.later END  -- rule: each demand its own generation
                     ORDER BY r.n) INTO v_out
      FROM ranked r JOIN upserted u ON u.firm_id = r.firm AND u.matter_id = r.matter;
    RETURN coalesce(v_out, '{}');
END
$$;

--
-- Name: drain_outbox(text, integer, text[]); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.drain_outbox(p_consumer text, p_limit integer, p_heard text[]) RETURNS TABLE(event_id uuid, firm_id uuid, matter_id uuid, traceparent text, outcome text, requested_generation bigint, recorded_ago_s double precision, demand_class text)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_column
DECLARE
    v_ids     uuid[];
    v_firms   uuid[];
    v_matters uuid[];
    v_traces  text[];
    v_ages    double precision[];
    v_classes text[];
BEGIN
    SELECT array_agg(t.event_id), array_agg(t.firm_id), array_agg(t.matter_id),
           array_agg(t.traceparent), array_agg(extract(epoch FROM ops.now() - t.created_at)::float8),
           array_agg(t.demand_class)
      INTO v_ids, v_firms, v_matters, v_traces, v_ages, v_classes
      FROM (SELECT o.event_id, o.firm_id, o.matter_id, o.traceparent, o.created_at, o.demand_class
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
        SELECT a.event_id, l.firm_id, l.matter_id, l.traceparent, a.outcome, a.requested_generation,
               l.recorded_ago_s, l.demand_class
          FROM ops.apply_events(p_consumer, v_ids, p_heard) a
          JOIN unnest(v_ids, v_firms, v_matters, v_traces, v_ages, v_classes)
                 AS l(event_id, firm_id, matter_id, traceparent, recorded_ago_s, demand_class)
            ON l.event_id = a.event_id;
    UPDATE ops.domain_event_outbox o SET published_at = ops.now() WHERE o.event_id = ANY (v_ids);
END
$$;

--
-- Name: events_aged(uuid[]); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.events_aged(p_event_ids uuid[]) RETURNS TABLE(event_id uuid, seq bigint, firm_id uuid, matter_id uuid, event_name text, payload jsonb, traceparent text, created_at timestamp with time zone, published_at timestamp with time zone, publish_attempts integer, last_error text, next_attempt_at timestamp with time zone, xact_id bigint, republish_count integer, demand_class text, ago_s double precision)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    RETURN QUERY
        SELECT o.event_id, o.seq, o.firm_id, o.matter_id, o.event_name, o.payload,
               o.traceparent, o.created_at, o.published_at, o.publish_attempts, o.last_error,
               o.next_attempt_at, o.xact_id, o.republish_count, o.demand_class,
               extract(epoch FROM ops.now() - o.created_at)::float8
          FROM ops.domain_event_outbox o
         WHERE o.event_id = ANY (p_event_ids)
           FOR KEY SHARE OF o;
END
$$;

--
-- Name: fail_claim(uuid, uuid, bigint, uuid, text, boolean, integer, double precision, double precision); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.fail_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid, p_error text, p_permanent boolean, p_max_attempts integer, p_backoff_base_secs double precision, p_backoff_max_secs double precision) RETURNS boolean
    LANGUAGE sql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
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
         WHERE j.firm_id = p_firm AND j.matter_id = p_matter AND j.run_status IS NOT DISTINCT FROM 'running'
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

--
-- Name: fair_pick(uuid[], text[], double precision[], integer[], double precision); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.fair_pick(p_firms uuid[], p_classes text[], p_waited_secs double precision[], p_pending integer[], p_promote_secs double precision) RETURNS integer
    LANGUAGE plpgsql STABLE
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_pick integer;
BEGIN
    IF coalesce((SELECT r.paused FROM ops.rail r), false) THEN  -- rule: rail paused
        RETURN NULL;
    END IF;
    WITH candidate AS (
        SELECT c.*
          FROM unnest(p_firms, p_classes, p_waited_secs, p_pending) WITH ORDINALITY
               AS c(firm, class, waited, pending, n)
    ), running AS (
        -- Builds running on every node, by firm: the running rows (a few per build slot of
        -- the fleet) through their partial index.
        SELECT j.firm_id, count(*) AS n
          FROM ops.matter_frame_jobs j
         WHERE j.run_status = 'running' AND j.lease_expires_at >= ops.now()
           AND j.firm_id = ANY (p_firms)
         GROUP BY j.firm_id
    )
    SELECT c.n INTO v_pick
      FROM candidate c
           LEFT JOIN ops.firms f ON f.firm_id = c.firm
           LEFT JOIN running r ON r.firm_id = c.firm
     WHERE NOT coalesce(f.paused, false)  -- rule: paused firms wait
     ORDER BY (c.class = 'interactive' OR c.waited >= p_promote_secs) DESC,  -- rule: interactive first
              (coalesce(r.n, 0) + c.pending)::float8 / coalesce(f.weight, 1),  -- rule: fair share
              c.waited DESC,  -- rule: oldest first
              c.n
     LIMIT 1;
    RETURN v_pick;
END
$$;

--
-- Name: heartbeat(uuid, uuid, bigint, uuid); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.heartbeat(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid) RETURNS boolean
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_result boolean;
BEGIN
    WITH renewed AS (
        UPDATE ops.matter_frame_jobs
           SET claimed_at = ops.clock(),
               lease_expires_at = ops.clock() + make_interval(secs => lease_seconds),
               updated_at = ops.now()
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
           AND claimed_generation = p_token AND claimed_run_id = p_run_id  -- rule: fenced by its own claim
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

--
-- Name: hold_builder(double precision, text); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.hold_builder(p_secs double precision, p_reason text) RETURNS timestamp with time zone
    LANGUAGE plpgsql
    SET jit TO 'off'
    AS $$
DECLARE
    v_until timestamptz := ops.clock() + make_interval(secs => p_secs);
BEGIN
    INSERT INTO ops.rail AS r (only_row, builder_held_until, builder_held_reason)
    VALUES (true, v_until, p_reason)
    ON CONFLICT (only_row) DO UPDATE
        SET builder_held_until = greatest(r.builder_held_until, excluded.builder_held_until),
            builder_held_reason = CASE WHEN r.builder_held_until >= excluded.builder_held_until
                                       THEN r.builder_held_reason
                                       ELSE excluded.builder_held_reason END,
            updated_at = ops.now();
    RETURN (SELECT r.builder_held_until FROM ops.rail r WHERE r.only_row);
END
$$;

--
-- Name: insert_frame(uuid, uuid, bigint, uuid, text); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.insert_frame(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid, p_body text) RETURNS text
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_body jsonb;
BEGIN
    BEGIN
        v_body := p_body::jsonb;
    EXCEPTION WHEN data_exception OR program_limit_exceeded THEN  -- rule: a refused frame is answered
        RETURN SQLSTATE || ': ' || SQLERRM;
    END;
    INSERT INTO ops.matter_frames (firm_id, matter_id, generation, run_id, body)
    VALUES (p_firm, p_matter, p_token, p_run_id, v_body);
    RETURN NULL;
END
$$;

--
-- Name: is_archived(uuid, uuid); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.is_archived(p_firm uuid, p_matter uuid) RETURNS boolean
    LANGUAGE plpgsql STABLE COST 1
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM record.matters m
                    WHERE m.firm_id = p_firm AND m.matter_id = p_matter AND m.archived_at IS NOT NULL);
END
$$;

--
-- Name: now(); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.now() RETURNS timestamp with time zone
    LANGUAGE sql STABLE COST 1
    AS $$
    SELECT now() + make_interval(secs => coalesce(
        nullif(current_setting('briefrail.clock_offset', true), '')::double precision,
        ops.clock_offset()))
$$;

--
-- Name: domain_event_outbox; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.domain_event_outbox (
    event_id uuid NOT NULL,
    seq bigint NOT NULL,
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    event_name text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    traceparent text,
    created_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    published_at timestamp with time zone,
    publish_attempts integer DEFAULT 0 NOT NULL,
    last_error text,
    next_attempt_at timestamp with time zone,
    xact_id bigint DEFAULT ((pg_current_xact_id())::text)::bigint NOT NULL,
    republish_count integer DEFAULT 0 NOT NULL,
    demand_class text DEFAULT 'interactive'::text NOT NULL,
    CONSTRAINT domain_event_outbox_demand_class CHECK ((demand_class = ANY (ARRAY['interactive'::text, 'background'::text]))),
    CONSTRAINT domain_event_outbox_event_name_noun_verb CHECK ((event_name ~ '^[a-z]+\.[a-z]+$'::text))
)
WITH (fillfactor='50');

--
-- Name: lease_events(bigint, double precision); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.lease_events(p_limit bigint, p_lease_secs double precision) RETURNS SETOF ops.domain_event_outbox
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    RETURN QUERY
        WITH leased AS (
            UPDATE ops.domain_event_outbox o
               SET next_attempt_at = ops.now() + make_interval(secs => p_lease_secs)
             WHERE o.event_id = ANY (ARRAY(
                   SELECT u.event_id FROM ops.domain_event_outbox u
                    WHERE u.published_at IS NULL
                      AND (u.next_attempt_at IS NULL OR u.next_attempt_at <= ops.now())
                    ORDER BY u.seq LIMIT p_limit
                      FOR UPDATE SKIP LOCKED))
            RETURNING o.*
        )
        SELECT * FROM leased;
END
$$;

--
-- Name: mark_published(uuid[]); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.mark_published(p_event_ids uuid[]) RETURNS integer
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_marked integer;
BEGIN
    UPDATE ops.domain_event_outbox o
       SET published_at = ops.now()
     WHERE o.event_id = ANY (p_event_ids);
    GET DIAGNOSTICS v_marked = ROW_COUNT;
    RETURN v_marked;
END
$$;

--
-- Name: notify_outbox(); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.notify_outbox() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('briefrail_outbox', '');
    RETURN NULL;
END
$$;

--
-- Name: prune_events(text, double precision, integer); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.prune_events(p_consumer text, p_older_than_secs double precision, p_limit integer) RETURNS TABLE(events bigint, inbox_rows bigint)
    LANGUAGE sql
    SET jit TO 'off'
    AS $$
    WITH doomed AS (
        SELECT e.event_id
          FROM ops.domain_event_outbox e
         WHERE e.published_at < ops.now() - make_interval(secs => p_older_than_secs)  -- rule: published events only
           -- rule: consumed events only
           AND EXISTS (SELECT 1 FROM ops.consumed_events c
                        WHERE c.consumer = p_consumer AND c.event_id = e.event_id)
         ORDER BY e.published_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        -- rule: delete by key
        DELETE FROM ops.domain_event_outbox o
         WHERE o.event_id = ANY (ARRAY(SELECT d.event_id FROM doomed d))
        RETURNING o.event_id, o.created_at
    ), inbox AS (
        DELETE FROM ops.consumed_events c
         WHERE c.event_id = ANY (ARRAY(SELECT g.event_id FROM gone g))
        RETURNING 1
    ), horizon AS (
        INSERT INTO ops.retention_horizon AS h (events_removed_through)
        SELECT max(g.created_at) FROM gone g HAVING count(*) > 0
        ON CONFLICT (only_row) DO UPDATE
           SET events_removed_through = greatest(h.events_removed_through,
                                                 EXCLUDED.events_removed_through)
    )
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM inbox)
$$;

--
-- Name: prune_frames(integer, double precision, uuid, uuid, integer); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.prune_frames(p_keep integer, p_young_secs double precision, p_after_firm uuid, p_after_matter uuid, p_matters integer) RETURNS TABLE(frames bigint, last_firm uuid, last_matter uuid)
    LANGUAGE sql
    SET jit TO 'off'
    AS $$
    WITH visited AS (
        SELECT j.firm_id, j.matter_id
          FROM ops.matter_frame_jobs j
         WHERE (j.firm_id, j.matter_id) > (p_after_firm, p_after_matter)
         ORDER BY j.firm_id, j.matter_id
         LIMIT p_matters
    ), young AS MATERIALIZED (
        -- Read once: a frame landed after this is kept.
        SELECT ops.now() - make_interval(secs => p_young_secs) AS since
    ), doomed AS (
        -- Per visited matter, by its key: its p_keep-th newest frame, then every older one.
        -- OFFSET 0 keeps the second lookup per matter (an index range), instead of a join the
        -- planner could turn into a scan of every frame.
        SELECT f.ctid AS frame
          FROM visited v
         CROSS JOIN LATERAL (
               SELECT k.generation FROM ops.matter_frames k
                WHERE k.firm_id = v.firm_id AND k.matter_id = v.matter_id
                ORDER BY k.generation DESC
               OFFSET greatest(p_keep, 1) - 1 LIMIT 1) oldest_kept
         CROSS JOIN LATERAL (
               SELECT o.ctid FROM ops.matter_frames o
                WHERE o.firm_id = v.firm_id AND o.matter_id = v.matter_id
                  AND o.generation < oldest_kept.generation  -- rule: the newest frames stay
                  AND o.created_at < (SELECT y.since FROM young y)  -- rule: young frames stay
               OFFSET 0) f
    ), gone AS (
        -- By row address: frames are never updated, so the address read above is the row.
        DELETE FROM ops.matter_frames f
         WHERE f.ctid = ANY (ARRAY(SELECT d.frame FROM doomed d))
        RETURNING 1
    ), last AS (
        SELECT v.firm_id, v.matter_id FROM visited v
         ORDER BY v.firm_id DESC, v.matter_id DESC LIMIT 1
    )
    SELECT (SELECT count(*) FROM gone),
           (SELECT l.firm_id FROM last l), (SELECT l.matter_id FROM last l)
$$;

--
-- Name: prune_runs(double precision, integer); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.prune_runs(p_older_than_secs double precision, p_limit integer) RETURNS bigint
    LANGUAGE sql
    SET jit TO 'off'
    AS $$
    WITH doomed AS (
        SELECT r.run_id
          FROM ops.matter_frame_runs r
         WHERE r.started_at < ops.now() - make_interval(secs => p_older_than_secs)
           AND r.outcome <> 'running'
           AND EXISTS (SELECT 1 FROM ops.matter_frame_runs n
                        WHERE n.firm_id = r.firm_id AND n.matter_id = r.matter_id
                          AND n.token > r.token)  -- rule: the latest run stays
         ORDER BY r.started_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM ops.matter_frame_runs r
         WHERE r.run_id = ANY (ARRAY(SELECT d.run_id FROM doomed d))
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;

--
-- Name: record_fenced(uuid, text); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.record_fenced(p_run_id uuid, p_error text) RETURNS boolean
    LANGUAGE sql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
    WITH closed AS (
        UPDATE ops.matter_frame_runs
           SET outcome = 'fenced', error = p_error, finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM closed)
$$;

--
-- Name: record_lost_claim(uuid, uuid); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.record_lost_claim(p_firm uuid, p_matter uuid) RETURNS bigint
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_result bigint;
BEGIN
    UPDATE ops.matter_frame_jobs
       SET requested_generation = requested_generation + 1,  -- rule: the loser is recorded
           rebuild_needed       = true,  -- rule: the loser is recorded
           consecutive_failures = 0,
           not_before           = NULL,
           updated_at           = ops.now()
     WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
    RETURNING requested_generation INTO v_result;
    RETURN v_result;
END
$$;

--
-- Name: refuse_job_delete(); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.refuse_job_delete() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'ops.matter_frame_jobs rows are never deleted: tokens must never restart'
        USING ERRCODE = 'restrict_violation';
END
$$;

--
-- Name: release_claim(uuid, uuid, bigint, uuid, text); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.release_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid, p_reason text) RETURNS boolean
    LANGUAGE sql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
    WITH released AS (
        UPDATE ops.matter_frame_jobs
           SET run_status = 'idle', not_before = NULL, updated_at = ops.now()  -- rule: released, not failed
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
           AND claimed_generation = p_token AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome     = CASE WHEN EXISTS (SELECT 1 FROM released) THEN 'released' ELSE 'fenced' END,
               error       = p_reason,
               finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
    )
    SELECT EXISTS (SELECT 1 FROM released)
$$;

--
-- Name: snapshot_covers(bigint, text, bigint); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.snapshot_covers(p_xact bigint, p_snapshot text, p_cluster bigint) RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN p_xact IS NOT NULL AND p_snapshot IS NOT NULL
       AND p_cluster IS NOT NULL AND p_cluster = ops.cluster_id()  -- rule: this cluster only
       AND pg_visible_in_snapshot(p_xact::text::xid8, p_snapshot::pg_snapshot);  -- rule: covered only if seen
END
$$;

--
-- Name: start_lease(uuid, uuid, uuid); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.start_lease(p_firm uuid, p_matter uuid, p_run_id uuid) RETURNS boolean
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_result boolean;
BEGIN
    WITH started AS (
        UPDATE ops.matter_frame_jobs
           -- rule: the lease starts now
           SET claimed_at = ops.clock(),
               lease_expires_at = ops.clock() + make_interval(secs => lease_seconds)
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
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

--
-- Name: sweep(integer); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.sweep(p_limit integer) RETURNS TABLE(firm_id uuid, matter_id uuid, token bigint)
    LANGUAGE sql
    AS $$
    WITH expired AS (
        SELECT j.firm_id, j.matter_id
          FROM ops.matter_frame_jobs j
         WHERE j.run_status = 'running' AND j.lease_expires_at < ops.now()  -- rule: only expired leases
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

--
-- Name: take_permit(uuid, uuid, text, double precision); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.take_permit(p_firm uuid, p_matter uuid, p_node text, p_ttl_secs double precision) RETURNS double precision
    LANGUAGE plpgsql
    SET jit TO 'off'
    AS $$
DECLARE
    r         ops.rail%ROWTYPE;
    v_now     timestamptz;
    v_running bigint;
    v_tokens  double precision;
BEGIN
    SELECT * INTO r FROM ops.rail WHERE only_row FOR UPDATE;  -- rule: one grant at a time
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    v_now := ops.clock();
    IF r.builder_held_until > v_now THEN  -- rule: builder held
        RETURN extract(epoch FROM r.builder_held_until - v_now)::float8;
    END IF;
    IF r.max_running IS NOT NULL THEN
        DELETE FROM ops.build_permits p WHERE p.expires_at < v_now;
        SELECT (SELECT count(*)
                  FROM ops.matter_frame_jobs j
                 WHERE j.run_status = 'running' AND j.lease_expires_at >= v_now
                   AND (j.firm_id, j.matter_id) <> (p_firm, p_matter))
             + (SELECT count(*)
                  FROM ops.build_permits p
                  LEFT JOIN ops.matter_frame_jobs j
                         ON j.firm_id = p.firm_id AND j.matter_id = p.matter_id
                 WHERE (p.firm_id, p.matter_id) <> (p_firm, p_matter)
                   AND NOT coalesce(j.claimed_at >= p.granted_at, false))  -- rule: unclaimed permits count
          INTO v_running;
        IF v_running >= r.max_running THEN  -- rule: global cap
            RETURN 0.1;
        END IF;
    END IF;
    IF r.starts_per_minute IS NOT NULL THEN
        v_tokens := least(r.starts_per_minute::float8,
                          coalesce(r.tokens, r.starts_per_minute::float8)
                          + greatest(extract(epoch FROM v_now - coalesce(r.tokens_at, v_now))::float8, 0)
                            * r.starts_per_minute / 60.0);
        IF v_tokens < 1 THEN  -- rule: rate limit
            UPDATE ops.rail SET tokens = v_tokens, tokens_at = v_now WHERE only_row;
            RETURN (1 - v_tokens) * 60.0 / r.starts_per_minute;
        END IF;
        UPDATE ops.rail SET tokens = v_tokens - 1, tokens_at = v_now WHERE only_row;
    END IF;
    IF r.max_running IS NOT NULL THEN
        INSERT INTO ops.build_permits AS p (firm_id, matter_id, node_id, granted_at, expires_at)
        VALUES (p_firm, p_matter, p_node, v_now, v_now + make_interval(secs => p_ttl_secs))
        ON CONFLICT (firm_id, matter_id) DO UPDATE
            SET node_id = excluded.node_id, granted_at = excluded.granted_at,
                expires_at = excluded.expires_at;
    END IF;
    RETURN 0;
END
$$;

--
-- Name: unserved(integer, integer, double precision); Type: FUNCTION; Schema: ops; Owner: -
--

CREATE FUNCTION ops.unserved(p_max_attempts integer, p_limit integer, p_quiet_secs double precision) RETURNS TABLE(firm_id uuid, matter_id uuid)
    LANGUAGE sql STABLE
    AS $$
    SELECT j.firm_id, j.matter_id
      FROM ops.matter_frame_jobs j
     WHERE j.landed_generation < j.requested_generation
       AND j.run_status <> 'running'
       AND (j.not_before IS NULL OR j.not_before <= ops.now())
       AND j.consecutive_failures < p_max_attempts
       AND j.updated_at <= ops.now() - make_interval(secs => p_quiet_secs)
       AND NOT ops.is_archived(j.firm_id, j.matter_id)  -- rule: archived matters are not reconciled
     ORDER BY j.not_before NULLS FIRST
     LIMIT p_limit
$$;

--
-- Name: build_permits; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.build_permits (
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    node_id text NOT NULL,
    granted_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

--
-- Name: console_sessions; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.console_sessions (
    session_hash bytea NOT NULL,
    csrf_token text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

--
-- Name: consumed_events; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.consumed_events (
    consumer text NOT NULL,
    event_id uuid NOT NULL,
    consumed_at timestamp with time zone DEFAULT ops.now() NOT NULL
);

--
-- Name: dead_letters; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.dead_letters (
    dead_letter_id uuid NOT NULL,
    consumer text NOT NULL,
    event_id uuid,
    routing_key text NOT NULL,
    body bytea NOT NULL,
    body_truncated boolean DEFAULT false NOT NULL,
    traceparent text,
    reason text NOT NULL,
    node_id text NOT NULL,
    refused_at timestamp with time zone NOT NULL,
    replays integer DEFAULT 0 NOT NULL,
    resolved_at timestamp with time zone,
    resolution text,
    routing_key_bytes bytea,
    CONSTRAINT dead_letters_check CHECK (((resolved_at IS NULL) = (resolution IS NULL))),
    CONSTRAINT dead_letters_replays_check CHECK ((replays >= 0)),
    CONSTRAINT dead_letters_resolution_check CHECK ((resolution = ANY (ARRAY['replayed'::text, 'discarded'::text])))
);

--
-- Name: COLUMN dead_letters.routing_key_bytes; Type: COMMENT; Schema: ops; Owner: -
--

COMMENT ON COLUMN ops.dead_letters.routing_key_bytes IS 'the routing key''s raw bytes when routing_key had to be escaped (it held a NUL)';

--
-- Name: domain_event_outbox_seq_seq; Type: SEQUENCE; Schema: ops; Owner: -
--

ALTER TABLE ops.domain_event_outbox ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME ops.domain_event_outbox_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: firms; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.firms (
    firm_id uuid NOT NULL,
    name text,
    weight integer DEFAULT 1 NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    CONSTRAINT firms_name_check CHECK (((name IS NULL) OR ((length(btrim(name)) >= 1) AND (length(btrim(name)) <= 200)))),
    CONSTRAINT firms_weight_check CHECK (((weight >= 1) AND (weight <= 1000)))
);

--
-- Name: ledger_clock; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.ledger_clock (
    only_row boolean DEFAULT true NOT NULL,
    offset_seconds double precision DEFAULT 0 NOT NULL,
    CONSTRAINT ledger_clock_never_behind CHECK ((offset_seconds >= (0)::double precision)),
    CONSTRAINT ledger_clock_one_row CHECK (only_row)
);

--
-- Name: matter_frame_jobs; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.matter_frame_jobs (
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    run_status text DEFAULT 'idle'::text NOT NULL,
    rebuild_needed boolean DEFAULT false NOT NULL,
    requested_generation bigint DEFAULT 0 NOT NULL,
    claimed_generation bigint DEFAULT 0 NOT NULL,
    claimed_at timestamp with time zone,
    landed_generation bigint DEFAULT 0 NOT NULL,
    consecutive_failures integer DEFAULT 0 NOT NULL,
    not_before timestamp with time zone,
    updated_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    claimed_snapshot text,
    claimed_run_id uuid,
    lease_seconds double precision,
    lease_expires_at timestamp with time zone,
    claimed_cluster bigint,
    CONSTRAINT matter_frame_jobs_check CHECK (((0 <= landed_generation) AND (landed_generation <= claimed_generation) AND (claimed_generation <= requested_generation))),
    CONSTRAINT matter_frame_jobs_consecutive_failures_check CHECK ((consecutive_failures >= 0)),
    CONSTRAINT matter_frame_jobs_run_status_check CHECK ((run_status = ANY (ARRAY['idle'::text, 'running'::text, 'failed'::text]))),
    CONSTRAINT matter_frame_jobs_running_has_a_deadline CHECK (((run_status <> 'running'::text) OR (lease_expires_at IS NOT NULL)))
);

--
-- Name: matter_frame_runs; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.matter_frame_runs (
    run_id uuid NOT NULL,
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    token bigint NOT NULL,
    node_id text NOT NULL,
    started_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    finished_at timestamp with time zone,
    outcome text DEFAULT 'running'::text NOT NULL,
    error text,
    trace_id text,
    event_ids uuid[] DEFAULT '{}'::uuid[] NOT NULL
);

--
-- Name: matter_frames; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.matter_frames (
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    generation bigint NOT NULL,
    run_id uuid NOT NULL,
    body jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT ops.now() NOT NULL
);

--
-- Name: nodes; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.nodes (
    node_id text NOT NULL,
    version text NOT NULL,
    transport text NOT NULL,
    heartbeat_seconds double precision NOT NULL,
    started_at timestamp with time zone NOT NULL,
    last_seen_at timestamp with time zone NOT NULL,
    stopped_at timestamp with time zone,
    CONSTRAINT nodes_heartbeat_seconds_check CHECK ((heartbeat_seconds > (0)::double precision)),
    CONSTRAINT nodes_node_id_check CHECK ((length(btrim(node_id)) > 0))
);

--
-- Name: rail; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.rail (
    only_row boolean DEFAULT true NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    max_running integer,
    starts_per_minute integer,
    tokens double precision,
    tokens_at timestamp with time zone,
    builder_held_until timestamp with time zone,
    builder_held_reason text,
    CONSTRAINT rail_max_running CHECK (((max_running IS NULL) OR ((max_running >= 1) AND (max_running <= 100000)))),
    CONSTRAINT rail_only_row_check CHECK (only_row),
    CONSTRAINT rail_starts_per_minute CHECK (((starts_per_minute IS NULL) OR ((starts_per_minute >= 1) AND (starts_per_minute <= 1000000))))
);

--
-- Name: retention_horizon; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.retention_horizon (
    only_row boolean DEFAULT true NOT NULL,
    events_removed_through timestamp with time zone NOT NULL,
    CONSTRAINT retention_horizon_only_row_check CHECK (only_row)
);

--
-- Name: documents; Type: TABLE; Schema: record; Owner: -
--

CREATE TABLE record.documents (
    document_id uuid NOT NULL,
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    title text NOT NULL,
    dated date,
    body text NOT NULL,
    uploaded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT documents_title_check CHECK ((length(btrim(title)) > 0))
);

--
-- Name: matters; Type: TABLE; Schema: record; Owner: -
--

CREATE TABLE record.matters (
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    title text NOT NULL,
    archived_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT matters_title_check CHECK ((length(btrim(title)) > 0))
);

--
-- Name: build_permits build_permits_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.build_permits
    ADD CONSTRAINT build_permits_pkey PRIMARY KEY (firm_id, matter_id);

--
-- Name: console_sessions console_sessions_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.console_sessions
    ADD CONSTRAINT console_sessions_pkey PRIMARY KEY (session_hash);

--
-- Name: consumed_events consumed_events_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.consumed_events
    ADD CONSTRAINT consumed_events_pkey PRIMARY KEY (consumer, event_id);

--
-- Name: dead_letters dead_letters_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.dead_letters
    ADD CONSTRAINT dead_letters_pkey PRIMARY KEY (dead_letter_id);

--
-- Name: domain_event_outbox domain_event_outbox_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.domain_event_outbox
    ADD CONSTRAINT domain_event_outbox_pkey PRIMARY KEY (event_id);

--
-- Name: domain_event_outbox domain_event_outbox_seq_key; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.domain_event_outbox
    ADD CONSTRAINT domain_event_outbox_seq_key UNIQUE (seq);

--
-- Name: firms firms_name_key; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.firms
    ADD CONSTRAINT firms_name_key UNIQUE (name);

--
-- Name: firms firms_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.firms
    ADD CONSTRAINT firms_pkey PRIMARY KEY (firm_id);

--
-- Name: ledger_clock ledger_clock_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.ledger_clock
    ADD CONSTRAINT ledger_clock_pkey PRIMARY KEY (only_row);

--
-- Name: matter_frame_jobs matter_frame_jobs_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.matter_frame_jobs
    ADD CONSTRAINT matter_frame_jobs_pkey PRIMARY KEY (firm_id, matter_id);

--
-- Name: matter_frame_runs matter_frame_runs_outcome_check; Type: CHECK CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ops.matter_frame_runs
    ADD CONSTRAINT matter_frame_runs_outcome_check CHECK ((outcome = ANY (ARRAY['running'::text, 'landed'::text, 'fenced'::text, 'failed'::text, 'lease_expired'::text, 'released'::text]))) NOT VALID;

--
-- Name: matter_frame_runs matter_frame_runs_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.matter_frame_runs
    ADD CONSTRAINT matter_frame_runs_pkey PRIMARY KEY (run_id);

--
-- Name: matter_frames matter_frames_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.matter_frames
    ADD CONSTRAINT matter_frames_pkey PRIMARY KEY (firm_id, matter_id, generation);

--
-- Name: nodes nodes_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.nodes
    ADD CONSTRAINT nodes_pkey PRIMARY KEY (node_id);

--
-- Name: rail rail_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.rail
    ADD CONSTRAINT rail_pkey PRIMARY KEY (only_row);

--
-- Name: retention_horizon retention_horizon_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.retention_horizon
    ADD CONSTRAINT retention_horizon_pkey PRIMARY KEY (only_row);

--
-- Name: documents documents_pkey; Type: CONSTRAINT; Schema: record; Owner: -
--

ALTER TABLE ONLY record.documents
    ADD CONSTRAINT documents_pkey PRIMARY KEY (document_id);

--
-- Name: matters matters_pkey; Type: CONSTRAINT; Schema: record; Owner: -
--

ALTER TABLE ONLY record.matters
    ADD CONSTRAINT matters_pkey PRIMARY KEY (firm_id, matter_id);

--
-- Name: console_sessions_expiry; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX console_sessions_expiry ON ops.console_sessions USING btree (expires_at);

--
-- Name: consumed_events_by_event; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX consumed_events_by_event ON ops.consumed_events USING btree (event_id);

--
-- Name: dead_letters_open; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX dead_letters_open ON ops.dead_letters USING btree (refused_at DESC) WHERE (resolved_at IS NULL);

--
-- Name: domain_event_outbox_by_matter; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX domain_event_outbox_by_matter ON ops.domain_event_outbox USING btree (firm_id, matter_id, seq);

--
-- Name: domain_event_outbox_published_at; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX domain_event_outbox_published_at ON ops.domain_event_outbox USING btree (published_at) WHERE (published_at IS NOT NULL);

--
-- Name: domain_event_outbox_republished; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX domain_event_outbox_republished ON ops.domain_event_outbox USING btree (republish_count) WHERE (republish_count > 0);

--
-- Name: domain_event_outbox_unpublished; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX domain_event_outbox_unpublished ON ops.domain_event_outbox USING btree (seq) WHERE (published_at IS NULL);

--
-- Name: matter_frame_jobs_running_by_deadline; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX matter_frame_jobs_running_by_deadline ON ops.matter_frame_jobs USING btree (lease_expires_at) WHERE (run_status = 'running'::text);

--
-- Name: matter_frame_jobs_unserved; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX matter_frame_jobs_unserved ON ops.matter_frame_jobs USING btree (not_before) WHERE ((landed_generation < requested_generation) AND (run_status <> 'running'::text));

--
-- Name: matter_frame_runs_one_per_token; Type: INDEX; Schema: ops; Owner: -
--

CREATE UNIQUE INDEX matter_frame_runs_one_per_token ON ops.matter_frame_runs USING btree (firm_id, matter_id, token);

--
-- Name: matter_frame_runs_open; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX matter_frame_runs_open ON ops.matter_frame_runs USING btree (firm_id, matter_id) WHERE (outcome = 'running'::text);

--
-- Name: matter_frame_runs_recent; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX matter_frame_runs_recent ON ops.matter_frame_runs USING btree (started_at DESC);

--
-- Name: documents_by_matter; Type: INDEX; Schema: record; Owner: -
--

CREATE INDEX documents_by_matter ON record.documents USING btree (firm_id, matter_id, dated, uploaded_at);

--
-- Name: domain_event_outbox domain_event_outbox_notify; Type: TRIGGER; Schema: ops; Owner: -
--

CREATE TRIGGER domain_event_outbox_notify AFTER INSERT ON ops.domain_event_outbox FOR EACH STATEMENT EXECUTE FUNCTION ops.notify_outbox();

--
-- Name: matter_frame_jobs matter_frame_jobs_no_delete; Type: TRIGGER; Schema: ops; Owner: -
--

CREATE TRIGGER matter_frame_jobs_no_delete BEFORE DELETE ON ops.matter_frame_jobs FOR EACH ROW EXECUTE FUNCTION ops.refuse_job_delete();

--
-- Name: matter_frame_jobs matter_frame_jobs_no_truncate; Type: TRIGGER; Schema: ops; Owner: -
--

CREATE TRIGGER matter_frame_jobs_no_truncate BEFORE TRUNCATE ON ops.matter_frame_jobs FOR EACH STATEMENT EXECUTE FUNCTION ops.refuse_job_delete();

--
-- Name: matter_frame_runs matter_frame_runs_firm_id_matter_id_fkey; Type: FK CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.matter_frame_runs
    ADD CONSTRAINT matter_frame_runs_firm_id_matter_id_fkey FOREIGN KEY (firm_id, matter_id) REFERENCES ops.matter_frame_jobs(firm_id, matter_id);

--
-- Name: matter_frames matter_frames_firm_id_matter_id_fkey; Type: FK CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.matter_frames
    ADD CONSTRAINT matter_frames_firm_id_matter_id_fkey FOREIGN KEY (firm_id, matter_id) REFERENCES ops.matter_frame_jobs(firm_id, matter_id);

--
-- Name: documents documents_firm_id_matter_id_fkey; Type: FK CONSTRAINT; Schema: record; Owner: -
--

ALTER TABLE ONLY record.documents
    ADD CONSTRAINT documents_firm_id_matter_id_fkey FOREIGN KEY (firm_id, matter_id) REFERENCES record.matters(firm_id, matter_id);

