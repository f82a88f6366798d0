-- Back to 000007.
DROP INDEX CONCURRENTLY IF EXISTS ops.consumed_events_by_event
