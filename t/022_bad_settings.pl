# Bad settings: each bad value in postgresql.conf is refused at reload with
# a clear log line (among them librdkafka properties that would run a
# command or load a library, and secrets files others can read), the old
# value stays in force, the workers keep running
# and the outbox is untouched; a bad outbox.shards at startup is reported
# clearly; librdkafka settings that only fail when the producer is built
# are logged once and leave the events in the outbox; an unreachable Kafka
# keeps the events (no attempt counted, no dead letter), is logged once,
# and everything is delivered once outbox.brokers is corrected.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $broker = start_broker(topics => ['bad:2']);
my $shards = 2;
my $node = new_outbox_node('bad', $broker, shards => $shards, conf => "outbox.enabled = off\n");
my $conf_file = $node->data_dir . '/postgresql.conf';
my $baseline = slurp_file($conf_file);

# Replaces the file atomically: the postmaster may still be reading it
# for the previous reload.
sub write_conf
{
	my ($extra) = @_;
	open my $fh, '>', "$conf_file.tmp" or die "cannot write $conf_file.tmp: $!";
	print $fh $baseline, $extra // '';
	close $fh;
	chmod 0600, "$conf_file.tmp";
	rename "$conf_file.tmp", $conf_file or die "cannot rename to $conf_file: $!";
}

# Reloads and waits until the postmaster has read the file (a new
# connection inherits the postmaster's load time).
sub reload_and_wait
{
	my $before = sql('SELECT pg_conf_load_time()');
	$node->reload;
	$node->poll_query_until('postgres', "SELECT pg_conf_load_time() > '$before'")
	  or die 'the reload was not processed';
}

# The worker pids as one string, "pid,pid".
sub worker_list { return join(',', @{ worker_pids($node) }); }

sql(q{SELECT outbox_send('bad', 'kept-' || i, 'k' || i) FROM generate_series(1, 5) i});
my $rows = sql('SELECT count(*) FROM outbox');
my $rows_digest = sql('SELECT md5(string_agg(id || topic || payload::text || attempts, \',\' ORDER BY id)) FROM outbox');
my $pids = worker_list();
is(scalar(split /,/, $pids), $shards, 'both workers run (paused)');

# Secrets files (outbox.kafka_config_file) that must be refused.
my $files = PostgreSQL::Test::Utils::tempdir();
sub secrets_file
{
	my ($name, $mode, $text) = @_;
	my $path = "$files/$name";
	PostgreSQL::Test::Utils::append_to_file($path, $text);
	chmod $mode, $path;
	return $path;
}
my $shared_file = secrets_file('shared.conf', 0640, "sasl.password=x\n");
my $reserved_file = secrets_file('reserved.conf', 0600,
	"# a comment\nssl.engine.location = /tmp/engine.so\n");
my $garbage_file = secrets_file('garbage.conf', 0600, "\nsasl.password\n");

