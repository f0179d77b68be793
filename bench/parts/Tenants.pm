# Part tenants: a server with a database per tenant (issue 40). DATABASES
# databases with the extension, one shard each, measured twice in the same
# run: with workers that always run (outbox.worker_idle_timeout = 0, the
# design before 0.8) and with workers that sleep when idle (the default).
#  - idle: CPU of every pg_outbox process together (launcher, workers,
#    their librdkafka threads) over IDLE_S seconds, in % of one core; their
#    private memory (Private_Clean + Private_Dirty) per database; threads;
#    TCP connections to the brokers;
#  - first event: one event committed in each database in turn after the
#    workers were idle (asleep: for IDLE_BEFORE_FIRST_S), commit to
#    consumer, p50/p99/max over the databases;
#  - 10/s each: LOAD_RATE events/s into every database at once (pgbench per
#    database) against one database at the same total rate, p50/p99.
# Runs only when named: it restarts the node with room for the workers
# and connections, and takes about 20 minutes (--quick: about 6).
package Bench::Part::Tenants;

use strict;
use warnings;
use Bench::Load;
use Bench::Stats qw(percentile ratio);
use Bench::Util qw(slurp);
use OutboxTest qw(cpu_s wait_until);
use Time::HiRes ();

use constant DATABASES => 100;
use constant LOAD_RATE => 10;		# events/s into each database
use constant WARM_KEYS => 128;

sub run
{
	my ($ctx) = @_;
	my ($env, $cfg) = @$ctx{qw(env cfg)};
	my %t = $cfg->{quick}
	  ? (idle => 20, asleep_before_first => 60, timeout => '5s', load => 10)
	  : (idle => 60, asleep_before_first => 600, timeout => '60s', load => 30);
	$env->log('part tenants: ' . DATABASES . " databases, one shard each: idle $t{idle} s,"
		  . " first events after $t{asleep_before_first} s asleep, " . LOAD_RATE . '/s each');
	$env->set_shards(1);
	make_room($env);
	my @dbs = map { "tenant$_" } 1 .. DATABASES;
	for my $run (1 .. $ctx->{runs})
	{
		$env->set_setting('outbox.worker_idle_timeout', '0');
		for my $db (@dbs)
		{
			$env->sql("CREATE DATABASE $db");
			$env->sql('CREATE EXTENSION outbox', $db);
		}
		my $t0 = Time::HiRes::time();
		wait_until(120, sub { @{ $env->worker_pids } == DATABASES + 1 })
		  or die 'not every database got its worker';
		record($ctx, $run, 'all_workers_up_after_last_create_s', 's', Time::HiRes::time() - $t0);

		Time::HiRes::sleep(5);
		measure_idle($ctx, $run, 'running', $t{idle});
		first_events($ctx, $run, 'running', \@dbs);
		load_each($ctx, $run, \@dbs, $t{load});

		$env->set_setting('outbox.worker_idle_timeout', $t{timeout});
		wait_until(300, sub { @{ $env->worker_pids } == 0 }) or die 'the workers did not sleep';
		my $asleep_at = Time::HiRes::time();
		measure_idle($ctx, $run, 'sleeping', $t{idle});
		Time::HiRes::sleep(1) while Time::HiRes::time() < $asleep_at + $t{asleep_before_first};
		first_events($ctx, $run, 'sleeping', \@dbs);

		$env->set_setting('outbox.worker_idle_timeout', '0');
		$env->sql("DROP DATABASE $_") for @dbs;
	}
	$env->reset_setting('outbox.worker_idle_timeout');
}

sub record { my ($ctx, $run, @rest) = @_; return $ctx->{res}->record('tenants', @rest[0 .. 1], $run, $rest[2]); }

# Room for a worker and a load client per database.
sub make_room
{
	my ($env) = @_;
	my $n = DATABASES + 20;
	$env->sql("ALTER SYSTEM SET $_->[0] = $_->[1]")
	  for [ 'max_worker_processes', $n ], [ 'outbox.max_workers', $n ], [ 'max_connections', 2 * $n ];
	$env->node->restart;
	$env->wait_workers(1);
}

# The pids of pg_outbox's processes: the launcher and the workers.
sub outbox_pids
{
	my ($env) = @_;
	return [ split /\n/, $env->sql(q{SELECT pid FROM pg_stat_activity
		WHERE backend_type IN ('outbox launcher', 'outbox shard')}) ];
}

