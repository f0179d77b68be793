# After the Kafka producer is rebuilt (a reload of a setting it reads),
# delivery reports still wake the worker at once (review e11b06c M1): the
# wait set must watch the new producer's pipe, not the old one's, which a
# new producer at the old one's address used to leave it watching. Measured
# as the time from an event's commit to its row's deletion, one event at a
# time, before and after a rebuild; with the worker never reading on a
# timer (outbox.poll_interval = 1h), only a report wakes it to settle.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => ['wake:1']);
my $node = new_outbox_node('wakeup', $broker, conf => q{
outbox.poll_interval = '1h'
});

# Median seconds from commit to deletion over $n events sent 0.3 s apart.
sub settle_median
{
	my ($n) = @_;
	my @s;
	for (1 .. $n)
	{
		my $t0 = time;
		my $id = sql(q{SELECT outbox_send('wake', 'x', 'k')});
		wait_until(10, sub { sql("SELECT count(*) FROM outbox WHERE id = $id") eq '0' })
		  or die "event $id not settled in 10 s";
		push @s, time - $t0;
		sleep 0.3;
	}
	@s = sort { $a <=> $b } @s;
	return $s[ int(@s / 2) ];
}

ok(wait_until(30, sub { @{ worker_pids($node) } == 1 }), 'the worker runs');
settle_median(3);    # the topic's metadata, the first connection
my $before = settle_median(10);
my $offset = -s $node->logfile;
reload_with($node, "outbox.kafka_config = '$OutboxTest::TEST_KAFKA_CONFIG,linger.ms=0'");
ok(wait_until(20, sub { log_since($node, $offset) =~ /rebuilding the Kafka producer/ }),
	'the reload rebuilds the producer');
sql(q{SELECT outbox_send('wake', 'first after the rebuild', 'k')});
ok(wait_for_empty($node, 20), 'the new producer delivers');
my $after = settle_median(10);
cmp_ok($after, '<', 0.3, 'after the rebuild, a report still wakes the worker (median settle < 300 ms)');
diag(sprintf('FIGURES M1 commit-to-deletion median, poll_interval 1h: before_rebuild_ms=%.0f after_rebuild_ms=%.0f',
		$before * 1000, $after * 1000));

$node->stop;
$broker->stop;
done_testing();
