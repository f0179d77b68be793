# OutboxTest: what the TAP tests share. Starts the project's Kafka-protocol
# broker (tools/outbox-broker) or, for the real-Kafka tier, a real Kafka
# cluster (t/KafkaCluster.pm), and a PostgreSQL node with the extension
# preloaded, generates load whose committed part is recorded in a business
# table, reads back what reached Kafka with kcat (a real Kafka client), and
# compares the two.
package OutboxTest;

use strict;
use warnings;

use Cwd qw(abs_path);
use Exporter qw(import);
use File::Basename qw(basename dirname);
use IPC::Run;
use JSON::PP ();
use POSIX ();
use KafkaCluster ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

our @EXPORT = qw(start_broker start_real_kafka new_outbox_node start_load wait_load
  committed_events committed_of consume decode_envelope wait_for_empty
  check_delivery kafka_partition wait_until wait_query log_since log_count
  worker_pids start_locker release_locker reload_with pause_delivery
  consume_js wait_in_flight fault_under_load first_copies end_offsets_sum
  commit_one_by_one check_sent_once cpu_s thread_cpu_s sql start_produce_proxy);

my $root = abs_path(dirname(__FILE__) . '/..');

# Kafka client settings the tests use: fail over fast instead of waiting
# the production defaults (minutes) when a broker is down.
our $TEST_KAFKA_CONFIG = 'message.timeout.ms=5000,socket.timeout.ms=3000';

# ---- the broker ----------------------------------------------------------

# A test that dies must not leave its broker running.
my @brokers;
END { local $?; $_->stop for @brokers; }

