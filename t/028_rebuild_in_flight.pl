# A producer rebuilt while events are still in flight. A rebuild is not a
# stop: it waits for their reports as the pipeline would, up to
# message.timeout.ms, not outbox.shutdown_timeout, since what it purged
# may have been written by Kafka and would be sent again (review 695dcef
# L6: duplicates outside the documented causes). Here the broker answers
# after 2 s (under socket.timeout.ms, 3 s: librdkafka sends nothing twice,
# which the project's broker would write twice), shutdown_timeout is 1 s
# and message.timeout.ms 20 s (a new producer's events take several round
# trips: the first of each partition goes alone, then 5 at a time): every
# event must be delivered once, by the same worker, whose window counts
# every report (review e11b06c L1: counters that drift below zero stop the
# shard). Then a stop during such a rebuild still ends by
# shutdown_timeout, not by the rebuild's longer wait.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => ['late:2']);
my $kafka = "message.timeout.ms=20000,socket.timeout.ms=3000";
my $node = new_outbox_node('lateports', $broker, kafka_config => $kafka, conf => q{
outbox.shutdown_timeout = '1s'
});

ok(wait_until(30, sub { @{ worker_pids($node) } == 1 }), 'the worker runs');
sql(q{SELECT outbox_send('late', 'warm', 'w')});
ok(wait_for_empty($node, 20), 'the topic is known');
my ($pid) = @{ worker_pids($node) };

sub send_round
{
	my ($round) = @_;
	sql(join(";\n", 'BEGIN', (map { "SELECT outbox_send('late', 'r$round-$_', 'k$_')" } 1 .. 20), 'COMMIT'));
	return map { "r$round-$_" } 1 .. 20;
}

my @values;
for my $round (1 .. 3)
{
	$broker->command('rtt all 2000');
	push @values, send_round($round);
	sleep 0.3;    # produced, the reports 1.7 s away
	my $offset = -s $node->logfile;
	reload_with($node, "outbox.kafka_config = '$kafka,linger.ms=$round'");
	ok(wait_until(20, sub { log_since($node, $offset) =~ /rebuilding the Kafka producer/ }),
		"($round) the producer is rebuilt once the events in flight are reported");
	sleep 1;
	$broker->command('rtt all 0');
	push @values, "after-$round";
	sql(qq{SELECT outbox_send('late', 'after-$round', 'k1')});
	ok(wait_for_empty($node, 30), "($round) the shard delivers again: the outbox drains");
}
my %got;
$got{ $_->{value} }++ for @{ consume($broker, 'late') };
my @missing = grep { !$got{$_} } @values;
my $dups = 0;
$dups += $got{$_} - 1 for grep { ($got{$_} // 0) > 1 } @values;
is(scalar(@missing), 0, 'every event reached Kafka');
is($dups, 0, 'no event reached Kafka twice: the rebuilds purged nothing in flight');
is(join(',', @{ worker_pids($node) }), $pid, 'the same worker, never restarted');
diag("FIGURES L1/L6 rebuild with reports 2 s late, shutdown_timeout 1 s, message.timeout.ms 20 s, 3 rounds: events="
	  . scalar(@values) . " missing=" . scalar(@missing) . " duplicates=$dups");

# A stop during a rebuild that waits for reports 6 s away: the worker
# exits by outbox.shutdown_timeout (1 s), not the rebuild's wait.
$broker->command('rtt all 6000');
push @values, send_round('stop');
sleep 0.5;
reload_with($node, "outbox.kafka_config = '$kafka,linger.ms=9'");
sleep 0.5;
my $t0 = time;
sql("SELECT pg_terminate_backend($pid)");
ok(wait_until(20, sub { !grep { $_ eq $pid } @{ worker_pids($node) } }), 'the stopped worker exits');
my $exit_s = time - $t0;
diag(sprintf('FIGURES L6 stop during a rebuild: exit_s=%.2f shutdown_timeout_s=1 reports_after_s=5.5', $exit_s));
cmp_ok($exit_s, '<', 3, 'the stop ends the rebuild\'s wait: the worker exits well before the reports');
$broker->command('rtt all 0');
ok(wait_for_empty($node, 60), 'the next worker delivers what the stopped one left');
%got = ();
$got{ $_->{value} }++ for @{ consume($broker, 'late') };
@missing = grep { !$got{$_} } @values;
is(scalar(@missing), 0, 'every event reached Kafka, those of the stop too');

$node->stop;
$broker->stop;
done_testing();
