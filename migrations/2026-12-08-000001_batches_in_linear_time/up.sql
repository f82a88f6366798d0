-- Batches cost linear time in their size.
--
-- `ops.apply_events` read whether each event was fresh (its inbox row inserted now) by scanning
-- the statement's inserted rows once per event, and did so five times, once per aggregate the
-- gate fed: a batch of n events cost 5n² comparisons. The gate is now computed once per event,
-- its freshness by a hash join with the inserted rows.
--
-- `ops.commit_claims` joined its members to the job rows it found by position with a nested
-- loop that sorted and scanned every member again for each row. It joins by hash now.
--
-- The batch functions plan generically (their statements are cached), so the planner's guess of
-- ten rows per array is what it plans for, and a nested loop is never what a batch wants from a
-- join of its members to another set: the batch functions that make such joins may not use one
-- where another way exists (`ops.apply_events`, `ops.commit_claims`, and `ops.demands`, whose
-- joins came out hashed already but whose plans are made by whichever caller is first in a
-- session). The per-member probes under LATERAL, which have no other way, keep theirs; the
-- claim batch finds its rows by such probes.
--
-- Runs and frames referred to their job row by foreign key, so every run a claim opens and every
-- frame a commit writes ran a check query of its own (a tenth of a claim's and a commit's time).
-- Each is written in the transaction that claims or lands its job row, after it, and a job row
-- is never deleted (`ops.refuse_job_delete`): the check could never fail, and is gone.

CREATE OR REPLACE FUNCTION ops.apply_events(p_consumer text, p_event_ids uuid[], p_heard text[])
 RETURNS TABLE(event_id uuid, outcome text, requested_generation bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_indexscan TO 'off'
 SET enable_nestloop TO 'off'
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
    ), gated AS MATERIALIZED (
        SELECT ev.*,
               CASE WHEN f.event_id IS NULL  -- rule: each event once
                    THEN 'duplicate'
                    WHEN NOT (ev.event_name = ANY (p_heard)) THEN 'not_heard'
                    WHEN m.firm_id IS NULL
                    THEN CASE WHEN EXISTS (SELECT 1 FROM record.matters k WHERE k.firm_id = ev.firm_id)
                              THEN 'unknown_matter' ELSE 'unknown_firm' END
                    WHEN m.archived THEN 'archived'  -- rule: archived matters are gated
                    ELSE 'demand' END AS gate
          FROM ev
               LEFT JOIN fresh f ON f.event_id = ev.event_id
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

ALTER FUNCTION ops.commit_claims(uuid[], uuid[], bigint[], uuid[], uuid[], text[]) SET enable_nestloop = off;
ALTER FUNCTION ops.demands(uuid[], uuid[], bigint[]) SET enable_nestloop = off;

ALTER TABLE ops.matter_frame_runs DROP CONSTRAINT matter_frame_runs_firm_id_matter_id_fkey;
ALTER TABLE ops.matter_frames DROP CONSTRAINT matter_frames_firm_id_matter_id_fkey;
