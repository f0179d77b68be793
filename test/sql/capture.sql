--
-- capture: outbox_capture(), the row-capture trigger. What each INSERT,
-- UPDATE and DELETE sends (topic, key, payload, headers, content type),
-- each option, that the trigger follows DDL on its table, every misuse
-- (refused at the first row, with the message and SQLSTATE printed by
-- \echo after the error), and who may create such a trigger.
--
-- The temp instance runs with outbox.enabled = off: the events stay in
-- the outbox, where this test reads them.
--
SET TimeZone = 'UTC';

-- in its own schema: the trigger writes the outbox of outbox_capture()'s
-- schema, whatever the table's
CREATE SCHEMA cdc;
CREATE EXTENSION outbox SCHEMA cdc;

-- what was sent, oldest first
CREATE VIEW sent AS
SELECT o.id, o.topic, convert_from(o.key, 'UTF8') AS key, o.headers, o.payload_type,
       convert_from(o.payload, 'UTF8')::jsonb AS payload
FROM cdc.outbox o;

--
-- A table with a composite primary key: the key is its columns in the
-- primary key's order, a compact JSON object; insert, update and delete.
--
CREATE TABLE order_lines (
    line     int,
    order_id int,
    product  text NOT NULL,
    qty      int NOT NULL,
    note     text,
    PRIMARY KEY (order_id, line)
);
CREATE TRIGGER order_lines_capture AFTER INSERT OR UPDATE OR DELETE ON order_lines
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('order-lines');

-- (the first event of the session warns that no worker serves this database)
INSERT INTO order_lines VALUES (1, 1, 'apple', 3, NULL), (2, 1, 'pear', 1, 'ripe "ok"'),
                               (1, 2, 'plum', 5, NULL);
UPDATE order_lines SET qty = qty + 1 WHERE order_id = 1 AND line = 1;
DELETE FROM order_lines WHERE order_id = 1 AND line = 2;
SELECT id, topic, key, headers, payload_type, payload FROM sent ORDER BY id;

-- the payload's text: op, schema, table, before, after, in that order; the
-- row objects as row_to_json() writes them
SELECT convert_from(payload, 'UTF8') AS payload FROM cdc.outbox ORDER BY id LIMIT 1;
SELECT convert_from(payload, 'UTF8') AS payload FROM cdc.outbox ORDER BY id DESC LIMIT 1;

-- one key, one shard: a row's events stay in order
SELECT convert_from(o.key, 'UTF8') AS key, count(*) AS events,
       count(DISTINCT o.shard) AS shards,
       bool_and(o.shard = cdc.outbox_shard_of(o.key, o.id)) AS in_their_shard
FROM cdc.outbox o GROUP BY o.key ORDER BY 1;

-- a rolled-back change sends nothing; a savepoint rolled back takes its events
BEGIN;
INSERT INTO order_lines VALUES (9, 9, 'gone', 1);
ROLLBACK;
BEGIN;
INSERT INTO order_lines VALUES (3, 1, 'kept', 1);
SAVEPOINT s;
UPDATE order_lines SET qty = 100 WHERE order_id = 1 AND line = 3;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT key, headers, payload -> 'after' ->> 'qty' AS qty FROM sent WHERE id > 5 ORDER BY id;
DELETE FROM cdc.outbox;

