# Database DDL behaves as it does without the extension. With the extension
# in the databases, events pending and their workers connected:
#  - ALTER DATABASE ... RENAME as the second of two in a transaction block,
#    in a DO block and in a procedure (PostgreSQL allows all three) succeeds
#    at once, not after 5 s with "being accessed by other users";
#  - DROP DATABASE, ALTER DATABASE ... SET TABLESPACE and CREATE DATABASE
#    ... TEMPLATE succeed at once;
#  - a RENAME the role may not run stops no worker;
#  - afterwards each database is delivered again, under its new name: the
#    events pending before and those sent after are in Kafka.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest qw(!sql);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $shards = 2;
my $broker = start_broker(topics => ['ddl:2']);
my $node = new_outbox_node('dbddl', $broker, shards => $shards, no_extension => 1,
	conf => "outbox.max_workers = 24\n");

sub sql { my ($db, $q) = @_; return $node->safe_psql($db, $q); }

# True when each of @dbs has all its workers connected.
sub all_served
{
	my (@dbs) = @_;
	my %count = map { split /\|/ } split /\n/, sql('postgres', q{SELECT datname, count(*)
		FROM pg_stat_activity WHERE backend_type = 'outbox shard' GROUP BY datname});
	return !grep { ($count{$_} // 0) != $shards } @dbs;
}

my @dbs = qw(ra rb rc rd rdrop rts rtpl rguard);
for my $db (@dbs)
{
	sql('postgres', "CREATE DATABASE $db");
	sql($db, 'CREATE EXTENSION outbox');
}
ok(wait_until(60, sub { all_served(@dbs) }), 'every database has its workers');

# events pending while the workers stay connected
ok(pause_delivery_all(), 'delivery is paused in every database');
for my $db (@dbs)
{
	sql($db, "SELECT outbox_send('ddl', '$db-before-' || i, '$db' || i) FROM generate_series(1, 3) i");
}

sub pause_delivery_all
{
	my $from = -s $node->logfile;
	reload_with($node, 'outbox.enabled = off');
	return wait_until(20, sub {
		my $n = () = log_since($node, $from) =~ /delivery paused \(outbox.enabled = off\)/g;
		return $n >= $shards * @dbs;
	});
}

# Runs $sql in database postgres: [ok, seconds, stderr].
sub timed
{
	my ($q) = @_;
	my $t0 = time;
	my ($ret, $out, $err) = $node->psql('postgres', $q);
	return [ $ret == 0, time - $t0, $err ];
}

my $tsdir = PostgreSQL::Test::Utils::tempdir();
sql('postgres', "CREATE TABLESPACE ts1 LOCATION '$tsdir'");
sql('postgres', q{CREATE PROCEDURE rename_db(a text, b text) LANGUAGE plpgsql
	AS $$BEGIN EXECUTE format('ALTER DATABASE %I RENAME TO %I', a, b); END$$});

my $offset = -s $node->logfile;
my %ddl = (
	'two renames in a transaction block' =>
	  'BEGIN; ALTER DATABASE ra RENAME TO ra2; ALTER DATABASE rb RENAME TO rb2; COMMIT;',
	'a rename in a DO block' => 'DO $$BEGIN ALTER DATABASE rc RENAME TO rc2; END$$',
	'a rename in a procedure' => q{CALL rename_db('rd', 'rd2')},
	'DROP DATABASE' => 'DROP DATABASE rdrop',
	'SET TABLESPACE' => 'ALTER DATABASE rts SET TABLESPACE ts1',
	'CREATE DATABASE ... TEMPLATE' => 'CREATE DATABASE rcopy TEMPLATE rtpl',
);
my @figures;
for my $what (sort keys %ddl)
{
	my $r = timed($ddl{$what});
	ok($r->[0], "$what succeeds") or diag($r->[2]);
	cmp_ok($r->[1], '<', 4, "$what is not held up by the workers");
	push @figures, sprintf('%s %.2f s', $what, $r->[1]);
}
diag('FIGURES database DDL with the extension, events pending: ' . join(', ', @figures));
is(sql('postgres', q{SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_database
	WHERE datname ~ '^r'}), 'ra2,rb2,rc2,rcopy,rd2,rguard,rtpl,rts', 'the databases are as the DDL left them');
is(sql('postgres', q{SELECT t.spcname FROM pg_database d JOIN pg_tablespace t ON t.oid = d.dattablespace
	WHERE d.datname = 'rts'}), 'ts1', 'rts moved to ts1');

# A role that may not rename the database stops nobody.
sql('postgres', 'CREATE ROLE mallory LOGIN CREATEDB');
my $before = sql('postgres', q{SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
	WHERE backend_type = 'outbox shard' AND datname = 'rguard'});
my ($ret, $out, $err) = $node->psql('postgres',
	'DO $$BEGIN ALTER DATABASE rguard RENAME TO rguard2; END$$', extra_params => [ '-U', 'mallory' ]);
like($err, qr/must be owner of database rguard/, 'a rename by a non-owner is refused');
is(sql('postgres', q{SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
	WHERE backend_type = 'outbox shard' AND datname = 'rguard'}), $before, 'and the workers were not stopped');

is(log_count($node, qr/FATAL:  terminating background worker "outbox shard"/, $offset), 0,
	'no FATAL line for the workers the DDL stopped');

# Delivery on again: every database, under its new name, delivers what was
# pending and what is sent now.
reload_with($node, 'outbox.enabled = on');
my @now = qw(ra2 rb2 rc2 rd2 rts rtpl rcopy);
ok(wait_until(60, sub { all_served(@now) }), 'every database has its workers again');
for my $db (@now)
{
	sql($db, "SELECT outbox_send('ddl', '$db-after-' || i, '$db' || i) FROM generate_series(1, 3) i");
}
my $t0 = time;
ok(wait_until(60, sub { !grep { sql($_, 'SELECT count(*) FROM outbox') != 0 } @now }), 'every outbox drains');
diag(sprintf('FIGURES after the DDL: every database drained %.1f s after delivery resumed', time - $t0));
my %got;
$got{ $_->{value} }++ for @{ consume($broker, 'ddl') };
my %before_of = (ra2 => 'ra', rb2 => 'rb', rc2 => 'rc', rd2 => 'rd', rts => 'rts', rtpl => 'rtpl', rcopy => 'rtpl');
for my $db (@now)
{
	my $old = $before_of{$db};
	is(scalar(grep { $got{"$db-after-$_"} } 1 .. 3), 3, "$db: the events sent after the DDL are in Kafka");
	ok(!grep({ !$got{"$old-before-$_"} } 1 .. 3), "$db: the events pending before it are in Kafka");
}
is(scalar(grep { /^rdrop-/ } keys %got), 0, 'nothing of the dropped database was sent');

$node->stop;
$broker->stop;
done_testing();
