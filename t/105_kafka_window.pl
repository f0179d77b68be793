# The idempotent producer against a real broker's sequence checks: a full
# window (10,000 events of 20 keys) is in flight when the leader of the
# busiest partition stops answering (SIGSTOP) and is then killed (SIGKILL)
# in the middle of it. Its messages time out (message.timeout.ms = 5 s),
# the worker purges what it had not sent and reads again from the first
# failed event (the window's failure path), and Kafka elects new leaders.
# Checked with the events Kafka holds at the end: every event arrived, per
# key the first copies are in commit order, duplicates are at most one
# window, no dead letters and no sequence error that stops delivery.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $events = 30000;
my $keys = 20;
my $partitions = 6;
my $window = 10000;

# broker 1 leads the busier half of the partitions (at least half of the
# events, more than a window), brokers 2 and 3 the others
my %events_of;
$events_of{ kafka_partition("k$_", $partitions) } += $events / $keys for 0 .. $keys - 1;
my @by_events = sort { ($events_of{$b} // 0) <=> ($events_of{$a} // 0) || $a <=> $b }
  0 .. $partitions - 1;
my %leader;
$leader{ $by_events[$_] } = $_ < $partitions / 2 ? 1 : 2 + $_ % 2 for 0 .. $#by_events;
my $cluster = start_real_kafka();
$cluster->create_topic('win', assignment => [ map {
	my $l = $leader{$_}; [ $l, grep { $_ != $l } 1 .. 3 ] } 0 .. $partitions - 1 ]);
my $node = new_outbox_node('kafka_window', $cluster, shards => 1, conf => qq{
outbox.window_size = $window
outbox.enabled = off
});

sql(qq{SELECT count(outbox_send('win', 'k' || (g % $keys) || ':' || g, 'k' || (g % $keys)))
       FROM generate_series(1, $events) g});
my $victim = $cluster->leader_of('win', $by_events[0]);
my $stalled = 0;
$stalled += $events_of{ $_->{partition} } // 0
  for grep { $_->{leader} == $victim } @{ $cluster->metadata('win')->{partitions}{win} };
cmp_ok($stalled, '>', $window, "broker $victim leads $stalled events' partitions, more than a window");

my $offset = -s $node->logfile;
$cluster->pause_broker($victim);
my $t0 = time;
reload_with($node, 'outbox.enabled = on');
sleep 2.5;
my $pending_at_kill = sql('SELECT count(*) FROM outbox');
cmp_ok($pending_at_kill, '>=', $stalled, 'the stalled partitions\' events wait in the window');
$cluster->kill_broker($victim);
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox', 180), 'every event left the outbox');
my $elapsed = time - $t0;
$cluster->start_broker($victim);
is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'no dead letters');

my $copies = first_copies(consume($cluster, 'win'));
is($copies->{distinct}, $events, "all $events events are in Kafka");
is($copies->{out_of_order}, '', 'per key, first copies are in commit order');
my $duplicates = $copies->{duplicates};
cmp_ok($duplicates, '<=', $window, 'duplicates are at most one window');
my $log = log_since($node, $offset);
my $timeouts = () = $log =~ /timed out/gi;
unlike($log, qr/OUT_OF_ORDER_SEQUENCE|out of order sequence|fatal/i,
	'no sequence error and no fatal producer error');
diag(sprintf('FIGURES kafka_window: events=%d window=%d stalled=%d pending_at_kill=%d duplicates=%d'
		  . ' timed_out_log_lines=%d drained_s=%.1f',
		$events, $window, $stalled, $pending_at_kill, $duplicates, $timeouts, $elapsed));

$node->stop;
$cluster->stop;
done_testing();
