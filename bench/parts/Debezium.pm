# Part debezium: pg_outbox side by side with what most users would pick
# instead, Debezium's PostgreSQL connector (pgoutput, a logical slot) with
# its outbox EventRouter in Kafka Connect standalone, on the same server,
# the same Kafka and the same load (issue 19). Only when named
# (--part debezium): it needs wal_level = logical (bench.pl sets it then)
# and the jars tools/debezium/pom.xml pins (scripts/common.sh's
# ensure_debezium_jars). Per run, in this order:
#   pg_outbox (Connect stopped): latency at 1000/s and 3000/s, a backlog's
#   drain, latency at 80 % of its maximum rate (Bench::Rate, once);
#   Debezium at its defaults, then tuned for latency: the same, its
#   maximum the lower of unthrottled pgbench with its transaction and its
#   drain rate;
#   what piles up while Kafka is down 60 s: Debezium's slot, then pg_outbox;
#   the application's transaction: outbox_send vs Debezium's INSERT (with
#   and without the DELETE Debezium recommends), with Connect stopped.
# CPU is /proc's utime+stime of the processes that deliver (pg_outbox: the
# shard worker, librdkafka's threads included; Debezium: the Connect JVM
# and the slot's walsender), per 100k events delivered.
package Bench::Part::Debezium;

use strict;
use warnings;
use Bench::Util ();
use Bench::Load;
use Bench::Rate;
use Bench::Stats qw(percentile ratio);
use HTTP::Tiny;
use List::Util ();
use KafkaCluster ();
use OutboxTest qw(wait_until cpu_s thread_cpu_s);
use POSIX ();
use Time::HiRes ();

our $LIBS = $ENV{OUTBOX_DEBEZIUM_LIBS} // '/var/cache/pg_outbox/debezium/libs';
use constant DEBEZIUM => '3.6.1.Final';
use constant SLOT     => 'dbz_bench';
use constant TABLE    => 'dbz_outbox';
# Connect's heap bounded like the brokers' (2 cores, three brokers beside it)
my @JVM = ('-Xms512m', '-Xmx512m', '-XX:+UseG1GC', '-XX:MaxGCPauseMillis=20',
	'-XX:+ExitOnOutOfMemoryError', '-Djava.awt.headless=true');
# Debezium's settings for latency; its defaults are poll.interval.ms=500,
# max.batch.size=2048, and the producer's linger.ms=5 (Kafka 4's default)
my %TUNED = (connector => { 'poll.interval.ms' => 1, 'max.batch.size' => 512 },
	worker => { 'producer.linger.ms' => 0 });

my @connects;
END { local $?; stop_connect($_) for @connects; }

