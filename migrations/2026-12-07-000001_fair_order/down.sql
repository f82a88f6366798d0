-- Back to the baseline's ops.fair_pick, which decides alone; ops.fair_order goes.

CREATE OR REPLACE FUNCTION ops.fair_pick(p_firms uuid[], p_classes text[], p_waited_secs double precision[], p_pending integer[], p_promote_secs double precision) RETURNS integer
    LANGUAGE plpgsql STABLE
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_pick integer;
BEGIN
    IF coalesce((SELECT r.paused FROM ops.rail r), false) THEN  -- rule: rail paused
        RETURN NULL;
    END IF;
    WITH candidate AS (
        SELECT c.*
          FROM unnest(p_firms, p_classes, p_waited_secs, p_pending) WITH ORDINALITY
               AS c(firm, class, waited, pending, n)
    ), running AS (
        -- Builds running on every node, by firm: the running rows (a few per build slot of
        -- the fleet) through their partial index.
        SELECT j.firm_id, count(*) AS n
          FROM ops.matter_frame_jobs j
         WHERE j.run_status = 'running' AND j.lease_expires_at >= ops.now()
           AND j.firm_id = ANY (p_firms)
         GROUP BY j.firm_id
    )
    SELECT c.n INTO v_pick
      FROM candidate c
           LEFT JOIN ops.firms f ON f.firm_id = c.firm
           LEFT JOIN running r ON r.firm_id = c.firm
     WHERE NOT coalesce(f.paused, false)  -- rule: paused firms wait
     ORDER BY (c.class = 'interactive' OR c.waited >= p_promote_secs) DESC,  -- rule: interactive first
              (coalesce(r.n, 0) + c.pending)::float8 / coalesce(f.weight, 1),  -- rule: fair share
              c.waited DESC,  -- rule: oldest first
              c.n
     LIMIT 1;
    RETURN v_pick;
END
$$;

DROP FUNCTION ops.fair_order(uuid[], text[], double precision[], integer[], double precision, integer);
