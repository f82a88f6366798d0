-- ops.is_archived: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.is_archived(p_firm uuid, p_matter uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE COST 1
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
BEGIN
    RETURN EXISTS (SELECT 1 FROM record.matters m
                    WHERE m.firm_id = p_firm AND m.matter_id = p_matter AND m.archived_at IS NOT NULL);
END
$function$;
