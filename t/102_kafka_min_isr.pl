# min.insync.replicas unmet on a real Kafka cluster. (a) A topic that
# needs all three replicas in sync, with one broker stopped: the leader
# refuses with NOT_ENOUGH_REPLICAS, which librdkafka retries inside the
# producer until message.timeout.ms, so the worker sees the messages time
# out (the mock cluster's injected error reaches the worker as such). (b) Two of the three brokers down: with
# brokers that are also the controllers this also takes the controller
# quorum away, so the ISR cannot shrink and the last broker times out. In
# both the events are retried, never dead-lettered, the error shows in
# outbox_status, other topics that can be written keep flowing, and
# delivery resumes once a broker returns.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $cluster = start_real_kafka(topics => [ 'isr_ok:3', 'isr_two_down:3' ]);
$cluster->create_topic('isr_all', partitions => 3, config => { 'min.insync.replicas' => 3 });
my $node = new_outbox_node('min_isr', $cluster, shards => 1);

sub send_events
{
	my ($topic, $count, $tag) = @_;
	$node->safe_psql('postgres', "SELECT outbox_send('$topic', '$tag-' || i, 'k' || (i % 4))"
		  . " FROM generate_series(1, $count) i");
}

# How many distinct events tagged $tag reached $topic, and how many copies.
sub values_in
{
	my ($topic, $tag) = @_;
	my @copies = grep { $_->{value} =~ /^$tag-/ } @{ consume($cluster, $topic) };
	my %distinct = map { $_->{value} => 1 } @copies;
	return wantarray ? (scalar keys %distinct, scalar @copies) : scalar keys %distinct;
}

sub status { return $node->safe_psql('postgres', "SELECT state || '|' || coalesce(last_error, '') FROM outbox_status WHERE shard = 0"); }
sub dead_letters { return $node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'); }

# ---- (a) NOT_ENOUGH_REPLICAS --------------------------------------------

send_events('isr_all', 10, 'before');
ok(wait_for_empty($node, 60), 'min.insync.replicas=3 with three brokers: delivered');
$cluster->stop_broker(3);
ok($cluster->wait_topic('isr_all', 2, 60) && wait_until(60, sub {
	!grep { @{ $_->{isr} } > 2 } @{ $cluster->metadata('isr_all')->{partitions}{isr_all} } }),
	'one broker stopped: the ISR shrinks to two');
my $offset = -s $node->logfile;
send_events('isr_all', 20, 'refused');
send_events('isr_ok', 20, 'flowing');
ok(wait_until(60, sub { values_in('isr_ok', 'flowing') == 20 }),
	'a topic whose min.insync.replicas is met keeps flowing');
ok(wait_until(60, sub { status() =~ /timed out|in-sync replicas/i }),
	'outbox_status shows the error');
my $status_a = status();
note "outbox_status: $status_a";
# several times message.timeout.ms: the events are retried, never counted
sleep 15;
is(dead_letters(), '0', 'NOT_ENOUGH_REPLICAS never dead-letters');
is($node->safe_psql('postgres', "SELECT count(*) FROM outbox WHERE topic = 'isr_all'"), '20',
	'the refused events wait in the outbox');
my $log_lines = log_count($node, qr/Kafka error/, $offset);
is($node->safe_psql('postgres', "SELECT count(*) > 0 FROM outbox WHERE topic = 'isr_all'"
	  . " AND last_error ~* 'timed out' AND attempts = 0"), 't',
	'the events say why they wait, and no attempt was counted');
my $returned = time;
$cluster->start_broker(3);
ok(wait_for_empty($node, 120), 'the broker back: the refused events are delivered');
my $resumed_a = time - $returned;
is(values_in('isr_all', 'refused'), 20, 'all 20 arrived');

# ---- (b) two brokers down: no ISR, no controller quorum -----------------

ok($cluster->wait_topic('isr_two_down', 3, 90), 'all three in sync again');
$cluster->stop_broker(3);
$cluster->kill_broker(2);
my $down = time;
send_events('isr_two_down', 20, 'stuck');
ok(wait_until(60, sub { status() =~ /\|.+/ }), 'outbox_status shows an error');
my $status_b = status();
note "outbox_status with two brokers down: $status_b";
sleep 15;
is(dead_letters(), '0', 'two brokers down: nothing dead-lettered');
cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM outbox'), '>', 0,
	'two brokers down: events wait in the outbox');
$returned = time;
$cluster->start_broker(2, 3);
ok(wait_for_empty($node, 180), 'brokers back: everything is delivered');
my $resumed_b = time - $returned;
my ($stuck, $copies) = values_in('isr_two_down', 'stuck');
is($stuck, 20, 'all 20 arrived');
# The last broker wrote each attempt to its log without the followers'
# acknowledgement; they all count once the followers are back.
note "copies of the 20 events: $copies";
is(dead_letters(), '0', 'no dead letters at the end');

diag(sprintf("FIGURES min_isr: kafka_error_log_lines=%d resumed_a_s=%.1f resumed_b_s=%.1f"
		  . " two_down_copies_of_20=%d", $log_lines, $resumed_a, $resumed_b, $copies));
diag("FIGURES min_isr status: (a) $status_a; (b) $status_b");

$node->stop;
$cluster->stop;
done_testing();
