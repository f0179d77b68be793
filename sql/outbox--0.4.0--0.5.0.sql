-- outbox 0.4.0 -> 0.5.0
\echo Use "ALTER EXTENSION outbox UPDATE TO '0.5.0'" to load this file. \quit

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
