# Bench::Util: small helpers the benchmark's modules share: files, a
# background process's state, /proc figures of a process.
package Bench::Util;

use strict;
use warnings;
use Exporter qw(import);
use IPC::Run ();

our @EXPORT_OK = qw(slurp slurp_from running num proc_kb start_bg);

# Background processes still running: a benchmark that dies must not leave
# its consumers (which would run for a day) or load generators behind.
my %bg;
END { local $?; eval { $_->kill_kill(grace => 2) } for values %bg; }

# IPC::Run::start, remembered until the harness is finished.
sub start_bg
{
	my $h = IPC::Run::start(@_);
	$bg{"$h"} = $h;
	return $h;
}

# ->finish of a start_bg harness; true if it exited 0.
sub finish_bg
{
	my ($h) = @_;
	delete $bg{"$h"};
	return $h->finish;
}

sub num { my ($v) = @_; return (defined $v && $v =~ /^-?[0-9.]+(e[-+]?\d+)?$/i) ? 0 + $v : undef; }

# True while the IPC::Run harness's process runs.
sub running
{
	my ($h) = @_;
	return eval { $h->pump_nb; 1 } && $h->pumpable;
}

# A file's content from byte $offset on.
sub slurp_from
{
	my ($file, $offset) = @_;
	open my $fh, '<', $file or return '';
	seek $fh, $offset, 0;
	local $/;
	return <$fh>;
}

sub slurp
{
	my ($file) = @_;
	open my $fh, '<', $file or return '';
	local $/;
	return <$fh>;
}

# Fields of /proc/PID/status and /proc/PID/smaps_rollup, in kB.
sub proc_kb
{
	my ($pid) = @_;
	my %kb;
	# callers may be in a loop aliasing $_ (the while below assigns it)
	local $_;
	for my $f ("/proc/$pid/status", "/proc/$pid/smaps_rollup")
	{
		open my $fh, '<', $f or return undef;
		while (<$fh>) { $kb{$1} = $2 if /^(\w+):\s+(\d+) kB/; }
	}
	return \%kb;
}

1;
