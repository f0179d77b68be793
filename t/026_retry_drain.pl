# A pending retry must not make every read start at it and copy the rows
# already in flight again, nor spin without progress (review e11b06c M2):
# a 100k drain with one event waiting 30 s for its retry costs the same as
# a clean drain. Measured in the same run: the drain's seconds, the
# worker's CPU seconds, and the outbox's index tuples fetched per
# delivered event.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $events = 100_000;
my $broker = start_broker(topics => [ 'drain_clean:4', 'drain_poison:4' ]);
# librdkafka refuses the 5000-byte poison at once; it then waits 30 s
my $node = new_outbox_node('retrydrain', $broker,
	kafka_config => "$OutboxTest::TEST_KAFKA_CONFIG,message.max.bytes=2000", conf => q{
outbox.retry_backoff_min = '30s'
outbox.retry_backoff_max = '60s'
});

# from shared memory: the view would count the outbox, and its index fetches
# would be measured with the worker's
sub delivered { return sql('SELECT coalesce(sum(delivered), 0) FROM outbox_shard_stats()'); }

# The worker's CPU seconds (utime + stime) from /proc.
sub cpu_s
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or die "no process $pid";
	my @f = split ' ', (<$fh> =~ s/^.*\) //r);
	return ($f[11] + $f[12]) / 100;
}

sub idx_fetched
{
	sql('SELECT pg_stat_force_next_flush()');
	return sql(q{SELECT idx_tup_fetch FROM pg_stat_user_tables WHERE relname = 'outbox'});
}

# Sends $events events while paused, then times their delivery.
sub drain
{
	my ($topic) = @_;
	ok(pause_delivery($node, 1), "($topic) delivery paused");
	sql("SELECT count(outbox_send('$topic', 'e' || i, 'k' || (i % 100))) FROM generate_series(1, $events) i");
	my ($pid) = @{ worker_pids($node) };
	my ($cpu0, $fetch0, $done0) = (cpu_s($pid), idx_fetched(), delivered());
	my $t0 = time;
	reload_with($node, 'outbox.enabled = on');
	ok(wait_until(120, sub { delivered() >= $done0 + $events }), "($topic) $events events delivered");
	my $s = time - $t0;
	sleep 1.5;    # the worker's statistics reach pg_stat_user_tables
	return { s => $s, cpu => cpu_s($pid) - $cpu0,
		fetch_per_event => (idx_fetched() - $fetch0) / $events };
}

ok(wait_until(30, sub { @{ worker_pids($node) } == 1 }), 'the worker runs');
my $clean = drain('drain_clean');

my $poison = sql(q{SELECT outbox_send('drain_poison', repeat('x', 5000), 'P')});
ok(wait_query($node, 'postgres', "SELECT status = 'retry_wait' FROM outbox_explain($poison)", 20),
	'the poison waits for its retry');
my $pinned = drain('drain_poison');
is(sql("SELECT status FROM outbox_explain($poison)"), 'retry_wait', 'the poison still waits for its retry');

diag(sprintf('FIGURES M2 drain of %d: clean s=%.2f cpu_s=%.2f idx_fetch_per_event=%.2f; '
	  . 'one retry pending s=%.2f cpu_s=%.2f idx_fetch_per_event=%.2f; ratio_s=%.2f ratio_cpu=%.2f',
	$events, @$clean{qw(s cpu fetch_per_event)}, @$pinned{qw(s cpu fetch_per_event)},
	$pinned->{s} / $clean->{s}, $pinned->{cpu} / ($clean->{cpu} || 0.01)));
cmp_ok($pinned->{s}, '<', 1.5 * $clean->{s} + 2, 'the drain takes about as long with a retry pending');
cmp_ok($pinned->{cpu}, '<', 1.5 * $clean->{cpu} + 1, 'the worker spends about as much CPU');
cmp_ok($pinned->{fetch_per_event}, '<', 2, 'fewer than 2 index tuples fetched per delivered event');
my @msgs = @{ consume($broker, 'drain_poison') };
is(scalar(@msgs), $events, 'every event reached Kafka once');

$node->stop;
$broker->stop;
done_testing();
