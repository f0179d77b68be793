# Kafka record conventions, read back by two clients written by others:
# kcat (librdkafka) and kafkajs with the CloudEvents JavaScript SDK.
#  - a NULL payload with a key is a record with a null value (compaction
#    removes the key), in every format;
#  - the record timestamp is the event's created_at;
#  - content-type names what outbox_send() was given;
#  - W3C trace context from SET LOCAL and from a SQLCommenter comment;
#  - outbox.message_format = 'cloudevents' is parsed by the SDK with every
#    attribute right;
#  - (the project's broker only) kafkajs's consumer outlives a group
#    coordinator that is still loading.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = start_broker(topics => [ 'conv:3', 'ce:3' ]);
my $node = new_outbox_node('conv', $broker, message_format => 'payload');

sub by_key { my ($records, $key) = @_; return [ grep { $_->{key} eq $key } @$records ]; }

# ---- payload format ------------------------------------------------------
# created_at is the transaction's start: now() in the same transaction
my $created_ms = sql(q{BEGIN;
	SELECT floor(extract(epoch FROM now()) * 1000)::bigint;
	SELECT outbox_send('conv', '{"n": 1}'::jsonb, 'json', '{"type": "t.created"}');
	COMMIT;});
($created_ms) = split /\n/, $created_ms;
sql(q{SELECT outbox_send('conv', 'plain', 'text')});
sql(q{SELECT outbox_send('conv', '\x00ff'::bytea, 'bytes'::bytea)});
sql(q{SELECT outbox_send('conv', 'row', 'gone')});
sql(q{SELECT outbox_send('conv', NULL::text, 'gone')});
sql(q{BEGIN;
	SET LOCAL outbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
	SET LOCAL outbox.tracestate = 'congo=t61rcWkgMzE';
	SELECT outbox_send('conv', 'traced by SET LOCAL', 'traced');
	COMMIT;});
sql(q{SELECT outbox_send('conv', 'traced by a comment', 'commented') /*action='checkout',traceparent='00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01',tracestate='rojo%3D00f067aa0ba902b7'*/});
ok(wait_for_empty($node, 30), 'the payload-format events are delivered');

my $records = consume($broker, 'conv');
my ($json) = @{ by_key($records, 'json') };
is($json->{timestamp}, $created_ms, 'the record timestamp is the event\'s created_at (ms)');
is($json->{headers}{'content-type'}, 'application/json', 'jsonb payload: content-type application/json');
is(by_key($records, 'text')->[0]{headers}{'content-type'}, 'text/plain; charset=utf-8',
	'text payload: content-type text/plain; charset=utf-8');
is(by_key($records, 'bytes')->[0]{headers}{'content-type'}, 'application/octet-stream',
	'bytea payload: content-type application/octet-stream');
my @gone = @{ by_key($records, 'gone') };
is(scalar @gone, 2, 'the row and its tombstone both reached Kafka');
is($gone[1]{size}, -1, 'the tombstone has a null value (kcat size -1)');
ok(!exists $gone[1]{headers}{'content-type'}, 'a tombstone has no content-type');
is($gone[1]{partition}, $gone[0]{partition}, 'the tombstone lands on its key\'s partition');
my ($traced) = @{ by_key($records, 'traced') };
is($traced->{headers}{traceparent}, '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
	'SET LOCAL outbox.traceparent becomes the traceparent header');
is($traced->{headers}{tracestate}, 'congo=t61rcWkgMzE', '... and tracestate');
my ($commented) = @{ by_key($records, 'commented') };
is($commented->{headers}{traceparent}, '00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01',
	'a SQLCommenter traceparent in the statement becomes the header');
is($commented->{headers}{tracestate}, 'rojo=00f067aa0ba902b7', '... with its tracestate URL-decoded');
ok(!exists by_key($records, 'text')->[0]{headers}{traceparent}, 'an untraced event has no traceparent');

# a second client sees the same null value
my @js_gone = grep { ($_->{key} // '') eq 'gone' } @{ consume_js($broker, 'conv') };
ok(@js_gone == 2 && !defined $js_gone[1]{value}, 'kafkajs reads the tombstone\'s value as null');

# The second client itself: a fresh real cluster's group coordinator may
# still be loading when consume.js joins its group (it once failed CI that
# way); it starts its consumer again instead of failing. The project's
# broker fails the next JoinGroup requests (API key 11) the same way.
if ($broker->can('command'))
{
	$broker->command('request-errors 11 12 COORDINATOR_LOAD_IN_PROGRESS');
	is(scalar @{ consume_js($broker, 'conv') }, scalar @$records,
		'consume.js reads every record through a loading group coordinator');
}

# ---- cloudevents format, through the CloudEvents SDK ---------------------
reload_with($node, "outbox.message_format = 'cloudevents'");
sleep(1);
my $instance = sql('SELECT id FROM outbox_instance');
my ($ce_id, $ce_created) = split /\|/, sql(q{BEGIN;
	SET LOCAL outbox.traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
	SELECT outbox_send('ce', '{"order": 7, "total": 12.5}'::jsonb, 'o7', '{"type": "order.created"}')
	       || '|' || to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
	COMMIT;});
my $text_id = sql(q{SELECT outbox_send('ce', 'hello', 'h1')});
my $tomb_id = sql(q{SELECT outbox_send('ce', NULL::text, 'o7')});
ok(wait_for_empty($node, 30), 'the cloudevents-format events are delivered');

my @ce = @{ consume_js($broker, 'ce') };
my ($order) = grep { ($_->{headers}{'outbox-id'} // '') eq $ce_id } @ce;
my $event = $order->{cloudevent} // {};
diag('FIGURES cloudevents: ' . join(' ', map { "$_=" . ($event->{$_} // 'undef') }
		qw(specversion id source type time datacontenttype traceparent)));
is($event->{specversion}, '1.0', 'ce specversion 1.0');
is($event->{id}, "$instance:$ce_id", 'ce id is the dedup key instance:id');
is($event->{source}, '/postgresql/postgres', 'ce source names the database');
is($event->{type}, 'order.created', 'ce type from the type header');
is($order->{headers}{ce_time}, $ce_created, 'ce_time is created_at in RFC 3339 (UTC, microseconds)');
(my $ce_created_ms = $ce_created) =~ s/(\.\d{3})\d{3}Z$/$1Z/;
is($event->{time}, $ce_created_ms, 'the SDK reads the same time (it keeps milliseconds)');
is($event->{datacontenttype}, 'application/json', 'ce datacontenttype from content-type');
is_deeply($event->{data}, { order => 7, total => 12.5 }, 'the SDK parses the JSON data');
is($event->{traceparent}, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
	'the traceparent extension (ce_traceparent)');
my ($hello) = grep { ($_->{headers}{'outbox-id'} // '') eq $text_id } @ce;
is($hello->{cloudevent}{type}, 'ce', 'without a type header, ce type is the topic');
is($hello->{cloudevent}{datacontenttype}, 'text/plain; charset=utf-8', 'text data content type');
my ($tomb) = grep { ($_->{headers}{'outbox-id'} // '') eq $tomb_id } @ce;
ok(defined $tomb && !defined $tomb->{value}, 'a tombstone in cloudevents format has a null value');

$node->stop;
done_testing();
