--
-- bad_input: what outbox_send() and the outbox.* settings refuse, with the
-- message and SQLSTATE of each refusal (printed by \echo after the error),
-- and that a refusal loses nothing already stored.
--
-- The extension goes into the default schema (public) here.
--
\set SHOW_CONTEXT never

-- without SCHEMA, the extension goes into the first schema of search_path
CREATE EXTENSION outbox;
SELECT extnamespace::regnamespace AS schema FROM pg_extension WHERE extname = 'outbox';

-- rows committed before any bad input (the first send warns that the
-- workers serve another database)
SELECT outbox_send('good', '{"n": 1}'::jsonb, 'k1', '{"h": "v"}');
SELECT outbox_send('good', 'two'::text);
SELECT outbox_send('good', '\x03'::bytea, '\x03'::bytea);

-- "stored" keeps a copy of them; "lost" lists stored rows that changed or
-- went away, "added" the rows that were not there before
CREATE TEMP TABLE stored AS SELECT * FROM outbox;
CREATE TEMP VIEW lost AS SELECT * FROM stored EXCEPT SELECT * FROM outbox;
CREATE TEMP VIEW added AS SELECT * FROM outbox EXCEPT SELECT * FROM stored;
SELECT (SELECT count(*) FROM stored) AS stored, (SELECT count(*) FROM lost) AS lost,
       (SELECT count(*) FROM added) AS added;

--
-- NULL topic, or NULL payload without a key: 22004, for each overload (a
-- NULL payload with a key is a tombstone: see conventions).
--
SELECT outbox_send(NULL, '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send(NULL, 'x'::text);
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send(NULL, '\x00'::bytea);
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', NULL::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', NULL::text);
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', NULL::bytea, NULL, '{}');
\echo :LAST_ERROR_SQLSTATE

