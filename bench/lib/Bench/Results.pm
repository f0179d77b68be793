# Bench::Results: collects what the parts measure (one value per metric and
# run), checks the targets against the medians, and writes the results as
# JSON (the shape of bench/results.json) and as the table printed at the end.
package Bench::Results;

use strict;
use warnings;

use Bench::Stats qw(summary is_num);
use JSON::PP ();

# What each target means; checked against the median.
my %TARGETS = (
	'enqueue stmt_time_ratio'          => [ '<=', 1.2 ],
	'capture stmt_time_ratio'          => [ '<=', 1.5 ],
	'capture pgbench_c1_time_ratio'    => [ '<=', 1.5 ],
	'drain ratio_s1_to_sql'            => [ '>=', 0.7 ],
	'drain ratio_s2_to_sql'            => [ '>=', 0.7 ],
	'drain ratio_s4_to_sql'            => [ '>=', 0.7 ],
	'latency r1000_ack_p50_ms'         => [ '<=', 3 ],
	'latency r1000_ack_p99_ms'         => [ '<=', 20 ],
	'latency r1000_p50_ms'             => [ '<=', 3 ],
	'latency r1000_p99_ms'             => [ '<=', 20 ],
	'latency producer_r1000_p50_ms'    => [ '<', 3 ],
	'sustained delivered_pct'          => [ '>=', 100 ],
	'memory peak_vmrss_mb'             => [ '<', 64 ],
	'memory peak_rssanon_mb'           => [ '<', 64 ],
	'memory large_peak_rssanon_mb'     => [ '<', 256 ],
);

sub new
{
	my ($class, $out) = @_;
	return bless { out => $out, order => [], metrics => {}, sustained_windows => [],
		sustained_size_samples => [], memory_worker_activity => [], tail_windows => [] }, $class;
}

# One value of one run; printed as it comes.
sub record
{
	my ($self, $part, $metric, $unit, $run, $value) = @_;
	my $k = "$part $metric";
	if (!$self->{metrics}{$k})
	{
		push @{ $self->{order} }, $k;
		$self->{metrics}{$k} = { part => $part, metric => $metric, unit => $unit, runs => [] };
	}
	$value = is_num($value) ? 0 + sprintf('%.10g', $value) : undef;
	$self->{metrics}{$k}{runs}[ $run - 1 ] = $value;
	printf {$self->{out}} "   %-9s %-30s run %s: %s %s\n", $part, $metric, $run,
	  $value // 'n/a', $unit;
	return $value;
}

sub add { my ($self, $list, $row) = @_; push @{ $self->{$list} }, $row; }

sub empty { return !@{ $_[0]{order} }; }

sub rows
{
	my ($self) = @_;
	my @rows;
	for my $k (@{ $self->{order} })
	{
		my $m = $self->{metrics}{$k};
		my $s = summary(@{ $m->{runs} });
		my $t = $TARGETS{$k};
		my $ok;
		if ($t && defined $s->{median})
		{
			my ($op, $v) = @$t;
			$ok = ($op eq '<=' ? $s->{median} <= $v : $op eq '>=' ? $s->{median} >= $v
				  : $s->{median} < $v) ? JSON::PP::true : JSON::PP::false;
		}
		push @rows, { part => $m->{part}, metric => $m->{metric}, unit => $m->{unit},
			runs => [ map { $_ } @{ $m->{runs} } ], %$s,
			target => $t ? "$t->[0] $t->[1]" : undef, meets_target => $ok };
	}
	return \@rows;
}

sub write_json
{
	my ($self, $file, $status, $meta, $log) = @_;
	my $doc = { status => $status, meta => $meta, results => $self->rows,
		map({ $_ => $self->{$_} } qw(sustained_windows sustained_size_samples memory_worker_activity tail_windows)),
		server_log => $log };
	my $json = JSON::PP->new->pretty->canonical->encode($doc);
	open my $fh, '>', "$file.tmp" or die "$file.tmp: $!";
	print $fh $json;
	close $fh or die "$file.tmp: $!";
	rename "$file.tmp", $file or die "$file: $!";
}

sub fmt
{
	my ($v) = @_;
	return 'n/a' unless defined $v;
	return sprintf('%.0f', $v) if abs($v) >= 1000;
	return sprintf('%.1f', $v) if abs($v) >= 100;
	return sprintf('%.3g', $v);
}

sub print_table
{
	my ($self) = @_;
	my $fh = $self->{out};
	printf $fh "\n%-9s %-30s %12s %25s %-15s %-8s %s\n", qw(part metric median), 'min - max (runs)', qw(unit target ok);
	for my $r (@{ $self->rows })
	{
		my $n = grep { defined } @{ $r->{runs} };
		printf $fh "%-9s %-30s %12s %25s %-15s %-8s %s\n", $r->{part}, $r->{metric}, fmt($r->{median}),
		  $n ? fmt($r->{min}) . ' - ' . fmt($r->{max}) . " ($n)" : '', $r->{unit}, $r->{target} // '',
		  !defined $r->{meets_target} ? '' : $r->{meets_target} ? 'yes' : 'NO';
	}
	my @w = @{ $self->{sustained_windows} };
	if (@w)
	{
		printf $fh "\nsustained, per window:\n%-4s %-6s %-12s %10s %10s %10s %10s %12s %12s %9s\n",
		  qw(run window t_s delivered/s p50_ms p99_ms max_ms table_bytes index_bytes backlog);
		printf $fh "%-4s %-6s %-12s %10s %10s %10s %10s %12s %12s %9s\n",
		  map({ $_ // '' } @$_{qw(run window)}), "$_->{start_s}-$_->{end_s}",
		  map({ $_ // '' } @$_{qw(delivered_per_s p50_ms p99_ms max_ms table_bytes index_bytes backlog)})
		  for @w;
	}
}

1;
