--
-- schema: the Schema Registry's check in the sender's transaction. Each
-- format accepted and refused (the message, its detail and SQLSTATE, and
-- no row written), key schemas, a schema a worker has not fetched yet, a
-- DBA's plain UPDATE and DELETE on outbox_topic_schema seen by the next
-- send (of this session and of another one), a sender with no right on
-- the table still checked, and the setter refusing schema texts the check
-- could not use.
--
\set SHOW_CONTEXT never
CREATE SCHEMA sr;
CREATE EXTENSION outbox SCHEMA sr;
SET client_min_messages = error;

-- how many events the outbox holds: a refused send writes none
CREATE FUNCTION sent() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM sr.outbox';

--
-- The setter refuses a schema text the check could not use (22023).
--
SELECT sr.outbox_topic_schema('t', 'json_schema', schema => '{"type": "object", "patternProperties": {"^x": {}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT sr.outbox_topic_schema('t', 'json_schema', schema => '{"type": "object", "items": [{"type": "string"}]}');
SELECT sr.outbox_topic_schema('t', 'json_schema', schema => '{"type": "whole"}');
SELECT sr.outbox_topic_schema('t', 'json_schema', schema => '{"minimum": "1"}');
SELECT sr.outbox_topic_schema('t', 'json_schema', schema => '{"exclusiveMinimum": true}');
SELECT sr.outbox_topic_schema('t', 'json_schema', schema => '{"$ref": "#/definitions/nowhere"}');
SELECT sr.outbox_topic_schema('t', 'json_schema', schema => '{"$ref": "http://example.com/s.json"}');
SELECT sr.outbox_topic_schema('t', 'json_schema', schema => '{"type": "object"');
SELECT sr.outbox_topic_schema('t', 'json_schema', schema => '[1]');
SELECT sr.outbox_topic_schema('t', 'json_schema', schema => '{"pattern": "(unclosed"}');
\echo :LAST_ERROR_SQLSTATE
SELECT sr.outbox_topic_schema('t', 'avro', schema => '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "strin"}]}');
\echo :LAST_ERROR_SQLSTATE
SELECT sr.outbox_topic_schema('t', 'avro', schema => 'not json');
SELECT count(*) AS schemas FROM sr.outbox_topic_schema;

--
-- JSON Schema
--
SELECT sr.outbox_topic_schema('orders', 'json_schema', schema => $$
{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "Order",
  "type": "object",
  "required": ["id", "amount"],
  "properties": {
    "id": {"type": "integer", "minimum": 1},
    "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
    "currency": {"enum": ["EUR", "USD"]},
    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$", "minLength": 5, "maxLength": 10},
    "lines": {"type": "array", "items": {"$ref": "#/definitions/line"}, "minItems": 1, "maxItems": 3},
    "note": {"type": ["string", "null"]},
    "channel": {"const": "web"},
    "tags": {"type": "object", "additionalProperties": {"type": "string"}},
    "paid": {"anyOf": [{"type": "boolean"}, {"type": "string", "format": "date-time"}]},
    "kind": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 10}]},
    "code": {"not": {"type": "null"}}
  },
  "additionalProperties": false,
  "definitions": {
    "line": {
      "type": "object",
      "required": ["qty"],
      "properties": {"qty": {"type": "integer", "minimum": 1}, "of": {"$ref": "#/definitions/line"}}
    }
  }
}$$);
SELECT topic, part, format, lookup, subject, schema_id, message_indexes FROM sr.outbox_topic_schema;