--
-- Topic names Kafka would refuse: 22023.
--
-- empty
SELECT outbox_send('', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
-- a space, a slash, a non-ASCII letter
SELECT outbox_send('has space', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('a/b', 'x'::text);
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('café', '\x00'::bytea);
\echo :LAST_ERROR_SQLSTATE
-- "." and ".."
SELECT outbox_send('.', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('..', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
-- 250 characters is one too many
SELECT outbox_send(repeat('t', 250), '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE

SELECT (SELECT count(*) FROM lost) AS lost, (SELECT count(*) FROM added) AS added;

-- accepted: 249 characters, and names made of every allowed character
SELECT outbox_send(repeat('t', 249), '{}'::jsonb);
SELECT outbox_send('Az09._-', '{}'::jsonb);

--
-- Headers must be a JSON object of strings: 22023.
--
-- not an object
SELECT outbox_send('t', '{}'::jsonb, NULL, '[]');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', '{}'::jsonb, NULL, '"x"');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', '{}'::jsonb, NULL, '1');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', '{}'::jsonb, NULL, 'null');
\echo :LAST_ERROR_SQLSTATE
-- a value that is not a string: number, object, array, null, boolean
SELECT outbox_send('t', '{}'::jsonb, NULL, '{"a": "ok", "n": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', 'x'::text, NULL, '{"o": {"a": "b"}}');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', '\x00'::bytea, NULL, '{"a": ["x"]}');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', '{}'::jsonb, NULL, '{"z": null}');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', '{}'::jsonb, NULL, '{"b": true}');
\echo :LAST_ERROR_SQLSTATE
-- the reserved header name, alone or next to others
SELECT outbox_send('t', '{}'::jsonb, NULL, '{"outbox-id": "1"}');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', 'x'::text, 'k', '{"a": "1", "outbox-id": "2"}');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', 'x'::text, 'k', '{"outbox-instance": "u"}');
\echo :LAST_ERROR_SQLSTATE

SELECT (SELECT count(*) FROM lost) AS lost, (SELECT count(*) FROM added) AS added;

--
-- outbox.max_message_bytes bounds the record (here just the payload, in
-- bytes, jsonb measured in its text form): 54000 above it, accepted at it.
--
SET outbox.max_message_bytes = '1kB';
SHOW outbox.max_message_bytes;
SELECT outbox_send('big', repeat('x', 1025));
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('big', convert_to(repeat('x', 1025), 'UTF8'));
\echo :LAST_ERROR_SQLSTATE
-- 1023 characters make a 1025-byte JSON string (with its quotes)
SELECT outbox_send('big', to_jsonb(repeat('x', 1023)));
\echo :LAST_ERROR_SQLSTATE
-- 513 characters, 1026 bytes in UTF-8
SELECT outbox_send('big', repeat('é', 513));
\echo :LAST_ERROR_SQLSTATE
SELECT (SELECT count(*) FROM lost) AS lost, (SELECT count(*) FROM added) AS added;
-- exactly 1024 bytes: accepted, for each overload
SELECT outbox_send('big', repeat('x', 1024));
SELECT outbox_send('big', convert_to(repeat('x', 1024), 'UTF8'));
SELECT outbox_send('big', to_jsonb(repeat('x', 1022)));
SELECT outbox_send('big', repeat('é', 512));
RESET outbox.max_message_bytes;
-- the setting has a floor of 1 byte (the message's wording differs by major)
\set VERBOSITY sqlstate
SET outbox.max_message_bytes = 0;
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE

--
-- outbox_send() writes, so a read-only transaction refuses it: 25006.
--
BEGIN READ ONLY;
SELECT outbox_send('t', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

--
-- outbox_shard_of() needs an id: 22004.
--
SELECT outbox_shard_of('\x01'::bytea, NULL);
\echo :LAST_ERROR_SQLSTATE

--
-- In a transaction: a good send, then a bad one in a savepoint that is
-- rolled back (with a good send of its own before it), then COMMIT: only
-- the first good send is stored.
--
BEGIN;
SELECT outbox_send('tx', '{"kept": true}'::jsonb) AS kept_id \gset
SAVEPOINT bad;
SELECT outbox_send('tx', '{"kept": false}'::jsonb);
SELECT outbox_send('tx', '{}'::jsonb, NULL, '{"outbox-id": "x"}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK TO SAVEPOINT bad;
COMMIT;
SELECT id = :kept_id AS is_the_kept_one, convert_from(payload, 'UTF8') AS payload
FROM outbox WHERE topic = 'tx';

-- a bad send without a savepoint aborts the whole transaction
BEGIN;
SELECT outbox_send('tx', '{"kept": false}'::jsonb);
SELECT outbox_send('tx bad', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
COMMIT;
SELECT count(*) FROM outbox WHERE topic = 'tx';

--
-- After all of the above: every row stored at the start is still there,
-- unchanged, and the only new rows are the accepted sends.
--
SELECT count(*) AS lost FROM lost;
SELECT topic = repeat('t', 249) AS is_249_chars, CASE WHEN length(topic) > 20 THEN NULL ELSE topic END AS topic,
       length(payload) AS payload_bytes
FROM added ORDER BY id;

--
-- Settings. The delivery settings are reloaded, not SET: SET refuses them
-- with 55P02 before looking at the value.
--
SET outbox.batch_size = 0;
\echo :LAST_ERROR_SQLSTATE
SET outbox.message_format = 'xml';
\echo :LAST_ERROR_SQLSTATE
SET outbox.kafka_config = 'compression.type=lz4';
\echo :LAST_ERROR_SQLSTATE

-- ALTER SYSTEM validates the value: 22023
ALTER SYSTEM SET outbox.batch_size = 0;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.batch_size = -1;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.message_format = 'xml';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.delivery = 'twice';
\echo :LAST_ERROR_SQLSTATE
-- a Kafka topic name: letters, digits, . _ -, not Kafka's own "__"
ALTER SYSTEM SET outbox.progress_topic = '';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.progress_topic = 'a b';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.progress_topic = '__consumer_offsets';
\echo :LAST_ERROR_SQLSTATE

-- outbox is a reserved prefix: no made-up outbox.* setting
SET outbox.no_such_setting = 1;
\echo :LAST_ERROR_SQLSTATE
-- ALTER SYSTEM's refusal differs by major: see reserved_prefix.sql

-- outbox.kafka_config is checked against librdkafka
-- not name=value
ALTER SYSTEM SET outbox.kafka_config = 'nonsense';
\echo :LAST_ERROR_SQLSTATE
-- a property librdkafka does not know
ALTER SYSTEM SET outbox.kafka_config = 'no.such.property=1';
\echo :LAST_ERROR_SQLSTATE
-- a value librdkafka refuses
ALTER SYSTEM SET outbox.kafka_config = 'compression.type=banana';
\echo :LAST_ERROR_SQLSTATE
-- a property pg_outbox sets itself, under its own name or an alias, alone
-- or after a valid one
ALTER SYSTEM SET outbox.kafka_config = 'bootstrap.servers=x:1';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.kafka_config = 'metadata.broker.list=x:1';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.kafka_config = 'linger.ms=2, enable.idempotence = false';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.kafka_config = 'transactional.id=t1';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.kafka_config = 'transaction.timeout.ms=1000';
\echo :LAST_ERROR_SQLSTATE
-- values the idempotent producer would refuse only when it is created
ALTER SYSTEM SET outbox.kafka_config = 'acks=1';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.kafka_config = 'max.in.flight=10';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.kafka_config = 'queuing.strategy=lifo';
\echo :LAST_ERROR_SQLSTATE
-- topic-level properties cannot slip through with their "topic." prefix
ALTER SYSTEM SET outbox.kafka_config = 'topic.partitioner=random';
\echo :LAST_ERROR_SQLSTATE
-- nor can code be loaded into the server, or the worker's accounting broken
ALTER SYSTEM SET outbox.kafka_config = 'plugin.library.paths=/tmp/x.so';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.kafka_config = 'delivery.report.only.error=true';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET outbox.kafka_config = 'queue.buffering.max.kbytes=99999999';
\echo :LAST_ERROR_SQLSTATE
-- a comma inside a value must be escaped: unescaped, the rest is an item
ALTER SYSTEM SET outbox.kafka_config = 'sasl.password=a,b';
\echo :LAST_ERROR_SQLSTATE
-- none of the refused values reached postgresql.auto.conf
SELECT count(*) FROM pg_file_settings
WHERE name LIKE 'outbox.%' AND sourcefile LIKE '%/postgresql.auto.conf';

-- a valid value is accepted (and written to postgresql.auto.conf) ...
ALTER SYSTEM SET outbox.kafka_config = 'compression.type=lz4,linger.ms=2';
SELECT name, setting, error FROM pg_file_settings
WHERE name LIKE 'outbox.%' AND sourcefile LIKE '%/postgresql.auto.conf';
-- with the comma escaped, the same value is accepted
ALTER SYSTEM SET outbox.kafka_config = 'sasl.password=a\,b,linger.ms=2';
SELECT name, setting, error FROM pg_file_settings
WHERE name LIKE 'outbox.%' AND sourcefile LIKE '%/postgresql.auto.conf';
-- ... and reset, so nothing is left behind
ALTER SYSTEM RESET outbox.kafka_config;
SELECT count(*) FROM pg_file_settings
WHERE name LIKE 'outbox.%' AND sourcefile LIKE '%/postgresql.auto.conf';

--
-- Clean up: the next test starts without the extension.
--
DROP VIEW lost, added;
DROP TABLE stored;
DROP EXTENSION outbox;
