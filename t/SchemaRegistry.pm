# SchemaRegistry: the schema registries and the consumer the Schema
# Registry tests use (tools/registry/README.md). Apicurio Registry 3.3.3, a
# real registry with a Confluent-compatible API; the stub registry
# (tools/registry/stub-registry.js), where Apicurio cannot serve (Protobuf
# descriptors as base64), with basic auth, bearer tokens, TLS and faults on
# a control port; and tools/registry/read.py, which decodes a topic with
# confluent-kafka's own deserializers. Each is started as the test's user
# on free loopback ports and stopped when the test ends, also when it dies;
# scripts/common.sh's ensure_registry_tools put Apicurio and the venv in
# /var/cache/pg_outbox/registry.
package SchemaRegistry;

use strict;
use warnings;

use Exporter qw(import);
use File::Basename ();
use File::Path qw(make_path);
use IPC::Run;
use JSON::PP ();
use KafkaCluster ();
use POSIX ();
use Time::HiRes ();

our @EXPORT = qw(start_apicurio start_stub_registry read_registry_records registry_tools_missing);

our $APP = $ENV{OUTBOX_REGISTRY_APP} // '/var/cache/pg_outbox/registry/apicurio';
our $VENV = $ENV{OUTBOX_REGISTRY_VENV} // '/var/cache/pg_outbox/registry/venv';
my $TOOLS = File::Basename::dirname(__FILE__) . '/../tools/registry';

my @running;
END { local $?; $_->stop for @running; }

# A Java of version 21 or later (Apicurio's minimum; Debian 12 has 17):
# OUTBOX_REGISTRY_JAVA, else the machine's Temurin 25, else any JDK under
# /usr/lib/jvm that says it is 21 or later.
sub registry_java
{
	my @candidates = grep { defined && -x } ($ENV{OUTBOX_REGISTRY_JAVA},
		'/usr/lib/jvm/temurin-25-jdk-amd64/bin/java', glob('/usr/lib/jvm/*/bin/java'));
	for my $java (@candidates)
	{
		my $v = `'$java' -version 2>&1`;
		return $java if $v =~ /version "(\d+)/ && $1 >= 21;
	}
	return undef;
}

# Why the tools cannot run here (for skip_all), or undef.
sub registry_tools_missing
{
	return "no Apicurio in $APP (scripts/common.sh's ensure_registry_tools)"
	  unless -f "$APP/quarkus-run.jar";
	return "no venv in $VENV (scripts/common.sh's ensure_registry_tools)"
	  unless -x "$VENV/bin/python";
	return 'no Java 21 or later for Apicurio (set OUTBOX_REGISTRY_JAVA)' unless registry_java();
	return undef;
}

# ---- Apicurio ----------------------------------------------------------------

# start_apicurio(dir => DIR): Apicurio with its in-memory store, its HTTP
# and management ports on loopback, a small heap; returns once its
# Confluent API answers. ->url is that API, ->startup_s and ->rss_kb what
# it cost.
sub start_apicurio
{
	my (%o) = @_;
	my $java = registry_java() or die "no Java 21 or later for Apicurio\n";
	make_path($o{dir});
	my $self = bless { dir => $o{dir}, port => KafkaCluster::free_port(),
		management => KafkaCluster::free_port() }, 'SchemaRegistry::Apicurio';
	$self->{url} = "http://127.0.0.1:$self->{port}/apis/ccompat/v7";
	my $started = Time::HiRes::time();
	$self->_launch($java);
	push @running, $self;
	SchemaRegistry::wait_answer($self, 120)
	  or die "Apicurio did not come up: see $o{dir}/apicurio.log\n";
	$self->{startup_s} = Time::HiRes::time() - $started;
	return $self;
}

# ---- the stub ------------------------------------------------------------------

