-- outbox 0.3.0 -> 0.4.0: the instance id also changes in a physical copy of
-- the server started as a primary on the same timeline; the keys of events
-- waiting for a retry get an index of their own
\echo Use "ALTER EXTENSION outbox UPDATE TO '0.4.0'" to load this file. \quit

-- Where the instance was made; NULL: not known yet, the worker fills it in
-- (see the install script).
ALTER TABLE @extschema@.outbox_instance
    ADD COLUMN system_identifier bigint,
    ADD COLUMN data_directory text,
    ADD COLUMN host text;
UPDATE @extschema@.outbox_instance SET
    system_identifier = (SELECT c.system_identifier FROM pg_catalog.pg_control_system() c),
    data_directory = pg_catalog.current_setting('data_directory');

-- The keys of those events, which hold later events of the same keys back
-- (the worker's read looks each candidate's key up here). A hash index:
-- keys of any length, and no entry for a new row either.
CREATE INDEX outbox_held_idx ON @extschema@.outbox USING hash (key)
    WHERE next_attempt_at IS NOT NULL;
