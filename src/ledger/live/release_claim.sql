-- ops.release_claim: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.release_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid, p_reason text)
 RETURNS boolean
 LANGUAGE sql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
    WITH released AS (
        UPDATE ops.matter_frame_jobs
           SET run_status = 'idle', not_before = NULL, updated_at = ops.now()  -- rule: released, not failed
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status IS NOT DISTINCT FROM 'running'
           AND claimed_generation = p_token AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome     = CASE WHEN EXISTS (SELECT 1 FROM released) THEN 'released' ELSE 'fenced' END,
               error       = p_reason,
               finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
    )
    SELECT EXISTS (SELECT 1 FROM released)
$function$;
