# Per-key order when events time out: librdkafka times messages out one at
# a time, so with the worker kept from its loop (an ACCESS EXCLUSIVE lock
# on the outbox, as VACUUM FULL takes) an event A could time out while the
# next event B of its key still waited, B go out as soon as the leader came
# back, and A follow it when the worker read it again. The worker keeps
# message.timeout.ms for itself and gives librdkafka twice as long, so A
# and B, both still queued when the leader returns, go out in order.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => ['order:1']);
is($broker->command('leader order 0 1'), 'OK', 'broker 1 leads the partition');
my $node = new_outbox_node('timeout_order', $broker, shards => 1,
	kafka_config => 'message.timeout.ms=8000,socket.timeout.ms=3000', conf => q{
outbox.poll_interval = 100ms
});

sub send_event { $node->safe_psql('postgres', "SELECT outbox_send('order', '$_[0]', 'k')"); }

send_event('warm-up');
ok(wait_for_empty($node, 30), 'the producer knows the partition and its leader');

# t = 0: the leader goes; A is produced at 0.5 s and B at 4 s. Before
# the change librdkafka timed A out by 9.5 s and B not before 12 s.
$broker->command('down 1');
my $t0 = time;
sleep 0.5;
send_event('A');
sleep 4 - (time - $t0);
send_event('B');
sleep 0.5;
my $locker = start_locker($node, 'ACCESS EXCLUSIVE');
my $locked_at = time - $t0;
sleep 9.8 - (time - $t0);
$broker->command('up 1');
sleep 12.5 - (time - $t0);
release_locker($node, $locker);
my $released_at = time - $t0;
ok(wait_for_empty($node, 60), 'both events leave the outbox');

my @values = map { $_->{value} } @{ consume($broker, 'order') };
my %first;
$first{ $values[$_] } //= $_ for 0 .. $#values;
diag(sprintf('FIGURES timeout order: arrivals=%s locked_at_s=%.1f leader_back_s=9.8 released_at_s=%.1f',
		join(',', @values), $locked_at, $released_at));
ok(defined $first{A} && defined $first{B}, 'A and B both arrived');
ok(defined $first{A} && defined $first{B} && $first{A} < $first{B},
	'A arrived before B: per-key order holds through a timeout');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0', 'no dead letters');

$node->stop;
$broker->stop;
done_testing();
