# Ten thousand topics and more in one shard: its producer makes a topic
# handle (with the partition warm-up and pacing, src/kafka/partitions.c)
# for every topic it writes to, however many (src/kafka/producer.c; until
# 0.7.0, topics past the 10,000th were produced to by name, without
# either). After one event to each of 10,000 topics, a topic new to the
# producer gets t/048's case: a burst of keyed events whose first Produce
# request fails while the next ones are in flight. Its events arrive per
# key in commit order, and the worker says nothing of a by-name fallback.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $topics = 10_000;
my $broker = start_broker(topics => ['past:2']);
# one message a request: each event of the burst is a request of its own.
# Not the tests' short time-outs (3 s a request): 10,000 requests of one
# event each queue longer than that on the project's broker, and a
# request timed out fails the gap-less producer, which is rebuilt and
# sends them all again, to time out again.
my $node = new_outbox_node('topic_handles', $broker, shards => 1,
	kafka_config => 'message.timeout.ms=60000,socket.timeout.ms=30000,batch.num.messages=1');
my $start = -s $node->logfile;
my $rebuilt = qr/rebuilding the Kafka producer|Kafka producer failed/;

# one event to each of 10,000 topics (the broker makes each at its first
# metadata request, with 4 partitions): the producer holds 10,000 handles.
# A producer rebuilt meanwhile (a loaded machine can make the project's
# broker answer late enough for librdkafka to give up on a request) holds
# only the topics after it: then the round is sent again, up to 3 times.
my ($offset, $delivered);
for my $round (1 .. 3)
{
	$offset = -s $node->logfile;
	my $t0 = time;
	sql(qq{SELECT count(outbox_send('many_' || i, 'v', 'k')) FROM generate_series(1, $topics) i});
	$delivered = wait_for_empty($node, 600);
	diag(sprintf('FIGURES %d topics, one event each: delivered in %.1f s (round %d)',
			$topics, time - $t0, $round));
	last unless log_count($node, $rebuilt, $offset);
	diag("round $round: the producer was rebuilt meanwhile, sending to every topic again");
}
ok($delivered, "one event to each of $topics topics is delivered");
my @sample = (1, 2, 5000, $topics);
is(scalar(grep { @{ consume($broker, "many_$_") } >= 1 } @sample), scalar @sample,
	"topics 1, 2, 5000 and $topics hold their event");

my $pids = worker_pids($node);

# the 10,001st topic: t/048's burst, its first Produce request failing
ok(pause_delivery($node, 1), 'delivery paused');
sql(q{SELECT count(outbox_send('past', 'e' || i, 'k' || (i % 2))) FROM generate_series(1, 20) i});
is($broker->command('rtt all 200'), 'OK', 'responses 200 ms late');
is($broker->command('produce-errors 1 NOT_ENOUGH_REPLICAS'), 'OK',
	'the first Produce request fails, retriably');
reload_with($node, 'outbox.enabled = on');
ok(wait_for_empty($node, 60), 'the burst to a topic past the 10,000th is delivered');
is($broker->command('rtt all 0'), 'OK', 'responses on time again');

my %seen;
my @got = grep { !$seen{$_}++ } map { $_->{value} } @{ consume($broker, 'past') };
for my $k (0, 1)
{
	my @want = map { "e$_" } grep { $_ % 2 == $k } 1 .. 20;
	my %mine = map { $_ => 1 } @want;
	is_deeply([ grep { $mine{$_} } @got ], \@want,
		"topic past the 10,000th: key k$k, every event, in commit order");
}
# the burst went through the producer that holds the 10,000 handles (one
# rebuilt on the way would hold none, and prove nothing here)
is_deeply(worker_pids($node), $pids, 'the same worker served both');
is(log_count($node, $rebuilt, $offset), 0, 'and the same producer');
is(log_count($node, qr/topic handles|produced to by name/, $start), 0,
	'the worker logs no by-name fallback')
  or diag(join("\n", grep { /topic handles|by name/ } split /\n/, log_since($node, $start)));

$node->stop;
$broker->stop;
done_testing();
