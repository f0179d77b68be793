# Part latency: send-to-consumer latency of pg_outbox (pgbench calling
# outbox_send with clock_timestamp() in the payload, taken in that
# statement, before the commit, read back by latency-consumer) at 1000/s, 3000/s and 80 % of the maximum rate, each
# next to its floor: a plain librdkafka producer at the same rate through
# the same broker into the same consumer. Also send-to-acknowledgement
# as the worker's statistics count it ("ack", below), and
# the shard workers' wait events under the load (the share of samples in
# WAL writes and flushes: a worker must not queue behind other sessions'
# commits).
package Bench::Part::Latency;

use strict;
use warnings;
use Bench::Util ();
use Bench::Load;
use Bench::Rate ();
use Bench::Stats qw(percentile ratio);

use constant STEADY_AFTER_S => 2;

sub run
{
	my ($ctx) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my $max = Bench::Rate::max_rate($ctx);
	my @rates = ([ r1000 => 1000 ], [ r3000 => 3000 ], [ r80pct => int($max * 0.8) ]);
	$env->log("part latency: $cfg->{latency_seconds}s at " . join(', ', map { "$_->[1]/s" } @rates)
		  . " (80% of $max/s), 1 shard; floor: a plain producer at each rate");
	$env->set_shards(1);
	$env->set_enabled(1);
	for my $run (1 .. $ctx->{runs})
	{
		# the brokers' steady state first: whichever source loads first at
		# 1000/s after the maximum rate's drain, or after the run before's
		# highest rate, is slow for up to a minute (Bench::Load)
		$res->record('latency', 'settle_loads', 'loads', $run, Bench::Load::settle_brokers($env, after_backlog => $run == 1))
		  if $env->real_kafka;
		for my $r (@rates)
		{
			my ($label, $rate) = @$r;
			# alternate the order, so that neither always runs first
			my @order = $run % 2 ? qw(outbox producer loaded) : qw(loaded producer outbox);
			my %p;
			$p{$_} = $_ eq 'outbox' ? outbox($ctx, $run, $label, $rate) : floor($ctx, $run, $label, $rate, $_)
			  for @order;
			for my $q (qw(p50 p99 steady_p50 steady_p99))
			{
				$res->record('latency', "${label}_${q}_to_floor", 'outbox/floor', $run,
					ratio($p{outbox}{$q}, $p{producer}{$q}));
				$res->record('latency', "${label}_${q}_to_loaded_floor", 'outbox/loaded floor', $run,
					ratio($p{outbox}{$q}, $p{loaded}{$q}));
			}
		}
	}
}

# pg_outbox at $rate: the consumer's figures, and the server's "ack".
#
# The ack figures are the worker's own (outbox_shard_stats: created_at,
# the transaction's start, to the acknowledgement the worker served, for
# every event of the load, in buckets 19 % wide), its statistics reset once
# the warm-up was delivered and read once the load was: nothing polls
# meanwhile. (Until 2026-12-05 a procedure sent one event and polled for
# its row's delete every 0.2 ms, which kept a backend busy beside the load
# and, with slow acknowledgements, took most of its samples after the
# load had ended.)
sub outbox
{
	my ($ctx, $run, $label, $rate) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my ($waits, $requests);
	my $start = sub {
		$requests = $env->requests_sent;
		$env->sql('SELECT outbox_stats_reset()');
		$waits = start_wait_sampler($env, $cfg->{latency_seconds});
	};
	my $l = Bench::Load::run($env, label => $label, rate => $rate, seconds => $cfg->{latency_seconds},
		source => 'outbox', before_load => $start);
	$l->{requests} = $env->requests_sent - $requests;
	my ($p50, $p99) = split /\|/, $env->sql('SELECT ack_latency_p50_ms, ack_latency_p99_ms FROM outbox_shard_stats() WHERE shard = 0');
	$res->record('latency', "${label}_ack_p50_ms", 'ms', $run, $p50);
	$res->record('latency', "${label}_ack_p99_ms", 'ms', $run, $p99);
	record_waits($ctx, $run, $label, $waits);
	$res->record('latency', "${label}_pgbench_tps", 'tps', $run, $l->{tps});
	my $p = record_latency($res, $run, $label, $l);
	# committed events the consumer did not see (negative: extra messages)
	$res->record('latency', "${label}_missing", 'events', $run, $l->{committed} - $l->{received});
	record_requests($res, $run, $label, $l);
	return $p;
}

# Samples the shard workers' wait events every 10 ms for $seconds, in
# the server (pg_stat_clear_snapshot: a new look each time).
sub start_wait_sampler
{
	my ($env, $seconds) = @_;
	my $n = $seconds * 100;
	return $env->psql_bg($env->file('waits.out'), 'CREATE TEMP TABLE waits (ev text)',
		"DO \$\$ BEGIN FOR i IN 1..$n LOOP PERFORM pg_stat_clear_snapshot();"
		  . " INSERT INTO waits SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')"
		  . " FROM pg_stat_activity WHERE backend_type = 'outbox shard';"
		  . " PERFORM pg_sleep(0.01); END LOOP; END \$\$",
		"SELECT ev || '|' || count(*) FROM waits GROUP BY ev ORDER BY count(*) DESC");
}

