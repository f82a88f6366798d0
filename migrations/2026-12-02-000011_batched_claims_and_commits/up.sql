-- Claims and commits in batches. It redefines (the live text: src/ledger/live/): ops.claim_batch,
-- ops.commit_frames, ops.clock_offset, ops.now, ops.clock, ops.drain_outbox (docs/protocol.md,
-- "Speed: batches"). Expand only: three new functions, and three redefined with the same
-- signature and the same answers, so a node of the previous release keeps working across it.
--
-- A node's claims (and its commits) that are asked for while an earlier batch is on the wire
-- go together in one statement and one transaction. Each is the very transition it is alone:
-- ops.claim (and ops.commit_frame) is called once per member, with the member's own arguments,
-- so each compare-and-swap fences its own row and decides for itself; the batch shares only
-- the round trip and the commit. Measured with pgbench (8 clients, the same claim and commit
-- per matter): 1,166 matters/s with one transaction each, 3,684 with eight per transaction.
--
-- Members are taken in (firm_id, matter_id) order, the order ops.apply_events locks job rows
-- in, so two batches (or a batch and a trigger batch) that touch the same rows lock them in one
-- global order and cannot deadlock. Each answer is at its member's position in the input.

-- claim_batch: ops.claim for each member. p_event_ids[i] is member i's event ids as an array
-- literal ('{}' for none), since a SQL array cannot hold arrays of different lengths. The
-- answer's element i is member i's token, or NULL where ops.claim answered NULL (the caller
-- reads, as after a single claim).
CREATE OR REPLACE FUNCTION ops.claim_batch(p_firms uuid[], p_matters uuid[],
                          p_lease_secs double precision[], p_run_ids uuid[], p_nodes text[],
                          p_trace_ids text[], p_event_ids text[], p_only_unserved boolean[],
                          p_max_attempts integer[])
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r        record;
    v_tokens bigint[] := array_fill(NULL::bigint, ARRAY[cardinality(p_firms)]);
BEGIN
    FOR r IN
        SELECT x.*
          FROM unnest(p_firms, p_matters, p_lease_secs, p_run_ids, p_nodes, p_trace_ids, p_event_ids,
                      p_only_unserved, p_max_attempts)
               WITH ORDINALITY AS x(firm, matter, lease_secs, run_id, node, trace_id, event_ids,
                                    only_unserved, max_attempts, n)
         ORDER BY x.firm, x.matter, x.n
    LOOP
        v_tokens[r.n] := ops.claim(r.firm, r.matter, r.lease_secs, r.run_id, r.node, r.trace_id,
                                   r.event_ids::uuid[], r.only_unserved, r.max_attempts);
    END LOOP;
    RETURN v_tokens;
END
$$;

-- commit_frames: ops.commit_frame for each member, in the caller's transaction (BEGIN, this,
-- COMMIT). Element i: member i's answer, as ops.commit_frame gives it (NULL: fenced, nothing
-- written for it; 0: landed and idle; else the follow-up's token). A body the database refuses
-- raises BRF01 as in ops.commit_frame and aborts the whole batch: the caller then commits each
-- member alone, so the refusal reaches its own build and the others land.
CREATE OR REPLACE FUNCTION ops.commit_frames(p_firms uuid[], p_matters uuid[], p_tokens bigint[],
                          p_run_ids uuid[], p_next_run_ids uuid[], p_nodes text[], p_bodies text[])
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r       record;
    v_after bigint[] := array_fill(NULL::bigint, ARRAY[cardinality(p_firms)]);
BEGIN
    FOR r IN
        SELECT x.*
          FROM unnest(p_firms, p_matters, p_tokens, p_run_ids, p_next_run_ids, p_nodes, p_bodies)
               WITH ORDINALITY AS x(firm, matter, token, run_id, next_run_id, node, body, n)
         ORDER BY x.firm, x.matter, x.n
    LOOP
        v_after[r.n] := ops.commit_frame(r.firm, r.matter, r.token, r.run_id, r.next_run_id,
                                         r.node, r.body);
    END LOOP;
    RETURN v_after;
END
$$;

-- The ledger clock's offset, read from ops.ledger_clock once per transaction and kept in a
-- transaction-local setting (a rollback, or the transaction's end, drops it). ops.now() and
-- ops.clock() are evaluated a score of times per served matter (every transition stamps and
-- compares times, and a filter calls them per row): reading the table at each call was 13 µs
-- under load, a sixth of the database time the rail spends per matter (pg_stat_user_functions
-- in briefrail-bench e2e). Only tests move the clock (src/testing.rs), each in a transaction of
-- its own; a transaction already under way keeps the offset it first read, as now() keeps its
-- start. PARALLEL UNSAFE (the default) matters: a parallel worker may not set a setting.
CREATE OR REPLACE FUNCTION ops.clock_offset() RETURNS double precision
LANGUAGE plpgsql STABLE COST 1 AS $$
DECLARE
    v_offset text := current_setting('briefrail.clock_offset', true);
BEGIN
    IF v_offset IS NULL OR v_offset = '' THEN
        v_offset := coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0)::text;
        PERFORM set_config('briefrail.clock_offset', v_offset, true);
    END IF;
    RETURN v_offset::double precision;
END
$$;

CREATE OR REPLACE FUNCTION ops.now() RETURNS timestamptz LANGUAGE plpgsql STABLE COST 1 AS $$
BEGIN
    RETURN now() + make_interval(secs => ops.clock_offset());
END
$$;

CREATE OR REPLACE FUNCTION ops.clock() RETURNS timestamptz LANGUAGE plpgsql VOLATILE COST 1 AS $$
BEGIN
    RETURN clock_timestamp() + make_interval(secs => ops.clock_offset());
END
$$;

-- drain_outbox, as in 000009, but the ids a nudge needs come from the rows its first statement
-- locked instead of a second read of the outbox: joined to the table, the trigger's answer (a
-- set-returning function the planner guesses at a thousand rows) became a hash join over a
-- sequential scan of the whole outbox below a few hundred thousand rows, so every batch read
-- every retained event. Every value still comes from the event's outbox row.
CREATE OR REPLACE FUNCTION ops.drain_outbox(p_consumer text, p_limit integer, p_heard text[])
RETURNS TABLE (event_id uuid, firm_id uuid, matter_id uuid, traceparent text, outcome text,
               requested_generation bigint)
LANGUAGE plpgsql VOLATILE SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_ids     uuid[];
    v_firms   uuid[];
    v_matters uuid[];
    v_traces  text[];
BEGIN
    SELECT array_agg(t.event_id), array_agg(t.firm_id), array_agg(t.matter_id),
           array_agg(t.traceparent)
      INTO v_ids, v_firms, v_matters, v_traces
      FROM (SELECT o.event_id, o.firm_id, o.matter_id, o.traceparent
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
        SELECT a.event_id, l.firm_id, l.matter_id, l.traceparent, a.outcome, a.requested_generation
          FROM ops.apply_events(p_consumer, v_ids, p_heard) a
          JOIN unnest(v_ids, v_firms, v_matters, v_traces) AS l(event_id, firm_id, matter_id, traceparent)
            ON l.event_id = a.event_id;
    UPDATE ops.domain_event_outbox o SET published_at = ops.now() WHERE o.event_id = ANY (v_ids);
END
$$;
