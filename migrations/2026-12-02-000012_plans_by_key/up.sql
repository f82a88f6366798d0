-- Plans that find a matter's rows by key, whatever the statistics say (docs/protocol.md,
-- "Speed"). Expand only: no definition changes, only a setting each transition runs under, so a
-- node of the previous release keeps working across it.
--
-- A plpgsql function plans each statement at its first call in a session and keeps the plan
-- (and so do the foreign-key checks its inserts fire). When the ledger's tables were analyzed
-- while empty (a fresh install after `vacuumdb --analyze`, or `ANALYZE` before the first
-- import), the planner believes them empty and picks sequential scans: every demand, claim and
-- commit then read every job and run row, and serving N matters cost O(N²) until autovacuum
-- analyzed them again (measured with briefrail-bench e2e: 10,000 matters, the job row's lock
-- and the runs' update each scanned the whole table; `tests/plans.rs` counts the scans).
-- Every statement of these functions, and every foreign-key check they fire, reads rows by key,
-- so they run with sequential scans disabled: the planner then takes the index whatever its
-- estimate (a sequential scan is still chosen where no index applies: ops.ledger_clock's one
-- row). And with JIT off: a disabled scan is costed past jit_above_cost, and compiling that one
-- statement took 30 ms per transaction (a plain claim: 22 per second instead of 1,273; perf:
-- LLVM in every frame).
-- The setting is the function's own and ends with the call; nothing else in the session sees it.
-- A later CREATE OR REPLACE of one of these functions must carry `SET enable_seqscan = off`
-- and `SET jit = off` (CREATE OR REPLACE drops a setting it does not repeat): `tests/plans.rs`
-- fails otherwise.
ALTER FUNCTION ops.is_archived(uuid, uuid) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.demand(uuid, uuid, bigint) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.apply_events(text, uuid[], text[]) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.drain_outbox(text, integer, text[]) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.claim(uuid, uuid, double precision, uuid, text, text, uuid[], boolean, integer) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.claim_batch(uuid[], uuid[], double precision[], uuid[], text[], text[], text[], boolean[], integer[]) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.record_lost_claim(uuid, uuid) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.heartbeat(uuid, uuid, bigint, uuid) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.commit_claim(uuid, uuid, bigint, uuid, uuid, text) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.insert_frame(uuid, uuid, bigint, uuid, text) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.commit_frame(uuid, uuid, bigint, uuid, uuid, text, text) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.commit_frames(uuid[], uuid[], bigint[], uuid[], uuid[], text[], text[]) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.start_lease(uuid, uuid, uuid) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.fail_claim(uuid, uuid, bigint, uuid, text, boolean, integer, double precision, double precision) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.release_claim(uuid, uuid, bigint, uuid, text) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION ops.record_fenced(uuid, text) SET enable_seqscan = off SET jit = off;
