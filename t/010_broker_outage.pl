# Broker outages: while load commits events, the whole Kafka cluster goes
# down for longer than message.timeout.ms (deliveries time out, the workers
# back off and retry), then comes back; later one broker alone goes down
# and comes back. Every committed event arrives, no rolled-back one does,
# per-key order holds, and the server log reports the outage once per
# worker rather than once per retry, and the recovery. During the full
# outage a second database delivers at the same time, with the same
# guarantees.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => [ 'outage_all:6', 'outage_one:6', 'outage_second:6' ]);
my $node = new_outbox_node('outage', $broker, shards => 2);
$node->safe_psql('postgres', 'CREATE DATABASE second');
$node->safe_psql('second', 'CREATE EXTENSION outbox');

# Waits until the workers have delivered something of the running load, so
# the outage starts with the pipeline busy.
sub wait_for_traffic
{
	my ($topic) = @_;
	return wait_until(30, sub { @{ consume($broker, $topic) } >= 20 });
}

# ---- phase 1: every broker down, longer than message.timeout.ms ----------

my $offset = -s $node->logfile;
my $load = start_load($node, sessions => 3, per_session => 400, keys => 5,
	topic => 'outage_all', first_session => 1, sleep => 0.03);
my $second = start_load($node, db => 'second', sessions => 2, per_session => 400, keys => 5,
	topic => 'outage_second', first_session => 1, sleep => 0.03);
ok(wait_for_traffic('outage_all'), 'delivery flows before the outage');

$broker->command('down all');
my $down_at = time;
# message.timeout.ms is 5000 in the test config: let deliveries time out
sleep 8;
my $pending_during = $node->safe_psql('postgres', 'SELECT count(*) FROM outbox');
note "events waiting in the outbox after 8 s of outage: $pending_during";
ok($pending_during > 0, 'events accumulate in the outbox while Kafka is down');
$broker->command('up all');
my $up_at = time;

ok(wait_until(30, sub { log_since($node, $offset) =~ /Kafka accepts events again/ }),
	'the log says Kafka accepts events again');
note sprintf('first "accepts again" %.1f s after up', time - $up_at);
wait_load($load);
wait_load($second);
ok(wait_for_empty($node), 'the outbox drains after the outage');
ok(wait_query($node, 'second', 'SELECT count(*) = 0 FROM outbox', 120),
	'the second database\'s outbox drains too');

my $r = check_delivery('all brokers down 8 s, 2 shards',
	committed_of($node, 1, 3), consume($broker, 'outage_all'));
check_delivery('all brokers down 8 s, second database',
	committed_events($node, undef, 'second'), consume($broker, 'outage_second'));
note "duplicates after a full outage: $r->{duplicates}";

my $errors = log_count($node, qr/Kafka error/, $offset);
my $again = log_count($node, qr/Kafka accepts events again/, $offset);
diag "log lines during the full outage: 'Kafka error' $errors, 'accepts events again' $again";
ok($errors >= 1, 'the outage is logged');
cmp_ok($errors, '<', 20, 'the outage is logged once-ish per worker (4 here), not once per retry');
ok($again >= 1, 'the recovery is logged');

# ---- phase 2: one broker down during load --------------------------------

# The mock cluster picks partition leaders at random: pin them, so that
# broker 1 leads partitions 0 and 1, and check that some keys of the load
# live there.
$broker->command("leader outage_one $_ " . (1 + int($_ / 2))) for 0 .. 5;
my @on_broker_1 = grep { kafka_partition($_, 6) < 2 }
  map { my $s = $_; map { "s$s-k$_" } 0 .. 4 } 11 .. 13;
note "keys on broker 1's partitions: @on_broker_1";
ok(@on_broker_1 > 0, 'some keys of the load live on broker 1');

$offset = -s $node->logfile;
$load = start_load($node, sessions => 3, per_session => 400, keys => 5,
	topic => 'outage_one', first_session => 11, sleep => 0.03);
ok(wait_for_traffic('outage_one'), 'delivery flows before broker 1 goes down');
$broker->command('down 1');
sleep 8;
$pending_during = $node->safe_psql('postgres', 'SELECT count(*) FROM outbox');
note "events waiting in the outbox after 8 s without broker 1: $pending_during";
ok($pending_during > 0, 'events for broker 1\'s partitions wait while it is down');
$broker->command('up 1');
wait_load($load);
ok(wait_for_empty($node), 'the outbox drains after broker 1 returns');

$r = check_delivery('broker 1 down 8 s, 2 shards',
	committed_of($node, 11, 13), consume($broker, 'outage_one'));
note "duplicates after a one-broker outage: $r->{duplicates}";
$errors = log_count($node, qr/Kafka error/, $offset);
diag "log lines during the one-broker outage: 'Kafka error' $errors";
ok($errors >= 1, 'one broker down: logged');
cmp_ok($errors, '<', 10, 'one broker down: logged once-ish, not once per retry');

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0',
	'an outage makes no dead letters');

$node->stop;
$broker->stop;
done_testing();
