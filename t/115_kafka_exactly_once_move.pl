# Exactly-once delivery (outbox.delivery = exactly_once) when the server
# comes back in another place (host name or data directory changed): the
# first worker's read gives outbox_instance a new id, and each shard's
# recovery must still recognise its own last committed progress record,
# written under the id replaced, whichever shard replaced it first. Two
# shards; shard 1 is held after a Kafka commit, before its settle
# (outbox.test_pause_at), with its events named by the progress record:
#  (a) shard 0 replaces the id first, for certain: the place changes
#      (UPDATE outbox_instance SET host), shard 0's worker is restarted and
#      its first read replaces the id while shard 1 waits; then the server
#      stops in immediate mode and starts. Shard 1's recovery finds its
#      record under the replaced id;
#  (b) the place changes, then an immediate stop and a start: the workers
#      replace the id in whatever order they start.
# A read_committed consumer (kcat) must read each committed event once.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $shards = 2;
my $cluster = start_real_kafka(topics => ['moved:3']);
$cluster->create_topic('outbox_progress', partitions => 3, config => { 'cleanup.policy' => 'compact' });
my $node = new_outbox_node('exactly_once_move', $cluster, shards => $shards,
	conf => "outbox.delivery = exactly_once\nrestart_after_crash = on\n");

sub wait_for_workers
{
	return wait_until(90, sub { @{ worker_pids($node) } == $shards });
}

ok(wait_for_workers(), "$shards workers run");
OutboxTest::create_sent_table($node);

# keys whose events go to shard 1 only: shard 0 never commits a transaction
my @keys = split /\n/, sql(q{SELECT k FROM (SELECT 'm' || i AS k FROM generate_series(1, 200) i) s
	WHERE outbox_shard_of(convert_to(k, 'UTF8'), 0) = 1 ORDER BY k LIMIT 5});
is(scalar @keys, 5, 'five keys of shard 1');

# Sends $n events of shard 1 in one transaction (session $session of the
# business table).
sub send_shard1
{
	my ($session, $n) = @_;
	my $sql = "BEGIN;\n";
	for my $i (1 .. $n)
	{
		my $key = $keys[ $i % @keys ];
		# seq counts across sessions: the keys are shared, their order too
		my $seq = $session * 1000 + $i;
		$sql .= "INSERT INTO sent VALUES ($session, $seq, '$key', 'm$session:$i');\n"
		  . "SELECT outbox_send('moved', 'm$session:$i', '$key');\n";
	}
	sql("${sql}COMMIT;");
}

# Holds shard 1 after its commit of session $session's $n events; returns
# the events its transaction holds.
sub hold_after_commit
{
	my ($session, $n) = @_;
	my $offset = -s $node->logfile;
	sql("ALTER SYSTEM SET outbox.test_pause_at = 'after_commit'");
	$node->reload;
	send_shard1($session, $n);
	my $events;
	wait_until(60, sub {
		log_since($node, $offset) =~ /test pause after_commit \(pid \d+, (\d+) event/ or return 0;
		$events = $1;
	});
	is(sql('SELECT count(*) FROM outbox WHERE shard <> 1'), '0', "session $session: only shard 1 has events");
	# the workers that start after the stop read the setting again
	sql('ALTER SYSTEM RESET outbox.test_pause_at');
	return $events;
}

sub settled_count
{
	my ($offset) = @_;
	my $log = log_since($node, $offset);
	my $n = 0;
	$n += $1 while $log =~ /settled (\d+) event\(s\) of its last committed Kafka transaction/g;
	return $n;
}

# a first transaction, delivered: every partition has acknowledged one
send_shard1(1, 30);
ok(wait_for_empty($node, 120), 'a first transaction is delivered');

# ---- (a) shard 0 replaces the id while shard 1 waits after its commit -------

my $a_held = hold_after_commit(2, 60);
ok($a_held, "(a) shard 1 waits after committing $a_held event(s)");
my $first_id = sql('SELECT id FROM outbox_instance');
sql(q{UPDATE outbox_instance SET host = 'elsewhere'});
# what stands in for the checkpoint that ends the moved server's recovery
sql('CHECKPOINT');
my ($shard0) = sql('SELECT pid FROM outbox_status WHERE shard = 0');
sql("SELECT pg_terminate_backend($shard0)");
ok(wait_query($node, 'postgres', "SELECT id <> '$first_id' FROM outbox_instance", 60),
	'(a) shard 0\'s new worker gave outbox_instance a new id');
is(sql('SELECT previous_id FROM outbox_instance'), $first_id, '(a) it keeps the replaced id');
is(sql('SELECT count(*) FROM outbox WHERE shard = 1'), $a_held, '(a) shard 1 still waits, its events unsettled');
sql('CHECKPOINT');
my $a_offset = -s $node->logfile;
$node->stop('immediate');
$node->start;
ok(wait_for_empty($node, 120), '(a) the outbox drains after the start');
my $a_settled = settled_count($a_offset);
is($a_settled, $a_held, "(a) shard 1 settled its $a_held event(s) from the record under the replaced id");
my $a = check_delivery('exactly_once moved (a)', committed_of($node, 1, 2),
	sub { consume($cluster, 'moved', undef, 'read_committed') });
is($a->{duplicates}, 0, '(a) no event read twice');

# ---- (b) the place changes, immediate stop, start ---------------------------

# the restarted producer's partitions acknowledge a first transaction
# (src/kafka/partitions.c), so the one held carries every event
send_shard1(3, 30);
ok(wait_for_empty($node, 120), '(b) a transaction after the start is delivered');
my $b_held = hold_after_commit(4, 60);
ok($b_held, "(b) shard 1 waits after committing $b_held event(s)");
my $second_id = sql('SELECT id FROM outbox_instance');
sql(q{UPDATE outbox_instance SET host = 'elsewhere'});
my $b_offset = -s $node->logfile;
$node->stop('immediate');
$node->start;
ok(wait_for_empty($node, 120), '(b) the outbox drains after the start');
isnt(sql('SELECT id FROM outbox_instance'), $second_id, '(b) the workers gave outbox_instance a new id');
my $b_settled = settled_count($b_offset);
is($b_settled, $b_held, "(b) shard 1 settled its $b_held event(s)");
my $b = check_delivery('exactly_once moved (b)', committed_of($node, 1, 4),
	sub { consume($cluster, 'moved', undef, 'read_committed') });
is($b->{duplicates}, 0, '(b) no event read twice');

diag(sprintf('FIGURES exactly_once_moved: a_held=%d a_settled=%d a_duplicates=%d'
		  . ' b_held=%d b_settled=%d b_duplicates=%d',
		$a_held, $a_settled, $a->{duplicates}, $b_held, $b_settled, $b->{duplicates}));

done_testing();
