# KafkaCluster: a real Apache Kafka cluster for the real-Kafka tier of the
# TAP tests, the benchmark and the demo. The project's broker (librdkafka's
# mock cluster) cannot tell whether acks, min.insync.replicas, leader
# elections, TLS, SASL, ACLs, size limits or compaction work; this can.
#
# Three KRaft nodes, each a broker and a controller, on free loopback
# ports, from the jars scripts/common.sh's ensure_kafka_jars fetched
# (tools/kafka/pom.xml). Replication factor 3, min.insync.replicas 2, no
# auto-created topics, no unclean elections. With security => 1 each node
# also listens with SASL_SSL (SCRAM-SHA-512 and -256 users) and SSL with client
# certificates, made by openssl in the cluster's own directory; with
# acls => 1 KRaft's StandardAuthorizer is on. The PLAINTEXT listener stays
# open to everyone (ANONYMOUS is a super user): the tests read back and
# administer through it. Every process started here is stopped when the
# test ends, also when it dies.
#
# It depends on nothing of PostgreSQL's test framework, so that the demo
# and the benchmark start the same cluster (tools/kafka/cluster.pl).
package KafkaCluster;

use strict;
use warnings;

use Exporter qw(import);
use File::Basename ();
use File::Path qw(make_path);
use IO::Socket::INET;
use IPC::Run;
use JSON::PP ();
use MIME::Base64 ();
use POSIX ();
use Time::HiRes ();

our @EXPORT = qw(start_kafka_cluster);

our $LIBS = $ENV{OUTBOX_KAFKA_LIBS} // '/var/cache/pg_outbox/kafka/libs';

# Bounded heaps: three brokers beside PostgreSQL on 2 cores and 24 GB.
my @BROKER_JVM = ('-Xms384m', '-Xmx384m', '-XX:+UseG1GC', '-XX:MaxGCPauseMillis=20',
	'-XX:+ExitOnOutOfMemoryError', '-Djava.awt.headless=true');
