-- ops.fail_claim: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.fail_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid, p_error text, p_permanent boolean, p_max_attempts integer, p_backoff_base_secs double precision, p_backoff_max_secs double precision)
 RETURNS boolean
 LANGUAGE sql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
    WITH failed AS (
        UPDATE ops.matter_frame_jobs j SET
            run_status           = 'failed',
            consecutive_failures = CASE WHEN j.rebuild_needed THEN j.consecutive_failures
                                        WHEN p_permanent
                                        THEN greatest(p_max_attempts, j.consecutive_failures + 1)
                                        ELSE j.consecutive_failures + 1 END,
            not_before           = ops.now() + make_interval(secs => least(
                                        p_backoff_max_secs,
                                        p_backoff_base_secs * power(2, least(j.consecutive_failures, 30)))),
            updated_at           = ops.now()
         WHERE j.firm_id = p_firm AND j.matter_id = p_matter AND j.run_status IS NOT DISTINCT FROM 'running'
           AND j.claimed_generation = p_token AND j.claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome     = CASE WHEN EXISTS (SELECT 1 FROM failed) THEN 'failed' ELSE 'fenced' END,
               error       = p_error,
               finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
    )
    SELECT EXISTS (SELECT 1 FROM failed)
$function$;
