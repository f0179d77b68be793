# The first event of a backlog in an outbox nothing ever analyzed (a
# user's first backlog, autovacuum not come yet), with delivery paused
# while it is written and then switched on: it reaches a consumer about as
# soon as it does once the outbox is analyzed, not after a read that plans
# for an outbox it has no statistics of. Measured from the reload that
# enables delivery to the arrival at a consumer already reading the topic,
# for the never-analyzed outbox and then, in the same run, for the same
# backlog vacuumed and analyzed. (Before the read planned an ordered index
# walk whatever the statistics say, the first event took about 1 s here.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time sleep);

# big enough that a read walking the whole backlog shows (about 1 s here)
my $backlog = $ENV{COLD_BACKLOG} // 1_000_000;
my $broker = start_broker(topics => ['cold:3']);
# no autovacuum: nothing analyzes the outbox but the test; delivery off
# from the start: the worker's first read is of the backlog
my $node = new_outbox_node('cold_start', $broker, shards => 1,
	conf => "autovacuum = off\noutbox.enabled = off\n");

# the consumers' marker: in the topic before any event
my ($pout, $perr) = ('', '');
IPC::Run::run([ 'kcat', '-P', '-b', $broker->bootstrap, '-t', 'cold', '-p', '0' ],
	'<', \"marker\n", '>', \$pout, '2>', \$perr, IPC::Run::timeout(60))
  or die "kcat -P failed: $perr";

# A consumer of the topic from its start, returned once it has read
# $through (the last value already in the topic): it is fetching then.
sub start_consumer
{
	my ($through) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start([ 'kcat', '-C', '-q', '-u', '-b', $broker->bootstrap, '-t', 'cold',
		'-o', 'beginning', '-X', 'fetch.wait.max.ms=5', '-X', 'fetch.error.backoff.ms=5',
		'-f', '%s\n' ], \$in, \$out, \$err, IPC::Run::timeout(120));
	$h->pump until $out =~ /^\Q$through\E$/m;
	return { h => $h, out => \$out };
}

# The outbox's sequential scans and deleted rows so far (pg_stat_user_tables).
sub table_stats
{
	return split /\|/, $node->safe_psql('postgres',
		"SELECT seq_scan, n_tup_del FROM pg_stat_user_tables WHERE relname = 'outbox'");
}

# Pauses delivery, writes the backlog (values "<round>-<i>"), runs $prepare
# on it, starts a consumer, enables delivery: the ms from the reload to the
# first event of the backlog at the consumer, and how many sequential scans
# of the outbox the worker made until it deleted the backlog (nothing else
# looks at the outbox meanwhile).
my $last_delivered = 'marker';
my $paused_from = 0;
sub first_event_ms
{
	my ($round, $prepare) = @_;
	ok(pause_delivery($node, 1, $paused_from), "$round: delivery paused");
	$paused_from = undef;
	$node->safe_psql('postgres', "SELECT count(outbox_send('cold', '$round-' || i, 'k' || (i % 1000)))"
		  . " FROM generate_series(1, $backlog) i");
	$node->safe_psql('postgres', $prepare) if $prepare;
	my $c = start_consumer($last_delivered);
	my ($scans0, $deleted0) = table_stats();
	my $t0 = time;
	reload_with($node, 'outbox.enabled = on');
	my $arrived;
	while (time < $t0 + 60)
	{
		$c->{h}->pump_nb;
		if (${ $c->{out} } =~ /^\Q$round\E-1$/m)
		{
			$arrived = time;
			last;
		}
		sleep 0.001;
	}
	$c->{h}->kill_kill;
	ok(defined $arrived, "$round: the backlog's first event arrives");
	my ($scans, $deleted);
	ok(wait_until(300, sub { ($scans, $deleted) = table_stats(); $deleted - $deleted0 >= $backlog }),
		"$round: the backlog drains");
	$last_delivered = "$round-$backlog";
	return (defined $arrived ? ($arrived - $t0) * 1000 : 60_000, $scans - $scans0);
}

is($node->safe_psql('postgres',
	"SELECT last_analyze IS NULL AND last_autoanalyze IS NULL FROM pg_stat_user_tables WHERE relname = 'outbox'"),
	't', 'the outbox was never analyzed');

my ($cold, $cold_scans) = first_event_ms('cold');
my ($analyzed, $analyzed_scans) = first_event_ms('analyzed', 'VACUUM (ANALYZE) outbox');
diag(sprintf('FIGURES first event of a %d-event backlog after enabling delivery: never analyzed %.0f ms '
		  . '(%d sequential scans of the outbox), analyzed %.0f ms (%d)',
		$backlog, $cold, $cold_scans, $analyzed, $analyzed_scans));
is($cold_scans, 0, 'never analyzed: the worker never scans the whole outbox');
is($analyzed_scans, 0, 'analyzed: the worker never scans the whole outbox');
cmp_ok($cold, '<', 500, 'never analyzed: the first event arrives within 500 ms');
cmp_ok($analyzed, '<', 500, 'analyzed: the first event arrives within 500 ms');

$node->stop;
$broker->stop;
done_testing();
