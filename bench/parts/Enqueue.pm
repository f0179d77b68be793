# Part enqueue: what outbox_send() costs the transaction that calls it,
# against the same row INSERTed into an ordinary table with the same
# columns and primary key (delivery paused): one statement of many rows,
# and pgbench with 1 and 8 clients, one event per transaction.
package Bench::Part::Enqueue;

use strict;
use warnings;
use Bench::Stats qw(ratio);

sub run
{
	my ($ctx) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my ($n, $t) = @$cfg{qw(enqueue_rows pgbench_seconds)};
	$env->log("part enqueue: outbox_send vs INSERT, $n rows in one statement; pgbench 1 and 8 clients, ${t}s");
	$env->set_enabled(0);
	my %script = (
		outbox => $env->script('enqueue_outbox', "\\set i random(1, 1000000)\n"
			  . "SELECT outbox_send('bench', repeat('x', $cfg->{payload}), 'k' || :i);\n"),
		plain => $env->script('enqueue_plain', "\\set i random(1, 1000000)\n"
			  . "INSERT INTO plain VALUES (nextval('plain_id_seq'), 0, 'bench', convert_to('k' || :i, 'UTF8'), "
			  . "convert_to(repeat('x', $cfg->{payload}), 'UTF8'), NULL, now());\n"));
	my %stmt = (
		outbox => "SELECT count(outbox_send('bench', repeat('x', $cfg->{payload}), 'k' || i)) FROM generate_series(1, $n) i",
		plain => "INSERT INTO plain SELECT nextval('plain_id_seq'), 0, 'bench', convert_to('k' || i, 'UTF8'), "
		  . "convert_to(repeat('x', $cfg->{payload}), 'UTF8'), NULL, now() FROM generate_series(1, $n) i");
	for my $run (1 .. $ctx->{runs})
	{
		# alternate the order, so that neither always runs first
		my @order = $run % 2 ? qw(outbox plain) : qw(plain outbox);
		my %ms;
		for my $kind (@order)
		{
			fresh($env);
			$ms{$kind} = $res->record('enqueue', "stmt_${kind}_ms", 'ms', $run, $env->timed_sql($stmt{$kind}));
			$res->record('enqueue', "stmt_${kind}_rows_per_s", 'rows/s', $run, $n / ($ms{$kind} / 1000));
		}
		$res->record('enqueue', 'stmt_time_ratio', 'outbox/plain', $run, ratio($ms{outbox}, $ms{plain}));
		for my $c (1, 8)
		{
			my %tps;
			for my $kind (@order)
			{
				fresh($env);
				my $r = $env->pgbench($script{$kind}, '-c', $c, '-j', ($c > 1 ? 2 : 1), '-T', $t);
				$tps{$kind} = $res->record('enqueue', "pgbench_c${c}_${kind}_tps", 'tps', $run, $r->{tps});
			}
			# time per transaction, outbox over plain
			$res->record('enqueue', "pgbench_c${c}_time_ratio", 'outbox/plain', $run, ratio($tps{plain}, $tps{outbox}));
		}
	}
	$env->sql('TRUNCATE outbox, plain');
}

sub fresh
{
	my ($env) = @_;
	$env->sql('TRUNCATE outbox, plain');
	$env->sql('CHECKPOINT');
}

1;
