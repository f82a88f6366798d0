-- The fair order for a burst of holds: one call orders up to `p_count` of a node's waiting
-- demands, where `ops.fair_pick` named one. A node hands out holds as builds end, often several
-- at once; asking once per hold made each wait for the last answer, and claims went to the
-- ledger in batches of four or five instead of the twenty-odd that free holds allow.
--
-- The rules are `ops.fair_pick`'s, applied to a sequence: each demand picked counts as one more
-- build of its firm for the picks after it. The candidates are every demand the node offers
-- (up to `p_count` of each group), not only each group's oldest. Within a firm, its demands
-- take their turns in the order the rules give them (tier, then age), so the n-th demand of a
-- firm is placed as if its firm already ran n - 1 more builds: sorting by that share is the
-- same as picking one at a time and counting each pick.
--
-- `ops.fair_pick` stays, as the first pick of the order, for nodes of the release before.

CREATE FUNCTION ops.fair_order(p_firms uuid[], p_classes text[], p_waited_secs double precision[],
                               p_pending integer[], p_promote_secs double precision,
                               p_count integer) RETURNS integer[]
    LANGUAGE plpgsql STABLE
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
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
$$;

CREATE OR REPLACE FUNCTION ops.fair_pick(p_firms uuid[], p_classes text[],
                                         p_waited_secs double precision[], p_pending integer[],
                                         p_promote_secs double precision) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
    SELECT (ops.fair_order(p_firms, p_classes, p_waited_secs, p_pending, p_promote_secs, 1))[1]
$$;
