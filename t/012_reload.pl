# Configuration reloads while events flow: switching outbox.brokers to
# another broker of the same cluster and changing outbox.kafka_config makes
# each worker rebuild its producer (after the batch in flight is settled):
# no loss, no reordering, no duplicates. A reload with an invalid
# outbox.kafka_config is rejected (logged, the old value stays) and
# delivery goes on with the producer it has.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $shards = 2;
my $broker = start_broker(topics => [ 'reload:6' ]);
# a test that dies must not leave its broker running
END { local $?; $broker->stop if $broker; }
my $node = new_outbox_node('reload', $broker, shards => $shards);

# ---- helpers ---------------------------------------------------------------

# start_load's psql clients are IPC::Run harnesses: they read their script
# only while the harness is pumped. Keep them fed while the test waits.
sub pump_load
{
	my ($load) = @_;
	for my $h (@{ $load // [] })
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

sub wait_until
{
	my ($load, $timeout, $check) = @_;
	my $end = time + $timeout;
	while (time < $end)
	{
		my $ok = eval { $check->() };
		return 1 if $ok;
		sleep_pumping($load, 0.1);
	}
	return 0;
}

sub log_since
{
	my ($offset) = @_;
	return slurp_file($node->logfile, $offset);
}

sub committed_of
{
	my ($first, $last) = @_;
	return [ grep { $_->{session} >= $first && $_->{session} <= $last }
		  @{ committed_events($node) } ];
}

sub show
{
	my ($name) = @_;
	return $node->safe_psql('postgres', "SHOW $name");
}

my @bootstrap = split /,/, $broker->bootstrap;
is(scalar @bootstrap, 3, 'the cluster has three brokers');
my $old_config = show('outbox.kafka_config');

# ---- a valid reload during load: other broker list, other Kafka config ------

my $load = start_load($node, sessions => 3, per_session => 300, topic => 'reload',
	first_session => 1, sleep => 0.02);
ok(wait_until($load, 30, sub { @{ consume($broker, 'reload') } >= 20 }),
	'delivery flows before the reload');

my $new_brokers = $bootstrap[1];
my $new_config = "$OutboxTest::TEST_KAFKA_CONFIG,linger.ms=1";
my $offset = -s $node->logfile;
$node->append_conf('postgresql.conf', qq{
outbox.brokers = '$new_brokers'
outbox.kafka_config = '$new_config'
});
$node->reload;
my $reloaded_at = time;
ok(wait_until($load, 30, sub {
	my $log = log_since($offset);
	return !grep { $log !~ /outbox shard $_: rebuilding the Kafka producer/ } 0 .. $shards - 1;
}), 'each worker says it rebuilt its producer');
note sprintf('producers rebuilt within %.1f s of the reload', time - $reloaded_at);
is(show('outbox.brokers'), $new_brokers, 'outbox.brokers is the second broker alone');
is(show('outbox.kafka_config'), $new_config, 'outbox.kafka_config has linger.ms=1');

wait_load($load);
ok(wait_for_empty($node), 'the outbox drains after the reload');
my $log = log_since($offset);
my $rebuilds = () = $log =~ /rebuilding the Kafka producer/g;
is($rebuilds, $shards, 'one rebuild per worker, not one per pass');
unlike($log, qr/cannot create the Kafka producer/, 'the new settings build a producer');
my $r = check_delivery('reload of brokers and kafka_config during load',
	committed_of(1, 3), consume($broker, 'reload'));
is($r->{duplicates}, 0, 'a rebuild after the batch settled re-sends nothing');

# ---- reloads with an invalid outbox.kafka_config are rejected ---------------

for my $bad ('no.such.property=1', 'enable.idempotence=false')
{
	$offset = -s $node->logfile;
	$node->append_conf('postgresql.conf', "outbox.kafka_config = '$bad'\n");
	$node->reload;
	ok(wait_until(undef, 30, sub {
		log_since($offset) =~ /contains errors/ }),
		"reload with kafka_config '$bad': the configuration file is reported to contain errors");
	my ($property) = split /=/, $bad;
	like(log_since($offset), qr/outbox\.kafka_config/, "'$bad': the log names the parameter");
	like(log_since($offset), qr/\Q$property\E/, "'$bad': the log names the property");
	is(show('outbox.kafka_config'), $new_config, "'$bad' rejected: SHOW keeps the old value");
}

# delivery goes on with the producer the workers have
$offset = -s $node->logfile;
$load = start_load($node, sessions => 2, per_session => 150, topic => 'reload',
	first_session => 4, sleep => 0.005);
sleep_pumping($load, 1);
$node->reload;    # once more, with the bad line still in the file
wait_load($load);
ok(wait_for_empty($node), 'the outbox drains after the rejected reloads');
$log = log_since($offset);
unlike($log, qr/rebuilding the Kafka producer|cannot create the Kafka producer/,
	'a rejected reload leaves the producers alone');
$r = check_delivery('after rejected kafka_config reloads', committed_of(1, 5),
	consume($broker, 'reload'));
is($r->{duplicates}, 0, 'no duplicates');

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0',
	'no dead letters');
$node->stop;
$broker->stop;
done_testing();
