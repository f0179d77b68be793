# Part topics: what a topic costs one shard. Its producer writes to 1,000,
# 10,000 and 20,000 distinct topics, two keyed events each (one key a
# topic, so each topic's pair must arrive in order), from a fresh producer
# (the node restarted before each count), 1,000 topics at a time (all at
# once, the project's broker falls 20 s behind on its metadata requests
# and librdkafka drops its connections): the worker's private memory per
# topic (RssAnon, and palloc, PostgreSQL's share of it), librdkafka's
# threads and the worker's broker connections, the drain rate, the idle
# CPU the topics leave behind (librdkafka refreshes and reports every topic
# it knows), and whether each key's order held on a sample of the topics.
# Then, with those topics known, a backlog on one key of one topic, which
# the partition pacing holds back 5 in flight at a time: its drain rate
# and the worker's CPU per event must not grow with the topics. Once more
# at 1,000 topics with librdkafka's statistics off
# (statistics.interval.ms=0, which outbox_kafka_brokers needs): what of a
# topic's memory they cost. The project's broker only: it makes a topic at
# its first metadata request (4 partitions); real Kafka would need each
# one created. Every count and run writes to the same topics (topics_1 to
# topics_20000, each value tagged with its count and run), so that the
# broker holds no more than 20,000.
package Bench::Part::Topics;

use strict;
use warnings;
use Bench::Util ();
use OutboxTest ();
use Time::HiRes ();

use constant COUNTS    => (1000, 10000, 20000);
use constant PER_TOPIC => 2;
use constant SAMPLE    => 20;
use constant IDLE_S    => 10;
use constant WAVE      => 1000;
use constant HOT       => 5000;
use constant NO_STATS  => 1000;

sub run
{
	my ($ctx) = @_;
	my $env = $ctx->{env};
	die "part topics: the project's broker only (real Kafka needs every topic created)\n" if $env->real_kafka;
	$env->log('part topics: ' . PER_TOPIC . ' keyed events to each of ' . join(', ', COUNTS)
		  . ' topics, one shard, a fresh producer each');
	$env->set_shards(1);
	# values the order check reads as they were sent
	$env->set_setting('outbox.message_format', 'payload');
	for my $run (1 .. $ctx->{runs})
	{
		count_topics($ctx, $run, $_, "t$_") for COUNTS;
		$env->set_setting('outbox.kafka_config', 'statistics.interval.ms=0');
		count_topics($ctx, $run, NO_STATS, 't' . NO_STATS . '_nostats');
		$env->reset_setting('outbox.kafka_config');
	}
	$env->reset_setting('outbox.message_format');
}

# One count of topics, new to a producer that has written to one topic.
sub count_topics
{
	my ($ctx, $run, $n, $m) = @_;
	my ($env, $res) = @$ctx{qw(env res)};
	my $pid = fresh_worker($env);
	my $before = snapshot($env, $pid);
	my $tag = "${m}r${run}";
	my $t0 = Time::HiRes::time();
	for (my $from = 1; $from <= $n; $from += WAVE)
	{
		my $to = $from + WAVE - 1;
		# a wave's first event of each topic, then its second: ids in that order
		$env->sql("SELECT count(outbox_send('topics_' || t, '$tag' || 'e$_', 'k' || t))"
			  . " FROM generate_series($from, $to) t") for 1 .. PER_TOPIC;
		$env->wait_empty(900);
	}
	my $seconds = Time::HiRes::time() - $t0;
	my ($pid2) = @{ $env->worker_pids };
	die "the worker restarted during the topics part ($pid -> $pid2)" unless $pid2 == $pid;
	my $after = snapshot($env, $pid);
	$res->record('topics', "${m}_events_per_s", 'events/s', $run, $n * PER_TOPIC / $seconds);
	$res->record('topics', "${m}_rssanon_kb_per_topic", 'KB', $run, ($after->{rssanon_kb} - $before->{rssanon_kb}) / $n);
	$res->record('topics', "${m}_palloc_kb_per_topic", 'KB', $run, ($after->{palloc_mb} - $before->{palloc_mb}) * 1024 / $n);
	$res->record('topics', "${m}_rssanon_mb", 'MB', $run, $after->{rssanon_kb} / 1024);
	$res->record('topics', "${m}_threads", 'threads', $run, $after->{threads});
	$res->record('topics', "${m}_threads_added", 'threads', $run, $after->{threads} - $before->{threads});
	$res->record('topics', "${m}_broker_connections", 'connections', $run, $after->{connections});
	$res->record('topics', "${m}_idle_cpu_pct", '% of a core', $run, $after->{idle_cpu_pct});
	$res->record('topics', "${m}_idle_cpu_pct_added", '% of a core', $run, $after->{idle_cpu_pct} - $before->{idle_cpu_pct});
	$res->record('topics', "${m}_sampled_in_order", 'topics', $run, in_order($env, $tag, $n));
	$res->record('topics', "${m}_sampled", 'topics', $run, SAMPLE);
	hot_key($ctx, $run, $pid, $m);
}

