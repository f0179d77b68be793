--
-- conventions: the SQL side of the Kafka record conventions. Tombstones (a
-- NULL payload with a key), the payload type that names the content type,
-- CloudEvents attributes refused as user headers, the whole record
-- bounded by outbox.max_message_bytes, and the W3C trace context taken
-- from outbox.traceparent/tracestate or from a SQLCommenter comment when
-- the event is written. The TAP test t/070_conventions.pl reads the
-- records back from Kafka.
--
\set SHOW_CONTEXT never
CREATE EXTENSION outbox;
SET client_min_messages = error;

-- a tombstone: NULL payload with a key, for each overload
SELECT outbox_send('compacted', NULL::jsonb, 'k1') IS NOT NULL AS jsonb_tombstone;
SELECT outbox_send('compacted', NULL::text, 'k2') IS NOT NULL AS text_tombstone;
SELECT outbox_send('compacted', NULL::bytea, '\x6b33'::bytea) IS NOT NULL AS bytea_tombstone;
-- without a key a NULL payload is still an error
SELECT outbox_send('compacted', NULL::text);
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('compacted', NULL::jsonb, NULL, '{"a": "b"}');
\echo :LAST_ERROR_SQLSTATE

-- the payload type of each overload (it names the content type)
SELECT outbox_send('typed', '{"n": 1}'::jsonb, 'j') IS NOT NULL AS sent;
SELECT outbox_send('typed', 'plain'::text, 't') IS NOT NULL AS sent;
SELECT outbox_send('typed', '\x00ff'::bytea, 'b'::bytea) IS NOT NULL AS sent;
SELECT topic, convert_from(key, 'UTF8') AS key, payload, payload_type
FROM outbox ORDER BY id;
DELETE FROM outbox;

-- a user header may not be a CloudEvents attribute the workers set
SELECT outbox_send('t', 'x'::text, 'k', '{"ce_id": "mine"}');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', 'x'::text, 'k', '{"ce_source": "/mine"}');
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('t', 'x'::text, 'k', '{"ce_specversion": "1.0"}');
\echo :LAST_ERROR_SQLSTATE
-- "type" sets ce_type; other ce_ headers (extensions) pass
SELECT outbox_send('t', 'x'::text, 'k', '{"type": "order.created", "ce_partitionkey": "p"}') IS NOT NULL AS sent;
DELETE FROM outbox;

-- the whole record is bounded: payload, and key and headers twice
SET outbox.max_message_bytes = '1kB';
SELECT outbox_send('big', repeat('x', 1000), repeat('k', 12)) IS NOT NULL AS fits;
SELECT outbox_send('big', repeat('x', 1000), repeat('k', 13));
\echo :LAST_ERROR_SQLSTATE
SELECT outbox_send('big', repeat('x', 1000), NULL, '{"h": "0123456789ab"}');
\echo :LAST_ERROR_SQLSTATE
RESET outbox.max_message_bytes;
DELETE FROM outbox;

-- trace context: an invalid W3C value is refused when set
SET outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
SET outbox.traceparent = '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01';
\echo :LAST_ERROR_SQLSTATE
SET outbox.traceparent = '00-00000000000000000000000000000000-00f067aa0ba902b7-01';
\echo :LAST_ERROR_SQLSTATE
SET outbox.traceparent = 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
\echo :LAST_ERROR_SQLSTATE
SET outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7';
\echo :LAST_ERROR_SQLSTATE
SET outbox.tracestate = 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7';
SET outbox.tracestate = 'Congo=t61rcWkgMzE';
\echo :LAST_ERROR_SQLSTATE
SET outbox.tracestate = 'congo';
\echo :LAST_ERROR_SQLSTATE
RESET outbox.traceparent;
RESET outbox.tracestate;

-- SET LOCAL: every event of the transaction carries it; the event's own
-- traceparent wins; after the transaction, nothing
BEGIN;
SET LOCAL outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
SET LOCAL outbox.tracestate = 'congo=t61rcWkgMzE';
SELECT outbox_send('traced', 'a'::text, 'k') IS NOT NULL AS sent;
SELECT outbox_send('traced', 'b'::text, 'k', '{"x": "y"}') IS NOT NULL AS sent;
SELECT outbox_send('traced', 'c'::text, 'k',
       '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}') IS NOT NULL AS sent;
COMMIT;
SELECT outbox_send('traced', 'd'::text, 'k') IS NOT NULL AS sent;
-- a SQLCommenter comment in the statement, its values URL-encoded
SELECT outbox_send('traced', 'e'::text, 'k') IS NOT NULL AS sent /*db_driver='psycopg2',traceparent='00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01',tracestate='congo%3Dt61rcWkgMzE'*/;
-- an invalid one is ignored
SELECT outbox_send('traced', 'f'::text, 'k') IS NOT NULL AS sent /*traceparent='00-xyz-01'*/;
SELECT convert_from(payload, 'UTF8') AS payload, headers FROM outbox ORDER BY id;
DELETE FROM outbox;

DROP EXTENSION outbox;
