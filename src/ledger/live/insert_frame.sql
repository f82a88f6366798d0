-- ops.insert_frame: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.insert_frame(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid, p_body text)
 RETURNS text
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_body jsonb;
BEGIN
    BEGIN
        v_body := p_body::jsonb;
    EXCEPTION WHEN data_exception OR program_limit_exceeded THEN  -- rule: a refused frame is answered
        RETURN SQLSTATE || ': ' || SQLERRM;
    END;
    INSERT INTO ops.matter_frames (firm_id, matter_id, generation, run_id, body)
    VALUES (p_firm, p_matter, p_token, p_run_id, v_body);
    RETURN NULL;
END
$function$;