-- fits: jsonb and text payloads
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 9.5}'::jsonb) > 0 AS sent;
SELECT sr.outbox_send('orders', '{"id": 2.0, "amount": 1000, "currency": "EUR", "sku": "ABC-12", "note": null, "channel": "web", "tags": {"a": "b"}, "paid": "2026-01-01", "kind": 3, "code": 0, "lines": [{"qty": 1, "of": {"qty": 2}}]}'::jsonb) > 0 AS sent;
SELECT sr.outbox_send('orders', '{"id": 3, "amount": 0.01}'::text) > 0 AS sent;
-- does not fit: each reason, with the value's path
SELECT sr.outbox_send('orders', '{"amount": 9.5}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT sr.outbox_send('orders', '{"id": "1", "amount": 9.5}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1.5, "amount": 9.5}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 0, "amount": 9.5}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 0}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1000.5}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "currency": "GBP"}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "sku": "abc-12"}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "sku": "AB-1"}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "sku": "ABC-1234567"}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "lines": []}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "lines": [{"qty": 1}, {"qty": 1}, {"qty": 1}, {"qty": 1}]}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "lines": [{"qty": 1}, {"qty": 0}]}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "lines": [{"qty": 1, "of": {"of": {"qty": 1}}}]}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "note": 5}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "channel": "app"}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "tags": {"a": 1}}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "paid": 1}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "kind": 12}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "code": null}'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "customer": "x"}'::jsonb);
SELECT sr.outbox_send('orders', '[1]'::jsonb);
SELECT sr.outbox_send('orders', '{"id": 1,'::text);
SELECT sr.outbox_send('orders', '{"id": 1, "amount": 1, "note": "\u0000"}'::text);
SELECT sr.outbox_send('orders', '\x7b7d'::bytea);
-- $ref to the root: a tree of any depth
SELECT sr.outbox_topic_schema('tree', 'json_schema', schema => '{"type": "object", "properties": {"child": {"$ref": "#"}}, "additionalProperties": false}');
SELECT sr.outbox_send('tree', '{"child": {"child": {}}}'::jsonb) > 0 AS sent;
SELECT sr.outbox_send('tree', '{"child": {"child": {"leaf": 1}}}'::jsonb);
SELECT sent();

--
-- Avro
--
SELECT sr.outbox_topic_schema('payments', 'avro', schema => $$
{"type": "record", "name": "Payment", "namespace": "shop",
 "fields": [
   {"name": "id", "type": "long"},
   {"name": "amount", "type": "double"},
   {"name": "cents", "type": "int"},
   {"name": "rate", "type": "float"},
   {"name": "ok", "type": "boolean"},
   {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
   {"name": "tags", "type": {"type": "array", "items": "string"}},
   {"name": "attrs", "type": {"type": "map", "values": "int"}},
   {"name": "note", "type": ["null", "string"]},
   {"name": "ref", "type": {"type": "fixed", "name": "Ref", "size": 2}},
   {"name": "raw", "type": "bytes"},
   {"name": "day", "type": {"type": "int", "logicalType": "date"}},
   {"name": "card", "type": ["null", {"type": "record", "name": "Card",
       "fields": [{"name": "last4", "type": "string"}]}]}
 ]}$$);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2.5, "cents": 250, "rate": 0.5, "ok": true, "status": "NEW", "tags": ["a", "b"], "attrs": {"x": 1}, "note": "hi", "ref": "ab", "raw": "\u00ffA", "day": 20000, "card": {"last4": "4242"}}'::jsonb) > 0 AS sent;
-- a nullable field left out is null; Avro's JSON form of a union's branch
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": -1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "note": {"string": "hi"}, "ref": "ab", "raw": "", "day": 0, "card": {"shop.Card": {"last4": "1"}}}'::jsonb) > 0 AS sent;
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0}'::text) > 0 AS sent;
-- does not fit
SELECT sr.outbox_send('payments', '{"id": "1", "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT sr.outbox_send('payments', '{"id": 1.5, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 2147483648, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1e39, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": 0, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "LOST", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": ["a", 2], "attrs": {}, "ref": "ab", "raw": "", "day": 0}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {"a b": "x"}, "ref": "ab", "raw": "", "day": 0}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "note": 5, "ref": "ab", "raw": "", "day": 0}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "abc", "raw": "", "day": 0}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "\u0100", "day": 0}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": "2026-01-01"}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0, "card": {"last4": 4242}}'::jsonb);
SELECT sr.outbox_send('payments', '{"amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0}'::jsonb);
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0, "extra": 1}'::jsonb);
SELECT sr.outbox_send('payments', '"x"'::jsonb);
-- a recursive record (a link in libavro), its union branch named or not
SELECT sr.outbox_topic_schema('chain', 'avro', schema => '{"type": "record", "name": "Node", "fields": [{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"]}]}');
SELECT sr.outbox_send('chain', '{"v": 1, "next": {"Node": {"v": 2, "next": {"v": 3}}}}'::jsonb) > 0 AS sent;
SELECT sr.outbox_send('chain', '{"v": 1, "next": {"Node": {"v": 2, "next": {"v": "3"}}}}'::jsonb);
SELECT sent();

