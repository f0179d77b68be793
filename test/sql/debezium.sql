--
-- debezium: outbox_debezium(), Debezium's outbox router as a trigger. Each
-- misuse of its arguments is refused by CREATE TRIGGER (the library is
-- preloaded), with the message and SQLSTATE (printed by \echo after the
-- error), and at the first row when the table changed since; a refused
-- row is not inserted. Then what one row stores (topic, key, value, headers,
-- partition, time) and outbox_send()'s partition argument.
--
-- The temp instance runs with outbox.enabled = off: the events stay in
-- the outbox, where this test reads them.
--
SET TimeZone = 'UTC';
SET client_min_messages = warning;
CREATE SCHEMA dbz;
CREATE EXTENSION outbox SCHEMA dbz;

CREATE TABLE outboxevent (
    id            uuid         NOT NULL,
    aggregatetype varchar(255) NOT NULL,
    aggregateid   varchar(255) NOT NULL,
    type          varchar(255) NOT NULL,
    payload       jsonb,
    part          integer,
    small         smallint,
    amount        numeric,
    at            timestamptz
);

-- each set of arguments, tried on one row
CREATE FUNCTION try(VARIADIC args text[]) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DROP TRIGGER IF EXISTS t ON outboxevent;
    EXECUTE format('CREATE TRIGGER t AFTER INSERT ON outboxevent FOR EACH ROW EXECUTE FUNCTION dbz.outbox_debezium(%s)',
                   (SELECT string_agg(quote_literal(a), ', ') FROM unnest(args) a));
    INSERT INTO outboxevent VALUES ('4d47e190-0402-4048-bc2c-89dd54343cdc', 'Order', 'o-1',
                                    'OrderCreated', '{"a": 1}', -1, 1, 1.5, now());
END
$$;
\set VERBOSITY terse
SELECT try('route.by.fields=aggregatetype');
\echo :LAST_ERROR_SQLSTATE
SELECT try('route.by.field');
\echo :LAST_ERROR_SQLSTATE
SELECT try('route.by.field=nope');
\echo :LAST_ERROR_SQLSTATE
SELECT try('route.by.field=part');
\echo :LAST_ERROR_SQLSTATE
SELECT try('table.field.event.payload=amount');
\echo :LAST_ERROR_SQLSTATE
SELECT try('table.expand.json.payload=yes');
\echo :LAST_ERROR_SQLSTATE
SELECT try('table.op.invalid.behavior=ignore');
\echo :LAST_ERROR_SQLSTATE
SELECT try('table.fields.additional.placement=type');
\echo :LAST_ERROR_SQLSTATE
SELECT try('table.fields.additional.placement=type:body');
\echo :LAST_ERROR_SQLSTATE
SELECT try('table.fields.additional.placement=nope:header');
\echo :LAST_ERROR_SQLSTATE
SELECT try('table.fields.additional.placement=small:partition');
\echo :LAST_ERROR_SQLSTATE
SELECT try('table.fields.additional.placement=part:partition');
\echo :LAST_ERROR_SQLSTATE
SELECT try('table.fields.additional.placement=amount:header');
\echo :LAST_ERROR_SQLSTATE
SELECT try('table.field.event.timestamp=small');
\echo :LAST_ERROR_SQLSTATE
SELECT try('route.topic.regex=(?<routedByValue>.*');
\echo :LAST_ERROR_SQLSTATE
SELECT try('route.topic.replacement=x.${other}');
\echo :LAST_ERROR_SQLSTATE
SELECT try('route.topic.replacement=x.$2');
\echo :LAST_ERROR_SQLSTATE
SELECT try('value.converter.schemas.enable=true', 'table.fields.additional.placement=type:envelope');
\echo :LAST_ERROR_SQLSTATE
SELECT try('value.converter.delegate.converter.type.schemas.enable=true');
\echo :LAST_ERROR_SQLSTATE
SELECT try('key.converter.schemas.enable=on');
\echo :LAST_ERROR_SQLSTATE
SELECT try('key.converter=io.confluent.connect.avro.AvroConverter');
\echo :LAST_ERROR_SQLSTATE
SELECT try('value.converter=string', 'table.expand.json.payload=true');
\echo :LAST_ERROR_SQLSTATE
SELECT try('value.converter=string', 'table.fields.additional.placement=type:envelope');
\echo :LAST_ERROR_SQLSTATE
SELECT try('tracing.span.context.field=tracingspancontext');
\echo :LAST_ERROR_SQLSTATE
SELECT try('route.topic.replacement=bad topic');
\echo :LAST_ERROR_SQLSTATE
-- nothing was stored by the refused rows
SELECT count(*) AS rows, (SELECT count(*) FROM dbz.outbox) AS events FROM outboxevent;

