-- Back to 000022: facts without a class, no firms, no rail switch; events_aged and
-- drain_outbox as 000020 and 000015 defined them.

DROP FUNCTION ops.fair_pick(uuid[], text[], double precision[], integer[], double precision);
DROP FUNCTION ops.events_aged(uuid[]);
DROP FUNCTION ops.drain_outbox(text, integer, text[]);

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

ALTER FUNCTION ops.drain_outbox(text, integer, text[]) SET plan_cache_mode = force_generic_plan;

DROP TABLE ops.rail;
DROP TABLE ops.firms;
ALTER TABLE ops.domain_event_outbox DROP COLUMN demand_class;
