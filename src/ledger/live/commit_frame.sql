-- ops.commit_frame: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.commit_frame(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid, p_next_run_id uuid, p_node text, p_body text)
 RETURNS bigint
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_after   bigint;
    v_refused text;
BEGIN
    v_after := ops.commit_claim(p_firm, p_matter, p_token, p_run_id, p_next_run_id, p_node);
    IF v_after IS NULL THEN
        RETURN NULL;
    END IF;
    v_refused := ops.insert_frame(p_firm, p_matter, p_token, p_run_id, p_body);
    IF v_refused IS NOT NULL THEN  -- rule: a refused frame fails the claim
        RAISE EXCEPTION USING ERRCODE = 'BRF01', MESSAGE = v_refused,
                              HINT = 'briefrail: frame refused';
    END IF;
    RETURN v_after;
END
$function$;
