-- ops.events_aged: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.events_aged(p_event_ids uuid[])
 RETURNS TABLE(event_id uuid, seq bigint, firm_id uuid, matter_id uuid, event_name text, payload jsonb, traceparent text, created_at timestamp with time zone, published_at timestamp with time zone, publish_attempts integer, last_error text, next_attempt_at timestamp with time zone, xact_id bigint, republish_count integer, demand_class text, ago_s double precision)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
$function$;