# HOT events on one key of the bench topic, drained by the producer that
# knows the topics: the rate, and the worker's main thread's CPU per event.
sub hot_key
{
	my ($ctx, $run, $pid, $m) = @_;
	my ($env, $res) = @$ctx{qw(env res)};
	$env->set_enabled(0);
	$env->sql("SELECT count(outbox_send('bench', repeat('x', $env->{payload}), 'hot')) FROM generate_series(1, "
		  . HOT . ')');
	my $cpu0 = OutboxTest::thread_cpu_s($pid)->{main};
	my $seconds = $env->timed_drain;
	my $cpu1 = OutboxTest::thread_cpu_s($pid)->{main};
	$res->record('topics', "${m}_hot_key_events_per_s", 'events/s', $run, HOT / $seconds);
	$res->record('topics', "${m}_hot_key_main_cpu_us_per_event", 'us', $run, 1e6 * ($cpu1 - $cpu0) / HOT);
}

# The node restarted (a producer with no topic handle), then one topic
# written to and delivered: the worker's pid.
sub fresh_worker
{
	my ($env) = @_;
	$env->node->restart;
	$env->wait_workers(1);
	$env->warm_up;
	sleep 2;
	return $env->worker_pids->[0];
}

# The worker's private memory, palloc, threads, broker connections, and its
# CPU over IDLE_S seconds with nothing to send.
sub snapshot
{
	my ($env, $pid) = @_;
	sleep 2;
	my $cpu0 = OutboxTest::cpu_s($pid);
	Time::HiRes::sleep(IDLE_S);
	my $cpu1 = OutboxTest::cpu_s($pid);
	my $kb = Bench::Util::proc_kb($pid) or die "the worker (pid $pid) is gone";
	my @tasks = glob("/proc/$pid/task/*");
	return { rssanon_kb => $kb->{RssAnon}, palloc_mb => Bench::Part::Memory::palloc_mb($env, $pid),
		threads => scalar @tasks, connections => established($pid),
		idle_cpu_pct => 100 * ($cpu1 - $cpu0) / IDLE_S };
}

# The process's established TCP connections (its sockets' inodes found in
# /proc/net/tcp*): the worker's only TCP peers are the brokers.
sub established
{
	my ($pid) = @_;
	my %mine = map { (readlink($_) // '') =~ /^socket:\[(\d+)\]$/ ? ($1 => 1) : () } glob("/proc/$pid/fd/*");
	my $n = 0;
	for my $table ('/proc/net/tcp', '/proc/net/tcp6')
	{
		open my $fh, '<', $table or next;
		while (my $line = <$fh>)
		{
			my @f = split ' ', $line;
			$n++ if @f > 9 && $f[3] eq '01' && $mine{ $f[9] };
		}
	}
	return $n;
}

# Of SAMPLE topics spread over the n, how many hold their key's events
# in the order they were sent (each event once at least).
sub in_order
{
	my ($env, $tag, $n) = @_;
	my $want = join(' ', map { "${tag}e$_" } 1 .. PER_TOPIC);
	my $ok = 0;
	for my $i (0 .. SAMPLE - 1)
	{
		my $t = 1 + int($i * ($n - 1) / (SAMPLE - 1));
		my %seen;
		my @got = grep { /^${tag}e/ && !$seen{$_}++ } map { $_->{value} } @{ read_topic($env, "topics_$t") };
		$ok++ if "@got" eq $want;
	}
	return $ok;
}

# A topic's messages. With 20,000 topics the project's broker, one thread,
# can be too busy answering the producer's metadata requests to take a
# new connection: a read that failed is tried again.
sub read_topic
{
	my ($env, $topic) = @_;
	for my $try (1 .. 5)
	{
		my $messages = eval { OutboxTest::consume($env->{broker}, $topic) };
		return $messages if $messages;
		$env->say("   reading $topic failed (try $try): $@");
		sleep 5;
	}
	die "part topics: could not read $topic back\n";
}

1;
