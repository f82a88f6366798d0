-- ops.hold_builder: generated from a migrated database by
-- `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift`.
-- Do not edit: change it with a migration that redefines it.
CREATE OR REPLACE FUNCTION ops.hold_builder(p_secs double precision, p_reason text)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SET jit TO 'off'
AS $function$
DECLARE
    v_until timestamptz := ops.clock() + make_interval(secs => p_secs);
BEGIN
    INSERT INTO ops.rail AS r (only_row, builder_held_until, builder_held_reason)
    VALUES (true, v_until, p_reason)
    ON CONFLICT (only_row) DO UPDATE
        SET builder_held_until = greatest(r.builder_held_until, excluded.builder_held_until),
            builder_held_reason = CASE WHEN r.builder_held_until >= excluded.builder_held_until
                                       THEN r.builder_held_reason
                                       ELSE excluded.builder_held_reason END,
            updated_at = ops.now();
    RETURN (SELECT r.builder_held_until FROM ops.rail r WHERE r.only_row);
END
$function$;
