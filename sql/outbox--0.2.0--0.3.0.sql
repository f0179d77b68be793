-- outbox 0.2.0 -> 0.3.0: Kafka conventions (tombstones, content type,
-- row capture) and monitoring
\echo Use "ALTER EXTENSION outbox UPDATE TO '0.3.0'" to load this file. \quit

-- NULL only with a key: a tombstone (a record with a null value)
ALTER TABLE @extschema@.outbox ALTER COLUMN payload DROP NOT NULL;
ALTER TABLE @extschema@.outbox_dead_letter ALTER COLUMN payload DROP NOT NULL;
-- what outbox_send() was given: 'j' jsonb, 't' text, 'b' bytea (NULL:
-- sent before 0.3.0); names the content type
ALTER TABLE @extschema@.outbox ADD COLUMN payload_type "char";
ALTER TABLE @extschema@.outbox_dead_letter ADD COLUMN payload_type "char";

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
        INSERT INTO @extschema@.outbox (id, shard, topic, key, payload, headers, created_at,
                                        payload_type)
        SELECT t.id, @extschema@.outbox_shard_of(t.key, t.id), t.topic, t.key,
               t.payload, t.headers, t.created_at, t.payload_type
        FROM taken t
        RETURNING id
    )
    SELECT count(*), min(id) INTO moved, lowest FROM put_back;
    PERFORM @extschema@.outbox_prepare_reinsert(lowest);
    RETURN moved;
END
$$;

-- Row capture: a trigger function for AFTER INSERT OR UPDATE OR DELETE
-- FOR EACH ROW; arguments: topic, [key columns], [options]. See the README.
CREATE FUNCTION @extschema@.outbox_capture()
RETURNS trigger
AS 'MODULE_PATHNAME', 'outbox_capture'
LANGUAGE C;
REVOKE ALL ON FUNCTION @extschema@.outbox_capture() FROM PUBLIC;


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
    OUT in_flight_last_id bigint, OUT in_flight_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_shard_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE FUNCTION @extschema@.outbox_broker_stats(
    OUT shard integer, OUT broker text, OUT state text,
    OUT rtt_avg_ms double precision, OUT in_flight bigint)
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
       s.stats_reset
FROM @extschema@.outbox_shard_stats() s
LEFT JOIN (SELECT o.shard, count(*) AS pending, min(o.created_at) AS oldest_pending_at
           FROM @extschema@.outbox o GROUP BY o.shard) p ON p.shard = s.shard;
COMMENT ON VIEW @extschema@.outbox_status IS
    'One row per shard of this database: its worker, backlog, lag and delivery counters';

CREATE VIEW @extschema@.outbox_kafka_brokers AS
SELECT b.shard, b.broker, b.state, b.rtt_avg_ms, b.in_flight
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

-- Where event id is and why it is not in Kafka yet. SECURITY DEFINER: a
-- monitoring role reads no table itself.
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
        SELECT o.id, o.next_attempt_at, o.last_attempt_at INTO b
        FROM @extschema@.outbox o
        WHERE o.shard = e.shard AND o.key = e.key AND o.id < e.id
          AND o.next_attempt_at > now()
        ORDER BY o.id LIMIT 1;
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