# start_stub_registry(dir => DIR, user => 'u:p', token => T, tls => 1):
# the stub, with basic auth and/or a bearer token required when given, and
# over TLS with a certificate for 127.0.0.1 signed by a CA made here
# (->ca_file).
sub start_stub_registry
{
	my (%o) = @_;
	make_path($o{dir});
	my $self = bless { dir => $o{dir}, user => $o{user}, token => $o{token} },
	  'SchemaRegistry::Stub';
	my @args;
	push @args, ('--user', $o{user}) if $o{user};
	push @args, ('--token', $o{token}) if $o{token};
	if ($o{tls})
	{
		# KafkaCluster's openssl helpers work in any directory of theirs
		my $certs = bless { dir => $o{dir} }, 'KafkaCluster';
		$self->{ca} = $certs->make_ca('registry-ca');
		my ($crt, $key) = $certs->make_cert('registry', ca => 'registry-ca',
			san => 'IP:127.0.0.1,DNS:localhost');
		push @args, ('--cert', $crt, '--key', $key);
	}
	my ($in, $out) = ('', '');
	my $timer = IPC::Run::timeout(30);
	$self->{h} = IPC::Run::start([ 'node', "$TOOLS/stub-registry.js", @args ],
		\$in, \$out, '2>', "$o{dir}/stub.log", $timer);
	push @running, $self;
	$self->{h}->pump until $out =~ /^REGISTRY (\S+) CONTROL (\S+)\n/m;
	@$self{qw(url control)} = ($1, $2);
	$timer->reset;
	return $self;
}

# ---- the consumer ----------------------------------------------------------

