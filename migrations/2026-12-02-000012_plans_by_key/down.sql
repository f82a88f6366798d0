-- Back to plans chosen by statistics alone (apply_events and drain_outbox keep 000009's jit = off).
ALTER FUNCTION ops.is_archived(uuid, uuid) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.demand(uuid, uuid, bigint) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.apply_events(text, uuid[], text[]) RESET enable_seqscan;
ALTER FUNCTION ops.drain_outbox(text, integer, text[]) RESET enable_seqscan;
ALTER FUNCTION ops.claim(uuid, uuid, double precision, uuid, text, text, uuid[], boolean, integer) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.claim_batch(uuid[], uuid[], double precision[], uuid[], text[], text[], text[], boolean[], integer[]) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.record_lost_claim(uuid, uuid) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.heartbeat(uuid, uuid, bigint, uuid) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.commit_claim(uuid, uuid, bigint, uuid, uuid, text) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.insert_frame(uuid, uuid, bigint, uuid, text) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.commit_frame(uuid, uuid, bigint, uuid, uuid, text, text) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.commit_frames(uuid[], uuid[], bigint[], uuid[], uuid[], text[], text[]) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.start_lease(uuid, uuid, uuid) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.fail_claim(uuid, uuid, bigint, uuid, text, boolean, integer, double precision, double precision) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.release_claim(uuid, uuid, bigint, uuid, text) RESET enable_seqscan RESET jit;
ALTER FUNCTION ops.record_fenced(uuid, text) RESET enable_seqscan RESET jit;
