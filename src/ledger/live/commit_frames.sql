-- ops.commit_frames: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.commit_frames(p_firms uuid[], p_matters uuid[], p_tokens bigint[], p_run_ids uuid[], p_next_run_ids uuid[], p_nodes text[], p_bodies text[])
 RETURNS bigint[]
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_after bigint[] := ops.commit_claims(p_firms, p_matters, p_tokens, p_run_ids,
                                          p_next_run_ids, p_nodes);
BEGIN
    BEGIN
        INSERT INTO ops.matter_frames (firm_id, matter_id, generation, run_id, body)
        SELECT x.firm, x.matter, x.token, x.run_id, x.body::jsonb
          FROM unnest(p_firms, p_matters, p_tokens, p_run_ids, p_bodies)
               WITH ORDINALITY AS x(firm, matter, token, run_id, body, n)
         WHERE v_after[x.n] IS NOT NULL;
    EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
        RAISE EXCEPTION USING ERRCODE = 'BRF01', MESSAGE = SQLSTATE || ': ' || SQLERRM,
                              HINT = 'briefrail: frame refused';
    END;
    RETURN v_after;
END
$function$;
