--
-- send: the outbox_send() contract. Where the extension's objects live,
-- what a row holds for each overload, and that rows follow the caller's
-- transaction (commit, rollback, savepoints, triggers, PREPARE TRANSACTION).
--
-- The temp instance runs with outbox.enabled = off, so no worker takes
-- rows out of the table, and with outbox.shards = 1 (the default).
--
\set SHOW_CONTEXT never

--
-- CREATE EXTENSION ... SCHEMA puts every object in that schema.
--
CREATE SCHEMA app;
CREATE EXTENSION outbox SCHEMA app;

SELECT e.extname, e.extnamespace::regnamespace AS schema, e.extrelocatable
FROM pg_extension e WHERE e.extname = 'outbox';

-- every member of the extension, with the schema it is in
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS member,
       coalesce(c.relnamespace, p.pronamespace)::regnamespace AS schema
FROM pg_depend d
LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
  AND d.deptype = 'e'
  -- 17 and 18 also list the row and array types a table or type implies
  AND NOT (d.classid = 'pg_type'::regclass AND EXISTS (
    SELECT FROM pg_type t LEFT JOIN pg_class r ON r.oid = t.typrelid
    WHERE t.oid = d.objid AND (t.typcategory = 'A' OR r.relkind <> 'c')))
ORDER BY pg_describe_object(d.classid, d.objid, d.objsubid) COLLATE "C";

-- the indexes of its tables are there too
SELECT i.indexrelid::regclass AS index, c.relnamespace::regnamespace AS schema
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid IN ('app.outbox'::regclass, 'app.outbox_dead_letter'::regclass)
ORDER BY c.relname;

-- and nothing went into public
SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace) AS public_relations,
       (SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace) AS public_functions;

-- the signatures: three overloads returning bigint, key and headers optional,
-- and the same three with a partition (0.7.0), every argument required
SELECT p.oid::regprocedure AS function, pg_get_function_arguments(p.oid) AS arguments,
       p.prorettype::regtype AS returns
FROM pg_proc p
WHERE p.pronamespace = 'app'::regnamespace AND p.proname = 'outbox_send'
ORDER BY p.oid::regprocedure::text COLLATE "C";

--
-- Each overload returns the new id, and ids increase. app is not on the
-- search_path: outbox_send() finds the table in its own schema.
--
SHOW search_path;

-- jsonb payload, text key, headers (the first send warns that the workers
-- serve another database: this one is contrib_regression)
SELECT app.outbox_send('orders', '{"b": 1, "a": [1, 2]}'::jsonb, 'order-1', '{"trace": "t-1"}');
-- text payload and a non-ASCII text key
SELECT app.outbox_send('orders.text', 'héllo'::text, 'clé', '{"content-type": "text/plain"}');
-- bytea payload and key
SELECT app.outbox_send('orders_bin', '\x00ff10'::bytea, '\xdeadbeef'::bytea, '{}');
-- key and headers left to their defaults (NULL), one per overload
SELECT app.outbox_send('no-key', '[1, "two", null]'::jsonb);
SELECT app.outbox_send('no-key', 'plain text'::text);
SELECT app.outbox_send('no-key', '\x0102'::bytea);
-- an explicit NULL key
SELECT app.outbox_send('no-key', '{}'::jsonb, NULL, NULL);
-- an untyped literal payload picks the text overload: stored as written,
-- not normalized as jsonb would
SELECT app.outbox_send('untyped', '{"b":1,  "a":2}');

-- the rows: shard 0, attempts 0, no delivery state; the text key 'clé' is
-- stored as its UTF-8 bytes (63 6c c3a9)
SELECT id, shard, topic, key, headers, attempts,
       last_error, last_attempt_at, next_attempt_at
FROM app.outbox ORDER BY id;

-- the payloads: jsonb as its text form (keys sorted by jsonb), text as its
-- bytes, bytea as it is
SELECT id, payload, encode(payload, 'escape') AS payload_escaped
FROM app.outbox ORDER BY id;

SELECT id,
       payload = convert_to(CASE id
           WHEN 1 THEN '{"b": 1, "a": [1, 2]}'::jsonb::text
           WHEN 2 THEN 'héllo'
           WHEN 4 THEN '[1, "two", null]'::jsonb::text
           WHEN 5 THEN 'plain text'
           WHEN 7 THEN '{}'::jsonb::text
           WHEN 8 THEN '{"b":1,  "a":2}' END, 'UTF8') AS text_payload_ok,
       key IS NOT DISTINCT FROM CASE id
           WHEN 1 THEN convert_to('order-1', 'UTF8')
           WHEN 2 THEN convert_to('clé', 'UTF8') END AS text_key_ok
FROM app.outbox WHERE id IN (1, 2, 4, 5, 7, 8) ORDER BY id;

SELECT id, payload = '\x00ff10'::bytea OR payload = '\x0102'::bytea AS bytea_payload_ok,
       key IS NOT DISTINCT FROM CASE id WHEN 3 THEN '\xdeadbeef'::bytea END AS bytea_key_ok
