-- outbox 0.1.0 -> 0.2.0
\echo Use "ALTER EXTENSION outbox UPDATE TO '0.2.0'" to load this file. \quit

-- The id space of this outbox's event ids: consumers deduplicate on
-- (instance, id), sent as headers outbox-instance and outbox-id. Made here,
-- so a re-created extension (ids from 1 again) gets a new one; a worker
-- replaces it when the server writes on a new timeline (a promoted standby
-- may hand out ids the old primary had already delivered) or when the
-- database is a copy (CREATE DATABASE ... TEMPLATE: the copy's ids repeat
-- the original's). Not dumped by pg_dump: a restored database gets a new
-- one too.
CREATE TABLE @extschema@.outbox_instance (
    id       uuid    NOT NULL,
    timeline bigint  NOT NULL,
    database oid     NOT NULL,
    one_row  boolean PRIMARY KEY DEFAULT true CHECK (one_row)
);
-- the timeline is the first 8 hex digits of the current WAL file's name
INSERT INTO @extschema@.outbox_instance (id, timeline, database)
VALUES (pg_catalog.gen_random_uuid(),
        ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.pg_walfile_name(
            pg_catalog.pg_current_wal_insert_lsn()), 1, 8))::pg_catalog.bit(32)::pg_catalog.int8,
        (SELECT d.oid FROM pg_catalog.pg_database d
         WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()));

REVOKE ALL ON TABLE @extschema@.outbox_instance FROM PUBLIC;

-- Puts dead letters (all with NULL, or those with the given ids) back into
-- the outbox with their ids, for delivery from scratch. Returns how many.
-- The lowest id is registered from the rows actually moved, before the
-- commit makes them visible, so no worker passes over them.
-- SECURITY DEFINER: EXECUTE alone lets an operator role use it.
CREATE OR REPLACE FUNCTION @extschema@.outbox_dead_letter_retry(ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    moved bigint;
    lowest bigint;
BEGIN
    WITH taken AS (
        DELETE FROM @extschema@.outbox_dead_letter d
        WHERE ids IS NULL OR d.id = ANY (ids)
        RETURNING d.*
    ), put_back AS (
        INSERT INTO @extschema@.outbox (id, shard, topic, key, payload, headers, created_at)
        SELECT t.id, @extschema@.outbox_shard_of(t.key, t.id), t.topic, t.key,
               t.payload, t.headers, t.created_at
        FROM taken t
        RETURNING id
    )
    SELECT count(*), min(id) INTO moved, lowest FROM put_back;
    PERFORM @extschema@.outbox_prepare_reinsert(lowest);
    RETURN moved;
END
$$;

