# The Production guide's TLS and SASL set-ups, as docs/operations.md writes them,
# against a real three-broker Kafka cluster (t/KafkaCluster.pm): SASL_SSL
# with SCRAM-SHA-512 (the credentials in outbox.kafka_config_file), and
# mutual TLS with an encrypted private key (its password in that file).
# Both deliver everything committed under load. Then each mistake an
# operator makes — a wrong password, a CA that did not sign the brokers'
# certificates, an expired client certificate — must say so in the server
# log and in outbox_status.last_error, keep every event in the outbox (no
# dead letter), and deliver once the mistake is fixed and the server
# reloaded. Read back with kcat through the PLAINTEXT listener.
#
# SCRAM needs librdkafka 2.6.1 or later with Kafka 4: with an older one
# (Debian 12's 2.0.2) the test checks the refusal, and the log's hint of
# what to do, once per worker rather than once per retry; then, when
# OUTBOX_TEST_LIBRDKAFKA names a directory with a newer librdkafka.so.1
# (scripts/common.sh's ensure_newer_librdkafka: the one PyPI's
# confluent-kafka wheel bundles), it restarts the server on that library
# (LD_LIBRARY_PATH, the extension as built) and runs every SCRAM case
# there: SCRAM-SHA-512 and SCRAM-SHA-256 deliver, a wrong password is
# refused, nothing is lost.
#
# Real cluster only: the mock cluster has no TLS and no SASL.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# librdkafka before 2.6.1 sends a SCRAM client-final nonce that Kafka 4
# refuses (librdkafka #4895: the client nonce twice; Kafka 3.8.1-3.9
# tolerated it): with such a library SCRAM cannot log in to Kafka 4.4,
# whatever the password. The library the server loads is the one kcat
# loads (same LD_LIBRARY_PATH).
sub librdkafka_version
{
	my ($version) = `kcat -V` =~ /librdkafka (\d+\.\d+\.\d+)/;
	die "cannot tell librdkafka's version from kcat -V" unless $version;
	return $version;
}
sub scram_works { return sprintf('%03d%03d%03d', split /\./, $_[0]) ge '002006001'; }
my $librdkafka = librdkafka_version();
my $scram_ok = scram_works($librdkafka);
note("librdkafka $librdkafka: SCRAM with Kafka 4 " . ($scram_ok ? 'works' : 'cannot work'));

# The newer library the SCRAM cases run on when the machine's cannot.
my $newer_dir = $scram_ok ? undef : $ENV{OUTBOX_TEST_LIBRDKAFKA};
my $newer;
if ($newer_dir)
{
	die "OUTBOX_TEST_LIBRDKAFKA: no librdkafka.so.1 in $newer_dir\n"
	  unless -f "$newer_dir/librdkafka.so.1";
	local $ENV{LD_LIBRARY_PATH} = $newer_dir;
	$newer = librdkafka_version();
	die "OUTBOX_TEST_LIBRDKAFKA: librdkafka $newer in $newer_dir, not 2.6.1 or later\n"
	  unless scram_works($newer);
}

my $user = 'pg-outbox';
my $password = 'scram-pw-' . int(rand(1e9));
my $cluster = start_real_kafka(security => 1, users => { $user => $password },
	topics => [ 'sasl_events:3', 'tls_events:3', 'scram_events:3' ]);

# Everything pg_outbox is given lives in its own directory, as the guide's
# /etc/postgresql/kafka does: owned by the server's user (the tests run as
# it), keys and secrets mode 0600.
my $etc = PostgreSQL::Test::Utils::tempdir('kafka_etc');
my $secrets = "$etc/outbox-secrets.conf";
my $key_password = 'key-pw-' . int(rand(1e9));

sub write_private
{
	my ($path, $text) = @_;
	open(my $fh, '>', $path) or die "$path: $!";
	print $fh $text;
	close $fh or die "$path: $!";
	chmod 0600, $path or die "chmod $path: $!";
}

sub copy_private
{
	my ($from, $to) = @_;
	write_private($to, PostgreSQL::Test::Utils::slurp_file($from));
}

sub write_secrets
{
	my (%props) = @_;
	write_private($secrets,
		"# librdkafka properties, one per line; the value runs to the end of the line\n"
		  . join('', map { "$_ = $props{$_}\n" } sort keys %props));
}

