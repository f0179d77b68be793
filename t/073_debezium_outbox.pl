# Debezium's outbox router, by outbox_debezium(): rows of a table of
# Debezium's outbox shape become the records the EventRouter makes of them,
# read back with kcat byte for byte (topic, partition, key, value, headers,
# timestamp): with the router's defaults, and with each option set another
# way. In the 'envelope' message format, which these records ignore. Then
# the partition chosen by the sender (outbox_send()'s fifth argument):
# its order, a partition the topic lacks (a dead letter, the shard goes on),
# a dead letter put back keeping its partition, and exactly-once delivery.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = start_broker(topics => [
	'outbox.event.Order:3', 'outbox.event.Customer:1', 'events.Order:3', 'Other:1',
	'bin:1', 'expand:1', 'sent:3', 'eos:3', 'dead:2', 'str:1',
	'schemas:1',
	# exactly-once's progress records (a real Kafka creates no topic by itself)
	'outbox_progress:3' ]);
my $node = new_outbox_node('debezium', $broker, message_format => 'envelope',
	conf => "outbox.max_attempts = 2\n");

# The record of the first message of a topic whose value is $value.
sub record_of
{
	my ($topic, $match) = @_;
	my @found = grep { $match->($_) } @{ consume($broker, $topic) };
	return $found[0];
}

# The transaction's start in milliseconds since 1970: the timestamp.
sub ms_sql { return q{floor(extract(epoch FROM now()) * 1000)::bigint}; }

# ---- the router's defaults --------------------------------------------------
$node->safe_psql('postgres', q{
CREATE TABLE outboxevent (
    id            uuid         NOT NULL PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid   varchar(255) NOT NULL,
    type          varchar(255) NOT NULL,
    payload       jsonb
);
CREATE TRIGGER outboxevent_kafka AFTER INSERT OR UPDATE OR DELETE ON outboxevent
    FOR EACH ROW EXECUTE FUNCTION outbox_debezium();
});
my $ms = $node->safe_psql('postgres', q{
BEGIN;
INSERT INTO outboxevent VALUES
  ('4d47e190-0402-4048-bc2c-89dd54343cdc', 'Order', 'o-1', 'OrderCreated',
   '{"id": 1, "lineItems": [{"item": "Debezium in Action", "totalPrice": 39.98}], "note": "a \"quote\"\nand a line"}'),
  ('5d47e190-0402-4048-bc2c-89dd54343cdc', 'Customer', 'c-1', 'CustomerCreated', '{"name": "Ann"}');
SELECT } . ms_sql() . q{;
COMMIT;
});
# deleted right after (the router ignores deletes); an update: ignored, with a warning
my ($ret, $out, $err) = $node->psql('postgres', q{
UPDATE outboxevent SET type = 'x' WHERE aggregateid = 'c-1';
DELETE FROM outboxevent;
});
like($err, qr/ignores an update: outbox rows are inserted/, 'an update of an outbox row is ignored, with a warning');
ok(wait_for_empty($node, 60), 'the default records are delivered');

my $order = consume($broker, 'outbox.event.Order');
is(scalar @$order, 1, 'topic outbox.event.${routedByValue} of aggregatetype Order: one record');
my $r = $order->[0];
is($r->{key}, '"o-1"', 'the key: aggregateid as the JsonConverter writes a string');
is($r->{value},
	'"{\"id\": 1, \"note\": \"a \\\\\"quote\\\\\"\\\\nand a line\", \"lineItems\": [{\"item\": \"Debezium in Action\", \"totalPrice\": 39.98}]}"',
	'the value: the jsonb payload\'s text as a JSON string');
is($r->{headers}{id}, '4d47e190-0402-4048-bc2c-89dd54343cdc', 'the header id: the event id');
ok(!exists $r->{headers}{'content-type'}, 'no content-type header');
is(join(',', sort keys %{ $r->{headers} }), 'id,outbox-id,outbox-instance',
	'headers: id, and pg_outbox\'s own two');
is($r->{timestamp}, $ms, 'the timestamp: the transaction\'s start, in ms');
is($r->{partition}, kafka_partition('"o-1"', 3), 'the partition: the key\'s, as the Java client maps it');
my $customer = consume($broker, 'outbox.event.Customer');
is(scalar @$customer, 1, 'the update and the delete sent nothing');
is($customer->[0]{value}, '"{\"name\": \"Ann\"}"', 'the second aggregate type has its own topic');

