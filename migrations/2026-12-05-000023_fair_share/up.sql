-- Fair share. It redefines (the live text: src/ledger/live/): ops.fair_pick, ops.events_aged, ops.drain_outbox
-- (docs/protocol.md, "Who is served next").
--
-- The rail served demands in the order their nudges reached a node, whoever they belonged to
-- and whatever caused them: one firm's bulk import made every other firm's uploads wait behind
-- it. Three facts of the ledger now decide who is served next when build slots are scarce:
--
--   * each fact records its demand's class (demand_class): 'interactive' (a user's action: an
--     upload, a Regenerate click, the console's Rebuild) or 'background' (bulk requests,
--     reconciliation, what an embedder marks so). Existing facts are interactive;
--   * ops.firms: a firm's name, weight (its share of scarce slots) and whether it is paused;
--     a firm with no row has weight 1 and is not paused;
--   * ops.rail: whether the whole rail is paused (one row at most; no row: running).
--
-- ops.fair_pick orders a node's waiting demands by them (interactive first, background aged
-- past a bound counted as interactive; then the firm with the fewest builds running on every
-- node, per unit of weight; then the oldest demand). It decides order only: every claim is
-- still the fenced compare-and-swap of ops.claim_batch, unchanged.
--
-- events_aged and drain_outbox answer each fact's class too; their return types change, so
-- they are dropped and created again with the settings of 000012 and 000016. Every statement
-- may run again on a database that has it (IF NOT EXISTS, CREATE OR REPLACE).

ALTER TABLE ops.domain_event_outbox
    ADD COLUMN IF NOT EXISTS demand_class text NOT NULL DEFAULT 'interactive'
        CONSTRAINT domain_event_outbox_demand_class
        CHECK (demand_class IN ('interactive', 'background'));

