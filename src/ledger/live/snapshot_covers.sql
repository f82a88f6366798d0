-- ops.snapshot_covers: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.snapshot_covers(p_xact bigint, p_snapshot text, p_cluster bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN p_xact IS NOT NULL AND p_snapshot IS NOT NULL
       AND p_cluster IS NOT NULL AND p_cluster = ops.cluster_id()  -- rule: this cluster only
       AND pg_visible_in_snapshot(p_xact::text::xid8, p_snapshot::pg_snapshot);  -- rule: covered only if seen
END
$function$;
