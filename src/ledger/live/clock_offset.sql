-- ops.clock_offset: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
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
