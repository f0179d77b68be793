# A new producer's first request to a partition fails while the next ones
# are already in flight. Kafka takes any sequence number from a producer it
# holds no state for on a partition, so a real broker writes the next ones
# first; the project's broker does not check sequences at all, and the
# producer, seeing the later success, reports the failed event delivered,
# with no offset (an "implicit acknowledgement").
# Until a partition acknowledged one of its keyed events, a producer keeps
# one keyed event in flight there (src/kafka/partitions.c): the failed
# request is retried alone, and the key's events arrive, all of them, in
# commit order. Keyless events go freely; the one whose request failed is
# reported delivered without an offset, which the worker does not take as
# a delivery (src/kafka/errors.c): it is produced again, and every event
# arrives.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $broker = start_broker(topics => ['first:1', 'second:2', 'keyless:1', 'opener:1']);
# one message a request: each event of the burst is a request of its own
my $node = new_outbox_node('first_batch', $broker, shards => 1,
	kafka_config => "$OutboxTest::TEST_KAFKA_CONFIG,batch.num.messages=1");

sub first_arrivals
{
	my ($topic) = @_;
	my %seen;
	return [ grep { !$seen{$_}++ } map { $_->{value} } @{ consume($broker, $topic) } ];
}

# the burst: 20 events in one transaction, keyed by KEY (an SQL expression
# of i, NULL for keyless)
sub burst
{
	my ($node, $broker, $topic, $label, $key) = @_;
	ok(pause_delivery($node, 1), "$label: delivery paused");
	$node->safe_psql('postgres',
		"SELECT outbox_send('$topic', 'e' || i, $key) FROM generate_series(1, 20) i");
	# late answers: the burst is on the wire before the first request fails
	is($broker->command('rtt all 200'), 'OK', "$label: responses 200 ms late");
	is($broker->command('produce-errors 1 NOT_ENOUGH_REPLICAS'), 'OK',
		"$label: the first Produce request fails, retriably");
	my $t0 = time;
	reload_with($node, 'outbox.enabled = on');
	ok(wait_for_empty($node, 60), "$label: the outbox drains");
	my $drained = time - $t0;
	is($broker->command('rtt all 0'), 'OK', "$label: responses on time again");
	return $drained;
}

my @figures;
for my $case ([ first => 'a fresh producer' ], [ second => 'a topic new to the producer' ])
{
	my ($topic, $label) = @$case;
	my $drained = burst($node, $broker, $topic, $label, "'k' || (i % 2)");
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

# Offset-less acknowledgements: keyless events, and one keyed event (the
# partition's opener) followed by keyless ones.
for my $case ([ keyless => 'keyless events', 'NULL' ],
	[ opener => 'a keyed opener, then keyless events', "CASE WHEN i = 1 THEN 'k' END" ])
{
	my ($topic, $label, $key) = @$case;
	my $drained = burst($node, $broker, $topic, $label, $key);
	my $got = first_arrivals($topic);
	is_deeply([ sort @$got ], [ sort map { "e$_" } 1 .. 20 ],
		"$label: every event arrived, the one acknowledged without an offset too");
	my $dead = $node->safe_psql('postgres',
		"SELECT count(*) FROM outbox_dead_letter");
	is($dead, '0', "$label: no dead letter");
	push @figures, sprintf('%s: drained_s=%.1f arrived=%d of 20, records=%d', $topic, $drained,
		scalar @$got, scalar @{ consume($broker, $topic) });
}
diag("FIGURES first batch, rtt 200 ms, first request failed: @figures");

$node->stop;
$broker->stop;
done_testing();
