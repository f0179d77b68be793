# Part drain: how fast the workers empty a backlog (delivery paused while it
# is written, then switched on), with 1, 2 (and 4) shards, and once as a
# "burst" into a small outbox nothing analyzed. Baselines in the same run:
# (a) the same rows read and deleted by plain SQL in batches of 1000, no
# Kafka; (b) a plain librdkafka producer sending as many messages.
package Bench::Part::Drain;

use strict;
use warnings;
use Bench::Stats qw(ratio);

sub run
{
	my ($ctx) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my $n = $cfg->{drain_events};
	$env->log("part drain: $n events of $cfg->{payload} bytes, shards @{ $cfg->{drain_shards} } "
		  . "(and 1 for a burst into a small outbox); baselines: SQL-only drain, plain producer");
	for my $run (1 .. $ctx->{runs})
	{
		my $sql_rate = $res->record('drain', 'sql_drain_events_per_s', 'events/s', $run, sql_drain($env, $n, $cfg));
		my $p = $env->produce('-t', 'bench', '-n', $n, '-s', $cfg->{payload}, '-k', 1000, '-S');
		my $prod_rate = $res->record('drain', 'producer_msgs_per_s', 'msgs/s', $run, $p->{msgs_per_s});
		$res->record('drain', 'producer_requests_per_1000', 'requests', $run, 1000 * $p->{requests} / $n);
		for my $shards (@{ $cfg->{drain_shards} })
		{
			$env->set_shards($shards);
			$env->sql('TRUNCATE outbox');
			$env->warm_up;
			my $rate = drain_once($ctx, $run, "s$shards");
			push @{ $ctx->{drain_s1_rates} }, $rate if $shards == 1;
			$res->record('drain', "ratio_s${shards}_to_sql", 'outbox/sql', $run, ratio($rate, $sql_rate));
			$res->record('drain', "ratio_s${shards}_to_producer", 'outbox/producer', $run, ratio($rate, $prod_rate));
			next unless $shards == 1;
			$env->sql('TRUNCATE outbox');
			$rate = drain_once($ctx, $run, 'burst');
			$res->record('drain', 'ratio_burst_to_sql', 'outbox/sql', $run, ratio($rate, $sql_rate));
		}
	}
	$env->sql('TRUNCATE plain');
}

# (a): the same batches a worker reads and deletes, in one session.
sub sql_drain
{
	my ($env, $n, $cfg) = @_;
	$env->set_enabled(0);
	$env->sql('TRUNCATE plain');
	$env->sql("INSERT INTO plain SELECT nextval('plain_id_seq'), 0, 'bench', convert_to('k' || (i % 1000), 'UTF8'), "
		  . "convert_to(repeat('x', $cfg->{payload}), 'UTF8'), NULL, now() FROM generate_series(1, $n) i");
	$env->sql('VACUUM (ANALYZE) plain');
	$env->sql('CHECKPOINT');
	my ($elapsed, $total) = split /\|/, $env->sql('CALL bench_plain_drain(1000, NULL, NULL)');
	die "plain drain deleted $total rows, not $n" unless $total == $n;
	return $n / $elapsed;
}

# One timed drain of the backlog with the current shards: its rate.
# "burst": the backlog arrives at an outbox the worker has just been
# delivering while it was small (its plans made then), and nothing analyzes
# it first, as when Kafka comes back after an outage; otherwise VACUUM
# (ANALYZE) first. $part/$run name where the figures go.
sub drain_once
{
	my ($ctx, $run, $name, $part, $n) = @_;
	my ($env, $res) = @$ctx{qw(env res)};
	$part //= 'drain';
	$n //= $ctx->{cfg}{drain_events};
	if ($name eq 'burst')
	{
		$env->set_enabled(1);
		for my $i (1 .. 8)
		{
			$env->sql("SELECT outbox_send('bench', repeat('x', $ctx->{cfg}{payload}), 'k' || $i)");
			$env->wait_empty(60);
		}
	}
	$env->set_enabled(0);
	my $before = $env->kafka_total;
	$env->fill_outbox($n);
	$env->sql('VACUUM (ANALYZE) outbox') unless $name eq 'burst';
	$env->sql('CHECKPOINT');
	my $requests = $env->requests_sent;
	my $elapsed = $env->timed_drain;
	$env->set_enabled(0);
	# what the shards' producers sent to the brokers for it (librdkafka's statistics)
	$res->record($part, "outbox_${name}_requests_per_1000", 'requests', $run, 1000 * ($env->requests_sent - $requests) / $n);
	my $after = $env->kafka_total;
	my $rate = $res->record($part, "outbox_${name}_events_per_s", 'events/s', $run, $n / $elapsed);
	$res->record($part, "outbox_${name}_seconds", 's', $run, $elapsed);
	# messages that reached the topic beyond the events (duplicates) or short of them
	$res->record($part, "outbox_${name}_kafka_surplus", 'messages', $run, $after - $before - $n);
	return $rate;
}

1;
