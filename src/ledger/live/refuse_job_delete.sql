-- ops.refuse_job_delete: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.refuse_job_delete()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION 'ops.matter_frame_jobs rows are never deleted: tokens must never restart'
        USING ERRCODE = 'restrict_violation';
END
$function$;
