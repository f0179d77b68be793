# Process faults while events flow:
#  (a)  a worker killed with SIGKILL mid-load (the postmaster reinitializes);
#  (b)  a worker terminated with pg_terminate_backend mid-load (it stops
#       gracefully and the postmaster restarts it after bgw_restart_time);
#  (b2) a SIGTERM while the worker deletes a batch Kafka acknowledged (a
#       lock on the outbox holds the DELETE, so the moment is certain);
#  (a2) a SIGKILL at that same moment, one shard involved;
#  (c)  an immediate shutdown of the server mid-stream, then a start;
#  (d)  a fast shutdown while Kafka is down and events are in flight.
# Every committed event must arrive at least once, none rolled back, per-key
# order kept; duplicates only after a crash, at most what was in flight
# (the window, outbox.window_size per shard involved); a
# graceful stop (SIGTERM) re-sends nothing
# and returns within outbox.shutdown_timeout plus a margin. Kafka answers
# slowly (rtt 300 ms) during (a) and (c) so that events are in flight.
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
my $batch_size = 50;
my $window = 2 * $batch_size;
my $shutdown_timeout_s = 3;

my $broker = start_broker(topics =>
	  [ 'crash_kill:6', 'crash_term:6', 'crash_settle:6', 'crash_pipe:6', 'crash_imm:6',
	'crash_fast:6' ]);
my $node = new_outbox_node('crash', $broker, shards => $shards, conf => qq{
outbox.batch_size = $batch_size
outbox.window_size = $window
outbox.shutdown_timeout = ${shutdown_timeout_s}s
restart_after_crash = on
});

# ---- helpers ---------------------------------------------------------------

# psql that may fail while the server restarts: undef then.
sub try_query
{
	my ($sql) = @_;
	my ($stdout, $stderr);
	my $ret = $node->psql('postgres', $sql, stdout => \$stdout, stderr => \$stderr);
	return $ret == 0 ? $stdout : undef;
}

sub wait_for_workers
{
	my ($timeout, $not_pid) = @_;
	return wait_until($timeout, sub {
		my $pids = worker_pids($node);
		return @$pids == $shards && !grep { defined $not_pid && $_ == $not_pid } @$pids;
	});
}

# Waits until the workers have delivered (deleted) 20 events of the load
# that started with session $first; the outbox was empty before it.
sub wait_for_traffic
{
	my ($first) = @_;
	return wait_until(30, sub {
		$node->safe_psql('postgres', qq{SELECT (SELECT count(*) FROM sent WHERE session >= $first)
			- (SELECT count(*) FROM outbox) >= 20}) eq 't' });
}

# Waits until every worker with events waits for the lock (to delete
# acknowledged events) and Kafka holds at least $n messages of $topic;
# returns the waiting worker pids.
sub wait_for_blocked_settle
{
	my ($topic, $n, $workers) = @_;
	my @waiting;
	wait_until(30, sub {
		my $out = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
			WHERE backend_type = 'outbox shard' AND wait_event_type = 'Lock'});
		@waiting = grep { length } split /\n/, $out;
		return @waiting == $workers && @{ consume($broker, $topic) } >= $n;
	});
	return @waiting;
}

sub shards_with_events
{
	return $node->safe_psql('postgres', 'SELECT count(DISTINCT shard) FROM outbox');
}

my $bound = $window * $shards;
my ($load, $r, $offset);

ok(wait_for_workers(30), "$shards workers run");

# ---- (a) SIGKILL of a worker mid-load ---------------------------------------

# Kafka answers after 300 ms: batches are in flight (stored, not yet
# acknowledged) when the crash comes, so duplicates can show up.
$broker->command('rtt all 300');
$load = start_load($node, sessions => 3, per_session => 200, topic => 'crash_kill',
	first_session => 1, sleep => 0.02);
ok(wait_for_traffic(1), '(a) delivery flows before the kill');
sleep 1;
my ($victim) = @{ worker_pids($node) };
$offset = -s $node->logfile;
ok(kill('KILL', $victim), "(a) SIGKILL worker $victim");
my $killed_at = time;
ok(wait_until(60, sub {
	log_since($node, $offset) =~ /all server processes terminated; reinitializing.*database system is ready to accept connections/s }),
	'(a) the postmaster reinitializes after the killed worker');
ok(wait_for_workers(60), '(a) the workers are back after the crash');
note sprintf('(a) workers back %.1f s after SIGKILL', time - $killed_at);
wait_load($load, 1);    # clients lost their connections in the crash
$broker->command('rtt all 0');

