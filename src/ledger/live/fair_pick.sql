-- ops.fair_pick: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.fair_pick(p_firms uuid[], p_classes text[], p_waited_secs double precision[], p_pending integer[], p_promote_secs double precision)
 RETURNS integer
 LANGUAGE sql
 STABLE
AS $function$
    SELECT (ops.fair_order(p_firms, p_classes, p_waited_secs, p_pending, p_promote_secs, 1))[1]
$function$;
