-- The offset and the notification as 2026-12-06-000001 left them, both in PL/pgSQL.

CREATE OR REPLACE FUNCTION ops.clock_offset()
 RETURNS double precision
 LANGUAGE plpgsql
 STABLE COST 1
AS $function$
DECLARE
    v_offset text := current_setting('briefrail.clock_offset', true);
BEGIN
    IF v_offset IS NULL OR v_offset = '' THEN
        v_offset := coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0)::text;
        PERFORM set_config('briefrail.clock_offset', v_offset, true);  -- rule: offset for this transaction only
    END IF;
    RETURN v_offset::double precision;
END
$function$;

DROP TRIGGER domain_event_outbox_notify ON ops.domain_event_outbox;
CREATE TRIGGER domain_event_outbox_notify AFTER INSERT ON ops.domain_event_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION ops.notify_outbox();
