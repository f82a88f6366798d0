ALTER TABLE ops.dead_letters DROP COLUMN IF EXISTS routing_key_bytes;
