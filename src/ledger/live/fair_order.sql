-- ops.fair_order: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.fair_order(p_firms uuid[], p_classes text[], p_waited_secs double precision[], p_pending integer[], p_promote_secs double precision, p_count integer)
 RETURNS integer[]
 LANGUAGE plpgsql
 STABLE
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
BEGIN
    IF coalesce((SELECT r.paused FROM ops.rail r), false) THEN  -- rule: rail paused
        RETURN '{}';
    END IF;
    RETURN (
        WITH candidate AS (
            SELECT c.*,
                   NOT (c.class = 'interactive' OR c.waited >= p_promote_secs) AS later,  -- rule: interactive first
                   -c.waited AS age_order  -- rule: oldest first
              FROM unnest(p_firms, p_classes, p_waited_secs, p_pending) WITH ORDINALITY
                   AS c(firm, class, waited, pending, n)
        ), turn AS (
            -- Each demand's place among its firm's: its builds before it in this burst.
            SELECT c.*, row_number() OVER (PARTITION BY c.firm
                                           ORDER BY c.later, c.age_order, c.n) - 1 AS ahead
              FROM candidate c
        ), running AS (
            -- Builds running on every node, by firm: the running rows (a few per build slot
            -- of the fleet) through their partial index.
            SELECT j.firm_id, count(*) AS n
              FROM ops.matter_frame_jobs j
             WHERE j.run_status = 'running' AND j.lease_expires_at >= ops.now()
               AND j.firm_id = ANY (p_firms)
             GROUP BY j.firm_id
        ), placed AS (
            SELECT t.n, t.later, t.age_order,
                   (coalesce(r.n, 0) + t.pending + t.ahead)::float8 / coalesce(f.weight, 1) AS share  -- rule: fair share
              FROM turn t
                   LEFT JOIN ops.firms f ON f.firm_id = t.firm
                   LEFT JOIN running r ON r.firm_id = t.firm
             WHERE NOT coalesce(f.paused, false)  -- rule: paused firms wait
             ORDER BY t.later, share, t.age_order, t.n
             LIMIT greatest(p_count, 0)
        )
        SELECT coalesce(array_agg(p.n::int ORDER BY p.later, p.share, p.age_order, p.n), '{}')
          FROM placed p
    );
END
$function$;
