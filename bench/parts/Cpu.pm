# Part cpu: where a shard worker's CPU goes at fixed rates, per 100k events:
# its main thread (reads, settles, delivery reports) against librdkafka's
# threads (requests, acknowledgements), at 1000/s and 3000/s. On the
# project's broker also with a round trip injected (each request answered
# that much later): librdkafka's idempotent producer polls without waiting
# while a partition has 5 or more messages in flight and more queued, so
# its threads' CPU follows the round trip, not the rate
# (docs/performance.md, "Where the CPU goes at fixed rates"). On real
# Kafka the round trip is the cluster's own. Each load runs twice in a row,
# outbox.partition_pacing off and then on (labels *_unpaced, *_paced), so
# that the pacing's effect is measured on the same machine in the same
# minute.
package Bench::Part::Cpu;

use strict;
use warnings;
use Bench::Load;
use Bench::Util ();
use Bench::Stats qw(percentile);
use OutboxTest qw(thread_cpu_s);

use constant RATES => ([ r1000 => 1000 ], [ r3000 => 3000 ]);
# the round trips injected on the project's broker, in ms
use constant RTTS => (0, 20, 100);

sub run
{
	my ($ctx) = @_;
	my ($env, $cfg) = @$ctx{qw(env cfg)};
	my @rtts = $env->real_kafka ? (undef) : RTTS;
	$env->log("part cpu: the worker's main thread and librdkafka's threads at "
		  . join(', ', map { "$_->[1]/s" } RATES) . " for $cfg->{latency_seconds}s"
		  . ($env->real_kafka ? '' : ', round trip ' . join(', ', map { "$_ ms" } @rtts)));
	$env->set_shards(1);
	for my $run (1 .. $ctx->{runs})
	{
		for my $rtt (@rtts)
		{
			set_rtt($env, $rtt);
			$env->warm_up;
			for my $r (RATES)
			{
				my $label = $r->[0] . (defined $rtt ? "_rtt$rtt" : '');
				my %m;
				for my $pacing (qw(unpaced paced))
				{
					$env->set_setting('outbox.partition_pacing', $pacing eq 'paced' ? 'on' : 'off');
					$m{$pacing} = measure($ctx, $run, "${label}_$pacing", $r->[1], !$rtt);
				}
				record_ratios($ctx, $run, $label, \%m);
			}
		}
		set_rtt($env, 0) unless $env->real_kafka;
	}
	$env->reset_setting('outbox.partition_pacing');
}

sub set_rtt
{
	my ($env, $ms) = @_;
	$env->{broker}->command("rtt all $ms") if defined $ms;
}

# Latency only without an injected round trip: the project's broker delays
# every request of a connection in turn (fetches too), so latency there
# says nothing of a real cluster's.
sub measure
{
	my ($ctx, $run, $label, $rate, $with_latency) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my ($pid) = @{ $env->worker_pids };
	my $before = thread_cpu_s($pid);
	my $l = Bench::Load::run($env, label => "cpu_$label", rate => $rate,
		seconds => $cfg->{latency_seconds}, source => 'outbox');
	my $after = thread_cpu_s($pid);
	my @ms = map { $_->[1] } @{ $l->{samples} };
	my %m;
	for my $thread (qw(main librdkafka))
	{
		$m{$thread} = $l->{committed} ? ($after->{$thread} - $before->{$thread}) / $l->{committed} * 1e5 : undef;
		$res->record('cpu', "${label}_${thread}_cpu_s_per_100k", 's', $run, $m{$thread});
	}
	# the worker's private memory after the load (it rarely shrinks)
	my $kb = Bench::Util::proc_kb($pid);
	$res->record('cpu', "${label}_rssanon_mb", 'MB', $run, $kb ? $kb->{RssAnon} / 1024 : undef);
	return \%m unless $with_latency;
	$m{p99} = percentile(0.99, @ms);
	$res->record('cpu', "${label}_p50_ms", 'ms', $run, percentile(0.5, @ms));
	$res->record('cpu', "${label}_p99_ms", 'ms', $run, $m{p99});
	$res->record('cpu', "${label}_missing", 'events', $run, $l->{committed} - $l->{received});
	return \%m;
}

# paced / unpaced of the same load in the same run
sub record_ratios
{
	my ($ctx, $run, $label, $m) = @_;
	for my $what (qw(main librdkafka p99))
	{
		next unless defined $m->{paced}{$what} && $m->{unpaced}{$what};
		$ctx->{res}->record('cpu', "${label}_${what}_paced_to_unpaced", 'ratio', $run,
			$m->{paced}{$what} / $m->{unpaced}{$what});
	}
}

1;
