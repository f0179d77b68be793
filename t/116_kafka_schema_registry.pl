# Schema Registry end to end on a real Kafka cluster, every record read
# back by the official deserializers (confluent-kafka 2.16.1's
# AvroDeserializer, JSONDeserializer, ProtobufDeserializer through
# tools/registry/read.py), which fetch each record's writer schema by its id:
#  - json_schema and avro against Apicurio Registry 3.3.3, schemas
#    registered by the worker from the SQL text, under load from several
#    sessions with rollbacks (check_delivery: nothing lost, none rolled back
#    sent, per-key order);
#  - a payload that does not fit refused in the sender's transaction, with
#    its SQLSTATE: neither the event nor the business row is stored;
#  - Apicurio unreachable (SIGSTOP) for 30 s under load, with a topic whose
#    schema is registered meanwhile: the events wait, nothing lost, no
#    dead letter;
#  - an Avro schema evolved (a version 2 registered at Apicurio) while
#    events flow to a topic following 'latest': records of both versions,
#    each decoded by its own;
#  - protobuf against the stub registry (Apicurio serves descriptors raw,
#    not base64: tools/registry/README.md), the second message of the file
#    (message indexes [1]);
#  - basic auth, then a bearer token, over TLS with the test's CA (stub);
#  - exactly-once with Apicurio, read back read_committed.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use SchemaRegistry;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $missing = registry_tools_missing();
plan skip_all => $missing if $missing;

my @topics = qw(sr_json sr_avro sr_down sr_down_new sr_evolve sr_proto sr_secure sr_token sr_eos);
my $cluster = start_real_kafka();
$cluster->create_topics((map { [ $_, partitions => 3 ] } @topics),
	[ 'outbox_progress', partitions => 3,
		config => { 'cleanup.policy' => 'compact', 'segment.ms' => 60000 } ]);
my $dir = $PostgreSQL::Test::Utils::tmp_check;
my $apicurio = start_apicurio(dir => "$dir/apicurio");
my $apicurio_rss = $apicurio->rss_kb;
note(sprintf('Apicurio at %s, up in %.1f s, RSS %d MB', $apicurio->url, $apicurio->startup_s,
		$apicurio_rss / 1024));

my $node = new_outbox_node('sr_real', $cluster, shards => 2, conf => qq{
outbox.schema_registry_url = '@{[ $apicurio->url ]}'
outbox.schema_registry_connect_timeout = 500ms
outbox.schema_registry_timeout = 2s
outbox.schema_registry_refresh = 1s
outbox.max_attempts = 1000
});
END { diag(slurp_file($node->logfile)) if $node && !Test::More->builder->is_passing; }
OutboxTest::create_sent_table($node);

# The record every format carries: the load's session, sequence number and
# value (what check_delivery compares).
my $avro_v1 = '{"type":"record","name":"Event","namespace":"shop","fields":['
  . '{"name":"session","type":"int"},{"name":"seq","type":"int"},{"name":"value","type":"string"}]}';
my $avro_v2 = '{"type":"record","name":"Event","namespace":"shop","fields":['
  . '{"name":"session","type":"int"},{"name":"seq","type":"int"},{"name":"value","type":"string"},'
  . '{"name":"note","type":["null","string"],"default":null}]}';
my $json_schema = '{"type":"object","properties":{"session":{"type":"integer"},'
  . '"seq":{"type":"integer"},"value":{"type":"string"}},"required":["session","seq","value"]}';
my $proto = 'syntax = "proto3"; package shop; message Other { string x = 1; }'
  . ' message Event { int32 session = 1; int32 seq = 2; string value = 3; }';

sub varint
{
	my ($n) = @_;
	my $out = '';
	while ($n >= 0x80) { $out .= chr(($n & 0x7f) | 0x80); $n >>= 7; }
	return $out . chr($n);
}

# shop.Event's Protobuf bytes, as hex for a bytea literal
sub event_proto
{
	my ($s, $i, $value) = @_;
	return unpack('H*', "\x08" . varint($s) . "\x10" . varint($i) . "\x1a" . chr(length $value) . $value);
}

