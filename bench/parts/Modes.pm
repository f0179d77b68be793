# Part modes: what exactly-once delivery costs (issue 21), both modes in the
# same run on one shard: the drain of a backlog, and commit-to-consumer at
# 1000/s and 3000/s read by a consumer that sees committed records only
# (librdkafka's default isolation.level, read_committed, in latency-consumer),
# with the number of Kafka requests the shard's producer sent per event
# (librdkafka's statistics: every broker's "tx"). Baseline: at-least-once.
# Beside them, in the same run, the two floors at the same rates: a plain
# producer, and one that sends one Kafka transaction at a time as
# exactly-once delivery does (baseline-producer -x), which also measures a
# transaction commit's round trip (EndTxn), the unit of issue 21's p50
# target, and splits each of its messages' latency at the commit: before
# it (waiting for the transaction, its acknowledgements, EndTxn) and after
# it (the commit markers' way to a read_committed consumer, which no
# design of a transactional relay avoids).
package Bench::Part::Modes;

use strict;
use warnings;
use Bench::Load;
use Bench::Stats qw(percentile ratio);
use Time::HiRes ();

my @MODES = qw(at_least_once exactly_once);

sub run
{
	my ($ctx) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	die "this build has no outbox.delivery\n" unless $env->has_setting('outbox.delivery');
	$env->log("part modes: @MODES; a drain of $cfg->{drain_events} events and 1000/s, 3000/s for "
		  . "$cfg->{latency_seconds}s each, 1 shard");
	$env->set_shards(1);
	for my $run (1 .. $ctx->{runs})
	{
		my %figure;
		# alternate the order, so that neither always runs first
		for my $mode ($run % 2 ? @MODES : reverse @MODES)
		{
			$env->set_setting('outbox.delivery', $mode);
			$env->set_enabled(1);
			$env->warm_up;
			$figure{$mode} = measure($ctx, $run, short($mode));
		}
		my ($alo, $eos) = @figure{@MODES};
		$res->record('modes', 'drain_eos_to_alo', 'eos/alo', $run, ratio($eos->{drain}, $alo->{drain}));
		for my $label (qw(r1000 r3000))
		{
			my $floors = floors($ctx, $run, $label);
			my $added = $eos->{$label}{p50} - $alo->{$label}{p50};
			$res->record('modes', "${label}_p50_eos_minus_alo_ms", 'ms', $run, $added);
			$res->record('modes', "${label}_p99_eos_to_alo", 'eos/alo', $run,
				ratio($eos->{$label}{p99}, $alo->{$label}{p99}));
			$res->record('modes', "${label}_p50_eos_minus_alo_to_commit", 'commit round trips', $run,
				ratio($added, $floors->{commit_ms}));
			$res->record('modes', "${label}_p50_floors_txn_minus_plain_ms", 'ms', $run,
				$floors->{txn_floor} - $floors->{floor});
		}
	}
	$env->reset_setting('outbox.delivery');
}

sub short { return $_[0] eq 'exactly_once' ? 'eos' : 'alo'; }

# One mode's drain and latencies: { drain => events/s, r1000 => {p50, p99}, ... }.
sub measure
{
	my ($ctx, $run, $m) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my %f;
	# (with its requests per 1000 events: outbox_<mode>_drain_requests_per_1000)
	$f{drain} = Bench::Part::Drain::drain_once($ctx, $run, "${m}_drain", 'modes');
	$env->set_enabled(1);
	# the loads start on brokers settled after the drain (Bench::Load)
	$res->record('modes', "${m}_settle_loads", 'loads', $run, Bench::Load::settle_brokers($env, after_backlog => 1));
	for my $r ([ r1000 => 1000 ], [ r3000 => 3000 ])
	{
		my ($label, $rate) = @$r;
		my $l = Bench::Load::run($env, label => "${m}_$label", rate => $rate,
			seconds => $cfg->{latency_seconds}, source => 'outbox');
		my @ms = map { $_->[1] } @{ $l->{samples} };
		$f{$label} = { p50 => percentile(0.5, @ms), p99 => percentile(0.99, @ms) };
		$res->record('modes', "${m}_${label}_${_}_ms", 'ms', $run, $f{$label}{$_}) for qw(p50 p99);
		$res->record('modes', "${m}_${label}_missing", 'events', $run, $l->{committed} - $l->{received});
	}
	return \%f;
}

# The plain and the transactional floor at one rate, recorded; returns
# { floor => p50, txn_floor => p50, commit_ms }.
sub floors
{
	my ($ctx, $run, $label) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my ($rate) = $label =~ /(\d+)/;
	my %f;
	for my $floor ([ floor => 'producer' ], [ txn_floor => 'transactions' ])
	{
		my ($name, $source) = @$floor;
		my $l = Bench::Load::run($env, label => "${name}_$label", rate => $rate,
			seconds => $cfg->{latency_seconds}, source => $source);
		my @ms = map { $_->[1] } @{ $l->{samples} };
		$f{$name} = percentile(0.5, @ms);
		$res->record('modes', "${name}_${label}_p50_ms", 'ms', $run, $f{$name});
		$res->record('modes', "${name}_${label}_p99_ms", 'ms', $run, percentile(0.99, @ms));
		next unless defined $l->{commit_ms};
		$f{commit_ms} = $l->{commit_ms};
		$res->record('modes', "${name}_${label}_${_}", 'ms', $run, $l->{$_})
		  for grep { defined $l->{$_} } qw(commit_ms ack_ms due_to_commit_ms commit_to_visible_ms);
	}
	return \%f;
}

1;
