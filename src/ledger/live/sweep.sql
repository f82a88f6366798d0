-- ops.sweep: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.sweep(p_limit integer)
 RETURNS TABLE(firm_id uuid, matter_id uuid, token bigint)
 LANGUAGE sql
AS $function$
    WITH expired AS (
        SELECT j.firm_id, j.matter_id
          FROM ops.matter_frame_jobs j
         WHERE j.run_status = 'running' AND j.lease_expires_at < ops.now()  -- rule: only expired leases
         ORDER BY j.lease_expires_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), failed AS (
        UPDATE ops.matter_frame_jobs j SET
            run_status           = 'failed',
            consecutive_failures = j.consecutive_failures
                                   + CASE WHEN j.rebuild_needed THEN 0 ELSE 1 END,
            not_before           = ops.now(),
            updated_at           = ops.now()
          FROM expired e
         WHERE j.firm_id = e.firm_id AND j.matter_id = e.matter_id
        RETURNING j.firm_id, j.matter_id, j.claimed_generation, j.claimed_run_id
    ), runs AS (
        UPDATE ops.matter_frame_runs r
           SET outcome = 'lease_expired', finished_at = ops.now()
          FROM failed f
         WHERE r.run_id = f.claimed_run_id AND r.outcome = 'running'
    )
    SELECT f.firm_id, f.matter_id, f.claimed_generation FROM failed f
$function$;
