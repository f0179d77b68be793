#!/usr/bin/perl
# The benchmark's driver, run by bench/run.sh as the unprivileged user once
# the module and the helpers are built: starts the broker and a node, runs
# the parts asked for (bench/parts/*.pm) and writes the results as JSON
# (bench/results.json's shape) and as a table.
#
# Usage: bash bench/run.sh [--quick] [--part NAME[,NAME...]]... [--out PATH]
#                          [--runs N] [--sustained-runs N] [--server-log PATH]
#                          [--kafka mock|real] [--set outbox.NAME=VALUE]...
#
#   --part       a part of @PARTS below (default: those marked by default
#                for the Kafka chosen); `--part help` lists them
#   --kafka      mock (default): the project's broker, librdkafka's mock cluster;
#                real: a real three-broker Apache Kafka 4.4 (t/KafkaCluster.pm),
#                results under the key real_kafka of the output file
#   --quick      fewer events and shorter runs, for a fast check
#   --out        where the JSON goes (default bench/results.json)
#   --runs       repetitions of each measurement (default 3)
#   --sustained-runs  repetitions of the sustained part (default 1)
#   --server-log also copy the server log there
#   --set        a setting for the whole run, for a profile (meta.outbox_settings
#                records it); the figures of record use none
use strict;
use warnings;

# PostgreSQL::Test::Utils sends STDOUT and STDERR to its log file: keep ours
BEGIN
{
	open(our $STDOUT, '>&', \*STDOUT) or die;
	open(our $STDERR, '>&', \*STDERR) or die;
}
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../t";
use Bench::Env;
use Bench::Util ();
use Bench::Load;
use Bench::Results;
use File::Copy ();
use Getopt::Long qw(GetOptionsFromArray);
use Test::More ();

# The parts, in the order they run: each is bench/parts/<Module>.pm with a
# run($ctx), and says whether it runs by default on the project's broker
# (mock) and on real Kafka (real: the figures the mock's gaps could change).
my @PARTS = (
	{ name => 'enqueue', mock => 1, real => 1, about => 'outbox_send against a plain INSERT' },
	{ name => 'capture', mock => 1, real => 0, about => 'row capture against plain writes' },
	{ name => 'drain', mock => 1, real => 1, about => 'a backlog against a plain SQL drain' },
	{ name => 'latency', mock => 1, real => 1, about => 'commit to consumer against a plain producer' },
	{ name => 'sustained', mock => 1, real => 0, about => 'half the maximum rate for minutes, a snapshot held' },
	{ name => 'tail', mock => 0, real => 1,
		about => 'p99 per 5-s window at 3000/s and 80 %, 2 shards, a snapshot held, against the floor' },
	{ name => 'cpu', mock => 1, real => 1,
		about => 'the worker\'s main thread and librdkafka\'s threads at fixed rates (and round trips)' },
	{ name => 'memory', mock => 1, real => 1, about => 'the workers\' memory with large events' },
	{ name => 'databases', mock => 1, real => 0, about => 'many databases, one launcher' },
	# restarts the node with room for 100 workers, about 20 minutes: only when named
	{ name => 'tenants', mock => 0, real => 0,
		about => 'a hundred databases: idle cost, first event after idling, 10/s each' },
	# thousands of topics on the project's broker (which makes them): only when named
	{ name => 'topics', mock => 0, real => 0, about => 'what a topic costs a shard: 1,000 to 20,000 topics' },
	# needs outbox.delivery and real Kafka's transactions: only when named
	{ name => 'modes', mock => 0, real => 0, about => 'exactly-once against at-least-once delivery' },
	# needs wal_level = logical and Java's Kafka Connect: only when named
	{ name => 'debezium', mock => 0, real => 0,
		about => 'side by side with Debezium\'s outbox EventRouter in Kafka Connect' },
);
our ($STDOUT, $STDERR);

main();

