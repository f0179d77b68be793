# A shard's producer keeps a handle (with the partition warm-up and
# pacing) for the first 10,000 topics it writes to (src/kafka/producer.c);
# further new topics are produced to by name, without either. The test
# lowers the limit to 3 (outbox.test_topic_handles, test only). What holds
# past the limit: the worker says so once in its log, naming the first
# such topic, and the events of those topics are still delivered, each
# once, per key in order (here without a refused first request, the case
# the warm-up exists for: docs/guarantees.md, "Order per key").
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $limit = 3;
my $broker = start_broker(topics => [ (map { "h$_:2" } 1 .. $limit), 'past1:4', 'past2:4' ]);
my $node = new_outbox_node('topic_handles', $broker, shards => 1,
	conf => "outbox.test_topic_handles = $limit\n");

# one event to each of $limit topics: the producer holds $limit handles
my $offset = -s $node->logfile;
sql(qq{SELECT count(outbox_send('h' || i, 'v', 'k')) FROM generate_series(1, $limit) i});
ok(wait_for_empty($node, 60), "one event to each of $limit topics is delivered");
is(log_count($node, qr/topic handles/, $offset), 0, 'no line about the limit at the limit');

# past the limit: two topics new to the producer, 50 events of 5 keys each
OutboxTest::create_sent_table($node);
my $sql = "BEGIN;\n";
for my $topic (qw(past1 past2))
{
	for my $i (1 .. 50)
	{
		my $key = "k" . ($i % 5);
		$sql .= "INSERT INTO sent VALUES (" . ($topic eq 'past1' ? 1 : 2) . ", $i, '$key', '$topic:$i');\n"
		  . "SELECT outbox_send('$topic', '$topic:$i', '$key');\n";
	}
}
sql("${sql}COMMIT;");
ok(wait_for_empty($node, 120), 'the events of the topics past the limit are delivered');
is(log_count($node, qr/the Kafka producer holds $limit topic handles; topic "past1" and every further new topic are produced to by name/, $offset),
	1, 'the worker says once that topics past the limit go by name, naming the first')
  or diag(join("\n", grep { !/statement:/ } split /\n/, log_since($node, $offset)));
is(log_count($node, qr/topic handles/, $offset), 1, 'and only once');
for my $topic (qw(past1 past2))
{
	my $result = check_delivery("topic past the limit $topic",
		committed_of($node, $topic eq 'past1' ? 1 : 2, $topic eq 'past1' ? 1 : 2),
		consume($broker, $topic));
	is($result->{duplicates}, 0, "$topic: each event once");
}

done_testing();
