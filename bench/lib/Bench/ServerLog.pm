# Bench::ServerLog: what the server said during the benchmark, for the
# results: counts of errors and warnings, and the notable lines (errors,
# warnings, the workers' own messages other than the expected start, pause
# and shutdown ones).
package Bench::ServerLog;

use strict;
use warnings;
use Bench::Util ();
use Bench::Env;

my $NOTABLE = qr/ (?:ERROR|FATAL|PANIC|WARNING|DETAIL|HINT|STATEMENT):|outbox "[^"]*" shard [0-9]+:|terminated by signal|exited with exit code/;
my $EXPECTED = qr/outbox "[^"]*" shard [0-9]+ of [0-9]+ started|outbox launcher started|delivery paused|terminating background worker "outbox shard[^"]*" due to administrator command|waiting for CREATE EXTENSION|"logical replication launcher" \(PID [0-9]+\) exited with exit code 1|terminating autovacuum process due to administrator command|background worker "outbox shard" \(PID [0-9]+\) exited with exit code 1|automatic (?:analyze|vacuum) of table|terminating connection due to administrator command|terminating background worker "outbox launcher" due to administrator command|background worker "outbox launcher" \(PID [0-9]+\) exited with exit code 1/;

sub lines { my ($log) = @_; return defined $log ? split /\n/, Bench::Util::slurp($log) : (); }

sub summary
{
	my ($log) = @_;
	my @l = lines($log);
	my @notable = grep { $_ =~ $NOTABLE && $_ !~ $EXPECTED } @l;
	splice(@notable, 60) if @notable > 60;
	return {
		errors => scalar(grep { / (?:ERROR|PANIC):/ } @l),
		fatals => scalar(grep { / FATAL:/ && !/due to administrator command/ } @l),
		warnings => scalar(grep { / WARNING:/ } @l),
		autovacuums_of_outbox => scalar(grep { /automatic vacuum of table "postgres\.public\.outbox"/ } @l),
		notable_lines => \@notable,
	};
}

sub print_summary
{
	my ($log, $fh) = @_;
	my $s = summary($log);
	printf $fh "\nserver log: %d ERROR/PANIC, %d FATAL (besides shutdowns), %d WARNING lines\n",
	  @$s{qw(errors fatals warnings)};
	my @n = @{ $s->{notable_lines} };
	print $fh "  $_\n" for @n[ 0 .. ($#n < 29 ? $#n : 29) ];
}

1;