# traffic after the crash, too
$load = start_load($node, sessions => 2, per_session => 100, topic => 'crash_kill',
	first_session => 4);
wait_load($load);
ok(wait_for_empty($node), '(a) the outbox drains after the crash');
$r = check_delivery('(a) SIGKILL of a worker mid-load', committed_of($node, 1, 5),
	consume($broker, 'crash_kill'));
cmp_ok($r->{duplicates}, '<=', $bound,
	"(a) duplicates ($r->{duplicates}) at most window_size x shards ($bound)");

# ---- (b) pg_terminate_backend of a worker mid-load ---------------------------

$load = start_load($node, sessions => 3, per_session => 200, topic => 'crash_term',
	first_session => 11, sleep => 0.02);
ok(wait_for_traffic(11), '(b) delivery flows before the termination');
($victim) = @{ worker_pids($node) };
$offset = -s $node->logfile;
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($victim)"), 't',
	"(b) pg_terminate_backend($victim)");
my $terminated_at = time;
ok(wait_until(10, sub { !grep { $_ == $victim } @{ worker_pids($node) } }),
	'(b) the terminated worker exits');
ok(wait_for_workers(20, $victim), '(b) the terminated worker is restarted');
my $restart_s = time - $terminated_at;
diag sprintf('(b) worker restarted %.1f s after pg_terminate_backend', $restart_s);
cmp_ok($restart_s, '<', 15, '(b) restarted within ~10 s (bgw_restart_time)');
like(log_since($node, $offset), qr/outbox "postgres" shard \d+: stopping as asked/,
	'(b) the worker stopped on the terminate request');
wait_load($load);
ok(wait_for_empty($node), '(b) the outbox drains');
$r = check_delivery('(b) pg_terminate_backend of a worker mid-load', committed_of($node, 11, 13),
	consume($broker, 'crash_term'));
is($r->{duplicates}, 0, "(b) pg_terminate_backend is a graceful stop: no duplicates");

# ---- (b2) SIGTERM while the worker settles an acknowledged batch -------------
# Deterministic: a lock held on the outbox makes the worker's DELETE of an
# acknowledged batch wait; the worker is terminated while it waits. A
# graceful stop must not lose the acknowledgements: the worker finishes
# its DELETE once the lock is released, then exits; nothing is sent twice.

ok(pause_delivery($node, $shards), '(b2) delivery paused');
$load = start_load($node, sessions => 1, per_session => 40, rollback_every => 0,
	topic => 'crash_settle', first_session => 15);
wait_load($load);
my $busy = shards_with_events();
my $locker = start_locker($node);
reload_with($node, 'outbox.enabled = on');
my @waiting = wait_for_blocked_settle('crash_settle', 40, $busy);
is(scalar @waiting, $busy, '(b2) Kafka acknowledged the batches and the workers wait to delete them');
note "(b2) workers waiting on the lock: @waiting";
$offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($_)") for @waiting;
sleep 1;
unlike(log_since($node, $offset), qr/stopping as asked/,
	'(b2) the terminated worker first finishes deleting what Kafka acknowledged');
release_locker($node, $locker);
ok(wait_until(10, sub { log_since($node, $offset) =~ /stopping as asked/ }),
	'(b2) then it exits');
ok(wait_for_workers(20), '(b2) the worker is restarted');
ok(wait_for_empty($node), '(b2) the outbox drains');
$r = check_delivery('(b2) SIGTERM while settling an acknowledged batch',
	committed_of($node, 15, 15), consume($broker, 'crash_settle'));
is($r->{duplicates}, 0, '(b2) a graceful stop re-sends nothing Kafka acknowledged');

# ---- (a2) SIGKILL while a worker settles, with its window full ---------------
# One key, so one shard: a window's worth of events. The worker's DELETE of
# its first acknowledged events waits for the lock; whatever it produced
# meanwhile is in flight too. A crash now may re-send what was in flight:
# the promise is at most the window, of the one shard involved.

ok(pause_delivery($node, $shards), '(a2) delivery paused');
$load = start_load($node, sessions => 1, per_session => $window, keys => 1,
	rollback_every => 0, topic => 'crash_pipe', first_session => 16);
