--
-- dead_letter: outbox_dead_letter_retry() puts dead letters back into the
-- outbox with their ids, for delivery from scratch;
-- outbox_dead_letter_purge() deletes those that failed long enough ago.
--
-- The dead letters are inserted directly (as superuser), as a worker would
-- after outbox.max_attempts failures.
--
\set SHOW_CONTEXT never

CREATE SCHEMA dl;
CREATE EXTENSION outbox SCHEMA dl;
SET search_path = dl, public;

INSERT INTO outbox_dead_letter
    (id, topic, key, payload, headers, created_at, attempts, last_error, failed_at)
VALUES
    (101, 'orders', 'k-101', '{"n": 101}', '{"h": "1"}', '2024-01-01 10:00:00+00', 10,
     'Broker: Message size too large', now() - interval '3 hours'),
    (102, 'orders', NULL, '\x00ff', NULL, '2024-01-01 10:00:01+00', 10,
     'Broker: Invalid message', now() - interval '2 hours'),
    (103, 'payments', 'k-103', 'pay', '{}', '2024-01-01 10:00:02+00', 7,
     'Broker: Topic authorization failed', now() - interval '1 hour'),
    (104, 'payments', '\xdeadbeef', 'x', NULL, '2024-01-01 10:00:03+00', 10,
     NULL, now());
-- what they held, to compare with what comes back
CREATE TEMP TABLE before AS SELECT * FROM outbox_dead_letter;

--
-- Retrying given ids: returns how many moved (999 is not a dead letter).
--
SELECT outbox_dead_letter_retry(ARRAY[101, 103, 999]);

-- back in the outbox with the same ids and content, attempts reset to 0,
-- no delivery state, shard from outbox_shard_of()
SELECT o.id, o.topic, o.key, o.payload, o.headers, o.created_at = b.created_at AS same_created_at,
       o.attempts, o.last_error, o.last_attempt_at, o.next_attempt_at,
       o.shard, o.shard = outbox_shard_of(o.key, o.id) AS shard_of
FROM outbox o JOIN before b USING (id)
ORDER BY o.id;
SELECT count(*) AS same_content
FROM outbox o JOIN before b
  ON (o.id, o.topic, o.payload, o.created_at) = (b.id, b.topic, b.payload, b.created_at)
 AND o.key IS NOT DISTINCT FROM b.key AND o.headers IS NOT DISTINCT FROM b.headers;
-- and gone from the dead letters; the others stay
SELECT id FROM outbox_dead_letter ORDER BY id;

-- retrying again an id already moved moves nothing
SELECT outbox_dead_letter_retry(ARRAY[101]);
-- an empty array moves nothing
SELECT outbox_dead_letter_retry(ARRAY[]::bigint[]);

--
-- A retry in a transaction that rolls back changes nothing.
--
BEGIN;
SELECT outbox_dead_letter_retry();
ROLLBACK;
SELECT (SELECT array_agg(id ORDER BY id) FROM outbox_dead_letter) AS dead_letters,
       (SELECT array_agg(id ORDER BY id) FROM outbox) AS outbox;

--
-- Retrying with no argument moves all of them.
--
SELECT outbox_dead_letter_retry();
SELECT count(*) AS dead_letters FROM outbox_dead_letter;
SELECT o.id, o.key, o.payload, o.attempts, o.last_error,
       o.shard = outbox_shard_of(o.key, o.id) AS shard_of,
       (o.id, o.topic, o.payload, o.created_at) = (b.id, b.topic, b.payload, b.created_at)
       AND o.key IS NOT DISTINCT FROM b.key
       AND o.headers IS NOT DISTINCT FROM b.headers AS same_content
FROM outbox o JOIN before b USING (id)
ORDER BY o.id;
-- nothing left to retry
SELECT outbox_dead_letter_retry();

-- new sends keep taking ids from the sequence, next to the retried rows
SELECT outbox_send('orders', '{"new": true}'::jsonb);
SELECT id, topic, attempts FROM outbox ORDER BY id;

--
-- Purging deletes only the dead letters that failed longer ago than the
-- interval, and returns how many.
--
INSERT INTO outbox_dead_letter
    (id, topic, key, payload, headers, created_at, attempts, last_error, failed_at)
VALUES
    (201, 't', NULL, 'a', NULL, now() - interval '1 day', 10, 'e', now() - interval '2 hours'),
    (202, 't', NULL, 'b', NULL, now() - interval '1 day', 10, 'e', now() - interval '61 minutes'),
    (203, 't', NULL, 'c', NULL, now() - interval '1 day', 10, 'e', now() - interval '59 minutes'),
    (204, 't', NULL, 'd', NULL, now() - interval '1 day', 10, 'e', now());
SELECT outbox_dead_letter_purge(interval '1 hour');
SELECT id FROM outbox_dead_letter ORDER BY id;
-- nothing more is older than an hour
SELECT outbox_dead_letter_purge(interval '1 hour');
SELECT outbox_dead_letter_purge(interval '1 day');
SELECT id FROM outbox_dead_letter ORDER BY id;

-- NULL and negative intervals are refused (22004, 22023), deleting nothing
SELECT outbox_dead_letter_purge(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_dead_letter_purge(interval '-1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_dead_letter_purge(interval '1 day ago');
\echo :LAST_ERROR_SQLSTATE
SELECT id FROM outbox_dead_letter ORDER BY id;

-- interval 0 deletes every dead letter that failed before now
SELECT outbox_dead_letter_purge(interval '0');
SELECT count(*) AS dead_letters FROM outbox_dead_letter;

-- purging touches the dead letters only: the outbox is as it was
SELECT count(*) AS outbox FROM outbox;

--
-- Clean up: the next test starts without the extension.
--
DROP TABLE before;
RESET search_path;
DROP EXTENSION outbox;
DROP SCHEMA dl;
