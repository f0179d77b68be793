# Schema Registry framing, read back byte for byte with kcat, against the
# stub registry (tools/registry/stub-registry.js: Confluent's REST calls,
# auth, TLS, faults through its control port):
#  - json_schema registered from SQL, a key schema, a fixed id, a subject's
#    version, Protobuf with the path [0] and a nested one;
#  - 'latest' looked up again while events flow: a new version's id;
#  - the registry down under load: the topic's events wait (state
#    waiting_for_registry, last_error, no attempt, no dead letter), other
#    topics flow, all delivered once it is back;
#  - a refusal (no such version) blames the events: attempts counted;
#  - basic auth (a wrong password waits, its 401 in last_error without the
#    password), a bearer token, fail-over between two URLs, TLS with a CA
#    file.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use SchemaRegistry;
use IPC::Run;
use JSON::PP ();
use Time::HiRes ();
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::RealBin/..";
# the Confluent deserializers (read.py's venv), from scripts/common.sh's
# ensure_registry_tools; without them the records are checked byte for
# byte only
my $deserializers = -x "$SchemaRegistry::VENV/bin/python";

my $stubs = 0;
sub start_stub
{
	my $stub = start_stub_registry(dir => "${PostgreSQL::Test::Utils::tmp_check}/stub_registry_" . ++$stubs, @_);
	note 'stub registry at ' . $stub->url;
	return $stub;
}

# ---- reading records back byte for byte -------------------------------------
# [{key, value}] of a one-partition topic, in order; undef for a null.
sub consume_raw
{
	my ($broker, $topic) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-C', '-b', $broker->bootstrap, '-t', $topic, '-e', '-q',
		'-f', '%K:%k%S:%s%h\n' ], '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(120))
	  or die "kcat failed: $err";
	my @records;
	while (length $out)
	{
		my %r;
		for my $part ('key', 'value')
		{
			$out =~ s/^(-?\d+)://s or die "kcat output not understood: $out";
			my $len = $1;
			$r{$part} = $len < 0 ? undef : substr($out, 0, $len, '');
		}
		$out =~ s/^([^\n]*)\n//s or die "kcat headers not understood";
		$r{headers} = $1;
		push @records, \%r;
	}
	return \@records;
}

sub framed
{
	my ($id, $body, @indexes) = @_;
	return pack('CN', 0, $id) . join('', map { chr } @indexes) . $body;
}

