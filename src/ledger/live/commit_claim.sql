-- ops.commit_claim: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.commit_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid, p_next_run_id uuid, p_node text)
 RETURNS bigint
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
BEGIN
    RETURN (ops.commit_claims(ARRAY[p_firm], ARRAY[p_matter], ARRAY[p_token], ARRAY[p_run_id],
                              ARRAY[p_next_run_id], ARRAY[p_node]))[1];
END
$function$;
