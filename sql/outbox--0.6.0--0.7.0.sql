-- outbox 0.6.0 -> 0.7.0: topics framed for a Schema Registry
-- (outbox_topic_schema and its setter)
\echo Use "ALTER EXTENSION outbox UPDATE TO '0.7.0'" to load this file. \quit

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

-- ---- A partition chosen by the sender; Debezium's outbox router (0.7.0) ----
ALTER TABLE @extschema@.outbox ADD COLUMN partition integer;
ALTER TABLE @extschema@.outbox_dead_letter ADD COLUMN partition integer;

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

REVOKE ALL ON FUNCTION @extschema@.outbox_send(text, jsonb, text, jsonb, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_send(text, text, text, jsonb, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.outbox_send(text, bytea, bytea, jsonb, integer) FROM PUBLIC;

-- Dead letters put back keep the partition their sender chose.
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
