-- ops.unserved: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.unserved(p_max_attempts integer, p_limit integer, p_quiet_secs double precision)
 RETURNS TABLE(firm_id uuid, matter_id uuid)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT j.firm_id, j.matter_id
      FROM ops.matter_frame_jobs j
     WHERE j.landed_generation < j.requested_generation
       AND j.run_status <> 'running'
       AND (j.not_before IS NULL OR j.not_before <= ops.now())
       AND j.consecutive_failures < p_max_attempts
       AND j.updated_at <= ops.now() - make_interval(secs => p_quiet_secs)
       AND NOT ops.is_archived(j.firm_id, j.matter_id)  -- rule: archived matters are not reconciled
     ORDER BY j.not_before NULLS FIRST
     LIMIT p_limit
$function$;
