# DebeziumConnect: Kafka Connect standalone running Debezium's PostgreSQL
# connector with its outbox EventRouter, for the tests that put pg_outbox
# beside the real thing (t/120_debezium_compare.pl, t/121_debezium_migration.pl).
# They run only with OUTBOX_TEST_DEBEZIUM=1, since they need the jars
# tools/debezium/pom.xml pins (scripts/common.sh's ensure_debezium_jars):
# CI's default run has no Debezium.
#
# One JVM runs every connector it is given (each with a slot of its own and
# its own converters), so that several EventRouter configurations read the
# same table at the cost of one JVM on a 2-core machine.
package DebeziumConnect;

use strict;
use warnings;

use HTTP::Tiny;
use IPC::Run ();
use OutboxTest ();
use KafkaCluster ();
use POSIX ();
use Time::HiRes ();

our $LIBS = $ENV{OUTBOX_DEBEZIUM_LIBS} // '/var/cache/pg_outbox/debezium/libs';
use constant DEBEZIUM => '3.6.1.Final';

my @JVM = ('-Xms256m', '-Xmx512m', '-XX:+UseG1GC', '-XX:+ExitOnOutOfMemoryError',
	'-Djava.awt.headless=true');

my @running;
END { local $?; $_->stop for @running; }

# Why a test skips: undef when it can run.
sub skip_reason
{
	return 'set OUTBOX_TEST_DEBEZIUM=1 to run it (it needs Debezium\'s jars)'
	  unless $ENV{OUTBOX_TEST_DEBEZIUM};
	return "no Debezium jars in $LIBS (scripts/common.sh's ensure_debezium_jars fetches them)"
	  unless -f "$LIBS/debezium-connector-postgres-" . DEBEZIUM . '.jar';
	return undef;
}

# A pg_outbox node (OutboxTest's) that Debezium can read: logical WAL, TCP
# on the loopback, replication connections allowed.
sub node
{
	my ($name, $kafka) = @_;
	my $node = OutboxTest::new_outbox_node($name, $kafka, conf => "wal_level = logical\n"
		  . "listen_addresses = '127.0.0.1'\nmax_replication_slots = 20\nmax_wal_senders = 20\n");
	$node->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n");
	$node->restart;
	return $node;
}

# Every record of a topic with kcat, binary-safe: each record's lengths
# first, then exactly that many bytes of key and value, then its headers.
sub read_topic
{
	my ($cluster, $topic) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-C', '-b', $cluster->bootstrap, '-t', $topic, '-e', '-q',
			'-f', '%p %o %T %K %S\n%k%s%h\n' ], '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat failed: $err";
	my @records;
	while (length $out)
	{
		$out =~ s/^(\d+) (\d+) (-?\d+) (-?\d+) (-?\d+)\n// or die "kcat: unexpected output: " . substr($out, 0, 200);
		my ($p, $o, $ts, $klen, $vlen) = ($1, $2, $3, $4, $5);
		my $key = $klen < 0 ? undef : substr($out, 0, $klen, '');
		my $value = $vlen < 0 ? undef : substr($out, 0, $vlen, '');
		$out =~ s/^([^\n]*)\n// or die 'kcat: no headers line';
		my %h = map { split /=/, $_, 2 } grep { length } split /,/, $1;
		push @records, { partition => $p, offset => $o, timestamp => $ts, key => $key, value => $value,
			headers => \%h };
	}
	return \@records;
}

# Creates topics "name:partitions" on a fresh cluster in batches: kafkajs
# waiting for the leaders of dozens of new topics at once can fail with
# "This server does not host this topic-partition" while the topics are
# made all the same; a batch that failed is done again topic by topic,
# those that exist by now left as they are.
sub create_topics
{
	my ($cluster, @specs) = @_;
	my @t = map { my ($n, $p) = split /:/; [ $n, partitions => $p ] } @specs;
	while (my @batch = splice(@t, 0, 10))
	{
		next if eval { $cluster->create_topics(@batch); 1 };
		for my $one (@batch)
		{
			for my $try (1 .. 3)
			{
				last if eval { $cluster->create_topics($one); 1 } || $@ =~ /exists already/;
				die $@ if $try == 3;
				sleep 2;
			}
			$cluster->wait_topic($one->[0], 3) or die "topic $one->[0] has no leaders";
		}
	}
}

