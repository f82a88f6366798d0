-- Limits toward the builder. It redefines (the live text: src/ledger/live/): ops.take_permit, ops.hold_builder
-- (docs/protocol.md, "Limits toward the builder").
--
-- A model endpoint has a concurrency and a rate it accepts; a fleet of nodes that each count
-- only their own build slots sends it more than that, and each refusal used to be a failed
-- build that spent a retry. Three limits now live on the ledger's one rail row, so every node
-- obeys the same ones:
--
--   * max_running: builds running at once on every node together (NULL: no cap);
--   * starts_per_minute: builds started per minute on every node together, a token bucket
--     refilled continuously (NULL: no rate limit);
--   * builder_held_until: the builder asked the rail to wait (a 429 or 503 with Retry-After,
--     or the command builder's exit code 75): no build starts before then.
--
-- A node asks ops.take_permit before it claims while any limit is set. Permits are granted one
-- at a time across the fleet (the rail row is locked first, and each later statement of the
-- function reads what the previous holder committed), so the cap is never exceeded by two
-- nodes deciding at once. A permit counts as a running build until the claim it was granted
-- for is made (the matter's claimed_at passes its grant), it is given back (the claim found
-- nothing to build), or it lapses after p_ttl_secs (its node died between grant and claim).
-- Every statement may run again on a database that has it.

ALTER TABLE ops.rail
    ADD COLUMN IF NOT EXISTS max_running integer
        CONSTRAINT rail_max_running CHECK (max_running IS NULL OR max_running BETWEEN 1 AND 100000),
    ADD COLUMN IF NOT EXISTS starts_per_minute integer
        CONSTRAINT rail_starts_per_minute
        CHECK (starts_per_minute IS NULL OR starts_per_minute BETWEEN 1 AND 1000000),
    -- The token bucket of starts_per_minute: tokens left at tokens_at.
    ADD COLUMN IF NOT EXISTS tokens double precision,
    ADD COLUMN IF NOT EXISTS tokens_at timestamptz,
    ADD COLUMN IF NOT EXISTS builder_held_until timestamptz,
    ADD COLUMN IF NOT EXISTS builder_held_reason text;

CREATE TABLE IF NOT EXISTS ops.build_permits (
    firm_id    uuid NOT NULL,
    matter_id  uuid NOT NULL,
    node_id    text NOT NULL,
    granted_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (firm_id, matter_id)
);

-- take_permit: may a build of (p_firm, p_matter) start now? Answers 0 when it may (a permit is
-- recorded while a cap is set), else the seconds to wait before asking again. Each limit is one
-- line with its marker.
CREATE OR REPLACE FUNCTION ops.take_permit(p_firm uuid, p_matter uuid, p_node text,
                                           p_ttl_secs double precision)
RETURNS double precision LANGUAGE plpgsql VOLATILE SET jit = off AS $$
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
                   AND NOT coalesce(j.claimed_at >= p.granted_at, false))
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
$$;

-- hold_builder: the builder asked the rail to wait p_secs: no build starts on any node before
-- then (a later hold never shortens an earlier one).
CREATE OR REPLACE FUNCTION ops.hold_builder(p_secs double precision, p_reason text)
RETURNS timestamptz LANGUAGE plpgsql VOLATILE SET jit = off AS $$
DECLARE
    v_until timestamptz := ops.clock() + make_interval(secs => p_secs);
BEGIN
    INSERT INTO ops.rail AS r (only_row, builder_held_until, builder_held_reason)
    VALUES (true, v_until, p_reason)
    ON CONFLICT (only_row) DO UPDATE
        SET builder_held_until = greatest(r.builder_held_until, excluded.builder_held_until),
            builder_held_reason = CASE WHEN r.builder_held_until >= excluded.builder_held_until
                                       THEN r.builder_held_reason
                                       ELSE excluded.builder_held_reason END,
            updated_at = ops.now();
    RETURN (SELECT r.builder_held_until FROM ops.rail r WHERE r.only_row);
END
$$;
