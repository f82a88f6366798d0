-- The record (what a Brief is built from) and the ledger (who may write the Brief).
-- PROTOCOL.md is the contract for every name in schema `ops`.

CREATE SCHEMA IF NOT EXISTS record;
CREATE SCHEMA IF NOT EXISTS ops;

-- ---------------------------------------------------------------------------------------------
-- record: the matter and its documents. Written only together with an outbox row.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE record.matters (
    firm_id     uuid        NOT NULL,
    matter_id   uuid        NOT NULL,
    title       text        NOT NULL CHECK (length(btrim(title)) > 0),
    archived_at timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (firm_id, matter_id)
);

CREATE TABLE record.documents (
    document_id uuid        PRIMARY KEY,
    firm_id     uuid        NOT NULL,
    matter_id   uuid        NOT NULL,
    title       text        NOT NULL CHECK (length(btrim(title)) > 0),
    dated       date,
    body        text        NOT NULL,
    uploaded_at timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (firm_id, matter_id) REFERENCES record.matters (firm_id, matter_id)
);
CREATE INDEX documents_by_matter ON record.documents (firm_id, matter_id, dated, uploaded_at);

-- ---------------------------------------------------------------------------------------------
-- ops.matter_frame_jobs: the ticket dispenser. One row per matter, never deleted.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE ops.matter_frame_jobs (
    firm_id              uuid        NOT NULL,
    matter_id            uuid        NOT NULL,
    run_status           text        NOT NULL DEFAULT 'idle'
                                     CHECK (run_status IN ('idle', 'running', 'failed')),
    rebuild_needed       boolean     NOT NULL DEFAULT false,
    requested_generation bigint      NOT NULL DEFAULT 0,
    claimed_generation   bigint      NOT NULL DEFAULT 0,
    claimed_at           timestamptz,
    landed_generation    bigint      NOT NULL DEFAULT 0,
    consecutive_failures integer     NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    not_before           timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    -- pg_current_snapshot() of the current or last claim: every fact whose transaction is
    -- visible in it was committed before the claim, so that claim's build reads it.
    claimed_snapshot     text,
    PRIMARY KEY (firm_id, matter_id),
    CHECK (0 <= landed_generation AND landed_generation <= claimed_generation
           AND claimed_generation <= requested_generation)
);

-- The sweep: running rows ordered by lease age.
CREATE INDEX matter_frame_jobs_running_by_claimed_at
    ON ops.matter_frame_jobs (claimed_at) WHERE run_status = 'running';
-- Reconcile: rows whose demand is not yet served and that nobody is building.
CREATE INDEX matter_frame_jobs_unserved
    ON ops.matter_frame_jobs (not_before)
    WHERE landed_generation < requested_generation AND run_status <> 'running';

-- Deleting and re-creating a job row would restart its tokens at 1 and let a zombie that
-- holds token 1 land (ABA). The row is the matter's history of tokens: refuse.
CREATE FUNCTION ops.refuse_job_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ops.matter_frame_jobs rows are never deleted: tokens must never restart'
        USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER matter_frame_jobs_no_delete
    BEFORE DELETE ON ops.matter_frame_jobs
    FOR EACH ROW EXECUTE FUNCTION ops.refuse_job_delete();
CREATE TRIGGER matter_frame_jobs_no_truncate
    BEFORE TRUNCATE ON ops.matter_frame_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION ops.refuse_job_delete();

-- ---------------------------------------------------------------------------------------------
-- ops.matter_frames: the Brief, one row per landed token.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE ops.matter_frames (
    firm_id    uuid        NOT NULL,
    matter_id  uuid        NOT NULL,
    generation bigint      NOT NULL,
    run_id     uuid        NOT NULL,
    body       jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (firm_id, matter_id, generation),
    FOREIGN KEY (firm_id, matter_id) REFERENCES ops.matter_frame_jobs (firm_id, matter_id)
);

-- ---------------------------------------------------------------------------------------------
-- ops.matter_frame_runs: one row per attempt; what an operator debugs.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE ops.matter_frame_runs (
    run_id       uuid        PRIMARY KEY,
    firm_id      uuid        NOT NULL,
    matter_id    uuid        NOT NULL,
    token        bigint      NOT NULL,
    node_id      text        NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    outcome      text        NOT NULL DEFAULT 'running'
                             CHECK (outcome IN ('running', 'landed', 'fenced', 'failed', 'lease_expired')),
    error        text,
    trace_id     text,
    event_ids    uuid[]      NOT NULL DEFAULT '{}',
    FOREIGN KEY (firm_id, matter_id) REFERENCES ops.matter_frame_jobs (firm_id, matter_id)
);
-- Every token is handed out by exactly one claim, so it has exactly one run.
CREATE UNIQUE INDEX matter_frame_runs_one_per_token
    ON ops.matter_frame_runs (firm_id, matter_id, token);
CREATE INDEX matter_frame_runs_recent ON ops.matter_frame_runs (started_at DESC);
CREATE INDEX matter_frame_runs_open
    ON ops.matter_frame_runs (firm_id, matter_id) WHERE outcome = 'running';

-- ---------------------------------------------------------------------------------------------
-- ops.domain_event_outbox: facts, written in the transaction of the fact they record.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE ops.domain_event_outbox (
    event_id        uuid        PRIMARY KEY,
    seq             bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
    firm_id         uuid        NOT NULL,
    matter_id       uuid        NOT NULL,
    -- Only history on the bus: a lowercase noun.verb fact such as matter.created.
    event_name      text        NOT NULL
                                CONSTRAINT domain_event_outbox_event_name_noun_verb
                                CHECK (event_name ~ '^[a-z]+\.[a-z]+$'),
    payload         jsonb       NOT NULL DEFAULT '{}',
    traceparent     text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,
    publish_attempts integer    NOT NULL DEFAULT 0,
    last_error      text,
    next_attempt_at timestamptz,
    -- The recording transaction (pg_current_xact_id()): lets a demand tell whether a claim's
    -- snapshot already saw this fact.
    xact_id         bigint      NOT NULL DEFAULT (pg_current_xact_id()::text::bigint)
);
CREATE INDEX domain_event_outbox_unpublished
    ON ops.domain_event_outbox (seq) WHERE published_at IS NULL;
CREATE INDEX domain_event_outbox_by_matter
    ON ops.domain_event_outbox (firm_id, matter_id, seq);

-- A relay wakes on this instead of polling: the notification is delivered when the inserting
-- transaction commits, never before.
CREATE FUNCTION ops.notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('briefrail_outbox', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER domain_event_outbox_notify
    AFTER INSERT ON ops.domain_event_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION ops.notify_outbox();

-- ---------------------------------------------------------------------------------------------
-- ops.consumed_events: the inbox; a consumer writes it in the transaction of its effect.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE ops.consumed_events (
    consumer    text        NOT NULL,
    event_id    uuid        NOT NULL,
    consumed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Reconciliation scans recently published events.
CREATE INDEX domain_event_outbox_published_at
    ON ops.domain_event_outbox (published_at) WHERE published_at IS NOT NULL;
