-- Back to 000009's drain_outbox.
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

-- Back to 000009's clock: the offset read from the table at every call.
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
DROP FUNCTION IF EXISTS ops.clock_offset();
DROP FUNCTION IF EXISTS ops.commit_frames(uuid[], uuid[], bigint[], uuid[], uuid[], text[], text[]);
DROP FUNCTION IF EXISTS ops.claim_batch(uuid[], uuid[], double precision[], uuid[], text[], text[], text[], boolean[], integer[]);
