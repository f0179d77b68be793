# Broker faults of a real Kafka cluster, under load: the leader of the
# busiest partitions killed (SIGKILL, so Kafka elects new leaders from the
# ISR), and a broker paused (SIGSTOP) for longer than the request timeout,
# which the controller fences. Each: nothing lost, nothing rolled back
# sent, per-key order kept, duplicates within docs/guarantees.md's bound.
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
# More rounds of the leader kill, for a change to the withdrawal of events
# in flight: before it, about one round in five broke a key's order.
my $kill_rounds = $ENV{OUTBOX_TEST_KILL_ROUNDS} // 1;
my $cluster = start_real_kafka(topics => [ (map { "kill$_:6" } 1 .. $kill_rounds), 'pause:6' ]);
my $node = new_outbox_node('broker_faults', $cluster, shards => $shards);

# The broker leading most of $topic's partitions, and those partitions.
sub busiest_leader
{
	my ($topic) = @_;
	my %led;
	push @{ $led{ $_->{leader} } }, $_->{partition}
	  for @{ $cluster->metadata($topic)->{partitions}{$topic} };
	my ($broker) = sort { @{ $led{$b} } <=> @{ $led{$a} } || $a <=> $b } keys %led;
	return ($broker, $led{$broker});
}

sub led_elsewhere
{
	my ($topic, $broker, $partitions) = @_;
	my $parts = $cluster->metadata($topic)->{partitions}{$topic};
	return !grep { my $p = $_; grep { $_->{partition} == $p && ($_->{leader} == $broker || $_->{leader} < 0) } @$parts }
	  @$partitions;
}

# Takes the busiest leader of $topic out with $out (kill or pause), waits
# until its partitions have other leaders, keeps it out $seconds in all,
# brings it back with $back and waits for the full ISR.
sub leader_out
{
	my ($topic, $out, $back, $seconds) = @_;
	my ($victim, $partitions) = busiest_leader($topic);
	note "$out broker $victim, leader of partitions @$partitions";
	$cluster->$out($victim);
	my $at = time;
	ok(wait_until(60, sub { led_elsewhere($topic, $victim, $partitions) }),
		"$topic: Kafka moves the leaderships of broker $victim");
	my $moved = time - $at;
	sleep $seconds - (time - $at) if time - $at < $seconds;
	$cluster->$back($victim);
	ok($cluster->wait_topic($topic, 3, 90), "$topic: broker $victim back in the ISR");
	return sprintf('out_s=%.1f leaders_moved_s=%.1f', time - $at, $moved);
}

# Requests to the surviving leaders wait for the dead follower and time
# out, events time out in the worker: what it withdraws must include what
# is in flight, or librdkafka renumbers what follows and Kafka writes it
# first (producer.c, outbox_producer_withdraw).
for my $r (1 .. $kill_rounds)
{
	my $label = 'partition leader killed' . ($kill_rounds > 1 ? " (round $r)" : '');
	fault_under_load($node, $cluster, $label, topic => "kill$r", first => 10 * $r - 9,
		bound => $window * $shards,
		fault => sub { leader_out("kill$r", 'kill_broker', 'start_broker', 12) });
}
# longer than socket.timeout.ms (3 s) and message.timeout.ms (5 s)
fault_under_load($node, $cluster, 'broker paused beyond the request timeout', topic => 'pause',
	first => 10 * $kill_rounds + 1, bound => $window * $shards,
	fault => sub { leader_out('pause', 'pause_broker', 'resume_broker', 15) });

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0',
	'broker faults make no dead letters');

$node->stop;
$cluster->stop;
done_testing();
