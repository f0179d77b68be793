# An event reaches Kafka only once its transaction is durable (review H4):
#  (a) transactions committed with synchronous_commit = off, the walwriter
#      slowed down (wal_writer_delay = 10s): an immediate stop as soon as
#      Kafka holds some of them loses the commits whose WAL was not written
#      yet; none of those may be in Kafka (phantom = 0: every event Kafka
#      has keeps its business row after the restart), and after the restart
#      every commit that survived is delivered (lost = 0);
#  (a') one asynchronous commit at a time, made while the walwriter sleeps
#      (it is on no completed WAL page, so nothing but the worker flushes
#      it): delivered, then an immediate stop: its business row must be
#      there after the start; every other round sends the event from a
#      subtransaction (the row's xmin is not the top transaction's, whose
#      commit the worker flushes);
#  (b) synchronous replication: with synchronous_standby_names naming a
#      standby that does not exist, a commit made with synchronous_commit =
#      local returns but its event must not reach Kafka; once the setting is
#      cleared (reload) it is delivered;
#  (c) the same with a real streaming standby that is the synchronous one:
#      delivered while it runs, held while it is stopped, delivered after it
#      is back.
use strict;
use warnings;
use FindBin;
use IPC::Run;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => [ 'durable:3', 'syncrep:3', 'standby:3', 'synchronous:3' ]);
my $node = new_outbox_node('durable', $broker, shards => 1, allows_streaming => 1,
	conf => "wal_writer_delay = 10s\nwal_writer_flush_after = 0\n");
OutboxTest::create_sent_table($node);