sub run
{
	my ($ctx) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	die "no Debezium jars in $LIBS (scripts/common.sh's ensure_debezium_jars fetches them)\n"
	  unless -f "$LIBS/debezium-connector-postgres-" . DEBEZIUM . '.jar';
	my $n = $cfg->{drain_events};
	my @rates = ([ r1000 => 1000 ], [ r3000 => 3000 ]);
	$env->log("part debezium: pg_outbox vs Debezium " . DEBEZIUM . " (Kafka Connect 4.3.0 standalone, EventRouter) "
		  . "at " . join(', ', map { "$_->[1]/s" } @rates) . " for $cfg->{latency_seconds}s, drain of $n, "
		  . "Kafka down $cfg->{dbz_outage_seconds}s, pgbench $cfg->{pgbench_seconds}s");
	setup($env);
	my $outbox_r80 = [ r80pct => int(0.8 * Bench::Rate::max_rate($ctx)) ];
	for my $run (1 .. $ctx->{runs})
	{
		my %p99;
		$env->set_shards(1);
		$env->warm_up;
		# each system's loads start on settled brokers (Bench::Load)
		$res->record('debezium', 'settle_loads_outbox', 'loads', $run, Bench::Load::settle_brokers($env, after_backlog => 1));
		for my $r (@rates)
		{
			$p99{outbox}{ $r->[0] } = outbox_latency($ctx, $run, @$r);
			floor_latency($ctx, $run, @$r);
		}
		outbox_drain($ctx, $run, $n);
		$p99{outbox}{r80pct} = outbox_latency($ctx, $run, @$outbox_r80);
		floor_latency($ctx, $run, @$outbox_r80);
		for my $mode (qw(default tuned))
		{
			my $c = start_connect($ctx, $run, $mode);
			$res->record('debezium', "settle_loads_$mode", 'loads', $run, Bench::Load::settle_brokers($env, after_backlog => 1));
			for my $r (@rates)
			{
				$p99{$mode}{ $r->[0] } = dbz_latency($ctx, $run, $c, @$r);
			}
			my $max = dbz_max_rate($ctx, $run, $c, dbz_drain($ctx, $run, $c, $n));
			$p99{$mode}{r80pct} = dbz_latency($ctx, $run, $c, r80pct => int(0.8 * $max));
			dbz_outage($ctx, $run, $c) if $mode eq 'tuned';
			stop_connect($c);
			$res->record('debezium', "dbz_${mode}_connect_cpu_s_total", 's', $run, $c->{cpu_s});
		}
		for my $r (@rates, $outbox_r80)
		{
			$res->record('debezium', "$r->[0]_p99_outbox_to_tuned", 'outbox/debezium', $run,
				ratio($p99{outbox}{ $r->[0] }, $p99{tuned}{ $r->[0] }));
			$res->record('debezium', "$r->[0]_p99_outbox_to_default", 'outbox/debezium', $run,
				ratio($p99{outbox}{ $r->[0] }, $p99{default}{ $r->[0] }));
		}
		outbox_outage($ctx, $run);
		enqueue_cost($ctx, $run);
		drop_slot($env);
	}
	$env->sql('DROP TABLE ' . TABLE);
	$env->set_enabled(0);
}

# Debezium's documented outbox table (the EventRouter's default columns).
sub setup
{
	my ($env) = @_;
	$env->sql('CREATE TABLE ' . TABLE . ' (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, '
		  . 'aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)');
}

# ---- the loads ------------------------------------------------------------

# One event per transaction as Debezium's documentation recommends: the row
# is inserted and deleted in the same transaction (the insert reaches the
# WAL, hence Kafka; the table stays empty). The payload is the commit-time
# clock, as pg_outbox's latency script sends it.
sub dbz_script
{
	my ($env, $topic, $with_delete, $payload) = @_;
	$payload //= '(extract(epoch from clock_timestamp()) * 1e6)::bigint';
	my $insert = 'INSERT INTO ' . TABLE . " VALUES (gen_random_uuid(), '$topic', 'k' || :i, 'bench', "
	  . "to_jsonb($payload))";
	my $name = "dbz_${topic}_" . ($with_delete ? 'del' : 'ins');
	return $env->script($name, "\\set i random(1, 1000)\n$insert;\n") unless $with_delete;
	return $env->script($name, "\\set i random(1, 1000)\nBEGIN;\n$insert RETURNING id \\gset\n"
		  . 'DELETE FROM ' . TABLE . " WHERE id = :id;\nEND;\n");
}

sub outbox_latency
{
	my ($ctx, $run, $label, $rate) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my ($pid) = @{ $env->worker_pids };
	my ($cpu0, $threads0) = (cpu_s($pid), thread_cpu_s($pid));
	my $l = Bench::Load::run($env, label => "dbzcmp_outbox_$label", rate => $rate,
		seconds => $cfg->{latency_seconds}, source => 'outbox');
	my $threads = thread_cpu_s($pid);
	record_figures($ctx, $run, "outbox_$label", $l, cpu_s($pid) - $cpu0, [$pid]);
	# librdkafka's share (the part cpu has why it matters)
	$res->record('debezium', "outbox_${label}_librdkafka_cpu_s_per_100k", 's', $run,
		$l->{committed} ? ($threads->{librdkafka} - $threads0->{librdkafka}) / $l->{committed} * 1e5 : undef);
	return percentile(0.99, map { $_->[1] } @{ $l->{samples} });
}

