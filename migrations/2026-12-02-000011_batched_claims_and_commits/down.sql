-- Back to 000009's clock: the offset read from the table at every call.
CREATE OR REPLACE FUNCTION ops.now() RETURNS timestamptz LANGUAGE plpgsql STABLE COST 1 AS $$
BEGIN
    RETURN now()
           + make_interval(secs => coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0));
END
$$;

CREATE OR REPLACE FUNCTION ops.clock() RETURNS timestamptz LANGUAGE plpgsql VOLATILE COST 1 AS $$
BEGIN
    RETURN clock_timestamp()
           + make_interval(secs => coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0));
END
$$;
DROP FUNCTION IF EXISTS ops.clock_offset();
DROP FUNCTION IF EXISTS ops.commit_frames(uuid[], uuid[], bigint[], uuid[], uuid[], text[], text[]);
DROP FUNCTION IF EXISTS ops.claim_batch(uuid[], uuid[], double precision[], uuid[], text[], text[], text[], boolean[], integer[]);
