-- Generic plans from the first call (docs/protocol.md, "Speed: plans by key"). Expand only: no
-- definition changes, only one more setting each transition of 000012 runs under, so a node
-- of the previous release keeps working across it.
--
-- A plpgsql function plans each of its statements at their first call in a session, and for
-- the first five calls plans them again each time (custom plans), only then keeping a generic
-- plan; so do the foreign-key checks its inserts fire. Every pooled connection of every node
-- pays that for every statement of every transition, and a node serving a backlog right after
-- it starts paid it sixteen times over in its first second: with `plan_cache_mode =
-- force_generic_plan` on these functions one node served a backlog of 2,000 matters 3-5 %
-- faster and of 10,000 matters 2-4 % faster (briefrail-bench e2e, both transports, two runs
-- each, alternating with the same database without this setting). The generic plan is the
-- one these statements settle on anyway: they read rows by key (000012, 000013), and
-- `tests/plans.rs` runs every transition from a fresh session and counts what its plans read,
-- so the plan chosen at the first call is the one tested.
-- The setting is the function's own and ends with the call. A later CREATE OR REPLACE of one
-- of these functions must carry `SET plan_cache_mode = force_generic_plan` besides 000012's
-- two settings (CREATE OR REPLACE drops a setting it does not repeat): `tests/plans.rs` fails
-- otherwise.

ALTER FUNCTION ops.is_archived(uuid, uuid) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.demand(uuid, uuid, bigint) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.apply_events(text, uuid[], text[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.drain_outbox(text, integer, text[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.claim(uuid, uuid, double precision, uuid, text, text, uuid[], boolean, integer) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.claim_batch(uuid[], uuid[], double precision[], uuid[], text[], text[], text[], boolean[], integer[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.record_lost_claim(uuid, uuid) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.heartbeat(uuid, uuid, bigint, uuid) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.commit_claim(uuid, uuid, bigint, uuid, uuid, text) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.insert_frame(uuid, uuid, bigint, uuid, text) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.commit_frame(uuid, uuid, bigint, uuid, uuid, text, text) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.commit_frames(uuid[], uuid[], bigint[], uuid[], uuid[], text[], text[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.start_lease(uuid, uuid, uuid) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.fail_claim(uuid, uuid, bigint, uuid, text, boolean, integer, double precision, double precision) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.release_claim(uuid, uuid, bigint, uuid, text) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ops.record_fenced(uuid, text) SET plan_cache_mode = force_generic_plan;
