--
-- status: outbox_status, outbox_kafka_brokers and outbox_explain() in a
-- database no worker serves (test/regress.conf limits delivery to database
-- postgres): the views' shapes, the backlog they count, and each status
-- outbox_explain() derives from the rows. The tests in t/ cover what
-- running workers report.
--
CREATE EXTENSION outbox;

SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a WHERE a.attrelid = 'outbox_status'::regclass AND a.attnum > 0
ORDER BY a.attnum;
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a WHERE a.attrelid = 'outbox_kafka_brokers'::regclass AND a.attnum > 0
ORDER BY a.attnum;
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a WHERE a.attrelid = 'outbox_explanation'::regclass AND a.attnum > 0
ORDER BY a.attnum;

-- one row per shard, with no worker: stopped, nothing counted
SELECT shard, pid, state, pending, oldest_pending_at, lag, delivered, failed_attempts,
       dead_lettered, last_error, ack_latency_p50_ms, ack_latency_p99_ms
FROM outbox_status;
SELECT count(*) AS brokers FROM outbox_kafka_brokers;
-- the delivery mode is the setting's while no worker runs; no transaction
SELECT shard, delivery, transaction_events, transaction_since, transactions_committed,
       transactions_aborted
FROM outbox_status;

-- a backlog: counted, with its age
SELECT outbox_send('orders', 'a'::text, 'k1') AS a \gset
SELECT outbox_send('orders', 'b'::text, 'k1') AS b \gset
SELECT outbox_send('orders', 'c'::text, 'k2') AS c \gset
UPDATE outbox SET created_at = timestamptz '2020-01-01 00:00:00+00' + (id - :a) * interval '1 hour';
SELECT shard, pending, oldest_pending_at = timestamptz '2020-01-01 00:00:00+00' AS oldest_is_a,
       lag = now() - timestamptz '2020-01-01 00:00:00+00' AS lag_is_its_age
FROM outbox_status;

-- pending: waiting for its worker (none runs)
SELECT id = :a AS is_a, status, detail, since = timestamptz '2020-01-01 00:00:00+00' AS since_created,
       blocking_id
FROM outbox_explain(:a);

-- retry_wait, as a worker records a refused attempt; the later event of
-- its key is held behind it, the other key is not
UPDATE outbox SET attempts = 2, last_error = 'Broker: Topic authorization failed',
       last_attempt_at = timestamptz '2020-01-02 00:00:00+00',
       next_attempt_at = now() + interval '1 hour'
WHERE id = :a;
SELECT status, detail ~ '^the last attempt failed with: Broker: Topic authorization failed; next attempt at .* \(2 of outbox.max_attempts counted\)$' AS detail_ok,
       since = timestamptz '2020-01-02 00:00:00+00' AS since_last_attempt, blocking_id
FROM outbox_explain(:a);
SELECT status, blocking_id = :a AS behind_a, detail ~ ('^behind event ' || :a || ' of the same key') AS detail_ok
FROM outbox_explain(:b);
SELECT status FROM outbox_explain(:c);

-- a dead letter
WITH moved AS (DELETE FROM outbox WHERE id = :c RETURNING *)
INSERT INTO outbox_dead_letter (id, topic, key, payload, headers, created_at, attempts,
                                last_error, failed_at)
SELECT id, topic, key, payload, headers, created_at, 10, 'Broker: Message size too large',
       timestamptz '2020-01-03 00:00:00+00'
FROM moved;
SELECT status, detail, since = timestamptz '2020-01-03 00:00:00+00' AS since_failed, blocking_id
FROM outbox_explain(:c);

-- delivered (gone), rolled back, never sent: nothing to tell them apart
BEGIN;
SELECT outbox_send('orders', 'r'::text) AS r \gset
ROLLBACK;
SELECT status, detail FROM outbox_explain(:r);
SELECT status FROM outbox_explain(-1);
SELECT * FROM outbox_explain(NULL);

-- no worker ever ran here: resetting clears nothing and fails nothing
SELECT outbox_stats_reset();
SELECT shard, delivered, stats_reset FROM outbox_status;

DROP EXTENSION outbox;
