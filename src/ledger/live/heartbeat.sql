-- ops.heartbeat: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.heartbeat(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_result boolean;
BEGIN
    WITH renewed AS (
        UPDATE ops.matter_frame_jobs
           SET claimed_at = ops.clock(),
               lease_expires_at = ops.clock() + make_interval(secs => lease_seconds),
               updated_at = ops.now()
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
           AND claimed_generation = p_token AND claimed_run_id = p_run_id  -- rule: fenced by its own claim
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET heartbeat_at = ops.clock()
         WHERE run_id = p_run_id AND EXISTS (SELECT 1 FROM renewed)
    )
    SELECT EXISTS (SELECT 1 FROM renewed) INTO v_result;
    RETURN v_result;
END
$function$;