--
-- Values are written as row_to_json() writes them, byte for byte:
-- numbers and booleans bare (NaN and Infinity quoted), dates ISO 8601,
-- json as it is, arrays and composites as JSON, domains as their base type,
-- everything else as its text, quoted.
--
CREATE TYPE mood AS ENUM ('happy', 'sad');
CREATE TYPE pair AS (x int, y text);
CREATE DOMAIN positive AS int CHECK (VALUE > 0);
CREATE TABLE kinds (
    id int PRIMARY KEY, b bool, i2 smallint, i8 bigint, n numeric, f float8, r real,
    t text, c char(3), d date, ts timestamp, tstz timestamptz, iv interval,
    j json, jb jsonb, arr int[], tarr text[], comp pair, dom positive, m mood,
    u uuid, bin bytea, inf_d date
);
CREATE TRIGGER kinds_capture AFTER INSERT ON kinds
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('kinds');
INSERT INTO kinds VALUES
    (1, true, -2, 9007199254740993, 1.50, 'NaN', 'Infinity',
     E'quote " backslash \\ tab \t newline \n é \u0001', 'ab', '2024-02-29',
     '2024-02-29 13:14:15.5', '2024-02-29 13:14:15.5+02', '1 day 2 hours',
     '{"x": [1,  2]}', '{"y": null, "a": 1}', '{1,NULL,3}', '{"a b",c}', ROW(1, 'p'),
     7, 'sad', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\x00ff', 'infinity'),
    (2, false, 0, -1, -0.000, '-1.5e-10', '3', '', NULL, NULL, NULL, NULL, NULL,
     'null', '[]', '{}', NULL, ROW(NULL, NULL), NULL, NULL, NULL, NULL, '-infinity'),
    (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
SELECT k.id, (convert_from(o.payload, 'UTF8')::json -> 'after')::text = row_to_json(k)::text AS as_row_to_json
FROM cdc.outbox o JOIN kinds k ON convert_from(o.key, 'UTF8') = '{"id":' || k.id || '}'
ORDER BY k.id;
SELECT convert_from(payload, 'UTF8')::json -> 'after' AS after FROM cdc.outbox ORDER BY id;
DELETE FROM cdc.outbox;

--
-- The key argument: its columns in its order, names as SQL writes them
-- (unquoted ones fold to lower case, "Quoted" ones keep their case).
--
CREATE TABLE accounts ("Region" text, id int, balance numeric, PRIMARY KEY (id, "Region"));
CREATE TRIGGER accounts_capture AFTER INSERT OR UPDATE OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('accounts', ' "Region" , ID');
INSERT INTO accounts VALUES ('eu', 1, 10);
-- an UPDATE is keyed by the new row; a DELETE by the old one
UPDATE accounts SET id = 2 WHERE id = 1;
DELETE FROM accounts;
SELECT key, headers ->> 'op' AS op FROM sent ORDER BY id;

-- a table without a primary key, keyed by the argument's columns
CREATE TABLE audit_log (seq bigint, msg text);
CREATE TRIGGER audit_log_capture AFTER INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('audit', 'seq');
INSERT INTO audit_log VALUES (7, 'hello'), (NULL, 'no seq');
SELECT key, payload -> 'after' AS after FROM sent WHERE topic = 'audit' ORDER BY id;

-- a DEFERRABLE primary key keys the events too
CREATE TABLE deferred_pk (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v text);
CREATE TRIGGER deferred_pk_capture AFTER INSERT ON deferred_pk
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('deferred');
INSERT INTO deferred_pk VALUES (1, 'x');
SELECT key FROM sent WHERE topic = 'deferred';
DELETE FROM cdc.outbox;

--
-- Options.
--
CREATE TABLE customers (
    id            int PRIMARY KEY,
    name          text,
    email         text,
    password_hash text,
    updated_at    timestamptz
);

-- ignore=: every column but these; skip_unchanged: an UPDATE that changes
-- no sent column (nor the key) sends nothing; type: header type =
-- <table>.<op>
CREATE TRIGGER customers_capture AFTER INSERT OR UPDATE OR DELETE ON customers
    FOR EACH ROW EXECUTE FUNCTION
    cdc.outbox_capture('customers', '', 'ignore=password_hash, updated_at', 'skip_unchanged', 'type');
INSERT INTO customers VALUES (1, 'ann', 'ann@example.com', 'secret', now()),
                             (2, 'bob', 'bob@example.com', 'secret', now());
-- a no-op update, and one of ignored columns only: nothing sent
UPDATE customers SET name = name;
UPDATE customers SET password_hash = 'new', updated_at = now() + interval '1 s';
-- a sent column changed: sent, for that row only
UPDATE customers SET email = 'ann@example.org' WHERE id = 1;
UPDATE customers SET email = email || '' WHERE id = 2;
-- NULL to NULL is no change; a value to NULL is
UPDATE customers SET name = NULL WHERE id = 2;
UPDATE customers SET name = NULL WHERE id = 2;
DELETE FROM customers WHERE id = 2;
SELECT key, headers, payload -> 'before' AS before, payload -> 'after' AS after
FROM sent ORDER BY id;
DELETE FROM cdc.outbox;

-- columns=: only these (in table order), the key still the primary key;
-- tombstone_on_delete: after a delete event, a record with the same key
-- and a NULL payload (its headers those of the delete)
CREATE OR REPLACE TRIGGER customers_capture AFTER INSERT OR UPDATE OR DELETE ON customers
    FOR EACH ROW EXECUTE FUNCTION
    cdc.outbox_capture('customers', '', 'columns=email,name', 'tombstone_on_delete');
INSERT INTO customers VALUES (3, 'cy', 'cy@example.com', 'secret', now());
-- without skip_unchanged, a no-op update is sent
UPDATE customers SET name = name WHERE id = 3;
DELETE FROM customers WHERE id = 3;
SELECT o.id, o.topic, convert_from(o.key, 'UTF8') AS key, o.headers, o.payload_type,
       convert_from(o.payload, 'UTF8')::jsonb AS payload, o.payload IS NULL AS tombstone
FROM cdc.outbox o ORDER BY o.id;
DELETE FROM cdc.outbox;

-- ignore= of every column: empty objects, the key still there
CREATE OR REPLACE TRIGGER customers_capture AFTER INSERT ON customers
    FOR EACH ROW EXECUTE FUNCTION
    cdc.outbox_capture('customers', 'id', 'ignore=id,name,email,password_hash,updated_at');
INSERT INTO customers VALUES (4, 'di', NULL, NULL, NULL);
SELECT key, payload FROM sent;
DELETE FROM cdc.outbox;
DROP TRIGGER customers_capture ON customers;

--
-- The trigger follows what happens to its table in this session, after
-- its first row: columns added and dropped, the table and its schema
-- renamed, the trigger replaced.
--
CREATE SCHEMA shop;
CREATE TABLE shop.items (id int PRIMARY KEY, name text, price numeric);
CREATE TRIGGER items_capture AFTER INSERT OR UPDATE ON shop.items
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('items', '', 'type');
INSERT INTO shop.items VALUES (1, 'cup', 2.5);
ALTER TABLE shop.items ADD COLUMN stock int DEFAULT 3;
INSERT INTO shop.items VALUES (2, 'mug', 4);
ALTER TABLE shop.items DROP COLUMN price;
INSERT INTO shop.items VALUES (3, 'jug');
ALTER TABLE shop.items RENAME TO goods;
INSERT INTO shop.goods VALUES (4, 'pot');
ALTER SCHEMA shop RENAME TO store;
INSERT INTO store.goods VALUES (5, 'pan');
CREATE OR REPLACE TRIGGER items_capture AFTER INSERT OR UPDATE ON store.goods
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('goods', 'name', 'columns=stock');
INSERT INTO store.goods VALUES (6, 'lid');
-- the primary key changes: the key argument keys the events
ALTER TABLE store.goods DROP CONSTRAINT items_pkey;
UPDATE store.goods SET stock = 9 WHERE id = 6;
SELECT topic, key, headers, payload ->> 'schema' AS schema, payload ->> 'table' AS "table",
       payload -> 'after' AS after
FROM sent ORDER BY id;
DELETE FROM cdc.outbox;

-- a trigger on a partitioned table captures the partition's rows, named
-- as the partition
CREATE TABLE measurements (id int, at date, v int, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
CREATE TABLE measurements_2024 PARTITION OF measurements
    FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TRIGGER measurements_capture AFTER INSERT ON measurements
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('measurements');
INSERT INTO measurements VALUES (1, '2024-05-01', 10);
SELECT key, payload ->> 'table' AS "table" FROM sent;
DELETE FROM cdc.outbox;

--
-- Misuse: refused at the first row, naming the trigger and its table;
-- the statement, and what it wrote, rolled back.
--
CREATE TABLE misuse (id int PRIMARY KEY, v text);
CREATE VIEW misuse_view AS SELECT * FROM misuse;

-- not called as a trigger: 39P01
SELECT cdc.outbox_capture();
\echo :LAST_ERROR_SQLSTATE

-- FOR EACH STATEMENT: 39P01
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH STATEMENT EXECUTE FUNCTION cdc.outbox_capture('misuse');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- BEFORE: 39P01
CREATE TRIGGER bad BEFORE INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- INSTEAD OF: 39P01
CREATE TRIGGER bad INSTEAD OF INSERT ON misuse_view
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse');
INSERT INTO misuse_view VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse_view;

-- TRUNCATE: 39P01
CREATE TRIGGER bad AFTER TRUNCATE ON misuse
    FOR EACH STATEMENT EXECUTE FUNCTION cdc.outbox_capture('misuse');
TRUNCATE misuse;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- no topic: 22023
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture();
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- a key column the table does not have: 42703
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', 'id,nope');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- an option in the key's place is taken for a column: 42703
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', 'type');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- a key column twice: 42701
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', 'id,ID');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- a column of columns= or ignore= the table does not have: 42703
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', '', 'columns=v,w');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;
-- (a quoted name keeps its case: there is no column "V")
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', '', 'ignore="V"');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- an empty or malformed column list: 22023
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', '', 'columns=');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', 'id,,v');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- a table without a primary key and no key argument: 42P16
CREATE TABLE no_pk (id int, v text);
CREATE TRIGGER bad AFTER INSERT ON no_pk
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse');
INSERT INTO no_pk VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
CREATE OR REPLACE TRIGGER bad AFTER INSERT ON no_pk
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', '');
INSERT INTO no_pk VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TABLE no_pk;

-- an unknown option: 22023
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', '', 'skip_unchanged', 'tombstones');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- columns= and ignore= together: 22023
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', '', 'columns=v', 'ignore=id');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- an option twice: 22023
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', '', 'type', 'type');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', '', 'ignore=v', 'ignore=id');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- a topic Kafka refuses: outbox_send()'s own check (22023), the trigger
-- named in the context
CREATE TRIGGER bad AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('no spaces');
INSERT INTO misuse VALUES (1, 'a');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER bad ON misuse;

-- a misuse found late (a later DDL) is refused at the next row, like the first
CREATE TRIGGER late AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('misuse', 'v');
INSERT INTO misuse VALUES (1, 'a');
ALTER TABLE misuse RENAME COLUMN v TO w;
INSERT INTO misuse VALUES (2, 'b');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER late ON misuse;

-- nothing of the refused statements was written; the one event is there
SELECT (SELECT count(*) FROM misuse) AS rows, (SELECT count(*) FROM cdc.outbox) AS events;
DELETE FROM cdc.outbox;

--
-- Privileges. outbox_capture() is not granted to PUBLIC: creating a
-- trigger with it needs EXECUTE. The trigger fires with the rights of
-- whoever writes the table, who needs no privilege on the outbox nor on
-- outbox_capture() (triggers are not checked for EXECUTE when they fire).
--
CREATE ROLE regress_capture_owner;
CREATE ROLE regress_capture_writer;
GRANT USAGE ON SCHEMA cdc TO regress_capture_owner;
CREATE TABLE priv (id int PRIMARY KEY, v text);
ALTER TABLE priv OWNER TO regress_capture_owner;
GRANT INSERT ON priv TO regress_capture_writer;

SET ROLE regress_capture_owner;
CREATE TRIGGER priv_capture AFTER INSERT ON priv
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('priv');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

GRANT EXECUTE ON FUNCTION cdc.outbox_capture() TO regress_capture_owner;
SET ROLE regress_capture_owner;
CREATE TRIGGER priv_capture AFTER INSERT ON priv
    FOR EACH ROW EXECUTE FUNCTION cdc.outbox_capture('priv');
RESET ROLE;

-- the writer may not use the extension's schema, its outbox, outbox_capture()
SELECT has_schema_privilege('regress_capture_writer', 'cdc', 'USAGE') AS schema_usage,
       has_table_privilege('regress_capture_writer', 'cdc.outbox', 'INSERT') AS outbox_insert,
       has_function_privilege('regress_capture_writer', 'cdc.outbox_capture()', 'EXECUTE') AS capture_execute;
SET ROLE regress_capture_writer;
INSERT INTO priv VALUES (1, 'by the writer');
RESET ROLE;
SELECT topic, key, payload -> 'after' AS after FROM sent;

--
-- The backend's cache of resolved triggers: an entry per trigger used,
-- gone at the end of the transaction that dropped the trigger or its
-- table.
--
SELECT count(*) > 0 AS cached FROM pg_backend_memory_contexts
WHERE name = 'outbox capture trigger';

--
-- Clean up: the next test starts without the extension.
--
DROP TABLE priv;
DROP TABLE order_lines, kinds, accounts, audit_log, deferred_pk, customers, measurements;
DROP VIEW misuse_view;
DROP TABLE misuse;
DROP SCHEMA store CASCADE;
SELECT count(*) AS cached FROM pg_backend_memory_contexts
WHERE name = 'outbox capture trigger';
DROP TYPE pair;
DROP DOMAIN positive;
DROP TYPE mood;
DROP VIEW sent;
DROP EXTENSION outbox;
DROP SCHEMA cdc;
DROP ROLE regress_capture_owner, regress_capture_writer;
