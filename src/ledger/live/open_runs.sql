-- ops.open_runs: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.open_runs(p_firms uuid[], p_matters uuid[])
 RETURNS uuid[]
 LANGUAGE plpgsql
 STABLE
 SET enable_seqscan TO 'off'
 SET enable_indexscan TO 'on'
 SET enable_bitmapscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
BEGIN
    -- OFFSET 0 keeps each matter's read a probe, whatever the statistics make of a join.
    RETURN ARRAY(
        SELECT s.run_id
          FROM unnest(p_firms, p_matters) AS c(firm, matter)
               CROSS JOIN LATERAL (SELECT r.run_id FROM ops.matter_frame_runs r
                                    WHERE r.firm_id = c.firm AND r.matter_id = c.matter
                                      AND r.outcome = 'running' OFFSET 0) s);
END
$function$;
