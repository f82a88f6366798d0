-- ops.record_fenced: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.record_fenced(p_run_id uuid, p_error text)
 RETURNS boolean
 LANGUAGE sql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
    WITH closed AS (
        UPDATE ops.matter_frame_runs
           SET outcome = 'fenced', error = p_error, finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM closed)
$function$;
