-- A dead letter's routing key as the broker delivered it. `routing_key` (text) cannot hold a
-- NUL, so the ledger stores it escaped (`\u{0}`, src/ledger/text.rs) and keeps the raw bytes
-- here whenever the escape changed it (NULL otherwise: the text is the key).
ALTER TABLE ops.dead_letters ADD COLUMN IF NOT EXISTS routing_key_bytes bytea;
COMMENT ON COLUMN ops.dead_letters.routing_key_bytes IS
    'the routing key''s raw bytes when routing_key had to be escaped (it held a NUL)';
