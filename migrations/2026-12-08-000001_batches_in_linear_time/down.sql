-- The batch functions and the two foreign keys as 2026-12-07-000006 left them.

CREATE OR REPLACE FUNCTION ops.apply_events(p_consumer text, p_event_ids uuid[], p_heard text[])
 RETURNS TABLE(event_id uuid, outcome text, requested_generation bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_indexscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
               CASE WHEN NOT EXISTS (SELECT 1 FROM fresh f WHERE f.event_id = ev.event_id)  -- rule: each event once
                    THEN 'duplicate'
                    WHEN NOT (ev.event_name = ANY (p_heard)) THEN 'not_heard'
                    WHEN m.firm_id IS NULL
                    THEN CASE WHEN EXISTS (SELECT 1 FROM record.matters k WHERE k.firm_id = ev.firm_id)
                              THEN 'unknown_matter' ELSE 'unknown_firm' END
                    WHEN m.archived THEN 'archived'  -- rule: archived matters are gated
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
$function$;

ALTER FUNCTION ops.commit_claims(uuid[], uuid[], bigint[], uuid[], uuid[], text[]) RESET enable_nestloop;
ALTER FUNCTION ops.demands(uuid[], uuid[], bigint[]) RESET enable_nestloop;

ALTER TABLE ops.matter_frame_runs ADD CONSTRAINT matter_frame_runs_firm_id_matter_id_fkey
    FOREIGN KEY (firm_id, matter_id) REFERENCES ops.matter_frame_jobs(firm_id, matter_id);
ALTER TABLE ops.matter_frames ADD CONSTRAINT matter_frames_firm_id_matter_id_fkey
    FOREIGN KEY (firm_id, matter_id) REFERENCES ops.matter_frame_jobs(firm_id, matter_id);