# ---- every option set another way --------------------------------------------
$node->safe_psql('postgres', q{
CREATE TABLE events (
    event_id  text      NOT NULL,
    kind      text      NOT NULL,
    agg       text,
    type      text,
    body      text,
    part      integer,
    ver       integer,
    occurred  timestamp,
    extra     bigint
);
CREATE TRIGGER events_kafka AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
      'route.by.field=kind',
      'route.topic.regex=(?<routedByValue>.*)Event',
      'route.topic.replacement=events.${routedByValue}',
      'table.field.event.id=event_id',
      'table.field.event.key=agg',
      'table.field.event.payload=body',
      'table.field.event.timestamp=occurred',
      'table.expand.json.payload=true',
      'table.fields.additional.placement=type:header:eventType, type:envelope:eventType,part:partition,ver:envelope,extra:header',
      'key.converter=org.apache.kafka.connect.storage.StringConverter',
      'outbox.delete.after.capture=true');
INSERT INTO events VALUES
  ('e-1', 'OrderEvent', 'agg-1', 'OrderCreated',
   '{"id": 1, "lineItems": [{"id": 1, "price": 39.98, "note": null}], "empty": [], "nothing": null, "big": 3000000000, "flag": true, "f": 1.0, "small": 0.00001, "large": 12345678.9}',
   2, 3, '2024-05-06 07:08:09.123456', 42),
  ('e-2', 'Other', 'agg-2', NULL, '[1, 2]', NULL, NULL, NULL, NULL);
});
ok(wait_for_empty($node, 60), 'the routed records are delivered');
is($node->safe_psql('postgres', 'SELECT count(*) FROM events'), '0',
	'outbox.delete.after.capture: the rows are gone');
my $routed = consume($broker, 'events.Order');
is(scalar @$routed, 1, 'route.topic.regex and route.topic.replacement: events.Order');
$r = $routed->[0];
is($r->{partition}, 2, 'placement partition: the part column');
is($r->{key}, 'agg-1', 'table.field.event.key with the StringConverter: the text as it is');
is($r->{value},
	'{"payload":{"id":1,"lineItems":[{"id":1,"price":39.98}],"big":3000000000,"flag":true,"f":1.0,"small":1.0E-5,"large":1.23456789E7},"eventType":"OrderCreated","ver":3}',
	'table.expand.json.payload in an envelope with the columns placed there');
is($r->{headers}{id}, 'e-1', 'table.field.event.id: the header id');
is($r->{headers}{eventType}, 'OrderCreated', 'placement header with an alias');
is($r->{headers}{extra}, '42', 'placement header without an alias: the column\'s name');
is($r->{timestamp}, 1714979289123, 'table.field.event.timestamp: the column, in ms');
my $other = consume($broker, 'Other');
is(scalar @$other, 1, 'a value route.topic.regex does not match keeps it as the topic');
is($other->[0]{value}, '{"payload":"[1, 2]","eventType":null,"ver":null}',
	'an array at the top is not expanded; NULL columns are null in the envelope');
ok(!exists $other->[0]{headers}{eventType}, 'a NULL header column sends no header');

# ---- bytes, tombstones, JSON that does not expand --------------------------------
$node->safe_psql('postgres', q{
CREATE TABLE bin_events (id uuid, aggregatetype text, aggregateid text, payload bytea);
CREATE TRIGGER raw AFTER INSERT ON bin_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=bin', 'value.converter=io.debezium.converters.BinaryDataConverter',
  'route.tombstone.on.empty.payload=true');
CREATE TABLE b64_events (id uuid, aggregatetype text, aggregateid text, payload bytea);
CREATE TRIGGER b64 AFTER INSERT ON b64_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=bin');
INSERT INTO bin_events VALUES (gen_random_uuid(), 'x', 'k1', 'raw bytes'::bytea),
                              (gen_random_uuid(), 'x', 'k1', NULL);
INSERT INTO b64_events VALUES (gen_random_uuid(), 'x', 'k2', '\x00010203ff'::bytea);
CREATE TABLE json_events (id uuid, aggregatetype text, aggregateid text, payload text);
CREATE TRIGGER js AFTER INSERT ON json_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=expand', 'table.expand.json.payload=true',
  'table.json.payload.null.behavior=optional_bytes');