# The share of the workers' samples in WAL writes and flushes (and on CPU).
sub record_waits
{
	my ($ctx, $run, $label, $h) = @_;
	my ($env, $res) = @$ctx{qw(env res)};
	Bench::Util::finish_bg($h) or die 'the wait event sampler failed: ' . Bench::Util::slurp($env->file('waits.out.err'));
	my %count = map { /^(.+)\|(\d+)$/ ? ($1 => $2) : () } split /\n/, Bench::Util::slurp($env->file('waits.out'));
	my $total = 0;
	$total += $_ for values %count;
	return unless $total;
	my $wal = ($count{'LWLock:WALWrite'} // 0) + ($count{'IO:WALSync'} // 0) + ($count{'IO:WALWrite'} // 0);
	$env->say("$label worker wait events: "
		  . join(', ', map { sprintf('%s %.1f%%', $_, 100 * $count{$_} / $total) }
			  sort { $count{$b} <=> $count{$a} } keys %count));
	$res->record('latency', "${label}_worker_wal_wait_pct", '%', $run, 100 * $wal / $total);
	$res->record('latency', "${label}_worker_cpu_pct", '%', $run, 100 * ($count{CPU} // 0) / $total);
}

# The floor at $rate: figures named producer_<label>_*; the loaded floor
# (loaded_<label>_*) is the same producer while pgbench runs the
# application's transaction at the same rate beside it, an INSERT of the
# same row into a plain table (delivery has nothing to do): the CPU and
# the WAL flushes the application's commits take from the two cores,
# which pg_outbox's load pays and the plain floor does not.
sub floor
{
	my ($ctx, $run, $label, $rate, $kind) = @_;
	my $env = $ctx->{env};
	my $prefix = $kind eq 'loaded' ? "loaded_$label" : "producer_$label";
	my $l = Bench::Load::run($env, label => "floor_$label", rate => $rate,
		seconds => $ctx->{cfg}{latency_seconds}, source => 'producer',
		($kind eq 'loaded' ? (beside => plain_script($env)) : ()));
	my $p = record_latency($ctx->{res}, $run, $prefix, $l);
	$ctx->{res}->record('latency', "${prefix}_missing", 'messages', $run, $l->{committed} - $l->{received});
	record_requests($ctx->{res}, $run, $prefix, $l);
	$env->sql('TRUNCATE plain') if $kind eq 'loaded';
	return $p;
}

# The latency script's transaction with a plain INSERT for outbox_send.
sub plain_script
{
	my ($env) = @_;
	return $env->script('latency_plain', <<'SQL');
\set i random(1, 1000)
INSERT INTO plain VALUES (nextval('plain_id_seq'), 0, 'bench', convert_to('k' || :i, 'UTF8'), convert_to((extract(epoch from clock_timestamp()) * 1e6)::bigint::text, 'UTF8'), NULL, now());
SQL
}

sub record_latency
{
	my ($res, $run, $prefix, $l) = @_;
	my @ms = map { $_->[1] } @{ $l->{samples} };
	# the same past each load's first STEADY_AFTER_S: a load's start on
	# real Kafka often stalls 0.4-0.9 s, whichever source (docs/performance.md)
	my @steady = map { $_->[1] } grep { $_->[0] - $_->[1] / 1000 >= $l->{t0} + STEADY_AFTER_S } @{ $l->{samples} };
	my %p = (p50 => percentile(0.5, @ms), p99 => percentile(0.99, @ms), max => percentile(1, @ms),
		steady_p50 => percentile(0.5, @steady), steady_p99 => percentile(0.99, @steady));
	$res->record('latency', "${prefix}_${_}_ms", 'ms', $run, $p{$_}) for qw(p50 p99 max steady_p50 steady_p99);
	record_append_split($res, $run, $prefix, $l->{samples});
	return \%p;
}

# Requests sent to the brokers per 1000 events (librdkafka's statistics,
# of the worker's producer or the plain one): Kafka handles one request of
# a connection at a time, and with acks=all each waits for replication.
sub record_requests
{
	my ($res, $run, $prefix, $l) = @_;
	return unless $l->{requests} && $l->{committed};
	$res->record('latency', "${prefix}_requests_per_1000", 'requests', $run, 1000 * $l->{requests} / $l->{committed});
}

# On real Kafka the fresh topics keep the broker's append time: each
# latency splits there, into send to the leader's append (commit, the
# worker, the produce request) and append to the consumer (replication to
# the high watermark, the consumer's fetch): p50 and p99 of each part.
sub record_append_split
{
	my ($res, $run, $prefix, $samples) = @_;
	my @split = grep { defined $_->[2] } @$samples;
	return unless @split;
	my @to_append = map { $_->[2] } @split;
	my @after = map { $_->[1] - $_->[2] } @split;
	for my $q ([ p50 => 0.5 ], [ p99 => 0.99 ])
	{
		$res->record('latency', "${prefix}_to_append_$q->[0]_ms", 'ms', $run, percentile($q->[1], @to_append));
		$res->record('latency', "${prefix}_append_to_consumer_$q->[0]_ms", 'ms', $run, percentile($q->[1], @after));
	}
}

1;