CREATE TABLE IF NOT EXISTS ops.firms (
    firm_id    uuid PRIMARY KEY,
    -- What operators call the firm (a client's name); unique when set.
    name       text UNIQUE CHECK (name IS NULL OR length(btrim(name)) BETWEEN 1 AND 200),
    -- Its share of scarce build slots against other firms' (1 to 1000).
    weight     integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    -- Paused: its demands are recorded and wait; none is claimed until it is resumed.
    paused     boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT ops.now()
);

CREATE TABLE IF NOT EXISTS ops.rail (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    paused     boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT ops.now()
);

-- fair_pick: which of a node's waiting demands is claimed next. Candidate i is the oldest
-- demand waiting on this node for firm p_firms[i] in class p_classes[i], waiting
-- p_waited_secs[i]; p_pending[i] counts this node's claims of that firm granted and not yet
-- visible as running. Answers i, or NULL when no candidate may be served (the rail or every
-- candidate's firm is paused). Each ordering rule is one line with its marker.
CREATE OR REPLACE FUNCTION ops.fair_pick(p_firms uuid[], p_classes text[],
                                         p_waited_secs double precision[], p_pending integer[],
                                         p_promote_secs double precision)
RETURNS integer LANGUAGE plpgsql STABLE
SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_pick integer;
BEGIN
    IF coalesce((SELECT r.paused FROM ops.rail r), false) THEN  -- rule: rail paused
        RETURN NULL;
    END IF;
    WITH candidate AS (
        SELECT c.*
          FROM unnest(p_firms, p_classes, p_waited_secs, p_pending) WITH ORDINALITY
               AS c(firm, class, waited, pending, n)
    ), running AS (
        -- Builds running on every node, by firm: the running rows (a few per build slot of
        -- the fleet) through their partial index.
        SELECT j.firm_id, count(*) AS n
          FROM ops.matter_frame_jobs j
         WHERE j.run_status = 'running' AND j.lease_expires_at >= ops.now()
           AND j.firm_id = ANY (p_firms)
         GROUP BY j.firm_id
    )
    SELECT c.n INTO v_pick
      FROM candidate c
           LEFT JOIN ops.firms f ON f.firm_id = c.firm
           LEFT JOIN running r ON r.firm_id = c.firm
     WHERE NOT coalesce(f.paused, false)  -- rule: paused firms wait
     ORDER BY (c.class = 'interactive' OR c.waited >= p_promote_secs) DESC,  -- rule: interactive first
              (coalesce(r.n, 0) + c.pending)::float8 / coalesce(f.weight, 1),  -- rule: fair share
              c.waited DESC,  -- rule: oldest first
              c.n
     LIMIT 1;
    RETURN v_pick;
END
$$;

DROP FUNCTION IF EXISTS ops.events_aged(uuid[]);

-- events_aged: the outbox rows of the named events, each locked FOR KEY SHARE (retention cannot
-- remove one while the trigger's transaction applies it), with how many seconds ago the
-- ledger recorded it (`ops.now()` less its `created_at`, both the ledger clock).
CREATE OR REPLACE FUNCTION ops.events_aged(p_event_ids uuid[])
RETURNS TABLE (event_id uuid, seq bigint, firm_id uuid, matter_id uuid, event_name text,
               payload jsonb, traceparent text, created_at timestamptz,
               published_at timestamptz, publish_attempts integer, last_error text,
               next_attempt_at timestamptz, xact_id bigint, republish_count integer,
               demand_class text, ago_s double precision)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN QUERY
        SELECT o.event_id, o.seq, o.firm_id, o.matter_id, o.event_name, o.payload,
               o.traceparent, o.created_at, o.published_at, o.publish_attempts, o.last_error,
               o.next_attempt_at, o.xact_id, o.republish_count, o.demand_class,
               extract(epoch FROM ops.now() - o.created_at)::float8
          FROM ops.domain_event_outbox o
         WHERE o.event_id = ANY (p_event_ids)
           FOR KEY SHARE OF o;
END
$$;

DROP FUNCTION IF EXISTS ops.drain_outbox(text, integer, text[]);

-- drain_outbox: the embedded transport's batch: lock up to p_limit publishable outbox rows,
-- apply them (ops.apply_events), mark them published; each with how long ago it was recorded
-- (its nudge's debounce counts from then) and its demand's class.
CREATE OR REPLACE FUNCTION ops.drain_outbox(p_consumer text, p_limit integer, p_heard text[])
RETURNS TABLE (event_id uuid, firm_id uuid, matter_id uuid, traceparent text, outcome text,
               requested_generation bigint, recorded_ago_s double precision, demand_class text)
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    v_ids     uuid[];
    v_firms   uuid[];
    v_matters uuid[];
    v_traces  text[];
    v_ages    double precision[];
    v_classes text[];
BEGIN
    SELECT array_agg(t.event_id), array_agg(t.firm_id), array_agg(t.matter_id),
           array_agg(t.traceparent), array_agg(extract(epoch FROM ops.now() - t.created_at)::float8),
           array_agg(t.demand_class)
      INTO v_ids, v_firms, v_matters, v_traces, v_ages, v_classes
      FROM (SELECT o.event_id, o.firm_id, o.matter_id, o.traceparent, o.created_at, o.demand_class
              FROM ops.domain_event_outbox o
             WHERE o.published_at IS NULL
               AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= ops.now())
             ORDER BY o.seq
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) t;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT a.event_id, l.firm_id, l.matter_id, l.traceparent, a.outcome, a.requested_generation,
               l.recorded_ago_s, l.demand_class
          FROM ops.apply_events(p_consumer, v_ids, p_heard) a
          JOIN unnest(v_ids, v_firms, v_matters, v_traces, v_ages, v_classes)
                 AS l(event_id, firm_id, matter_id, traceparent, recorded_ago_s, demand_class)
            ON l.event_id = a.event_id;
    UPDATE ops.domain_event_outbox o SET published_at = ops.now() WHERE o.event_id = ANY (v_ids);
END
$$;
