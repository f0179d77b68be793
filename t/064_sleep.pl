# Workers that sleep: a shard with nothing to deliver for
# outbox.worker_idle_timeout loses its worker (no process, producer or
# connection), and the next commit that needs it brings one back.
#  (a) idle databases: every shard shows sleeping, no worker runs;
#  (b) a commit in one database starts its worker and is delivered; the
#      other database sleeps on;
#  (c) commits racing the workers' exits (a 100 ms timeout, commits every
#      100-200 ms): every event delivered once, in per-key order, none left
#      behind in the outbox;
#  (d) a commit while delivery is off wakes no one; switching delivery on
#      does;
#  (e) COMMIT PREPARED of a sleeping shard's events wakes it;
#  (f) a sleeping database can be dropped at once.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest qw(!sql);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $shards = 2;
my $broker = start_broker(topics => [qw(first:4 race:4 paused:4 prepared:4)]);
my $node = new_outbox_node('sleep', $broker, shards => $shards,
	conf => "outbox.worker_idle_timeout = 1s\nmax_prepared_transactions = 5\n");

sub sql { my ($db, $q) = @_; return $node->safe_psql($db, $q); }

sub sleeping_shards
{
	my ($db) = @_;
	return sql($db, q{SELECT count(*) FROM outbox_status WHERE state = 'sleeping'});
}

sub workers_of
{
	my ($db) = @_;
	return sql('postgres', qq{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'outbox shard' AND datname = '$db'});
}

sub all_asleep
{
	my ($db) = @_;
	return sleeping_shards($db) == $shards && workers_of($db) == 0;
}

sql('postgres', 'CREATE DATABASE other');
sql('other', 'CREATE EXTENSION outbox');

# ---- (a) ---------------------------------------------------------------------
ok(wait_until(30, sub { all_asleep('postgres') && all_asleep('other') }),
	'(a) idle shards sleep: outbox_status says so and no worker runs');

# ---- (b) ---------------------------------------------------------------------
my $t0 = time;
sql('postgres', q{SELECT outbox_send('first', 'hello', 'k1')});
ok(wait_until(30, sub { sql('postgres', 'SELECT count(*) = 0 FROM outbox') eq 't' }),
	'(b) a commit to a sleeping shard is delivered');
my $first_ms = (time - $t0) * 1000;
is_deeply([ map { $_->{value} } @{ consume($broker, 'first') } ], ['hello'], '(b) once');
is(workers_of('other'), 0, '(b) the other database sleeps on');
diag(sprintf('FIGURES sleep: first event after sleep delivered (row deleted) %.0f ms after the commit',
		$first_ms));

# ---- (c) ---------------------------------------------------------------------
# a start from sleep logs its line at DEBUG1
$node->append_conf('postgresql.conf', "outbox.worker_idle_timeout = 100ms\nlog_min_messages = debug1\n");
$node->reload;
ok(wait_until(30, sub { all_asleep('postgres') }), '(c) asleep before the race');
my $log_offset = -s $node->logfile;
my $load = start_load($node, topic => 'race', sessions => 2, per_session => 150,
	keys => 5, rollback_every => 7, sleep => 0.1);
wait_load($load);
ok(wait_for_empty($node, 30), '(c) nothing is left in the outbox');
my $starts = log_count($node, qr/outbox "postgres" shard \d of 2 started/, $log_offset);
cmp_ok($starts, '>=', 4, '(c) workers fell asleep and were woken during the load');
my $r = check_delivery('(c) race', committed_events($node), consume($broker, 'race'));
is($r->{duplicates}, 0, '(c) none twice');
diag("FIGURES sleep race: worker starts during the load=$starts");

# ---- (d) ---------------------------------------------------------------------
$node->append_conf('postgresql.conf', "outbox.worker_idle_timeout = 1s\nlog_min_messages = info\n");
reload_with($node, 'outbox.enabled = off');
ok(wait_until(30, sub { all_asleep('postgres') }), '(d) asleep with delivery off');
sql('postgres', q{SELECT outbox_send('paused', 'while off', 'k')});
sleep 2;
is(workers_of('postgres'), 0, '(d) a commit while delivery is off starts no worker');
reload_with($node, 'outbox.enabled = on');
ok(wait_until(30, sub { sql('postgres', 'SELECT count(*) = 0 FROM outbox') eq 't' }),
	'(d) switched on, the sleeping shard delivers');
is_deeply([ map { $_->{value} } @{ consume($broker, 'paused') } ], ['while off'], '(d) once');

# ---- (e) ---------------------------------------------------------------------
sql('postgres', q{BEGIN; SELECT outbox_send('prepared', 'two-phase', 'k'); PREPARE TRANSACTION 'p1'});
ok(wait_until(30, sub { all_asleep('postgres') }), '(e) asleep with a prepared transaction open');
sql('postgres', q{COMMIT PREPARED 'p1'});
ok(wait_until(30, sub { sql('postgres', 'SELECT count(*) = 0 FROM outbox') eq 't' }),
	'(e) COMMIT PREPARED wakes the shard, which delivers');
is_deeply([ map { $_->{value} } @{ consume($broker, 'prepared') } ], ['two-phase'], '(e) once');

# ---- (f) ---------------------------------------------------------------------
ok(wait_until(30, sub { all_asleep('other') }), '(f) the other database sleeps');
$t0 = time;
sql('postgres', 'DROP DATABASE other');
cmp_ok(time - $t0, '<', 10, '(f) a sleeping database is dropped at once');
ok(wait_until(30, sub {
	sql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox shard'}) == 0 }),
	'(f) no worker is left for it');

$node->stop;
done_testing();
