-- ops.consume_events: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.consume_events(p_consumer text, p_event_ids uuid[], p_names text[], p_firms uuid[], p_matters uuid[], p_occurred timestamp with time zone[], p_xacts bigint[], p_traces text[], p_heard text[], p_flush boolean)
 RETURNS TABLE(event_id uuid, seq bigint, firm_id uuid, matter_id uuid, event_name text, payload jsonb, traceparent text, created_at timestamp with time zone, published_at timestamp with time zone, publish_attempts integer, last_error text, next_attempt_at timestamp with time zone, xact_id bigint, republish_count integer, demand_class text, ago_s double precision, outcome text, requested_generation bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
BEGIN
    IF NOT p_flush THEN
        PERFORM set_config('synchronous_commit', 'off', true);  -- rule: redone if lost, so no flush
    END IF;
    RETURN QUERY
        WITH wire AS (
            SELECT w.*
              FROM unnest(p_event_ids, p_names, p_firms, p_matters, p_occurred, p_xacts, p_traces)
                   AS w(id, name, firm, matter, occurred, xact, trace)
        ), ev AS MATERIALIZED (
            SELECT o.*, extract(epoch FROM ops.now() - o.created_at)::float8 AS ago_s,
                   -- rule: a message is believed only where every field agrees
                   (o.event_name = w.name AND o.firm_id = w.firm AND o.matter_id = w.matter
                    AND o.created_at = w.occurred
                    AND (w.xact IS NULL OR w.xact = o.xact_id)
                    AND (w.trace IS NULL OR o.traceparent IS NULL OR w.trace = o.traceparent))
                   IS TRUE AS confirmed
              FROM wire w JOIN ops.domain_event_outbox o ON o.event_id = w.id
               FOR KEY SHARE OF o
        ), applied AS (
            SELECT a.* FROM ops.apply_events(p_consumer,
                                             ARRAY(SELECT e.event_id FROM ev e WHERE e.confirmed),
                                             p_heard) a
        )
        SELECT e.event_id, e.seq, e.firm_id, e.matter_id, e.event_name, e.payload,
               e.traceparent, e.created_at, e.published_at, e.publish_attempts, e.last_error,
               e.next_attempt_at, e.xact_id, e.republish_count, e.demand_class, e.ago_s,
               a.outcome, a.requested_generation
          FROM ev e LEFT JOIN applied a ON a.event_id = e.event_id;
END
$function$;
