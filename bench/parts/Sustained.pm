# Part sustained: minutes at 50 % of the maximum rate while, in the middle,
# another session holds a REPEATABLE READ snapshot (VACUUM cannot remove
# what the worker deletes): latency per window, delivery completeness (every
# committed event read back), and the outbox's size before the snapshot, at
# the end and a while later. The baseline is the first window.
package Bench::Part::Sustained;

use strict;
use warnings;
use Bench::Util ();
use Bench::Load;
use Bench::Rate ();
use Bench::Stats qw(percentile ratio by_window);
use Time::HiRes ();

sub run
{
	my ($ctx) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my $rate = int(Bench::Rate::max_rate($ctx) / 2);
	my ($t, $hold, $win) = @$cfg{qw(sustained_seconds sustained_hold_seconds sustained_window_seconds)};
	my $hold_at = ($t - $hold) / 2;
	$env->log("part sustained: ${t}s at 50% of the maximum = $rate/s; a snapshot held ${hold}s from ${hold_at}s; ${win}s windows");
	$env->set_shards(1);
	for my $run (1 .. $ctx->{sustained_runs})
	{
		$env->set_enabled(0);
		$env->sql('TRUNCATE outbox');
		$env->sql('CHECKPOINT');
		$env->warm_up;
		my (@sizes, $holder);
		my $hook = sub {
			my ($i, $elapsed) = @_;
			if (!$holder && $elapsed >= $hold_at - 1)
			{
				$holder = $env->hold_snapshot('holder', $hold);
			}
			my $w = int(($elapsed + 1) / $win);
			push @sizes, sizes($env, $run, 'w' . ($w - 1), $w * $win) if $w > grep { $_->{at} =~ /^w/ } @sizes;
		};
		my $l = Bench::Load::run($env, label => 'sustained', rate => $rate, seconds => $t,
			source => 'outbox', after_segment => $hook);
		Bench::Util::finish_bg($holder) or die 'the snapshot-holding session failed' if $holder;
		push @sizes, sizes($env, $run, 'end', int(Time::HiRes::time() - $l->{t0}));
		sleep $cfg->{sustained_after_seconds};
		push @sizes, sizes($env, $run, "end+$cfg->{sustained_after_seconds}s", int(Time::HiRes::time() - $l->{t0}));
		$res->add('sustained_size_samples', $_) for @sizes;
		record($ctx, $run, $rate, $l, \@sizes, $hold_at);
	}
}

sub record
{
	my ($ctx, $run, $rate, $l, $sizes, $hold_at) = @_;
	my ($res, $cfg) = @$ctx{qw(res cfg)};
	my @ms = map { $_->[1] } @{ $l->{samples} };
	$res->record('sustained', 'rate', 'events/s', $run, $rate);
	$res->record('sustained', 'pgbench_tps', 'tps', $run, $l->{tps});
	$res->record('sustained', 'delivered_per_s', 'events/s', $run, $l->{received} / $cfg->{sustained_seconds});
	$res->record('sustained', "${_}_ms", 'ms', $run, percentile({ p50 => 0.5, p99 => 0.99, max => 1 }->{$_}, @ms))
	  for qw(p50 p99 max);
	$res->record('sustained', 'missing', 'events', $run, $l->{committed} - $l->{received});
	$res->record('sustained', 'delivered_pct', '%', $run, $l->{committed} ? 100 * $l->{received} / $l->{committed} : undef);
	my @w = windows($run, $l, $cfg->{sustained_window_seconds}, $sizes);
	$res->add('sustained_windows', $_) for @w;
	my ($worst) = sort { $b <=> $a } grep { defined } map { $_->{p99_ms} } @w;
	$res->record('sustained', 'worst_window_p99_ms', 'ms', $run, $worst);
	$res->record('sustained', 'worst_window_p99_to_first', 'window/first', $run, ratio($worst, $w[0]{p99_ms}));
	my %at = map { $_->{at} => $_ } @$sizes;
	my $before = 'w' . (int($hold_at / $cfg->{sustained_window_seconds}) - 1);
	for my $s ([ before_hold => $before ], [ end => 'end' ], [ after => "end+$cfg->{sustained_after_seconds}s" ])
	{
		next unless $at{ $s->[1] };
		$res->record('sustained', "table_bytes_$s->[0]", 'bytes', $run, $at{ $s->[1] }{table_bytes});
		$res->record('sustained', "index_bytes_$s->[0]", 'bytes', $run, $at{ $s->[1] }{index_bytes});
	}
}

# Per window of $win seconds from the start (by receive time): delivered,
# rate and latency, joined with the size sample taken at the window's end.
sub windows
{
	my ($run, $l, $win, $sizes) = @_;
	my %ms = %{ by_window($l->{t0}, $win, @{ $l->{samples} }) };
	my %size = map { $_->{at} => $_ } @$sizes;
	my @w;
	for my $i (sort { $a <=> $b } keys %ms)
	{
		my @v = @{ $ms{$i} };
		my $s = $size{"w$i"} // {};
		push @w, { run => $run, window => $i, start_s => $i * $win, end_s => ($i + 1) * $win,
			delivered => scalar @v, delivered_per_s => 0 + sprintf('%.1f', @v / $win),
			p50_ms => percentile(0.5, @v), p99_ms => percentile(0.99, @v), max_ms => percentile(1, @v),
			map { $_ => $s->{$_} } qw(table_bytes index_bytes backlog dead_tuples autovacuums) };
	}
	return @w;
}

sub sizes
{
	my ($env, $run, $at, $t) = @_;
	my @f = split /\|/, $env->sql(q{SELECT pg_relation_size('outbox'), pg_indexes_size('outbox'),
		(SELECT count(*) FROM outbox), n_dead_tup, autovacuum_count
		FROM pg_stat_user_tables WHERE relid = 'outbox'::regclass});
	my %s = (run => $run, at => $at, t_s => $t);
	@s{qw(table_bytes index_bytes backlog dead_tuples autovacuums)} = map { 0 + $_ } @f;
	return \%s;
}

1;
