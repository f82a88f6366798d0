-- ops.demands: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.demands(p_firms uuid[], p_matters uuid[], p_xacts bigint[])
 RETURNS bigint[]
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_indexscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_nestloop TO 'off'
AS $function$
DECLARE
    v_out bigint[];
BEGIN
    WITH member AS (
        SELECT x.*
          FROM unnest(p_firms, p_matters, p_xacts) WITH ORDINALITY AS x(firm, matter, xact, n)
    ), prior AS (
        SELECT k.firm, k.matter, l.open, l.claimed_snapshot, l.claimed_cluster
          FROM (SELECT DISTINCT m.firm, m.matter FROM member m ORDER BY m.firm, m.matter) k
               CROSS JOIN LATERAL (
                   SELECT (j.run_status = 'running'
                           OR (j.run_status = 'idle' AND j.landed_generation = j.claimed_generation)) AS open,
                          j.claimed_snapshot, j.claimed_cluster
                     FROM ops.matter_frame_jobs j
                    WHERE j.firm_id = k.firm AND j.matter_id = k.matter
                      FOR UPDATE) l
    ), judged AS (
        SELECT m.firm, m.matter, m.n,
               coalesce(p.open AND ops.snapshot_covers(m.xact, p.claimed_snapshot, p.claimed_cluster),
                        false) AS covered
          FROM member m LEFT JOIN prior p ON p.firm = m.firm AND p.matter = m.matter
    ), ranked AS (
        SELECT jd.*,
               count(*) FILTER (WHERE NOT jd.covered)
                   OVER (PARTITION BY jd.firm, jd.matter ORDER BY jd.n
                         ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS later
          FROM judged jd
    ), upserted AS (
        INSERT INTO ops.matter_frame_jobs AS j (firm_id, matter_id, requested_generation)
        SELECT jd.firm, jd.matter, count(*) FILTER (WHERE NOT jd.covered)  -- rule: every uncovered demand counts
          FROM judged jd
         GROUP BY jd.firm, jd.matter
         ORDER BY jd.firm, jd.matter
        ON CONFLICT (firm_id, matter_id) DO UPDATE SET
            requested_generation = j.requested_generation + excluded.requested_generation,
            rebuild_needed       = j.rebuild_needed
                                   OR (j.run_status = 'running' AND excluded.requested_generation > 0),
            consecutive_failures = 0,
            not_before           = NULL,
            updated_at           = ops.now()
        RETURNING j.firm_id, j.matter_id, j.requested_generation
    )
    SELECT array_agg(CASE WHEN r.covered THEN NULL ELSE u.requested_generation - r.later END  -- rule: each demand its own generation
                     ORDER BY r.n) INTO v_out
      FROM ranked r JOIN upserted u ON u.firm_id = r.firm AND u.matter_id = r.matter;
    RETURN coalesce(v_out, '{}');
END
$function$;