INSERT INTO json_events VALUES
  (gen_random_uuid(), 'x', 'k3', '{"mixed": [1, "x"]}'),
  (gen_random_uuid(), 'x', 'k3', '{"b": null, "z": {"y": [null, 2]}, "a": "\u00e9\t"}'),
  (gen_random_uuid(), 'x', 'k3', '{"ints": [1, 3000000000]}'),
  (gen_random_uuid(), 'x', 'k3', '{"a": 1e23, "b": 5e-324, "c": 0.00001, "d": 12345678.9, "e": 100.5, "f": 10000000.0, "g": 0.001, "h": 9.999999999999999e-4, "i": -1.0272701115810179e17, "j": 1.0, "k": 2e-3, "l": 1.7976931348623157e308}'),
  (gen_random_uuid(), 'x', 'k3', 'a"q\' || E'\n\t\x01\x1f\x7f' || 'é/' || E'\b\f\r' || U&'\2028');
});
ok(wait_for_empty($node, 60), 'the byte and JSON records are delivered');
my $bin = consume($broker, 'bin');
is(scalar @$bin, 3, 'three records on topic bin');
is($bin->[0]{value}, 'raw bytes', 'the BinaryDataConverter: a bytea payload as it is');
is($bin->[1]{size}, -1, 'route.tombstone.on.empty.payload: a NULL payload is a tombstone');
is($bin->[2]{value}, '"AAECA/8="', 'the JsonConverter: a bytea payload in base64');
my $expand = consume($broker, 'expand');
is($expand->[0]{value}, '"{\"mixed\": [1, \"x\"]}"', 'a mixed array: the payload stays a string');
is($expand->[1]{value}, "{\"b\":null,\"z\":{\"y\":[null,2]},\"a\":\"\x{c3}\x{a9}\\t\"}",
	'optional_bytes keeps null members; strings escaped as Jackson does');
is($expand->[2]{value}, '"{\"ints\": [1, 3000000000]}"',
	'an array of int and long: the payload stays a string');
# as Java 25's Double.toString prints them (Java 17 prints 1e23 and
# -1.0272701115810179e17 with more digits)
is($expand->[3]{value},
	'{"a":1.0E23,"b":4.9E-324,"c":1.0E-5,"d":1.23456789E7,"e":100.5,"f":1.0E7,"g":0.001,"h":9.999999999999998E-4,"i":-1.027270111581018E17,"j":1.0,"k":0.002,"l":1.7976931348623157E308}',
	'doubles printed as Java prints them');
is($expand->[4]{value}, "\"a\\\"q\\\\\\n\\t\\u0001\\u001F\x7f\xc3\xa9/\\b\\f\\r\xe2\x80\xa8\"",
	'a string escaped as Kafka\'s JsonConverter escapes it (Jackson: control characters only, \\u00XX upper case)');

# ---- the StringConverter's value, a missing column ignored, a fatal update -----------
$node->safe_psql('postgres', q{
CREATE TABLE str_events (id uuid, aggregatetype text, aggregateid text, type text, payload jsonb, ver int);
CREATE TRIGGER s AFTER INSERT OR UPDATE ON str_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=str', 'value.converter=org.apache.kafka.connect.storage.StringConverter',
  'table.field.additional.missing=ignore', 'table.fields.additional.placement=nope:header,type:header',
  'table.field.event.schema.version=ver', 'table.op.invalid.behavior=fatal');
INSERT INTO str_events VALUES ('7d47e190-0402-4048-bc2c-89dd54343cdc', 'x', 's-1', 'T', '{"a": 1}', 2);
});
($ret, $out, $err) = $node->psql('postgres', q{UPDATE str_events SET ver = 3});
like($err, qr/ignores an update.*\n.*table.op.invalid.behavior=fatal/s,
	'table.op.invalid.behavior=fatal: an update fails');
ok(wait_for_empty($node, 60), 'the StringConverter record is delivered');
my $str = consume($broker, 'str');
is(scalar @$str, 1, 'one record on topic str (the failed update sent nothing)');
is($str->[0]{value}, '{"a": 1}', 'value.converter StringConverter: the jsonb text as it is');
is($str->[0]{key}, '"s-1"', 'the key still by the JsonConverter');
is(join(',', sort grep { !/^outbox-/ } keys %{ $str->[0]{headers} }), 'id,type',
	'table.field.additional.missing=ignore: the missing column is left out');

