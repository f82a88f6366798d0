-- The node's own SQL again (nothing else calls these).
DROP FUNCTION ops.events_aged(uuid[]);
DROP FUNCTION ops.mark_published(uuid[]);
DROP FUNCTION ops.lease_events(bigint, double precision);
