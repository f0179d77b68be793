# Bench::Stats: the benchmark's arithmetic in one place. Figures from 2
# noisy shared cores are only comparable within one run, so every ratio is
# taken per run against a baseline of that run, then summarised over runs
# (median, min, max).
package Bench::Stats;

use strict;
use warnings;
use Exporter qw(import);
use POSIX ();

our @EXPORT_OK = qw(median percentile ratio summary round_to is_num by_window);

sub is_num { my ($v) = @_; return defined $v && $v =~ /^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$/; }

# The median of the defined numbers; undef if there are none.
sub median
{
	my @v = sort { $a <=> $b } grep { is_num($_) } @_;
	return undef unless @v;
	return @v % 2 ? $v[$#v / 2] : ($v[@v / 2 - 1] + $v[@v / 2]) / 2;
}

# Nearest-rank percentile (as latency-consumer computes it); $p in 0..1.
sub percentile
{
	my ($p, @values) = @_;
	my @v = sort { $a <=> $b } grep { is_num($_) } @values;
	return undef unless @v;
	my $rank = POSIX::ceil($p * @v);
	$rank = 1 if $rank < 1;
	return $v[$rank - 1];
}

# $a / $b rounded to 4 decimals; undef when either is missing or $b is 0.
sub ratio
{
	my ($a, $b) = @_;
	return undef unless is_num($a) && is_num($b) && $b != 0;
	return round_to($a / $b, 4);
}

sub round_to
{
	my ($v, $digits) = @_;
	return undef unless is_num($v);
	return 0 + sprintf("%.${digits}f", $v);
}

# Latency samples ([receive time, ms]) by window of $win seconds from $t0:
# { window number => [ms, ...] }.
sub by_window
{
	my ($t0, $win, @samples) = @_;
	my %ms;
	push @{ $ms{ int(($_->[0] - $t0) / $win) } }, $_->[1] for @samples;
	return \%ms;
}

# { median, min, max } of the defined numbers of one metric's runs.
sub summary
{
	my @v = sort { $a <=> $b } grep { is_num($_) } @_;
	return { median => undef, min => undef, max => undef } unless @v;
	return { median => median(@v), min => $v[0], max => $v[-1] };
}

1;
