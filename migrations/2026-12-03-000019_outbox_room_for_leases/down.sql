-- Pages filled to the brim again (new rows only; existing pages keep their layout).
ALTER TABLE ops.domain_event_outbox RESET (fillfactor);
