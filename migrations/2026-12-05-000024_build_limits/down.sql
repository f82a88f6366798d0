DROP FUNCTION IF EXISTS ops.hold_builder(double precision, text);
DROP FUNCTION IF EXISTS ops.take_permit(uuid, uuid, text, double precision);
DROP TABLE IF EXISTS ops.build_permits;
ALTER TABLE ops.rail
    DROP COLUMN IF EXISTS builder_held_reason,
    DROP COLUMN IF EXISTS builder_held_until,
    DROP COLUMN IF EXISTS tokens_at,
    DROP COLUMN IF EXISTS tokens,
    DROP COLUMN IF EXISTS starts_per_minute,
    DROP COLUMN IF EXISTS max_running;
