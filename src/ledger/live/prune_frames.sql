-- ops.prune_frames: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.prune_frames(p_keep integer, p_young_secs double precision, p_after_firm uuid, p_after_matter uuid, p_matters integer)
 RETURNS TABLE(frames bigint, last_firm uuid, last_matter uuid)
 LANGUAGE sql
 SET jit TO 'off'
AS $function$
    WITH visited AS (
        SELECT j.firm_id, j.matter_id
          FROM ops.matter_frame_jobs j
         WHERE (j.firm_id, j.matter_id) > (p_after_firm, p_after_matter)
         ORDER BY j.firm_id, j.matter_id
         LIMIT p_matters
    ), young AS MATERIALIZED (
        -- Read once: a frame landed after this is kept.
        SELECT ops.now() - make_interval(secs => p_young_secs) AS since
    ), doomed AS (
        -- Per visited matter, by its key: its p_keep-th newest frame, then every older one.
        -- OFFSET 0 keeps the second lookup per matter (an index range), instead of a join the
        -- planner could turn into a scan of every frame.
        SELECT f.ctid AS frame
          FROM visited v
         CROSS JOIN LATERAL (
               SELECT k.generation FROM ops.matter_frames k
                WHERE k.firm_id = v.firm_id AND k.matter_id = v.matter_id
                ORDER BY k.generation DESC
               OFFSET greatest(p_keep, 1) - 1 LIMIT 1) oldest_kept
         CROSS JOIN LATERAL (
               SELECT o.ctid FROM ops.matter_frames o
                WHERE o.firm_id = v.firm_id AND o.matter_id = v.matter_id
                  AND o.generation < oldest_kept.generation  -- rule: the newest frames stay
                  AND o.created_at < (SELECT y.since FROM young y)  -- rule: young frames stay
               OFFSET 0) f
    ), gone AS (
        -- By row address: frames are never updated, so the address read above is the row.
        DELETE FROM ops.matter_frames f
         WHERE f.ctid = ANY (ARRAY(SELECT d.frame FROM doomed d))
        RETURNING 1
    ), last AS (
        SELECT v.firm_id, v.matter_id FROM visited v
         ORDER BY v.firm_id DESC, v.matter_id DESC LIMIT 1
    )
    SELECT (SELECT count(*) FROM gone),
           (SELECT l.firm_id FROM last l), (SELECT l.matter_id FROM last l)
$function$;
