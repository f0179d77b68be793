# ACLs on a real Kafka cluster (KRaft's StandardAuthorizer): pg_outbox's
# principal (its TLS certificate's CN) may WRITE to some topics only. Kafka
# refuses the others with TOPIC_AUTHORIZATION_FAILED, in two ways:
#  - a topic the principal may not even DESCRIBE: the metadata says so,
#    librdkafka fails the message before sending it;
#  - a topic it may DESCRIBE but not WRITE: the produce request is
#    refused, which the idempotent producer's gap-less guarantee turns into
#    a fatal error of the whole producer.
# What docs/guarantees.md promises for both: the refused event counts attempts and
# becomes a dead letter after outbox.max_attempts (not authorized is an
# operator's decision, not a passing state), later events of its key wait
# behind it, everything else keeps flowing, nothing is lost; after a
# GRANT, outbox_dead_letter_retry() delivers it.
#
# Real cluster only: the mock cluster has no ACLs.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $principal = 'pg-outbox-acl';
my $cluster = start_real_kafka(security => 1, acls => 1,
	topics => [ 'allowed_a:3', 'allowed_b:3', 'no_describe:3', 'no_write:3' ]);
$cluster->allow("User:$principal", 'Write', $_) for qw(allowed_a allowed_b);
$cluster->allow("User:$principal", 'Describe', 'no_write');

my $etc = PostgreSQL::Test::Utils::tempdir('kafka_etc');
sub copy_private
{
	my ($from, $to) = @_;
	open(my $fh, '>', $to) or die "$to: $!";
	print $fh PostgreSQL::Test::Utils::slurp_file($from);
	close $fh or die "$to: $!";
	chmod 0600, $to or die "chmod $to: $!";
}
copy_private($cluster->ca_file, "$etc/ca.pem");
{
	my ($crt, $key) = $cluster->make_cert($principal);
	copy_private($crt, "$etc/client.pem");
	copy_private($key, "$etc/client.key");
}

{
	package Bootstrap;
	sub new { my ($class, $b) = @_; return bless { b => $b }, $class; }
	sub bootstrap { return $_[0]{b}; }
}

# The guide's mutual TLS configuration (the key is not encrypted here: the
# key password is t/104's business). One shard: the refused events and the
# others share one worker, its window and its producer.
my $node = new_outbox_node('kafka_acls', Bootstrap->new($cluster->bootstrap_ssl),
	shards => 1,
	kafka_config => "security.protocol=SSL,ssl.ca.location=$etc/ca.pem,"
	  . "ssl.certificate.location=$etc/client.pem,ssl.key.location=$etc/client.key,"
	  . "ssl.endpoint.identification.algorithm=https,$OutboxTest::TEST_KAFKA_CONFIG",
	conf => "outbox.max_attempts = 3\n"
	  . "outbox.retry_backoff_min = 1s\n"
	  . "outbox.retry_backoff_max = 2s\n");

my $t0 = time;
OutboxTest::create_sent_table($node);
sql(q{BEGIN; INSERT INTO sent VALUES (100, 1, 'warm', 's100:1');
      SELECT outbox_send('allowed_a', 's100:1', 'warm'); COMMIT;});
ok(wait_for_empty($node, 120), 'an allowed topic delivers');
my $first_s = time - $t0;

# Refused events: per topic, three of one key and two without a key, sent
# while the allowed topics are under load.
my $from = -s $node->logfile;
my %refused;
for my $topic (qw(no_describe no_write))
{
	for my $i (1 .. 5)
	{
		my $key = $i <= 3 ? "'k-$topic'" : 'NULL';
		push @{ $refused{$topic} },
		  sql("SELECT outbox_send('$topic', '$topic-$i', $key)");
	}
}
$t0 = time;
my @load = (
	@{ start_load($node, topic => 'allowed_a', sessions => 2, per_session => 150,
			keys => 5, rollback_every => 7, first_session => 1) },
	@{ start_load($node, topic => 'allowed_b', sessions => 2, per_session => 150,
			keys => 5, rollback_every => 7, first_session => 3) });
wait_load(\@load);

# The allowed topics drain while the refused events wait for their retries.
ok(wait_query($node, 'postgres', "SELECT count(*) = 0 FROM outbox WHERE topic LIKE 'allowed%'", 180),
	'the allowed topics keep flowing');
my $allowed_s = time - $t0;

my $all = join(',', map { @$_ } values %refused);
ok(wait_query($node, 'postgres', "SELECT count(*) = 10 FROM outbox_dead_letter WHERE id IN ($all)",
		240), 'every refused event becomes a dead letter');
