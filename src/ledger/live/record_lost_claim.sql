-- ops.record_lost_claim: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.record_lost_claim(p_firm uuid, p_matter uuid)
 RETURNS bigint
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_result bigint;
BEGIN
    UPDATE ops.matter_frame_jobs
       SET requested_generation = requested_generation + 1,  -- rule: the loser is recorded
           rebuild_needed       = true,  -- rule: the loser is recorded
           consecutive_failures = 0,
           not_before           = NULL,
           updated_at           = ops.now()
     WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
    RETURNING requested_generation INTO v_result;
    RETURN v_result;
END
$function$;
