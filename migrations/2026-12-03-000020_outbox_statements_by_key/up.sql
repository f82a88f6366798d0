-- The relay's and the trigger's outbox statements as functions. It redefines (the live text: src/ledger/live/):
-- ops.lease_events, ops.mark_published, ops.events_aged (docs/protocol.md, "Speed:
-- statements"). Expand only: three new functions doing what the node's own SQL did (the same
-- rows changed, the same answers), so a node of the previous release, which still sends that
-- SQL, keeps working across it.
--
-- The relay's lease and mark and the trigger's read of its events were SQL the node sent, and
-- diesel prepared and planned them again at every call: a parse, a plan (the lease's plan
-- alone took 0.6 ms, seen in the statement log) and one more round trip each, on the way of
-- every fact to its build. Kept by the session as they were, they would run from their sixth
-- call on a generic plan made with the statistics of that moment: the mark, kept, was a
-- sequential scan of the outbox per call (12 ms) on a plan made while the outbox was small.
-- As functions they take 000012's settings, like every transition: each row is found by its
-- key whatever the statistics say (an unpublished event by the `domain_event_outbox_unpublished`
-- index in `seq` order, a named one by its primary key), one generic plan from the first
-- call, and the node keeps the call prepared (`src/db/prepared.rs`).

-- lease_events: the relay's lease. Up to p_limit publishable events (unpublished, their backoff
-- or an earlier lease passed), oldest first, each locked with SKIP LOCKED (rows another relay
-- is leasing are passed over) and leased for p_lease_secs by the ledger clock
-- (`next_attempt_at`), so no transaction is held while the broker confirms. The leased rows
-- are named by key (`= ANY (ARRAY(...))`): as `IN (subquery)` the planner joined them to a
-- scan of the whole outbox. Returns the leased rows.
CREATE OR REPLACE FUNCTION ops.lease_events(p_limit bigint, p_lease_secs double precision)
RETURNS SETOF ops.domain_event_outbox LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
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

-- mark_published: the events the broker confirmed (or the embedded transport applied) are
-- published, by the ledger clock. Returns how many rows it marked.
CREATE OR REPLACE FUNCTION ops.mark_published(p_event_ids uuid[])
RETURNS integer LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
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

-- events_aged: the outbox rows of the named events, each locked FOR KEY SHARE (retention cannot
-- remove one while the trigger's transaction applies it), with how many seconds ago the
-- ledger recorded it (`ops.now()` less its `created_at`, both the ledger clock).
CREATE OR REPLACE FUNCTION ops.events_aged(p_event_ids uuid[])
RETURNS TABLE (event_id uuid, seq bigint, firm_id uuid, matter_id uuid, event_name text,
               payload jsonb, traceparent text, created_at timestamptz,
               published_at timestamptz, publish_attempts integer, last_error text,
               next_attempt_at timestamptz, xact_id bigint, republish_count integer,
               ago_s double precision)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN QUERY
        SELECT o.event_id, o.seq, o.firm_id, o.matter_id, o.event_name, o.payload,
               o.traceparent, o.created_at, o.published_at, o.publish_attempts, o.last_error,
               o.next_attempt_at, o.xact_id, o.republish_count,
               extract(epoch FROM ops.now() - o.created_at)::float8
          FROM ops.domain_event_outbox o
         WHERE o.event_id = ANY (p_event_ids)
           FOR KEY SHARE OF o;
END
$$;
