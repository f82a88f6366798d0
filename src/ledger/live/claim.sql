-- ops.claim: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.claim(p_firm uuid, p_matter uuid, p_lease_secs double precision, p_run_id uuid, p_node text, p_trace_id text, p_event_ids uuid[], p_only_unserved boolean, p_max_attempts integer)
 RETURNS bigint
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
BEGIN
    RETURN (ops.claim_batch(ARRAY[p_firm], ARRAY[p_matter], ARRAY[p_lease_secs], ARRAY[p_run_id],
                            ARRAY[p_node], ARRAY[p_trace_id],
                            ARRAY[coalesce(p_event_ids, '{}')::text], ARRAY[p_only_unserved],
                            ARRAY[p_max_attempts]))[1];
END
$function$;