# Starts one psql client committing $n one-event transactions with
# synchronous_commit = off, each with its business row in table sent
# (session $session, values "s<session>:<i>").
sub start_async_load
{
	my ($session, $n, $topic, $sleep) = @_;
	my $sql = "SET synchronous_commit = off;\n";
	for my $i (1 .. $n)
	{
		my $key = "s$session-k" . ($i % 5);
		$sql .= "BEGIN;\nINSERT INTO sent VALUES ($session, $i, '$key', 's$session:$i');\n"
		  . "SELECT outbox_send('$topic', 's$session:$i', '$key');\nCOMMIT;\n"
		  . ($sleep ? "SELECT pg_sleep($sleep);\n" : '');
	}
	my $file = PostgreSQL::Test::Utils::tempdir() . "/async_$session.sql";
	PostgreSQL::Test::Utils::append_to_file($file, $sql);
	return [ IPC::Run::start([ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-f', $file ],
		'<', \undef, '>', '/dev/null', '2>', "$file.err") ];
}

# Sends one event in its own transaction committed with
# synchronous_commit = local (returns at once whatever the standbys do).
sub send_local
{
	my ($topic, $value) = @_;
	return $node->safe_psql('postgres',
		"SET synchronous_commit = local; SELECT outbox_send('$topic', '$value', 'k')");
}

sub values_in
{
	my ($topic) = @_;
	return [ map { $_->{value} } @{ consume($broker, $topic) } ];
}

# ---- (a) asynchronous commits and an immediate stop --------------------------

send_local('durable', 'warm-up');
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox'), '(a) warm-up event delivered');

# ---- (s) synchronous commits only: the worker flushes nothing ---------------
# Its own deletes commit asynchronously, and the walwriter sleeps: a worker
# that took the commit log's record of asynchronous commits (one position
# per 32 transactions, its own among them) for its events' flushed its own
# deletes under this load. One asynchronous commit then makes it flush
# (counted when it decides to: another process, such as the walwriter that
# an asynchronous commit wakes from hibernation, may have flushed the WAL
# first; on PostgreSQL 17 once in CI, so a count of actual writes failed).
reload_with($node, 'log_min_messages = debug1');
my $offset = -s $node->logfile;
my $sync_load = start_load($node, sessions => 2, per_session => 300, keys => 5,
	topic => 'synchronous', first_session => 50, rollback_every => 0, sleep => 0.002);
wait_load($sync_load);
ok(wait_for_empty($node, 60), '(s) a load of synchronous commits is delivered');
my $sync_flushes = log_count($node, qr/flushing the WAL to \S+ for asynchronous commits/, $offset);
is($sync_flushes, 0, '(s) the worker flushed no WAL for 600 synchronous commits');
$node->safe_psql('postgres', "SET synchronous_commit = off; SELECT outbox_send('synchronous', 'async-1', 'k')");
ok(wait_for_empty($node, 30), '(s) an asynchronous commit is delivered');
my $async_flushes = log_count($node, qr/flushing the WAL to \S+ for asynchronous commits/, $offset);
cmp_ok($async_flushes, '>=', 1, '(s) the worker flushed the WAL for the asynchronous commit');
check_delivery('(s) synchronous load', committed_of($node, 50, 51),
	[ grep { $_->{value} =~ /^s5[01]:/ } @{ consume($broker, 'synchronous') } ]);
diag("FIGURES (s) synchronous commits: commits=600 worker_wal_flushes=$sync_flushes; "
	  . "one asynchronous commit: worker_wal_flushes=$async_flushes");
reload_with($node, 'log_min_messages = info');

# Rounds 1 and 3: delivery paused while the 150 commits are made, then
# resumed: the worker reads them all at once, including those on the last,
# partly filled WAL page that the walwriter writes only at its next tick
# (up to 10 s later). Round 2: the worker keeps up with a live load.
my ($phantom_total, $lost_total, $stopped_with, $survived) = (0, 0, 0, 0);
for my $round (1 .. 3)
{
	my $paused = $round != 2;
	ok(pause_delivery($node, 1), 'delivery paused') if $paused;
	my $load = start_async_load($round, 150, 'durable', $paused ? 0 : 0.02);
	if ($paused)
	{
		wait_load($load);
		reload_with($node, 'outbox.enabled = on');
	}
	my $in_kafka = 0;
	ok(wait_until(30, sub {
		$in_kafka = grep { /^s$round:/ } @{ values_in('durable') };
		return $in_kafka >= 20;
	}), "(a$round) Kafka received some of the asynchronous commits");
	$node->stop('immediate');
	wait_load($load, 1);
	$node->start;
	ok(wait_for_empty($node, 60), "(a$round) the outbox drains after the restart");
	my $committed = committed_of($node, $round, $round);
	my $r = check_delivery("(a$round) synchronous_commit=off, immediate stop", $committed,
		[ grep { $_->{value} =~ /^s$round:/ } @{ consume($broker, 'durable') } ]);
	$phantom_total += $r->{phantom};
	$lost_total += $r->{lost};
	$stopped_with += $in_kafka;
	$survived += @$committed;
	note "(a$round) Kafka held $in_kafka events at the stop; " . scalar(@$committed)
	  . ' of 150 commits survived';
}
diag("FIGURES (a) async commit + immediate stop: rounds=3 committed=450 survived=$survived "
	  . "in_kafka_at_stop=$stopped_with phantom=$phantom_total lost=$lost_total");

# ---- (a') one asynchronous commit while the walwriter sleeps ------------------
# The walwriter flushes an asynchronous commit at once only when it completes
# a WAL page; otherwise at its next tick (10 s here). One commit made after
# a quiet second is, most of the time, on no completed page: unless the
# worker flushes the WAL itself, its event reaches Kafka while the commit
# can still be lost. Each round: that commit, its event in Kafka, an
# immediate stop, a start; the event must have its business row.
my ($lone_phantoms, $lone_delivered) = (0, 0);
my $lone_rounds = 6;
for my $round (1 .. $lone_rounds)
{
	my $session = 100 + $round;
	my ($savepoint, $release) = $round % 2 ? ('', '') : ('SAVEPOINT s;', 'RELEASE s;');
	sleep 1;
	$node->safe_psql('postgres', "SET synchronous_commit = off; BEGIN;
		INSERT INTO sent VALUES ($session, 1, 'lone', 's$session:1'); $savepoint
		SELECT outbox_send('durable', 's$session:1', 'lone'); $release COMMIT;");
	my $arrived = wait_until(5, sub { grep { $_ eq "s$session:1" } @{ values_in('durable') } });
	$node->stop('immediate');
	$node->start;
	next unless $arrived;
	$lone_delivered++;
	$lone_phantoms++ unless $node->safe_psql('postgres',
		"SELECT count(*) FROM sent WHERE session = $session") eq '1';
}
diag("FIGURES (a') lone asynchronous commit, immediate stop: rounds=$lone_rounds (half in a subtransaction) "
	  . "in_kafka=$lone_delivered phantom=$lone_phantoms");
cmp_ok($lone_delivered, '>', 0, "(a') lone asynchronous commits reached Kafka");
is($lone_phantoms, 0, "(a') none of them without its transaction after the crash");
ok(wait_for_empty($node, 60), "(a') the outbox drains");

# ---- (b) synchronous_standby_names naming no standby --------------------------

reload_with($node, "synchronous_standby_names = 'nosuchstandby'");
ok(wait_query($node, 'postgres', q{SELECT current_setting('synchronous_standby_names') = 'nosuchstandby'}),
	'(b) synchronous_standby_names set');
my @ids = map { send_local('syncrep', "unconfirmed-$_") } 1 .. 5;
my $t0 = time;
sleep 5;
my $early = scalar @{ values_in('syncrep') };
is($early, 0, '(b) no event reached Kafka within 5 s while no synchronous standby confirmed');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox'), '5', '(b) the events wait in the outbox');
reload_with($node, "synchronous_standby_names = ''");
my $t1 = time;
ok(wait_until(30, sub { @{ values_in('syncrep') } >= 5 }),
	'(b) delivered once synchronous_standby_names is cleared');
is(join(',', @{ values_in('syncrep') }), join(',', map { "unconfirmed-$_" } 1 .. 5),
	'(b) every event once, in order');
diag(sprintf('FIGURES (b) sync standby missing: sent=5 in_kafka_after_5s=%d delivered_after_clear_s=%.1f',
		$early, time - $t1));

# ---- (c) a real synchronous standby, stopped and started -----------------------

$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('h4_standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->start;
reload_with($node, "synchronous_standby_names = 'h4_standby'");
ok(wait_query($node, 'postgres', q{SELECT count(*) = 1 FROM pg_stat_replication
	WHERE application_name = 'h4_standby' AND sync_state = 'sync'}), '(c) the standby is the synchronous one');
send_local('standby', 'confirmed-1');
ok(wait_until(30, sub { grep { $_ eq 'confirmed-1' } @{ values_in('standby') } }),
	'(c) delivered while the synchronous standby confirms');

$standby->stop('fast');
send_local('standby', "held-$_") for 1 .. 3;
sleep 5;
my $held_early = grep { /^held-/ } @{ values_in('standby') };
is($held_early, 0, '(c) nothing delivered within 5 s while the synchronous standby is down');
$standby->start;
$t1 = time;
ok(wait_until(60, sub { (grep { /^held-/ } @{ values_in('standby') }) == 3 }),
	'(c) delivered once the standby is back');
ok(wait_for_empty($node, 30), '(c) the outbox drains');
is(join(',', @{ values_in('standby') }), 'confirmed-1,held-1,held-2,held-3', '(c) each event once, in order');
ok(wait_query($standby, 'postgres', 'SELECT count(*) = 0 FROM outbox', 30),
	'(c) the standby replays the deletes');
diag(sprintf('FIGURES (c) sync standby stopped: sent=3 in_kafka_after_5s=%d delivered_after_start_s=%.1f',
		$held_early, time - $t1));

$standby->stop;
$node->stop;
$broker->stop;
done_testing();
