# Every database on the server: one preload delivers each database that has
# the extension, with its own workers, shards, cursor and order.
#  (a) three databases under load at once, each to its own topic: every
#      committed event once, in per-key order;
#  (b) during that load, CREATE EXTENSION in a fourth database: delivered
#      about at once; DROP DATABASE of a fifth, with a backlog being
#      delivered: not blocked, and the others lose nothing;
#  (c) outbox.max_workers reached: the database left without a worker is
#      named once in the log, and served once a slot frees up;
#  (d) outbox.databases leaves a database out: its workers stop and its
#      events wait; back in, they are delivered;
#  (e) SIGKILL of the launcher: the postmaster restarts everything, nothing
#      is lost;
#  (f) ALTER DATABASE ... RENAME and CREATE DATABASE ... TEMPLATE of a
#      delivered database are not blocked by its workers; the copy is
#      delivered, under an outbox-instance of its own;
#  (g) the deprecated outbox.database still works, with a WARNING.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest qw(!sql);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $shards = 2;
my @loaded = qw(db_a db_b db_c);
my $broker = start_broker(topics => [ map { "$_:4" } @loaded, qw(db_d db_x db_e db_copy) ]);
my $node = new_outbox_node('databases', $broker, shards => $shards, no_extension => 1,
	conf => "outbox.max_workers = 10\noutbox.batch_size = 100\noutbox.window_size = 500\nrestart_after_crash = on\n");

sub sql { my ($db, $q) = @_; return $node->safe_psql($db, $q); }

sub workers_of
{
	my ($db) = @_;
	return sql('postgres', qq{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'outbox shard' AND datname = '$db'});
}

sub outbox_empty { my ($db) = @_; return sql($db, 'SELECT count(*) = 0 FROM outbox') eq 't'; }

# Seconds from now until $db's outbox is empty (undef after $timeout s).
sub time_to_empty
{
	my ($db, $timeout) = @_;
	my $t0 = time;
	return wait_until($timeout, sub { outbox_empty($db) }) ? time - $t0 : undef;
}

for my $db (@loaded, qw(db_d db_x))
{
	sql('postgres', "CREATE DATABASE $db");
	sql($db, 'CREATE EXTENSION outbox') unless $db eq 'db_d';
}
ok(wait_until(30, sub { workers_of('db_a') == $shards && workers_of('db_x') == $shards }),
	'each database with the extension gets its shards');
is(workers_of('db_d'), 0, 'a database without the extension has no worker');
like(sql('postgres', q{SELECT string_agg(application_name, ',' ORDER BY application_name)
	FROM pg_stat_activity WHERE datname = 'db_a' AND backend_type = 'outbox shard'}),
	qr/^outbox db_a shard 0 of 2,outbox db_a shard 1 of 2$/, 'workers show as "outbox <database> shard K of N"');

# ---- (a) and (b) -------------------------------------------------------------
# db_x: a backlog its workers are busy with when the database is dropped
$broker->command('rtt all 100');
sql('db_x', q{SELECT count(outbox_send('db_x', 'x' || i, 'k' || (i % 7))) FROM generate_series(1, 40000) i});
my @loads = map { @{ start_load($node, db => $_, topic => $_, sessions => 3, per_session => 150) } } @loaded;

