-- ops.mark_published: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.mark_published(p_event_ids uuid[])
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_marked integer;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);  -- rule: redone if lost, so no flush
    UPDATE ops.domain_event_outbox o
       SET published_at = ops.now()
     WHERE o.event_id = ANY (p_event_ids);
    GET DIAGNOSTICS v_marked = ROW_COUNT;
    RETURN v_marked;
END
$function$;
