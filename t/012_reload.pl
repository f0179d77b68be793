# Configuration reloads while events flow: switching outbox.brokers to
# another broker of the same cluster and changing outbox.kafka_config makes
# each worker rebuild its producer (after the batch in flight is settled):
# no loss, no reordering, no duplicates. A reload with an invalid
# outbox.kafka_config is rejected (logged, the old value stays) and
# delivery goes on with the producer it has. A reload of any setting the
# producer reads rebuilds it, saying which librdkafka properties changed;
# one it does not read leaves it alone. A password in the secrets file
# (outbox.kafka_config_file) never reaches the server log, unlike one in
# outbox.kafka_config.
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

# ---- every setting the producer reads rebuilds it --------------------------
# Each reload changes what librdkafka is given; each worker says which of
# its properties changed, rebuilds its producer, and delivers with it.

# The log from $from on has, for every worker, a line naming $property
# among the producer's changed settings, and one saying it was rebuilt.
sub rebuilt_for
{
	my ($from, $property) = @_;
	return wait_until(30, sub {
		my $log = log_since($node, $from);
		return !grep {
			$log !~ /outbox "postgres" shard $_: the Kafka producer's settings changed \((?:[^)\n]*, )?\Q$property\E(?:, [^)\n]*)?\)/
			  || $log !~ /outbox "postgres" shard $_: rebuilding the Kafka producer/
		} 0 .. $shards - 1;
	});
}

my $sent = 0;
# One event per key of a few, delivered with the rebuilt producers.
sub deliver_some
{
	my ($label) = @_;
	$node->safe_psql('postgres', "SELECT outbox_send('reload', '$label-' || i, 'rk' || i)
		FROM generate_series(1, 4) i");
	$sent += 4;
	return wait_for_empty($node, 30);
}

my $files = PostgreSQL::Test::Utils::tempdir();
my $secrets = "$files/kafka-secrets.conf";
sub write_secrets
{
	my ($text) = @_;
	open my $fh, '>', "$secrets.tmp" or die "cannot write $secrets.tmp: $!";
	print $fh $text;
	close $fh;
	chmod 0600, "$secrets.tmp";
	rename "$secrets.tmp", $secrets or die "cannot rename to $secrets: $!";
}
write_secrets("# librdkafka properties, one per line\nlinger.ms = 2\n");

# queue.buffering.max.messages is max(100000, window_size + batch_size)
my @producer_settings = (
	[ 'outbox.window_size = 99500', 'queue.buffering.max.messages' ],
	[ 'outbox.batch_size = 2000', 'queue.buffering.max.messages' ],
	[ 'outbox.window_bytes = 32MB', 'queue.buffering.max.kbytes' ],
	[ 'outbox.max_message_bytes = 2MB', 'message.max.bytes' ],
	[ 'outbox.retry_backoff_min = 100ms', 'reconnect.backoff.ms' ],
	[ 'outbox.retry_backoff_max = 500ms', 'reconnect.backoff.max.ms' ],
	[ "outbox.brokers = '$bootstrap[2]'", 'bootstrap.servers' ],
	[ "outbox.kafka_config = '$OutboxTest::TEST_KAFKA_CONFIG,linger.ms=3'", 'linger.ms' ],
	[ "outbox.kafka_config_file = '$secrets'", 'linger.ms' ],
);
for my $case (@producer_settings)
{
	my ($line, $property) = @$case;
	$offset = -s $node->logfile;
	reload_with($node, $line);
	ok(rebuilt_for($offset, $property), "$line: each worker rebuilds its producer for $property");
	ok(deliver_some($line =~ s/\W+/_/gr), "$line: the rebuilt producers deliver");
}

# A setting the producer does not read leaves it alone.
$offset = -s $node->logfile;
reload_with($node, 'outbox.poll_interval = 900ms');
ok(deliver_some('poll'), 'delivery after a reload of outbox.poll_interval');
sleep 1;
unlike(log_since($node, $offset), qr/settings changed|rebuilding the Kafka producer/,
	'outbox.poll_interval: no rebuild');

# ---- secrets stay out of the server log ---------------------------------------
# The old way, a password in outbox.kafka_config: PostgreSQL logs every
# changed setting's new value at a reload.
$offset = -s $node->logfile;
reload_with($node, "outbox.kafka_config = '$new_config,sasl.password=OLDWAY-SECRET-1'");
ok(rebuilt_for($offset, 'sasl.password'), 'a password in outbox.kafka_config rebuilds the producers');
my $old_way = log_count($node, qr/OLDWAY-SECRET-1/, $offset);
diag("FIGURES password in outbox.kafka_config: $old_way server log line(s) show it after one reload");
cmp_ok($old_way, '>=', 1, 'the old way: the reload writes the password into the server log');
$offset = -s $node->logfile;
reload_with($node, "outbox.kafka_config = '$new_config'");
ok(rebuilt_for($offset, 'sasl.password'), 'without the password the producers are rebuilt');
ok(deliver_some('no_password'), 'the producers rebuilt without the password deliver');

# The secrets file: rebuilt for the changed properties, by name only.
for my $secret ('NEWWAY-SECRET-2', 'NEWWAY-SECRET-3')
{
	# A worker builds its new producer at its next read (poll_interval is
	# 900 ms): one that had not yet would build it from the file written
	# next, and have no change to log.
	sleep 2;
	$offset = -s $node->logfile;
	write_secrets("linger.ms = 2\nsasl.username = outbox\nsasl.password = $secret\n");
	$node->reload;
	ok(rebuilt_for($offset, 'sasl.password'), "$secret: the new secrets file rebuilds the producers");
	ok(deliver_some(lc $secret =~ s/\W+/_/gr), "$secret: the rebuilt producers deliver");
	my $seen = log_count($node, qr/\Q$secret\E/, $offset);
	diag("FIGURES password in outbox.kafka_config_file: $seen server log line(s) show it after the reload");
	is($seen, 0, "$secret: the server log does not show the password");
}

$r = check_delivery('after reloads of every producer setting', committed_of($node, 1, 5),
	[ grep { $_->{value} =~ /^s\d+:/ } @{ consume($broker, 'reload') } ]);
my $extra = grep { $_->{value} !~ /^s\d+:/ } @{ consume($broker, 'reload') };
is($extra, $sent, "the $sent events sent between the reloads all arrived once");

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0',
	'no dead letters');
$node->stop;
$broker->stop;
done_testing();