--
-- Protobuf: the payload is the encoded message, as bytea
--
SELECT sr.outbox_topic_schema('events', 'protobuf', schema => 'syntax = "proto3"; message E { int64 id = 1; string name = 2; }', message_indexes => '{1,0}');
-- id = 150, name = "ab"; a fixed64 and a fixed32 field; the empty message
SELECT sr.outbox_send('events', '\x0896011202616219090000000000000025ffffffff'::bytea) > 0 AS sent;
SELECT sr.outbox_send('events', ''::bytea) > 0 AS sent;
SELECT sr.outbox_send('events', '\x0a0561'::bytea);
\echo :LAST_ERROR_SQLSTATE
SELECT sr.outbox_send('events', '\x0896'::bytea);
SELECT sr.outbox_send('events', '\x0b'::bytea);
SELECT sr.outbox_send('events', '\x0f00'::bytea);
SELECT sr.outbox_send('events', '\x0001'::bytea);
SELECT sr.outbox_send('events', '\x0900'::bytea);
SELECT sr.outbox_send('events', '{"id": 150}'::jsonb);
SELECT sent();

--
-- Keys: a key schema checks the key (JSON text for JSON Schema and Avro)
--
SELECT sr.outbox_topic_schema('orders', 'json_schema', schema => '{"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}', part => 'key');
SELECT sr.outbox_topic_schema('payments', 'avro', schema => '"string"', part => 'key');
SELECT sr.outbox_send('orders', '{"id": 4, "amount": 1}'::jsonb, '{"id": 4}') > 0 AS sent;
SELECT sr.outbox_send('orders', '{"id": 4, "amount": 1}'::jsonb, '{"id": "4"}');
\echo :LAST_ERROR_SQLSTATE
SELECT sr.outbox_send('orders', '{"id": 4, "amount": 1}'::jsonb, 'order-4');
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0}'::jsonb, '"p-1"') > 0 AS sent;
SELECT sr.outbox_send('payments', '{"id": 1, "amount": 2, "cents": 1, "rate": 1, "ok": false, "status": "PAID", "tags": [], "attrs": {}, "ref": "ab", "raw": "", "day": 0}'::jsonb, '1');
-- a tombstone's value is not checked, its key is
SELECT sr.outbox_send('orders', NULL::jsonb, '{"id": 4}') > 0 AS sent;
SELECT sr.outbox_send('orders', NULL::jsonb, '{}');
-- the bytea variant's key; a topic with a key schema only
SELECT sr.outbox_topic_schema('keyed', 'protobuf', schema_id => 7, part => 'key');
SELECT sr.outbox_send('keyed', '\x01'::bytea, '\x0801'::bytea) > 0 AS sent;
SELECT sr.outbox_send('keyed', '\x01'::bytea, '\x08'::bytea);
SELECT sent();

