-- ops.demand: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.demand(p_firm uuid, p_matter uuid, p_xact bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
BEGIN
    RETURN (ops.demands(ARRAY[p_firm], ARRAY[p_matter], ARRAY[p_xact]))[1];
END
$function$;
