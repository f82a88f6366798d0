-- ops.is_archived: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.is_archived(p_firm uuid, p_matter uuid)
 RETURNS boolean
 LANGUAGE sql
 STABLE COST 1
AS $function$
    SELECT EXISTS (SELECT 1 FROM record.matters m
                    WHERE m.firm_id = p_firm AND m.matter_id = p_matter AND m.archived_at IS NOT NULL)
$function$;