# The command-line tools start often and do little: start them fast.
my @TOOL_JVM = ('-Xmx256m', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1');

my @clusters;
my $CREATE_TOPICS = File::Basename::dirname(__FILE__) . '/../tools/js/create-topics.js';
my $DELETE_TOPICS = File::Basename::dirname(__FILE__) . '/../tools/js/delete-topics.js';
END { local $?; $_->stop for @clusters; }

# start_kafka_cluster(dir => DIR, security => 0|1, acls => 0|1,
#   users => {name => password}, conf => "extra broker lines",
#   proxied => 0|1): DIR must
# not exist yet; everything of the cluster lives in it.
sub start_kafka_cluster
{
	my (%opts) = @_;
	die "no Kafka jars in $LIBS (scripts/common.sh's ensure_kafka_jars fetches them)\n"
	  unless -f "$LIBS/kafka-server-4.4.0.jar";
	die "start_kafka_cluster: $opts{dir} exists\n" if -e $opts{dir};
	my $self = bless {
		dir => $opts{dir},
		security => $opts{security} // 0,
		acls => $opts{acls} // 0,
		users => $opts{users} // {},
		proxied => $opts{proxied} // 0,
		conf => $opts{conf} // '',
		nodes => [],
	}, 'KafkaCluster';
	make_path($self->{dir});
	push @clusters, $self;
	$self->_allocate_ports;
	$self->_make_broker_certs if $self->{security};
	$self->_write_node_config($_) for 1 .. 3;
	$self->_format_storage;
	my $started = Time::HiRes::time();
	$self->_launch($_) for 1 .. 3;
	$self->_wait_brokers(3, 120) or die "Kafka cluster did not come up: see $self->{dir}\n";
	$self->{startup_s} = Time::HiRes::time() - $started;
	return $self;
}

# attach_kafka_cluster(BOOTSTRAP): a running cluster someone else started
# and stops (tools/kafka/cluster.pl in scripts/test.sh), for what needs
# only its listeners: topics, metadata, clients. Its brokers cannot be
# stopped, killed or paused from here.
sub attach_kafka_cluster
{
	my ($bootstrap) = @_;
	my @ports = map { /^127\.0\.0\.1:(\d+)$/ ? $1 : die "attach_kafka_cluster: not a loopback listener: $_\n" }
	  split /,/, $bootstrap;
	die "attach_kafka_cluster: expected three brokers in $bootstrap\n" unless @ports == 3;
	return bless { nodes => [ undef, map { { id => $_, plain => $ports[ $_ - 1 ] } } 1 .. 3 ] },
	  'KafkaCluster';
}

sub bootstrap { my ($self) = @_; return join ',', map { "127.0.0.1:$_->{plain}" } @{ $self->_nodes }; }
sub bootstrap_sasl { my ($self) = @_; return join ',', map { "127.0.0.1:$_->{sasl}" } @{ $self->_nodes }; }
# proxied => 1: each broker also listens behind tools/kafka/produce_proxy.pl
# (the test starts them: proxy_routes gives "proxy_port:broker_port" each)
sub bootstrap_proxied { my ($self) = @_; return join ',', map { "127.0.0.1:$_->{proxy}" } @{ $self->_nodes }; }
sub proxy_routes { my ($self) = @_; return map { "$_->{proxy}:$_->{proxied}" } @{ $self->_nodes }; }
sub bootstrap_ssl { my ($self) = @_; return join ',', map { "127.0.0.1:$_->{ssl}" } @{ $self->_nodes }; }
sub dir { return $_[0]{dir}; }
sub startup_s { return $_[0]{startup_s}; }
sub ca_file { return "$_[0]{dir}/certs/ca.pem"; }
sub _nodes { my ($self) = @_; return [ @{ $self->{nodes} }[ 1 .. 3 ] ]; }

sub _allocate_ports
{
	my ($self) = @_;
	for my $i (1 .. 3)
	{
		my %node = (id => $i, dir => "$self->{dir}/node$i");
		$node{$_} = free_port() for qw(plain controller);
		$node{$_} = free_port() for $self->{security} ? qw(sasl ssl) : ();
		$node{$_} = free_port() for $self->{proxied} ? qw(proxied proxy) : ();
		make_path("$node{dir}/data");
		$self->{nodes}[$i] = \%node;
	}
}

# A loopback port nobody listens on now (the kernel's pick), not one
# handed out before by this process.
my %handed_out;
sub free_port
{
	while (1)
	{
		my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
			Proto => 'tcp', Listen => 1) or die "no free port: $!";
		my $port = $s->sockport;
		close $s;
		return $port unless $handed_out{$port}++;
	}
}

sub _write_file
{
	my ($path, $text) = @_;
	open(my $fh, '>', $path) or die "$path: $!";
	print $fh $text;
	close $fh or die "$path: $!";
}

sub _read_file
{
	my ($path) = @_;
	open(my $fh, '<', $path) or die "$path: $!";
	local $/;
	return scalar <$fh>;
}

# ---- configuration -------------------------------------------------------

sub _listeners
{
	my ($self, $node, $with_controller) = @_;
	my @l = ("PLAINTEXT://127.0.0.1:$node->{plain}");
	push @l, "CONTROLLER://127.0.0.1:$node->{controller}" if $with_controller;
	push @l, "SASL_SSL://127.0.0.1:$node->{sasl}", "SSL://127.0.0.1:$node->{ssl}"
	  if $self->{security};
	# clients that bootstrap through the proxies are told the proxies'
	# ports: everything they send passes through one
	push @l, "PROXIED://127.0.0.1:" . ($with_controller ? $node->{proxied} : $node->{proxy})
	  if $self->{proxied};
	return join ',', @l;
}