# The properties of one connector reading public.$table of $node through
# slot $slot and publication $publication (made by the caller), its
# EventRouter set by %router (option => value, without the
# "transforms.outbox." prefix), converters by %conv (key.converter...),
# anything else by %extra.
sub connector
{
	my (%o) = @_;
	my $node = $o{node};
	return {
		'name' => $o{name},
		'connector.class' => 'io.debezium.connector.postgresql.PostgresConnector',
		'tasks.max' => 1,
		'database.hostname' => '127.0.0.1',
		'database.port' => $node->port,
		'database.user' => scalar(getpwuid($<)),
		'database.password' => 'unused',
		'database.dbname' => 'postgres',
		'topic.prefix' => $o{name},
		'plugin.name' => 'pgoutput',
		'slot.name' => $o{slot},
		'publication.name' => $o{publication},
		'publication.autocreate.mode' => 'disabled',
		'table.include.list' => "public.$o{table}",
		'snapshot.mode' => 'no_data',
		'tombstones.on.delete' => 'false',
		'poll.interval.ms' => 50,
		'transforms' => 'outbox',
		'transforms.outbox.type' => 'io.debezium.transforms.outbox.EventRouter',
		(map { ("transforms.outbox.$_" => $o{router}{$_}) } keys %{ $o{router} // {} }),
		%{ $o{converters} // {} },
		%{ $o{extra} // {} },
	};
}

# start(dir => DIR, bootstrap => B, connectors => [connector(...), ...]):
# returns once every connector's task runs; dies with the log's tail if
# one fails or Connect exits.
sub start
{
	my ($class, %o) = @_;
	mkdir $o{dir};
	my $self = bless { dir => $o{dir}, port => KafkaCluster::free_port(), log => "$o{dir}/connect.log",
		names => [ map { $_->{name} } @{ $o{connectors} } ] }, $class;
	_props("$o{dir}/worker.properties", {
			'bootstrap.servers' => $o{bootstrap},
			'key.converter' => 'org.apache.kafka.connect.json.JsonConverter',
			'value.converter' => 'org.apache.kafka.connect.json.JsonConverter',
			'offset.storage.file.filename' => "$o{dir}/offsets",
			'offset.flush.interval.ms' => 1000,
			'listeners' => "http://127.0.0.1:$self->{port}",
			%{ $o{worker} // {} } });
	my @files;
	for my $c (@{ $o{connectors} })
	{
		push @files, "$o{dir}/$c->{name}.properties";
		_props($files[-1], $c);
	}
	open my $fh, '>', "$o{dir}/log4j2.properties" or die $!;
	print $fh "appender.file.type = File\nappender.file.name = file\nappender.file.fileName = $self->{log}\n"
	  . "appender.file.layout.type = PatternLayout\nappender.file.layout.pattern = [%d] %p %m (%c)%n\n"
	  . "rootLogger.level = info\nrootLogger.appenderRef.file.ref = file\n";
	close $fh;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>>', "$o{dir}/connect.stdout");
		open(STDERR, '>&', \*STDOUT);
		exec('java', @JVM, "-Dlog4j2.configurationFile=$o{dir}/log4j2.properties", '-cp', "$LIBS/*",
			'org.apache.kafka.connect.cli.ConnectStandalone', "$o{dir}/worker.properties", @files)
		  or POSIX::_exit(127);
	}
	$self->{pid} = $pid;
	push @running, $self;
	$self->wait_running(240);
	return $self;
}

# Waits until every task runs; dies on a failed task or an exited JVM.
sub wait_running
{
	my ($self, $timeout) = @_;
	my $deadline = Time::HiRes::time() + $timeout;
	while (Time::HiRes::time() < $deadline)
	{
		if (waitpid($self->{pid}, POSIX::WNOHANG) == $self->{pid})
		{
			delete $self->{pid};
			die "Kafka Connect exited:\n" . $self->tail_log;
		}
		my %state = map { $_ => $self->task_state($_) } @{ $self->{names} };
		my @failed = grep { $state{$_} eq 'FAILED' } keys %state;
		die "connector @failed failed:\n" . $self->tail_log if @failed;
		return 1 unless grep { $state{$_} ne 'RUNNING' } keys %state;
		Time::HiRes::sleep(0.5);
	}
	die "the connectors' tasks are not running after $timeout s:\n" . $self->tail_log;
}

# Pauses or resumes a connector ('pause' or 'resume') and waits until its
# task says so.
sub pause
{
	my ($self, $name, $what) = @_;
	$self->rest('PUT', "/connectors/$name/$what") // die "Connect refused to $what $name";
	my $want = $what eq 'pause' ? 'PAUSED' : 'RUNNING';
	for (1 .. 600)
	{
		return 1 if $self->task_state($name) eq $want;
		Time::HiRes::sleep(0.1);
	}
	die "connector $name is not $want after 60 s";
}

# RUNNING, FAILED, PAUSED..., or '' before Connect answers.
sub task_state
{
	my ($self, $name) = @_;
	my ($state) = ($self->rest('GET', "/connectors/$name/status") // '') =~ /"tasks":\[\{[^]]*?"state":"(\w+)"/;
	return $state // '';
}

# Connect's REST API: the body, undef unless it answered 2xx.
sub rest
{
	my ($self, $method, $path) = @_;
	my $r = HTTP::Tiny->new(timeout => 10)->request($method, "http://127.0.0.1:$self->{port}$path");
	return $r->{success} ? $r->{content} : undef;
}

# SIGTERM (Connect commits its offsets and stops its tasks), SIGKILL after 30 s.
sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'TERM', $self->{pid};
	for (1 .. 300)
	{
		last if waitpid($self->{pid}, POSIX::WNOHANG) == $self->{pid};
		Time::HiRes::sleep(0.1);
	}
	if (kill 0, $self->{pid})
	{
		kill 'KILL', $self->{pid};
		waitpid($self->{pid}, 0);
	}
	delete $self->{pid};
}

sub tail_log
{
	my ($self) = @_;
	my $text = '';
	for my $f ($self->{log}, "$self->{dir}/connect.stdout")
	{
		open my $fh, '<', $f or next;
		local $/;
		$text .= <$fh>;
	}
	my @l = split /\n/, $text;
	return join("\n", @l[ ($#l > 40 ? $#l - 40 : 0) .. $#l ]) . "\n";
}

sub _props
{
	my ($file, $props) = @_;
	open my $fh, '>', $file or die "$file: $!";
	# a backslash escapes in a properties file (route.topic.regex has some)
	print $fh "$_=" . ($props->{$_} =~ s/\\/\\\\/gr) . "\n" for sort keys %$props;
	close $fh or die "$file: $!";
}

1;
