-- Triggers in one statement. It redefines (the live text: src/ledger/live/): ops.demands, ops.demand,
-- ops.apply_events (docs/protocol.md, "Speed: batches"). Expand only: one new function
-- (ops.demands) and two redefined with the same signature, the same rows changed and the same
-- answers, so a node of the previous release keeps working across it.
--
-- 000009's trigger applied a batch of events as a loop: per event an inbox insert, a read of
-- the matter and a call of ops.demand (its own lock and upsert), four statements each. Now a
-- batch is three: the inbox rows and the gates for every event in one statement, then every
-- demand of the batch in one (ops.demands), and the answers. The single demand is a batch of
-- one: the transition is written once.
--
-- What each event gets is what it got alone:
--   * the inbox decides duplicates (ON CONFLICT DO NOTHING on (consumer, event_id)); the gates
--     (heard, the matter in the record, not archived) read the matter by its key;
--   * each demand is judged covered or not by its own fact's transaction against the job row's
--     claimed snapshot, after the row is locked (FOR UPDATE, a probe per matter in
--     (firm_id, matter_id) order, the order every batch locks job rows in). A demand does not
--     change what coverage reads (the status, the snapshot), so judging a matter's demands
--     together answers each as the loop did;
--   * a matter's row is written once for all its demands in the batch: requested_generation
--     grows by the number not covered (each answer is the generation its own demand reached,
--     in event order), rebuild_needed is set on a running row when any is not covered, and the
--     retries restart (as every demand, covered or not, restarted them).
-- Every row is found by its key whatever the statistics say: probes (lateral subqueries that
-- cannot become joins), and plain index scans off (a bitmap scan needs a key to scan by).

-- demands: ops.demand for each member (member i's fact transaction p_xacts[i]). Element i:
-- the requested generation member i's demand reached, or NULL where it was covered (a build
-- that already reads its fact holds, or last served, the row). Members of one matter are
-- judged in their order.
CREATE OR REPLACE FUNCTION ops.demands(p_firms uuid[], p_matters uuid[], p_xacts bigint[])
RETURNS bigint[] LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_indexscan = off SET jit = off
SET plan_cache_mode = force_generic_plan AS $$
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
        SELECT jd.firm, jd.matter, count(*) FILTER (WHERE NOT jd.covered)
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
    SELECT array_agg(CASE WHEN r.covered THEN NULL ELSE u.requested_generation - r.later END
                     ORDER BY r.n) INTO v_out
      FROM ranked r JOIN upserted u ON u.firm_id = r.firm AND u.matter_id = r.matter;
    RETURN coalesce(v_out, '{}');
END
$$;

-- demand: a batch of one.
CREATE OR REPLACE FUNCTION ops.demand(p_firm uuid, p_matter uuid, p_xact bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN (ops.demands(ARRAY[p_firm], ARRAY[p_matter], ARRAY[p_xact]))[1];
END
$$;

-- apply_events: the trigger for a batch of the outbox's events (000009 says what each outcome
-- means). One row per distinct event found, in (firm_id, matter_id, seq) order.
CREATE OR REPLACE FUNCTION ops.apply_events(p_consumer text, p_event_ids uuid[], p_heard text[])
RETURNS TABLE (event_id uuid, outcome text, requested_generation bigint)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_indexscan = off SET jit = off
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    v_ids      uuid[];
    v_outcomes text[];
    v_firms    uuid[];
    v_matters  uuid[];
    v_xacts    bigint[];
    v_asked    integer[];
    v_answers  bigint[];
BEGIN
    WITH ev AS (
        SELECT o.event_id, o.event_name, o.firm_id, o.matter_id, o.xact_id, o.seq
          FROM ops.domain_event_outbox o
         WHERE o.event_id = ANY (p_event_ids)
         ORDER BY o.firm_id, o.matter_id, o.seq
           FOR KEY SHARE OF o
    ), fresh AS (
        INSERT INTO ops.consumed_events AS c (consumer, event_id)
        SELECT p_consumer, ev.event_id FROM ev ORDER BY ev.firm_id, ev.matter_id, ev.seq
        ON CONFLICT DO NOTHING
        RETURNING c.event_id
    ), gated AS (
        SELECT ev.*,
               CASE WHEN NOT EXISTS (SELECT 1 FROM fresh f WHERE f.event_id = ev.event_id)
                    THEN 'duplicate'
                    WHEN NOT (ev.event_name = ANY (p_heard)) THEN 'not_heard'
                    WHEN m.firm_id IS NULL
                    THEN CASE WHEN EXISTS (SELECT 1 FROM record.matters k WHERE k.firm_id = ev.firm_id)
                              THEN 'unknown_matter' ELSE 'unknown_firm' END
                    WHEN m.archived THEN 'archived'
                    ELSE 'demand' END AS gate
          FROM ev
               LEFT JOIN LATERAL (SELECT r.firm_id, r.archived_at IS NOT NULL AS archived
                                    FROM record.matters r
                                   WHERE r.firm_id = ev.firm_id AND r.matter_id = ev.matter_id
                                  OFFSET 0) m ON true
    )
    SELECT array_agg(g.event_id ORDER BY g.firm_id, g.matter_id, g.seq),
           array_agg(g.gate ORDER BY g.firm_id, g.matter_id, g.seq),
           array_agg(g.firm_id ORDER BY g.firm_id, g.matter_id, g.seq) FILTER (WHERE g.gate = 'demand'),
           array_agg(g.matter_id ORDER BY g.firm_id, g.matter_id, g.seq) FILTER (WHERE g.gate = 'demand'),
           array_agg(g.xact_id ORDER BY g.firm_id, g.matter_id, g.seq) FILTER (WHERE g.gate = 'demand')
      INTO v_ids, v_outcomes, v_firms, v_matters, v_xacts
      FROM gated g;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    IF v_firms IS NOT NULL THEN
        v_answers := ops.demands(v_firms, v_matters, v_xacts);
    END IF;
    RETURN QUERY
        WITH e AS (
            SELECT x.event_id, x.gate, x.n,
                   count(*) FILTER (WHERE x.gate = 'demand') OVER (ORDER BY x.n) AS k
              FROM unnest(v_ids, v_outcomes) WITH ORDINALITY AS x(event_id, gate, n)
        )
        SELECT e.event_id,
               CASE WHEN e.gate <> 'demand' THEN e.gate
                    WHEN v_answers[e.k] IS NULL THEN 'covered' ELSE 'demand' END,
               CASE WHEN e.gate = 'demand' THEN v_answers[e.k] END
          FROM e ORDER BY e.n;
END
$$;