# ---- converters with schemas enabled (Kafka Connect's default) -----------------------
# The key and the value as {"schema":...,"payload":...}: the schemas
# Debezium's connector gives the columns (t/120_debezium_compare.pl checks
# them against Debezium itself), the one its expansion infers (the value
# expected here is the one Debezium 3.6.1's EventRouter and Kafka's
# JsonConverter wrote for this payload), and a tombstone still a null record.
$node->safe_psql('postgres', q{
CREATE TABLE sch_events (id uuid NOT NULL, aggregatetype text NOT NULL, aggregateid varchar(255) NOT NULL,
    payload jsonb, body text, bin bytea, at timestamp(3), ver integer);
CREATE TRIGGER s1 AFTER INSERT ON sch_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=schemas', 'key.converter.schemas.enable=true', 'value.converter.schemas.enable=true');
CREATE TRIGGER s2 AFTER INSERT ON sch_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=schemas', 'key.converter.schemas.enable=true', 'value.converter.schemas.enable=true',
  'table.expand.json.payload=true');
CREATE TRIGGER s3 AFTER INSERT ON sch_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=schemas', 'key.converter.schemas.enable=true', 'value.converter.schemas.enable=true',
  'table.field.event.payload=body', 'table.field.event.key=id');
CREATE TRIGGER s4 AFTER INSERT ON sch_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=schemas', 'key.converter.schemas.enable=true', 'value.converter.schemas.enable=true',
  'table.field.event.payload=bin', 'table.field.event.key=at', 'route.tombstone.on.empty.payload=true');
CREATE TRIGGER s5 AFTER INSERT ON sch_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=schemas', 'value.converter.schemas.enable=true', 'topic.prefix=dbz',
  'table.fields.additional.placement=aggregateid:envelope:aggId,ver:envelope', 'table.field.event.schema.version=ver');
CREATE TRIGGER s6 AFTER INSERT ON sch_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=schemas', 'value.converter.schemas.enable=true', 'topic.prefix=dbz',
  'table.fields.additional.placement=aggregateid:envelope:agg', 'table.expand.json.payload=true');
INSERT INTO sch_events VALUES
  ('8d47e190-0402-4048-bc2c-89dd54343cdc', 'x', 'k-1',
   '{"b": true, "f": 1.5, "n": {"x": [1, 2]}, "s": "t", "big": 3000000000, "objs": [{"a": 1}, {"b": "x"}]}',
   'plain', '\x00ff', '2024-05-06 07:08:09.123', 2),
  ('9d47e190-0402-4048-bc2c-89dd54343cdc', 'x', 'k-2', NULL, NULL, NULL, NULL, NULL);
});
ok(wait_for_empty($node, 60), 'the records with schemas are delivered');
my $json_schema = '{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}';
my $key_schema = '{"type":"string","optional":false}';
my $uuid_schema = '{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1}';
my $ts_schema = '{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1}';
# the expanded payload's schema and value
my $x_schema = '{"type":"struct","fields":[{"type":"boolean","optional":true,"field":"b"},{"type":"double","optional":true,"field":"f"},{"type":"struct","fields":[{"type":"array","items":{"type":"int32","optional":true},"optional":true,"field":"x"}],"optional":true,"name":"payload.n","field":"n"},{"type":"string","optional":true,"field":"s"},{"type":"int64","optional":true,"field":"big"},{"type":"array","items":{"type":"struct","fields":[{"type":"int32","optional":true,"field":"a"},{"type":"string","optional":true,"field":"b"}],"optional":false,"name":"payload.objs"},"optional":true,"field":"objs"}],"optional":true,"name":"payload"}';
my $x_payload = '{"b":true,"f":1.5,"n":{"x":[1,2]},"s":"t","big":3000000000,"objs":[{"a":1,"b":null},{"a":null,"b":"x"}]}';
my @want_schemas = (
	# s1: the jsonb payload, a string named io.debezium.data.Json
	qq({"schema":$key_schema,"payload":"k-1"} {"schema":$json_schema,"payload":"{\\"b\\": true, \\"f\\": 1.5, \\"n\\": {\\"x\\": [1, 2]}, \\"s\\": \\"t\\", \\"big\\": 3000000000, \\"objs\\": [{\\"a\\": 1}, {\\"b\\": \\"x\\"}]}"}),
	qq({"schema":$key_schema,"payload":"k-2"} {"schema":$json_schema,"payload":null}),
	# s2: expanded, the inferred structure named by its path
	qq({"schema":$key_schema,"payload":"k-1"} {"schema":$x_schema,"payload":$x_payload}),
	qq({"schema":$key_schema,"payload":"k-2"} {"schema":$json_schema,"payload":null}),
	# s3: a uuid key, a text payload
	qq({"schema":$uuid_schema,"payload":"8d47e190-0402-4048-bc2c-89dd54343cdc"} {"schema":{"type":"string","optional":true},"payload":"plain"}),
	qq({"schema":$uuid_schema,"payload":"9d47e190-0402-4048-bc2c-89dd54343cdc"} {"schema":{"type":"string","optional":true},"payload":null}),
	# s4: a timestamp(3) key, a bytea payload; a NULL one a tombstone
	qq({"schema":$ts_schema,"payload":1714979289123} {"schema":{"type":"bytes","optional":true},"payload":"AP8="}),
	qq({"schema":$ts_schema,"payload":null} tombstone),
	# s5: an envelope, its schema named <topic.prefix>.<schema>.<table>.<routed value>.Value
	# and versioned by the version column
	qq("k-1" {"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},)
	  . qq({"type":"string","optional":false,"field":"aggId"},{"type":"int32","optional":true,"field":"ver"}],"optional":false,"name":"dbz.public.sch_events.x.Value","version":2},)
	  . qq("payload":{"payload":"{\\"b\\": true, \\"f\\": 1.5, \\"n\\": {\\"x\\": [1, 2]}, \\"s\\": \\"t\\", \\"big\\": 3000000000, \\"objs\\": [{\\"a\\": 1}, {\\"b\\": \\"x\\"}]}","aggId":"k-1","ver":2}}),
	qq("k-2" {"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},)
	  . qq({"type":"string","optional":false,"field":"aggId"},{"type":"int32","optional":true,"field":"ver"}],"optional":false,"name":"dbz.public.sch_events.x.Value"},)
	  . qq("payload":{"payload":null,"aggId":"k-2","ver":null}}),
	# s6: the expanded payload in the envelope, its schema a field there
	qq("k-1" {"schema":{"type":"struct","fields":[) . substr($x_schema, 0, -1) . qq(,"field":"payload"},)
	  . qq({"type":"string","optional":false,"field":"agg"}],"optional":false,"name":"dbz.public.sch_events.x.Value"},)
	  . qq("payload":{"payload":$x_payload,"agg":"k-1"}}),
	qq("k-2" {"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},)
	  . qq({"type":"string","optional":false,"field":"agg"}],"optional":false,"name":"dbz.public.sch_events.x.Value"},)
	  . qq("payload":{"payload":null,"agg":"k-2"}}));