sub hex_of { return unpack('H*', $_[0] // '') }

# ---- set-up -------------------------------------------------------------
my $stub = start_stub();
my $stub_url = $stub->url;
my @topics = qw(sr_json sr_key sr_fixed sr_proto sr_nested sr_avro sr_evolve sr_latest
  sr_down sr_other sr_auth sr_token sr_failover sr_tls sr_env
  sr_drain_plain sr_drain_json sr_drain_avro);
my $broker = start_broker(topics => [ map { "$_:1" } @topics ]);
our $node = new_outbox_node('sr', $broker, message_format => 'payload', conf => qq{
outbox.schema_registry_url = '$stub_url'
outbox.schema_registry_connect_timeout = 500ms
outbox.schema_registry_timeout = 2s
outbox.schema_registry_refresh = 500ms
outbox.max_attempts = 1000
});
my $json_text = sql(q{SELECT '{"n": 1}'::jsonb::text});
END { diag(slurp_file($node->logfile)) if $node && !Test::More->builder->is_passing; }

sub row { return sql("SELECT $_[1] FROM outbox_topic_schema WHERE topic = '$_[0]' AND part = 'value'") }

# The senders check a payload against the schema text the workers fetched:
# a row that finds its schema at the registry takes events once resolved.
sub wait_resolved
{
	my ($topic) = @_;
	return wait_query($node, 'postgres', "SELECT bool_and(schema_text IS NOT NULL AND resolved_at IS NOT NULL)"
		  . " FROM outbox_topic_schema WHERE topic = '$topic'", 20);
}

# A json_schema registered from SQL for topic (a schema of its own), and one
# event sent to it.
sub registered_with_event
{
	my ($topic) = @_;
	sql(qq{SELECT outbox_topic_schema('$topic', 'json_schema', schema => '{"type":"object","title":"$topic"}')});
	sql(qq{SELECT outbox_send('$topic', '{"n": 1}'::jsonb)});
}

# ---- json_schema, registered from SQL -------------------------------------
sql(q{SELECT outbox_topic_schema('sr_json', 'json_schema',
	schema => '{"type":"object","properties":{"n":{"type":"integer"}}}')});
sql(q{SELECT outbox_send('sr_json', '{"n": 1}'::jsonb, 'k1')});
ok(wait_for_empty($node, 30), 'json_schema: the event is delivered');
my $json_id = $stub->subject_version('sr_json-value')->{id};
is(row('sr_json', 'schema_id'), $json_id, 'the worker registered the schema and wrote its id back');
is(row('sr_json', 'resolved_at IS NOT NULL AND last_error IS NULL'), 't', '... with resolved_at, no last_error');
my $records = consume_raw($broker, 'sr_json');
is(hex_of($records->[0]{value}), hex_of(framed($json_id, $json_text)),
	'json_schema: 00, the id big endian, then the JSON text');
is($records->[0]{key}, 'k1', 'the key without a key schema is as sent');
unlike($records->[0]{headers}, qr/content-type/, 'a framed value has no content-type');

# ---- a key schema ----------------------------------------------------------
sql(q{SELECT outbox_topic_schema('sr_key', 'json_schema', schema => '{"type":"string"}', part => 'key')});
sql(q{SELECT outbox_send('sr_key', 'plain value', '"the-key"')});
ok(wait_for_empty($node, 30), 'key schema: the event is delivered');
my $key_id = $stub->subject_version('sr_key-key')->{id};
$records = consume_raw($broker, 'sr_key');
is(hex_of($records->[0]{key}), hex_of(framed($key_id, '"the-key"')), 'the key is framed with <topic>-key\'s id');
is($records->[0]{value}, 'plain value', 'the value without a value schema is as sent');

# ---- Protobuf: a fixed id, the path [0]; a subject's version, a nested path
my $proto = 'syntax = "proto3"; package t; message Order { string id = 1; }'
  . ' message Wrapper { message Inner { string s = 1; } Inner inner = 1; }';
my $proto_id = $stub->register('t-proto', 'PROTOBUF', $proto);
sql("SELECT outbox_topic_schema('sr_proto', 'protobuf', schema_id => $proto_id)");
sql(q{SELECT outbox_topic_schema('sr_nested', 'protobuf', version => '1', subject => 't-proto',
	message_indexes => '{1,0}')});
ok(wait_resolved('sr_proto') && wait_resolved('sr_nested'), 'the worker fetched the Protobuf schemas');
sql(q{SELECT outbox_send('sr_proto', '\x0a0131'::bytea)});
sql(q{SELECT outbox_send('sr_nested', '\x0a0178'::bytea)});
ok(wait_for_empty($node, 30), 'protobuf: the events are delivered');
is(hex_of(consume_raw($broker, 'sr_proto')->[0]{value}), hex_of(framed($proto_id, "\x0a\x01\x31", 0)),
	'protobuf [0]: 00, the id, the single byte 00, the payload');
is(hex_of(consume_raw($broker, 'sr_nested')->[0]{value}), hex_of(framed($proto_id, "\x0a\x01\x78", 4, 2, 0)),
	'protobuf [1,0]: the count 2 and the indexes as zig-zag varints (04 02 00)');
is(row('sr_proto', 'schema_text'), $proto, 'a fixed id\'s schema text is fetched for the senders');

# ---- a fixed id without any lookup: JSON Schema --------------------------
sql("SELECT outbox_topic_schema('sr_fixed', 'json_schema', schema_id => $json_id)");
ok(wait_resolved('sr_fixed'), 'fixed id: its schema text fetched');
sql(q{SELECT outbox_send('sr_fixed', '{"n": 1}'::jsonb)});
ok(wait_for_empty($node, 30), 'fixed id: delivered');
is(hex_of(consume_raw($broker, 'sr_fixed')->[0]{value}), hex_of(framed($json_id, $json_text)),
	'fixed id: framed with it');

# ---- 'latest', a new version registered while events flow -----------------
my $v1 = $stub->register('sr_latest-value', 'JSON', '{"type":"object"}');
sql(q{SELECT outbox_topic_schema('sr_latest', 'json_schema', version => 'latest')});
ok(wait_resolved('sr_latest'), 'latest: resolved');
# events flow, one transaction every 20 ms, through the new version's
# registration until the row has its id, and a few after
my $sent = 0;
my $send_one = sub { sql(qq{SELECT outbox_send('sr_latest', '{"n": $sent}'::jsonb)}); $sent++ };
$send_one->() for 1 .. 10;
my $v2 = $stub->register('sr_latest-value', 'JSON', '{"type":"object","title":"v2"}');
ok(wait_until(20, sub {
	$send_one->();
	Time::HiRes::sleep(0.02);
	return sql("SELECT schema_id = $v2 FROM outbox_topic_schema WHERE topic = 'sr_latest'") eq 't';
}), 'the new version is looked up again within outbox.schema_registry_refresh, events flowing');
$send_one->() for 1 .. 10;
ok(wait_for_empty($node, 30), "latest: the $sent events are delivered");
$records = consume_raw($broker, 'sr_latest');
my $ids = join('', map { my $id = unpack('x N', $_->{value}); $id == $v1 ? 'a' : $id == $v2 ? 'b' : 'x' } @$records);
like($ids, qr/^a+b{10,}$/, "the events carry the first version's id, then from one event on the new one's ($ids)");
is(scalar @$records, $sent, '... every event once');

# ---- Avro: the JSON payload encoded with the registered schema ------------
my $avro_v1 = '{"type":"record","name":"E","fields":[{"name":"n","type":"int"},'
  . '{"name":"s","type":"string"}]}';
sql(qq{SELECT outbox_topic_schema('sr_avro', 'avro', schema => '$avro_v1')});
sql(q{SELECT outbox_send('sr_avro', '{"n": 1, "s": "hi"}'::jsonb)});
sql(q{SELECT outbox_send('sr_avro', '{"n": -65, "s": ""}'::jsonb)});
ok(wait_for_empty($node, 30), 'avro: delivered');
my $avro_id = row('sr_avro', 'schema_id');
$records = consume_raw($broker, 'sr_avro');
is(hex_of($records->[0]{value}), hex_of(framed($avro_id, "\x02\x04hi")),
	'avro: 00, the id, then the Avro binary (int 1 as 02, the string as length 4 and its bytes)');
is(hex_of($records->[1]{value}), hex_of(framed($avro_id, "\x81\x01\x00")), 'avro: -65 as 81 01, "" as 00');

# ---- a payload that does not fit a schema replaced after it was sent ------
# (the sender checked it against the schema then; the worker encodes with
# the one the row names when it produces): the event's fault.
my $avro_v2 = '{"type":"record","name":"E","fields":[{"name":"n","type":"int"},'
  . '{"name":"m","type":"long"}]}';
$stub->register('sr_evolve-value', 'AVRO', $avro_v1);
$stub->register('sr_evolve-value', 'AVRO', $avro_v2);
sql(q{SELECT outbox_topic_schema('sr_evolve', 'avro', version => '1')});
ok(wait_resolved('sr_evolve'), 'version 1 resolved');
# An event sent (and checked) under one row, then the row replaced before
# the worker produces it: the event's fault, attempts counted. Its last_error.
sub refused_after_replace
{
	my ($send, $replace, $what) = @_;
	ok(pause_delivery($node, 1), 'delivery paused');
	my $id = sql($send);
	sql($replace);
	reload_with($node, 'outbox.enabled = on');
	ok(wait_query($node, 'postgres', "SELECT attempts > 0 FROM outbox WHERE id = $id", 20),
		"$what counts attempts");
	my $error = sql("SELECT last_error FROM outbox WHERE id = $id");
	sql("DELETE FROM outbox WHERE id = $id");
	return $error;
}

like(refused_after_replace(q{SELECT outbox_send('sr_evolve', '{"n": 1, "s": "x"}'::jsonb)},
	q{SELECT outbox_topic_schema('sr_evolve', 'avro', version => '2')},
	'a payload that does not fit the schema at produce time'),
	qr/payload does not fit the avro schema \d+ of topic "sr_evolve"/, '... and last_error says why');

# ---- a subject's version that does not exist: the events' fault ---------
like(refused_after_replace(q{SELECT outbox_send('sr_latest', '{"n": 1}'::jsonb)},
	q{SELECT outbox_topic_schema('sr_latest', 'json_schema', version => '7')},
	'a version the registry does not have'),
	qr/refused the value schema.*HTTP 404.*40402/, '... and last_error says the registry refused it');
like(row('sr_latest', 'last_error'), qr/HTTP 404/, 'the row\'s last_error says so too');

# ---- the registry down under load ------------------------------------------
$stub->down;
sql(q{SELECT outbox_topic_schema('sr_down', 'json_schema', schema => '{"type":"object","title":"down"}')});
sql(q{SELECT outbox_send('sr_down', ('{"n": ' || i || '}')::jsonb, 'k' || (i % 7))
	FROM generate_series(1, 300) i});
sql(q{SELECT outbox_send('sr_other', 'flows', 'k')});
ok(wait_query($node, 'postgres', "SELECT count(*) = 0 FROM outbox WHERE topic = 'sr_other'", 30),
	'another topic flows while the registry is down');
ok(wait_query($node, 'postgres', "SELECT state = 'waiting_for_registry' FROM outbox_status", 30),
	'outbox_status.state says waiting_for_registry');
like(sql('SELECT last_error FROM outbox_status'), qr/waiting for the Schema Registry.*sr_down/,
	'outbox_status.last_error names the registry and the topic');
like(row('sr_down', 'last_error'), qr/\Q$stub_url\E/, 'the row\'s last_error names the URL');
sleep 3;
is(sql(q{SELECT count(*) FROM outbox WHERE topic = 'sr_down'}), '300', 'nothing of the topic was sent');
is(sql(q{SELECT max(attempts) FROM outbox WHERE topic = 'sr_down'}), '0', 'no attempt counted');
is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'no dead letter');
sql(q{SELECT outbox_send('sr_down', ('{"n": ' || i || '}')::jsonb, 'k' || (i % 7))
	FROM generate_series(301, 400) i});
$stub->up;
ok(wait_for_empty($node, 60), 'all delivered once the registry is back');
my $down_id = row('sr_down', 'schema_id');
$records = consume_raw($broker, 'sr_down');
is(scalar @$records, 400, 'every event of the topic, once');
is(scalar(grep { substr($_->{value}, 0, 5) eq pack('CN', 0, $down_id) } @$records), 400,
	'each framed with the id registered after the outage');
my %last;
my $in_order = 1;
for (@$records)
{
	my ($n) = $_->{value} =~ /"n": (\d+)/;
	my $k = 'k' . ($n % 7);
	$in_order = 0 if ($last{$k} // 0) > $n;
	$last{$k} = $n;
}
ok($in_order, 'per key in order');
ok(wait_query($node, 'postgres', "SELECT state <> 'waiting_for_registry' FROM outbox_status", 20),
	'the state no longer says waiting_for_registry');

# ---- basic auth, a wrong password, a bearer token ----------------------------
# The secrets live in a file only the server's user reads: a reload logs
# every setting's new value.
my $secrets = $node->basedir . '/registry_secrets';
sub write_secrets
{
	PostgreSQL::Test::Utils::append_to_file($secrets, '') unless -e $secrets;
	chmod 0600, $secrets;
	open(my $f, '>', $secrets) or die "$secrets: $!";
	print $f "# the Schema Registry's\n$_[0]\n";
	close $f;
}
my $auth_stub = start_stub(user => 'reg-user:s3cret-pw', token => 'tok-123456');
write_secrets('password = wrong-pw-999');
reload_with($node, "outbox.schema_registry_url = '@{[ $auth_stub->url ]}'");
reload_with($node, "outbox.schema_registry_user = 'reg-user'");
reload_with($node, "outbox.schema_registry_secrets_file = '$secrets'");
registered_with_event('sr_auth');
ok(wait_query($node, 'postgres',
	"SELECT last_error LIKE '%HTTP 401%' FROM outbox_topic_schema WHERE topic = 'sr_auth'", 20),
	'a wrong password: last_error says 401');
is(sql(q{SELECT count(*) FROM outbox WHERE topic = 'sr_auth' AND attempts = 0}), '1',
	'... and the event waits, no attempt counted');
my $errors = sql(q{SELECT string_agg(coalesce(last_error, ''), ' ') FROM outbox_topic_schema})
  . sql(q{SELECT string_agg(coalesce(last_error, ''), ' ') FROM outbox}) . sql('SELECT last_error FROM outbox_status');
unlike($errors, qr/wrong-pw-999|s3cret-pw|tok-123456/, 'no secret in any last_error');
unlike(slurp_file($node->logfile), qr/wrong-pw-999|s3cret-pw|tok-123456/, 'no secret in the server log');
write_secrets('password=s3cret-pw');
ok(wait_for_empty($node, 30), 'the right password in the file: delivered, no reload needed');
my @auths = map { $_->{auth} } @{ $auth_stub->requests };
ok((grep { $_ eq 'basic:reg-user' } @auths), 'the registry saw basic auth as reg-user');

reload_with($node, "outbox.schema_registry_user = ''");
write_secrets('token=tok-123456');
$auth_stub->clear_requests;
registered_with_event('sr_token');
ok(wait_for_empty($node, 30), 'a bearer token: delivered');
@auths = map { $_->{auth} } @{ $auth_stub->requests };
ok(@auths && !(grep { $_ ne 'bearer' } @auths), 'every request carried the bearer token');
reload_with($node, "outbox.schema_registry_secrets_file = ''");

# ---- fail-over between two URLs -------------------------------------------------
my $second = start_stub();
$stub->down;
reload_with($node, "outbox.schema_registry_url = '$stub_url, @{[ $second->url ]}'");
registered_with_event('sr_failover');
ok(wait_for_empty($node, 30), 'the first URL down: delivered through the second');
my $fo_id = $second->subject_version('sr_failover-value')->{id};
is(unpack('x N', consume_raw($broker, 'sr_failover')->[0]{value}), $fo_id,
	'framed with the second registry\'s id');
$stub->up;
$stub->clear_requests;
sql(q{SELECT outbox_topic_schema('sr_failover', 'json_schema', schema => '{"type":"object","title":"fo2"}')});
sql(q{SELECT outbox_send('sr_failover', '{"n": 2}'::jsonb)});
ok(wait_for_empty($node, 30), 'delivered again');
is(scalar @{ $stub->requests }, 0, 'the last good URL is asked first: the first one, back, is not asked');

# ---- TLS with a CA file -----------------------------------------------------------
my $tls = start_stub(tls => 1);
like($tls->url, qr/^https:/, 'the TLS stub serves https');
reload_with($node, "outbox.schema_registry_url = '@{[ $tls->url ]}'");
registered_with_event('sr_tls');
ok(wait_query($node, 'postgres',
	"SELECT last_error ~ 'certificate|SSL' FROM outbox_topic_schema WHERE topic = 'sr_tls'", 20),
	'without the CA file the certificate is refused (and the event waits)');
reload_with($node, "outbox.schema_registry_ca_file = '@{[ $tls->ca_file ]}'");
ok(wait_for_empty($node, 30), 'with the CA file: delivered');
is(row('sr_tls', 'last_error IS NULL'), 't', 'the row resolved over TLS');

# ---- the envelope as a registered Protobuf schema ---------------------------
reload_with($node, "outbox.schema_registry_ca_file = ''");
reload_with($node, "outbox.schema_registry_url = '$stub_url'");
my $envelope_proto = slurp_file("$root/proto/outbox.proto");
my $env_id = $stub->register('sr_env-value', 'PROTOBUF', $envelope_proto);
sql("SELECT outbox_topic_schema('sr_env', 'protobuf', schema_id => $env_id)");
ok(wait_resolved('sr_env'), 'the envelope\'s schema fetched');
reload_with($node, "outbox.message_format = 'envelope'");
sql(q{SELECT outbox_send('sr_env', '\x0801'::bytea, '\x6b'::bytea)});
ok(wait_for_empty($node, 30), 'envelope: delivered');
my $env = consume_raw($broker, 'sr_env')->[0]{value};
is(hex_of(substr($env, 0, 6)), hex_of(pack('CN', 0, $env_id) . "\x00"),
	'envelope: 00, the id, the path [0] as 00');
my ($body, $text, $err) = (substr($env, 6), '', '');
IPC::Run::run([ 'protoc', "--proto_path=$root/proto", '--decode=outbox.v1.Event', 'outbox.proto' ],
	'<', \$body, '>', \$text, '2>', \$err) or die "protoc failed: $err";
like($text, qr/topic: "sr_env"/, '... then the envelope, which protoc decodes with proto/outbox.proto');
like($text, qr/payload: "\\010\\001"/, '... holding the payload');
reload_with($node, "outbox.message_format = 'payload'");

# ---- a stuck registry does not hold a stopping worker --------------------------
$stub->slow(60000);
$stub->clear_requests;
reload_with($node, 'outbox.schema_registry_timeout = 60s');
sql(q{SELECT outbox_topic_schema('sr_slow', 'json_schema', schema => '{"type":"object","title":"slow"}')});
ok(wait_until(20, sub { @{ $stub->requests } > 0 }),
	'the worker is in a call the registry answers in 60 s');
my $pid = sql('SELECT pid FROM outbox_status');
# the call in progress stays 60 s long; the next worker's are not
$stub->slow(0);
reload_with($node, 'outbox.schema_registry_timeout = 2s');
my $t0 = Time::HiRes::time();
sql("SELECT pg_terminate_backend($pid)");
ok(wait_until(20, sub { sql("SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") eq '0' }),
	'SIGTERM: the worker exits');
my $stop_s = Time::HiRes::time() - $t0;
cmp_ok($stop_s, '<', 10, 'within 10 s of a 60 s call (took ' . sprintf('%.1f', $stop_s) . ' s)');
ok(wait_resolved('sr_slow'), 'the next worker resolves the row')
  or diag(sql('SELECT topic, part, lookup, resolved_at, last_error FROM outbox_topic_schema'),
	JSON::PP::encode_json($stub->requests));

# ---- bad settings are refused at reload, the value kept ---------------------
my $offset = -s $node->logfile;
reload_with($node, "outbox.schema_registry_url = 'ftp://nowhere'");
ok(wait_until(10, sub { log_since($node, $offset) =~ /invalid value for parameter "outbox.schema_registry_url".*\n.*http:\/\/ or https:\/\//s }),
	'a URL that is not http(s) is refused');
write_secrets('password=x');
chmod 0640, $secrets;
reload_with($node, "outbox.schema_registry_secrets_file = '$secrets'");
ok(wait_until(10, sub { log_since($node, $offset) =~ /invalid value for parameter "outbox.schema_registry_secrets_file".*\n.*group or world access/s }),
	'a secrets file others may read is refused');
is(sql('SHOW outbox.schema_registry_url'), $stub_url, 'the URL kept its value');

# ---- the Confluent deserializers read what pg_outbox framed ---------------------
# confluent-kafka 2.16.1 (tools/registry/read.py) fetches each record's
# schema by its id from the stub and decodes it; Protobuf by the message
# the indexes name.
SKIP:
{
	skip 'no read.py venv (scripts/common.sh ensure_registry_tools)', 11 unless $deserializers;
	my $decoded = sub {
		my ($topic, $format, $count) = @_;
		return read_registry_records(bootstrap => $broker->bootstrap, topic => $topic,
			registry => $stub, format => $format, count => $count);
	};
	my $r = $decoded->('sr_json', 'json_schema', 1);
	is_deeply([ $r->[0]{value}, $r->[0]{schema_id} ], [ { n => 1 }, $json_id ],
		'json_schema: the JSONDeserializer reads the value, with the id');
	$r = $decoded->('sr_avro', 'avro', 2);
	is_deeply([ map { $_->{value} } @$r ], [ { n => 1, s => 'hi' }, { n => -65, s => '' } ],
		'avro: the AvroDeserializer decodes both records');
	$r = $decoded->('sr_proto', 'protobuf', 1);
	is_deeply([ @{ $r->[0] }{qw(message message_indexes value)} ], [ 't.Order', [0], { id => '1' } ],
		'protobuf [0]: the ProtobufDeserializer reads t.Order');
	$r = $decoded->('sr_nested', 'protobuf', 1);
	is_deeply([ @{ $r->[0] }{qw(message message_indexes value)} ], [ 't.Wrapper.Inner', [ 1, 0 ], { s => 'x' } ],
		'protobuf [1,0]: the nested t.Wrapper.Inner');
	$r = $decoded->('sr_env', 'protobuf', 1);
	is($r->[0]{message}, 'outbox.v1.Event', 'the envelope: outbox.v1.Event');
	is($r->[0]{value}{topic}, 'sr_env', '... its topic field');
	$r = $decoded->('sr_latest', 'json_schema', $sent);
	is(scalar @$r, $sent, 'latest: every record decodes');
	is_deeply([ sort { $a <=> $b } keys %{ { map { $_->{schema_id} => 1 } @$r } } ], [ $v1, $v2 ],
		'... under both versions\' ids');
	$r = $decoded->('sr_down', 'json_schema', 400);
	is(scalar @$r, 400, 'the outage\'s 400 records decode');
	is(scalar(grep { $_->{schema_id} == $down_id } @$r), 400, '... each with the id registered after the outage');
	$r = $decoded->('sr_fixed', 'json_schema', 1);
	is($r->[0]{schema_id}, $json_id, 'a fixed id: decoded with it');
}

# ---- exactly once frames the same (a real Kafka: OUTBOX_TEST_KAFKA=real) ----
SKIP:
{
	skip 'exactly-once needs a real Kafka (OUTBOX_TEST_KAFKA=real)', 4 unless $broker->can('create_topic');
	$broker->create_topic('outbox_progress', partitions => 1, config => { 'cleanup.policy' => 'compact' });
	reload_with($node, 'outbox.delivery = exactly_once');
	ok(wait_query($node, 'postgres', "SELECT delivery = 'exactly_once' FROM outbox_status", 60),
		'the worker delivers exactly once');
	sql(q{SELECT outbox_send('sr_json', '{"n": 1}'::jsonb, 'k1')});
	ok(wait_for_empty($node, 60), 'exactly once: delivered');
	my $eos = consume_raw($broker, 'sr_json');
	is(hex_of($eos->[-1]{value}), hex_of($eos->[0]{value}),
		'read_committed: the same bytes as the at-least-once record of the same payload');
	is(scalar @$eos, 2, '... once');
	reload_with($node, 'outbox.delivery = at_least_once');
}

# ---- the cost: a drain framed against one unframed, same run -----------------
# FIGURES line only (the machine is shared): 100,000 events of one topic,
# sent while delivery is paused, then timed from the resume to an empty
# outbox; a plain topic, json_schema, avro. On the project's broker only.
if (!$broker->can('create_topic'))
{
	sql(qq{SELECT outbox_topic_schema('sr_drain_json', 'json_schema', schema => '{"type":"object"}')});
	sql(qq{SELECT outbox_topic_schema('sr_drain_avro', 'avro', schema => '$avro_v1')});
	ok(wait_resolved('sr_drain_json') && wait_resolved('sr_drain_avro'), 'the drain topics resolved');
	my %drain;
	for my $round (1 .. 2)
	{
		for my $topic (qw(sr_drain_plain sr_drain_json sr_drain_avro))
		{
			ok(pause_delivery($node, 1), "$topic: paused");
			sql(qq{SELECT outbox_send('$topic', ('{"n": ' || i || ', "s": "event ' || i || '"}')::jsonb, 'k' || (i % 64))
				FROM generate_series(1, 100000) i});
			is(sql('SELECT count(*) FROM outbox'), '100000', "$topic: all held while paused");
			my $t = Time::HiRes::time();
			reload_with($node, 'outbox.enabled = on');
			ok(wait_for_empty($node, 120), "$topic: drained");
			push @{ $drain{$topic} }, Time::HiRes::time() - $t;
		}
	}
	diag(sprintf('FIGURES schema_drain 100000 events, seconds per round: plain=%s json_schema=%s avro=%s',
		map { join('/', map { sprintf('%.2f', $_) } @{ $drain{$_} }) } qw(sr_drain_plain sr_drain_json sr_drain_avro)));
}

is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'no dead letter in the whole run');

done_testing();