# read_registry_records(bootstrap => B, topic => T, registry => R,
#   format => F, count => N, isolation => I, timeout => S, key_format => F):
# the topic's records decoded by the Confluent deserializers
# (tools/registry/read.py) with R's credentials: [{partition, offset, key,
# value (decoded), schema_id, message_indexes and message for Protobuf,
# headers}]. Dies with read.py's reason when a record cannot be decoded.
sub read_registry_records
{
	my (%o) = @_;
	my $r = $o{registry};
	my @cmd = ("$VENV/bin/python", "$TOOLS/read.py", '--bootstrap', $o{bootstrap},
		'--topic', $o{topic}, '--registry', $r->url, '--format', $o{format},
		'--count', $o{count} // 0, '--timeout', $o{timeout} // 60,
		'--isolation', $o{isolation} // 'read_committed',
		'--key-format', $o{key_format} // 'none', $r->client_options);
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(($o{timeout} // 60) + 60))
	  or die "read.py failed: $err\n";
	return [ map { JSON::PP::decode_json($_) } grep { /^\{/ } split /\n/, $out ];
}

# ---- what both registries do --------------------------------------------------

package SchemaRegistry::Common;

sub url { return $_[0]{url}; }
sub ca_file { return $_[0]{ca}; }

# read.py's and curl's options for this registry's credentials and CA
sub client_options
{
	my ($self) = @_;
	my @o;
	push @o, ('--user', $self->{user}) if $self->{user};
	push @o, ('--token', $self->{token}) if $self->{token} && !$self->{user};
	push @o, ('--ca', $self->{ca}) if $self->{ca};
	return @o;
}

# request(METHOD, PATH, BODY): the registry's answer, decoded, and its
# HTTP status; with the registry's credentials.
sub request
{
	my ($self, $method, $path, $body) = @_;
	my @cmd = ('curl', '-sS', '-X', $method, '-w', '\n%{http_code}', '-m', '30',
		'-H', 'Content-Type: application/vnd.schemaregistry.v1+json');
	push @cmd, ('-u', $self->{user}) if $self->{user};
	push @cmd, ('-H', "Authorization: Bearer $self->{token}") if $self->{token} && !$self->{user};
	push @cmd, ('--cacert', $self->{ca}) if $self->{ca};
	push @cmd, ('--data-binary', JSON::PP::encode_json($body)) if defined $body;
	my ($out, $err) = ('', '');
	IPC::Run::run([ @cmd, $self->url . $path ], '<', \undef, '>', \$out, '2>', \$err)
	  or return (undef, 0);
	my ($text, $status) = $out =~ /^(.*)\n(\d+)$/s or die "curl: $out$err";
	return (length $text ? JSON::PP->new->allow_nonref->decode($text) : undef, $status);
}

# register(SUBJECT, TYPE (AVRO|JSON|PROTOBUF), SCHEMA_TEXT): its id
sub register
{
	my ($self, $subject, $type, $schema) = @_;
	my ($r, $status) = $self->request('POST', "/subjects/$subject/versions",
		{ schemaType => $type, schema => $schema });
	die "registering $subject at " . $self->url . ": $status " . JSON::PP::encode_json($r // {}) . "\n"
	  unless $status == 200;
	return $r->{id};
}

# The version of SUBJECT (default latest): {subject, version, id, schema}
sub subject_version
{
	my ($self, $subject, $version) = @_;
	my ($r, $status) = $self->request('GET', "/subjects/$subject/versions/" . ($version // 'latest'));
	return $status == 200 ? $r : undef;
}

package SchemaRegistry;

# True once the registry's API answers (any HTTP status) within TIMEOUT s.
sub wait_answer
{
	my ($self, $timeout) = @_;
	my $deadline = Time::HiRes::time() + $timeout;
	while (Time::HiRes::time() < $deadline)
	{
		my (undef, $status) = eval { $self->request('GET', '/subjects') };
		return 1 if $status;
		Time::HiRes::sleep(0.2);
	}
	return 0;
}

package SchemaRegistry::Apicurio;
our @ISA = ('SchemaRegistry::Common');

# Bounded: beside three brokers and PostgreSQL on 2 cores.
my @JVM = ('-Xms64m', '-Xmx256m', '-XX:+UseSerialGC', '-XX:+ExitOnOutOfMemoryError');

sub _launch
{
	my ($self, $java) = @_;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>>', "$self->{dir}/apicurio.log");
		open(STDERR, '>&', \*STDOUT);
		chdir $self->{dir};
		exec($java, @JVM, '-Dquarkus.http.host=127.0.0.1', "-Dquarkus.http.port=$self->{port}",
			'-Dquarkus.management.host=127.0.0.1', "-Dquarkus.management.port=$self->{management}",
			'-jar', "$SchemaRegistry::APP/quarkus-run.jar")
		  or POSIX::_exit(127);
	}
	$self->{pid} = $pid;
}

sub startup_s { return $_[0]{startup_s}; }

# The JVM's resident memory now, in kB.
sub rss_kb
{
	my ($self) = @_;
	open(my $fh, '<', "/proc/$self->{pid}/status") or return 0;
	while (<$fh>) { return $1 if /^VmRSS:\s+(\d+)/; }
	return 0;
}

# An unreachable registry that keeps its schemas: SIGSTOP (connections
# are accepted by the kernel, nothing answers: clients time out).
sub pause { my ($self) = @_; kill 'STOP', $self->{pid}; }
sub resume { my ($self) = @_; kill 'CONT', $self->{pid}; }

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'CONT', $self->{pid};
	kill 'KILL', $self->{pid};
	waitpid($self->{pid}, 0);
	delete $self->{pid};
}

package SchemaRegistry::Stub;
our @ISA = ('SchemaRegistry::Common');

sub control_url { return $_[0]{control}; }

sub _control
{
	my ($self, $method, $path, $body) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'curl', '-sS', '-f', '-m', '10', '-X', $method,
		(defined $body ? ('--data-binary', JSON::PP::encode_json($body)) : ()),
		"$self->{control}$path" ], '<', \undef, '>', \$out, '2>', \$err)
	  or die "stub registry control $method $path: $err\n";
	return JSON::PP::decode_json($out);
}

# The registry's port closed (connections refused) / open again.
sub down { $_[0]->_control('POST', '/down'); }
sub up { $_[0]->_control('POST', '/up'); }
# fail(STATUS, MATCH, TIMES): requests whose "METHOD /path" matches MATCH
# (a regular expression) answered with STATUS, TIMES times (default: until
# clear_failures).
sub fail
{
	my ($self, $status, $match, $times) = @_;
	$self->_control('POST', '/fail', { status => $status, match => $match // '',
		(defined $times ? (times => $times) : ()) });
}
sub clear_failures { $_[0]->_control('DELETE', '/fail'); }
sub slow { my ($self, $ms) = @_; $self->_control('POST', '/slow', { ms => $ms }); }
# [{method, path, auth (none|basic:USER|bearer|bad), status}], since the
# start or clear_requests
sub requests { return $_[0]->_control('GET', '/requests'); }
sub clear_requests { $_[0]->_control('DELETE', '/requests'); }

sub stop
{
	my ($self) = @_;
	return unless $self->{h};
	$self->{h}->kill_kill;
	delete $self->{h};
}

1;
