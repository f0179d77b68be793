# What a real Kafka cluster's topics refuse or rewrite: a topic that does
# not exist (auto-creation off) dead-letters its events after the bounded
# attempts while other topics flow; a record above the topic's
# max.message.bytes is dead-lettered with the broker's error, its key's
# later events follow in order and other keys are unaffected; a compacted
# topic keeps the latest value of each key and drops a tombstoned key.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $limit = 10000;
my $cluster = start_real_kafka(topics => ['flowing:3']);
$cluster->create_topic('small', partitions => 3, config => { 'max.message.bytes' => $limit });
$cluster->create_topic('compacted', partitions => 1, config => {
	'cleanup.policy' => 'compact', 'segment.ms' => 500, 'min.cleanable.dirty.ratio' => '0.001',
	'delete.retention.ms' => 500, 'min.compaction.lag.ms' => 0 });
my $node = new_outbox_node('topics', $cluster, shards => 1,
	kafka_config => "$OutboxTest::TEST_KAFKA_CONFIG,topic.metadata.propagation.max.ms=1000",
	conf => 'outbox.max_attempts = 3');

sub dead_letter
{
	my ($topic) = @_;
	return $node->safe_psql('postgres', "SELECT count(*) || '|' || coalesce(max(last_error), '')"
		  . " FROM outbox_dead_letter WHERE topic = '$topic'");
}

# ---- a topic that does not exist -----------------------------------------

my $sent = time;
$node->safe_psql('postgres', q{SELECT outbox_send('no_such_topic', 'lost?', 'k')});
$node->safe_psql('postgres', q{SELECT outbox_send('flowing', 'v' || i, 'k' || i) FROM generate_series(1, 50) i});
ok(wait_until(60, sub { @{ consume($cluster, 'flowing') } == 50 }),
	'other topics flow while one does not exist');
ok(wait_until(120, sub { dead_letter('no_such_topic') =~ /^1\|/ }),
	'the event for a topic that does not exist becomes a dead letter');
my $unknown_s = time - $sent;
my $unknown = dead_letter('no_such_topic');
like($unknown, qr/unknown topic/i, 'its last_error names the unknown topic');
my $cli = $cluster->metadata;
ok(!exists $cli->{partitions}{no_such_topic}, 'and nothing created the topic');

# ---- a record above the topic's max.message.bytes -------------------------

my $big = 'x' x (2 * $limit);
my $small_sent = time;
$node->safe_psql('postgres', qq{
SELECT outbox_send('small', 'before', 'big');
SELECT outbox_send('small', '$big', 'big');
SELECT outbox_send('small', 'after-' || i, 'big') FROM generate_series(1, 5) i;
SELECT outbox_send('small', 'other-' || i, 'o' || (i % 7)) FROM generate_series(1, 200) i;
});
ok(wait_until(120, sub { dead_letter('small') =~ /^1\|/ }),
	'the record above max.message.bytes becomes a dead letter');
ok(wait_for_empty($node, 120), 'everything else is delivered');
my $small_s = time - $small_sent;
my $too_large = dead_letter('small');
like($too_large, qr/too large|size/i, 'its last_error is the broker\'s size error');
my $small = consume($cluster, 'small');
my @big_key = map { $_->{value} } grep { $_->{key} eq 'big' } @$small;
diag("FIGURES topics: the oversized record's key arrived as @big_key");
is_deeply([ sort @big_key ], [ sort 'before', map { "after-$_" } 1 .. 5 ],
	'its key\'s other events arrive, the refused one left out');
# A new producer's first batch to the partition is refused while its next
# one would be in flight: 'after-1' once arrived before 'before', the event
# that shared the refused batch (Kafka takes any sequence number from a
# producer it holds no state for). The first keyed event to a partition now
# goes alone (src/kafka/partitions.c, t/048_first_batch_order.pl).
is_deeply(\@big_key, [ 'before', map { "after-$_" } 1 .. 5 ], 'and in commit order');
my %other = map { $_->{value} => 1 } grep { $_->{key} =~ /^o/ } @$small;
is(scalar keys %other, 200, 'other keys: every event arrives');
is($node->safe_psql('postgres', "SELECT count(*) FROM outbox_dead_letter WHERE topic = 'small'"), '1',
	'only the oversized record is a dead letter');

# ---- a compacted topic ---------------------------------------------------

$node->safe_psql('postgres', q{
SELECT outbox_send('compacted', 'v' || r, k) FROM generate_series(1, 3) r, unnest(ARRAY['a','b','c','d']) k;
SELECT outbox_send('compacted', NULL, 'c');
});
ok(wait_for_empty($node, 60), 'compacted topic: delivered');
is(scalar @{ consume($cluster, 'compacted') }, 13, 'before compaction: every record is there');
# The cleaner only compacts closed segments: keep rolling the active one
# with a throwaway key until the log is compacted and the tombstone gone.
my $compacted_at = time;
my $round = 0;
my $done = wait_until(180, sub {
	$node->safe_psql('postgres', "SELECT outbox_send('compacted', 'roll-' || " . ++$round . ", 'roll')");
	sleep 1;
	my @kept = grep { $_->{key} ne 'roll' } @{ consume($cluster, 'compacted') };
	return join(',', map { "$_->{key}=$_->{value}" } @kept) eq 'a=v3,b=v3,d=v3';
});
ok($done, 'after compaction: the latest value of each key, the tombstoned key gone');
diag(sprintf("FIGURES topics: unknown_topic_dead_letter_s=%.1f unknown_error='%s' too_large_error='%s'"
		  . ' too_large_with_206_others_drained_s=%.1f compacted_s=%.1f rolls=%d', $unknown_s,
		(split /\|/, $unknown)[1], (split /\|/, $too_large)[1], $small_s,
		time - $compacted_at, $round));

$node->stop;
$cluster->stop;
done_testing();
