-- outbox 0.4.0 -> 0.5.0: the hold rule in one function (outbox_held_by),
-- which the worker's read and outbox_explain() both use; the requests each
-- shard's producer sent to each broker; exactly-once delivery's columns
\echo Use "ALTER EXTENSION outbox UPDATE TO '0.5.0'" to load this file. \quit

-- The hold rule, written once: the events of a shard that hold event id
-- (of that key) back, the earlier ones of its key waiting for a retry.
-- The worker's read skips an event that has one; outbox_explain() names
-- the first. A SQL function the planner inlines into the read: it looks
-- the key up in outbox_held_idx (the OFFSET keeps it there, rather than a
-- walk of the retry index by id).
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
-- monitoring role reads no table itself.
CREATE OR REPLACE FUNCTION @extschema@.outbox_explain(id bigint)
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

-- outbox_kafka_brokers gains requests: what the shard's producer sent to
-- each broker (librdkafka's "tx"), to count the requests a delivery takes.
DROP VIEW @extschema@.outbox_kafka_brokers;
DROP FUNCTION @extschema@.outbox_broker_stats();
CREATE FUNCTION @extschema@.outbox_broker_stats(
    OUT shard integer, OUT broker text, OUT state text,
    OUT rtt_avg_ms double precision, OUT in_flight bigint, OUT requests bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_broker_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW @extschema@.outbox_kafka_brokers AS
SELECT b.shard, b.broker, b.state, b.rtt_avg_ms, b.in_flight, b.requests
FROM @extschema@.outbox_broker_stats() b;
COMMENT ON VIEW @extschema@.outbox_kafka_brokers IS
    'Each Kafka broker each shard''s producer knows, from librdkafka''s last statistics';
REVOKE ALL ON FUNCTION @extschema@.outbox_broker_stats() FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.outbox_kafka_brokers FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.outbox_broker_stats() TO pg_monitor;
GRANT SELECT ON TABLE @extschema@.outbox_kafka_brokers TO pg_monitor;

-- outbox.delivery = exactly_once: the mode and the Kafka transactions of
-- each shard, as new columns at the end of outbox_shard_stats() and
-- outbox_status (outbox_explain() reads the function by column name)
DROP VIEW @extschema@.outbox_status;
DROP FUNCTION @extschema@.outbox_shard_stats();

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

REVOKE ALL ON FUNCTION @extschema@.outbox_shard_stats() FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.outbox_status FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.outbox_shard_stats() TO pg_monitor;
GRANT SELECT ON TABLE @extschema@.outbox_status TO pg_monitor;