# Load as OutboxTest's start_load, with payloads of the topic's format:
# session s sends $per events (every 7th rolled back), keyed "s<s>-k<i % 5>",
# each committed with its row in the business table.
my $next_session = 1;
sub schema_load
{
	my ($topic, %o) = @_;
	my ($first, $sessions, $per) = ($next_session, $o{sessions} // 3, $o{per} // 100);
	$next_session += $sessions;
	my @harnesses;
	for my $s ($first .. $first + $sessions - 1)
	{
		my $sql = '';
		for my $i (1 .. $per)
		{
			my ($key, $value) = ("s$s-k" . ($i % 5), "s$s:$i");
			my $send = $o{protobuf}
			  ? "outbox_send('$topic', '\\x" . event_proto($s, $i, $value) . "'::bytea, convert_to('$key', 'UTF8'))"
			  : "outbox_send('$topic', '{\"session\": $s, \"seq\": $i, \"value\": \"$value\"}'::jsonb, '$key')";
			$sql .= "BEGIN;\nINSERT INTO sent VALUES ($s, $i, '$key', '$value');\nSELECT $send;\n"
			  . ($i % 7 == 0 ? "ROLLBACK;\n" : "COMMIT;\n");
			$sql .= "SELECT pg_sleep($o{sleep});\n" if $o{sleep};
		}
		my $file = PostgreSQL::Test::Utils::tempdir() . "/load_$s.sql";
		PostgreSQL::Test::Utils::append_to_file($file, $sql);
		push @harnesses, IPC::Run::start([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('postgres'), '-f', $file ], '<', \undef, '>', '/dev/null', '2>', "$file.err");
	}
	return { first => $first, last => $first + $sessions - 1, harnesses => \@harnesses };
}

sub finish_load { wait_load($_[0]{harnesses}); }

# The topic's records decoded by the official deserializers: read.py's
# records, with value set to the decoded record's value field (what the
# load committed) and the decoded record kept in {record}.
sub decoded
{
	my ($topic, $registry, $format, %o) = @_;
	my $records = read_registry_records(bootstrap => $cluster->bootstrap, topic => $topic,
		registry => $registry, format => $format, timeout => 120, %o);
	return [ map { { %$_, record => $_->{value}, value => $_->{value}{value} } } @$records ];
}

sub row
{
	my ($topic, $column) = @_;
	return sql("SELECT $column FROM outbox_topic_schema WHERE topic = '$topic' AND part = 'value'");
}

sub wait_resolved
{
	my ($topic) = @_;
	return wait_query($node, 'postgres', "SELECT schema_id IS NOT NULL AND resolved_at IS NOT NULL"
		  . " FROM outbox_topic_schema WHERE topic = '$topic' AND part = 'value'", 30);
}

# A delivered topic: check_delivery on what the deserializers decoded, and
# every record framed with one of @ids. Returns the records.
sub check_topic
{
	my ($label, $load, $topic, $registry, $format, $ids, %o) = @_;
	my $read = sub { decoded($topic, $registry, $format, %o) };
	my $records = $read->();
	check_delivery($label, committed_of($node, $load->{first}, $load->{last}),
		$o{isolation} ? $read : $records);
	my %allowed = map { $_ => 1 } @$ids;
	my @other = grep { !$allowed{ $_->{schema_id} } } @$records;
	is(scalar @other, 0, "$label: every record framed with the registry's id (@$ids)");
	my @mismatch = grep { $_->{record}{value} ne "s$_->{record}{session}:$_->{record}{seq}" } @$records;
	is(scalar @mismatch, 0, "$label: every decoded record has its session and seq");
	return $records;
}

# ---- json_schema and avro with Apicurio, under load ----------------------------
sql(qq{SELECT outbox_topic_schema('sr_json', 'json_schema', schema => '$json_schema')});
sql(qq{SELECT outbox_topic_schema('sr_avro', 'avro', schema => '$avro_v1')});
my $json_load = schema_load('sr_json');
my $avro_load = schema_load('sr_avro');
finish_load($_) for $json_load, $avro_load;
ok(wait_for_empty($node), 'json_schema and avro: the outbox drains');
my $json_id = $apicurio->subject_version('sr_json-value')->{id};
my $avro_id = $apicurio->subject_version('sr_avro-value')->{id};
is(row('sr_json', 'schema_id'), $json_id, 'json_schema: the worker registered the schema at Apicurio');
is(row('sr_avro', 'schema_id'), $avro_id, 'avro: the worker registered the schema at Apicurio');
check_topic('json_schema with Apicurio', $json_load, 'sr_json', $apicurio, 'json_schema', [$json_id]);
check_topic('avro with Apicurio', $avro_load, 'sr_avro', $apicurio, 'avro', [$avro_id]);

# ---- a payload that does not fit: refused in the sender's transaction --------
# The business row and the event in one transaction: the refusal (SQLSTATE
# 22023, naming the topic) rolls back both, and nothing reaches the outbox.
my $refusals = 0;
sub refused
{
	my ($topic, $payload, $what) = @_;
	my $outbox_before = sql('SELECT count(*) FROM outbox');
	$refusals++;
	my ($ret, $out, $err) = $node->psql('postgres', qq{BEGIN;
INSERT INTO sent VALUES (999, $refusals, 'bad', 'bad');
SELECT outbox_send('$topic', $payload);
COMMIT;}, on_error_stop => 1, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	isnt($ret, 0, "$what: refused");
	like($err, qr/ERROR:\s+22023: outbox value of topic "$topic" does not fit its/,
		"$what: by outbox_send, with SQLSTATE 22023 and the topic");
	is(sql('SELECT count(*) FROM sent WHERE session = 999'), '0', "$what: the sender's transaction rolled back");
	is(sql('SELECT count(*) FROM outbox'), $outbox_before, "$what: no event stored");
}
refused('sr_avro', q{'{"session": "one", "seq": 1, "value": "bad"}'::jsonb}, 'avro, a string for an int');
refused('sr_json', q{'{"session": 1, "seq": 2}'::jsonb}, 'json_schema, a required property missing');

# ---- Apicurio unreachable for 30 s under load --------------------------------
# sr_down follows its subject's latest version (looked up again every
# second); sr_down_new is registered from SQL while the registry is away.
my $down_id = $apicurio->register('sr_down-value', 'AVRO', $avro_v1);
sql(q{SELECT outbox_topic_schema('sr_down', 'avro', version => 'latest')});
ok(wait_resolved('sr_down'), 'sr_down: resolved before the outage');
my $down_load = schema_load('sr_down', per => 300, sleep => 0.05);
ok(wait_until(60, sub { @{ consume($cluster, 'sr_down', 20) } >= 20 }), 'sr_down: delivery flows');
my $paused_at = time;
$apicurio->pause;
sql(qq{SELECT outbox_topic_schema('sr_down_new', 'avro', schema => '$avro_v1')});
my $new_load = schema_load('sr_down_new', sessions => 2, per => 50);
my $waiting = wait_query($node, 'postgres',
	q{SELECT bool_or(state = 'waiting_for_registry') FROM outbox_status}, 25);
ok($waiting, 'outbox_status says waiting_for_registry while Apicurio does not answer');
sleep(30 - (time - $paused_at)) if time - $paused_at < 30;
my $held_at_end = sql(q{SELECT count(*) FROM outbox WHERE topic = 'sr_down_new'});
cmp_ok($held_at_end, '>', 0, "sr_down_new's events wait for the registry ($held_at_end after 30 s)");
$apicurio->resume;
note(sprintf('Apicurio resumed after %.1f s', time - $paused_at));
finish_load($_) for $down_load, $new_load;
ok(wait_for_empty($node), 'everything delivered once Apicurio answers again');
is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'no dead letter for the outage');
my $new_id = row('sr_down_new', 'schema_id');
check_topic('registry down, a topic it knew', $down_load, 'sr_down', $apicurio, 'avro', [$down_id]);
check_topic('registry down, a topic registered meanwhile', $new_load, 'sr_down_new', $apicurio, 'avro',
	[$new_id]);
diag(sprintf('FIGURES schema_registry_outage: paused_s=30 held_new_topic=%d waiting_seen=%d',
		$held_at_end, $waiting));

# ---- a schema evolved while events flow --------------------------------------
my $v1 = $apicurio->register('sr_evolve-value', 'AVRO', $avro_v1);
sql(q{SELECT outbox_topic_schema('sr_evolve', 'avro', version => 'latest')});
ok(wait_resolved('sr_evolve'), 'sr_evolve: version 1 resolved');
my $evolve_load = schema_load('sr_evolve', per => 200, sleep => 0.03);
ok(wait_until(60, sub { @{ consume($cluster, 'sr_evolve', 30) } >= 30 }), 'sr_evolve: delivery flows');
my $v2 = $apicurio->register('sr_evolve-value', 'AVRO', $avro_v2);
isnt($v2, $v1, 'version 2 has an id of its own');
ok(wait_query($node, 'postgres', "SELECT schema_id = $v2 FROM outbox_topic_schema WHERE topic = 'sr_evolve'", 30),
	'the worker follows the new latest version');
finish_load($evolve_load);
ok(wait_for_empty($node), 'sr_evolve: drained');
my $evolved = check_topic('schema evolved under load', $evolve_load, 'sr_evolve', $apicurio, 'avro', [ $v1, $v2 ]);
my %by_id;
$by_id{ $_->{schema_id} }++ for @$evolved;
ok($by_id{$v1} && $by_id{$v2}, "records of both versions ($by_id{$v1} of v1, @{[ $by_id{$v2} // 0 ]} of v2)");
my @v2_note = grep { $_->{schema_id} == $v2 && !exists $_->{record}{note} } @$evolved;
is(scalar @v2_note, 0, 'the records of version 2 decode with its field (note, null)');

# ---- protobuf through the stub -----------------------------------------------
my $stub = start_stub_registry(dir => "$dir/stub");
my $proto_id = $stub->register('sr_proto-value', 'PROTOBUF', $proto);
reload_with($node, "outbox.schema_registry_url = '@{[ $stub->url ]}'");
sql("SELECT outbox_topic_schema('sr_proto', 'protobuf', schema_id => $proto_id, message_indexes => '{1}')");
ok(wait_resolved('sr_proto'), 'sr_proto: its schema fetched from the stub');
my $proto_load = schema_load('sr_proto', protobuf => 1);
finish_load($proto_load);
ok(wait_for_empty($node), 'protobuf: drained');
my $protos = check_topic('protobuf with the stub', $proto_load, 'sr_proto', $stub, 'protobuf', [$proto_id]);
is_deeply([ sort keys %{ { map { ($_->{message} => 1) } @$protos } } ], ['shop.Event'],
	'the deserializer finds shop.Event (indexes [1]) for every record');
refused('sr_proto', q{'\\x08ff'::bytea}, 'protobuf, a varint cut short');

# ---- basic auth, then a bearer token, over TLS --------------------------------
my $secure = start_stub_registry(dir => "$dir/secure", user => 'reg-user:pw-7c1d', token => 'tok-9f3e',
	tls => 1);
my $secrets = $node->basedir . '/registry_secrets';
sub write_secrets
{
	open(my $f, '>', $secrets) or die "$secrets: $!";
	chmod 0600, $secrets;
	print $f "$_[0]\n";
	close $f;
}
write_secrets('password=pw-7c1d');
reload_with($node, join "\n", "outbox.schema_registry_url = '@{[ $secure->url ]}'",
	"outbox.schema_registry_user = 'reg-user'", "outbox.schema_registry_secrets_file = '$secrets'",
	"outbox.schema_registry_ca_file = '@{[ $secure->ca_file ]}'");
sql(qq{SELECT outbox_topic_schema('sr_secure', 'json_schema', schema => '$json_schema')});
my $secure_load = schema_load('sr_secure', sessions => 2, per => 50);
finish_load($secure_load);
ok(wait_for_empty($node), 'basic auth over TLS: drained');
my @worker_auth = map { $_->{auth} } @{ $secure->requests };
ok(@worker_auth && !grep({ $_ ne 'basic:reg-user' } @worker_auth),
	"the worker's requests authenticated as reg-user (@worker_auth)");
check_topic('basic auth over TLS', $secure_load, 'sr_secure', $secure, 'json_schema',
	[ row('sr_secure', 'schema_id') ]);

$secure->clear_requests;
write_secrets("password=pw-7c1d\ntoken=tok-9f3e");
sql(qq{SELECT outbox_topic_schema('sr_token', 'avro', schema => '$avro_v1')});
my $token_load = schema_load('sr_token', sessions => 2, per => 50);
finish_load($token_load);
ok(wait_for_empty($node), 'bearer token over TLS: drained');
my @token_auth = map { $_->{auth} } grep { $_->{method} eq 'POST' } @{ $secure->requests };
ok(@token_auth && !grep({ $_ ne 'bearer' } @token_auth), "the worker registered with the token (@token_auth)");
check_topic('bearer token over TLS', $token_load, 'sr_token', $secure, 'avro', [ row('sr_token', 'schema_id') ]);
unlike(slurp_file($node->logfile), qr/pw-7c1d|tok-9f3e/, 'no registry secret in the server log');

# ---- exactly-once with Apicurio, read_committed -------------------------------
reload_with($node, join "\n", "outbox.schema_registry_url = '@{[ $apicurio->url ]}'",
	"outbox.schema_registry_user = ''", "outbox.schema_registry_secrets_file = ''",
	"outbox.schema_registry_ca_file = ''", 'outbox.delivery = exactly_once');
ok(wait_query($node, 'postgres', "SELECT bool_and(delivery = 'exactly_once') FROM outbox_status", 60),
	'the workers deliver exactly once');
sql(qq{SELECT outbox_topic_schema('sr_eos', 'avro', schema => '$avro_v1')});
my $eos_load = schema_load('sr_eos', sessions => 3, per => 100);
finish_load($eos_load);
ok(wait_for_empty($node), 'exactly-once: drained');
my $eos_id = $apicurio->subject_version('sr_eos-value')->{id};
my $eos = check_topic('exactly-once with Apicurio', $eos_load, 'sr_eos', $apicurio, 'avro', [$eos_id],
	isolation => 'read_committed');
my %copies;
$copies{ $_->{value} }++ for @$eos;
is(scalar(grep { $_ > 1 } values %copies), 0, 'exactly-once: no record twice in the read_committed view');
cmp_ok(sql('SELECT sum(transactions_committed) FROM outbox_status'), '>', 0,
	'exactly-once: the events went in Kafka transactions');

diag(sprintf('FIGURES schema_registry_real: apicurio_startup_s=%.1f apicurio_rss_mb=%d apicurio_rss_end_mb=%d',
		$apicurio->startup_s, $apicurio_rss / 1024, $apicurio->rss_kb / 1024));
$node->stop;
done_testing();
