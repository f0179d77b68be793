# A rewind times out what it waits for at message.timeout.ms, as the
# pipeline does (review 695dcef L4). A refusal on topic refuse (an event
# over message.max.bytes, refused by librdkafka: a refusal by the broker
# would make the gap-less producer fail as a whole, and be rebuilt) starts
# a rewind while an event to topic hang is in flight to a broker that does
# not answer. The rewind waits for that event's report: before, only
# librdkafka's own time-out gave it, which the worker sets to twice
# message.timeout.ms (and which times messages out one at a time, the
# reordering the worker's own time-out exists to prevent). How long the
# hang event stays in flight (outbox_shard_stats), over
# message.timeout.ms, must be about 1, not 2.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $timeout_s = 5;
my $broker = start_broker(topics => ['refuse:1', 'hang:1']);
is($broker->command('leader refuse 0 1'), 'OK', 'broker 1 leads refuse');
is($broker->command('leader hang 0 2'), 'OK', 'broker 2 leads hang');
my $node = new_outbox_node('rewind_timeout', $broker,
	kafka_config => 'message.timeout.ms=' . ($timeout_s * 1000) . ',socket.timeout.ms=3000,message.max.bytes=2000');

sql(q{SELECT outbox_send('refuse', 'warm'), outbox_send('hang', 'warm')});
ok(wait_for_empty($node, 30), 'the producer knows both topics and their leaders');

sub in_flight
{
	my ($id) = @_;
	return sql("SELECT coalesce($id BETWEEN in_flight_first_id AND in_flight_last_id, false)"
		  . ' FROM outbox_shard_stats() WHERE shard = 0') eq 't';
}

# hang's leader stops answering; its event is in flight there
$broker->command('rtt 2 60000');
my $id = sql(q{SELECT outbox_send('hang', 'stuck', 'h')});
my $t0 = time;
ok(wait_until(10, sub { in_flight($id) }), 'the hang event is in flight');
# an event too large for librdkafka is refused: a rewind starts
my $offset = -s $node->logfile;
sql(q{SELECT outbox_send('refuse', repeat('x', 5000), 'r')});
ok(wait_until(60, sub { !in_flight($id) }), 'the hang event leaves the flight');
my $waited_s = time - $t0;
my $ratio = $waited_s / $timeout_s;
# (logged by the settle that ends the rewind, just after)
my $refused = wait_until(10, sub { log_since($node, $offset) =~ /Kafka refused 1 event/ }) ? 't' : 'f';
diag(sprintf('FIGURES L4 rewind with an event in flight to a silent broker: in_flight_s=%.2f message_timeout_s=%d ratio=%.2f',
	$waited_s, $timeout_s, $ratio));
is($refused, 't', 'Kafka refused the event of refuse (the rewind was a refusal\'s)');
cmp_ok($ratio, '>=', 0.9, 'the event was not withdrawn before message.timeout.ms');
cmp_ok($ratio, '<', 1.5, 'the rewind timed it out at about message.timeout.ms, not twice that');

$broker->command('rtt 2 0');
ok(wait_query($node, 'postgres', q{SELECT NOT EXISTS (SELECT FROM outbox WHERE topic = 'hang')}, 60),
	'the hang event is delivered once the broker answers');
ok(scalar(grep { $_->{value} eq 'stuck' } @{ consume($broker, 'hang') }), 'it reached Kafka');
# withdrawn from a request that went unanswered: Kafka may have it, and
# the log says that it went again (a possible duplicate)
like(log_since($node, $offset), qr/1 event\(s\) Kafka may have written are produced again: reported without an offset, or failed after an unanswered request/,
	'the log counts the timed-out event as possibly written and produced again');

$node->stop;
$broker->stop;
done_testing();
