# Part capture: rows of a 5-column table with a primary key INSERTed with an
# outbox_capture() trigger, against the same INSERT into the same table
# without it (delivery paused): one statement of many rows, and pgbench with
# 1 and 8 clients, one row per transaction.
package Bench::Part::Capture;

use strict;
use warnings;
use Bench::Stats qw(ratio);

sub run
{
	my ($ctx) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	my ($n, $t) = @$cfg{qw(enqueue_rows pgbench_seconds)};
	$env->log("part capture: INSERT with outbox_capture() vs without, $n rows in one statement; pgbench 1 and 8 clients, ${t}s");
	$env->set_enabled(0);
	my %script = tables($env);
	for my $run (1 .. $ctx->{runs})
	{
		my @order = $run % 2 ? qw(captured plain) : qw(plain captured);
		my %ms;
		for my $kind (@order)
		{
			fresh($env);
			$ms{$kind} = $res->record('capture', "stmt_${kind}_ms", 'ms', $run, $env->timed_sql(
				"INSERT INTO capture_$kind SELECT i, 'customer-' || (i % 1000), (i % 100000) / 100.0, 'new', now() "
				  . "FROM generate_series(1, $n) i"));
			if ($kind eq 'captured')
			{
				my $events = $env->sql('SELECT count(*) FROM outbox');
				die "the captured statement sent $events events, expected $n" unless $events == $n;
			}
			$res->record('capture', "stmt_${kind}_rows_per_s", 'rows/s', $run, $n / ($ms{$kind} / 1000));
		}
		$res->record('capture', 'stmt_time_ratio', 'captured/plain', $run, ratio($ms{captured}, $ms{plain}));
		for my $c (1, 8)
		{
			my %tps;
			for my $kind (@order)
			{
				fresh($env);
				my $r = $env->pgbench($script{$kind}, '-c', $c, '-j', ($c > 1 ? 2 : 1), '-T', $t);
				$tps{$kind} = $res->record('capture', "pgbench_c${c}_${kind}_tps", 'tps', $run, $r->{tps});
			}
			$res->record('capture', "pgbench_c${c}_time_ratio", 'captured/plain', $run, ratio($tps{plain}, $tps{captured}));
		}
	}
	$env->sql('DROP TABLE capture_plain, capture_captured');
	$env->sql('DROP SEQUENCE capture_id_seq');
	$env->sql('TRUNCATE outbox');
}

# Two tables of one definition; capture_captured has the trigger (no
# options: the payload carries all 5 columns). Returns the pgbench scripts.
sub tables
{
	my ($env) = @_;
	$env->sql('CREATE SEQUENCE IF NOT EXISTS capture_id_seq');
	for my $t (qw(capture_plain capture_captured))
	{
		$env->sql("CREATE TABLE IF NOT EXISTS $t (id bigint PRIMARY KEY, customer text NOT NULL,
			amount numeric NOT NULL, status text NOT NULL, created_at timestamptz NOT NULL)");
	}
	$env->sql(q{CREATE OR REPLACE TRIGGER capture_captured_outbox
		AFTER INSERT OR UPDATE OR DELETE ON capture_captured
		FOR EACH ROW EXECUTE FUNCTION outbox_capture('bench')});
	return map {
		$_ => $env->script("capture_$_", "\\set i random(1, 1000000)\n"
			  . "INSERT INTO capture_$_ VALUES (nextval('capture_id_seq'), 'customer-' || :i, :i / 100.0, 'new', now());\n")
	} qw(plain captured);
}

sub fresh
{
	my ($env) = @_;
	$env->sql('TRUNCATE outbox, capture_plain, capture_captured');
	$env->sql('CHECKPOINT');
}

1;
