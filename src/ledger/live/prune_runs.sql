-- ops.prune_runs: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.prune_runs(p_older_than_secs double precision, p_limit integer)
 RETURNS bigint
 LANGUAGE sql
 SET jit TO 'off'
AS $function$
    WITH doomed AS (
        SELECT r.run_id
          FROM ops.matter_frame_runs r
         WHERE r.started_at < ops.now() - make_interval(secs => p_older_than_secs)
           AND r.outcome <> 'running'
           AND EXISTS (SELECT 1 FROM ops.matter_frame_runs n
                        WHERE n.firm_id = r.firm_id AND n.matter_id = r.matter_id
                          AND n.token > r.token)  -- rule: the latest run stays
         ORDER BY r.started_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM ops.matter_frame_runs r
         WHERE r.run_id = ANY (ARRAY(SELECT d.run_id FROM doomed d))
        RETURNING 1
    )
    SELECT count(*) FROM gone
$function$;