# The cluster's own latency at the rate in this run (what the latency part
# calls the floor): a plain librdkafka producer into the same consumer.
sub floor_latency
{
	my ($ctx, $run, $label, $rate) = @_;
	my $l = Bench::Load::run($ctx->{env}, label => "dbzcmp_floor_$label", rate => $rate,
		seconds => $ctx->{cfg}{latency_seconds}, source => 'producer');
	my @ms = map { $_->[1] } @{ $l->{samples} };
	for my $q ([ p50 => 0.5 ], [ p99 => 0.99 ])
	{
		$ctx->{res}->record('debezium', "floor_${label}_$q->[0]_ms", 'ms', $run, percentile($q->[1], @ms));
	}
}

sub dbz_latency
{
	my ($ctx, $run, $c, $label, $rate) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my @pids = connect_pids($env, $c);
	my $cpu0 = cpu_s(@pids);
	my $l = Bench::Load::run($env, label => "dbz_$c->{mode}_$label", rate => $rate,
		seconds => $cfg->{latency_seconds}, source => 'debezium',
		script => sub { dbz_script($env, $_[0], 1) },
		warm => sub { warm_topics($env, @_) },
		pending => sub { $env->kafka_total($_[0]{topic}) < $_[0]{count} + 1 },
		drained => sub {
			my ($r, @topics) = @_;
			wait_topics($env, $r->{committed} + @topics, 300, @topics)
			  or $env->say("   Debezium did not deliver all of $r->{committed} events within 300 s");
		});
	record_figures($ctx, $run, "dbz_$c->{mode}_$label", $l, cpu_s(@pids) - $cpu0, \@pids);
	return percentile(0.99, map { $_->[1] } @{ $l->{samples} });
}

# Latency percentiles, what went missing, CPU per 100k events, memory.
sub record_figures
{
	my ($ctx, $run, $prefix, $l, $cpu, $pids) = @_;
	my $res = $ctx->{res};
	my @ms = map { $_->[1] } @{ $l->{samples} };
	for my $q ([ p50 => 0.5 ], [ p99 => 0.99 ], [ max => 1 ])
	{
		$res->record('debezium', "${prefix}_$q->[0]_ms", 'ms', $run, percentile($q->[1], @ms));
	}
	$res->record('debezium', "${prefix}_missing", 'events', $run, $l->{committed} - $l->{received});
	$res->record('debezium', "${prefix}_pgbench_tps", 'tps', $run, $l->{tps});
	$res->record('debezium', "${prefix}_cpu_s_per_100k", 's', $run, $l->{committed} ? $cpu / $l->{committed} * 1e5 : undef);
	record_rss($res, $run, $prefix, $pids);
}

