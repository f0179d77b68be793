# Exactly-once delivery (outbox.delivery = exactly_once) through faults
# other than a worker's crash, on a real Kafka cluster:
#  (a) a poison event in the middle of a transaction: too large for its
#      topic, it aborts the transactions it is in; the other events go in
#      the next ones, it becomes a dead letter, its key waits for it;
#  (b) the leader of a partition, then the broker of the shard's
#      transaction coordinator, killed while transactions run;
#  (c) failover to a synchronous streaming standby while the primary's
#      worker, stopped (SIGSTOP) after a commit and before its settle, is a
#      zombie: the promoted standby fences it, settles what it committed
#      (nothing is sent twice), and delivers the rest; the zombie, let go
#      (SIGCONT), cannot commit, finds the later timeline's record and
#      delivers nothing more;
#  (d) (run after (b), on its server) the whole cluster down, every broker
#      killed, for 15 s while the application keeps committing, then back;
#  (e) (on the same server) the transaction coordinator's broker killed
#      while the worker holds a closed transaction, right before it asks
#      for the commit: the commit goes to a broker that is gone;
#  (f) failover to an asynchronous standby that stopped receiving after an
#      earlier transaction's events and the last one's: the last committed
#      transaction is settled from the progress record, the earlier one,
#      settled only on the old primary, is sent again (the stated bound).
# A read_committed consumer (kcat) checks each: every committed event
# once, none rolled back, per-key order.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest qw(!sql);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $cluster = start_real_kafka();
$cluster->create_topic('poison', partitions => 3, config => { 'max.message.bytes' => 2000 });
$cluster->create_topic('faults', partitions => 3);
$cluster->create_topic('failover', partitions => 3);
$cluster->create_topic('eos_down', partitions => 3);
$cluster->create_topic('outbox_progress', partitions => 3,
	config => { 'cleanup.policy' => 'compact' });

my $eos_conf = qq{
outbox.delivery = exactly_once
outbox.batch_size = 100
outbox.max_attempts = 3
};


my $node = new_outbox_node('eos_faults', $cluster, shards => 1, conf => $eos_conf);
sub sql { return $node->safe_psql('postgres', $_[0]); }

