DROP TABLE IF EXISTS ops.console_sessions;
DROP TABLE IF EXISTS ops.dead_letters;
DROP TABLE IF EXISTS ops.nodes;

-- Back to 000005's release: a handed-back run is 'failed', its matter 'failed'.
CREATE OR REPLACE FUNCTION ops.release_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                  p_reason text)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH released AS (
        UPDATE ops.matter_frame_jobs
           SET run_status = 'failed', not_before = NULL, updated_at = ops.now()
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status = 'running'
           AND claimed_generation = p_token AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome     = CASE WHEN EXISTS (SELECT 1 FROM released) THEN 'failed' ELSE 'fenced' END,
               error       = p_reason,
               finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
    )
    SELECT EXISTS (SELECT 1 FROM released)
$$;

UPDATE ops.matter_frame_runs SET outcome = 'failed' WHERE outcome = 'released';
ALTER TABLE ops.matter_frame_runs DROP CONSTRAINT matter_frame_runs_outcome_check;
ALTER TABLE ops.matter_frame_runs ADD CONSTRAINT matter_frame_runs_outcome_check
    CHECK (outcome IN ('running', 'landed', 'fenced', 'failed', 'lease_expired')) NOT VALID;
