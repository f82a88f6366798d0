-- Back to an empty database: the ledger and the record with everything in them.
DROP SCHEMA ops CASCADE;
DROP SCHEMA record CASCADE;