sub _write_node_config
{
	my ($self, $i) = @_;
	my $node = $self->{nodes}[$i];
	my $voters = join ',', map { "$_->{id}\@127.0.0.1:$_->{controller}" } @{ $self->_nodes };
	my $conf = <<"EOF";
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listeners=@{[ $self->_listeners($node, 1) ]}
advertised.listeners=@{[ $self->_listeners($node, 0) ]}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,PROXIED:PLAINTEXT
log.dirs=$node->{dir}/data
num.partitions=3
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=3
auto.create.topics.enable=false
unclean.leader.election.enable=false
group.initial.rebalance.delay.ms=0
# a dead follower leaves the ISR after 10 s instead of 30: the tests of
# min.insync.replicas wait less, nothing else changes
replica.lag.time.max.ms=10000
log.cleaner.backoff.ms=1000
num.network.threads=2
num.io.threads=4
EOF
	$conf .= $self->_security_config if $self->{security};
	$conf .= "$self->{conf}\n";
	_write_file("$node->{dir}/server.properties", $conf);
	_write_file("$node->{dir}/log4j2.properties", <<"EOF");
appender.file.type = File
appender.file.name = file
appender.file.fileName = $node->{dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
EOF
}

sub _security_config
{
	my ($self) = @_;
	my $certs = "$self->{dir}/certs";
	my $conf = <<"EOF";
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$certs/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$certs/ca.pem
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+)\$/\$1/,DEFAULT
EOF
	$conf .= <<"EOF" if $self->{acls};
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
EOF
	return $conf;
}

# One cluster id for all three, SCRAM users written at format time (KRaft
# needs no running broker for that).
sub _format_storage
{
	my ($self) = @_;
	my $id;
	# one id in 64 would start with "-", which the tool takes for an option
	$id = MIME::Base64::encode_base64url(join '', map { chr int rand 256 } 1 .. 16)
	  until defined $id && $id !~ /^-/;
	my @scram;
	for my $user (sort keys %{ $self->{users} })
	{
		push @scram, '--add-scram', "$_=[name=$user,password=$self->{users}{$user}]"
		  for qw(SCRAM-SHA-512 SCRAM-SHA-256);
	}
	for my $node (@{ $self->_nodes })
	{
		$self->tool('kafka.tools.StorageTool', 'format', '-t', $id,
			'-c', "$node->{dir}/server.properties", @scram);
	}
}

# ---- certificates --------------------------------------------------------

# A CA, and a broker certificate it signed for 127.0.0.1 (librdkafka checks
# the host name). Kafka reads PEM: key and chain in one file.
sub _make_broker_certs
{
	my ($self) = @_;
	my $certs = "$self->{dir}/certs";
	make_path($certs);
	$self->make_ca('ca');
	$self->make_cert('broker', ca => 'ca', san => 'IP:127.0.0.1,DNS:localhost');
	_write_file("$certs/broker.pem",
		_read_file("$certs/broker.key")
		  . _read_file("$certs/broker.crt"));
}

sub _openssl
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'openssl', @args ], '<', \undef, '>', \$out, '2>', \$err)
	  or die "openssl @args failed: $err";
}

# A self-signed CA in certs/NAME.pem (its key in NAME.key).
sub make_ca
{
	my ($self, $name) = @_;
	my $c = "$self->{dir}/certs";
	make_path($c);
	$self->_openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '7',
		'-subj', "/CN=outbox test $name", '-keyout', "$c/$name.key", '-out', "$c/$name.pem");
	return "$c/$name.pem";
}

