-- Back to 000006: no retention.
DROP FUNCTION ops.prune_frames(integer, double precision, uuid, uuid, integer);
DROP FUNCTION ops.prune_runs(double precision, integer);
DROP FUNCTION ops.prune_events(text, double precision, integer);
DROP TABLE ops.retention_horizon;
