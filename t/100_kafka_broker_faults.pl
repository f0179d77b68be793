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
my $cluster = start_real_kafka(topics => [ 'kill:6', 'pause:6' ]);
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

# Open: with the leader killed under load, about one run in four delivers a
# key's few events after later ones of the same key (seen since the fault
# falls inside the load; not reproduced with log_min_messages = debug1).
fault_under_load($node, $cluster, 'partition leader killed', topic => 'kill', first => 1,
	bound => $window * $shards, order_todo => 'open: per-key order after a leader is killed under load',
	fault => sub { leader_out('kill', 'kill_broker', 'start_broker', 12) });
# longer than socket.timeout.ms (3 s) and message.timeout.ms (5 s)
fault_under_load($node, $cluster, 'broker paused beyond the request timeout', topic => 'pause',
	first => 11, bound => $window * $shards,
	fault => sub { leader_out('pause', 'pause_broker', 'resume_broker', 15) });

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0',
	'broker faults make no dead letters');

$node->stop;
$cluster->stop;
done_testing();
