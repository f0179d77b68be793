# Keys of events waiting for a retry hold later events of the same keys
# back; the read must not ship those keys in an array that a few thousand
# long keys push past PostgreSQL's 1 GB limit (review e11b06c H3): 3000
# events with distinct 400 kB keys, each refused and waiting for a retry,
# must not stop the shard from delivering another key's event.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $n = 3000;
my $broker = start_broker(topics => [ 'held:2', 'free:1' ]);
# librdkafka refuses a record over 2000 bytes at once: each long-keyed
# event fails, counts an attempt and waits 60 s, holding its key
my $node = new_outbox_node('heldkeys', $broker,
	kafka_config => "$OutboxTest::TEST_KAFKA_CONFIG,message.max.bytes=2000", conf => q{
outbox.retry_backoff_min = '60s'
outbox.retry_backoff_max = '120s'
});

my $offset = -s $node->logfile;
for (my $from = 1; $from <= $n; $from += 500)
{
	my $to = $from + 499;
	sql(qq{SET default_toast_compression = lz4;
SELECT count(outbox_send('held', 'v', convert_to(lpad(i::text, 8, '0') || repeat('k', 400000), 'UTF8')))
FROM generate_series($from, $to) i});
}
ok(wait_query($node, 'postgres',
		qq{SELECT count(*) = $n FROM outbox WHERE next_attempt_at > now()}, 120),
	"the $n long-keyed events wait for their retry");
my $t0 = time;
sql(q{SELECT outbox_send('free', 'another key', 'small')});
my $ok = wait_until(30, sub { grep { $_->{value} eq 'another key' } @{ consume($broker, 'free') } });
my $s = time - $t0;
ok($ok, "another key's event is delivered within 30 s");
my $array_errors = log_count($node, qr/array size exceeds the maximum allowed/, $offset);
is($array_errors, 0, 'no read failed on the array limit');
diag(sprintf('FIGURES H3 held keys: held=%d key_bytes=400008 other_key_delivered_s=%.2f array_errors=%d',
		$n, $s, $array_errors));

$node->stop;
$broker->stop;
done_testing();