# ---- bad values at reload -------------------------------------------------
# [line, what the log must say, parameter to SHOW, value it must keep]
my @cases = (
	[ 'outbox.no_such = 1',
	  qr/invalid configuration parameter name "outbox\.no_such".*\n.*"outbox" is a reserved prefix/,
	  undef, undef ],
	[ 'outbox.batch_size = 0',
	  qr/0 is outside the valid range for parameter "outbox\.batch_size" \(1 \.\. 100000\)/,
	  'outbox.batch_size', '1000' ],
	[ 'outbox.batch_size = -5',
	  qr/-5 is outside the valid range for parameter "outbox\.batch_size"/,
	  'outbox.batch_size', '1000' ],
	[ q{outbox.message_format = 'xml'},
	  qr/invalid value for parameter "outbox\.message_format": "xml"(?s:.*)Available values: envelope, payload/,
	  'outbox.message_format', 'payload' ],
	[ q{outbox.kafka_config = 'garbage'},
	  qr/invalid outbox\.kafka_config\n.*DETAIL:  "garbage" is not of the form name=value/,
	  'outbox.kafka_config', $OutboxTest::TEST_KAFKA_CONFIG ],
	[ q{outbox.kafka_config = 'no.such.property=1'},
	  qr/invalid outbox\.kafka_config\n.*DETAIL:  No such configuration property: "no\.such\.property"/,
	  'outbox.kafka_config', $OutboxTest::TEST_KAFKA_CONFIG ],
	[ q{outbox.kafka_config = 'bootstrap.servers=x:1'},
	  qr/invalid outbox\.kafka_config\n.*DETAIL:  property "bootstrap\.servers" is set by pg_outbox and cannot be changed here/,
	  'outbox.kafka_config', $OutboxTest::TEST_KAFKA_CONFIG ],
	[ q{outbox.kafka_config = 'enable.idempotence=false'},
	  qr/invalid outbox\.kafka_config\n.*DETAIL:  property "enable\.idempotence" is set by pg_outbox/,
	  'outbox.kafka_config', $OutboxTest::TEST_KAFKA_CONFIG ],
	# properties that run code in the server: a command, a library
	(map { [ qq{outbox.kafka_config = '$_'},
		qr/invalid outbox\.kafka_config\n.*DETAIL:  property "\Q@{[ (split \/=\/)[0] ]}\E" is set by pg_outbox and cannot be changed here/,
		'outbox.kafka_config', $OutboxTest::TEST_KAFKA_CONFIG ] }
	  'sasl.kerberos.kinit.cmd=touch /tmp/outbox-kinit', 'ssl.engine.location=/tmp/engine.so',
	  'ssl.engine.id=dynamic', 'ssl.providers=/tmp/provider.so', 'ssl_engine_callback_data=1',
	  'plugin.library.paths=/tmp/plugin.so', 'interceptors=1', 'topic.opaque=1'),
	# pasted into the default kinit command line (a shell's) as they are
	(map { [ qq{outbox.kafka_config = '$_'},
		qr/invalid outbox\.kafka_config\n.*DETAIL:  property "\Q@{[ (split \/=\/)[0] ]}\E" may contain only letters, digits and/,
		'outbox.kafka_config', $OutboxTest::TEST_KAFKA_CONFIG ] }
	  'sasl.kerberos.principal=x;touch /tmp/outbox-kinit;true',
	  'sasl.kerberos.keytab=/k"$(touch /tmp/outbox-kinit)"'),
	[ q{outbox.kafka_config_file = 'secrets.conf'},
	  qr/invalid outbox\.kafka_config_file\n.*DETAIL:  "secrets\.conf" is not an absolute path/,
	  'outbox.kafka_config_file', '' ],
	[ q{outbox.kafka_config_file = '/nonexistent/secrets.conf'},
	  qr/invalid outbox\.kafka_config_file\n.*DETAIL:  could not open file "\/nonexistent\/secrets\.conf": No such file/,
	  'outbox.kafka_config_file', '' ],
	[ qq{outbox.kafka_config_file = '$shared_file'},
	  qr/invalid outbox\.kafka_config_file\n.*DETAIL:  file ".*shared\.conf" has group or world access/,
	  'outbox.kafka_config_file', '' ],
	[ qq{outbox.kafka_config_file = '$reserved_file'},
	  qr/invalid outbox\.kafka_config_file\n.*DETAIL:  file ".*reserved\.conf", line 2: property "ssl\.engine\.location" is set by pg_outbox/,
	  'outbox.kafka_config_file', '' ],
	[ qq{outbox.kafka_config_file = '$garbage_file'},
	  qr/invalid outbox\.kafka_config_file\n.*DETAIL:  file ".*garbage\.conf", line 2: not of the form name=value/,
	  'outbox.kafka_config_file', '' ],
	[ q{outbox.kafka_config = 'message.timeout.ms=soon'},
	  qr/invalid outbox\.kafka_config\n.*DETAIL:  .*message\.timeout\.ms/,
	  'outbox.kafka_config', $OutboxTest::TEST_KAFKA_CONFIG ],
	[ 'outbox.poll_interval = 0',
	  qr/0 ms is outside the valid range for parameter "outbox\.poll_interval"/,
	  'outbox.poll_interval', '1s' ],
	[ q{outbox.brokers = ''},
	  qr/invalid value for parameter "outbox\.brokers": ""\n.*DETAIL:  outbox\.brokers must list at least one host:port/,
	  'outbox.brokers', $broker->bootstrap ],
	[ 'outbox.max_attempts = 0',
	  qr/0 is outside the valid range for parameter "outbox\.max_attempts"/,
	  'outbox.max_attempts', '10' ],
	[ 'outbox.retry_backoff_min = -1',
	  qr/-1 ms is outside the valid range for parameter "outbox\.retry_backoff_min"/,
	  'outbox.retry_backoff_min', '200ms' ],
	[ q{outbox.enabled = 'maybe'},
	  qr/parameter "outbox\.enabled" requires a Boolean value/,
	  'outbox.enabled', 'off' ],
	[ 'outbox.shards = 4',
	  qr/parameter "outbox\.shards" cannot be changed without restarting the server/,
	  'outbox.shards', $shards ],
	[ q{outbox.max_workers = 3},
	  qr/parameter "outbox\.max_workers" cannot be changed without restarting the server/,
	  'outbox.max_workers', '16' ],
	[ q{outbox.databases = 'postgres,,other'},
	  qr/invalid value for parameter "outbox\.databases".*\n.*DETAIL:  outbox\.databases must be '\*' or database names separated by commas/,
	  'outbox.databases', '*' ],
);

