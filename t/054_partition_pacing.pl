# Partitions waiting for Kafka's acknowledgements: librdkafka's idempotent
# producer sends no new request to a partition with 5 or more messages in
# flight, and while such a partition has messages queued, its broker
# thread polls without waiting until the acknowledgement comes: with
# acknowledgements 100 ms away, the worker's librdkafka threads took 1.5
# cores at 1000 events/s (bench part cpu). The worker keeps such a
# partition's keyed events itself until its reports come
# (src/kafka/partitions.c). (a) Under load with slow acknowledgements: every
# event arrives once, in per-key order, and librdkafka's threads take far
# less CPU than with outbox.partition_pacing = off in the same run. (b)
# Events waiting there when the worker withdraws what Kafka has not
# acknowledged (message.timeout.ms passes while Kafka is down) are read
# again: nothing lost, per-key order kept. (c) Events released together
# leave in one request: they are handed to librdkafka one by one, and with
# linger.ms=0 its broker thread sent the first before the rest came, the
# rest a round trip later (the producer's linger.ms=5, src/kafka/producer.c).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

# librdkafka's threads take at most this share of the CPU they take with
# outbox.partition_pacing = off, in the same run (when written: 0.07, 0.10
# of a core against 1.39; without the pacing of src/kafka/partitions.c 0.87, both polling)
use constant MAX_SHARE_OF_UNPACED => 0.5;

my $broker = start_broker(topics => [ 'paced:4', 'unpaced:4', 'withdrawn:2', 'release:1' ]);
my $node = new_outbox_node('partition_pacing', $broker, shards => 1,
	kafka_config => 'message.timeout.ms=3000,socket.timeout.ms=3000');

# every partition acknowledged once (src/kafka/partitions.c), then slow
sql(q{SELECT outbox_send(t, 'warm', 'k' || i) FROM unnest(ARRAY['paced', 'unpaced', 'withdrawn', 'release']) t,
	generate_series(1, 40) i});
ok(wait_for_empty($node, 30), 'the partitions are warm');
$broker->command('rtt all 100');

# 900 events from 3 sessions into $topic; checks what arrived and returns
# the share of a core librdkafka's threads took meanwhile
sub paced_load
{
	my ($topic, $first, $label) = @_;
	my ($pid) = @{ worker_pids($node) };
	my $before = thread_cpu_s($pid);
	my $t0 = Time::HiRes::time();
	my $load = start_load($node, sessions => 3, per_session => 300, keys => 10, topic => $topic,
		rollback_every => 0, first_session => $first, sleep => 0.005);
	wait_load($load);
	ok(wait_for_empty($node, 120), "$label: the outbox drains");
	my $seconds = Time::HiRes::time() - $t0;
	my $after = thread_cpu_s($pid);
	check_delivery($label, committed_of($node, $first, $first + 2),
		[ grep { $_->{value} ne 'warm' } @{ consume($broker, $topic) } ]);
	my $share = ($after->{librdkafka} - $before->{librdkafka}) / $seconds;
	diag(sprintf('FIGURES %s: events=900 seconds=%.1f librdkafka_core_share=%.3f main_core_share=%.3f',
			$label, $seconds, $share, ($after->{main} - $before->{main}) / $seconds));
	return $share;
}

# ---- (a) paced under load, against unpaced -----------------------------
my $paced = paced_load('paced', 1, '(a) paced');
reload_with($node, 'outbox.partition_pacing = off');
my $unpaced = paced_load('unpaced', 7, '(a) unpaced');
reload_with($node, 'outbox.partition_pacing = on');
diag(sprintf('FIGURES partition pacing: paced/unpaced librdkafka CPU %.2f', $paced / $unpaced));
cmp_ok($paced, '<', MAX_SHARE_OF_UNPACED * $unpaced,
	'(a) librdkafka\'s threads poll without waiting far less with pacing');

# ---- (b) withdrawn while waiting --------------------------------------------
# commits for about 6 s: Kafka goes down in the middle of them
my $load = start_load($node, sessions => 3, per_session => 300, keys => 5, topic => 'withdrawn',
	rollback_every => 0, first_session => 4, sleep => 0.02);
ok(wait_until(30, sub { @{ consume($broker, 'withdrawn', 100) } >= 100 }), '(b) delivery flows');
$broker->command('down all');
# past message.timeout.ms: what Kafka did not acknowledge is withdrawn
sleep 6;
ok(sql('SELECT count(*) FROM outbox') > 0, '(b) events wait while Kafka is down');
$broker->command('up all');
$broker->command('rtt all 0');
wait_load($load);
ok(wait_for_empty($node, 120), '(b) the outbox drains');
check_delivery('(b) withdrawn', committed_of($node, 4, 6),
	[ grep { $_->{value} ne 'warm' } @{ consume($broker, 'withdrawn') } ]);

# ---- (c) a release leaves in one request ----------------------------------
# librdkafka's statistics (every second) after the last report of a round
sub requests_sent
{
	sleep 2.5;
	return sql('SELECT sum(requests) FROM outbox_kafka_brokers');
}

# Each round: 5 events in flight on the one partition, then 300 that wait
# for their reports (100 ms away) and go together: two requests a round.
use constant RELEASE_ROUNDS => 10;
# (b) may have rebuilt the producer: the partition opened again first
sql(q{SELECT outbox_send('release', 'warm', 'r')});
ok(wait_for_empty($node, 30), '(c) the partition is warm');
$broker->command('rtt all 100');
my $requests = requests_sent();
for my $round (1 .. RELEASE_ROUNDS)
{
	sql(q{SELECT count(outbox_send('release', 'head', 'r')) FROM generate_series(1, 5)});
	Time::HiRes::sleep(0.03);
	sql(q{SELECT count(outbox_send('release', 'tail ' || i, 'r')) FROM generate_series(1, 300) i});
	ok(wait_for_empty($node, 30), "(c) round $round delivered");
}
$requests = requests_sent() - $requests;
diag(sprintf('FIGURES release: requests=%d rounds=%d', $requests, RELEASE_ROUNDS));
cmp_ok($requests, '<=', 2 * RELEASE_ROUNDS + 2, '(c) events released together leave in one request');
my @release = @{ consume($broker, 'release') };
is(scalar(grep { $_->{value} =~ /^tail/ } @release), 300 * RELEASE_ROUNDS, '(c) every released event arrived once');

$node->stop;
done_testing();
