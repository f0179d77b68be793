# Table rewrites while batches are in flight (review findings H2 and H3):
# VACUUM FULL, CLUSTER, ALTER TABLE SET UNLOGGED / SET LOGGED and pg_repack
# of the outbox give every row a new position. A worker that settles a
# batch by the positions it read deletes whatever rows now sit there
# (undelivered events lost, delivered ones left behind); pg_repack also
# swaps in a copy that misses the rows outbox_send() wrote past its
# trigger. Each operation runs with Kafka answering slowly (rtt 300 ms, so
# batches are in flight long), a backlog in the table (dead space at its
# head, undelivered rows behind the batches in flight) and a load running;
# it has its own topic. Afterwards everything committed must be in Kafka
# (read back with kcat), nothing rolled back, per-key order kept, and the
# delivered rows gone from the outbox.
use strict;
use warnings;
use FindBin;
use IPC::Run;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $shards = 2;
my $backlog = 3000;    # events sent in one transaction before each operation
my $pg_repack = '/usr/lib/postgresql/15/bin/pg_repack';

my $broker;
my $node;

# pg_repack of the outbox table (it needs a primary key: outbox_pkey). A
# transaction open when it starts makes it wait, its trigger installed, for
# about 2 s before the swap: the load's sends in that time reach the new
# table only through the trigger.
sub repack
{
	my ($out, $err) = ('', '');
	my $open = IPC::Run::start([ 'psql', '-X', '-q', '-d', $node->connstr('postgres'),
		'-c', 'SELECT pg_sleep(2)' ], '<', \undef, '>', '/dev/null', '2>', '/dev/null');
	sleep 0.2;
	my $ok = IPC::Run::run([ $pg_repack, '-h', $node->host, '-p', $node->port,
		'-d', 'postgres', '-t', 'outbox' ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	ok($ok, 'pg_repack -t outbox succeeds') or diag("pg_repack: $out $err");
	$open->finish;
}

# Each operation: name, how many times it runs during the load, what it does.
my @operations = (
	[ 'vacuum_full', 2, sub { sql('VACUUM FULL outbox') } ],
	[ 'cluster', 2, sub { sql('CLUSTER outbox USING outbox_pkey') } ],
	[ 'set_logged', 2, sub {
		sql('ALTER TABLE outbox SET UNLOGGED');
		sleep 0.3;
		sql('ALTER TABLE outbox SET LOGGED');
	} ],
	[ 'pg_repack', 3, \&repack ],
);

$broker = start_broker(topics => [ 'rw_warmup:1', map { "rw_$_->[0]:4" } @operations ]);
$node = new_outbox_node('rewrite', $broker, shards => $shards, conf => qq{
outbox.batch_size = 200
restart_after_crash = on
});
sql('CREATE EXTENSION pg_repack');
OutboxTest::create_sent_table($node);

# One transaction of $backlog events of session $session, recorded in
# "sent" like the load's: keys b<session>-k<seq % 20>.
sub send_backlog
{
	my ($topic, $session) = @_;
	sql(qq{BEGIN;
INSERT INTO sent SELECT $session, i, 'b$session-k' || i % 20, 'b$session:' || i
  FROM generate_series(1, $backlog) i;
SELECT count(outbox_send('$topic', 'b$session:' || i, 'b$session-k' || i % 20))
  FROM generate_series(1, $backlog) i;
COMMIT;});
}

# Committed events of the load of session $first's operation.
sub sent_count
{
	my ($first) = @_;
	return sql("SELECT count(*) FROM sent WHERE session BETWEEN $first + 1 AND $first + 3");
}

# Events of $topic still in the outbox.
sub left_in_outbox
{
	my ($topic) = @_;
	return sql("SELECT count(*) FROM outbox WHERE topic = '$topic'");
}

# Waits until the outbox holds no event of $topic, or until that number
# has not moved for 20 s (events stuck behind the workers' read position);
# returns how many are left.
sub drain
{
	my ($topic) = @_;
	my ($last, $since) = (-1, time);
	while (1)
	{
		my $n = left_in_outbox($topic);
		return 0 if $n == 0;
		($last, $since) = ($n, time) if $n != $last;
		return $n if time - $since > 20;
		sleep 0.5;
	}
}

ok(wait_until(30, sub { @{ worker_pids($node) } == $shards }), "$shards workers run");
sql(q{SELECT outbox_send('rw_warmup', 'warm-up', 'w')});
ok(wait_for_empty($node, 30), 'a first event is delivered (the producers are connected)');

# Kafka answers after 300 ms: each batch stays in flight that long, with
# its rows' positions held by the worker.
$broker->command('rtt all 300');

my $i = 0;
for my $op (@operations)
{
	my ($name, $times, $run) = @$op;
	my $topic = "rw_$name";
	my $first = 10 * ++$i;    # backlog session; the load uses the next three
	my $offset = -s $node->logfile;

	send_backlog($topic, $first);
	my $load = start_load($node, sessions => 3, per_session => 300, keys => 5,
		topic => $topic, first_session => $first + 1, sleep => 0.01);
	# part of the backlog delivered: dead space at the head of the heap,
	# batches in flight, undelivered rows behind them
	ok(wait_until(60, sub { $backlog - left_in_outbox($topic) >= 1000 }),
		"$name: delivery of the backlog is under way");
	my (@took, $sent_during);
	for (1 .. $times)
	{
		my $t0 = time;
		my $sent0 = sent_count($first);
		$run->();
		push @took, sprintf('%.2f', time - $t0);
		$sent_during += sent_count($first) - $sent0;
		sleep 0.7;
	}
	my $in_table_after = left_in_outbox($topic);
	wait_load($load);
	my $left = drain($topic);
	my $received = consume($broker, $topic);
	my $r = check_delivery("rewrite $name", committed_of($node, $first, $first + 3), $received);
	my $settle_errors = log_count($node, qr/ERROR:  outbox/, $offset);
	diag(sprintf('FIGURES %s: runs=%d took_s=%s sent_during_op=%d left_in_outbox=%d '
		  . 'in_table_after_op=%d settle_errors=%d duplicates=%d',
		$name, $times, join('/', @took), $sent_during, $left, $in_table_after, $settle_errors,
		$r->{duplicates}));
	is($left, 0, "$name: the delivered events left the outbox");
	is(log_count($node, qr/terminated by signal|PANIC/, $offset), 0, "$name: no crash");
}

$broker->command('rtt all 0');
is(sql('SELECT count(*) FROM outbox'), '0', 'the outbox is empty at the end');

$node->stop;
$broker->stop;
done_testing();
