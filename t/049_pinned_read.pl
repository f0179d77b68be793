# A read below events in flight: a transaction that took an earlier id
# stays open while later commits are read; when it commits, the next read
# starts at its id (its rows were invisible until then), so it passes
# again over the later events already produced and waiting for Kafka's
# acknowledgement. The read must leave those out (queue.c's receiver skips
# the window's ids), or each is produced again: a duplicate with no crash,
# refusal or time-out, which docs/guarantees.md rules out. Kafka answers
# slowly here so the events stay in flight.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = start_broker(topics => ['pinned:1']);
my $node = new_outbox_node('pinned_read', $broker, shards => 1);

sql(q{SELECT outbox_send('pinned', 'warm', 'w')});
ok(wait_for_empty($node, 30), 'the topic is known');

$broker->command('rtt all 3000');
# the open transaction: its event's id is below all that follows
my ($in, $out, $err) = ("BEGIN;\nSELECT 'sent ' || outbox_send('pinned', 'open', 'k-open');\n", '', '');
my $open = IPC::Run::start([ 'psql', '-X', '-d', $node->connstr('postgres'), '-f', '-' ],
	\$in, \$out, \$err, IPC::Run::timeout(120));
$open->pump until $out =~ /sent \d+/;
my ($open_id) = $out =~ /sent (\d+)/;

my @values = map { "first-$_" } 1 .. 20;
sql(join(";\n", 'BEGIN', (map { "SELECT outbox_send('pinned', '$_', 'k-$_')" } @values), 'COMMIT'));
my $last_first = sql('SELECT max(id) FROM outbox');
ok(wait_in_flight($node, $last_first), 'the first commit is in flight');

# each of these wakes the worker; the open event's commit, below them, next
push @values, commit_one_by_one($node, 'pinned', 'later', 5);
is(sql("SELECT status FROM outbox_explain($last_first)"), 'in_flight',
	'the reads happened while the first commit was in flight');

$in .= "COMMIT;\nSELECT 'committed';\n";
$open->pump until $out =~ /committed/;
$in .= "\\q\n";
$open->finish;
push @values, 'open';
ok(wait_in_flight($node, $open_id), 'the open event, committed, is read');
is(sql("SELECT status FROM outbox_explain($last_first)"), 'in_flight',
	'that read passed over the first commit in flight');
$broker->command('rtt all 0');
ok(wait_for_empty($node, 60), 'the outbox drains');

check_sent_once($broker, 'pinned', \@values, 'warm', 'pinned read');

$node->stop;
done_testing();
