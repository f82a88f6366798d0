-- The outbox as 2026-12-07-000004 left it: names of any length.

ALTER TABLE ops.domain_event_outbox
    DROP CONSTRAINT domain_event_outbox_event_name_fits_a_routing_key;
