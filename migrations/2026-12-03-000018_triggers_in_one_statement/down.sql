-- Back to 000009's demand and apply_events (the loop), with 000012's and 000016's settings.
DROP FUNCTION ops.demands(uuid[], uuid[], bigint[]);

CREATE OR REPLACE FUNCTION ops.demand(p_firm uuid, p_matter uuid, p_xact bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_result bigint;
BEGIN
    WITH prior AS (
        -- Locks the row (re-reading its latest version) before judging coverage.
        SELECT ((j.run_status = 'running'
                 OR (j.run_status = 'idle' AND j.landed_generation = j.claimed_generation))
                AND ops.snapshot_covers(p_xact, j.claimed_snapshot, j.claimed_cluster)) AS covered
          FROM ops.matter_frame_jobs j
         WHERE j.firm_id = p_firm AND j.matter_id = p_matter
           FOR UPDATE
    ), upserted AS (
        INSERT INTO ops.matter_frame_jobs AS j (firm_id, matter_id, requested_generation)
        VALUES (p_firm, p_matter, 1)
        ON CONFLICT (firm_id, matter_id) DO UPDATE SET
            requested_generation = j.requested_generation
                                   + CASE WHEN coalesce((SELECT covered FROM prior), false) THEN 0 ELSE 1 END,
            rebuild_needed       = j.rebuild_needed
                                   OR (j.run_status = 'running' AND NOT coalesce((SELECT covered FROM prior), false)),
            consecutive_failures = 0,
            not_before           = NULL,
            updated_at           = ops.now()
        RETURNING requested_generation
    )
    SELECT CASE WHEN coalesce((SELECT covered FROM prior), false) THEN NULL ELSE requested_generation END
      INTO v_result
      FROM upserted;
    RETURN v_result;
END
$$;

CREATE OR REPLACE FUNCTION ops.apply_events(p_consumer text, p_event_ids uuid[], p_heard text[])
RETURNS TABLE (event_id uuid, outcome text, requested_generation bigint)
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    r       record;
    fresh   integer;
    m_found boolean;
    m_gone  boolean;
BEGIN
    FOR r IN
        SELECT o.event_id, o.event_name, o.firm_id, o.matter_id, o.xact_id
          FROM ops.domain_event_outbox o
         WHERE o.event_id = ANY (p_event_ids)
         ORDER BY o.firm_id, o.matter_id, o.seq
           FOR KEY SHARE OF o
    LOOP
        event_id := r.event_id;
        requested_generation := NULL;
        INSERT INTO ops.consumed_events AS c (consumer, event_id)
        VALUES (p_consumer, r.event_id)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS fresh = ROW_COUNT;
        IF fresh = 0 THEN
            outcome := 'duplicate';
        ELSIF NOT (r.event_name = ANY (p_heard)) THEN
            outcome := 'not_heard';
        ELSE
            SELECT true, m.archived_at IS NOT NULL INTO m_found, m_gone
              FROM record.matters m
             WHERE m.firm_id = r.firm_id AND m.matter_id = r.matter_id;
            IF NOT FOUND THEN
                outcome := CASE WHEN EXISTS (SELECT 1 FROM record.matters m WHERE m.firm_id = r.firm_id)
                                THEN 'unknown_matter' ELSE 'unknown_firm' END;
            ELSIF m_gone THEN
                outcome := 'archived';
            ELSE
                requested_generation := ops.demand(r.firm_id, r.matter_id, r.xact_id);
                outcome := CASE WHEN requested_generation IS NULL THEN 'covered' ELSE 'demand' END;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
