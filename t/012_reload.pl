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
my $node = new_outbox_node('reload', $broker, shards => $shards);

# ---- helpers ---------------------------------------------------------------

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
ok(wait_until(30, sub { @{ consume($broker, 'reload') } >= 20 }),
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
ok(wait_until(30, sub {
	my $log = log_since($node, $offset);
	return !grep { $log !~ /outbox "postgres" shard $_: rebuilding the Kafka producer/ } 0 .. $shards - 1;
}), 'each worker says it rebuilt its producer');
note sprintf('producers rebuilt within %.1f s of the reload', time - $reloaded_at);
is(show('outbox.brokers'), $new_brokers, 'outbox.brokers is the second broker alone');
is(show('outbox.kafka_config'), $new_config, 'outbox.kafka_config has linger.ms=1');

wait_load($load);
ok(wait_for_empty($node), 'the outbox drains after the reload');
my $log = log_since($node, $offset);
my $rebuilds = () = $log =~ /rebuilding the Kafka producer/g;
is($rebuilds, $shards, 'one rebuild per worker, not one per pass');
unlike($log, qr/cannot create the Kafka producer/, 'the new settings build a producer');
my $r = check_delivery('reload of brokers and kafka_config during load',
	committed_of($node, 1, 3), consume($broker, 'reload'));
is($r->{duplicates}, 0, 'a rebuild after the batch settled re-sends nothing');

# ---- reloads with an invalid outbox.kafka_config are rejected ---------------

for my $bad ('no.such.property=1', 'enable.idempotence=false')
{
	$offset = -s $node->logfile;
	$node->append_conf('postgresql.conf', "outbox.kafka_config = '$bad'\n");
	$node->reload;
	ok(wait_until(30, sub {
		log_since($node, $offset) =~ /contains errors/ }),
		"reload with kafka_config '$bad': the configuration file is reported to contain errors");
	my ($property) = split /=/, $bad;
	like(log_since($node, $offset), qr/outbox\.kafka_config/, "'$bad': the log names the parameter");
	like(log_since($node, $offset), qr/\Q$property\E/, "'$bad': the log names the property");
	is(show('outbox.kafka_config'), $new_config, "'$bad' rejected: SHOW keeps the old value");
}

# delivery goes on with the producer the workers have
$offset = -s $node->logfile;
$load = start_load($node, sessions => 2, per_session => 150, topic => 'reload',
	first_session => 4, sleep => 0.005);
sleep 1;
$node->reload;    # once more, with the bad line still in the file
wait_load($load);
ok(wait_for_empty($node), 'the outbox drains after the rejected reloads');
$log = log_since($node, $offset);
unlike($log, qr/rebuilding the Kafka producer|cannot create the Kafka producer/,
	'a rejected reload leaves the producers alone');
$r = check_delivery('after rejected kafka_config reloads', committed_of($node, 1, 5),
	consume($broker, 'reload'));
is($r->{duplicates}, 0, 'no duplicates');

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0',
	'no dead letters');
$node->stop;
$broker->stop;
done_testing();
