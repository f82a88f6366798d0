-- ops.clock_offset: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
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