-- a BEFORE trigger, a statement trigger, one that never fires on INSERT:
-- refused; called as a function: refused
CREATE TRIGGER b BEFORE INSERT ON outboxevent FOR EACH ROW EXECUTE FUNCTION dbz.outbox_debezium();
\echo :LAST_ERROR_SQLSTATE
CREATE TRIGGER b AFTER INSERT ON outboxevent EXECUTE FUNCTION dbz.outbox_debezium();
\echo :LAST_ERROR_SQLSTATE
CREATE TRIGGER b AFTER UPDATE ON outboxevent FOR EACH ROW EXECUTE FUNCTION dbz.outbox_debezium();
\echo :LAST_ERROR_SQLSTATE
SELECT dbz.outbox_debezium();
\echo :LAST_ERROR_SQLSTATE
-- a column dropped after CREATE TRIGGER: refused at the first row
CREATE TABLE shrinking (id uuid, aggregatetype text, aggregateid text, payload jsonb, tag text);
CREATE TRIGGER s AFTER INSERT ON shrinking FOR EACH ROW
    EXECUTE FUNCTION dbz.outbox_debezium('table.fields.additional.placement=tag:header');
ALTER TABLE shrinking DROP COLUMN tag;
INSERT INTO shrinking VALUES (gen_random_uuid(), 'Order', 'o-1', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS rows FROM shrinking;
DROP TABLE shrinking;
-- with schemas, a column whose schema would carry its default: refused
CREATE TABLE defaulted (id uuid, aggregatetype text, aggregateid text, payload jsonb DEFAULT '{}');
CREATE TRIGGER d AFTER INSERT ON defaulted FOR EACH ROW
    EXECUTE FUNCTION dbz.outbox_debezium('value.converter.schemas.enable=true');
\echo :LAST_ERROR_SQLSTATE
DROP TABLE defaulted;
\set VERBOSITY default

-- one row, stored: the record as the worker will send it
SELECT try('table.fields.additional.placement=type:header:eventType,small:envelope,at:partition');
\echo :LAST_ERROR_SQLSTATE
SELECT try('table.fields.additional.placement=type:header:eventType,small:envelope');
-- with schemas: the key's and the expanded payload's schemas; an envelope's
SELECT try('key.converter.schemas.enable=true', 'value.converter.schemas.enable=true',
           'table.expand.json.payload=true');
SELECT try('value.converter.schemas.enable=true', 'topic.prefix=dbserver1',
           'table.fields.additional.placement=small:envelope:s,part:envelope');
SELECT topic, convert_from(key, 'UTF8') AS key, convert_from(payload, 'UTF8') AS value,
       headers, payload_type, partition
FROM dbz.outbox;

-- outbox_send()'s partition
SELECT dbz.outbox_send('t', 'x', NULL, NULL, 2) > 0 AS sent;
SELECT dbz.outbox_send('t', 'x', NULL, NULL, -1);
SELECT partition FROM dbz.outbox WHERE topic = 't';

DROP FUNCTION try(text[]);
DROP TABLE outboxevent;
DROP EXTENSION outbox;
DROP SCHEMA dbz;
