-- The ledger's catalog (schemas ops and record), generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change the schema with a migration. Each function is in its own file here.

--
-- Name: ops; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA ops;

--
-- Name: record; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA record;

--
-- Name: domain_event_outbox; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.domain_event_outbox (
    event_id uuid NOT NULL,
    seq bigint NOT NULL,
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    event_name text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    traceparent text,
    created_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    published_at timestamp with time zone,
    publish_attempts integer DEFAULT 0 NOT NULL,
    last_error text,
    next_attempt_at timestamp with time zone,
    xact_id bigint DEFAULT ((pg_current_xact_id())::text)::bigint NOT NULL,
    republish_count integer DEFAULT 0 NOT NULL,
    demand_class text DEFAULT 'interactive'::text NOT NULL,
    CONSTRAINT domain_event_outbox_demand_class CHECK ((demand_class = ANY (ARRAY['interactive'::text, 'background'::text]))),
    CONSTRAINT domain_event_outbox_event_name_noun_verb CHECK ((event_name ~ '^[a-z]+\.[a-z]+$'::text))
)
WITH (fillfactor='50');

--
-- Name: build_permits; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.build_permits (
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    node_id text NOT NULL,
    granted_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

--
-- Name: console_sessions; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.console_sessions (
    session_hash bytea NOT NULL,
    csrf_token text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

--
-- Name: consumed_events; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.consumed_events (
    consumer text NOT NULL,
    event_id uuid NOT NULL,
    consumed_at timestamp with time zone DEFAULT ops.now() NOT NULL
);

--
-- Name: dead_letters; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.dead_letters (
    dead_letter_id uuid NOT NULL,
    consumer text NOT NULL,
    event_id uuid,
    routing_key text NOT NULL,
    body bytea NOT NULL,
    body_truncated boolean DEFAULT false NOT NULL,
    traceparent text,
    reason text NOT NULL,
    node_id text NOT NULL,
    refused_at timestamp with time zone NOT NULL,
    replays integer DEFAULT 0 NOT NULL,
    resolved_at timestamp with time zone,
    resolution text,
    routing_key_bytes bytea,
    CONSTRAINT dead_letters_check CHECK (((resolved_at IS NULL) = (resolution IS NULL))),
    CONSTRAINT dead_letters_replays_check CHECK ((replays >= 0)),
    CONSTRAINT dead_letters_resolution_check CHECK ((resolution = ANY (ARRAY['replayed'::text, 'discarded'::text])))
);

--
-- Name: COLUMN dead_letters.routing_key_bytes; Type: COMMENT; Schema: ops; Owner: -
--

COMMENT ON COLUMN ops.dead_letters.routing_key_bytes IS 'the routing key''s raw bytes when routing_key had to be escaped (it held a NUL)';

--
-- Name: domain_event_outbox_seq_seq; Type: SEQUENCE; Schema: ops; Owner: -
--

ALTER TABLE ops.domain_event_outbox ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME ops.domain_event_outbox_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: firms; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.firms (
    firm_id uuid NOT NULL,
    name text,
    weight integer DEFAULT 1 NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    CONSTRAINT firms_name_check CHECK (((name IS NULL) OR ((length(btrim(name)) >= 1) AND (length(btrim(name)) <= 200)))),
    CONSTRAINT firms_weight_check CHECK (((weight >= 1) AND (weight <= 1000)))
);

--
-- Name: ledger_clock; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.ledger_clock (
    only_row boolean DEFAULT true NOT NULL,
    offset_seconds double precision DEFAULT 0 NOT NULL,
    CONSTRAINT ledger_clock_never_behind CHECK ((offset_seconds >= (0)::double precision)),
    CONSTRAINT ledger_clock_one_row CHECK (only_row)
);

--
-- Name: matter_frame_jobs; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.matter_frame_jobs (
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    run_status text DEFAULT 'idle'::text NOT NULL,
    rebuild_needed boolean DEFAULT false NOT NULL,
    requested_generation bigint DEFAULT 0 NOT NULL,
    claimed_generation bigint DEFAULT 0 NOT NULL,
    claimed_at timestamp with time zone,
    landed_generation bigint DEFAULT 0 NOT NULL,
    consecutive_failures integer DEFAULT 0 NOT NULL,
    not_before timestamp with time zone,
    updated_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    claimed_snapshot text,
    claimed_run_id uuid,
    lease_seconds double precision,
    lease_expires_at timestamp with time zone,
    claimed_cluster bigint,
    CONSTRAINT matter_frame_jobs_check CHECK (((0 <= landed_generation) AND (landed_generation <= claimed_generation) AND (claimed_generation <= requested_generation))),
    CONSTRAINT matter_frame_jobs_consecutive_failures_check CHECK ((consecutive_failures >= 0)),
    CONSTRAINT matter_frame_jobs_run_status_check CHECK ((run_status = ANY (ARRAY['idle'::text, 'running'::text, 'failed'::text]))),
    CONSTRAINT matter_frame_jobs_running_has_a_deadline CHECK (((run_status <> 'running'::text) OR (lease_expires_at IS NOT NULL)))
);

--
-- Name: matter_frame_runs; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.matter_frame_runs (
    run_id uuid NOT NULL,
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    token bigint NOT NULL,
    node_id text NOT NULL,
    started_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    finished_at timestamp with time zone,
    outcome text DEFAULT 'running'::text NOT NULL,
    error text,
    trace_id text,
    event_ids uuid[] DEFAULT '{}'::uuid[] NOT NULL
);

--
-- Name: matter_frames; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.matter_frames (
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    generation bigint NOT NULL,
    run_id uuid NOT NULL,
    body jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT ops.now() NOT NULL
);

--
-- Name: nodes; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.nodes (
    node_id text NOT NULL,
    version text NOT NULL,
    transport text NOT NULL,
    heartbeat_seconds double precision NOT NULL,
    started_at timestamp with time zone NOT NULL,
    last_seen_at timestamp with time zone NOT NULL,
    stopped_at timestamp with time zone,
    CONSTRAINT nodes_heartbeat_seconds_check CHECK ((heartbeat_seconds > (0)::double precision)),
    CONSTRAINT nodes_node_id_check CHECK ((length(btrim(node_id)) > 0))
);

--
-- Name: rail; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.rail (
    only_row boolean DEFAULT true NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT ops.now() NOT NULL,
    max_running integer,
    starts_per_minute integer,
    tokens double precision,
    tokens_at timestamp with time zone,
    builder_held_until timestamp with time zone,
    builder_held_reason text,
    CONSTRAINT rail_max_running CHECK (((max_running IS NULL) OR ((max_running >= 1) AND (max_running <= 100000)))),
    CONSTRAINT rail_only_row_check CHECK (only_row),
    CONSTRAINT rail_starts_per_minute CHECK (((starts_per_minute IS NULL) OR ((starts_per_minute >= 1) AND (starts_per_minute <= 1000000))))
);

--
-- Name: retention_horizon; Type: TABLE; Schema: ops; Owner: -
--

CREATE TABLE ops.retention_horizon (
    only_row boolean DEFAULT true NOT NULL,
    events_removed_through timestamp with time zone NOT NULL,
    CONSTRAINT retention_horizon_only_row_check CHECK (only_row)
);

--
-- Name: documents; Type: TABLE; Schema: record; Owner: -
--

CREATE TABLE record.documents (
    document_id uuid NOT NULL,
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    title text NOT NULL,
    dated date,
    body text NOT NULL,
    uploaded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT documents_title_check CHECK ((length(btrim(title)) > 0))
);

--
-- Name: matters; Type: TABLE; Schema: record; Owner: -
--

CREATE TABLE record.matters (
    firm_id uuid NOT NULL,
    matter_id uuid NOT NULL,
    title text NOT NULL,
    archived_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT matters_title_check CHECK ((length(btrim(title)) > 0))
);

--
-- Name: build_permits build_permits_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.build_permits
    ADD CONSTRAINT build_permits_pkey PRIMARY KEY (firm_id, matter_id);

--
-- Name: console_sessions console_sessions_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.console_sessions
    ADD CONSTRAINT console_sessions_pkey PRIMARY KEY (session_hash);

--
-- Name: consumed_events consumed_events_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.consumed_events
    ADD CONSTRAINT consumed_events_pkey PRIMARY KEY (consumer, event_id);

--
-- Name: dead_letters dead_letters_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.dead_letters
    ADD CONSTRAINT dead_letters_pkey PRIMARY KEY (dead_letter_id);

--
-- Name: domain_event_outbox domain_event_outbox_event_name_fits_a_routing_key; Type: CHECK CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ops.domain_event_outbox
    ADD CONSTRAINT domain_event_outbox_event_name_fits_a_routing_key CHECK ((octet_length(event_name) <= 255)) NOT VALID;

--
-- Name: domain_event_outbox domain_event_outbox_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.domain_event_outbox
    ADD CONSTRAINT domain_event_outbox_pkey PRIMARY KEY (event_id);

--
-- Name: domain_event_outbox domain_event_outbox_seq_key; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.domain_event_outbox
    ADD CONSTRAINT domain_event_outbox_seq_key UNIQUE (seq);

--
-- Name: firms firms_name_key; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.firms
    ADD CONSTRAINT firms_name_key UNIQUE (name);

--
-- Name: firms firms_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.firms
    ADD CONSTRAINT firms_pkey PRIMARY KEY (firm_id);

--
-- Name: ledger_clock ledger_clock_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.ledger_clock
    ADD CONSTRAINT ledger_clock_pkey PRIMARY KEY (only_row);

--
-- Name: matter_frame_jobs matter_frame_jobs_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.matter_frame_jobs
    ADD CONSTRAINT matter_frame_jobs_pkey PRIMARY KEY (firm_id, matter_id);

--
-- Name: matter_frame_runs matter_frame_runs_outcome_check; Type: CHECK CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ops.matter_frame_runs
    ADD CONSTRAINT matter_frame_runs_outcome_check CHECK ((outcome = ANY (ARRAY['running'::text, 'landed'::text, 'fenced'::text, 'failed'::text, 'lease_expired'::text, 'released'::text]))) NOT VALID;

--
-- Name: matter_frame_runs matter_frame_runs_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.matter_frame_runs
    ADD CONSTRAINT matter_frame_runs_pkey PRIMARY KEY (run_id);

--
-- Name: matter_frames matter_frames_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.matter_frames
    ADD CONSTRAINT matter_frames_pkey PRIMARY KEY (firm_id, matter_id, generation);

--
-- Name: nodes nodes_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.nodes
    ADD CONSTRAINT nodes_pkey PRIMARY KEY (node_id);

--
-- Name: rail rail_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.rail
    ADD CONSTRAINT rail_pkey PRIMARY KEY (only_row);

--
-- Name: retention_horizon retention_horizon_pkey; Type: CONSTRAINT; Schema: ops; Owner: -
--

ALTER TABLE ONLY ops.retention_horizon
    ADD CONSTRAINT retention_horizon_pkey PRIMARY KEY (only_row);

--
-- Name: documents documents_pkey; Type: CONSTRAINT; Schema: record; Owner: -
--

ALTER TABLE ONLY record.documents
    ADD CONSTRAINT documents_pkey PRIMARY KEY (document_id);

--
-- Name: matters matters_pkey; Type: CONSTRAINT; Schema: record; Owner: -
--

ALTER TABLE ONLY record.matters
    ADD CONSTRAINT matters_pkey PRIMARY KEY (firm_id, matter_id);

--
-- Name: console_sessions_expiry; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX console_sessions_expiry ON ops.console_sessions USING btree (expires_at);

--
-- Name: consumed_events_by_event; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX consumed_events_by_event ON ops.consumed_events USING btree (event_id);

--
-- Name: dead_letters_open; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX dead_letters_open ON ops.dead_letters USING btree (refused_at DESC) WHERE (resolved_at IS NULL);

--
-- Name: domain_event_outbox_by_matter; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX domain_event_outbox_by_matter ON ops.domain_event_outbox USING btree (firm_id, matter_id, seq);

--
-- Name: domain_event_outbox_published_at; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX domain_event_outbox_published_at ON ops.domain_event_outbox USING btree (published_at) WHERE (published_at IS NOT NULL);

--
-- Name: domain_event_outbox_republished; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX domain_event_outbox_republished ON ops.domain_event_outbox USING btree (republish_count) WHERE (republish_count > 0);

--
-- Name: domain_event_outbox_unpublished; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX domain_event_outbox_unpublished ON ops.domain_event_outbox USING btree (seq) WHERE (published_at IS NULL);

--
-- Name: matter_frame_jobs_running_by_deadline; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX matter_frame_jobs_running_by_deadline ON ops.matter_frame_jobs USING btree (lease_expires_at) WHERE (run_status = 'running'::text);

--
-- Name: matter_frame_jobs_unserved; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX matter_frame_jobs_unserved ON ops.matter_frame_jobs USING btree (not_before) WHERE ((landed_generation < requested_generation) AND (run_status <> 'running'::text));

--
-- Name: matter_frame_runs_one_per_token; Type: INDEX; Schema: ops; Owner: -
--

CREATE UNIQUE INDEX matter_frame_runs_one_per_token ON ops.matter_frame_runs USING btree (firm_id, matter_id, token);

--
-- Name: matter_frame_runs_open; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX matter_frame_runs_open ON ops.matter_frame_runs USING btree (firm_id, matter_id) WHERE (outcome = 'running'::text);

--
-- Name: matter_frame_runs_recent; Type: INDEX; Schema: ops; Owner: -
--

CREATE INDEX matter_frame_runs_recent ON ops.matter_frame_runs USING btree (started_at DESC);

--
-- Name: documents_by_matter; Type: INDEX; Schema: record; Owner: -
--

CREATE INDEX documents_by_matter ON record.documents USING btree (firm_id, matter_id, dated, uploaded_at);

--
-- Name: domain_event_outbox domain_event_outbox_notify; Type: TRIGGER; Schema: ops; Owner: -
--

CREATE TRIGGER domain_event_outbox_notify AFTER INSERT ON ops.domain_event_outbox FOR EACH STATEMENT WHEN ((pg_notify('briefrail_outbox'::text, ''::text) IS NULL)) EXECUTE FUNCTION ops.notify_outbox();

--
-- Name: TRIGGER domain_event_outbox_notify ON domain_event_outbox; Type: COMMENT; Schema: ops; Owner: -
--

COMMENT ON TRIGGER domain_event_outbox_notify ON ops.domain_event_outbox IS 'its condition sends the notification and is false, so no PL/pgSQL runs on the insert';

--
-- Name: matter_frame_jobs matter_frame_jobs_no_delete; Type: TRIGGER; Schema: ops; Owner: -
--

CREATE TRIGGER matter_frame_jobs_no_delete BEFORE DELETE ON ops.matter_frame_jobs FOR EACH ROW EXECUTE FUNCTION ops.refuse_job_delete();

--
-- Name: matter_frame_jobs matter_frame_jobs_no_truncate; Type: TRIGGER; Schema: ops; Owner: -
--

CREATE TRIGGER matter_frame_jobs_no_truncate BEFORE TRUNCATE ON ops.matter_frame_jobs FOR EACH STATEMENT EXECUTE FUNCTION ops.refuse_job_delete();

--
-- Name: documents documents_firm_id_matter_id_fkey; Type: FK CONSTRAINT; Schema: record; Owner: -
--

ALTER TABLE ONLY record.documents
    ADD CONSTRAINT documents_firm_id_matter_id_fkey FOREIGN KEY (firm_id, matter_id) REFERENCES record.matters(firm_id, matter_id);