FROM app.outbox WHERE id IN (3, 6) ORDER BY id;

--
-- created_at is the transaction's start time (now()), not the statement's.
--
BEGIN;
SELECT pg_sleep(0.05);
SELECT app.outbox_send('timed', '{}'::jsonb) AS timed_id \gset
SELECT :timed_id AS id, created_at = now() AS is_transaction_start,
       created_at < statement_timestamp() AS before_this_statement
FROM app.outbox WHERE id = :timed_id;
COMMIT;

--
-- outbox_shard_of() is 0 with one shard, and every row is in its shard.
--
SHOW outbox.shards;
SELECT app.outbox_shard_of('\x01'::bytea, 1) AS with_key,
       app.outbox_shard_of(NULL, 12345) AS without_key;
SELECT count(*) AS rows, count(*) FILTER (WHERE shard = app.outbox_shard_of(key, id)) AS in_their_shard
FROM app.outbox;

--
-- A rolled-back transaction leaves no row.
--
BEGIN;
SELECT app.outbox_send('rolled-back', '{"n": 1}'::jsonb);
SELECT app.outbox_send('rolled-back', 'two'::text, 'k');
-- visible inside the transaction
SELECT count(*) FROM app.outbox WHERE topic = 'rolled-back';
ROLLBACK;
SELECT count(*) FROM app.outbox WHERE topic = 'rolled-back';

--
-- ROLLBACK TO SAVEPOINT removes only what was sent after the savepoint;
-- the commit keeps exactly the rest.
--
BEGIN;
SELECT app.outbox_send('savepoints', '{"n": 1}'::jsonb);
SAVEPOINT s1;
SELECT app.outbox_send('savepoints', '{"n": 2}'::jsonb);
SELECT app.outbox_send('savepoints', '{"n": 3}'::jsonb);
ROLLBACK TO SAVEPOINT s1;
SELECT app.outbox_send('savepoints', '{"n": 4}'::jsonb);
SAVEPOINT s2;
SELECT app.outbox_send('savepoints', '{"n": 5}'::jsonb);
RELEASE SAVEPOINT s2;
COMMIT;
SELECT id, convert_from(payload, 'UTF8') AS payload
FROM app.outbox WHERE topic = 'savepoints' ORDER BY id;

--
-- A committed transaction leaves exactly its rows, in the order sent.
--
BEGIN;
SELECT app.outbox_send('committed', '{"n": 1}'::jsonb, 'a');
SELECT app.outbox_send('committed', '{"n": 2}'::jsonb, 'b');
SELECT app.outbox_send('committed', '{"n": 3}'::jsonb, 'a');
COMMIT;
SELECT id, convert_from(key, 'UTF8') AS key, convert_from(payload, 'UTF8') AS payload
FROM app.outbox WHERE topic = 'committed' ORDER BY id;
SELECT count(*) AS total FROM app.outbox;

