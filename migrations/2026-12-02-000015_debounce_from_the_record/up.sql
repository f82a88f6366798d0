-- The debounce counts from the record. It redefines (the live text: src/ledger/live/): ops.drain_outbox
-- (docs/protocol.md, "The trigger"). Expand only: the same arguments and the same columns in the
-- same order, one more at the end, so a node of the previous release (which names its columns)
-- keeps working across it.
--
-- A matter actor waits trigger.debounce_ms after a demand before it claims, so a burst of
-- uploads lands in one build. It counted from the nudge's arrival, so a backlog (events recorded
-- while no node ran, or held up by a busy relay or broker) waited a window that had passed long
-- before: in briefrail-bench e2e every one of 2,000 matters recorded before the node started
-- waited 250 ms, a fifth of the run. The window now counts from the event's recording, by the
-- ledger's clock: drain_outbox answers how long ago each event it applied was recorded
-- (ops.now() less its created_at, in this statement), as the AMQP consumer's read of the outbox
-- rows does. A delay only: what is served is decided by the claim, from the job row.
--
-- The return type changes, so the function is dropped and created again, with 000012's
-- settings (enable_seqscan = off, jit = off) in its definition.

DROP FUNCTION ops.drain_outbox(text, integer, text[]);

CREATE OR REPLACE FUNCTION ops.drain_outbox(p_consumer text, p_limit integer, p_heard text[])
RETURNS TABLE (event_id uuid, firm_id uuid, matter_id uuid, traceparent text, outcome text,
               requested_generation bigint, recorded_ago_s double precision)
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_ids     uuid[];
    v_firms   uuid[];
    v_matters uuid[];
    v_traces  text[];
    v_ages    double precision[];
BEGIN
    SELECT array_agg(t.event_id), array_agg(t.firm_id), array_agg(t.matter_id),
           array_agg(t.traceparent), array_agg(extract(epoch FROM ops.now() - t.created_at)::float8)
      INTO v_ids, v_firms, v_matters, v_traces, v_ages
      FROM (SELECT o.event_id, o.firm_id, o.matter_id, o.traceparent, o.created_at
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
               l.recorded_ago_s
          FROM ops.apply_events(p_consumer, v_ids, p_heard) a
          JOIN unnest(v_ids, v_firms, v_matters, v_traces, v_ages)
                 AS l(event_id, firm_id, matter_id, traceparent, recorded_ago_s)
            ON l.event_id = a.event_id;
    UPDATE ops.domain_event_outbox o SET published_at = ops.now() WHERE o.event_id = ANY (v_ids);
END
$$;
