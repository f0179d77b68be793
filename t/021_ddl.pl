# DDL around the outbox: DROP EXTENSION while the workers run is not
# blocked and the workers wait for CREATE EXTENSION; an extension dropped
# and created again (also within one transaction, also in another schema)
# delivers again; DROP DATABASE of outbox.database is not blocked by the
# workers, which then retry their connection with growing waits instead of
# crash-looping and deliver again once the database is back; an event sent
# in a database no worker serves warns once per session.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $broker = start_broker(topics => [ 'ddl:2', 'app:2' ]);

# Waits until the log holds $n matches of $re after $offset; returns the
# count reached (less than $n on time-out).
sub wait_log_count
{
	my ($node, $re, $offset, $n, $timeout) = @_;
	my $deadline = time + ($timeout // 60);
	my $count = 0;
	while (1)
	{
		$count = log_count($node, $re, $offset);
		return $count if $count >= $n || time > $deadline;
		usleep(100_000);
	}
}

sub values_in
{
	my ($topic) = @_;
	return { map { $_->{value} => $_ } @{ consume($broker, $topic) } };
}

# ---- (a) DROP EXTENSION while the workers run --------------------------

my $shards = 2;
my $node = new_outbox_node('ddl', $broker, shards => $shards);
sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(q{SELECT outbox_send('ddl', 'before-drop', 'k1')});
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox'), 'an event is delivered before the DROP');

# Pause delivery so that some events are still in the outbox when the
# extension goes (the workers keep running, paused).
my $offset = -s $node->logfile;
$node->append_conf('postgresql.conf', 'outbox.enabled = off');
$node->reload;
wait_log_count($node, qr/delivery paused \(outbox.enabled = off\)/, $offset, $shards, 30);
sql(q{SELECT outbox_send('ddl', 'dropped-' || i, 'k' || i) FROM generate_series(1, 5) i});

$offset = -s $node->logfile;
my $t0 = time;
my ($ret, $out, $err) = $node->psql('postgres',
	"SET lock_timeout = '30s'; DROP EXTENSION outbox", stderr => \my $drop_err);
my $drop_s = time - $t0;
is($ret, 0, 'DROP EXTENSION outbox succeeds while the workers run, with events pending')
  or diag($drop_err);
diag(sprintf('FIGURES DROP EXTENSION took %.3f s', $drop_s));
cmp_ok($drop_s, '<', 5, 'DROP EXTENSION is not blocked by the workers');

# Delivery on again: the workers find no extension and wait for it.
$node->append_conf('postgresql.conf', 'outbox.enabled = on');
$node->reload;
is(wait_log_count($node,
		qr/outbox shard \d: extension "outbox" does not exist in database "postgres", waiting for CREATE EXTENSION/,
		$offset, $shards, 30), $shards, 'each worker logs that it waits for CREATE EXTENSION');
sleep 3;
is(log_count($node, qr/waiting for CREATE EXTENSION/, $offset), $shards,
	'the wait is logged once per worker, not once per poll');
is(sql(q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox shard'}), $shards,
	'the workers keep running');
is(log_count($node, qr/(ERROR|FATAL|PANIC|terminated by signal)/, $offset), 0,
	'no error in the log after the DROP');

sql('CREATE EXTENSION outbox');
sql(q{SELECT outbox_send('ddl', 'after-create-' || i, 'k' || i) FROM generate_series(1, 4) i});
$t0 = time;
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox', 30),
	'after CREATE EXTENSION events are delivered again');
diag(sprintf('FIGURES delivered %.2f s after CREATE EXTENSION', time - $t0));
my $got = values_in('ddl');
is(scalar(grep { $got->{"after-create-$_"} } 1 .. 4), 4, 'all four events are in Kafka');
is(scalar(grep { $got->{"dropped-$_"} } 1 .. 5), 0, 'events dropped with the extension never went out');

# ---- (a2) DROP and CREATE in one transaction ----------------------------
# The workers never see the extension missing, yet ids start over at 1,
# below where they read up to: the new events must still be delivered.
sql(q{SELECT outbox_send('ddl', 'advance-' || i, 'k' || i) FROM generate_series(1, 20) i});
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox'), 'ids advanced past 20, all delivered');
sql('BEGIN; DROP EXTENSION outbox; CREATE EXTENSION outbox; COMMIT;');
my $ids = sql(q{SELECT string_agg(outbox_send('ddl', 'recreated-' || i, 'k' || i)::text, ',')
                FROM generate_series(1, 3) i});
note("ids after the re-creation: $ids");
$t0 = time;
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox', 10),
	'events sent after DROP+CREATE EXTENSION in one transaction are delivered');