sub measure_idle
{
	my ($ctx, $run, $label, $seconds) = @_;
	my $env = $ctx->{env};
	my $pids = outbox_pids($env);
	my $cpu0 = cpu_s(@$pids);
	my $t0 = Time::HiRes::time();
	Time::HiRes::sleep($seconds);
	my $cpu = cpu_s(@$pids) - $cpu0;
	$pids = outbox_pids($env);
	my ($private_kb, $threads) = (0, 0);
	for my $pid (@$pids)
	{
		my $kb = Bench::Util::proc_kb($pid) or next;
		$private_kb += ($kb->{Private_Clean} // 0) + ($kb->{Private_Dirty} // 0);
		$threads += (slurp("/proc/$pid/status") =~ /^Threads:\s+(\d+)/m)[0] // 0;
	}
	record($ctx, $run, "idle_${label}_cpu_pct_of_core", '%', 100 * $cpu / (Time::HiRes::time() - $t0));
	record($ctx, $run, "idle_${label}_private_mb_per_db", 'MB', $private_kb / 1024 / DATABASES);
	record($ctx, $run, "idle_${label}_processes", 'count', scalar @$pids);
	record($ctx, $run, "idle_${label}_threads", 'count', $threads);
	record($ctx, $run, "idle_${label}_broker_connections", 'count', broker_connections($env, $pids));
}

# Established TCP connections of these processes to the brokers' ports.
sub broker_connections
{
	my ($env, $pids) = @_;
	my %ports = map { (split /:/)[-1] => 1 } split /,/, $env->bootstrap;
	my %inodes;
	for my $file ('/proc/net/tcp', '/proc/net/tcp6')
	{
		for my $line (split /\n/, slurp($file))
		{
			my @f = split ' ', $line;
			next unless @f > 9 && $f[3] eq '01' && $f[2] =~ /:([0-9A-F]{4})$/;
			$inodes{ $f[9] } = 1 if $ports{ hex $1 };
		}
	}
	my $n = 0;
	for my $pid (@$pids)
	{
		for my $fd (glob("/proc/$pid/fd/*"))
		{
			my $to = readlink($fd) // next;
			$n++ if $to =~ /^socket:\[(\d+)\]$/ && $inodes{$1};
		}
	}
	return $n;
}

# One event in each database in turn, 0.3 s apart, commit to consumer.
sub first_events
{
	my ($ctx, $run, $label, $dbs) = @_;
	my $env = $ctx->{env};
	my $topic = $env->fresh_topic("first_$label");
	my $c = $env->start_consumer($topic);
	for my $db (@$dbs)
	{
		$env->sql("SELECT outbox_send('$topic', (extract(epoch from clock_timestamp()) * 1e6)::bigint::text, 'k')",
			$db);
		Time::HiRes::sleep(0.3);
	}
	wait_all_empty($env, $dbs);
	my $r = $env->stop_consumer($c, 1);
	$env->drop_topics($topic);
	my @ms = map { $_->[1] } @{ $r->{samples} };
	record($ctx, $run, "first_event_${label}_$_->[0]_ms", 'ms', percentile($_->[1], @ms))
	  for [ p50 => 0.5 ], [ p99 => 0.99 ], [ max => 1 ];
	record($ctx, $run, "first_event_${label}_missing", 'events', @$dbs - $r->{count});
}

sub wait_all_empty
{
	my ($env, $dbs) = @_;
	wait_until(120, sub { !grep { $env->sql('SELECT count(*) FROM outbox', $_) } @$dbs })
	  or die 'some tenant outbox did not empty';
}

# Each database's producer learns the load's topic and opens its
# partitions before the load, as Bench::Load does for the one database
# it compares with (warm_topics): unwarmed, the 100 producers' first events
# wait for the topic's metadata and go one at a time per partition
# (src/kafka/partitions.c), a start the one database never pays.
# WARM_KEYS keys miss one of 12 partitions with a chance of about 2e-4.
sub warm_each
{
	my ($env, $dbs, $topic) = @_;
	$env->send_warm_up($_, WARM_KEYS, $topic) for @$dbs;
	wait_all_empty($env, $dbs);
}

# LOAD_RATE/s into each database at once (a pgbench each), then the same
# total rate into one database (Bench::Load), in the same run.
sub load_each
{
	my ($ctx, $run, $dbs, $seconds) = @_;
	my $env = $ctx->{env};
	my $topic = $env->fresh_topic('tenants_load');
	warm_each($env, $dbs, $topic);
	Bench::Load::settle_brokers($env);
	my $c = $env->start_consumer($topic);
	my $script = $env->latency_script($topic);
	my $pids = outbox_pids($env);
	my ($cpu0, $t0) = (cpu_s(@$pids), Time::HiRes::time());
	my @loads = map {
		my $cmd = $env->pgbench_cmd($script, '-c', 1, '-R', LOAD_RATE, '-T', $seconds);
		$cmd->[-1] = $_;
		Bench::Util::start_bg($cmd, '<', \undef, '>', $env->file("tenant_load_$_.out"), '2>&1')
	} @$dbs;
	Bench::Util::finish_bg($_) or die 'a tenant load failed' for @loads;
	wait_all_empty($env, $dbs);
	record($ctx, $run, "each_${\LOAD_RATE}_per_s_outbox_cpu_pct_of_core", '%',
		100 * (cpu_s(@$pids) - $cpu0) / (Time::HiRes::time() - $t0));
	my $many = $env->stop_consumer($c, 1);
	$env->drop_topics($topic);
	my @many = map { $_->[1] } @{ $many->{samples} };
	my $one = Bench::Load::run($env, label => 'tenants_one', rate => LOAD_RATE * @$dbs,
		seconds => $seconds, source => 'outbox');
	my @one = map { $_->[1] } @{ $one->{samples} };
	record($ctx, $run, "one_db_${\(LOAD_RATE * @$dbs)}_per_s_tps", 'tx/s', $one->{tps});
	for my $p ([ p50 => 0.5 ], [ p99 => 0.99 ])
	{
		my $m = record($ctx, $run, "each_${\LOAD_RATE}_per_s_$p->[0]_ms", 'ms', percentile($p->[1], @many));
		my $o = record($ctx, $run, "one_db_${\(LOAD_RATE * @$dbs)}_per_s_$p->[0]_ms", 'ms', percentile($p->[1], @one));
		record($ctx, $run, "each_to_one_db_$p->[0]", 'ms/ms', ratio($m, $o));
	}
	my $committed = 0;
	$committed += Bench::Env::pgbench_result($env->file("tenant_load_$_.out"))->{count} for @$dbs;
	record($ctx, $run, "each_${\LOAD_RATE}_per_s_received", 'events', $many->{count});
	record($ctx, $run, "each_${\LOAD_RATE}_per_s_missing", 'events', $committed - $many->{count});
}

1;