# A certificate for CN=NAME signed by CA (default 'ca'): certs/NAME.crt and
# NAME.key. expired => 1 makes one whose validity ended in 2020.
sub make_cert
{
	my ($self, $name, %o) = @_;
	my $c = "$self->{dir}/certs";
	my $ca = $o{ca} // 'ca';
	my $ext = "$c/$name.ext";
	_write_file($ext,
		"basicConstraints=CA:FALSE\n" . ($o{san} ? "subjectAltName=$o{san}\n" : ''));
	$self->_openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', "/CN=$name",
		'-keyout', "$c/$name.key", '-out', "$c/$name.csr");
	if ($o{expired})
	{
		$self->_sign_expired($name, $ca, $ext);
	}
	else
	{
		$self->_openssl('x509', '-req', '-in', "$c/$name.csr", '-CA', "$c/$ca.pem",
			'-CAkey', "$c/$ca.key", '-CAcreateserial', '-days', '7', '-extfile', $ext,
			'-out', "$c/$name.crt");
	}
	return ("$c/$name.crt", "$c/$name.key");
}

# `openssl x509` cannot back-date; `openssl ca` can, with a throwaway
# database of its own.
sub _sign_expired
{
	my ($self, $name, $ca, $ext) = @_;
	my $c = "$self->{dir}/certs";
	my $db = "$c/ca-db-$name";
	make_path("$db/new");
	_write_file("$db/index.txt", '');
	_write_file("$db/openssl.cnf", <<"EOF");
[ca]
default_ca = test
[test]
database = $db/index.txt
new_certs_dir = $db/new
serial = $db/serial
default_md = sha256
policy = any
[any]
commonName = supplied
EOF
	_write_file("$db/serial", "1000\n");
	$self->_openssl('ca', '-batch', '-config', "$db/openssl.cnf", '-cert', "$c/$ca.pem",
		'-keyfile', "$c/$ca.key", '-in', "$c/$name.csr", '-out', "$c/$name.crt",
		'-startdate', '20200101000000Z', '-enddate', '20200102000000Z', '-extfile', $ext,
		'-notext');
}

# ---- processes -----------------------------------------------------------

sub _launch
{
	my ($self, $i) = @_;
	my $node = $self->{nodes}[$i];
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>>', "$node->{dir}/stdout.log");
		open(STDERR, '>&', \*STDOUT);
		exec('java', @BROKER_JVM, "-Dlog4j2.configurationFile=$node->{dir}/log4j2.properties",
			'-cp', "$LIBS/*", 'kafka.Kafka', "$node->{dir}/server.properties")
		  or POSIX::_exit(127);
	}
	$node->{pid} = $pid;
	$node->{paused} = 0;
}

sub _signal
{
	my ($self, $i, $signal) = @_;
	my $node = $self->{nodes}[$i];
	die "broker $i is not running" unless $node->{pid};
	kill $signal, $node->{pid};
}

sub _reap
{
	my ($self, $i, $timeout) = @_;
	my $node = $self->{nodes}[$i];
	my $deadline = Time::HiRes::time() + $timeout;
	while (waitpid($node->{pid}, POSIX::WNOHANG) == 0)
	{
		return 0 if Time::HiRes::time() > $deadline;
		Time::HiRes::sleep(0.1);
	}
	delete $node->{pid};
	return 1;
}

# Controlled shutdown (SIGTERM): the broker hands its leaderships over first.
sub stop_broker
{
	my ($self, $i) = @_;
	$self->resume_broker($i) if $self->{nodes}[$i]{paused};
	$self->_signal($i, 'TERM');
	return if $self->_reap($i, 60);
	$self->kill_broker($i);
}

# A crash: SIGKILL, nothing handed over.
sub kill_broker
{
	my ($self, $i) = @_;
	$self->_signal($i, 'KILL');
	$self->_reap($i, 30) or die "broker $i survived SIGKILL";
}

sub pause_broker { my ($self, $i) = @_; $self->_signal($i, 'STOP'); $self->{nodes}[$i]{paused} = 1; }
sub resume_broker { my ($self, $i) = @_; $self->_signal($i, 'CONT'); $self->{nodes}[$i]{paused} = 0; }