for my $case (@cases)
{
	my ($line, $log_re, $param, $old) = @$case;
	my $offset = -s $node->logfile;
	write_conf("$line\n");
	$node->reload;
	my $ok = eval {
		local $PostgreSQL::Test::Utils::timeout_default = 30;
		$node->wait_for_log(qr/configuration file ".*" contains errors/, $offset);
		1;
	};
	ok($ok, "$line: the reload reports errors in the file");
	my $log = log_since($node, $offset);
	like($log, $log_re, "$line: the log says why");
	my ($why) = $log =~ /((?:LOG|WARNING|ERROR):  (?!received SIGHUP|configuration file).*)/;
	note("$line -> $why");
	if (defined $param)
	{
		is(sql("SHOW $param"), $old, "$line: $param keeps its value");
	}
	else
	{
		my ($ret, $out, $err) = $node->psql('postgres', 'SHOW outbox.no_such');
		isnt($ret, 0, "$line: the unknown parameter does not exist");
	}
	write_conf('');
	reload_and_wait();
}
is(worker_list(), $pids, 'the workers ran through all the bad reloads');
is(sql('SELECT count(*) FROM outbox'), $rows, 'the outbox still holds its rows');
is(sql('SELECT md5(string_agg(id || topic || payload::text || attempts, \',\' ORDER BY id)) FROM outbox'),
	$rows_digest, 'the rows are unchanged');
unlike(slurp_file($node->logfile), qr/terminated by signal|PANIC/, 'no crash');

# The same values are refused from SQL too.
for my $case (
	[ q{ALTER SYSTEM SET outbox.kafka_config = 'garbage'}, qr/invalid outbox\.kafka_config/ ],
	[ q{ALTER SYSTEM SET outbox.batch_size = 0}, qr/outside the valid range/ ],
	[ q{ALTER SYSTEM SET outbox.no_such = 1}, qr/unrecognized configuration parameter "outbox\.no_such"/ ],
	[ q{SET outbox.max_message_bytes = 0}, qr/outside the valid range/ ],
	[ q{SET outbox.batch_size = 10}, qr/cannot be changed now/ ])
{
	my ($stmt, $re) = @$case;
	my ($ret, $out, $err) = $node->psql('postgres', $stmt);
	isnt($ret, 0, "$stmt fails");
	like($err, $re, "$stmt: clear error");
}
ok(!-s $node->data_dir . '/postgresql.auto.conf'
	  || slurp_file($node->data_dir . '/postgresql.auto.conf') !~ /outbox/,
	'nothing was written to postgresql.auto.conf');

