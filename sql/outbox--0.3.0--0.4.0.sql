-- outbox 0.3.0 -> 0.4.0: the instance id also changes in a physical copy of
-- the server started as a primary on the same timeline
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
