-- An event's name is its message's routing key on the bus, an AMQP short string of at most
-- 255 bytes. A longer name passed the noun.verb CHECK, and the relay could never publish its
-- row: each attempt failed it, and the event stayed unpublished. The library refuses such a
-- name, and so does the database, for a writer that skips the library.
--
-- NOT VALID: the rows already recorded are not read to add it (a long name among them stays
-- unpublished, with its error on the row, as before); every row written from now on is held
-- to it.

ALTER TABLE ops.domain_event_outbox
    ADD CONSTRAINT domain_event_outbox_event_name_fits_a_routing_key
    CHECK (octet_length(event_name) <= 255) NOT VALID;
