# A producer rebuilt while events are still in flight (review e11b06c L1):
# the worker waits outbox.shutdown_timeout for their reports, then destroys
# the producer, which serves the late reports itself. The window must count
# those, or its counters drift below zero and the shard either never reads
# again (a rewind that waits for a negative count) or skips the rewind
# after a later failure. Here the broker answers after 3 s, the worker
# gives up after 1 s, and afterwards every event must still be delivered.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => ['late:2']);
my $node = new_outbox_node('lateports', $broker, conf => q{
outbox.shutdown_timeout = '1s'
});

sub sql { return $node->safe_psql('postgres', $_[0]); }

ok(wait_until(30, sub { @{ worker_pids($node) } == 1 }), 'the worker runs');
sql(q{SELECT outbox_send('late', 'warm', 'w')});
ok(wait_for_empty($node, 20), 'the topic is known');
my ($pid) = @{ worker_pids($node) };

my @values;
for my $round (1 .. 3)
{
	$broker->command('rtt all 3000');
	push @values, map { "r$round-$_" } 1 .. 20;
	sql(join(";\n", 'BEGIN', (map { "SELECT outbox_send('late', 'r$round-$_', 'k$_')" } 1 .. 20), 'COMMIT'));
	sleep 0.5;    # produced, the reports 2.5 s away
	my $offset = -s $node->logfile;
	reload_with($node, "outbox.kafka_config = '$OutboxTest::TEST_KAFKA_CONFIG,linger.ms=$round'");
	ok(wait_until(20, sub { log_since($node, $offset) =~ /rebuilding the Kafka producer/ }),
		"($round) the producer is rebuilt with events in flight");
	sleep 4;      # the late reports came while the old producer was destroyed
	$broker->command('rtt all 0');
	push @values, "after-$round";
	sql(qq{SELECT outbox_send('late', 'after-$round', 'k1')});
	ok(wait_for_empty($node, 30), "($round) the shard delivers again: the outbox drains");
}
my %got;
$got{ $_->{value} }++ for @{ consume($broker, 'late') };
my @missing = grep { !$got{$_} } @values;
is(scalar(@missing), 0, 'every event reached Kafka');
is(join(',', @{ worker_pids($node) }), $pid, 'the same worker, never restarted');
my $dups = 0;
$dups += $_ - 1 for grep { $_ > 1 } values %got;
diag("FIGURES L1 rebuild with reports 3 s late, shutdown_timeout 1 s, 3 rounds: events=" . scalar(@values)
	  . " missing=" . scalar(@missing) . " duplicates=$dups");

$node->stop;
$broker->stop;
done_testing();
