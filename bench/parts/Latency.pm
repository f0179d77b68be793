# Part latency: commit-to-consumer latency of pg_outbox (pgbench calling
# outbox_send with the commit-time clock in the payload, read back by
# latency-consumer) at 1000/s, 3000/s and 80 % of the maximum rate, each
# next to its floor: a plain librdkafka producer at the same rate through
# the same broker into the same consumer. Also commit-to-acknowledgement
# sampled in the server ("ack", see sample_ack_latency in bench/sql), and
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
	$env->warm_topics('ack_latency');
	for my $run (1 .. $ctx->{runs})
	{
		for my $r (@rates)
		{
			my ($label, $rate) = @$r;
			# alternate the order, so that neither always runs first
			my @order = $run % 2 ? qw(outbox producer) : qw(producer outbox);
			my %p;
			$p{$_} = $_ eq 'outbox' ? outbox($ctx, $run, $label, $rate) : floor($ctx, $run, $label, $rate)
			  for @order;
			for my $q (qw(p50 p99))
			{
				$res->record('latency', "${label}_${q}_to_floor", 'outbox/floor', $run,
					ratio($p{outbox}{$q}, $p{producer}{$q}));
			}
		}
	}
}

# pg_outbox at $rate: the consumer's figures, and the server's "ack".
sub outbox
{
	my ($ctx, $run, $label, $rate) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	$env->sql('TRUNCATE ack_latency');
	# about 20 samples a second of commit-to-ack, under the load
	my $samples = $cfg->{latency_seconds} * 20 - 20;
	my ($sampler, $waits);
	my $start = sub {
		$sampler = $env->psql_bg($env->file('ack.out'), "CALL sample_ack_latency($samples, 0.04)");
		$waits = start_wait_sampler($env, $cfg->{latency_seconds});
	};
	my $l = Bench::Load::run($env, label => $label, rate => $rate, seconds => $cfg->{latency_seconds},
		source => 'outbox', before_load => $start);
	Bench::Util::finish_bg($sampler) or die 'the commit-to-ack sampler failed: ' . Bench::Util::slurp($env->file('ack.out.err'));
	record_waits($ctx, $run, $label, $waits);
	for my $q ([ p50 => 0.5 ], [ p99 => 0.99 ])
	{
		$res->record('latency', "${label}_ack_$q->[0]_ms", 'ms', $run, $env->sql(
			"SELECT round(percentile_cont($q->[1]) WITHIN GROUP (ORDER BY ms)::numeric, 3) FROM ack_latency"));
	}
	$res->record('latency', "${label}_ack_max_ms", 'ms', $run, $env->sql('SELECT round(max(ms)::numeric, 3) FROM ack_latency'));
	$res->record('latency', "${label}_pgbench_tps", 'tps', $run, $l->{tps});
	my $p = record_latency($res, $run, $label, $l);
	# committed events the consumer did not see (negative: extra messages)
	$res->record('latency', "${label}_missing", 'events', $run, $l->{committed} - $l->{received});
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

# The floor at $rate: figures named producer_<label>_*.
sub floor
{
	my ($ctx, $run, $label, $rate) = @_;
	my $l = Bench::Load::run($ctx->{env}, label => "floor_$label", rate => $rate,
		seconds => $ctx->{cfg}{latency_seconds}, source => 'producer');
	my $p = record_latency($ctx->{res}, $run, "producer_$label", $l);
	$ctx->{res}->record('latency', "producer_${label}_missing", 'messages', $run, $l->{committed} - $l->{received});
	return $p;
}

sub record_latency
{
	my ($res, $run, $prefix, $l) = @_;
	my @ms = map { $_->[1] } @{ $l->{samples} };
	my %p = (p50 => percentile(0.5, @ms), p99 => percentile(0.99, @ms), max => percentile(1, @ms));
	$res->record('latency', "${prefix}_${_}_ms", 'ms', $run, $p{$_}) for qw(p50 p99 max);
	return \%p;
}

1;
