# A new producer's first request to a partition fails while the next ones
# are already in flight. Kafka takes any sequence number from a producer it
# holds no state for on a partition, so a real broker writes the next ones
# first; the project's broker does not check sequences at all, and the
# producer, seeing the later success, reports the failed event delivered.
# Until a partition acknowledged one of its keyed events, a producer keeps
# one keyed event in flight there (src/partition_warmup.c): the failed
# request is retried alone, and the key's events arrive, all of them, in
# commit order.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $broker = start_broker(topics => ['first:1', 'second:2']);
# one message a request: each event of the burst is a request of its own
my $node = new_outbox_node('first_batch', $broker, shards => 1,
	kafka_config => "$OutboxTest::TEST_KAFKA_CONFIG,batch.num.messages=1");

sub first_arrivals
{
	my ($topic) = @_;
	my %seen;
	return [ grep { !$seen{$_}++ } map { $_->{value} } @{ consume($broker, $topic) } ];
}

my @figures;
for my $case ([ first => 'a fresh producer' ], [ second => 'a topic new to the producer' ])
{
	my ($topic, $label) = @$case;
	ok(pause_delivery($node, 1), "$label: delivery paused");
	$node->safe_psql('postgres',
		"SELECT outbox_send('$topic', 'e' || i, 'k' || (i % 2)) FROM generate_series(1, 20) i");
	# late answers: the burst is on the wire before the first request fails
	is($broker->command('rtt all 200'), 'OK', "$label: responses 200 ms late");
	is($broker->command('produce-errors 1 NOT_ENOUGH_REPLICAS'), 'OK',
		"$label: the first Produce request fails, retriably");
	my $t0 = time;
	reload_with($node, 'outbox.enabled = on');
	ok(wait_for_empty($node, 60), "$label: the outbox drains");
	my $drained = time - $t0;
	is($broker->command('rtt all 0'), 'OK', "$label: responses on time again");
	my $got = first_arrivals($topic);
	for my $k (0, 1)
	{
		my @want = map { "e$_" } grep { $_ % 2 == $k } 1 .. 20;
		my %mine = map { $_ => 1 } @want;
		is_deeply([ grep { $mine{$_} } @$got ], \@want,
			"$label: key k$k, every event, in commit order");
	}
	push @figures, sprintf('%s: drained_s=%.1f arrived=%d', $topic, $drained, scalar @$got);
}
diag("FIGURES first batch, rtt 200 ms, first request failed: @figures");

$node->stop;
$broker->stop;
done_testing();