sleep 1;
my $t0 = time;
sql('db_d', 'CREATE EXTENSION outbox');
sql('db_d', q{SELECT outbox_send('db_d', 'first', 'k')});
my $first_s = time_to_empty('db_d', 30);
diag(sprintf('FIGURES CREATE EXTENSION during load: first event delivered %.2f s after the commit', $first_s // -1));
ok(defined $first_s, 'CREATE EXTENSION during load: its first event is delivered');
is_deeply([ map { $_->{value} } @{ consume($broker, 'db_d') } ], ['first'], 'it is in Kafka, once');

ok(sql('db_x', 'SELECT count(*) FROM outbox') > 0, 'db_x still has a backlog');
$t0 = time;
my ($ret, $out, $err) = $node->psql('postgres', 'DROP DATABASE db_x');
my $drop_s = time - $t0;
is($ret, 0, 'DROP DATABASE of a database being delivered succeeds') or diag($err);
diag(sprintf('FIGURES DROP DATABASE during load, workers busy with a backlog: %.2f s', $drop_s));
ok(wait_until(10, sub { workers_of('db_x') == 0 }), 'no worker is left for the dropped database');
$broker->command('rtt all 0');

wait_load(\@loads);
for my $db (@loaded)
{
	ok(defined time_to_empty($db, 120), "$db drains");
	my $r = check_delivery("database $db", committed_events($node, undef, $db), consume($broker, $db));
	is($r->{duplicates}, 0, "$db: no duplicates");
}
my $cross = grep { $_->{value} !~ /^s\d+:/ } map { @{ consume($broker, $_) } } @loaded;
is($cross, 0, 'no database\'s events reached another\'s topic');

# ---- (c) the worker cap --------------------------------------------------------
# a, b, c and d hold 8 of 9 slots: db_e gets shard 0 only
$node->append_conf('postgresql.conf', "outbox.max_workers = 9\n");
$node->restart;
ok(wait_until(30, sub { workers_of('db_d') == $shards }), 'after a restart with 9 slots, a-d have their workers');
my $offset = -s $node->logfile;
sql('postgres', 'CREATE DATABASE db_e');
sql('db_e', 'CREATE EXTENSION outbox');
sql('db_e', q{SELECT count(outbox_send('db_e', 'e' || i, 'k' || i)) FROM generate_series(1, 40) i});
ok(wait_until(30, sub { log_count($node, qr/database "db_e" gets no delivery worker for now: outbox.max_workers \(9\) workers run/, $offset) == 1 }),
	'the database left without a worker is named in the log');
sleep 3;
is(log_count($node, qr/gets no delivery worker/, $offset), 1, 'once, not once per look');
ok(sql('db_e', 'SELECT count(*) FROM outbox') > 0, 'the shard without a worker keeps its events');
sql('db_d', 'DROP EXTENSION outbox');
my $freed_s = time_to_empty('db_e', 60);
diag(sprintf('FIGURES worker cap: db_e fully delivered %.2f s after slots were freed', $freed_s // -1));
ok(defined $freed_s, 'once slots free up, the database gets its workers and is delivered');
like(log_since($node, $offset), qr/database "db_e" has a delivery worker again/, 'and the log says so');
is(scalar @{ consume($broker, 'db_e') }, 40, 'all 40 in Kafka');

# ---- (d) the allow-list -----------------------------------------------------------
$node->append_conf('postgresql.conf', "outbox.databases = 'db_a, db_c, db_e'\n");
$node->reload;
ok(wait_until(30, sub { workers_of('db_b') == 0 }), 'a database left out of outbox.databases loses its workers');
is(workers_of('db_a'), $shards, 'the others keep theirs');
($ret, $out, $err) = $node->psql('db_b', q{SELECT outbox_send('db_b', 'left-out', 'k')});
like($err, qr/outbox.databases does not include database "db_b"/, 'sending there warns');
sleep 2;
is(sql('db_b', 'SELECT count(*) FROM outbox'), '1', 'the event waits');
$node->append_conf('postgresql.conf', "outbox.databases = '*'\n");
$node->reload;
ok(defined time_to_empty('db_b', 30), 'back in the list, it is delivered');

# ---- (e) SIGKILL of the launcher ---------------------------------------------------
my $launcher = sql('postgres', q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox launcher'});
ok($launcher =~ /^\d+$/, 'one launcher runs');
my $loads = start_load($node, db => 'db_a', topic => 'db_a', sessions => 2, per_session => 150, first_session => 11);
sleep 1;
kill 'KILL', $launcher;
wait_load($loads, 1);
ok(wait_until(60, sub { my $p = eval { sql('postgres', q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox launcher'}) }; defined $p && $p =~ /^\d+$/ && $p != $launcher }),
	'the launcher is back after the crash restart');
ok(defined time_to_empty('db_a', 120), 'db_a drains after the restart');
check_delivery('SIGKILL of the launcher', committed_events($node, undef, 'db_a'), consume($broker, 'db_a'));

# ---- (f) RENAME and TEMPLATE -------------------------------------------------------
sql('db_e', 'DROP EXTENSION outbox');    # two slots for the copy
($ret, $out, $err) = $node->psql('postgres', 'ALTER DATABASE db_c RENAME TO db_c2');
is($ret, 0, 'ALTER DATABASE RENAME of a delivered database succeeds') or diag($err);
ok(wait_until(30, sub { workers_of('db_c2') == $shards }), 'its workers are back, under the new name');
sql('db_c2', q{SELECT outbox_send('db_c', 'renamed', 'k')});
ok(defined time_to_empty('db_c2', 30), 'and deliver');
$t0 = time;
($ret, $out, $err) = $node->psql('postgres', 'CREATE DATABASE db_copy TEMPLATE db_b');
is($ret, 0, 'CREATE DATABASE ... TEMPLATE of a delivered database succeeds') or diag($err);
diag(sprintf('FIGURES CREATE DATABASE TEMPLATE of a delivered database: %.2f s', time - $t0));
ok(wait_until(30, sub { workers_of('db_copy') == $shards && workers_of('db_b') == $shards }),
	'the copy gets workers, and the template gets its own back');
sql('db_copy', q{SELECT outbox_send('db_copy', 'copied', 'k')});
ok(defined time_to_empty('db_copy', 30), 'the copy delivers');
my ($copied) = grep { $_->{value} eq 'copied' } @{ consume($broker, 'db_copy') };
my %original = map { ($_->{headers}{'outbox-instance'} // '') => 1 } @{ consume($broker, 'db_b') };
ok(defined $copied && !$original{ $copied->{headers}{'outbox-instance'} // '' },
	'the copy sends under an outbox-instance of its own (its ids repeat the template\'s)');

# ---- (g) the deprecated outbox.database -------------------------------------------
$offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "outbox.database = 'db_c2'\n");
$node->restart;
like(log_since($node, $offset), qr/WARNING:  outbox.database is deprecated/, 'outbox.database warns at start');
ok(wait_until(30, sub { workers_of('db_c2') == $shards }), 'and serves the database it names');
is(workers_of('db_a'), 0, 'and no other');

$node->stop;
$broker->stop;
done_testing();
