-- The ledger clock, in line. It redefines (the live text: src/ledger/live/): ops.now, ops.clock
-- (docs/protocol.md, "The ledger clock"). Expand only: the same two functions, the same
-- signatures and the same answers, so a node of the previous release keeps working across it.
--
-- Every transition stamps and compares times, defaults stamp rows, and the relay's lease
-- filters scanned rows through ops.now(): pg_stat_user_functions counted about ten calls of
-- ops.now() per served matter in briefrail-bench e2e, each two plpgsql calls deep (ops.now(),
-- then ops.clock_offset()), 13 µs together under load: one eighth of the rail's function time.
-- Written as one SQL expression, each is inlined into the statement that calls it when that
-- statement is planned (a SQL function without sublinks, SET clauses or SECURITY DEFINER is), so
-- a call costs the read of a transaction-local setting. Only the first call of a transaction
-- (the setting empty: NULL in a new session, '' after a transaction that set it) goes on to
-- ops.clock_offset(), which reads ops.ledger_clock and keeps the offset for the rest of the
-- transaction exactly as before (coalesce evaluates its second argument only when the first is
-- NULL). A test that moves the clock is still seen by the next transaction of every connection.

CREATE OR REPLACE FUNCTION ops.now() RETURNS timestamptz LANGUAGE sql STABLE COST 1 AS $$
    SELECT now() + make_interval(secs => coalesce(
        nullif(current_setting('briefrail.clock_offset', true), '')::double precision,
        ops.clock_offset()))
$$;

CREATE OR REPLACE FUNCTION ops.clock() RETURNS timestamptz LANGUAGE sql VOLATILE COST 1 AS $$
    SELECT clock_timestamp() + make_interval(secs => coalesce(
        nullif(current_setting('briefrail.clock_offset', true), '')::double precision,
        ops.clock_offset()))
$$;