diag(sprintf('FIGURES DROP+CREATE in one transaction: ids %s, outbox %s after %.1f s',
		$ids, sql('SELECT count(*) FROM outbox') . ' rows left', time - $t0));
$got = values_in('ddl');
is(scalar(grep { $got->{"recreated-$_"} } 1 .. 3), 3, 'the three events are in Kafka');

# ---- (a3) the extension in another schema --------------------------------
$offset = -s $node->logfile;
sql('DROP EXTENSION outbox');
wait_log_count($node, qr/waiting for CREATE EXTENSION/, $offset, $shards, 30);
sql('CREATE SCHEMA ob; CREATE EXTENSION outbox SCHEMA ob');
sql(q{SELECT ob.outbox_send('ddl', 'schema-ob-' || i, 'k' || i) FROM generate_series(1, 3) i});
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM ob.outbox', 30),
	'with the extension in schema ob, events are delivered');
$got = values_in('ddl');
is(scalar(grep { $got->{"schema-ob-$_"} } 1 .. 3), 3, 'the schema-ob events are in Kafka');

# ---- (c) an event in a database no worker serves -------------------------
sql('CREATE DATABASE otherdb');
$node->safe_psql('otherdb', 'CREATE EXTENSION outbox');
for my $session (1, 2)
{
	my ($stdout, $stderr);
	$node->psql('otherdb', qq{
SELECT outbox_send('ddl', 'otherdb-$session-1', 'x');
SELECT outbox_send('ddl', 'otherdb-$session-2', 'x');
BEGIN; SELECT outbox_send('ddl', 'otherdb-$session-3', 'x'); COMMIT;},
		stdout => \$stdout, stderr => \$stderr, on_error_die => 1);
	my @warnings = $stderr =~ /WARNING:[^\n]*/g;
	is(scalar @warnings, 1, "session $session: one WARNING for three events");
	like($warnings[0] // '',
		qr/outbox workers serve database "postgres", not "otherdb": no worker will deliver this event/,
		"session $session: the WARNING says no worker delivers it");
	diag("session $session stderr: $stderr") if $session == 1;
}
sleep 2;
is($node->safe_psql('otherdb', 'SELECT count(*) FROM outbox'), '6',
	'the events stay in the other database\'s outbox');
($ret, $out, $err) = $node->psql('postgres', q{SELECT ob.outbox_send('ddl', 'no-warning', 'x')},
	stdout => \my $o2, stderr => \my $e2);
unlike($e2, qr/WARNING/, 'no WARNING in outbox.database');

$node->stop;

# ---- (b) DROP DATABASE of outbox.database --------------------------------
my $app = new_outbox_node('dropdb', $broker, shards => $shards, no_extension => 1,
	conf => "outbox.database = 'appdb'\n");
$t0 = time;
$app->safe_psql('postgres', 'CREATE DATABASE appdb');
$app->safe_psql('appdb', 'CREATE EXTENSION outbox');
$app->safe_psql('appdb', q{SELECT outbox_send('app', 'first-' || i, 'a' || i) FROM generate_series(1, 4) i});
ok(wait_query($app, 'appdb', 'SELECT count(*) = 0 FROM outbox', 90),
	'the workers wait for appdb and its extension, then deliver');
diag(sprintf('FIGURES appdb created after start: delivered %.1f s later', time - $t0));
$got = values_in('app');
is(scalar(grep { $got->{"first-$_"} } 1 .. 4), 4, 'the appdb events are in Kafka');
is($app->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox shard' AND datname = 'appdb'}),
	$shards, 'the workers are connected to appdb');