# VmRSS / RssAnon summed over the delivering processes, and the peak VmHWM.
sub record_rss
{
	my ($res, $run, $prefix, $pids) = @_;
	my %mb = (rss => 0, rssanon => 0, hwm => 0);
	for my $pid (@$pids)
	{
		my $kb = Bench::Util::proc_kb($pid) or next;
		$mb{rss} += $kb->{VmRSS} / 1024;
		$mb{rssanon} += ($kb->{RssAnon} // 0) / 1024;
		$mb{hwm} += $kb->{VmHWM} / 1024;
	}
	$res->record('debezium', "${prefix}_${_}_mb", 'MB', $run, $mb{$_}) for qw(rss rssanon hwm);
}

# ---- drains ---------------------------------------------------------------

sub outbox_drain
{
	my ($ctx, $run, $n) = @_;
	my ($env, $res) = @$ctx{qw(env res)};
	$env->sql('TRUNCATE outbox');
	my ($pid) = @{ $env->worker_pids };
	my $cpu0 = cpu_s($pid);
	Bench::Part::Drain::drain_once($ctx, $run, 'drain', 'debezium', $n);
	$res->record('debezium', 'outbox_drain_cpu_s_per_100k', 's', $run, (cpu_s($pid) - $cpu0) / $n * 1e5);
	record_rss($res, $run, 'outbox_drain', [$pid]);
	$env->set_enabled(1);
}

# The backlog arrives while the connector is paused (its slot keeps the
# WAL), in transactions of 1000 inserts (no deletes: an application's
# outage backlog); timed from resuming it until the topic has every event.
sub dbz_drain
{
	my ($ctx, $run, $c, $n) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my $topic = $env->fresh_topic("dbz_drain_$c->{mode}");
	warm_topics($env, $topic);
	rest($c, 'PUT', '/connectors/outbox/pause');
	wait_until(30, sub { (rest($c, 'GET', '/connectors/outbox/status') // '') =~ /"tasks":\[\{[^]]*"state":"PAUSED"/ })
	  or die 'the connector did not pause';
	my $batches = POSIX::ceil($n / 1000);
	$env->sql('DO $$ BEGIN FOR b IN 1 .. ' . $batches . ' LOOP INSERT INTO ' . TABLE
		  . " SELECT gen_random_uuid(), '$topic', 'k' || (i % 1000), 'bench', to_jsonb(repeat('x', $cfg->{payload})) "
		  . 'FROM generate_series(1, 1000) i; COMMIT; END LOOP; END $$');
	$env->sql('CHECKPOINT');
	my @pids = connect_pids($env, $c);
	my $cpu0 = cpu_s(@pids);
	my $t0 = Time::HiRes::time();
	rest($c, 'PUT', '/connectors/outbox/resume');
	my $ok = wait_topics($env, $batches * 1000 + 1, 900, $topic);
	my $elapsed = Time::HiRes::time() - $t0;
	my $rate = $batches * 1000 / $elapsed;
	@pids = connect_pids($env, $c);
	my $cpu = cpu_s(@pids) - $cpu0;
	die "Debezium did not drain $n events within 900 s" unless $ok;
	my $p = "dbz_$c->{mode}_drain";
	$res->record('debezium', "${p}_events_per_s", 'events/s', $run, $rate);
	$res->record('debezium', "${p}_seconds", 's', $run, $elapsed);
	$res->record('debezium', "${p}_kafka_surplus", 'messages', $run, $env->kafka_total($topic) - 1 - $batches * 1000);
	$res->record('debezium', "${p}_cpu_s_per_100k", 's', $run, $cpu / ($batches * 1000) * 1e5);
	record_rss($res, $run, $p, \@pids);
	$res->record('debezium', "drain_outbox_to_dbz_$c->{mode}", 'outbox/debezium', $run,
		ratio($res->{metrics}{'debezium outbox_drain_events_per_s'}{runs}[ $run - 1 ], $rate));
	$env->sql('TRUNCATE ' . TABLE);
	return $rate;
}

# Debezium's maximum rate, as Bench::Rate takes pg_outbox's: the lower of
# unthrottled pgbench with its transaction (8 clients, the connector
# running) and its drain rate; once every event of it arrived.
sub dbz_max_rate
{
	my ($ctx, $run, $c, $drain) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my $topic = $env->fresh_topic("dbz_max_$c->{mode}");
	warm_topics($env, $topic);
	my $r = $env->pgbench(dbz_script($env, $topic, 1, "repeat('x', $cfg->{payload})"),
		'-c', 8, '-j', 2, '-T', $cfg->{max_rate_seconds});
	$res->record('debezium', "dbz_$c->{mode}_pgbench_max_tps", 'tps', $run, $r->{tps});
	wait_topics($env, $r->{count} + 1, 600, $topic)
	  or die "Debezium did not deliver the $r->{count} events of its maximum rate within 600 s";
	return $res->record('debezium', "dbz_$c->{mode}_max_rate", 'events/s', $run, int(List::Util::min($r->{tps}, $drain)));
}

# ---- Kafka down -----------------------------------------------------------

# All brokers stopped (SIGSTOP on real Kafka, "down all" on the project's
# broker) for the outage, with the 1000/s load running, then back.
sub kafka_down
{
	my ($env, $down) = @_;
	my $b = $env->{broker};
	if ($env->real_kafka) { $down ? $b->pause_broker($_) : $b->resume_broker($_) for 1 .. 3; }
	else { $b->command($down ? 'down all' : 'up all'); }
}

# What a 60-s outage leaves behind in PostgreSQL: for a load (a pgbench
# script at 1000/s into $topic), the figures of $measure (sub -> {name =>
# value}) at its end; then the time from Kafka's return until $done is
# true, and the messages beyond the events that reached $topic.
sub outage
{
	my ($ctx, $run, $prefix, $topic, $script, $measure, $done) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	# the warm-up's messages: one for Debezium, Bench::Kafka::WARM_KEYS for
	# pg_outbox (counted as 511 duplicates until 2026-12-05)
	my $warm = $env->kafka_total($topic);
	my $before = $measure->();
	$res->record('debezium', "${prefix}_before_$_", /rows/ ? 'rows' : 'bytes', $run, $before->{$_})
	  for grep { $_ ne 'wal_written' } sort keys %$before;
	kafka_down($env, 1);
	my $out = $env->file("outage_$prefix.out");
	my $ok = eval {
		my $h = $env->pgbench_bg($out, $script, '-c', 4, '-j', 2, '-R', 1000, '-T', $cfg->{dbz_outage_seconds});
		Bench::Util::finish_bg($h) or die 'pgbench failed: ' . Bench::Util::slurp($out);
		1;
	};
	my $after = $measure->();
	my $t0 = Time::HiRes::time();
	kafka_down($env, 0);
	die $@ unless $ok;
	$res->record('debezium', "${prefix}_events", 'events', $run, Bench::Env::pgbench_result($out)->{count});
	for my $k (sort keys %$after)
	{
		my $unit = $k =~ /rows/ ? 'rows' : 'bytes';
		$res->record('debezium', "${prefix}_after_$k", $unit, $run, $after->{$k}) unless $k eq 'wal_written';
		$res->record('debezium', "${prefix}_grown_$k", $unit, $run, $after->{$k} - $before->{$k});
	}
	wait_until(600, $done) or die "$prefix: not delivered 600 s after Kafka came back";
	$res->record('debezium', "${prefix}_recovery_s", 's', $run, Time::HiRes::time() - $t0);
	# duplicates the outage caused, beyond the warm-up's messages
	sleep 2;
	$res->record('debezium', "${prefix}_kafka_surplus", 'messages', $run,
		$env->kafka_total($topic) - $warm - Bench::Env::pgbench_result($out)->{count});
}

sub dbz_outage
{
	my ($ctx, $run, $c) = @_;
	my $env = $ctx->{env};
	my $topic = $env->fresh_topic('dbz_outage');
	warm_topics($env, $topic);
	my $sent;
	outage($ctx, $run, 'dbz_outage', $topic, dbz_script($env, $topic, 1, "repeat('x', $ctx->{cfg}{payload})"),
		sub {
			# wal_written: its growth is the WAL written meanwhile, all of
			# which the slot must keep (nothing is confirmed while Kafka is
			# down); slot_wal_retained also holds what Connect had not yet
			# confirmed before (its offsets are flushed every 60 s)
			my ($wal, $table, $pos) = split /\|/, $env->sql('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), '
				  . "pg_total_relation_size('" . TABLE . "'), pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') "
				  . "FROM pg_replication_slots WHERE slot_name = '" . SLOT . "'");
			return { slot_wal_retained => $wal, table_bytes => $table, wal_written => $pos };
		},
		sub {
			$sent //= Bench::Env::pgbench_result($env->file('outage_dbz_outage.out'))->{count};
			$env->kafka_total($topic) >= $sent + 1;
		});
	record_rss($ctx->{res}, $run, 'dbz_outage_after', [ connect_pids($env, $c) ]);
}

sub outbox_outage
{
	my ($ctx, $run) = @_;
	my $env = $ctx->{env};
	$env->set_enabled(1);
	$env->sql('TRUNCATE outbox');
	$env->sql('VACUUM outbox');
	my $topic = $env->fresh_topic('outbox_outage');
	$env->warm_topics($topic);
	outage($ctx, $run, 'outbox_outage', $topic, $env->script('outbox_outage', "\\set i random(1, 1000)\n"
		  . "SELECT outbox_send('$topic', repeat('x', $ctx->{cfg}{payload}), 'k' || :i);\n"),
		sub {
			my ($rows, $table) = split /\|/, $env->sql(q{SELECT count(*), pg_total_relation_size('outbox') FROM outbox});
			return { rows => $rows, table_bytes => $table };
		},
		sub { $env->sql('SELECT count(*) FROM outbox') == 0 });
	# what the worker kept of the outage (librdkafka's queue, glibc's arenas)
	record_rss($ctx->{res}, $run, 'outbox_outage_after', $env->worker_pids);
}

# ---- the application's transaction ----------------------------------------

# pgbench, 8 clients, one event per transaction; delivery of both stopped
# (pg_outbox paused, Connect not running), so that only the transaction's
# own cost counts: tps of outbox_send, of Debezium's INSERT, and of its
# INSERT + DELETE; ratios as time per transaction, outbox over Debezium.
sub enqueue_cost
{
	my ($ctx, $run) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	$env->set_enabled(0);
	my $x = "repeat('x', $cfg->{payload})";
	my %script = (
		outbox => $env->script('dbzcmp_enqueue_outbox', "\\set i random(1, 1000000)\n"
			  . "SELECT outbox_send('bench', $x, 'k' || :i);\n"),
		dbz_insert => dbz_script($env, 'bench', 0, $x),
		dbz_insert_delete => dbz_script($env, 'bench', 1, $x));
	my %tps;
	for my $kind (qw(outbox dbz_insert dbz_insert_delete))
	{
		$env->sql('TRUNCATE outbox, ' . TABLE);
		$env->sql('CHECKPOINT');
		$tps{$kind} = $res->record('debezium', "enqueue_${kind}_tps", 'tps', $run,
			$env->pgbench($script{$kind}, '-c', 8, '-j', 2, '-T', $cfg->{pgbench_seconds})->{tps});
	}
	$res->record('debezium', 'enqueue_outbox_to_insert_time_ratio', 'outbox/debezium', $run, ratio($tps{dbz_insert}, $tps{outbox}));
	$res->record('debezium', 'enqueue_outbox_to_insert_delete_time_ratio', 'outbox/debezium', $run,
		ratio($tps{dbz_insert_delete}, $tps{outbox}));
	$env->sql('TRUNCATE outbox, ' . TABLE);
}

# ---- Kafka Connect --------------------------------------------------------

# The slot and Connect's offsets go after each run: the enqueue figures'
# rows are never to be delivered, and nothing reads the slot any more (it
# would keep the WAL of later parts). The next start makes a new slot.
sub drop_slot
{
	my ($env) = @_;
	$env->sql("SELECT pg_drop_replication_slot('" . SLOT . "') FROM pg_replication_slots WHERE slot_name = '" . SLOT . "'");
	unlink $env->file('connect/offsets');
}

# Kafka Connect standalone with the connector, $mode 'default' or 'tuned'
# (%TUNED); offsets in a file of the work directory, kept across modes and
# runs, so that each start resumes where the slot is. Returns once the task
# runs and an event went through it.
sub start_connect
{
	my ($ctx, $run, $mode) = @_;
	my $env = $ctx->{env};
	my $dir = $env->file('connect');
	mkdir $dir;
	my $node = $env->node;
	my $c = { mode => $mode, dir => $dir, port => KafkaCluster::free_port(), log => "$dir/connect-$mode.log" };
	my $jar = sub { my ($re) = @_; my ($f) = grep { /$re/ } map { s{.*/}{}r } glob("$LIBS/*.jar"); $f // '' };
	my %worker = (
		'bootstrap.servers' => $env->bootstrap,
		'key.converter' => 'org.apache.kafka.connect.storage.StringConverter',
		'value.converter' => 'org.apache.kafka.connect.storage.StringConverter',
		'offset.storage.file.filename' => "$dir/offsets",
		'listeners' => "http://127.0.0.1:$c->{port}",
		$mode eq 'tuned' ? %{ $TUNED{worker} } : ());
	my %connector = (
		'name' => 'outbox',
		'connector.class' => 'io.debezium.connector.postgresql.PostgresConnector',
		'tasks.max' => 1,
		'database.hostname' => '127.0.0.1',
		'database.port' => $node->port,
		'database.user' => scalar(getpwuid($<)),
		'database.password' => 'unused',
		'database.dbname' => 'postgres',
		'topic.prefix' => 'dbz',
		'plugin.name' => 'pgoutput',
		'slot.name' => SLOT,
		'publication.name' => 'dbz_publication',
		'publication.autocreate.mode' => 'filtered',
		'table.include.list' => 'public.' . TABLE,
		'snapshot.mode' => 'no_data',
		'tombstones.on.delete' => 'false',
		'transforms' => 'outbox',
		'transforms.outbox.type' => 'io.debezium.transforms.outbox.EventRouter',
		# the topic is the row's aggregatetype, the key its aggregateid
		'transforms.outbox.route.topic.replacement' => '${routedByValue}',
		$mode eq 'tuned' ? %{ $TUNED{connector} } : ());
	# what results.json's meta tells of this part (bench.pl's meta)
	$ctx->{debezium}{$mode} = { worker => { map { $_ => $worker{$_} } grep { !/bootstrap|filename|listeners/ } keys %worker },
		connector => { map { $_ => $connector{$_} } grep { !/database\.(?:port|password)/ } keys %connector } };
	$ctx->{debezium}{jvm} = "@JVM";
	$ctx->{debezium}{jars} = [ map { $jar->(qr/^\Q$_\E-\d/) } qw(debezium-connector-postgres debezium-connect-plugins
		connect-runtime kafka-clients postgresql log4j-core) ];
	write_props("$dir/worker-$mode.properties", \%worker);
	write_props("$dir/connector-$mode.properties", \%connector);
	open my $fh, '>', "$dir/log4j2-$mode.properties" or die $!;
	print $fh "appender.file.type = File\nappender.file.name = file\nappender.file.fileName = $c->{log}\n"
	  . "appender.file.layout.type = PatternLayout\nappender.file.layout.pattern = [%d] %p %m (%c)%n\n"
	  . "rootLogger.level = info\nrootLogger.appenderRef.file.ref = file\n";
	close $fh;
	my $t0 = Time::HiRes::time();
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>>', "$dir/connect-$mode.stdout");
		open(STDERR, '>&', \*STDOUT);
		exec('java', @JVM, "-Dlog4j2.configurationFile=$dir/log4j2-$mode.properties", '-cp', "$LIBS/*",
			'org.apache.kafka.connect.cli.ConnectStandalone', "$dir/worker-$mode.properties",
			"$dir/connector-$mode.properties") or POSIX::_exit(127);
	}
	$c->{pid} = $pid;
	push @connects, $c;
	my ($exited, $state) = (0, '');
	wait_until(180, sub {
		$exited = 1 if waitpid($pid, POSIX::WNOHANG) == $pid;
		($state) = (rest($c, 'GET', '/connectors/outbox/status') // '') =~ /"tasks":\[\{[^]]*?"state":"(\w+)"/;
		$exited || ($state // '') =~ /^(?:RUNNING|FAILED)$/;
	}) or die "the connector's task is not running after 180 s: " . tail_log($c);
	delete $c->{pid} if $exited;
	die "Kafka Connect exited: " . tail_log($c) if $exited;
	die "the connector's task failed: " . tail_log($c) unless $state eq 'RUNNING';
	# the task runs once the slot and the publication exist; an event
	# through it shows that it streams (and that it went past what the
	# slot kept of the WAL meanwhile)
	my $topic = $env->fresh_topic("dbz_start_$mode");
	warm_topics($env, $topic);
	$env->say(sprintf("   Kafka Connect (%s) up, pid %d, streaming after %.1f s", $mode, $pid, Time::HiRes::time() - $t0));
	$ctx->{res}->record('debezium', "dbz_${mode}_startup_s", 's', $run, Time::HiRes::time() - $t0);
	return $c;
}

sub stop_connect
{
	my ($c) = @_;
	return unless $c->{pid};
	$c->{cpu_s} = cpu_s($c->{pid});
	kill 'TERM', $c->{pid};
	for (1 .. 300)
	{
		last if waitpid($c->{pid}, POSIX::WNOHANG) == $c->{pid};
		Time::HiRes::sleep(0.1);
	}
	if (kill 0, $c->{pid})
	{
		kill 'KILL', $c->{pid};
		waitpid($c->{pid}, 0);
	}
	delete $c->{pid};
}

sub write_props
{
	my ($file, $props) = @_;
	open my $fh, '>', $file or die "$file: $!";
	print $fh "$_=$props->{$_}\n" for sort keys %$props;
	close $fh or die "$file: $!";
}

sub tail_log
{
	my ($c) = @_;
	my @l = split /\n/, Bench::Util::slurp($c->{log}) . Bench::Util::slurp("$c->{dir}/connect-$c->{mode}.stdout");
	return join("\n", @l[ ($#l > 30 ? $#l - 30 : 0) .. $#l ]) . "\n";
}

# Connect's REST API: the body, undef if it did not answer 2xx.
sub rest
{
	my ($c, $method, $path) = @_;
	my $r = HTTP::Tiny->new(timeout => 10)->request($method, "http://127.0.0.1:$c->{port}$path");
	return $r->{success} ? $r->{content} : undef;
}

# The JVM and the walsender of the slot.
sub connect_pids
{
	my ($env, $c) = @_;
	my $ws = $env->sql("SELECT active_pid FROM pg_replication_slots WHERE slot_name = '" . SLOT . "'");
	return ($c->{pid}, $ws ? ($ws) : ());
}

# One event to each topic through Debezium, waited for.
sub warm_topics
{
	my ($env, @topics) = @_;
	for my $t (@topics)
	{
		$env->sql('INSERT INTO ' . TABLE . " VALUES (gen_random_uuid(), '$t', 'warm-up', 'bench', '\"warm-up\"')");
		$env->sql('DELETE FROM ' . TABLE);
	}
	wait_topics($env, scalar @topics, 120, @topics) or die "Debezium did not deliver to @topics within 120 s";
}

# Waits until the topics hold $n messages in all; true if they did.
sub wait_topics
{
	my ($env, $n, $timeout, @topics) = @_;
	return wait_until($timeout, sub {
		my $sum = 0;
		$sum += $env->kafka_total($_) for @topics;
		$sum >= $n;
	});
}

1;
