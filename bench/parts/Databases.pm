# Part databases: the drain part's backlog drained by one database's worker,
# then spread over several databases of one shard each (their workers share
# the 2 cores). The baseline is the 1-database rate of the same run.
package Bench::Part::Databases;

use strict;
use warnings;
use Bench::Stats qw(ratio);
use Time::HiRes ();

use constant DATABASES => 4;

sub run
{
	my ($ctx) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	$env->log("part databases: $cfg->{drain_events} events drained in 1 database, then spread over "
		  . DATABASES . " databases, 1 shard each");
	$env->set_shards(1);
	for my $d (1 .. DATABASES)
	{
		$env->sql("CREATE DATABASE bench_db$d");
		$env->sql('CREATE EXTENSION outbox', "bench_db$d");
	}
	for my $run (1 .. $ctx->{runs})
	{
		my $one = drain_once($ctx, $run, 1);
		my $many = drain_once($ctx, $run, DATABASES);
		$res->record('databases', 'dbs' . DATABASES . '_to_dbs1', 'rate/rate', $run, ratio($many, $one));
	}
	$env->sql("DROP DATABASE bench_db$_") for 1 .. DATABASES;
}

sub drain_once
{
	my ($ctx, $run, $n) = @_;
	my ($env, $cfg) = @$ctx{qw(env cfg)};
	my $per = int($cfg->{drain_events} / $n);
	$env->set_enabled(0);
	for my $d (1 .. $n)
	{
		$env->fill_outbox($per, "bench_db$d");
		# as the drain part does: the workers' plans see the backlog
		$env->sql('VACUUM (ANALYZE) outbox', "bench_db$d");
	}
	$env->sql('CHECKPOINT');
	my $t0 = Time::HiRes::time();
	$env->set_enabled(1);
	for my $d (1 .. $n)
	{
		Time::HiRes::sleep(0.05) until $env->sql('SELECT count(*) = 0 FROM outbox', "bench_db$d") eq 't';
	}
	return $ctx->{res}->record('databases', "dbs${n}_events_per_s", 'events/s', $run,
		$per * $n / (Time::HiRes::time() - $t0));
}

1;