# Waits until a worker of $n pauses at $gap (outbox.test_pause_at) after
# $offset of its log; returns the events its transaction holds there, undef
# if it did not pause.
sub paused_at
{
	my ($n, $gap, $offset) = @_;
	my $events;
	wait_until(60, sub {
		log_since($n, $offset) =~ /test pause $gap \(pid \d+, (\d+) event/ or return 0;
		$events = $1;
	});
	return $events;
}

# ---- (a) a poison event in the middle of a transaction ----------------------

OutboxTest::create_sent_table($node);
sql(q{CREATE FUNCTION send_poison_load(n int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. n LOOP
		INSERT INTO sent VALUES (1, i, 'k' || (i % 5), 'k' || (i % 5) || ':' || i);
		PERFORM outbox_send('poison', 'k' || (i % 5) || ':' || i, 'k' || (i % 5));
		IF i = n / 2 THEN
			PERFORM outbox_send('poison', repeat('x', 5000), 'k' || (i % 5));
		END IF;
	END LOOP;
END $$});
sql(q{SELECT send_poison_load(300)});
ok(wait_for_empty($node, 120), '(a) the outbox drains');
is(sql('SELECT count(*) FROM outbox_dead_letter'), '1', '(a) the poison event is a dead letter');
my $aborts = sql('SELECT transactions_aborted FROM outbox_status');
cmp_ok($aborts, '>', 0, "(a) transactions were aborted ($aborts)");
my $poison = check_delivery('exactly_once poison', committed_events($node), sub { consume($cluster, 'poison', undef, 'read_committed') });
is($poison->{duplicates}, 0, '(a) no duplicate of the events aborted with it');
diag(sprintf('FIGURES exactly_once_poison: events=300 aborted_transactions=%d duplicates=%d lost=%d',
		$aborts, $poison->{duplicates}, $poison->{lost}));

# ---- (b) a leader, then the transaction coordinator's broker, killed ---------

# Kafka's coordinator of a transactional.id: the leader of partition
# abs(hashCode(id)) % 3 of __transaction_state
sub java_hash
{
	my $h = 0;
	$h = ($h * 31 + ord($_)) & 0xffffffff for split //, $_[0];
	return $h;
}
my $sysid = sql('SELECT system_identifier FROM pg_control_system()');
my $dboid = sql("SELECT oid FROM pg_database WHERE datname = 'postgres'");
my $txn_id = "pg_outbox-$sysid-$dboid-0";
my $coordinator = $cluster->leader_of('__transaction_state', (java_hash($txn_id) & 0x7fffffff) % 3);
note("transactional.id $txn_id, coordinator broker $coordinator");

my %b_figures;
for my $fault ([ 'leader', sub { $cluster->leader_of('faults', 0) } ],
	[ 'coordinator', sub { $coordinator } ])
{
	my ($label, $victim_of) = @$fault;
	my $first = $label eq 'leader' ? 11 : 21;
	my $load = start_load($node, sessions => 3, per_session => 300, keys => 5, topic => 'faults',
		first_session => $first, sleep => 0.005);
	sleep 2;
	my $victim = $victim_of->();
	ok($victim > 0, "(b) $label: broker $victim to kill");
	$cluster->kill_broker($victim);
	my $killed = time;
	sleep 4;
	$cluster->start_broker($victim);
	wait_load($load);
	ok(wait_for_empty($node, 180), "(b) $label killed: the outbox drains");
	$b_figures{$label} = sprintf('%.1f', time - $killed);
	ok($cluster->wait_topic('faults', 3, 60), "(b) $label: the broker is back in sync");
}
my $faults = check_delivery('exactly_once broker kills', committed_of($node, 11, 23),
	sub { consume($cluster, 'faults', undef, 'read_committed') });
is($faults->{duplicates}, 0, '(b) no duplicate after the leader and coordinator kills');
is(sql('SELECT count(*) FROM outbox_dead_letter'), '1', '(b) no new dead letter');
diag(sprintf('FIGURES exactly_once_broker_kills: leader_drained_s=%s coordinator_drained_s=%s duplicates=%d lost=%d order_violations=%d',
		$b_figures{leader}, $b_figures{coordinator}, $faults->{duplicates}, $faults->{lost},
		$faults->{violations}));

# ---- (d) the whole cluster down and back --------------------------------------

# The open transaction's outcome, and the commit of the one being
# committed, are unknown while Kafka is gone; once it is back, the
# producer is rebuilt and the recovery settles what did commit.
my $committed_before = sql('SELECT transactions_committed FROM outbox_status');
my $d_load = start_load($node, sessions => 3, per_session => 700, keys => 5, topic => 'eos_down',
	first_session => 31, sleep => 0.02);
ok(wait_until(60, sub { @{ consume($cluster, 'eos_down', 50, 'read_committed') } >= 50 }),
	'(d) delivery flows before the outage');
$cluster->kill_broker($_) for 1 .. 3;
my $down = time;
sleep 8;
my $pending = sql('SELECT count(*) FROM outbox');
ok($pending > 0, "(d) events wait in the outbox while the cluster is down ($pending)");
sleep 15 - (time - $down) if time - $down < 15;
my $restarted = time;
my $down_s = $restarted - $down;
my $committed_down = sql('SELECT transactions_committed FROM outbox_status');
$cluster->start_broker(1 .. 3);
ok($cluster->wait_topic('eos_down', 2, 90), '(d) the cluster elects leaders again');
ok(wait_until(120, sub { sql('SELECT transactions_committed FROM outbox_status') > $committed_down }),
	'(d) transactions commit again');
my $recover_s = time - $restarted;
wait_load($d_load);
ok(wait_for_empty($node, 180), '(d) the outbox drains after the outage');
my $down_events = committed_of($node, 31, 33);
my $outage = check_delivery('exactly_once whole cluster down', $down_events,
	sub { consume($cluster, 'eos_down', undef, 'read_committed') });
is($outage->{duplicates}, 0, '(d) no duplicate through the outage');
cmp_ok($committed_down, '>', $committed_before, '(d) transactions committed before the outage');
diag(sprintf('FIGURES exactly_once_cluster_down: events=%d down_s=%.1f pending_at_8s=%d'
		  . ' recover_s=%.1f duplicates=%d lost=%d order_violations=%d',
		scalar @$down_events, $down_s, $pending, $recover_s, $outage->{duplicates},
		$outage->{lost}, $outage->{violations}));

# ---- (e) the coordinator's broker dies while a commit waits -----------------

# The worker stops right before it asks for a commit; the coordinator's
# broker is killed, then the worker asks: the commit goes to a coordinator
# that is gone, librdkafka finds the new one, and the outcome, whichever it
# is, must leave every event delivered once.
$cluster->create_topic('eos_commit', partitions => 3);
ok($cluster->wait_topic('__transaction_state', 2, 60), '(e) the coordinators are elected');
# The topic's partitions first acknowledge an event each (a producer's
# first keyed event to a partition goes alone, src/kafka/partitions.c),
# then a backlog, so that the transaction in the commit carries a read.
wait_load(start_load($node, sessions => 1, per_session => 30, keys => 5, topic => 'eos_commit',
	first_session => 40));
ok(wait_for_empty($node, 60), '(e) a first load is delivered');
sql('ALTER SYSTEM SET outbox.enabled = off');
$node->reload;
wait_load(start_load($node, sessions => 2, per_session => 100, keys => 5, topic => 'eos_commit',
	first_session => 41));
my $e_offset = -s $node->logfile;
sql("ALTER SYSTEM SET outbox.test_pause_at = 'before_commit'");
sql('ALTER SYSTEM RESET outbox.enabled');
$node->reload;
my $e_events = paused_at($node, 'before_commit', $e_offset);
ok(defined $e_events, '(e) a worker waits before its commit');
my $e_coordinator = $cluster->leader_of('__transaction_state', (java_hash($txn_id) & 0x7fffffff) % 3);
ok($e_coordinator > 0, "(e) the coordinator is broker $e_coordinator");
$cluster->kill_broker($e_coordinator);
my $e_killed = time;
sql('ALTER SYSTEM RESET outbox.test_pause_at');
$node->reload;
sleep 4;
$cluster->start_broker($e_coordinator);
ok(wait_for_empty($node, 180), '(e) the outbox drains after the commit met a dead coordinator');
my $e_drained = time - $e_killed;
my $commit_fault = check_delivery('exactly_once coordinator gone at the commit', committed_of($node, 40, 42),
	sub { consume($cluster, 'eos_commit', undef, 'read_committed') });
is($commit_fault->{duplicates}, 0, '(e) no duplicate after the commit met a dead coordinator');
diag(sprintf('FIGURES exactly_once_commit_coordinator_killed: events_in_commit=%d drained_s=%.1f'
		  . ' duplicates=%d lost=%d order_violations=%d',
		$e_events // 0, $e_drained, $commit_fault->{duplicates}, $commit_fault->{lost},
		$commit_fault->{violations}));
$node->stop;

# ---- (c) failover with a zombie worker ----------------------------------------

# A primary delivering exactly once and a streaming standby of it.
sub primary_and_standby
{
	my ($name) = @_;
	my $p = new_outbox_node("${name}_primary", $cluster, shards => 1, allows_streaming => 1,
		conf => $eos_conf);
	$p->backup("${name}_backup");
	my $s = PostgreSQL::Test::Cluster->new("${name}_standby");
	$s->init_from_backup($p, "${name}_backup", has_streaming => 1);
	$s->start;
	return ($p, $s);
}

my ($primary, $standby) = primary_and_standby('eos');
$primary->append_conf('postgresql.conf', "synchronous_standby_names = 'eos_standby'\n");
$primary->reload;
ok($primary->poll_query_until('postgres',
	"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'eos_standby'"),
	'(c) the standby is synchronous');

# a first round through the primary, settled
my $load = start_load($primary, sessions => 2, per_session => 100, keys => 5, topic => 'failover',
	first_session => 1, rollback_every => 7);
wait_load($load);
ok(wait_for_empty($primary), '(c) the primary delivers a first round');

# the primary's worker commits a transaction of a backlog and stops
# before its settle
$primary->safe_psql('postgres', 'ALTER SYSTEM SET outbox.enabled = off');
$primary->reload;
$load = start_load($primary, sessions => 2, per_session => 150, keys => 5, topic => 'failover',
	first_session => 3, rollback_every => 7);
wait_load($load);
my $offset = -s $primary->logfile;
$primary->safe_psql('postgres', "ALTER SYSTEM SET outbox.test_pause_at = 'after_commit'");
$primary->safe_psql('postgres', 'ALTER SYSTEM RESET outbox.enabled');
$primary->reload;
my ($zombie, $committed);
ok(wait_until(60, sub {
	log_since($primary, $offset) =~ /test pause after_commit \(pid (\d+), (\d+) event/ or return 0;
	($zombie, $committed) = ($1, $2);
}), '(c) the primary\'s worker committed a transaction and pauses before its settle');
ok(kill('STOP', $zombie), "(c) SIGSTOP of the primary's worker $zombie");
# more events, committed on the primary (and its synchronous standby)
# while its worker is stopped
$load = start_load($primary, sessions => 2, per_session => 50, keys => 5, topic => 'failover',
	first_session => 7, rollback_every => 7);
wait_load($load);
$primary->wait_for_catchup($standby);
my $unsettled = $primary->safe_psql('postgres', 'SELECT count(*) FROM outbox');

# failover: the standby is promoted while the old primary still runs
my $standby_offset = -s $standby->logfile;
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), '(c) the standby is promoted');
ok(wait_for_empty($standby, 120), '(c) the new primary delivers what the old one had not settled');
my ($resettled) = log_since($standby, $standby_offset)
  =~ /settled (\d+) event\(s\) of its last committed Kafka transaction/;
is($resettled // 0, $committed,
	"(c) the new primary settled the $committed events of the old primary's last committed transaction");

# the zombie goes on: its producer is fenced, then it finds the later
# record. (With its synchronous standby gone it would wait for it before
# producing anything: the old primary is made a split brain that does not.)
$offset = -s $primary->logfile;
$primary->safe_psql('postgres', 'ALTER SYSTEM RESET outbox.test_pause_at');
$primary->append_conf('postgresql.conf', "synchronous_standby_names = ''\n");
$primary->reload;
ok(kill('CONT', $zombie), '(c) SIGCONT of the old primary\'s worker');
ok(wait_until(60, sub {
	log_since($primary, $offset) =~ /a server on a later timeline delivers this shard/ }),
	'(c) the old primary stops delivering: a later timeline wrote the last progress record');
ok($primary->poll_query_until('postgres',
	"SELECT state = 'superseded' FROM outbox_status WHERE shard = 0"),
	'(c) the old primary\'s outbox_status says the shard is superseded');

# and the new primary delivers its own events, once (its producer was
# fenced by the zombie's new one)
$load = start_load($standby, sessions => 2, per_session => 100, keys => 5, topic => 'failover',
	first_session => 5, rollback_every => 7);
wait_load($load);
ok(wait_for_empty($standby, 120), '(c) the new primary delivers its own events');
sleep 2;
my $failover = check_delivery('exactly_once failover with a zombie', committed_events($standby),
	sub { consume($cluster, 'failover', undef, 'read_committed') });
is($failover->{duplicates}, 0, '(c) nothing is delivered twice through the failover and the zombie');
is($primary->safe_psql('postgres', 'SELECT count(*) > 0 FROM outbox'), 't',
	'(c) the old primary kept its unsettled events (delivered by the new one)');
diag(sprintf('FIGURES exactly_once_failover: unsettled_at_failover=%d settled_from_progress=%d'
		  . ' duplicates=%d lost=%d',
		$unsettled, $resettled // 0, $failover->{duplicates}, $failover->{lost}));

$primary->stop('immediate');
$standby->stop;

# ---- (f) failover to an asynchronous standby that missed a settle ---------------

# The bound the docs state: the promoted standby settles the old primary's
# last committed transaction from the progress record (none of it is sent
# again), while an earlier transaction, committed in Kafka and settled on
# the old primary after the standby stopped receiving, is sent again.
$cluster->create_topic('failover_async', partitions => 3);
my ($a_primary, $a_standby) = primary_and_standby('eos_async');
sub a_sql { return $a_primary->safe_psql('postgres', $_[0]); }

# T1: a backlog (after a first load, see (e)), committed in Kafka; the
# worker waits before its settle
wait_load(start_load($a_primary, sessions => 1, per_session => 30, keys => 5,
	topic => 'failover_async', first_session => 50));
ok(wait_for_empty($a_primary, 60), '(f) a first load is delivered');
a_sql('ALTER SYSTEM SET outbox.enabled = off');
$a_primary->reload;
wait_load(start_load($a_primary, sessions => 1, per_session => 100, keys => 5,
	topic => 'failover_async', first_session => 51));
$offset = -s $a_primary->logfile;
a_sql("ALTER SYSTEM SET outbox.test_pause_at = 'after_commit'");
a_sql('ALTER SYSTEM RESET outbox.enabled');
$a_primary->reload;
my $t1 = paused_at($a_primary, 'after_commit', $offset);
ok($t1, "(f) the old primary committed its first transaction in Kafka ($t1 events)");
# T2's events reach the standby, then it stops receiving
wait_load(start_load($a_primary, sessions => 1, per_session => 100, keys => 5,
	topic => 'failover_async', first_session => 52));
$a_primary->wait_for_catchup($a_standby);
$a_standby->safe_psql('postgres', "ALTER SYSTEM SET primary_conninfo = ''");
$a_standby->reload;
ok($a_standby->poll_query_until('postgres', 'SELECT count(*) = 0 FROM pg_stat_wal_receiver'),
	'(f) the standby stopped receiving');
# T1 settled on the old primary only; T2 committed in Kafka, not settled
$offset = -s $a_primary->logfile;
a_sql("ALTER SYSTEM SET outbox.test_pause_at = 'after_settle'");
$a_primary->reload;
ok(defined paused_at($a_primary, 'after_settle', $offset), '(f) the old primary settled its first transaction');
$offset = -s $a_primary->logfile;
a_sql("ALTER SYSTEM SET outbox.test_pause_at = 'after_commit'");
$a_primary->reload;
my $t2 = paused_at($a_primary, 'after_commit', $offset);
ok($t2, "(f) the old primary committed its second transaction in Kafka ($t2 events)");
cmp_ok($a_standby->safe_psql('postgres', 'SELECT count(*) FROM outbox'), '>=', $t1 + $t2,
	'(f) the standby still holds both transactions\' events');
$a_primary->stop('immediate');

$offset = -s $a_standby->logfile;
$a_standby->promote;
ok($a_standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), '(f) the standby is promoted');
ok(wait_for_empty($a_standby, 120), '(f) the new primary empties its outbox');
my ($a_resettled) = log_since($a_standby, $offset)
  =~ /settled (\d+) event\(s\) of its last committed Kafka transaction/;
is($a_resettled // 0, $t2, '(f) the new primary settled the last transaction from the progress record');
sleep 2;
my $async = check_delivery('exactly_once failover to an asynchronous standby',
	committed_events($a_standby), sub { consume($cluster, 'failover_async', undef, 'read_committed') });
is($async->{duplicates}, $t1,
	'(f) exactly the earlier transaction, whose settle the standby missed, is sent again');
diag(sprintf('FIGURES exactly_once_async_failover: settled_unreplicated=%d last_transaction=%d'
		  . ' settled_from_progress=%d duplicates=%d lost=%d',
		$t1, $t2, $a_resettled // 0, $async->{duplicates}, $async->{lost}));
$a_standby->stop;
$cluster->stop;
done_testing();