# With OUTBOX_TEST_KAFKA=real (scripts/test.sh's real-Kafka tier) a test
# written for the project's broker runs against a real cluster instead:
# its topics are created up front there (nothing is auto-created), and the
# broker's fault commands do not exist.
sub start_broker
{
	my (%opts) = @_;
	return start_real_kafka(topics => $opts{topics})
	  if ($ENV{OUTBOX_TEST_KAFKA} // '') eq 'real';
	my @cmd = ("$root/tools/outbox-broker", '--brokers', $opts{brokers} // 3,
		map { ('--topic', $_) } @{ $opts{topics} // [] });
	my ($in, $out, $err) = ('', '', '');
	my $timer = IPC::Run::timeout(60);
	my $h = IPC::Run::start(\@cmd, \$in, \$out, \$err, $timer);
	$h->pump until $out =~ /^BOOTSTRAP (\S+)\n/m;
	my $self = bless {
		h => $h, in => \$in, out => \$out, err => \$err,
		timer => $timer, bootstrap => $1,
	}, 'OutboxTest::Broker';
	note "broker at $self->{bootstrap}";
	push @brokers, $self;
	return $self;
}

# A real three-broker Kafka cluster (t/KafkaCluster.pm, whose options it
# takes) in the test's tmp_check, with topics => ['name:partitions', ...]
# created, replication factor 3. Stopped when the test ends.
my $clusters = 0;
sub start_real_kafka
{
	my (%opts) = @_;
	my $topics = delete $opts{topics} // [];
	return _shared_kafka($topics) if $ENV{OUTBOX_TEST_KAFKA_BOOTSTRAP} && !%opts;
	my $dir = sprintf('%s/kafka_%s_%d_%d', $PostgreSQL::Test::Utils::tmp_check,
		basename($0, '.pl'), $$, ++$clusters);
	my $cluster = KafkaCluster::start_kafka_cluster(%opts, dir => $dir);
	note(sprintf('Kafka cluster at %s, up in %.1f s', $cluster->bootstrap, $cluster->startup_s));
	$cluster->create_topics(_topic_specs($topics));
	return $cluster;
}

# OUTBOX_TEST_KAFKA_BOOTSTRAP: the cluster scripts/test.sh started for the
# tests that need no cluster of their own (saves each one the start of
# three JVMs). Their topic names differ, so they share it.
sub _shared_kafka
{
	my ($topics) = @_;
	my $cluster = KafkaCluster::attach_kafka_cluster($ENV{OUTBOX_TEST_KAFKA_BOOTSTRAP});
	note('Kafka cluster at ' . $cluster->bootstrap . ' (shared)');
	$cluster->create_topics(_topic_specs($topics));
	return $cluster;
}

sub _topic_specs
{
	return map {
		my ($topic, $partitions) = split /:/;
		[ $topic, partitions => $partitions // 1 ]
	} @{ $_[0] };
}

# tools/kafka/produce_proxy.pl in front of a cluster started with
# proxied => 1, once it listens: its harness (signal it) and a reference
# to what it printed so far (pump_nb the harness first). Killed when the
# test ends.
my @proxies;
END { local $?; $_->kill_kill for grep { $_->pumpable } @proxies; }
sub start_produce_proxy
{
	my ($cluster) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $proxy = IPC::Run::start([ 'perl', "$root/tools/kafka/produce_proxy.pl", $cluster->proxy_routes ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(900));
	$proxy->pump until $out =~ /^ready$/m;
	push @proxies, $proxy;
	return ($proxy, \$out);
}

package OutboxTest::Broker;

sub bootstrap { return $_[0]{bootstrap}; }

# Sends a fault command (down/up/produce-errors/...) and returns its reply.
sub command
{
	my ($self, $command) = @_;
	${ $self->{out} } = '';
	${ $self->{in} } .= "$command\n";
	$self->{timer}->start(30);
	$self->{h}->pump until ${ $self->{out} } =~ /^((?:OK|ERR).*)\n/m;
	my $reply = $1;
	die "broker refused '$command': $reply" if $reply =~ /^ERR/;
	Test::More::note("broker: $command -> $reply");
	return $reply;
}

sub stop
{
	my ($self) = @_;
	return unless $self->{h};
	${ $self->{in} } .= "quit\n";
	eval { $self->{timer}->start(30); $self->{h}->finish; };
	$self->{h}->kill_kill if $@;
	delete $self->{h};
}

sub DESTROY { $_[0]->stop; }

package OutboxTest;

# ---- the server ----------------------------------------------------------

# Every node new_outbox_node made: sql() runs on a test's only one.
my @outbox_nodes;

# A node with the library preloaded, pointed at the broker, extension
# created in database postgres. Values are the raw payloads (text the
# tests can compare) unless message_format => 'envelope'.
sub new_outbox_node
{
	my ($name, $broker, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => $opts{allows_streaming} // 0);
	my $shards = $opts{shards} // 1;
	my $kafka = $opts{kafka_config} // $TEST_KAFKA_CONFIG;
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'outbox'
outbox.brokers = '@{[ $broker->bootstrap ]}'
outbox.shards = $shards
outbox.kafka_config = '$kafka'
outbox.retry_backoff_min = 200ms
outbox.retry_backoff_max = 2s
outbox.message_format = '@{[ $opts{message_format} // 'payload' ]}'
max_worker_processes = 32
max_connections = 50
log_min_messages = info
@{[ $opts{conf} // '' ]}
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION outbox') unless $opts{no_extension};
	push @outbox_nodes, $node;
	return $node;
}

# sql(QUERY): QUERY's output in database postgres of the test's one node.
# A test of several nodes, or whose sql() takes a database, keeps its own
# (`use OutboxTest qw(!sql);`).
sub sql
{
	die "sql(): this test made " . scalar(@outbox_nodes) . " nodes, not one\n"
	  unless @outbox_nodes == 1;
	return $outbox_nodes[0]->safe_psql('postgres', $_[0]);
}

# ---- load ----------------------------------------------------------------

# Table the load commits into together with each event: after any crash,
# it says exactly which events were committed.
sub create_sent_table
{
	my ($node, $db) = @_;
	$node->safe_psql($db // 'postgres', q{
CREATE TABLE IF NOT EXISTS sent (session int, seq int, key text, value text,
                                 PRIMARY KEY (session, seq))});
}

# Starts $sessions psql clients, each sending $per_session events, one
# transaction each, in order; every $rollback_every-th is rolled back.
# In database $db (default postgres), which records them in its own table.
# Session s uses keys "s<s>-k<seq % keys>", values "s<s>:<seq>".
sub start_load
{
	my ($node, %o) = @_;
	my $sessions = $o{sessions} // 4;
	my $per = $o{per_session} // 200;
	my $keys = $o{keys} // 5;
	my $rb = $o{rollback_every} // 7;
	my $topic = $o{topic} // 'events';
	my $first = $o{first_session} // 1;
	my $sleep = $o{sleep} // 0;
	my $db = $o{db} // 'postgres';
	create_sent_table($node, $db);
	my @harnesses;
	for my $s ($first .. $first + $sessions - 1)
	{
		my $sql = '';
		for my $i (1 .. $per)
		{
			my $key = "s$s-k" . ($i % $keys);
			my $value = "s$s:$i";
			my $end = ($rb && $i % $rb == 0) ? 'ROLLBACK' : 'COMMIT';
			$sql .= "BEGIN;\n"
			  . "INSERT INTO sent VALUES ($s, $i, '$key', '$value');\n"
			  . "SELECT outbox_send('$topic', '$value', '$key');\n"
			  . "$end;\n";
			$sql .= "SELECT pg_sleep($sleep);\n" if $sleep;
		}
		# from a file, so the client runs on its own (a scalar would be fed
		# only while the harness is pumped)
		my $file = PostgreSQL::Test::Utils::tempdir() . "/load_${db}_$s.sql";
		PostgreSQL::Test::Utils::append_to_file($file, $sql);
		push @harnesses, IPC::Run::start(
			[ 'psql', '-X', '-q', '-d', $node->connstr($db), '-f', $file ],
			'<', \undef, '>', '/dev/null', '2>', "$file.err");
	}
	return \@harnesses;
}

# Waits for load clients; with $may_fail (a crash test) their errors are ok.
sub wait_load
{
	my ($harnesses, $may_fail) = @_;
	for my $h (@$harnesses)
	{
		my $ok = eval { $h->finish };
		die "load client failed" if !$ok && !$may_fail;
	}
}

# The committed events, from the business table: [{key, value, seq}].
sub committed_events
{
	my ($node, $topic, $db) = @_;
	my $rows = $node->safe_psql($db // 'postgres',
		"SELECT key, value, session, seq FROM sent ORDER BY session, seq");
	return [ map { my @f = split /\|/; { key => $f[0], value => $f[1], session => $f[2], seq => $f[3] } }
		  grep { length } split /\n/, $rows ];
}

# The committed events of the sessions $first .. $last.
sub committed_of
{
	my ($node, $first, $last) = @_;
	return [ grep { $_->{session} >= $first && $_->{session} <= $last }
		  @{ committed_events($node) } ];
}

sub wait_for_empty
{
	my ($node, $timeout) = @_;
	local $PostgreSQL::Test::Utils::timeout_default = $timeout // 180;
	return $node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM outbox');
}

# ---- waiting, the log, the workers --------------------------------------

# Waits until the worker holds event $id in its window with Kafka down or
# slow (outbox_explain says in_flight, or waiting_for_kafka); true if so.
sub wait_in_flight
{
	my ($node, $id, $timeout) = @_;
	return wait_query($node, 'postgres', "SELECT status IN ('in_flight', 'waiting_for_kafka')"
		  . " FROM outbox_explain($id)", $timeout // 20);
}

# Polls $check (a sub; dying counts as false) every 0.1 s; false on timeout.
sub wait_until
{
	my ($timeout, $check) = @_;
	my $deadline = Time::HiRes::time() + $timeout;
	while (1)
	{
		my $ok = eval { $check->() };
		return 1 if $ok;
		return 0 if Time::HiRes::time() > $deadline;
		Time::HiRes::sleep(0.1);
	}
}

# Polls until $sql returns t in database $db, for at most $timeout s (60).
sub wait_query
{
	my ($node, $db, $sql, $timeout) = @_;
	$timeout //= 60;
	return 1 if wait_until($timeout, sub {
		my ($ret, $out) = $node->psql($db, $sql);
		return $ret == 0 && $out eq 't';
	});
	diag("timed out after $timeout s waiting for: $sql");
	return 0;
}

# The node's server log from byte $offset on.
sub log_since
{
	my ($node, $offset) = @_;
	return PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
}

# How many times $re matches the node's log from byte $offset on.
sub log_count
{
	my ($node, $re, $offset) = @_;
	my $count = () = log_since($node, $offset) =~ /$re/g;
	return $count;
}

# The pids of the running outbox workers, ascending: [pid, ...]; [] if the
# server does not answer (it may be restarting).
sub worker_pids
{
	my ($node) = @_;
	my ($out, $err);
	my $ret = $node->psql('postgres', q{SELECT pid FROM pg_stat_activity
		WHERE backend_type = 'outbox shard' ORDER BY pid}, stdout => \$out, stderr => \$err);
	return $ret == 0 ? [ grep { length } split /\n/, $out ] : [];
}

# utime + stime of the processes, all their threads, in seconds.
sub cpu_s
{
	my (@pids) = @_;
	my $t = 0;
	$t += _stat_cpu_s("/proc/$_/stat") // 0 for @pids;
	return $t;
}

# A worker's CPU in seconds, split between its main thread (the process's
# own: reads, settles, delivery reports) and librdkafka's threads (rdk:*:
# requests, acknowledgements, timers): {main => s, librdkafka => s}.
sub thread_cpu_s
{
	my ($pid) = @_;
	my %s = (main => 0, librdkafka => 0);
	for my $task (glob("/proc/$pid/task/*"))
	{
		my $t = _stat_cpu_s("$task/stat") // next;
		$s{ $task =~ m{/$pid$} ? 'main' : 'librdkafka' } += $t;
	}
	return \%s;
}

sub _stat_cpu_s
{
	my ($file) = @_;
	open my $fh, '<', $file or return undef;
	my $stat = <$fh>;
	# after the command's parentheses: state is field 3, utime 14, stime 15
	my @f = split ' ', $stat =~ s/^.*\) //sr;
	return ($f[11] + $f[12]) / POSIX::sysconf(POSIX::_SC_CLK_TCK());
}

# Appends $line to postgresql.conf and reloads.
sub reload_with
{
	my ($node, $line) = @_;
	$node->append_conf('postgresql.conf', "$line\n");
	$node->reload;
}

# Pauses delivery (outbox.enabled = off), then waits until each of the
# $shards workers of database postgres says it is paused; with $from (a log
# offset) only waits, from there. True if they all did within 10 s.
sub pause_delivery
{
	my ($node, $shards, $from) = @_;
	if (!defined $from)
	{
		$from = -s $node->logfile;
		reload_with($node, 'outbox.enabled = off');
	}
	return wait_until(10, sub {
		my $log = log_since($node, $from);
		return !grep { $log !~ /outbox "postgres" shard $_: delivery paused/ } 0 .. $shards - 1;
	});
}

# A session holding a SHARE lock on the outbox: the workers can read it,
# but their DELETE of acknowledged events waits (and so does outbox_send).
# With $mode 'ACCESS EXCLUSIVE' their reads wait too.
sub start_locker
{
	my ($node, $mode) = @_;
	$mode //= 'SHARE';
	my ($in, $out, $err) = ("BEGIN;\nLOCK TABLE outbox IN $mode MODE;\n"
		  . "SELECT 'locked';\nSELECT pg_sleep(120);\nCOMMIT;\n", '', '');
	my $h = IPC::Run::start([ 'psql', '-X', '-d', $node->connstr('postgres'), '-f', '-' ],
		\$in, \$out, \$err, IPC::Run::timeout(180));
	$h->pump until $out =~ /locked/;
	return $h;
}

# Ends start_locker's session (also when the server was stopped meanwhile).
sub release_locker
{
	my ($node, $h) = @_;
	$node->psql('postgres', q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity
		WHERE query LIKE 'SELECT pg_sleep(120)%'});
	eval { $h->finish };
}

# ---- Kafka ---------------------------------------------------------------

# How many messages a topic's partitions have taken (their end offsets,
# kcat -Q): the count where the broker keeps only the last few MiB of a
# partition and a read could not see them all.
sub end_offsets_sum
{
	my ($broker, $topic, $partitions) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-Q', '-b', $broker->bootstrap,
		map { ('-t', "$topic:$_:-1") } 0 .. $partitions - 1 ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat -Q failed: $err";
	my @ends = $out =~ /^\Q$topic\E \[\d+\] offset (\d+)$/mg;
	die "kcat -Q: expected $partitions partitions, got: $out" unless @ends == $partitions;
	my $sum = 0;
	$sum += $_ for @ends;
	return $sum;
}

# Every message of a topic, read with kcat from the beginning of each
# partition: [{partition, offset, key, value, headers => {..}, id, size,
# timestamp}]; size is the value's length, -1 for a null value (which kcat
# prints as an empty one), timestamp the record's, in ms. With $count, at
# most that many: kcat stops at the end of a partition only while nothing
# new arrives there, so a full read under load lasts as long as the load.
# With $isolation, kcat reads at that isolation.level (librdkafka's
# default: read_committed).
sub consume
{
	my ($broker, $topic, $count, $isolation) = @_;
	my ($out, $err) = ('', '');
	my @count = $count ? ('-c', $count) : ();
	push @count, ('-X', "isolation.level=$isolation") if $isolation;
	IPC::Run::run([ 'kcat', '-C', '-b', $broker->bootstrap, '-t', $topic, '-e', '-q', @count,
		'-f', '%p\t%o\t%k\t%S\t%T\t%h\t%s\n' ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(120))
	  or die "kcat failed: $err";
	my @messages;
	for my $line (split /\n/, $out)
	{
		my ($p, $o, $k, $size, $ts, $h, $v) = split /\t/, $line, 7;
		my %headers = map { split /=/, $_, 2 } grep { length } split /,/, ($h // '');
		push @messages, { partition => $p, offset => $o, key => $k, value => $v,
			headers => \%headers, id => $headers{'outbox-id'}, size => $size,
			timestamp => $ts };
	}
	return [ sort { $a->{partition} <=> $b->{partition} || $a->{offset} <=> $b->{offset} } @messages ];
}

# The same, read by a second, independent client: kafkajs, each message
# parsed by the CloudEvents SDK's Kafka binding (tools/js/consume.js; its
# node_modules come from scripts/test.sh's npm ci). Stops once every
# partition reached the high watermark it had at the start:
# [{partition, offset, key, value, headers => {..}, timestamp,
#   cloudevent => {specversion, id, source, type, time, data, ...} or undef,
#   cloudevent_error}], key and value undef when null.
sub consume_js
{
	my ($broker, $topic) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'node', "$root/tools/js/consume.js", $broker->bootstrap, $topic ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(120))
	  or die "consume.js failed: $err";
	note("consume.js: $err") if length $err;
	my @messages = map { JSON::PP::decode_json($_) } grep { length } split /\n/, $out;
	return [ sort { $a->{partition} <=> $b->{partition} || $a->{offset} <=> $b->{offset} } @messages ];
}

# Decodes one message's value with protoc and proto/outbox.proto alone.
sub decode_envelope
{
	my ($broker, $topic, $partition, $offset) = @_;
	my ($raw, $text, $err) = ('', '', '');
	IPC::Run::run([ 'kcat', '-C', '-b', $broker->bootstrap, '-t', $topic, '-p', $partition,
		'-o', $offset, '-c', '1', '-e', '-q', '-D', '', '-f', '%s' ],
		'<', \undef, '>', \$raw, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat failed: $err";
	IPC::Run::run([ 'protoc', "--proto_path=$root/proto", '--decode=outbox.v1.Event',
		'outbox.proto' ], '<', \$raw, '>', \$text, '2>', \$err)
	  or die "protoc failed: $err";
	return $text;
}

# Kafka's murmur2 partitioner (the Java client's default for keyed records).
sub kafka_partition
{
	my ($key, $partitions) = @_;
	my @data = unpack('C*', $key);
	my $len = scalar @data;
	my $m = 0x5bd1e995;
	my $mul = sub {
		my ($a, $b) = @_;
		# 32-bit multiply without overflowing Perl's doubles
		return ((($a & 0xffff) * $b) + (((($a >> 16) * $b) & 0xffff) << 16)) & 0xffffffff;
	};
	my $h = (0x9747b28c ^ $len) & 0xffffffff;
	my $i = 0;
	for (; $i + 4 <= $len; $i += 4)
	{
		my $k = $data[$i] | ($data[$i + 1] << 8) | ($data[$i + 2] << 16) | ($data[$i + 3] << 24);
		$k = $mul->($k, $m);
		$k ^= $k >> 24;
		$k = $mul->($k, $m);
		$h = $mul->($h, $m);
		$h ^= $k;
	}
	my $rest = $len - $i;
	$h ^= $data[$i + 2] << 16 if $rest >= 3;
	$h ^= $data[$i + 1] << 8 if $rest >= 2;
	if ($rest >= 1) { $h ^= $data[$i]; $h = $mul->($h, $m); }
	$h ^= $h >> 13;
	$h = $mul->($h, $m);
	$h ^= $h >> 15;
	return ($h & 0x7fffffff) % $partitions;
}

# Of messages whose values are "key:seq": how many distinct, how many
# duplicates, and the keys whose first copies are out of seq order.
sub first_copies
{
	my ($messages) = @_;
	my (%seen, %last_seq, %out_of_order);
	my $duplicates = 0;
	for my $m (@$messages)
	{
		my ($key, $seq) = split /:/, $m->{value};
		if ($seen{ $m->{value} }++) { $duplicates++; next; }
		$out_of_order{$key}++ if defined $last_seq{$key} && $seq < $last_seq{$key};
		$last_seq{$key} = $seq;
	}
	return { distinct => scalar keys %seen, duplicates => $duplicates,
		out_of_order => join(',', sort keys %out_of_order) };
}

# Commits $n events of $topic one by one, 0.2 s apart (each wakes the
# worker for a read), valued "$prefix-1".."$prefix-$n", keyed by value;
# returns the values.
sub commit_one_by_one
{
	my ($node, $topic, $prefix, $n) = @_;
	my @values;
	for my $i (1 .. $n)
	{
		push @values, "$prefix-$i";
		$node->safe_psql('postgres', "SELECT outbox_send('$topic', '$prefix-$i', 'k-$prefix-$i')");
		Time::HiRes::sleep(0.2);
	}
	return @values;
}

# Checks that $topic holds each of @$values (besides $ignore) and none
# twice; the FIGURES line $label gets the counts.
sub check_sent_once
{
	my ($broker, $topic, $values, $ignore, $label) = @_;
	my %copies;
	$copies{ $_->{value} }++ for @{ consume($broker, $topic) };
	delete $copies{$ignore};
	is_deeply([ sort keys %copies ], [ sort @$values ], 'every committed event arrived');
	my @twice = grep { $copies{$_} > 1 } sort keys %copies;
	diag(sprintf('FIGURES %s: events=%d sent_twice=%d', $label, scalar @$values, scalar @twice));
	is_deeply(\@twice, [], 'no event was produced twice');
}

# A fault test's frame: load of 3 sessions from $o{first} into $o{topic}
# ($o{per_session} events each), $o{fault}->() once delivery flows (it
# returns its figures), then the check of what arrived, with duplicates
# bounded by $o{bound}.
sub fault_under_load
{
	my ($node, $kafka, $label, %o) = @_;
	my $load = start_load($node, sessions => 3, per_session => $o{per_session} // 400,
		keys => 5, topic => $o{topic}, first_session => $o{first}, sleep => 0.02);
	ok(wait_until(60, sub { @{ consume($kafka, $o{topic}, 50) } >= 50 }),
		"$label: delivery flows before the fault");
	my $figures = $o{fault}->();
	wait_load($load);
	my $started = Time::HiRes::time();
	ok(wait_for_empty($node), "$label: the outbox drains");
	my $r = check_delivery($label, committed_of($node, $o{first}, $o{first} + 2),
		consume($kafka, $o{topic}));
	cmp_ok($r->{duplicates}, '<=', $o{bound}, "$label: duplicates within $o{bound}");
	diag(sprintf('FIGURES %s: %s drained_after_load_s=%.1f duplicates=%d',
			$label, $figures, Time::HiRes::time() - $started, $r->{duplicates}));
}

# Compares what was committed with what Kafka holds, prints the figures and
# asserts: nothing lost, nothing rolled back sent, per-key commit order.
# A read_committed consumer stops at the last stable offset: a committed
# transaction's events stay out of its view until the coordinator has
# written the transaction's markers, which Kafka does after it answered
# the commit (later still when a broker has just come back). $read, a
# reader, is asked again until every committed event is in view, for up
# to 30 s; an event still missing then is lost.
sub _read_committed_view
{
	my ($label, $want, $read) = @_;
	my ($started, $first_missing) = (Time::HiRes::time(), undef);
	while (1)
	{
		my $received = $read->();
		my %seen = map { $_->{value} => 1 } @$received;
		my $missing = grep { !$seen{$_} } keys %$want;
		$first_missing //= $missing;
		my $waited = Time::HiRes::time() - $started;
		diag(sprintf('%s: %d committed event(s) came into the read_committed view after %.1f s',
				$label, $first_missing, $waited)) if $first_missing && !$missing;
		return $received if !$missing || $waited > 30;
		Time::HiRes::sleep(1);
	}
}

sub check_delivery
{
	my ($label, $committed, $received) = @_;
	my %want = map { $_->{value} => $_ } @$committed;
	$received = _read_committed_view($label, \%want, $received) if ref $received eq 'CODE';
	my (%seen, %last_seq, %partition_of);
	my ($duplicates, $phantom, $violations, $moved) = (0, 0, 0, 0);
	for my $m (@$received)
	{
		my $c = $want{ $m->{value} };
		if (!$c) { $phantom++; next; }
		if ($seen{ $m->{value} }++) { $duplicates++; next; }
		# order by first arrival: a re-sent duplicate is not a violation
		my $k = $c->{key};
		if (defined $last_seq{$k} && $c->{seq} < $last_seq{$k})
		{
			diag("order violation: key $k seq $c->{seq} first at partition $m->{partition}"
				  . " offset $m->{offset}, after seq $last_seq{$k}") if $violations < 5;
			$violations++;
		}
		$last_seq{$k} = $c->{seq};
		$moved++ if defined $partition_of{$k} && $partition_of{$k} != $m->{partition};
		$partition_of{$k} = $m->{partition};
	}
	my @lost = sort grep { !$seen{$_} } keys %want;
	my $lost = @lost;
	diag("$label: lost " . join(', ', @lost[ 0 .. ($lost > 10 ? 9 : $lost - 1) ])) if $lost;
	my $delivered = keys %seen;
	diag(sprintf("FIGURES %s: committed=%d delivered=%d lost=%d phantom=%d duplicates=%d order_violations=%d",
			$label, scalar @$committed, $delivered, $lost, $phantom, $duplicates, $violations));
	is($lost, 0, "$label: no committed event lost");
	is($phantom, 0, "$label: no rolled-back event sent");
	is($violations, 0, "$label: per-key order kept");
	is($moved, 0, "$label: each key stays on one partition");
	return { lost => $lost, phantom => $phantom, duplicates => $duplicates,
		violations => $violations, delivered => $delivered };
}

1;