$offset = -s $app->logfile;
$t0 = time;
($ret, $out, $err) = $app->psql('postgres', 'DROP DATABASE appdb', stderr => \my $dropdb_err);
my $dropdb_s = time - $t0;
is($ret, 0, 'DROP DATABASE appdb succeeds') or diag($dropdb_err);
diag(sprintf('FIGURES DROP DATABASE of outbox.database took %.2f s', $dropdb_s));
cmp_ok($dropdb_s, '<', 20, 'DROP DATABASE is not blocked by the workers');
my $t_drop = time;

# No crash loop: a worker that cannot connect exits (FATAL) and is
# restarted by the postmaster after 10 s; before connecting again it waits
# 2 s, 4 s, 8 s... as it logs ("retrying in N s").
my $fatal = qr/FATAL:\s+database "appdb" does not exist/;
sleep 15;
my $fatals_15s = log_count($app, $fatal, $offset);
diag("FIGURES FATAL 'database \"appdb\" does not exist' in the 15 s after the drop: $fatals_15s ($shards shards)");
cmp_ok($fatals_15s, '<=', 2 * $shards, 'at most a couple of failed connects per worker in 15 s');
is(log_count($app, qr/terminated by signal|server process .* was terminated/, $offset), 0,
	'no worker crashed');

# Wait for the second retry's failure, then check that each logged wait
# really passed between the "retrying in N s" line and that worker's
# next connect (its FATAL or its start).
my $retry2 = qr/could not connect to database "appdb" 2 time\(s\), retrying in 4 s/;
cmp_ok(wait_log_count($app, $retry2, $offset, $shards, 60), '>=', 1,
	'the announced wait grows (2 s, then 4 s)');
sleep 6;    # the longest announced wait so far, and some
my @lines = split /\n/, log_since($app, $offset);
my @waits;
for my $i (0 .. $#lines)
{
	next unless $lines[$i] =~
	  /^\S+ (\d\d):(\d\d):(\d\d\.\d+) \S+ \[(\d+)\] LOG:  outbox shard (\d+): could not connect to database "appdb" (\d+) time\(s\), retrying in (\d+) s/;
	my ($ts, $pid, $shard, $n, $announced) = ($1 * 3600 + $2 * 60 + $3, $4, $5, $6, $7);
	for my $j ($i + 1 .. $#lines)
	{
		next unless $lines[$j] =~ /^\S+ (\d\d):(\d\d):(\d\d\.\d+) \S+ \[$pid\] (?:FATAL:\s+database "appdb"|LOG:  outbox shard \d+ of)/;
		push @waits, { shard => $shard, n => $n, announced => $announced,
			actual => $1 * 3600 + $2 * 60 + $3 - $ts };
		last;
	}
}
diag('FIGURES connect back-off after the drop (announced/actual s): '
	  . join(', ', map { sprintf('shard %d #%d %d/%.2f', @$_{qw(shard n announced actual)}) } @waits));
cmp_ok(scalar @waits, '>=', $shards, 'saw announced connect waits followed by a connect');
is(scalar(grep { $_->{actual} < 0.9 * $_->{announced} } @waits), 0,
	'each announced connect wait really passes before the next connect');
my $fatals = log_count($app, $fatal, $offset);
diag(sprintf('FIGURES %.0f s after the drop: %d FATALs in total', time - $t_drop, $fatals));
cmp_ok($fatals, '<=', 3 * $shards, 'no crash loop');

# appdb back: the workers deliver again.
$t0 = time;
$app->safe_psql('postgres', 'CREATE DATABASE appdb');
$app->safe_psql('appdb', 'CREATE EXTENSION outbox');
$app->safe_psql('appdb', q{SELECT outbox_send('app', 'again-' || i, 'a' || i) FROM generate_series(1, 4) i});
ok(wait_query($app, 'appdb', 'SELECT count(*) = 0 FROM outbox', 90),
	'after CREATE DATABASE and CREATE EXTENSION the events are delivered');
diag(sprintf('FIGURES appdb re-created: delivered %.1f s later', time - $t0));
$got = values_in('app');
is(scalar(grep { $got->{"again-$_"} } 1 .. 4), 4, 'the new appdb events are in Kafka');

$app->stop;
$broker->stop;
done_testing();
