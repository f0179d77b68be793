--
-- privileges: nothing of the extension is granted to PUBLIC. A role needs
-- EXECUTE on the outbox_send() it calls, and that is enough to send; no
-- role but the owner reads or writes the tables. outbox.kafka_config (it
-- may hold passwords) is hidden from non-superusers.
--
\set SHOW_CONTEXT never

CREATE SCHEMA events;
CREATE EXTENSION outbox SCHEMA events;
-- both roles may look up names in the schema: what they lack is the grants
CREATE ROLE regress_outbox_nobody;
CREATE ROLE regress_outbox_app;
GRANT USAGE ON SCHEMA events TO regress_outbox_nobody, regress_outbox_app;

-- PUBLIC may execute none of the functions that send or touch the tables,
-- and has no right on the tables or the sequence
SELECT p.oid::regprocedure AS function,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_execute
FROM pg_proc p WHERE p.pronamespace = 'events'::regnamespace
  AND p.proname <> 'outbox_shard_of'
ORDER BY p.oid::regprocedure::text COLLATE "C";
SELECT c.oid::regclass AS relation,
       has_table_privilege('public', c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER') AS public_has_a_right
FROM pg_class c WHERE c.relnamespace = 'events'::regnamespace AND c.relkind = 'r'
ORDER BY c.relname;
SELECT has_sequence_privilege('public', 'events.outbox_id_seq', 'USAGE, SELECT, UPDATE') AS public_has_a_right_on_sequence;

-- a dead letter, so that reading it would show something
INSERT INTO events.outbox_dead_letter
    (id, topic, key, payload, headers, created_at, attempts, last_error, failed_at)
VALUES (900, 'orders', NULL, 'x', NULL, now(), 10, 'e', now() - interval '1 day');

--
-- A role without grants: 42501 for every function and for the tables.
--
SET ROLE regress_outbox_nobody;
SELECT events.outbox_send('orders', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT events.outbox_send('orders', 'x'::text);
\echo :LAST_ERROR_SQLSTATE
SELECT events.outbox_send('orders', '\x00'::bytea);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM events.outbox;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM events.outbox_dead_letter;
\echo :LAST_ERROR_SQLSTATE
SELECT events.outbox_dead_letter_retry();
\echo :LAST_ERROR_SQLSTATE
SELECT events.outbox_dead_letter_retry(ARRAY[900]);
\echo :LAST_ERROR_SQLSTATE
SELECT events.outbox_dead_letter_purge(interval '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT events.outbox_prepare_reinsert(1);
\echo :LAST_ERROR_SQLSTATE
SELECT nextval('events.outbox_id_seq');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- nothing was sent, retried or purged
SELECT (SELECT count(*) FROM events.outbox) AS outbox,
       (SELECT count(*) FROM events.outbox_dead_letter) AS dead_letters;

--
-- EXECUTE on outbox_send(text, jsonb, text, jsonb) is enough to send.
--
GRANT EXECUTE ON FUNCTION events.outbox_send(text, jsonb, text, jsonb) TO regress_outbox_app;
SET ROLE regress_outbox_app;
SELECT events.outbox_send('orders', '{"n": 1}'::jsonb, 'k', '{"by": "app"}');
-- also in a transaction, and the rolled-back one leaves nothing
BEGIN;
SELECT events.outbox_send('orders', '{"n": 2}'::jsonb);
COMMIT;
BEGIN;
SELECT events.outbox_send('orders', '{"n": 3}'::jsonb);
ROLLBACK;
-- the other overloads are still not granted
SELECT events.outbox_send('orders', 'x'::text);
\echo :LAST_ERROR_SQLSTATE
SELECT events.outbox_send('orders', '\x00'::bytea);
\echo :LAST_ERROR_SQLSTATE
-- nor is the one with a partition (0.7.0): it is granted apart
SELECT events.outbox_send('orders', '{"n": 4}'::jsonb, 'k', NULL, 1);
\echo :LAST_ERROR_SQLSTATE
-- and the tables and sequence stay out of reach
SELECT * FROM events.outbox;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO events.outbox (id, shard, topic, payload, created_at)
VALUES (1000, 0, 'forged', 'x', now());
\echo :LAST_ERROR_SQLSTATE
UPDATE events.outbox SET attempts = 0;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM events.outbox;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM events.outbox_dead_letter;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM events.outbox_dead_letter;
\echo :LAST_ERROR_SQLSTATE
SELECT nextval('events.outbox_id_seq');
\echo :LAST_ERROR_SQLSTATE
SELECT events.outbox_dead_letter_retry();
\echo :LAST_ERROR_SQLSTATE
SELECT events.outbox_dead_letter_purge(interval '1 hour');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- granted, it sends with a partition
GRANT EXECUTE ON FUNCTION events.outbox_send(text, jsonb, text, jsonb, integer) TO regress_outbox_app;
SET ROLE regress_outbox_app;
SELECT events.outbox_send('orders', '{"n": 5}'::jsonb, 'k', NULL, 1);
RESET ROLE;
-- the rows sent by the role landed (the rolled-back one did not)
SELECT id, topic, convert_from(payload, 'UTF8') AS payload, headers, shard, attempts, partition
FROM events.outbox ORDER BY id;
SELECT count(*) AS dead_letters FROM events.outbox_dead_letter;

--
-- outbox.kafka_config is for superusers only: SHOW and current_setting()
-- refuse it (42501), pg_settings leaves it out; the other settings show.
--
-- a superuser sees it (empty here)
SHOW outbox.kafka_config;
SELECT count(*) FROM pg_settings WHERE name = 'outbox.kafka_config';

SET ROLE regress_outbox_app;
-- (the message's wording differs by major, the SQLSTATE does not)
\set VERBOSITY sqlstate
SHOW outbox.kafka_config;
\echo :LAST_ERROR_SQLSTATE
SELECT current_setting('outbox.kafka_config');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
-- pg_settings leaves out the settings that may hold secrets, not the others
SELECT name FROM pg_settings
WHERE name IN ('outbox.brokers', 'outbox.kafka_config', 'outbox.kafka_config_file')
ORDER BY name COLLATE "C";
-- nor can a non-superuser raise the payload limit (PGC_SUSET)
SET outbox.max_message_bytes = '10MB';
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

--
-- Monitoring: pg_monitor reads the status views and explains events, with
-- no right on the tables; PUBLIC does none of it; resetting the statistics
-- is the owner's.
--
CREATE ROLE regress_outbox_monitor IN ROLE pg_monitor;
GRANT USAGE ON SCHEMA events TO regress_outbox_monitor;
SELECT c.relname AS view,
       has_table_privilege('public', c.oid, 'SELECT') AS public_may_read,
       has_table_privilege('pg_monitor', c.oid, 'SELECT') AS pg_monitor_may_read
FROM pg_class c WHERE c.relnamespace = 'events'::regnamespace AND c.relkind = 'v'
ORDER BY c.relname;
SET ROLE regress_outbox_monitor;
SELECT shard, pid, state, pending FROM events.outbox_status;
SELECT count(*) AS brokers FROM events.outbox_kafka_brokers;
SELECT id, status FROM events.outbox_explain(900);
SELECT events.outbox_stats_reset();
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM events.outbox;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE regress_outbox_nobody;
SELECT * FROM events.outbox_status;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM events.outbox_kafka_brokers;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM events.outbox_explain(900);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM events.outbox_shard_stats();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

--
-- Clean up: roles, the extension and its schema.
--
DROP EXTENSION outbox;
DROP SCHEMA events;
DROP ROLE regress_outbox_nobody, regress_outbox_app, regress_outbox_monitor;
