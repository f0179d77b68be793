-- outbox 0.2.0: the transactional outbox.
\echo Use "CREATE EXTENSION outbox" to load this file. \quit

-- No CACHE: ids must be handed out in the order outbox_send() is called,
-- which is what the workers' read position relies on.
CREATE SEQUENCE @extschema@.outbox_id_seq NO CYCLE;

-- Events waiting for delivery. Written only by outbox_send() (directly,
-- not through SQL) and by the workers; the column order is fixed.
CREATE TABLE @extschema@.outbox (
    id              bigint      NOT NULL,
    shard           integer     NOT NULL,
    topic           text        NOT NULL,
    key             bytea,
    payload         bytea       NOT NULL,
    headers         jsonb,
    created_at      timestamptz NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    last_attempt_at timestamptz,
    next_attempt_at timestamptz,
    -- the one index the hot path uses: each worker reads its shard in id order
    CONSTRAINT outbox_pkey PRIMARY KEY (shard, id)
) WITH (
    -- a queue: vacuum by number of deleted rows, not by a fraction of the table
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 100000
);
ALTER SEQUENCE @extschema@.outbox_id_seq OWNED BY @extschema@.outbox.id;

-- Events waiting for a retry are few; this index finds them without
-- touching the hot path (a new row has no retry time, so no entry).
CREATE INDEX outbox_retry_idx ON @extschema@.outbox (shard, id)
    WHERE next_attempt_at IS NOT NULL;

-- Events Kafka refused outbox.max_attempts times.
CREATE TABLE @extschema@.outbox_dead_letter (
    id          bigint      PRIMARY KEY,
    topic       text        NOT NULL,
    key         bytea,
    payload     bytea       NOT NULL,
    headers     jsonb,
    created_at  timestamptz NOT NULL,
    attempts    integer     NOT NULL,
    last_error  text,
    failed_at   timestamptz NOT NULL
);

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

SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_dead_letter', '');

CREATE FUNCTION @extschema@.outbox_send(topic text, payload jsonb,
                                        key text DEFAULT NULL,
                                        headers jsonb DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_send_jsonb'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.outbox_send(topic text, payload text,
                                        key text DEFAULT NULL,
                                        headers jsonb DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_send_text'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.outbox_send(topic text, payload bytea,
                                        key bytea DEFAULT NULL,
                                        headers jsonb DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_send_bytea'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The shard an event belongs to under the current outbox.shards.
CREATE FUNCTION @extschema@.outbox_shard_of(key bytea, id bigint)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_shard_of'
LANGUAGE C STABLE PARALLEL SAFE;

-- Internal: announces that this transaction puts ids from min_id on back
-- into the outbox, so that no worker passes over them.
CREATE FUNCTION @extschema@.outbox_prepare_reinsert(min_id bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_prepare_reinsert'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Puts dead letters (all with NULL, or those with the given ids) back into
-- the outbox with their ids, for delivery from scratch. Returns how many.
-- The lowest id is registered from the rows actually moved, before the
-- commit makes them visible, so no worker passes over them.
-- SECURITY DEFINER: EXECUTE alone lets an operator role use it.
CREATE FUNCTION @extschema@.outbox_dead_letter_retry(ids bigint[] DEFAULT NULL)
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

-- Deletes dead letters that failed longer ago than older_than.
-- SECURITY DEFINER, like outbox_dead_letter_retry.
CREATE FUNCTION @extschema@.outbox_dead_letter_purge(older_than interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    purged bigint;
BEGIN
    IF older_than IS NULL THEN
        RAISE EXCEPTION 'older_than must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF older_than < interval '0' THEN
        RAISE EXCEPTION 'older_than must not be negative: %', older_than
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM @extschema@.outbox_dead_letter WHERE failed_at < now() - older_than;
    GET DIAGNOSTICS purged = ROW_COUNT;
    RETURN purged;
END
$$;

-- Nothing is granted to PUBLIC: an application role needs EXECUTE on the
-- outbox_send() it calls (see the README), and no right on the tables.
REVOKE ALL ON FUNCTION @extschema@.outbox_send(text, jsonb, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_send(text, text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_send(text, bytea, bytea, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_prepare_reinsert(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_shard_of(bytea, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_dead_letter_retry(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_dead_letter_purge(interval) FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.outbox_instance FROM PUBLIC;
