-- ops.lease_events: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.lease_events(p_limit bigint, p_lease_secs double precision)
 RETURNS SETOF ops.domain_event_outbox
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);  -- rule: redone if lost, so no flush
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
$function$;
