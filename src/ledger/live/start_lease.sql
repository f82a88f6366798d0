-- ops.start_lease: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.start_lease(p_firm uuid, p_matter uuid, p_run_id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_result boolean;
BEGIN
    WITH started AS (
        UPDATE ops.matter_frame_jobs
           -- rule: the lease starts now
           SET claimed_at = ops.clock(),
               lease_expires_at = ops.clock() + make_interval(secs => lease_seconds)
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
           AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET started_at = ops.clock(), heartbeat_at = ops.clock()
         WHERE run_id = p_run_id AND EXISTS (SELECT 1 FROM started)
    )
    SELECT EXISTS (SELECT 1 FROM started) INTO v_result;
    RETURN v_result;
END
$function$;
