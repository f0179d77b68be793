-- outbox 0.7.0: the transactional outbox.
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
    -- NULL only with a key: a tombstone (a record with a null value)
    payload         bytea,
    headers         jsonb,
    created_at      timestamptz NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    last_attempt_at timestamptz,
    next_attempt_at timestamptz,
    -- what outbox_send() was given: 'j' jsonb, 't' text, 'b' bytea (NULL:
    -- sent before 0.3.0); names the content type
    payload_type    "char",
    -- the partition the sender chose (0.7.0); NULL: the partitioner's, by key
    partition       integer,
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

-- The keys of those events, which hold later events of the same keys back
-- (the worker's read looks each candidate's key up here). A hash index:
-- keys of any length, and no entry for a new row either.
CREATE INDEX outbox_held_idx ON @extschema@.outbox USING hash (key)
    WHERE next_attempt_at IS NOT NULL;

-- Events Kafka refused outbox.max_attempts times.
CREATE TABLE @extschema@.outbox_dead_letter (
    id          bigint      PRIMARY KEY,
    topic       text        NOT NULL,
    key         bytea,
    payload     bytea,
    headers     jsonb,
    created_at  timestamptz NOT NULL,
    attempts    integer     NOT NULL,
    last_error  text,
    failed_at   timestamptz NOT NULL,
    payload_type "char",
    partition   integer
);

-- The id space of this outbox's event ids: consumers deduplicate on
-- (instance, id), sent as headers outbox-instance and outbox-id. Made here,
-- so a re-created extension (ids from 1 again) gets a new one; a worker
-- replaces it when the server writes on a new timeline (a promoted standby
-- may hand out ids the old primary had already delivered), when the
-- database is a copy (CREATE DATABASE ... TEMPLATE: the copy's ids repeat
-- the original's), and when the server is not where it was made: another
-- system identifier, data directory or host (a physical copy started as a
-- primary on the same timeline). NULL in a place column: not known yet,
-- the worker fills it in. Not dumped by pg_dump: a restored database gets
-- a new one too. previous_id is the id the worker replaced, and
-- previous_until how far this server's WAL is that id's history (the redo
-- point of its last checkpoint then): exactly-once's recovery still
-- recognises its own progress records written there (a moved server).
CREATE TABLE @extschema@.outbox_instance (
    id       uuid    NOT NULL,
    timeline bigint  NOT NULL,
    database oid     NOT NULL,
    one_row  boolean PRIMARY KEY DEFAULT true CHECK (one_row),
    system_identifier bigint,
    data_directory    text,
    host              text,
    previous_id       uuid,
    previous_until    pg_lsn
);
-- the timeline is the first 8 hex digits of the current WAL file's name;
-- SQL cannot tell the host name, the worker records it
INSERT INTO @extschema@.outbox_instance (id, timeline, database, system_identifier, data_directory)
VALUES (pg_catalog.gen_random_uuid(),
        ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.pg_walfile_name(
            pg_catalog.pg_current_wal_insert_lsn()), 1, 8))::pg_catalog.bit(32)::pg_catalog.int8,
        (SELECT d.oid FROM pg_catalog.pg_database d
         WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()),
        (SELECT c.system_identifier FROM pg_catalog.pg_control_system() c),
        pg_catalog.current_setting('data_directory'));

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

