# Part tail: issue 19's latency target as it is stated: commit to consumer
# at 3000/s and at 80 % of the maximum, 2 shards, for minutes while another
# session holds a snapshot in the middle (VACUUM cannot remove what the
# workers delete), p99 per short window of receive time against the floor's
# p99: a plain producer at the same rate through the same brokers into the
# same consumer, in the same run. The whole-run p99 of the latency part
# hides a bad window; this part reports the worst one.
package Bench::Part::Tail;

use strict;
use warnings;
use Bench::Util ();
use Bench::Load;
use Bench::Rate ();
use Bench::Stats qw(percentile ratio by_window);

# a window is out of bounds above this many times the floor's p99
use constant BOUND => 3;

sub run
{
	my ($ctx) = @_;
	my ($env, $cfg) = @$ctx{qw(env cfg)};
	my $max = Bench::Rate::max_rate($ctx);
	my @rates = ([ r3000 => 3000 ], [ r80pct => int($max * 0.8) ]);
	my ($t, $hold, $win) = @$cfg{qw(tail_seconds tail_hold_seconds tail_window_seconds)};
	$env->log("part tail: ${t}s at " . join(', ', map { "$_->[1]/s" } @rates)
		  . ", 2 shards, a snapshot held ${hold}s in the middle, ${win}s windows;"
		  . " floor: a plain producer for $cfg->{tail_floor_seconds}s at each rate");
	for my $run (1 .. $ctx->{runs})
	{
		for my $r (@rates)
		{
			my ($label, $rate) = @$r;
			my $floor = floor($ctx, $run, $label, $rate);
			my @w = outbox_windows($ctx, $run, $label, $rate);
			record($ctx, $run, $label, $floor, \@w);
		}
	}
	$env->set_shards(1);
}

# The floor's p99 over its whole run at $rate.
sub floor
{
	my ($ctx, $run, $label, $rate) = @_;
	my $l = Bench::Load::run($ctx->{env}, label => "tail_floor_$label", rate => $rate,
		seconds => $ctx->{cfg}{tail_floor_seconds}, source => 'producer');
	my $p99 = percentile(0.99, map { $_->[1] } @{ $l->{samples} });
	$ctx->{res}->record('tail', "producer_${label}_p99_ms", 'ms', $run, $p99);
	return $p99;
}

# pg_outbox at $rate with 2 shards and the held snapshot: its windows.
sub outbox_windows
{
	my ($ctx, $run, $label, $rate) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my ($t, $hold, $win) = @$cfg{qw(tail_seconds tail_hold_seconds tail_window_seconds)};
	my $hold_at = ($t - $hold) / 2;
	$env->set_shards(2);
	$env->set_enabled(1);
	my $holder;
	my $hook = sub {
		my ($i, $elapsed) = @_;
		return if $holder || $elapsed < $hold_at - 1;
		$holder = $env->hold_snapshot('tail_holder', $hold);
	};
	my $l = Bench::Load::run($env, label => "tail_$label", rate => $rate, seconds => $t,
		source => 'outbox', after_segment => $hook);
	Bench::Util::finish_bg($holder) or die 'the snapshot-holding session failed' if $holder;
	$res->record('tail', "${label}_missing", 'events', $run, $l->{committed} - $l->{received});
	my $ms = by_window($l->{t0}, $win, @{ $l->{samples} });
	return map { { run => $run, rate => $label, window => $_, start_s => $_ * $win,
		delivered => scalar @{ $ms->{$_} }, p99_ms => 0 + percentile(0.99, @{ $ms->{$_} }) } }
	  sort { $a <=> $b } keys %$ms;
}

sub record
{
	my ($ctx, $run, $label, $floor, $w) = @_;
	my $res = $ctx->{res};
	$_->{to_floor} = ratio($_->{p99_ms}, $floor) for @$w;
	$res->add('tail_windows', $_) for @$w;
	my ($worst) = sort { $b->{p99_ms} <=> $a->{p99_ms} } @$w;
	$res->record('tail', "${label}_windows", 'windows', $run, scalar @$w);
	$res->record('tail', "${label}_worst_window_p99_ms", 'ms', $run, $worst->{p99_ms});
	$res->record('tail', "${label}_worst_window_at_s", 's', $run, $worst->{start_s});
	$res->record('tail', "${label}_worst_window_to_floor", 'outbox/floor', $run, $worst->{to_floor});
	$res->record('tail', "${label}_windows_over_${\BOUND}x_floor", 'windows', $run,
		scalar grep { defined $_->{to_floor} && $_->{to_floor} > BOUND } @$w);
	$ctx->{env}->say("tail $label run $run, p99 per window to the floor's $floor ms: "
		  . join(' ', map { $_->{to_floor} // '-' } @$w));
}

1;
