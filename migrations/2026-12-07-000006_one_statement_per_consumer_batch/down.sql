-- The consumer as 2026-12-07-000005 left it: `ops.events_aged` and `ops.apply_events` in one
-- transaction of its own.

DROP FUNCTION ops.consume_events(text, uuid[], text[], uuid[], uuid[], timestamptz[], bigint[],
                                 text[], text[], boolean);