is_deeply([ sort map { "$_->{key} " . ($_->{size} < 0 ? 'tombstone' : $_->{value}) } @{ consume($broker, 'schemas') } ],
	[ sort @want_schemas ], 'schemas enabled: key and value as the JsonConverter writes them with schemas');

# ---- the partition chosen by the sender ---------------------------------------------
# (in the 'payload' format from here on: the values read are the payloads)
$node->append_conf('postgresql.conf', "outbox.message_format = 'payload'\n");
$node->reload;
# One key to partition 2, then to partition 0: each partition has its
# events in commit order; across the two, no order.
$node->safe_psql('postgres', q{
SELECT outbox_send('sent', 'p2-' || i, 'k', NULL, 2) FROM generate_series(1, 20) i;
SELECT outbox_send(topic => 'sent', payload => 'p0-' || i, key => 'k', headers => NULL, partition => 0)
FROM generate_series(1, 20) i;
SELECT outbox_send('sent', 'none-' || i, 'k') FROM generate_series(1, 5) i;
SELECT outbox_send('sent', 'far', 'k2', NULL, 7);
});
ok(wait_for_empty($node, 60), 'the partitioned events leave the outbox (one as a dead letter)');
my $sent = consume($broker, 'sent');
my @p2 = map { $_->{value} } grep { $_->{partition} == 2 && $_->{value} =~ /^p2-/ } @$sent;
my @p0 = map { $_->{value} } grep { $_->{partition} == 0 && $_->{value} =~ /^p0-/ } @$sent;
is_deeply(\@p2, [ map { "p2-$_" } 1 .. 20 ], 'partition 2: all there, in commit order');
is_deeply(\@p0, [ map { "p0-$_" } 1 .. 20 ], 'partition 0: all there, in commit order');
is(scalar(grep { $_->{value} =~ /^none-/ && $_->{partition} == kafka_partition('k', 3) } @$sent), 5,
	'without a partition the key decides');
