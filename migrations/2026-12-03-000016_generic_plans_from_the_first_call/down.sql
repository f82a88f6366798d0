-- Back to custom plans for the first five calls of each statement, as before 000016.
ALTER FUNCTION ops.is_archived(uuid, uuid) RESET plan_cache_mode;
ALTER FUNCTION ops.demand(uuid, uuid, bigint) RESET plan_cache_mode;
ALTER FUNCTION ops.apply_events(text, uuid[], text[]) RESET plan_cache_mode;
ALTER FUNCTION ops.drain_outbox(text, integer, text[]) RESET plan_cache_mode;
ALTER FUNCTION ops.claim(uuid, uuid, double precision, uuid, text, text, uuid[], boolean, integer) RESET plan_cache_mode;
ALTER FUNCTION ops.claim_batch(uuid[], uuid[], double precision[], uuid[], text[], text[], text[], boolean[], integer[]) RESET plan_cache_mode;
ALTER FUNCTION ops.record_lost_claim(uuid, uuid) RESET plan_cache_mode;
ALTER FUNCTION ops.heartbeat(uuid, uuid, bigint, uuid) RESET plan_cache_mode;
ALTER FUNCTION ops.commit_claim(uuid, uuid, bigint, uuid, uuid, text) RESET plan_cache_mode;
ALTER FUNCTION ops.insert_frame(uuid, uuid, bigint, uuid, text) RESET plan_cache_mode;
ALTER FUNCTION ops.commit_frame(uuid, uuid, bigint, uuid, uuid, text, text) RESET plan_cache_mode;
ALTER FUNCTION ops.commit_frames(uuid[], uuid[], bigint[], uuid[], uuid[], text[], text[]) RESET plan_cache_mode;
ALTER FUNCTION ops.start_lease(uuid, uuid, uuid) RESET plan_cache_mode;
ALTER FUNCTION ops.fail_claim(uuid, uuid, bigint, uuid, text, boolean, integer, double precision, double precision) RESET plan_cache_mode;
ALTER FUNCTION ops.release_claim(uuid, uuid, bigint, uuid, text) RESET plan_cache_mode;
ALTER FUNCTION ops.record_fenced(uuid, text) RESET plan_cache_mode;
