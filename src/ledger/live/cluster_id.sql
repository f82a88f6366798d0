-- ops.cluster_id: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.cluster_id()
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_cached text := current_setting('briefrail.cluster_id', true);
BEGIN
    IF v_cached IS NULL OR v_cached = '' THEN
        v_cached := (SELECT system_identifier FROM pg_control_system())::text;
        PERFORM set_config('briefrail.cluster_id', v_cached, false);
    END IF;
    RETURN v_cached::bigint;
END
$function$;
