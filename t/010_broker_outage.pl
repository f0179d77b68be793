# Broker outages: while load commits events, the whole Kafka cluster goes
# down for longer than message.timeout.ms (deliveries time out, the workers
# back off and retry), then comes back; later one broker alone goes down
# and comes back. Every committed event arrives, no rolled-back one does,
# per-key order holds, and the server log reports the outage once per
# worker rather than once per retry, and the recovery.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => [ 'outage_all:6', 'outage_one:6' ]);
# a test that dies must not leave its broker running
END { local $?; $broker->stop if $broker; }
my $node = new_outbox_node('outage', $broker, shards => 2);

# start_load's psql clients are IPC::Run harnesses: they read their script
# only while the harness is pumped. Keep them fed while the test waits.
sub pump_load
{
	my ($load) = @_;
	for my $h (@$load)
	{
		eval { $h->pump_nb if $h->pumpable; };
	}
}

sub sleep_pumping
{
	my ($load, $seconds) = @_;
	my $end = time + $seconds;
	while (time < $end)
	{
		pump_load($load);
		sleep 0.05;
	}
}

# wait_for_log that keeps the load fed; false on timeout.
sub wait_for_log_pumping
{
	my ($load, $re, $offset, $timeout) = @_;
	my $end = time + ($timeout // 60);
	while (time < $end)
	{
		return 1 if slurp_file($node->logfile, $offset) =~ $re;
		sleep_pumping($load, 0.1);
	}
	return 0;
}

# Committed events of the sessions $first .. $last.
sub committed_of
{
	my ($first, $last) = @_;
	return [ grep { $_->{session} >= $first && $_->{session} <= $last }
		  @{ committed_events($node) } ];
}

sub count_in_log
{
	my ($re, $offset) = @_;
	my $log = slurp_file($node->logfile, $offset);
	my @lines = grep { /$re/ } split /\n/, $log;
	return scalar @lines;
}

# Waits until the workers have delivered something of the running load, so
# the outage starts with the pipeline busy.
sub wait_for_traffic
{
	my ($load, $topic) = @_;
	my $deadline = time + 30;
	while (time < $deadline)
	{
		return 1 if @{ consume($broker, $topic) } >= 20;
		sleep_pumping($load, 0.2);
	}
	return 0;
}

# ---- phase 1: every broker down, longer than message.timeout.ms ----------

my $offset = -s $node->logfile;
my $load = start_load($node, sessions => 3, per_session => 400, keys => 5,
	topic => 'outage_all', first_session => 1, sleep => 0.03);
ok(wait_for_traffic($load, 'outage_all'), 'delivery flows before the outage');

$broker->command('down all');
my $down_at = time;
# message.timeout.ms is 5000 in the test config: let deliveries time out
sleep_pumping($load, 8);
my $pending_during = $node->safe_psql('postgres', 'SELECT count(*) FROM outbox');
note "events waiting in the outbox after 8 s of outage: $pending_during";
ok($pending_during > 0, 'events accumulate in the outbox while Kafka is down');
$broker->command('up all');
my $up_at = time;

ok(wait_for_log_pumping($load, qr/Kafka accepts events again/, $offset, 30),
	'the log says Kafka accepts events again');
note sprintf('first "accepts again" %.1f s after up', time - $up_at);
wait_load($load);
ok(wait_for_empty($node), 'the outbox drains after the outage');

my $r = check_delivery('all brokers down 8 s, 2 shards',
	committed_of(1, 3), consume($broker, 'outage_all'));
note "duplicates after a full outage: $r->{duplicates}";

my $errors = count_in_log(qr/Kafka error/, $offset);
my $again = count_in_log(qr/Kafka accepts events again/, $offset);
diag "log lines during the full outage: 'Kafka error' $errors, 'accepts events again' $again";
ok($errors >= 1, 'the outage is logged');
cmp_ok($errors, '<', 10, 'the outage is logged once-ish, not once per retry');
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
ok(wait_for_traffic($load, 'outage_one'), 'delivery flows before broker 1 goes down');
$broker->command('down 1');
sleep_pumping($load, 8);
$pending_during = $node->safe_psql('postgres', 'SELECT count(*) FROM outbox');
note "events waiting in the outbox after 8 s without broker 1: $pending_during";
ok($pending_during > 0, 'events for broker 1\'s partitions wait while it is down');
$broker->command('up 1');
wait_load($load);
ok(wait_for_empty($node), 'the outbox drains after broker 1 returns');

$r = check_delivery('broker 1 down 8 s, 2 shards',
	committed_of(11, 13), consume($broker, 'outage_one'));
note "duplicates after a one-broker outage: $r->{duplicates}";
$errors = count_in_log(qr/Kafka error/, $offset);
diag "log lines during the one-broker outage: 'Kafka error' $errors";
ok($errors >= 1, 'one broker down: logged');
cmp_ok($errors, '<', 10, 'one broker down: logged once-ish, not once per retry');

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0',
	'an outage makes no dead letters');

$node->stop;
$broker->stop;
done_testing();