sub main
{
	# the harness's chatter stays in its log (tmp_check/log); ours goes out
	$STDOUT->autoflush(1);
	# OutboxTest's notes (broker commands) go to the harness's log too
	Test::More->builder->no_ending(1);
	Test::More->builder->output(\*STDOUT);
	Test::More->builder->failure_output(\*STDERR);
	my $ctx = eval { options(@ARGV) } or do { print $STDERR $@; exit 2 };
	require "$FindBin::Bin/parts/" . ucfirst($_->{name}) . '.pm' for @PARTS;
	my $t0 = time;
	$ctx->{loadavg_at_start} = Bench::Util::slurp('/proc/loadavg') =~ s/\n//r;
	my $env = $ctx->{env};
	my $status = eval {
		$env->start_broker;
		$env->start_node;
		$env->say('server up: ', $env->sql('SHOW server_version'), ", outbox workers: @{ $env->worker_pids }");
		# this build's settings and their defaults
		$ctx->{settings} = { map { split /\|/, $_, 2 } split /\n/, $env->sql(
			q{SELECT name, setting || coalesce(' ' || unit, '') FROM pg_settings WHERE name LIKE 'outbox.%'}) };
		for my $p (map { $_->{name} } @PARTS)
		{
			next unless grep { $_ eq $p } @{ $ctx->{parts} };
			my $run = \&{ 'Bench::Part::' . ucfirst($p) . '::run' };
			$run->($ctx);
		}
		'ok';
	};
	if (!$status)
	{
		print $STDERR "BENCHMARK FAILED: $@";
		print $STDERR "--- server log (last lines)\n", tail($env->node->logfile, 40) if $env->{node};
		$status = 'failed';
	}
	eval { finish($ctx, $status, time - $t0); 1 } or do { print $STDERR "writing the results failed: $@"; $status = 'failed' };
	exit($status eq 'ok' ? 0 : 1);
}

sub options
{
	my @args = @_;
	my %o = (runs => 3, 'sustained-runs' => 1, part => [], kafka => 'mock', set => []);
	GetOptionsFromArray(\@args, \%o, 'quick', 'part=s@', 'out=s', 'runs=i', 'sustained-runs=i', 'set=s@',
		'server-log=s', 'work=s', 'install-path=s', 'helpers=s', 'command=s', 'kafka=s')
	  or die "bad options (see bash bench/run.sh --help)\n";
	die "--kafka: mock or real\n" unless $o{kafka} =~ /^(?:mock|real)$/;
	my @parts = map { split /,/ } @{ $o{part} };
	die parts_help() if grep { $_ eq 'help' } @parts;
	@parts = map { $_->{name} } grep { $_->{ $o{kafka} } } @PARTS unless @parts;
	for my $p (@parts)
	{
		die "unknown part: $p\n" . parts_help() unless grep { $_->{name} eq $p } @PARTS;
	}
	die "--runs/--sustained-runs: a positive number\n" unless $o{runs} > 0 && $o{'sustained-runs'} > 0;
	die "--set: outbox.NAME=VALUE\n" if grep { !/^outbox\.\w+=/ } @{ $o{set} };
	my $cfg = sizes($o{quick}, $o{kafka});
	my $env = Bench::Env->new(work => $o{work}, install_path => $o{'install-path'}, kafka => $o{kafka},
		helpers => $o{helpers}, bench => $FindBin::Bin, payload => $cfg->{payload}, out => $STDOUT, settings => $o{set},
		logical => (grep({ $_ eq 'debezium' } @parts) ? 1 : 0));
	return { env => $env, res => Bench::Results->new($STDOUT), cfg => $cfg, opts => \%o,
		parts => \@parts, runs => $o{runs}, sustained_runs => $o{'sustained-runs'} };
}

sub parts_help
{
	return join('', "parts (default on mock / real):\n",
		map { sprintf("  %-10s %-4s %-4s %s\n", $_->{name}, $_->{mock} ? 'yes' : 'no',
			$_->{real} ? 'yes' : 'no', $_->{about}) } @PARTS);
}