# ---- bad outbox.shards at startup -----------------------------------------
for my $bad (0, 100)
{
	$node->stop;
	my $offset = -s $node->logfile;
	write_conf("outbox.shards = $bad\n");
	my $started = $node->start(fail_ok => 1);
	my $log = log_since($node, $offset);
	my ($said) = $log =~ /((?:FATAL|ERROR|WARNING|LOG):  [^\n]*outbox\.shards[^\n]*)/;
	diag("FIGURES outbox.shards = $bad at startup: " . ($started ? 'server STARTED' : 'server refused to start')
		  . '; log: ' . ($said // '(nothing about outbox.shards)'));
	like($log, qr/outbox\.shards/, "outbox.shards = $bad: the log names the parameter");
	like($log, qr/$bad is outside the valid range for parameter "outbox\.shards" \(1 \.\. 64\)/,
		"outbox.shards = $bad: the log says the valid range");
	ok(!$started, "outbox.shards = $bad prevents the server from starting");
	if ($started)
	{
		diag("outbox.shards = $bad: SHOW outbox.shards = " . sql('SHOW outbox.shards')
			  . ', workers: ' . worker_list());
		$node->stop;
	}
}
write_conf('');
$node->start;
is(sql('SELECT count(*) FROM outbox'), $rows, 'the rows survived the failed starts');

# ---- a producer setting librdkafka refuses only when the producer is built --
# A CA file that does not exist is a valid property value (the reload
# accepts it) but rd_kafka_new() fails: the worker says so once and keeps
# the rows.
my $tls = 'security.protocol=ssl,ssl.ca.location=/nonexistent/ca.pem';
my $offset = -s $node->logfile;
write_conf(qq{outbox.enabled = on\noutbox.kafka_config = '$OutboxTest::TEST_KAFKA_CONFIG,$tls'\n});
reload_and_wait();
is(sql('SHOW outbox.kafka_config'), "$OutboxTest::TEST_KAFKA_CONFIG,$tls", 'missing CA file: the reload accepts it');
my $cannot = qr/outbox "postgres" shard \d: cannot create the Kafka producer, waiting for a settings change: [^\n]*ssl\.ca\.location/;
ok(eval { local $PostgreSQL::Test::Utils::timeout_default = 30; $node->wait_for_log($cannot, $offset); 1 }, 'missing CA file: the worker says it cannot create the producer');
sleep 4;
my $cannot_lines = () = log_since($node, $offset) =~ /$cannot/g;
my ($cannot_line) = log_since($node, $offset) =~ /(cannot create the Kafka producer[^\n]*)/;
diag("FIGURES missing CA file: $cannot_lines 'cannot create the Kafka producer' lines in ~5 s ($shards shards): "
	  . ($cannot_line // ''));
cmp_ok($cannot_lines, '<=', $shards, 'missing CA file: logged once per worker');
is(sql('SELECT count(*) FROM outbox WHERE attempts = 0'), $rows, 'missing CA file: the rows stay, no attempt counted');
is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'missing CA file: no dead letters');
unlike(log_since($node, $offset), qr/terminated by signal|PANIC/, 'missing CA file: no crash');

# ---- unreachable Kafka ----------------------------------------------------
# message.timeout.ms=5000: every ~5 s the batch times out (retriable).
$offset = -s $node->logfile;
write_conf("outbox.enabled = on\noutbox.brokers = '127.0.0.1:1'\n");
reload_and_wait();
my $t0 = time;
sleep 22;
my $log = log_since($node, $offset);
my @kafka_errors = $log =~ /(outbox "postgres" shard \d: Kafka error: [^\n]*)/g;
diag(sprintf('FIGURES unreachable Kafka: %d "Kafka error" lines in %.0f s (%d shards): %s',
		scalar @kafka_errors, time - $t0, $shards, join(' | ', @kafka_errors)));
cmp_ok(scalar @kafka_errors, '>=', 1, 'unreachable: the log says Kafka cannot be reached');
cmp_ok(scalar @kafka_errors, '<=', 2 * $shards, 'unreachable: said once (or twice) per worker, not once per retry');
is(sql('SELECT count(*) FROM outbox'), $rows, 'unreachable: no event lost');
is(sql('SELECT coalesce(max(attempts), 0) FROM outbox'), '0', 'unreachable: no attempt counted');
is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'unreachable: no dead letters');
unlike($log, qr/terminated by signal|PANIC/, 'unreachable: no crash');

# The right broker: everything goes out.
write_conf("outbox.enabled = on\n");
reload_and_wait();
$t0 = time;
ok(wait_for_empty($node, 60), 'after outbox.brokers is corrected, the outbox drains');
diag(sprintf('FIGURES delivered %.1f s after the brokers were corrected', time - $t0));
my %got = map { $_->{value} => 1 } @{ consume($broker, 'bad') };
is(scalar(grep { $got{"kept-$_"} } 1 .. 5), 5, 'all five events are in Kafka');

$node->stop;
$broker->stop;
done_testing();
