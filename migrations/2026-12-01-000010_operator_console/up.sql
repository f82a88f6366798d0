-- The operator console. It redefines (the live text: src/ledger/live/): ops.release_claim
-- (docs/protocol.md, "release" and "What an operator sees"). Expand only: two new tables, one
-- new run outcome, and ops.release_claim redefined with the same signature, so a node of the
-- previous release keeps working across it (README, "Upgrading": the function is the
-- database's, so such a node's hand-backs are 'released' too, which its own `status` and matter
-- API cannot decode until it is upgraded; its serving never reads them). Nothing here scans or
-- long-locks a table the rail writes: the new CHECK is NOT VALID (every existing row holds a
-- value it allows; new rows are checked), so the ACCESS EXCLUSIVE lock it needs is brief.

-- A run handed back by a clean shutdown did not fail: it is 'released', and its matter goes
-- back to 'idle' (not 'failed'), so it is neither shown in red nor counted in
-- briefrail_matters_failed. Its demand stays unserved; the next claim serves it at once (no
-- backoff, no retry spent), exactly as before.
ALTER TABLE ops.matter_frame_runs DROP CONSTRAINT IF EXISTS matter_frame_runs_outcome_check;
ALTER TABLE ops.matter_frame_runs ADD CONSTRAINT matter_frame_runs_outcome_check
    CHECK (outcome IN ('running', 'landed', 'fenced', 'failed', 'lease_expired', 'released')) NOT VALID;

CREATE OR REPLACE FUNCTION ops.release_claim(p_firm uuid, p_matter uuid, p_token bigint, p_run_id uuid,
                                  p_reason text)
RETURNS boolean LANGUAGE sql VOLATILE AS $$
    WITH released AS (
        UPDATE ops.matter_frame_jobs
           SET run_status = 'idle', not_before = NULL, updated_at = ops.now()
         WHERE firm_id = p_firm AND matter_id = p_matter AND run_status = 'running'
           AND claimed_generation = p_token AND claimed_run_id = p_run_id
        RETURNING 1
    ), run AS (
        UPDATE ops.matter_frame_runs
           SET outcome     = CASE WHEN EXISTS (SELECT 1 FROM released) THEN 'released' ELSE 'fenced' END,
               error       = p_reason,
               finished_at = ops.now()
         WHERE run_id = p_run_id AND outcome IN ('running', 'lease_expired')
    )
    SELECT EXISTS (SELECT 1 FROM released)
$$;

-- Every node that ran against this ledger: written by the node itself (start, a heartbeat
-- every heartbeat_seconds, stop), read by the console and `briefrail nodes`. Liveness is
-- judged by the ledger clock against the row's own interval, never the reader's settings:
-- a node is gone when it said so (stopped_at) or when three of its own heartbeats are missing.
-- Builds in flight are not stored here: they are read from the runs the node holds.
CREATE TABLE IF NOT EXISTS ops.nodes (
    node_id           text        PRIMARY KEY CHECK (length(btrim(node_id)) > 0),
    version           text        NOT NULL,
    transport         text        NOT NULL,
    heartbeat_seconds double precision NOT NULL CHECK (heartbeat_seconds > 0),
    started_at        timestamptz NOT NULL,
    last_seen_at      timestamptz NOT NULL,
    stopped_at        timestamptz
);

-- Messages the trigger refused (malformed, or not confirmed by the outbox): the broker's
-- dead-letter queue holds the bytes for broker tooling; this table is what the console and
-- `briefrail dead-letters` list, replay (apply through the inbox again) and discard.
-- A refusal never changes a job row: this table is the only trace it leaves in the ledger.
CREATE TABLE IF NOT EXISTS ops.dead_letters (
    dead_letter_id uuid        PRIMARY KEY,
    consumer       text        NOT NULL,
    event_id       uuid,                     -- the id the message named, when it named one
    routing_key    text        NOT NULL,
    body           bytea       NOT NULL,     -- as received, at most 64 KiB (body_truncated)
    body_truncated boolean     NOT NULL DEFAULT false,
    traceparent    text,                     -- its traceparent header, when valid
    reason         text        NOT NULL,
    node_id        text        NOT NULL,
    refused_at     timestamptz NOT NULL,
    replays        integer     NOT NULL DEFAULT 0 CHECK (replays >= 0),
    resolved_at    timestamptz,
    resolution     text CHECK (resolution IN ('replayed', 'discarded')),
    CHECK ((resolved_at IS NULL) = (resolution IS NULL))
);
CREATE INDEX IF NOT EXISTS dead_letters_open ON ops.dead_letters (refused_at DESC) WHERE resolved_at IS NULL;

-- Console sessions: a browser cannot send a bearer header, so `POST /login` with the admin
-- token opens one; the cookie holds the session id, every state-changing form carries
-- csrf_token. In the ledger, so any node behind a load balancer knows the session and logout
-- revokes it everywhere. Expiry is the ledger clock's. Only the id's SHA-256 is stored: a copy
-- of the database (a backup, a replica) opens no session.
CREATE TABLE IF NOT EXISTS ops.console_sessions (
    session_hash bytea       PRIMARY KEY,
    csrf_token   text        NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS console_sessions_expiry ON ops.console_sessions (expires_at);
