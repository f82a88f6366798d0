ALTER TABLE ops.dead_letters DROP COLUMN routing_key_bytes;