# What is measured how long; --quick for a fast check. Real Kafka keeps
# three copies of everything on the same disk: the issue's two shard counts
# for the drain, and fewer 1 MB events in the memory part.
sub sizes
{
	my ($quick, $kafka) = @_;
	my $real = ($kafka // '') eq 'real';
	my %c = (payload => 200, latency_rate => 1000, pgbench_clients => 8, topic_partitions => 12, brokers => 3,
		latency_segment_seconds => $real ? 30 : Bench::Load::SEGMENT_S(), quick => $quick ? 1 : 0,
		kafka => $real ? 'real' : 'mock');
	my @k = qw(enqueue_rows pgbench_seconds drain_events max_rate_seconds latency_seconds sustained_seconds
	  sustained_hold_seconds sustained_window_seconds sustained_after_seconds memory_events large_events);
	@c{@k} = $quick
	  ? (20000, 4, 100000, 4, 5, 60, 20, 10, 20, 200000, 500)
	  : (100000, 10, 500000, 10, 20, 300, 60, 30, 60, 1000000, 2000);
	$c{drain_shards} = $quick || $real ? [ 1, 2 ] : [ 1, 2, 4 ];
	$c{large_events} = 500 if $real;
	# the tail part (issue 19: 5 minutes, a 60-s snapshot, 5-s windows)
	@c{qw(tail_seconds tail_hold_seconds tail_window_seconds tail_floor_seconds)} = $quick ? (40, 10, 5, 10) : (300, 60, 5, 60);
	# the debezium part: how long Kafka is down (issue 19: 60 s)
	$c{dbz_outage_seconds} = $quick ? 20 : 60;
	return \%c;
}

sub finish
{
	my ($ctx, $status, $duration) = @_;
	my ($env, $res, $o) = @$ctx{qw(env res opts)};
	my $log = $env->{node} ? $env->node->logfile : undef;
	eval { $env->{node}->stop('fast') } if $env->{node};
	# the wrapper copies these where --out and --server-log say
	File::Copy::copy($log, "$o->{work}/server.log") if $log;
	return if $res->empty && $status ne 'ok';
	require Bench::ServerLog;
	$res->write_json("$o->{work}/results.json", $status, meta($ctx, $duration), Bench::ServerLog::summary($log));
	$res->print_table;
	Bench::ServerLog::print_summary($log, $STDOUT);
}

sub meta
{
	my ($ctx, $duration) = @_;
	my ($cfg, $o) = @$ctx{qw(cfg opts)};
	my @t = gmtime;
	return {
		date => sprintf('%04d-%02d-%02dT%02d:%02d:%02dZ', $t[5] + 1900, $t[4] + 1, @t[3, 2, 1, 0]),
		duration_s => $duration,
		command => $o->{command} // "bash bench/run.sh",
		quick => $o->{quick} ? JSON::PP::true : JSON::PP::false,
		parts => join(' ', @{ $ctx->{parts} }),
		runs => $ctx->{runs},
		sustained_runs => $ctx->{sustained_runs},
		git => $ENV{BENCH_GIT} // '',
		postgres => `$o->{'install-path'}/bin/postgres --version` =~ s/\n//r,
		librdkafka => $ENV{BENCH_LIBRDKAFKA} // '',
		cpus => 0 + `nproc`,
		# the machine is shared: what else ran beside the benchmark
		loadavg_at_start => $ctx->{loadavg_at_start},
		loadavg_at_end => Bench::Util::slurp('/proc/loadavg') =~ s/\n//r,
		kernel => `uname -r` =~ s/\n//r,
		install_warning => '',
		module_md5 => $ENV{BENCH_MODULE_MD5} // '',
		outbox_settings => $ctx->{settings} // {},
		# the debezium part's versions and Connect settings
		($ctx->{debezium} ? (debezium => $ctx->{debezium}) : ()),
		kafka => kafka_meta($cfg),
		notes => [
			'Ratios are computed within each run, then summarised (median, min, max over runs).',
			'enqueue *_time_ratio: outbox time / plain time (for pgbench: plain tps / outbox tps); delivery paused.',
			'drain: from switching delivery on to an empty outbox, after VACUUM (ANALYZE) and CHECKPOINT '
			  . '(outbox_burst_*: without them, the worker having just delivered single events from the small outbox); '
			  . 'the SQL baseline reads and deletes the same batches (1000, in id order) from an ordinary table in one session; '
			  . 'kafka_surplus = messages that reached the topic minus events (0 = none lost, none duplicated).',
			'latency: consumer receive time minus clock_timestamp() taken in the statement that calls outbox_send '
			  . '(so commit included); the load runs in segments of at most ' . $cfg->{latency_segment_seconds}
			  . ' s' . ($cfg->{kafka} eq 'real' ? '' : ' and ' . Bench::Load::SEGMENT_MESSAGES() . ' messages')
			  . ', each into a fresh topic (the mock broker walks a partition\'s whole log on every fetch; real Kafka does not, '
			  . 'one segment per load there); the consumer uses fetch.wait.max.ms=' . ($cfg->{kafka} eq 'real' ? 100 : 1)
			  . '; producer_<rate>_* is a plain librdkafka producer (idempotent, so acks=all; linger.ms=' . Bench::Load::FLOOR_LINGER_MS() . ', the workers\' own) '
			  . 'at the same rate through the same brokers and consumer: the floor; <rate>_p50_to_floor = outbox / floor; '
			  . 'loaded_<rate>_* the same producer while pgbench runs the same transaction with a plain INSERT at the same rate; '
			  . '<rate>_ack_*: created_at to the acknowledgement, every event of the load (outbox_shard_stats); '
			  . ($cfg->{kafka} eq 'real' ? '*_to_append_*, *_append_to_consumer_*: each latency split at the leader\'s append (LogAppendTime topics); ' : '')
			  . '*_requests_per_1000: requests the producer sent per 1000 events.',
			'sustained: windows by receive time; delivered_pct = events read back / events committed.',
			'tail: 2 shards, a REPEATABLE READ snapshot held in the middle of the run; windows by receive time; '
			  . '<rate>_worst_window_to_floor = the worst window\'s p99 / the floor\'s whole-run p99 at the same rate '
			  . '(a plain producer, ' . $cfg->{tail_floor_seconds} . ' s); tail_windows lists every window.',
			'memory: VmRSS counts the shared buffers the worker touched (RssShmem); RssAnon and Pss_Anon are its private memory.',
		],
		parameters => { latency_shards => 1, payload_bytes => $cfg->{payload},
			map { $_ => ref $cfg->{$_} ? "@{ $cfg->{$_} }" : $cfg->{$_} } grep { !/^(?:quick|payload|kafka)$/ } keys %$cfg },
	};
}

# Which Kafka the figures come from.
sub kafka_meta
{
	my ($cfg) = @_;
	return 'mock: tools/outbox-broker, librdkafka 2.0.2\'s mock cluster, 3 brokers in one process'
	  if $cfg->{kafka} eq 'mock';
	return 'real: Apache Kafka 4.4.0 (t/KafkaCluster.pm), 3 KRaft nodes (broker and controller each) '
	  . 'on loopback, JVM heaps 384 MB, replication factor 3, min.insync.replicas=2; '
	  . 'the bench topic 12 partitions, retention.bytes 100 MB per partition';
}

sub tail
{
	my ($file, $n) = @_;
	my @lines = split /\n/, Bench::Util::slurp($file);
	return join("\n", @lines[ ($#lines - $n + 1 > 0 ? $#lines - $n + 1 : 0) .. $#lines ]) . "\n";
}