is($node->safe_psql('postgres', q{SELECT partition || ' ' || attempts || ' ' || last_error FROM outbox_dead_letter}),
	'7 2 the topic has no such partition: the one the sender chose (outbox.partition) is out of range',
	'a partition the topic lacks: a dead letter after outbox.max_attempts, with the reason');
$node->safe_psql('postgres', q{UPDATE outbox_dead_letter SET partition = 1;
SELECT outbox_dead_letter_retry();});
ok(wait_for_empty($node, 60), 'the dead letter put back is delivered');
my @far = grep { $_->{value} eq 'far' } @{ consume($broker, 'sent') };
is(scalar @far, 1, 'the dead letter put back arrives once');
is($far[0]{partition}, 1, 'with the partition its row carries');

# ---- a router's event as a dead letter, with a trace context ---------------------------
# Placed in a partition its topic lacks: a dead letter after its attempts,
# keeping the record it was built as; put back with a partition the topic
# has, it arrives as Debezium's record, with the trace context it was sent
# with; outbox_explain() knows it all along.
$node->safe_psql('postgres', q{
CREATE TABLE dead_events (id uuid, aggregatetype text, aggregateid text, payload jsonb, part int);
CREATE TRIGGER dead AFTER INSERT ON dead_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=dead', 'table.fields.additional.placement=part:partition');
BEGIN;
SET LOCAL outbox.traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
INSERT INTO dead_events VALUES ('6d47e190-0402-4048-bc2c-89dd54343cdc', 'x', 'd-1', '{"n": 1}', 5);
COMMIT;
});
ok(wait_for_empty($node, 60), 'the router event placed in a missing partition leaves the outbox');
is($node->safe_psql('postgres', q{SELECT payload_type::text || ' ' || partition || ' ' || convert_from(payload, 'UTF8')
	FROM outbox_dead_letter WHERE topic = 'dead'}), 'r 5 "{\"n\": 1}"',
	'its dead letter keeps the record as built and the partition placed');
is($node->safe_psql('postgres', q{SELECT status FROM outbox_explain((SELECT id FROM outbox_dead_letter WHERE topic = 'dead'))}),
	'dead_letter', 'outbox_explain() finds it among the dead letters');
$node->safe_psql('postgres', q{UPDATE outbox_dead_letter SET partition = 1 WHERE topic = 'dead';
SELECT outbox_dead_letter_retry();});
ok(wait_for_empty($node, 60), 'the dead letter put back is delivered');
my $dead = consume($broker, 'dead');
is(scalar @$dead, 1, 'one record on topic dead');
is($dead->[0]{partition}, 1, 'in the partition given back');
is($dead->[0]{value}, '"{\"n\": 1}"', 'its value as Debezium writes it');
is($dead->[0]{key}, '"d-1"', 'its key');
is($dead->[0]{headers}{id}, '6d47e190-0402-4048-bc2c-89dd54343cdc', 'its header id');
is($dead->[0]{headers}{traceparent}, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
	'the trace context of the inserting transaction');
like($node->safe_psql('postgres', 'SELECT dead_lettered FROM outbox_status'), qr/^[1-9]/,
	'outbox_status counts the dead letters');

# ---- exactly-once ------------------------------------------------------------------------
$node->append_conf('postgresql.conf', "outbox.delivery = 'exactly_once'\n");
$node->reload;
$node->safe_psql('postgres', q{
CREATE TABLE eos_events (id uuid, aggregatetype text, aggregateid text, payload jsonb, part int);
CREATE TRIGGER eos AFTER INSERT ON eos_events FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'route.topic.replacement=eos', 'table.fields.additional.placement=part:partition');
INSERT INTO eos_events SELECT gen_random_uuid(), 'x', 'k' || i, jsonb_build_object('i', i), i % 3
FROM generate_series(1, 30) i;
});
ok(wait_for_empty($node, 60), 'exactly-once: the events are delivered');
my $eos = consume($broker, 'eos', undef, 'read_committed');
is(scalar @$eos, 30, 'exactly-once: 30 committed records');
is(scalar(grep { $_->{value} =~ /^"\{\\"i\\": (\d+)\}"$/ && $1 % 3 == $_->{partition} } @$eos), 30,
	'exactly-once: each in the partition its row placed it in');
like($node->safe_psql('postgres', 'SELECT delivery FROM outbox_status'), qr/exactly_once/,
	'outbox_status shows the exactly-once mode');

$node->stop;
done_testing();
