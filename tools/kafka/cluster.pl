#!/usr/bin/perl
# cluster.pl: a real three-broker Kafka cluster (t/KafkaCluster.pm) behind
# the same stdin/stdout protocol as tools/outbox-broker, so that the demo
# (scripts/demo.sh --kafka real) and anything else that drives the
# project's broker can drive real Kafka instead. Run it as the
# unprivileged user: the brokers are its child processes.
#
# Usage:
#   tools/kafka/cluster.pl [--dir DIR] [--topic NAME:PARTITIONS]...
#                          [--bootstrap-file PATH]
#
#   --dir DIR                the cluster's directory (must not exist yet);
#                            default: a fresh temporary one, removed at exit
#   --topic NAME:PARTITIONS  create a topic up front, replication factor 3;
#                            may be repeated
#   --bootstrap-file PATH    also write the bootstrap list to PATH, one
#                            line, replaced atomically once the topics exist
#
# Once the brokers are up and the topics created it prints one line:
#   BOOTSTRAP host:port,host:port,host:port
# then reads one command per line from stdin and answers each with one
# line, "OK ..." or "ERR <message>":
#
#   ping                          -> OK
#   create <topic> <partitions>   create a topic, replication factor 3, and
#                                 wait until every partition has a leader
#                                 and a full ISR
#   leader <topic> <partition>    -> OK <broker-id> (-1: none)
#   stop <id>                     controlled shutdown (SIGTERM)
#   kill <id>                     SIGKILL
#   pause <id> / resume <id>      SIGSTOP / SIGCONT
#   start <id> [<id>...]          start stopped brokers again, wait until
#                                 they joined
#   quit                          stop every broker, exit 0
#
# Broker ids are 1..3. Unlike outbox-broker, the end of stdin stops the
# cluster (so a caller that dies leaves no JVM behind), as do SIGTERM,
# SIGINT and SIGHUP.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../../t";
use File::Path qw(remove_tree);
use File::Temp ();
use Getopt::Long qw(GetOptions);
use IO::Handle;
use KafkaCluster;

# Kafka would run as root, but its files (and the JVMs) belong to the
# user the tests, the demo and the benchmark run as.
die "cluster.pl: run it as an unprivileged user (scripts/demo.sh uses runuser)\n" if $> == 0;

my ($dir, @topics, $bootstrap_file);
GetOptions('dir=s' => \$dir, 'topic=s' => \@topics, 'bootstrap-file=s' => \$bootstrap_file)
  or die "usage: $0 [--dir DIR] [--topic NAME:PARTITIONS]... [--bootstrap-file PATH]\n";
for (@topics)
{
	die "--topic $_: expected NAME:PARTITIONS\n" unless /^[^:\s]+:\d+$/;
}

my ($cluster, $tmp);
# Runs before KafkaCluster's own END (this file's is compiled last): the
# brokers stop before their directory goes.
END
{
	local $?;
	$cluster->stop if $cluster;
	remove_tree($tmp) if $tmp;
}
$SIG{$_} = sub { exit 0 } for qw(TERM INT HUP);
$SIG{PIPE} = 'IGNORE';

if (!defined $dir)
{
	$tmp = File::Temp::tempdir('outbox-kafka.XXXXXX', TMPDIR => 1);
	$dir = "$tmp/cluster";
}
STDOUT->autoflush(1);
$cluster = KafkaCluster::start_kafka_cluster(dir => $dir);
for (@topics)
{
	my ($name, $partitions) = split /:/;
	$cluster->create_topic($name, partitions => $partitions);
}
write_bootstrap_file($bootstrap_file, $cluster->bootstrap) if defined $bootstrap_file;
print 'BOOTSTRAP ', $cluster->bootstrap, "\n";

my %commands = (
	ping => [ 0, sub { '' } ],
	create => [ 2, sub { $cluster->create_topic($_[0], partitions => positive($_[1])); '' } ],
	leader => [ 2, sub { $cluster->leader_of($_[0], $_[1]) } ],
	stop => [ 1, sub { $cluster->stop_broker(broker_id($_[0])); '' } ],
	kill => [ 1, sub { $cluster->kill_broker(broker_id($_[0])); '' } ],
	pause => [ 1, sub { $cluster->pause_broker(broker_id($_[0])); '' } ],
	resume => [ 1, sub { $cluster->resume_broker(broker_id($_[0])); '' } ],
	start => [ -1, sub { $cluster->start_broker(map { broker_id($_) } @_); '' } ],
);

while (my $line = <STDIN>)
{
	my ($cmd, @args) = split ' ', $line;
	next unless defined $cmd;
	last if $cmd eq 'quit';
	print answer($cmd, @args), "\n";
}
exit 0;

# One command's reply line; a command that dies answers ERR.
sub answer
{
	my ($cmd, @args) = @_;
	my $c = $commands{$cmd} or return "ERR unknown command: $cmd";
	my ($arity, $run) = @$c;
	return "ERR $cmd: expected $arity argument(s)" if $arity >= 0 && @args != $arity;
	return "ERR $cmd: expected broker ids" if $arity < 0 && !@args;
	my $reply = eval { $run->(@args) };
	if (!defined $reply)
	{
		my $err = $@ || 'failed';
		$err =~ s/\s+/ /g;
		$err =~ s/ $//;
		return "ERR $err";
	}
	return $reply eq '' ? 'OK' : "OK $reply";
}

sub broker_id
{
	my ($id) = @_;
	die "no broker $id (ids are 1..3)\n" unless $id =~ /^[123]$/;
	return $id;
}

sub positive
{
	my ($n) = @_;
	die "not a partition count: $n\n" unless $n =~ /^[1-9]\d*$/;
	return $n;
}

sub write_bootstrap_file
{
	my ($path, $bootstrap) = @_;
	open(my $fh, '>', "$path.tmp") or die "$path.tmp: $!";
	print $fh "$bootstrap\n";
	close $fh or die "$path.tmp: $!";
	rename("$path.tmp", $path) or die "$path: $!";
}
