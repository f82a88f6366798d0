-- ops.prune_events: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.prune_events(p_consumer text, p_older_than_secs double precision, p_limit integer)
 RETURNS TABLE(events bigint, inbox_rows bigint)
 LANGUAGE sql
 SET jit TO 'off'
AS $function$
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
$function$;