--
-- Events sent by an AFTER INSERT trigger land in the outbox, and go away
-- with the transaction when it rolls back.
--
CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL, qty int NOT NULL);
CREATE FUNCTION orders_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM app.outbox_send('orders.created', to_jsonb(NEW), NEW.id::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER orders_outbox AFTER INSERT ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_to_outbox();

INSERT INTO orders VALUES (1, 'apple', 3), (2, 'pear', 1);
SELECT o.id, o.topic, convert_from(o.key, 'UTF8') AS key,
       convert_from(o.payload, 'UTF8') AS payload,
       convert_from(o.payload, 'UTF8')::jsonb = to_jsonb(r) AS is_the_row
FROM app.outbox o JOIN orders r ON convert_from(o.key, 'UTF8') = r.id::text
WHERE o.topic = 'orders.created' ORDER BY o.id;

BEGIN;
INSERT INTO orders VALUES (3, 'plum', 2);
SELECT count(*) FROM app.outbox WHERE topic = 'orders.created';
ROLLBACK;
SELECT count(*) AS events, (SELECT count(*) FROM orders) AS orders
FROM app.outbox WHERE topic = 'orders.created';

-- a trigger's event in a rolled-back savepoint goes too; the rest stays
BEGIN;
INSERT INTO orders VALUES (4, 'fig', 1);
SAVEPOINT s;
INSERT INTO orders VALUES (5, 'kiwi', 7);
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT convert_from(key, 'UTF8') AS key, convert_from(payload, 'UTF8') AS payload
FROM app.outbox WHERE topic = 'orders.created' ORDER BY id;

--
-- PREPARE TRANSACTION after outbox_send() prepares the transaction: its
-- row waits, invisible, for COMMIT PREPARED, and is gone after ROLLBACK
-- PREPARED. (pg_regress's temp instance allows prepared transactions.)
--
BEGIN;
SELECT app.outbox_send('prepared', '{}'::jsonb);
PREPARE TRANSACTION 'regress_outbox_send';
SELECT count(*) AS rows FROM app.outbox WHERE topic = 'prepared';
SELECT gid FROM pg_prepared_xacts;
COMMIT PREPARED 'regress_outbox_send';
SELECT id, topic FROM app.outbox WHERE topic = 'prepared';
BEGIN;
SELECT app.outbox_send('prepared.rolled_back', '{}'::jsonb);
PREPARE TRANSACTION 'regress_outbox_rollback';
ROLLBACK PREPARED 'regress_outbox_rollback';
SELECT count(*) AS rows FROM app.outbox WHERE topic = 'prepared.rolled_back';
SELECT count(*) AS prepared FROM pg_prepared_xacts;

--
-- The partition (0.7.0) is an overload with five arguments and no
-- defaults: a call of two to four arguments resolves, as before 0.7.0, to
-- the four-argument function (the one an application was granted), never
-- ambiguously; a partition needs all five. resolved() names the function
-- a call binds to (a view's dependency) and stores the call's event.
--
CREATE FUNCTION pg_temp.resolved(call text, OUT function regprocedure,
                                 OUT payload_type "char", OUT key bytea, OUT partition integer)
LANGUAGE plpgsql AS $$
DECLARE
    sent bigint;
BEGIN
    EXECUTE 'CREATE TEMP VIEW resolving AS SELECT ' || call;
    SELECT d.refobjid INTO function FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
    WHERE d.classid = 'pg_rewrite'::regclass AND r.ev_class = 'resolving'::regclass
      AND d.refclassid = 'pg_proc'::regclass;
    DROP VIEW resolving;
    EXECUTE 'SELECT ' || call INTO sent;
    SELECT o.payload_type, o.key, o.partition INTO payload_type, key, partition
    FROM app.outbox o WHERE o.id = sent;
END
$$;

SELECT c.call, r.*
FROM (VALUES
    -- positional, untyped literals and NULLs
    ($$app.outbox_send('p', 'x')$$),
    ($$app.outbox_send('p', 'x', 'k')$$),
    ($$app.outbox_send('p', 'x', 'k', NULL)$$),
    ($$app.outbox_send('p', NULL, 'k')$$),
    ($$app.outbox_send('p', NULL, 'k', NULL)$$),
    ($$app.outbox_send('p', 'x', 'k', NULL, 2)$$),
    ($$app.outbox_send('p', NULL, 'k', NULL, NULL)$$),
    -- positional, each payload type
    ($$app.outbox_send('p', '{}'::jsonb)$$),
    ($$app.outbox_send('p', '{}'::jsonb, 'k', '{}')$$),
    ($$app.outbox_send('p', '{}'::jsonb, 'k', NULL, 1)$$),
    ($$app.outbox_send('p', 'x'::text, NULL)$$),
    ($$app.outbox_send('p', 'x'::text, 'k', '{}', 1)$$),
    ($$app.outbox_send('p', '\x01'::bytea, '\x02')$$),
    ($$app.outbox_send('p', '\x01'::bytea, NULL, NULL)$$),
    ($$app.outbox_send('p', '\x01'::bytea, '\x02', NULL, 0)$$),
    -- named notation, each payload type
    ($$app.outbox_send(topic => 'p', payload => 'x')$$),
    ($$app.outbox_send(topic => 'p', payload => 'x', headers => NULL)$$),
    ($$app.outbox_send(topic => 'p', payload => '{}'::jsonb, key => 'k')$$),
    ($$app.outbox_send(topic => 'p', payload => '\x01'::bytea, headers => '{}')$$),
    ($$app.outbox_send(topic => 'p', payload => 'x', key => 'k', headers => NULL, partition => 3)$$),
    ($$app.outbox_send(partition => 3, headers => NULL, key => 'k', payload => '{}'::jsonb, topic => 'p')$$),
    ($$app.outbox_send(topic => 'p', payload => '\x01'::bytea, key => NULL, headers => NULL, partition => 3)$$),
    ($$app.outbox_send('p', '\x01'::bytea, key => '\x02', headers => NULL, partition => NULL)$$)
) c(call), LATERAL pg_temp.resolved(c.call) r;

-- a partition without key and headers matches no function (only the
-- SQLSTATE: the error's detail and hint differ between majors)
DO $$
BEGIN
    PERFORM app.outbox_send('p', 'x', partition => 2);
EXCEPTION WHEN undefined_function THEN
    RAISE NOTICE 'outbox_send(topic, payload, partition => 2): %', SQLSTATE;
END
$$;
DO $$
BEGIN
    PERFORM app.outbox_send('p', '{}'::jsonb, 'k', partition => 2);
EXCEPTION WHEN undefined_function THEN
    RAISE NOTICE 'outbox_send(topic, payload, key, partition => 2): %', SQLSTATE;
END
$$;

--
-- Clean up: the next test starts without the extension.
--
DROP TABLE orders;
DROP FUNCTION orders_to_outbox();
DROP EXTENSION outbox;
-- nothing of the extension is left in its schema
SELECT count(*) AS relations FROM pg_class WHERE relnamespace = 'app'::regnamespace;
SELECT count(*) AS functions FROM pg_proc WHERE pronamespace = 'app'::regnamespace;
DROP SCHEMA app CASCADE;
