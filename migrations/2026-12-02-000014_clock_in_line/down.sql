-- Back to 000011's definitions (plpgsql, one call each).
CREATE OR REPLACE FUNCTION ops.now() RETURNS timestamptz LANGUAGE plpgsql STABLE COST 1 AS $$
BEGIN
    RETURN now() + make_interval(secs => ops.clock_offset());
END
$$;

CREATE OR REPLACE FUNCTION ops.clock() RETURNS timestamptz LANGUAGE plpgsql VOLATILE COST 1 AS $$
BEGIN
    RETURN clock_timestamp() + make_interval(secs => ops.clock_offset());
END
$$;
