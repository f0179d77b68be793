# A retry in the window: an event waiting for its retry is read through
# the read's retry branch (due retries below the scan start); until the
# settle deletes it, its row still says it is due, so every read while it
# is in flight finds it again. The read must leave out what the window
# holds, or each read produces it once more: duplicates with no crash or
# time-out (at least once), and in exactly-once mode twice in the same
# Kafka transaction, which a read_committed consumer then sees (found on
# the real cluster after a partition leader's crash: the events the crash
# failed came back as retries). Kafka answers slowly here so the retries
# stay in flight while later commits wake the worker.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = start_broker(topics => ['retried:1']);
my $node = new_outbox_node('retry_read_again', $broker, shards => 1);

sql(q{SELECT outbox_send('retried', 'warm', 'w')});
ok(wait_for_empty($node, 30), 'the topic is known');

# five events that failed once and are due for their retry now
ok(pause_delivery($node, 1), 'delivery paused');
my @values = map { "retry-$_" } 1 .. 5;
sql(join(";\n", 'BEGIN', (map { "SELECT outbox_send('retried', '$_', 'k-$_')" } @values), 'COMMIT'));
sql(q{UPDATE outbox SET attempts = 1, last_error = 'set by the test', next_attempt_at = now()});
my $last_retry = sql('SELECT max(id) FROM outbox');

$broker->command('rtt all 3000');
reload_with($node, 'outbox.enabled = on');
ok(wait_in_flight($node, $last_retry), 'the retries are in flight');

# each of these wakes the worker, whose read finds the retries again
push @values, commit_one_by_one($node, 'retried', 'later', 5);
is(sql("SELECT status FROM outbox_explain($last_retry)"), 'in_flight',
	'the reads happened while the retries were in flight');
$broker->command('rtt all 0');
ok(wait_for_empty($node, 60), 'the outbox drains');

check_sent_once($broker, 'retried', \@values, 'warm', 'retry read again');

$node->stop;
done_testing();
