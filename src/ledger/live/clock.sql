-- ops.clock: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.clock()
 RETURNS timestamp with time zone
 LANGUAGE sql
 COST 1
AS $function$
    SELECT clock_timestamp() + make_interval(secs => coalesce(
        nullif(current_setting('briefrail.clock_offset', true), '')::double precision,
        ops.clock_offset()))
$function$;