my $dead_s = time - $t0;
my $log = log_since($node, $from);
my $rebuilds = () = $log =~ /the Kafka producer failed, rebuilding it/g;
for my $topic (qw(no_describe no_write))
{
	my $ids = join(',', @{ $refused{$topic} });
	my $rows = sql("SELECT string_agg(DISTINCT attempts || ':' || last_error, ' / ')"
		  . " FROM outbox_dead_letter WHERE id IN ($ids)");
	diag("$topic: dead letters (attempts:last_error): $rows");
	like($rows, qr/^3:.*(?i:authoriz)/, "$topic: dead-lettered after 3 attempts, saying why");
	my $order = sql("SELECT string_agg(id::text, ',' ORDER BY failed_at, id)"
		  . " FROM outbox_dead_letter WHERE id IN ($ids) AND key IS NOT NULL");
	is($order, join(',', @{ $refused{$topic} }[ 0 .. 2 ]),
		"$topic: the events of one key are dead-lettered in their order");
}
my ($refusal) = grep { /Kafka refused/ } split /\n/, $log;
diag("log: " . ($refusal // 'none'));
ok(defined $refusal, 'the server log names the refusal');
is(sql('SELECT count(*) FROM outbox'), '0', 'nothing left in the outbox');
diag('outbox_status: ' . sql(q{SELECT state || ' | dead_lettered=' || dead_lettered
	|| ' | failed_attempts=' || failed_attempts || ' | ' || coalesce(last_error, '') FROM outbox_status}));
like(sql('SELECT last_error FROM outbox_status'), qr/(?i:authoriz)/,
	'outbox_status.last_error says not authorized');

my $allowed = check_delivery('ACLs: allowed topics', committed_events($node),
	[ @{ consume($cluster, 'allowed_a') }, @{ consume($cluster, 'allowed_b') } ]);
is(scalar @{ consume($cluster, 'no_describe') } + scalar @{ consume($cluster, 'no_write') }, 0,
	'nothing reached the refused topics');

# The operator grants WRITE and puts the dead letters back.
$cluster->allow("User:$principal", 'Write', $_) for qw(no_describe no_write);
$t0 = time;
is(sql('SELECT outbox_dead_letter_retry()'), '10', 'the dead letters go back into the outbox');
ok(wait_for_empty($node, 120), 'after the grant they are delivered');
my $granted_s = time - $t0;
for my $topic (qw(no_describe no_write))
{
	my @got = map { $_->{value} } @{ consume($cluster, $topic) };
	my %seen = map { $_ => 1 } @got;
	is(scalar(grep { $seen{"$topic-$_"} } 1 .. 5), 5, "$topic: all five events arrived");
	my @keyed = grep { /^$topic-[123]$/ } @got;
	is("@keyed", join(' ', map { "$topic-$_" } 1 .. 3), "$topic: the keyed ones in their order");
}

# A principal that may write nowhere: Kafka refuses the idempotent
# producer its id (CLUSTER_AUTHORIZATION_FAILED, fatal to the producer).
# That is the whole configuration refused, like a wrong password: no event
# is to blame, so none may count an attempt; they wait, the log and
# last_error say why, and the fix (here: the right certificate) delivers.
{
	my ($crt, $key) = $cluster->make_cert('pg-outbox-nobody');
	copy_private($crt, "$etc/nobody.pem");
	copy_private($key, "$etc/nobody.key");
}
sub use_certificate
{
	my ($name) = @_;
	$node->append_conf('postgresql.conf', "outbox.kafka_config = 'security.protocol=SSL,"
		  . "ssl.ca.location=$etc/ca.pem,ssl.certificate.location=$etc/$name.pem,"
		  . "ssl.key.location=$etc/$name.key,ssl.endpoint.identification.algorithm=https,"
		  . "$OutboxTest::TEST_KAFKA_CONFIG'\n");
	$node->reload;
}
$from = -s $node->logfile;
use_certificate('nobody');
ok(wait_until(30, sub { log_since($node, $from) =~ /rebuilding the Kafka producer/ }),
	'no rights at all: the producer is rebuilt with the new certificate');
sql(q{BEGIN; INSERT INTO sent VALUES (101, 1, 'nobody', 's101:1');
      SELECT outbox_send('allowed_a', 's101:1', 'nobody'); COMMIT;});
sleep 20;
$log = log_since($node, $from);
my ($nobody_line) = $log =~ /(the Kafka producer failed, rebuilding it\n.*DETAIL:.*(?i:authoriz).*)/;
diag('no rights at all: log: ' . ($nobody_line // 'none'));
ok(defined $nobody_line, 'no rights at all: the server log says not authorized');
# each new producer is refused at once: rebuilt after a back-off, not in a loop
my $nobody_rebuilds = () = $log =~ /the Kafka producer failed, rebuilding it/g;
cmp_ok($nobody_rebuilds, '<=', 12, 'no rights at all: the producer is not rebuilt in a loop');
my $nobody_status = sql(q{SELECT state || ' | ' || coalesce(last_error, '') FROM outbox_status});
diag("no rights at all: outbox_status: $nobody_status");
like($nobody_status, qr/(?i:authoriz)/, 'no rights at all: last_error says not authorized');
# Its own refusal (the metadata says not authorized) can come before the
# producer's, and count one attempt; none after that.
my $nobody_attempts = sql('SELECT max(attempts) FROM outbox');
is(sql('SELECT count(*) FROM outbox'), '1', 'no rights at all: the event waits in the outbox');
cmp_ok($nobody_attempts, '<=', 1, 'no rights at all: at most one attempt counted');
is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'no rights at all: no dead letter');
$t0 = time;
use_certificate('client');
ok(wait_for_empty($node, 60), 'no rights at all: delivered once the right certificate is back');
my $nobody_resume_s = time - $t0;
check_delivery('ACLs: allowed topics, at the end', committed_events($node),
	[ @{ consume($cluster, 'allowed_a') }, @{ consume($cluster, 'allowed_b') } ]);

diag(sprintf("FIGURES kafka acls: first_delivery_s=%.1f allowed_drain_s=%.1f all_dead_s=%.1f "
		  . "dead_letters=10 producer_rebuilds=%d duplicates=%d delivered_after_grant_s=%.1f "
		  . "no_rights_rebuilds_in_20s=%d no_rights_attempts=%d no_rights_resume_s=%.1f",
		$first_s, $allowed_s, $dead_s, $rebuilds, $allowed->{duplicates}, $granted_s,
		$nobody_rebuilds, $nobody_attempts, $nobody_resume_s));

$node->stop;
done_testing();
