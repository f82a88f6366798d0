-- The inbox by event id, for ops.prune_events (which removes a removed event's inbox rows of
-- every consumer; the primary key leads with the consumer). Built CONCURRENTLY, outside a
-- transaction (metadata.toml), so consumers of the previous release keep writing the inbox
-- while it builds: applying this migration never stops the firm. One statement only: a
-- multi-statement string would run as one implicit transaction, where CONCURRENTLY is refused.
-- If a build is interrupted, Postgres leaves an INVALID index of this name; drop it
-- (DROP INDEX CONCURRENTLY ops.consumed_events_by_event) and run `briefrail migrate` again.
CREATE INDEX CONCURRENTLY IF NOT EXISTS consumed_events_by_event ON ops.consumed_events (event_id)
