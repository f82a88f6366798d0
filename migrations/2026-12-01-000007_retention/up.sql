-- Retention: what the sweeper removes, in small batches, once no guarantee needs it.
-- It redefines (the live text: src/ledger/live/): ops.prune_events, ops.prune_runs, ops.prune_frames (docs/protocol.md,
-- "Retention"). Expand only: a new table and new functions beside the old; no statement a node
-- of the previous release calls changes, so this migration is applied while those nodes run
-- (README, "Upgrading").
--
-- Every function removes at most p_limit rows in one statement, oldest first, skipping rows
-- another transaction holds (SKIP LOCKED): no pass waits on a build, and no pass holds a lock
-- longer than one small statement. Times are the ledger clock, like every other deadline.
-- A SQL function is planned once for any arguments (a generic plan, which guesses a third of
-- a table for a LIMIT it cannot see): so each removal names its rows as an array of keys
-- (`= ANY (ARRAY(...))`), which is always an index lookup, never a join the planner could
-- turn into a scan of ten million rows. The generic plan's guesses also cost it past
-- jit_above_cost, and compiling it would take longer than the statement runs: jit is off.

-- The newest fact retention removed (its outbox row's created_at). A nudge for an event id the
-- outbox no longer holds, whose message says it occurred no later than this, is a late copy of
-- a removed event: acked and counted, not dead-lettered. Which of the two a nudge that changes
-- nothing gets is all the message's time decides: no fact is served or refused by it.
CREATE TABLE ops.retention_horizon (
    only_row               boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    events_removed_through timestamptz NOT NULL
);

-- prune_events: remove up to p_limit outbox rows published more than p_older_than_secs ago
-- that p_consumer (the Brief rail) has consumed, together with every inbox row of theirs, and
-- move the horizon. An unpublished row is never removed, whatever its age (it is a fact still
-- on its way), nor a published one the rail has not consumed (reconcile may still need to
-- republish it; a stranded fact stays visible). A consumed fact's demand lives on in its job
-- row, so removing the event loses nothing a Brief needs.
CREATE OR REPLACE FUNCTION ops.prune_events(p_consumer text, p_older_than_secs double precision,
                                            p_limit integer)
RETURNS TABLE (events bigint, inbox_rows bigint) LANGUAGE sql VOLATILE SET jit = off AS $$
    WITH doomed AS (
        SELECT e.event_id
          FROM ops.domain_event_outbox e
         WHERE e.published_at < ops.now() - make_interval(secs => p_older_than_secs)
           AND EXISTS (SELECT 1 FROM ops.consumed_events c
                        WHERE c.consumer = p_consumer AND c.event_id = e.event_id)
         ORDER BY e.published_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM ops.domain_event_outbox o
         WHERE o.event_id = ANY (ARRAY(SELECT d.event_id FROM doomed d))
        RETURNING o.event_id, o.created_at
    ), inbox AS (
        DELETE FROM ops.consumed_events c
         WHERE c.event_id = ANY (ARRAY(SELECT g.event_id FROM gone g))
        RETURNING 1
    ), horizon AS (
        INSERT INTO ops.retention_horizon AS h (events_removed_through)
        SELECT max(g.created_at) FROM gone g HAVING count(*) > 0
        ON CONFLICT (only_row) DO UPDATE
           SET events_removed_through = greatest(h.events_removed_through,
                                                 EXCLUDED.events_removed_through)
    )
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM inbox)
$$;

-- prune_runs: remove up to p_limit runs started more than p_older_than_secs ago, except each
-- matter's latest run (the highest token: what the matter's page and `status` explain) and any
-- run still open. The claim's identity lives on the job row (claimed_generation,
-- claimed_run_id), so no fence reads an old run.
CREATE OR REPLACE FUNCTION ops.prune_runs(p_older_than_secs double precision, p_limit integer)
RETURNS bigint LANGUAGE sql VOLATILE SET jit = off AS $$
    WITH doomed AS (
        SELECT r.run_id
          FROM ops.matter_frame_runs r
         WHERE r.started_at < ops.now() - make_interval(secs => p_older_than_secs)
           AND r.outcome <> 'running'
           AND EXISTS (SELECT 1 FROM ops.matter_frame_runs n
                        WHERE n.firm_id = r.firm_id AND n.matter_id = r.matter_id
                          AND n.token > r.token)
         ORDER BY r.started_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM ops.matter_frame_runs r
         WHERE r.run_id = ANY (ARRAY(SELECT d.run_id FROM doomed d))
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;

-- prune_frames: for up to p_matters matters after (p_after_firm, p_after_matter) in key order,
-- remove every frame but the newest p_keep (at least one: a matter's newest frame, its Brief,
-- is never removed) and any landed within p_young_secs (a builder settling an unknown commit
-- outcome reads its own frame back). Returns the frames removed and the last matter visited,
-- where the next call starts (NULL: the walk reached the end). The pair (nil, nil) is never
-- visited: such a matter keeps every frame.
CREATE OR REPLACE FUNCTION ops.prune_frames(p_keep integer, p_young_secs double precision,
                                            p_after_firm uuid, p_after_matter uuid,
                                            p_matters integer)
RETURNS TABLE (frames bigint, last_firm uuid, last_matter uuid) LANGUAGE sql VOLATILE SET jit = off
AS $$
    WITH visited AS (
        SELECT j.firm_id, j.matter_id
          FROM ops.matter_frame_jobs j
         WHERE (j.firm_id, j.matter_id) > (p_after_firm, p_after_matter)
         ORDER BY j.firm_id, j.matter_id
         LIMIT p_matters
    ), young AS MATERIALIZED (
        -- Read once: a frame landed after this is kept.
        SELECT ops.now() - make_interval(secs => p_young_secs) AS since
    ), doomed AS (
        -- Per visited matter, by its key: its p_keep-th newest frame, then every older one.
        -- OFFSET 0 keeps the second lookup per matter (an index range), instead of a join the
        -- planner could turn into a scan of every frame.
        SELECT f.ctid AS frame
          FROM visited v
         CROSS JOIN LATERAL (
               SELECT k.generation FROM ops.matter_frames k
                WHERE k.firm_id = v.firm_id AND k.matter_id = v.matter_id
                ORDER BY k.generation DESC
               OFFSET greatest(p_keep, 1) - 1 LIMIT 1) oldest_kept
         CROSS JOIN LATERAL (
               SELECT o.ctid FROM ops.matter_frames o
                WHERE o.firm_id = v.firm_id AND o.matter_id = v.matter_id
                  AND o.generation < oldest_kept.generation
                  AND o.created_at < (SELECT y.since FROM young y)
               OFFSET 0) f
    ), gone AS (
        -- By row address: frames are never updated, so the address read above is the row.
        DELETE FROM ops.matter_frames f
         WHERE f.ctid = ANY (ARRAY(SELECT d.frame FROM doomed d))
        RETURNING 1
    ), last AS (
        SELECT v.firm_id, v.matter_id FROM visited v
         ORDER BY v.firm_id DESC, v.matter_id DESC LIMIT 1
    )
    SELECT (SELECT count(*) FROM gone),
           (SELECT l.firm_id FROM last l), (SELECT l.matter_id FROM last l)
$$;