-- The partition chosen by the sender (0.7.0): an overload of each variant
-- with all five arguments, none defaulted, so that every call of two to
-- four arguments still means the four-argument function it meant before.
-- The four-argument ones are never replaced: the EXECUTE an application
-- was granted on them, and whatever calls them, stays as it was.
CREATE FUNCTION @extschema@.outbox_send(topic text, payload jsonb, key text,
                                        headers jsonb, partition integer)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_send_jsonb'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.outbox_send(topic text, payload text, key text,
                                        headers jsonb, partition integer)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_send_text'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.outbox_send(topic text, payload bytea, key bytea,
                                        headers jsonb, partition integer)
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
        INSERT INTO @extschema@.outbox (id, shard, topic, key, payload, headers, created_at,
                                        payload_type, partition)
        SELECT t.id, @extschema@.outbox_shard_of(t.key, t.id), t.topic, t.key,
               t.payload, t.headers, t.created_at, t.payload_type, t.partition
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
REVOKE ALL ON FUNCTION @extschema@.outbox_send(text, jsonb, text, jsonb, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_send(text, text, text, jsonb, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_send(text, bytea, bytea, jsonb, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_prepare_reinsert(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_shard_of(bytea, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_dead_letter_retry(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_dead_letter_purge(interval) FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.outbox_instance FROM PUBLIC;

-- Row capture: a trigger function for AFTER INSERT OR UPDATE OR DELETE
-- FOR EACH ROW; arguments: topic, [key columns], [options]. See the README.
CREATE FUNCTION @extschema@.outbox_capture()
RETURNS trigger
AS 'MODULE_PATHNAME', 'outbox_capture'
LANGUAGE C;
REVOKE ALL ON FUNCTION @extschema@.outbox_capture() FROM PUBLIC;

-- ---- Debezium's outbox router (0.7.0) --------------------------------------
-- A trigger function for a table of Debezium's outbox shape (id,
-- aggregatetype, aggregateid, type, payload): AFTER INSERT FOR EACH ROW,
-- each row becomes the record Debezium's EventRouter makes of it;
-- arguments are its options by Debezium's names ('route.by.field=...').
-- See docs/debezium.md.
CREATE FUNCTION @extschema@.outbox_debezium()
RETURNS trigger
AS 'MODULE_PATHNAME', 'outbox_debezium'
LANGUAGE C;
REVOKE ALL ON FUNCTION @extschema@.outbox_debezium() FROM PUBLIC;

-- ---- Schema Registry (0.7.0) -----------------------------------------------
-- Topics whose records carry the Confluent wire format: per topic and part
-- (the value or the key), the format, how the registry's schema is found
-- (lookup: a fixed schema id, a subject's version or 'latest', or the
-- schema text registered under the subject) and what the workers learnt
-- from the registry. outbox_send() checks a payload against schema_text in
-- the sender's transaction; the workers frame records with schema_id. Set
-- by outbox_topic_schema(); schema_id, schema_text (for lookups),
-- resolved_at and last_error are the workers'. Dumped by pg_dump: it is
-- configuration.
CREATE TABLE @extschema@.outbox_topic_schema (
    topic            text      NOT NULL,
    part             text      NOT NULL DEFAULT 'value'
                     CHECK (part IN ('value', 'key')),
    format           text      NOT NULL
                     CHECK (format IN ('json_schema', 'avro', 'protobuf')),
    lookup           text      NOT NULL
                     CHECK (lookup IN ('id', 'version', 'register')),
    subject          text,
    version          text
                     CHECK (version = 'latest' OR version ~ '^[1-9][0-9]{0,8}$'),
    message_indexes  integer[] NOT NULL DEFAULT '{0}'
                     CHECK (cardinality(message_indexes) > 0
                            AND 0 <= ALL (message_indexes)),
    schema_text      text,
    schema_id        integer   CHECK (schema_id >= 0),
    resolved_at      timestamptz,
    last_error       text,
    PRIMARY KEY (topic, part),
    CHECK (lookup = 'id' OR subject IS NOT NULL),
    CHECK ((lookup = 'version') = (version IS NOT NULL)),
    CHECK (lookup <> 'register' OR schema_text IS NOT NULL),
    CHECK (lookup <> 'id' OR schema_id IS NOT NULL)
);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.outbox_topic_schema', '');
REVOKE ALL ON TABLE @extschema@.outbox_topic_schema FROM PUBLIC;

-- Every process caches the rows above and reads them again after a change
-- commits: a plain UPDATE raises no invalidation of its own, this
-- trigger does (also for logical replication's apply: ENABLE ALWAYS).
CREATE FUNCTION @extschema@.outbox_topic_schema_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'outbox_topic_schema_changed'
LANGUAGE C;
REVOKE ALL ON FUNCTION @extschema@.outbox_topic_schema_changed() FROM PUBLIC;
CREATE TRIGGER outbox_topic_schema_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.outbox_topic_schema
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.outbox_topic_schema_changed();
ALTER TABLE @extschema@.outbox_topic_schema ENABLE ALWAYS TRIGGER outbox_topic_schema_changed;

-- Whether a schema text given in SQL is one outbox_send() can check
-- (raises 22023 naming what it cannot).
CREATE FUNCTION @extschema@.outbox_check_schema_text(format text, schema text)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_check_schema_text'
LANGUAGE C STABLE;
REVOKE ALL ON FUNCTION @extschema@.outbox_check_schema_text(text, text) FROM PUBLIC;

-- Sets (or replaces) a topic's schema. Exactly one of schema (registered
-- under the subject), schema_id (fixed) and version (a number or 'latest'
-- of the subject) says how the registry's schema is found. The subject
-- follows subject_strategy as Confluent's serializers name it: 'topic'
-- (<topic>-value, <topic>-key), 'record' (record_name: the Avro record's
-- or Protobuf message's full name) or 'topic_record' (<topic>-<record_name>);
-- subject overrides it. A replaced row is resolved again by the workers.
CREATE FUNCTION @extschema@.outbox_topic_schema(
    topic text, format text,
    schema text DEFAULT NULL, schema_id integer DEFAULT NULL,
    version text DEFAULT NULL,
    subject_strategy text DEFAULT 'topic', record_name text DEFAULT NULL,
    message_indexes integer[] DEFAULT '{0}', part text DEFAULT 'value',
    subject text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    how text;
    named text;
BEGIN
    IF num_nonnulls(schema, schema_id, version) <> 1 THEN
        RAISE EXCEPTION 'outbox_topic_schema: give exactly one of schema, schema_id and version'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    how := CASE WHEN schema_id IS NOT NULL THEN 'id'
                WHEN version IS NOT NULL THEN 'version'
                ELSE 'register' END;
    PERFORM @extschema@.outbox_check_schema_text(format, schema);
    IF subject_strategy NOT IN ('topic', 'record', 'topic_record') THEN
        RAISE EXCEPTION 'outbox_topic_schema: unknown subject_strategy "%"', subject_strategy
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use topic, record or topic_record.';
    END IF;
    IF subject_strategy <> 'topic' AND record_name IS NULL THEN
        RAISE EXCEPTION 'outbox_topic_schema: subject_strategy % needs record_name', subject_strategy
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    named := coalesce(subject, CASE subject_strategy
        WHEN 'topic' THEN topic || '-' || part
        WHEN 'record' THEN record_name
        ELSE topic || '-' || record_name END);
    INSERT INTO @extschema@.outbox_topic_schema AS s
        (topic, part, format, lookup, subject, version, message_indexes,
         schema_text, schema_id)
    VALUES (topic, part, format, how, named, version, message_indexes,
            schema, schema_id)
    ON CONFLICT ON CONSTRAINT outbox_topic_schema_pkey DO UPDATE
        SET format = excluded.format, lookup = excluded.lookup,
            subject = excluded.subject, version = excluded.version,
            message_indexes = excluded.message_indexes,
            schema_text = excluded.schema_text, schema_id = excluded.schema_id,
            resolved_at = NULL, last_error = NULL;
END
$$;
REVOKE ALL ON FUNCTION @extschema@.outbox_topic_schema(text, text, text, integer, text, text, text, integer[], text, text) FROM PUBLIC;

-- ---- Monitoring (0.3.0) ----------------------------------------------------
-- Statistics live in shared memory, per database and shard: reading them
-- writes no row. The C functions are internal; the views and
-- outbox_explain() are the interface.

CREATE FUNCTION @extschema@.outbox_shard_stats(
    OUT shard integer, OUT pid integer, OUT state text, OUT state_since timestamptz,
    OUT delivered bigint, OUT failed_attempts bigint, OUT dead_lettered bigint,
    OUT last_delivered_at timestamptz, OUT last_error text, OUT last_error_at timestamptz,
    OUT ack_latency_p50_ms double precision, OUT ack_latency_p99_ms double precision,
    OUT stats_reset timestamptz, OUT in_flight_first_id bigint,
    OUT in_flight_last_id bigint, OUT in_flight_since timestamptz,
    OUT delivery text, OUT transaction_events integer, OUT transaction_since timestamptz,
    OUT transactions_committed bigint, OUT transactions_aborted bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_shard_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE FUNCTION @extschema@.outbox_broker_stats(
    OUT shard integer, OUT broker text, OUT state text,
    OUT rtt_avg_ms double precision, OUT in_flight bigint, OUT requests bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_broker_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE FUNCTION @extschema@.outbox_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_stats_reset'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.outbox_stats_reset() IS
    'Clears the delivery counters of this database''s shards and sets stats_reset';

-- pending, oldest_pending_at and lag count the outbox when read.
CREATE VIEW @extschema@.outbox_status AS
SELECT s.shard, s.pid, s.state, s.state_since,
       coalesce(p.pending, 0) AS pending,
       p.oldest_pending_at,
       CASE WHEN p.oldest_pending_at IS NULL THEN interval '0'
            ELSE greatest(now() - p.oldest_pending_at, interval '0') END AS lag,
       s.delivered, s.failed_attempts, s.dead_lettered, s.last_delivered_at,
       s.last_error, s.last_error_at, s.ack_latency_p50_ms, s.ack_latency_p99_ms,
       s.stats_reset, s.delivery, s.transaction_events, s.transaction_since,
       s.transactions_committed, s.transactions_aborted
FROM @extschema@.outbox_shard_stats() s
LEFT JOIN (SELECT o.shard, count(*) AS pending, min(o.created_at) AS oldest_pending_at
           FROM @extschema@.outbox o GROUP BY o.shard) p ON p.shard = s.shard;
COMMENT ON VIEW @extschema@.outbox_status IS
    'One row per shard of this database: its worker, backlog, lag and delivery counters';

CREATE VIEW @extschema@.outbox_kafka_brokers AS
SELECT b.shard, b.broker, b.state, b.rtt_avg_ms, b.in_flight, b.requests
FROM @extschema@.outbox_broker_stats() b;
COMMENT ON VIEW @extschema@.outbox_kafka_brokers IS
    'Each Kafka broker each shard''s producer knows, from librdkafka''s last statistics';

CREATE TYPE @extschema@.outbox_explanation AS (
    id          bigint,
    status      text,
    detail      text,
    since       timestamptz,
    blocking_id bigint
);

-- The hold rule, written once: the events of a shard that hold event id
-- (of that key) back, the earlier ones of its key waiting for a retry.
-- The worker's read skips an event that has one; outbox_explain() names
-- the first. A SQL function the planner inlines into the read: it looks
-- the key up in outbox_held_idx (the OFFSET keeps it there, rather than a
-- walk of the retry index by id). Waiting for a retry is next_attempt_at
-- past now(): the worker's rule "a retry is due" (RETRY_DUE in
-- src/table/queue.c) turned around, as outbox_explain() says it too.
CREATE FUNCTION @extschema@.outbox_held_by(shard integer, key bytea, id bigint)
RETURNS TABLE (id bigint, next_attempt_at timestamptz, last_attempt_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT w.id, w.next_attempt_at, w.last_attempt_at
    FROM (SELECT h.shard, h.id, h.next_attempt_at, h.last_attempt_at
          FROM @extschema@.outbox h
          WHERE h.key OPERATOR(pg_catalog.=) $2 AND h.next_attempt_at IS NOT NULL
            AND h.next_attempt_at OPERATOR(pg_catalog.>) pg_catalog.now()
          OFFSET 0) w
    WHERE w.shard OPERATOR(pg_catalog.=) $1 AND w.id OPERATOR(pg_catalog.<) $3
$$;
REVOKE ALL ON FUNCTION @extschema@.outbox_held_by(integer, bytea, bigint) FROM PUBLIC;

-- Where event id is and why it is not in Kafka yet. SECURITY DEFINER: a
-- monitoring role reads no table itself. An event is retry_wait while its
-- next_attempt_at is past now() (the worker's RETRY_DUE, src/table/queue.c).
CREATE FUNCTION @extschema@.outbox_explain(id bigint)
RETURNS @extschema@.outbox_explanation
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    wanted CONSTANT bigint := outbox_explain.id;
    e @extschema@.outbox%ROWTYPE;
    d @extschema@.outbox_dead_letter%ROWTYPE;
    s record;
    b record;
    r @extschema@.outbox_explanation;
BEGIN
    r.id := wanted;
    SELECT * INTO e FROM @extschema@.outbox o WHERE o.id = wanted;
    IF NOT FOUND THEN
        SELECT * INTO d FROM @extschema@.outbox_dead_letter dl WHERE dl.id = wanted;
        IF FOUND THEN
            r.status := 'dead_letter';
            r.detail := format('failed %s time(s), the last with: %s',
                               d.attempts, coalesce(d.last_error, 'unknown error'));
            r.since := d.failed_at;
        ELSE
            r.status := 'delivered_or_unknown';
            r.detail := 'neither in the outbox nor in the dead letters: delivered to Kafka and deleted, or never committed';
        END IF;
        RETURN r;
    END IF;

    SELECT * INTO s FROM @extschema@.outbox_shard_stats() st WHERE st.shard = e.shard;
    IF e.key IS NOT NULL THEN
        SELECT h.id, h.next_attempt_at, h.last_attempt_at INTO b
        FROM @extschema@.outbox_held_by(e.shard, e.key, e.id) h
        ORDER BY h.id LIMIT 1;
    END IF;

    IF s.state = 'paused' THEN
        r.status := 'paused';
        r.detail := 'delivery is paused (outbox.enabled = off)';
        r.since := s.state_since;
    ELSIF e.next_attempt_at > now() THEN
        r.status := 'retry_wait';
        r.detail := format('the last attempt failed with: %s; next attempt at %s (%s of outbox.max_attempts counted)',
                           coalesce(e.last_error, 'unknown error'), e.next_attempt_at, e.attempts);
        r.since := e.last_attempt_at;
    ELSIF b.id IS NOT NULL THEN
        r.status := 'held';
        r.detail := format('behind event %s of the same key, which waits for a retry at %s',
                           b.id, b.next_attempt_at);
        r.since := b.last_attempt_at;
        r.blocking_id := b.id;
    ELSIF s.state = 'waiting_for_kafka' THEN
        r.status := 'waiting_for_kafka';
        r.detail := format('Kafka is unreachable: %s', coalesce(s.last_error, 'no error reported yet'));
        r.since := s.state_since;
    ELSIF wanted BETWEEN s.in_flight_first_id AND s.in_flight_last_id THEN
        r.status := 'in_flight';
        r.detail := 'produced, waiting for Kafka''s acknowledgement';
        r.since := s.in_flight_since;
    ELSE
        r.status := 'pending';
        r.detail := CASE WHEN s.shard IS NULL
            THEN format('in shard %s, which outbox.shards no longer has: a worker adopts it when it starts', e.shard)
            ELSE format('waiting for the worker of shard %s (%s)', e.shard, s.state) END;
        r.since := e.created_at;
    END IF;
    RETURN r;
END
$$;

REVOKE ALL ON FUNCTION @extschema@.outbox_shard_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_broker_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_stats_reset() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_explain(bigint) FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.outbox_status FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.outbox_kafka_brokers FROM PUBLIC;
-- the views call the functions with the reader's rights
GRANT EXECUTE ON FUNCTION @extschema@.outbox_shard_stats() TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.outbox_broker_stats() TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.outbox_explain(bigint) TO pg_monitor;
GRANT SELECT ON TABLE @extschema@.outbox_status TO pg_monitor;
GRANT SELECT ON TABLE @extschema@.outbox_kafka_brokers TO pg_monitor;