# The CA of the brokers, and a client certificate for mutual TLS whose key
# is encrypted (PKCS#8, AES-256): its password goes in the secrets file.
copy_private($cluster->ca_file, "$etc/ca.pem");
{
	my ($crt, $key) = $cluster->make_cert('pg-outbox-tls');
	copy_private($crt, "$etc/client.pem");
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'openssl', 'pkcs8', '-topk8', '-v2', 'aes-256-cbc', '-in', $key,
		'-out', "$etc/client.key", '-passout', "pass:$key_password" ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "openssl pkcs8: $err";
	chmod 0600, "$etc/client.key";
	like(PostgreSQL::Test::Utils::slurp_file("$etc/client.key"),
		qr/BEGIN ENCRYPTED PRIVATE KEY/, 'the client key is encrypted');
}

# The guide's outbox.kafka_config lines, with the tests' shorter Kafka
# timeouts after them (the production defaults only make a failure wait
# longer: see message.timeout.ms in docs/settings.md and docs/guarantees.md).
sub sasl_config
{
	my ($mechanism) = @_;
	return "security.protocol=SASL_SSL,sasl.mechanisms=$mechanism,"
	  . "ssl.ca.location=$etc/ca.pem,ssl.endpoint.identification.algorithm=https";
}
my $sasl_config = sasl_config('SCRAM-SHA-512');
sub tls_config
{
	my (%o) = @_;
	return "security.protocol=SSL,ssl.ca.location=" . ($o{ca} // "$etc/ca.pem")
	  . ",ssl.certificate.location=" . ($o{cert} // "$etc/client.pem")
	  . ",ssl.key.location=" . ($o{key} // "$etc/client.key")
	  . ",ssl.endpoint.identification.algorithm=https";
}

# outbox.brokers names the SASL_SSL listeners.
{
	package Bootstrap;
	sub new { my ($class, $b) = @_; return bless { b => $b }, $class; }
	sub bootstrap { return $_[0]{b}; }
}

write_secrets('sasl.username' => $user, 'sasl.password' => $password);
my $node = new_outbox_node('kafka_security', Bootstrap->new($cluster->bootstrap_sasl),
	shards => 2,
	kafka_config => "$sasl_config,$OutboxTest::TEST_KAFKA_CONFIG",
	conf => "outbox.kafka_config_file = '$secrets'\n"
	  . "outbox.max_attempts = 3\n"
	  # the production back-off: what a fix waits for after a failure
	  . "outbox.retry_backoff_min = 1s\n"
	  . "outbox.retry_backoff_max = 60s\n");

# One event, recorded in the business table like start_load's (session
# $session, seq 1), so that check_delivery counts it.
sub send_one
{
	my ($topic, $session) = @_;
	OutboxTest::create_sent_table($node);
	sql("BEGIN; INSERT INTO sent VALUES ($session, 1, 'one', 's$session:1');"
		  . " SELECT outbox_send('$topic', 's$session:1', 'one'); COMMIT;");
}

# What outbox_status says of the shards: "state|last_error" per shard.
sub status
{
	return sql("SELECT string_agg(state || '|' || coalesce(last_error, ''), E'\\n' ORDER BY shard)"
		  . " FROM outbox_status");
}

# Changes outbox.kafka_config (and outbox.brokers) and reloads; waits until
# every worker has rebuilt its producer from the new settings.
sub reconfigure
{
	my (%o) = @_;
	my $from = -s $node->logfile;
	my $conf = '';
	$conf .= "outbox.brokers = '$o{brokers}'\n" if $o{brokers};
	$conf .= "outbox.kafka_config = '$o{kafka_config},$OutboxTest::TEST_KAFKA_CONFIG'\n"
	  if $o{kafka_config};
	$conf .= $o{conf} // '';
	$node->append_conf('postgresql.conf', $conf) if length $conf;
	write_secrets(%{ $o{secrets} }) if $o{secrets};
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	ok(wait_until(60, sub { log_count($node, qr/rebuilding the Kafka producer/, $from) >= 2 }),
		"$o{label}: both workers rebuild their producer")
	  or diag(log_since($node, $from));
	return $from;
}

# ---- 1. SASL_SSL with SCRAM-SHA-512 -------------------------------------

# The librdkafka files the node's workers mapped (/proc/PID/maps).
sub loaded_librdkafka
{
	my %paths;
	for my $pid (@{ worker_pids($node) })
	{
		my $maps = eval { PostgreSQL::Test::Utils::slurp_file("/proc/$pid/maps") } // '';
		$paths{$1} = 1 while $maps =~ m{(/\S*librdkafka[^/\s]*\.so\S*)}g;
	}
	return join(',', sort keys %paths);
}

# The logins the brokers refused so far.
sub refused_logins
{
	my $n = 0;
	for my $i (1 .. 3)
	{
		my $log = eval { PostgreSQL::Test::Utils::slurp_file($cluster->dir . "/node$i/server.log") } // '';
		$n += () = $log =~ /Failed authentication with/g;
	}
	return $n;
}

# The hint of a worker whose librdkafka is older than 2.6.1 (errors.c).
my $hint = qr/HINT:  SASL\/SCRAM authentication failed with librdkafka (\S+), which sends a SCRAM message Kafka 4\.0 and later reject \(fixed in librdkafka 2\.6\.1\): with Kafka 4, install librdkafka 2\.6\.1 or later, see docs\/operations\.md\./;

my ($first_s, $sasl_load_s, $sha256_s, $retries_s) = (-1, -1, -1, -1);
my %resume = (wrong_password => -1);
my $t0 = time;
if (!$scram_ok)
{
	# What an operator sees: the broker's refusal, the events kept, and
	# once per worker (not per login retried) what to do about it.
	my $from = 0;
	send_one('sasl_events', 10);
	my $line;
	ok(wait_until(60, sub {
		($line) = grep { /Kafka error: .*SASL authentication error/ } split /\n/, log_since($node, $from);
		return defined $line;
	}), "librdkafka $librdkafka: SCRAM-SHA-512 with the right password is refused by Kafka 4.4");
	diag("librdkafka $librdkafka, right password: $line");
	is(sql('SELECT count(*) FROM outbox'), '1', 'the event stays in the outbox');
	like(log_since($node, $from), qr/started: delivering to .* with librdkafka \Q$librdkafka\E\n/,
		"the workers' start line names librdkafka $librdkafka");
	my $loaded = loaded_librdkafka();
	ok($loaded ne '' && !($newer_dir && index($loaded, $newer_dir) >= 0),
		"the workers loaded the machine's librdkafka: $loaded");
	my $t = time;
	ok(wait_until(60, sub { refused_logins() >= 8 }), 'the brokers refused at least 8 logins')
	  or diag('refused logins: ' . refused_logins());
	$retries_s = time - $t;
	my @hints = log_since($node, $from) =~ /$hint/g;
	diag(sprintf('librdkafka %s: %d refused logins, %d hint(s): %s', $librdkafka,
			refused_logins(), scalar @hints, log_since($node, $from) =~ /(HINT:  SASL[^\n]*)/));
	ok(@hints >= 1 && @hints <= 2, 'the log says what to do once per worker (2 shards), not per retry');
	is(join(',', @hints), join(',', ($librdkafka) x @hints), 'the hint names the loaded librdkafka');
}

# ---- 3a. a wrong password ------------------------------------------------

# Fails, then is fixed; returns the seconds from the reload of the fix to
# an empty outbox. $expect: log => regexp of the server log's line,
# error => regexp of outbox_status.last_error.
sub break_and_fix
{
	my (%o) = @_;
	my $label = $o{label};
	my $from = reconfigure(%{ $o{break} }, label => "$label, broken");
	my $load = start_load($node, topic => $o{topic}, sessions => 2, per_session => 20,
		keys => 3, rollback_every => 7, first_session => $o{first_session});
	wait_load($load);
	my $committed = scalar @{ committed_of($node, $o{first_session}, $o{first_session} + 1) };

	my $line;
	ok(wait_until(90, sub {
		($line) = grep { /$o{log}/ } split /\n/, log_since($node, $from);
		return defined $line;
	}), "$label: the server log says why") or diag(log_since($node, $from));
	diag("$label: log line: " . ($line // 'none'));
	my $status = '';
	ok(wait_until(60, sub { $status = status(); $status =~ /$o{error}/ }),
		"$label: outbox_status.last_error says why");
	diag("$label: outbox_status (state|last_error): $status");

	# Long enough for the messages in flight to time out (5 s) and be
	# settled, and for outbox.max_attempts = 3 back-offs to pass; a longer
	# outage lets the back-off grow (1 s doubling to 60 s).
	my $broken_s = $o{broken_s} // 12;
	sleep $broken_s;
	is(sql('SELECT count(*) FROM outbox'), $committed,
		"$label: every committed event is still in the outbox");
	like(sql('SELECT string_agg(DISTINCT state, \',\') FROM outbox_status'),
		qr/^waiting_for_kafka$/, "$label: the shards are waiting_for_kafka");
	is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', "$label: no dead letters");
	is(sql('SELECT coalesce(max(attempts), 0) FROM outbox'), '0',
		"$label: no attempt counted against the events");
	$status = status();
	diag("$label: outbox_status after $broken_s s: $status");
	like($status, qr/$o{error}/, "$label: last_error still says why");

	my $t = time;
	reconfigure(%{ $o{fix} }, label => "$label, fixed");
	ok(wait_for_empty($node, 120), "$label: delivered after the fix and a reload");
	my $resume = time - $t;
	# a few seconds: the events in flight time out (5 s), the producer is
	# rebuilt, it connects; never the back-off of the failure before
	cmp_ok($resume, '<', 15, "$label: delivery resumes soon after the reload");
	is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', "$label: still no dead letters");
	return $resume;
}

# Every SCRAM case, on topic $topic with sessions from $base + 1: the
# first event, a load, a wrong password and its fix, SCRAM-SHA-256; then
# nothing committed is lost.
sub scram_cases
{
	my ($topic, $base) = @_;
	my $version = librdkafka_version();
	$t0 = time;
	send_one($topic, $base + 10);
	ok(wait_for_empty($node, 120), "librdkafka $version, SCRAM-SHA-512: the first event is delivered");
	$first_s = time - $t0;

	my $load = start_load($node, topic => $topic, sessions => 4, per_session => 150,
		keys => 5, rollback_every => 7, first_session => $base + 1);
	wait_load($load);
	ok(wait_for_empty($node, 180), 'SCRAM-SHA-512: the load is delivered');
	$sasl_load_s = time - $t0;
	is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'SCRAM-SHA-512: no dead letters');

	my $from = -s $node->logfile;
	$resume{wrong_password} = break_and_fix(label => 'wrong password', topic => $topic,
		first_session => $base + 11,
		break => { secrets => { 'sasl.username' => $user, 'sasl.password' => "not-$password" } },
		fix => { secrets => { 'sasl.username' => $user, 'sasl.password' => $password } },
		log => qr/Kafka error: .*(?i:authentication)/,
		error => qr/(?i:authentication)/);
	is(log_count($node, $hint, $from), 0, "wrong password: no hint of an old librdkafka with $version");

	my $t = time;
	reconfigure(label => 'SCRAM-SHA-256', kafka_config => sasl_config('SCRAM-SHA-256'));
	$load = start_load($node, topic => $topic, sessions => 2, per_session => 20,
		keys => 3, rollback_every => 7, first_session => $base + 13);
	wait_load($load);
	ok(wait_for_empty($node, 120), 'SCRAM-SHA-256: delivered');
	$sha256_s = time - $t;
	is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'SCRAM-SHA-256: no dead letters');
	check_delivery("SASL_SSL, librdkafka $version", committed_of($node, $base + 1, $base + 14),
		consume($cluster, $topic));
}

scram_cases('sasl_events', 0) if $scram_ok;

# ---- 2. mutual TLS, encrypted key ----------------------------------------

# Without SCRAM the SASL event waits: it goes once the worker is on TLS.
my $from = -s $node->logfile;
$t0 = time;
reconfigure(label => 'mutual TLS', brokers => $cluster->bootstrap_ssl,
	kafka_config => tls_config(), secrets => { 'ssl.key.password' => $key_password });
send_one('tls_events', 20);
ok(wait_for_empty($node, 120), 'mutual TLS: the first event is delivered');
my $tls_first_s = time - $t0;
my $load = start_load($node, topic => 'tls_events', sessions => 4, per_session => 150,
	keys => 5, rollback_every => 7, first_session => 21);
wait_load($load);
ok(wait_for_empty($node, 180), 'mutual TLS: the load is delivered');
is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'mutual TLS: no dead letters');
is(log_count($node, qr/cannot create the Kafka producer/, $from), 0,
	'mutual TLS: the encrypted key is read with ssl.key.password from the secrets file');

# ---- 3b. a CA that did not sign the brokers' certificates ------------------

my $other_ca = $cluster->make_ca('other-ca');
copy_private($other_ca, "$etc/other-ca.pem");
$resume{untrusted_ca} = break_and_fix(label => 'untrusted CA', topic => 'tls_events',
	first_session => 31,
	break => { kafka_config => tls_config(ca => "$etc/other-ca.pem") },
	fix => { kafka_config => tls_config() },
	log => qr/Kafka error: .*(?i:certificate verify failed)/,
	error => qr/(?i:certificate verify failed)/);

# ---- 3c. an expired client certificate --------------------------------------

{
	my ($crt, $key) = $cluster->make_cert('pg-outbox-expired', expired => 1);
	copy_private($crt, "$etc/expired.pem");
	copy_private($key, "$etc/expired.key");
}
$resume{expired_certificate} = break_and_fix(label => 'expired client certificate',
	topic => 'tls_events', first_session => 41,
	# a long back-off in force when the fix comes: the fix must not wait
	# for it (the first one after a 5 s message timeout: 30 s)
	break => { kafka_config => tls_config(cert => "$etc/expired.pem", key => "$etc/expired.key"),
		secrets => {}, conf => "outbox.retry_backoff_min = 30s\n" },
	fix => { kafka_config => tls_config(), secrets => { 'ssl.key.password' => $key_password },
		conf => "outbox.retry_backoff_min = 1s\n" },
	log => qr/Kafka error: .*(?i:SSL|certificate|handshake)/,
	error => qr/(?i:SSL|certificate|handshake)/);

check_delivery('mutual TLS', committed_of($node, 20, 50), consume($cluster, 'tls_events'));
check_delivery('SASL_SSL event delivered over TLS', committed_of($node, 10, 10),
	consume($cluster, 'sasl_events')) unless $scram_ok;

# ---- 4. SCRAM on a newer librdkafka -----------------------------------------

# The guide's SCRAM set-up again, the server restarted with the newer
# librdkafka.so.1 first in the dynamic linker's path (and kcat with it).
my $newer_s = -1;
SKIP:
{
	skip 'SCRAM ran on the machine\'s librdkafka', 1 if $scram_ok;
	skip "librdkafka $librdkafka cannot log in with SCRAM to Kafka 4 and OUTBOX_TEST_LIBRDKAFKA "
	  . 'names no newer one', 1 unless $newer_dir;
	my $t = time;
	$node->append_conf('postgresql.conf', "outbox.brokers = '" . $cluster->bootstrap_sasl . "'\n"
		  . "outbox.kafka_config = '$sasl_config,$OutboxTest::TEST_KAFKA_CONFIG'\n");
	write_secrets('sasl.username' => $user, 'sasl.password' => $password);
	my $from = -s $node->logfile;
	local $ENV{LD_LIBRARY_PATH} = $newer_dir;
	$node->restart;
	ok(wait_until(30, sub { log_count($node, qr/started: delivering to \S+ with librdkafka \Q$newer\E\n/,
		$from) >= 2 }), "both workers start with librdkafka $newer")
	  or diag(log_since($node, $from));
	my $loaded = loaded_librdkafka();
	is($loaded, "$newer_dir/librdkafka.so.1", "the workers loaded $loaded");
	scram_cases('scram_events', 50);
	$newer_s = time - $t;
}

diag(sprintf("FIGURES kafka security: first_delivery_sasl_s=%.1f sasl_load_s=%.1f "
		  . "first_delivery_tls_s=%.1f resume_wrong_password_s=%.1f resume_untrusted_ca_s=%.1f "
		  . "resume_expired_certificate_s=%.1f dead_letters=%d cluster_startup_s=%.1f "
		  . "scram_sha256_s=%.1f scram_librdkafka=%s old_librdkafka_retries_s=%.1f "
		  . "newer_librdkafka_part_s=%.1f",
		$first_s, $sasl_load_s, $tls_first_s, $resume{wrong_password}, $resume{untrusted_ca},
		$resume{expired_certificate}, sql('SELECT count(*) FROM outbox_dead_letter'),
		$cluster->startup_s, $sha256_s, $scram_ok ? $librdkafka : $newer // 'none', $retries_s,
		$newer_s));

$node->stop;
done_testing();
