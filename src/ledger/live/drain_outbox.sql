-- ops.drain_outbox: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.drain_outbox(p_consumer text, p_limit integer, p_heard text[])
 RETURNS TABLE(event_id uuid, firm_id uuid, matter_id uuid, traceparent text, outcome text, requested_generation bigint, recorded_ago_s double precision, demand_class text)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
    v_ids     uuid[];
    v_firms   uuid[];
    v_matters uuid[];
    v_traces  text[];
    v_ages    double precision[];
    v_classes text[];
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);  -- rule: redone if lost, so no flush
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
$function$;