--
-- A schema no worker has fetched yet (lookup by version or id): 55000
--
SELECT sr.outbox_topic_schema('pending', 'avro', version => 'latest');
SELECT sr.outbox_send('pending', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
UPDATE sr.outbox_topic_schema SET last_error = 'registry at http://127.0.0.1:1 refused the connection' WHERE topic = 'pending';
SELECT sr.outbox_send('pending', '{}'::jsonb);
-- what a worker writes once it has the schema
UPDATE sr.outbox_topic_schema SET schema_text = '{"type": "record", "name": "P", "fields": [{"name": "n", "type": "int"}]}',
    schema_id = 12, last_error = NULL, resolved_at = now() WHERE topic = 'pending';
SELECT sr.outbox_send('pending', '{"n": 1}'::jsonb) > 0 AS sent;
SELECT sr.outbox_send('pending', '{"n": "1"}'::jsonb);
-- a schema fetched from the registry that pg_outbox cannot check: 0A000
UPDATE sr.outbox_topic_schema SET format = 'json_schema', schema_text = '{"type": "object", "dependentRequired": {"a": ["b"]}}' WHERE topic = 'pending';
SELECT sr.outbox_send('pending', '{"n": 1}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT sent();

--
-- A DBA's plain UPDATE and DELETE on the table are seen by the next send
--
BEGIN;
UPDATE sr.outbox_topic_schema SET schema_text = '{"type": "object", "required": ["id"]}' WHERE topic = 'orders' AND part = 'value';
SELECT sr.outbox_send('orders', '{"id": "x", "customer": "y"}'::jsonb) > 0 AS sent;
ROLLBACK;
-- rolled back: the schema of before
SELECT sr.outbox_send('orders', '{"id": "x", "customer": "y"}'::jsonb);
DELETE FROM sr.outbox_topic_schema WHERE topic = 'orders' AND part = 'value';
SELECT sr.outbox_send('orders', '{"anything": true}'::jsonb, '{"id": 5}') > 0 AS sent;
SELECT sr.outbox_send('orders', '{"anything": true}'::jsonb, '{"id": "5"}');
TRUNCATE sr.outbox_topic_schema;
SELECT sr.outbox_send('orders', '{"anything": true}'::jsonb, '{"id": "5"}') > 0 AS sent;

-- committed by another session while this one has the table cached
CREATE EXTENSION dblink;
SELECT sr.outbox_topic_schema('orders', 'json_schema', schema => '{"type": "object"}');
SELECT sr.outbox_send('orders', '[]'::jsonb);
SELECT dblink_exec(format('dbname=%s port=%s host=%s', current_database(), current_setting('port'),
                          split_part(current_setting('unix_socket_directories'), ',', 1)),
                   $$UPDATE sr.outbox_topic_schema SET schema_text = '{"type": "array"}' WHERE topic = 'orders'$$);
SELECT sr.outbox_send('orders', '[]'::jsonb) > 0 AS sent;
SELECT sr.outbox_send('orders', '{}'::jsonb);

--
-- A sender with no right on outbox_topic_schema is checked all the same
--
CREATE ROLE regress_schema_app;
GRANT USAGE ON SCHEMA sr TO regress_schema_app;
GRANT EXECUTE ON FUNCTION sr.outbox_send(text, jsonb, text, jsonb) TO regress_schema_app;
SET ROLE regress_schema_app;
SELECT * FROM sr.outbox_topic_schema;
\echo :LAST_ERROR_SQLSTATE
SELECT sr.outbox_send('orders', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT sr.outbox_send('orders', '[1]'::jsonb) > 0 AS sent;
RESET ROLE;

--
-- The capture trigger's events are checked too (value and key)
--
SELECT sr.outbox_topic_schema('lines', 'json_schema', schema => '{"type": "object", "required": ["after"], "properties": {"after": {"type": ["object", "null"], "properties": {"qty": {"type": "integer", "minimum": 1}}}}}');
SELECT sr.outbox_topic_schema('lines', 'json_schema', schema => '{"type": "object", "required": ["line"], "properties": {"line": {"type": "integer", "maximum": 99}}}', part => 'key');
CREATE TABLE lines (line int PRIMARY KEY, qty int);
CREATE TRIGGER lines_capture AFTER INSERT OR UPDATE ON lines
    FOR EACH ROW EXECUTE FUNCTION sr.outbox_capture('lines');
INSERT INTO lines VALUES (1, 2);
UPDATE lines SET qty = 0;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO lines VALUES (100, 1);
SELECT sent();

DROP TABLE lines;
DROP FUNCTION sent();
DROP EXTENSION dblink;
REVOKE ALL ON SCHEMA sr FROM regress_schema_app;
DROP OWNED BY regress_schema_app;
DROP ROLE regress_schema_app;
DROP EXTENSION outbox;
DROP SCHEMA sr;
