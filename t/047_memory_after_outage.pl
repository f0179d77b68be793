# A worker gives its memory back after an outage: while every broker is
# down, 40k events of 8 kB (320 MB) are sent, the worker fills its window
# (outbox.window_bytes, 64 MB) again and again as deliveries time out;
# then Kafka comes back and the worker drains the outbox. Once it is empty
# and idle, the worker's private resident memory (RssAnon) must be back
# within 10 MB of what it was before the outage: what it held for the
# window is freed, and freed memory must not stay resident in malloc's
# arenas (src/worker/heap.c). With the fixed thresholds alone it stayed
# 15-30 MB above (eight CI runs); without them, 189 MB.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use List::Util ();
use Time::HiRes qw(time sleep);

my $events = 40_000;
my $slack_mb = 10;

my $broker = start_broker(topics => ['after_outage:4']);
my $node = new_outbox_node('after_outage', $broker, shards => 1);

sub rss_anon_mb
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/status") or return -1;
	my ($kb) = map { /^RssAnon:\s+(\d+) kB/ ? $1 : () } <$fh>;
	return ($kb // 0) / 1024;
}

sub send_events
{
	my ($n) = @_;
	sql("SELECT count(outbox_send('after_outage', repeat('x', 8000) || i, 'k' || (i % 1000)))"
		  . " FROM generate_series(1, $n) i");
}

# warm up: the producer, its topic and a few reads
send_events(1000);
ok(wait_for_empty($node), 'the warm-up events are delivered');
sleep 1;
my ($pid) = @{ worker_pids($node) };
my $before = rss_anon_mb($pid);

$broker->command('down all');
my $peak = 0;
send_events($events);
# several windows time out (message.timeout.ms is 5000 in the test config)
for (1 .. 120)
{
	$peak = List::Util::max($peak, rss_anon_mb($pid));
	sleep 0.1;
}
cmp_ok(sql('SELECT count(*) FROM outbox'), '>', 0, 'the events wait while Kafka is down');
$broker->command('up all');
my $t_up = time;
while (!wait_for_empty($node, 1) && time - $t_up < 180)
{
	$peak = List::Util::max($peak, rss_anon_mb($pid));
}
ok(wait_for_empty($node), 'the outbox drains once Kafka is back');
my $drain_s = time - $t_up;
sleep 3;    # settled, idle
my $after = rss_anon_mb($pid);

is(worker_pids($node)->[0], $pid, 'the same worker delivered it all');
my $delivered = end_offsets_sum($broker, 'after_outage', 4);
cmp_ok($delivered, '>=', $events + 1000, 'Kafka received every event');
diag(sprintf('FIGURES memory after outage: events=%d before_mb=%.0f peak_mb=%.0f after_mb=%.0f '
	  . 'drain_s=%.1f delivered=%d', $events, $before, $peak, $after, $drain_s, $delivered));
cmp_ok($after - $before, '<', $slack_mb,
	"after the outage, RssAnon is back within $slack_mb MB of before");

done_testing();