wait_load($load);
is(shards_with_events(), 1, '(a2) one key, one shard');
$locker = start_locker($node);
reload_with($node, 'outbox.enabled = on');
@waiting = wait_for_blocked_settle('crash_pipe', $batch_size, 1);
is(scalar @waiting, 1, '(a2) the worker waits to delete its first acknowledged events');
sleep 1;    # what else it produced gets acknowledged meanwhile
my $in_kafka = scalar @{ consume($broker, 'crash_pipe') };
diag "(a2) Kafka holds $in_kafka of $window events while the worker waits to delete the first";
$offset = -s $node->logfile;
kill 'KILL', $_ for @waiting;
ok(wait_until(60, sub {
	log_since($node, $offset) =~ /all server processes terminated; reinitializing.*database system is ready to accept connections/s }),
	'(a2) the postmaster reinitializes');
eval { $locker->finish };
ok(wait_for_workers(60), '(a2) the workers are back');
ok(wait_for_empty($node), '(a2) the outbox drains');
$r = check_delivery('(a2) SIGKILL while settling, one shard', committed_of($node, 16, 16),
	consume($broker, 'crash_pipe'));
cmp_ok($r->{duplicates}, '<=', $window,
	"(a2) duplicates ($r->{duplicates}) at most the one shard's window ($window)");

# ---- (c) immediate shutdown mid-stream, then start ---------------------------

$broker->command('rtt all 300');
$load = start_load($node, sessions => 3, per_session => 200, topic => 'crash_imm',
	first_session => 21, sleep => 0.02);
ok(wait_for_traffic(21), '(c) delivery flows before the immediate stop');
sleep 1;
$node->stop('immediate');
wait_load($load, 1);
$broker->command('rtt all 0');
$node->start;
ok(wait_for_workers(30), '(c) the workers run after the restart');
my $left = $node->safe_psql('postgres', 'SELECT count(*) FROM outbox');
note "(c) events left in the outbox at restart: $left";
$load = start_load($node, sessions => 2, per_session => 100, topic => 'crash_imm',
	first_session => 24);
wait_load($load);
ok(wait_for_empty($node), '(c) the outbox drains after the restart');
$r = check_delivery('(c) immediate shutdown mid-stream', committed_of($node, 21, 25),
	consume($broker, 'crash_imm'));
cmp_ok($r->{duplicates}, '<=', $bound,
	"(c) duplicates ($r->{duplicates}) at most window_size x shards ($bound)");

# ---- (d) fast shutdown with Kafka down and events in flight -----------------
# A long message.timeout.ms keeps the events in flight (no delivery report)
# until the stop, so the worker's graceful finish is what bounds the stop.

$offset = -s $node->logfile;
reload_with($node, q{outbox.kafka_config = 'message.timeout.ms=60000,socket.timeout.ms=3000'});
ok(wait_until(30, sub {
	my $log = log_since($node, $offset);
	return !grep { $log !~ /outbox "postgres" shard $_: rebuilding the Kafka producer/ } 0 .. $shards - 1;
}), '(d) both workers rebuilt their producer with message.timeout.ms=60000');
# the new producers learn the topic while Kafka is up
$load = start_load($node, sessions => 1, per_session => 10, topic => 'crash_fast',
	first_session => 30);
wait_load($load);
ok(wait_for_empty($node), '(d) warm-up events delivered');

$offset = -s $node->logfile;
$broker->command('down all');
$load = start_load($node, sessions => 2, per_session => 100, topic => 'crash_fast',
	first_session => 31);
wait_load($load);
# a worker logs the Kafka error while it serves delivery reports, that is
# with events in flight (a new producer: its first error is logged)
ok(wait_until(30, sub { log_since($node, $offset) =~ /outbox "postgres" shard \d: Kafka error/ }),
	'(d) a worker waits for Kafka with events in flight');
sleep 1;
my $stop_started = time;
$node->stop('fast');
my $stop_s = time - $stop_started;
diag sprintf('(d) fast shutdown with events in flight took %.1f s (outbox.shutdown_timeout = %d s)',
	$stop_s, $shutdown_timeout_s);
cmp_ok($stop_s, '<', 30, '(d) the fast shutdown returns within shutdown_timeout + margin');

# the stopped workers kept every unacknowledged event
$node->start;
my $pending = $node->safe_psql('postgres', 'SELECT count(*) FROM outbox');
is($pending, scalar @{ committed_of($node, 31, 32) },
	'(d) every event committed during the outage is still in the outbox');
$broker->command('up all');
ok(wait_for_empty($node), '(d) the outbox drains once Kafka is back');
$r = check_delivery('(d) fast shutdown while Kafka is down', committed_of($node, 30, 32),
	consume($broker, 'crash_fast'));
is($r->{duplicates}, 0, '(d) nothing Kafka never saw is counted twice');

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0',
	'no dead letters');
$node->stop;
$broker->stop;
done_testing();