# Starts brokers @ids again on their ports (all at once: with two of the
# three controllers down, one alone has no quorum to join) and waits until
# the cluster has every running broker.
sub start_broker
{
	my ($self, @ids) = @_;
	for my $i (@ids)
	{
		die "broker $i is running" if $self->{nodes}[$i]{pid};
		$self->_launch($i);
	}
	$self->_wait_brokers(scalar(grep { $_->{pid} } @{ $self->_nodes }), 120)
	  or die "brokers @ids did not rejoin";
}

# The end of a test: nothing of the cluster is kept, so there is nothing
# to hand over. SIGTERM would cost 15 s: the brokers stopped last wait in
# their controlled shutdown for a controller quorum the first ones took
# away.
sub stop
{
	my ($self) = @_;
	my @running = grep { $self->{nodes}[$_] && $self->{nodes}[$_]{pid} } 1 .. 3;
	kill 'KILL', $self->{nodes}[$_]{pid} for @running;
	$self->_reap($_, 30) for @running;
}

# ---- metadata and administration -----------------------------------------

# kcat's view of the cluster: {brokers => [ids], partitions => {topic =>
# [{partition, leader, replicas, isr}]}}; undef if no broker answers.
sub metadata
{
	my ($self, $topic) = @_;
	my ($out, $err) = ('', '');
	my @t = defined $topic ? ('-t', $topic) : ();
	IPC::Run::run([ 'kcat', '-L', '-J', '-m', '5', '-b', $self->bootstrap, @t ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(30))
	  or return undef;
	my $meta = eval { JSON::PP::decode_json($out) } or return undef;
	my %partitions;
	for my $t (@{ $meta->{topics} // [] })
	{
		next if $t->{error};
		$partitions{ $t->{topic} } = [ sort { $a->{partition} <=> $b->{partition} }
			  map { { partition => $_->{partition}, leader => $_->{leader},
						replicas => [ map { $_->{id} } @{ $_->{replicas} } ],
						isr => [ map { $_->{id} } @{ $_->{isrs} } ] } }
			  @{ $t->{partitions} } ];
	}
	return { brokers => [ sort map { $_->{id} } @{ $meta->{brokers} } ], partitions => \%partitions };
}

sub _wait_brokers
{
	my ($self, $count, $timeout) = @_;
	my $deadline = Time::HiRes::time() + $timeout;
	while (Time::HiRes::time() < $deadline)
	{
		my $m = $self->metadata;
		return 1 if $m && @{ $m->{brokers} } == $count;
		Time::HiRes::sleep(0.5);
	}
	return 0;
}

# The broker leading $topic's $partition (-1 while there is none).
sub leader_of
{
	my ($self, $topic, $partition) = @_;
	my $m = $self->metadata($topic) or return -1;
	my ($p) = grep { $_->{partition} == $partition } @{ $m->{partitions}{$topic} // [] };
	return $p ? $p->{leader} : -1;
}

# Waits until every partition of $topic has a leader and $isr replicas in
# sync (default 3); true if so within $timeout s.
sub wait_topic
{
	my ($self, $topic, $isr, $timeout) = @_;
	$isr //= 3;
	my $deadline = Time::HiRes::time() + ($timeout // 60);
	while (Time::HiRes::time() < $deadline)
	{
		my $m = $self->metadata($topic);
		my $parts = $m ? $m->{partitions}{$topic} : undef;
		return 1 if $parts && @$parts
		  && !grep { $_->{leader} < 0 || @{ $_->{isr} } < $isr } @$parts;
		Time::HiRes::sleep(0.3);
	}
	return 0;
}

# Runs one of Kafka's command-line tools (a class of kafka-tools, or of the
# broker's jar) and returns what it printed; dies if it fails.
sub tool
{
	my ($self, $class, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'java', @TOOL_JVM, '-Dlog4j2.level=error', '-cp', "$LIBS/*", $class, @args ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(120))
	  or die "$class @args failed: $out$err";
	return $out;
}

# create_topic(name, partitions => 3, config => {key => value}) and waits
# until its partitions have leaders and full ISRs. assignment => [[1,2,3],
# ...] places partition i's replicas instead, the first one its leader.
sub create_topic
{
	my ($self, $topic, %o) = @_;
	$self->create_topics([ $topic, %o ]);
}

# create_topics([name, options], ...): create_topic for each, in one
# request of tools/js/create-topics.js.
sub create_topics
{
	my ($self, @topics) = @_;
	my $spec = JSON::PP::encode_json([ map { _topic_spec(@$_) } @topics ]);
	$self->_admin_tool('creating topics', \$spec, $CREATE_TOPICS);
	for (@topics)
	{
		my ($topic, %o) = @$_;
		my $replicas = $o{assignment} ? scalar @{ $o{assignment}[0] } : $o{replication} // 3;
		$self->wait_topic($topic, $replicas) or die "topic $topic has no leaders";
	}
}

# delete_topics(name, ...): one request of tools/js/delete-topics.js;
# Kafka removes their files a minute later (file.delete.delay.ms).
sub delete_topics
{
	my ($self, @topics) = @_;
	$self->_admin_tool('deleting topics', \undef, $DELETE_TOPICS, @topics);
}

# One run of a tools/js admin script against this cluster, its stdin from
# $input; dies with its stderr if it fails.
sub _admin_tool
{
	my ($self, $what, $input, $script, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'node', $script, $self->bootstrap, @args ],
		'<', $input, '>', \$out, '2>', \$err, IPC::Run::timeout(120))
	  or die "$what failed: $err";
}

sub _topic_spec
{
	my ($topic, %o) = @_;
	my %config = %{ $o{config} // {} };
	my %spec = (topic => $topic,
		configEntries => [ map { { name => $_, value => "$config{$_}" } } sort keys %config ]);
	if ($o{assignment})
	{
		my $p = 0;
		$spec{replicaAssignment} = [ map { { partition => $p++, replicas => $_ } } @{ $o{assignment} } ];
	}
	else
	{
		$spec{numPartitions} = $o{partitions} // 3;
		$spec{replicationFactor} = $o{replication} // 3;
	}
	return \%spec;
}

# Grants $principal (User:NAME) $operation on topic $topic via AclCommand.
sub allow
{
	my ($self, $principal, $operation, $topic) = @_;
	$self->tool('org.apache.kafka.tools.AclCommand', '--bootstrap-server', $self->bootstrap,
		'--add', '--allow-principal', $principal, '--operation', $operation, '--topic', $topic);
}

# Where the Java client puts each of @keys in a topic of $partitions
# partitions: its console producer (default partitioner) writes them to a
# fresh topic, kcat reads back. {key => partition}
sub java_partitions
{
	my ($self, $partitions, @keys) = @_;
	my $topic = 'java_partitions_' . ++$self->{probes};
	$self->create_topic($topic, partitions => $partitions);
	my ($in, $out, $err) = (join('', map { "$_\t$_\n" } @keys), '', '');
	IPC::Run::run([ 'java', @TOOL_JVM, '-Dlog4j2.level=error', '-cp', "$LIBS/*",
		'org.apache.kafka.tools.ConsoleProducer', '--bootstrap-server', $self->bootstrap,
		'--topic', $topic, '--property', 'parse.key=true', '--property', "key.separator=\t" ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(120))
	  or die "ConsoleProducer failed: $err";
	IPC::Run::run([ 'kcat', '-C', '-b', $self->bootstrap, '-t', $topic, '-e', '-q', '-f', "%k\t%p\n" ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat failed: $err";
	return { map { split /\t/ } split /\n/, $out };
}

# The broker's own log lines matching $re, all three nodes.
sub log_lines
{
	my ($self, $re) = @_;
	return map { grep { /$re/ } split /\n/, _read_file("$_->{dir}/server.log") }
	  grep { -f "$_->{dir}/server.log" } @{ $self->_nodes };
}

1;
