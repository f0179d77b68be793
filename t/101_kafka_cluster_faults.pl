# Faults of the whole real Kafka cluster, under load: a rolling restart of
# all three brokers (each stopped with a controlled shutdown, started, and
# back in the ISR before the next), and every broker killed for 20 s.
# Each: nothing lost, nothing rolled back sent, per-key order kept,
# duplicates within docs/guarantees.md's bound; the outage is logged, once-ish.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $shards = 2;
my $window = 10000;
my $cluster = start_real_kafka(topics => [ 'rolling:6', 'down:6', 'down_marker:1' ]);
my $node = new_outbox_node('cluster_faults', $cluster, shards => $shards);

fault_under_load($node, $cluster, 'rolling restart', topic => 'rolling', first => 1,
	per_session => 600, bound => $window * $shards, fault => sub {
	my $started = time;
	for my $i (1 .. 3)
	{
		$cluster->stop_broker($i);
		sleep 2;
		$cluster->start_broker($i);
		ok($cluster->wait_topic('rolling', 3, 90), "broker $i back in the ISR");
	}
	return sprintf('restart_s=%.1f', time - $started);
});

my $offset = -s $node->logfile;
# a longer load (30 s at least), so that the outage falls inside it
fault_under_load($node, $cluster, 'whole cluster down 20 s', topic => 'down', first => 11,
	per_session => 1500, bound => $window * $shards, fault => sub {
	$cluster->kill_broker($_) for 1 .. 3;
	my $down = time;
	# the load may have ended already on a slow machine: an event
	# committed now is one the outage must keep waiting
	$node->safe_psql('postgres', "SELECT outbox_send('down_marker', 'during the outage')");
	sleep 8;
	my $pending = $node->safe_psql('postgres', 'SELECT count(*) FROM outbox');
	ok($pending > 0, 'events wait in the outbox while the cluster is down');
	sleep 20 - (time - $down) if time - $down < 20;
	my $restarted = time;
	$cluster->start_broker(1 .. 3);
	my $up = time;
	ok($cluster->wait_topic('down', 2, 90), 'the cluster elects leaders again');
	ok(wait_until(60, sub { log_since($node, $offset) =~ /Kafka accepts events again/ }),
		'the log says Kafka accepts events again');
	return sprintf('down_s=%.1f pending_at_8s=%d cluster_restart_s=%.1f',
		$restarted - $down, $pending, $up - $restarted);
});

# Delivered, though perhaps more than once: the worker times out what
# Kafka did not acknowledge while the cluster elected leaders again, and
# sends it again (docs/guarantees.md, duplicates after a timeout).
my @marker = @{ consume($cluster, 'down_marker') };
my %events = map { ("$_->{value} (outbox-id $_->{id})" => 1) } @marker;
is_deeply([ map { $_->{value} } @marker[ 0 .. 0 ] ], ['during the outage'],
	'the event committed during the outage arrives');
is(scalar keys %events, 1, 'each copy of it is that one event: ' . join(', ', sort keys %events));
diag('FIGURES whole cluster down: copies of the event committed during the outage=' . scalar @marker);
my $errors = log_count($node, qr/Kafka error/, $offset);
diag("FIGURES whole cluster down: 'Kafka error' log lines=$errors");
ok($errors >= 1, 'the outage is logged');
cmp_ok($errors, '<', 30, 'the outage is logged once-ish per worker, not once per retry');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0',
	'cluster faults make no dead letters');

$node->stop;
$cluster->stop;
done_testing();
