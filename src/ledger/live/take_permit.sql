-- ops.take_permit: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.take_permit(p_firm uuid, p_matter uuid, p_node text, p_ttl_secs double precision)
 RETURNS double precision
 LANGUAGE plpgsql
 SET jit TO 'off'
AS $function$
DECLARE
    r         ops.rail%ROWTYPE;
    v_now     timestamptz;
    v_running bigint;
    v_tokens  double precision;
BEGIN
    SELECT * INTO r FROM ops.rail WHERE only_row FOR UPDATE;  -- rule: one grant at a time
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    v_now := ops.clock();
    IF r.builder_held_until > v_now THEN  -- rule: builder held
        RETURN extract(epoch FROM r.builder_held_until - v_now)::float8;
    END IF;
    IF r.max_running IS NOT NULL THEN
        DELETE FROM ops.build_permits p WHERE p.expires_at < v_now;
        SELECT (SELECT count(*)
                  FROM ops.matter_frame_jobs j
                 WHERE j.run_status = 'running' AND j.lease_expires_at >= v_now
                   AND (j.firm_id, j.matter_id) <> (p_firm, p_matter))
             + (SELECT count(*)
                  FROM ops.build_permits p
                  LEFT JOIN ops.matter_frame_jobs j
                         ON j.firm_id = p.firm_id AND j.matter_id = p.matter_id
                 WHERE (p.firm_id, p.matter_id) <> (p_firm, p_matter)
                   AND NOT coalesce(j.claimed_at >= p.granted_at, false))  -- rule: unclaimed permits count
          INTO v_running;
        IF v_running >= r.max_running THEN  -- rule: global cap
            RETURN 0.1;
        END IF;
    END IF;
    IF r.starts_per_minute IS NOT NULL THEN
        v_tokens := least(r.starts_per_minute::float8,
                          coalesce(r.tokens, r.starts_per_minute::float8)
                          + greatest(extract(epoch FROM v_now - coalesce(r.tokens_at, v_now))::float8, 0)
                            * r.starts_per_minute / 60.0);
        IF v_tokens < 1 THEN  -- rule: rate limit
            UPDATE ops.rail SET tokens = v_tokens, tokens_at = v_now WHERE only_row;
            RETURN (1 - v_tokens) * 60.0 / r.starts_per_minute;
        END IF;
        UPDATE ops.rail SET tokens = v_tokens - 1, tokens_at = v_now WHERE only_row;
    END IF;
    IF r.max_running IS NOT NULL THEN
        INSERT INTO ops.build_permits AS p (firm_id, matter_id, node_id, granted_at, expires_at)
        VALUES (p_firm, p_matter, p_node, v_now, v_now + make_interval(secs => p_ttl_secs))
        ON CONFLICT (firm_id, matter_id) DO UPDATE
            SET node_id = excluded.node_id, granted_at = excluded.granted_at,
                expires_at = excluded.expires_at;
    END IF;
    RETURN 0;
END
$function$;
