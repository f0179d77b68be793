# DDL around the outbox: DROP EXTENSION while the workers run is not
# blocked and the workers leave (the launcher logs it once, no worker
# polls); CREATE EXTENSION starts them again at once; an extension dropped
# and created again (also within one transaction, also in another schema)
# delivers again; DROP DATABASE of a delivered database is not blocked by
# the workers, leaves no worker trying to connect, and a database created
# again under that name is delivered; an event sent in a database
# outbox.databases leaves out warns once per session; columns renamed under
# the workers (two swapping names), or a row with a NULL topic, are
# reported in outbox_status and the log, retried after a back-off, and
# crash nothing.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest qw(!sql);
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

sub workers_of
{
	my ($node, $db) = @_;
	return $node->safe_psql('postgres', qq{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'outbox shard' AND datname = '$db'});
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

# Delivery on again: the workers find no extension and leave.
$node->append_conf('postgresql.conf', 'outbox.enabled = on');
$node->reload;
is(wait_log_count($node, qr/database "postgres" no longer has the extension, its workers stopped/,
		$offset, 1, 30), 1, 'the launcher logs that the extension is gone');
ok(wait_until(30, sub { workers_of($node, 'postgres') == 0 }), 'the workers leave');
sleep 3;
is(log_count($node, qr/no longer has the extension/, $offset), 1, 'logged once, not once per poll');
is(workers_of($node, 'postgres'), 0, 'no worker comes back to poll');
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
sql('DROP EXTENSION outbox');
ok(wait_until(30, sub { workers_of($node, 'postgres') == 0 }), 'the workers leave again');
sql('CREATE SCHEMA ob; CREATE EXTENSION outbox SCHEMA ob');
sql(q{SELECT ob.outbox_send('ddl', 'schema-ob-' || i, 'k' || i) FROM generate_series(1, 3) i});
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM ob.outbox', 30),
	'with the extension in schema ob, events are delivered');
$got = values_in('ddl');
is(scalar(grep { $got->{"schema-ob-$_"} } 1 .. 3), 3, 'the schema-ob events are in Kafka');

# ---- (d) columns renamed under the workers -------------------------------
# outbox_send() writes columns by position, the workers read them by name.
# Rows are in the table when the owner swaps two text columns' names (topic
# and last_error): outbox_send() refuses from then on (test/sql/altered_table),
# and the workers report the table's state, back off and stay up, rather
# than read last_error as the topic. A row with a NULL topic is reported
# the same way. Both put right, the events go out.
sub postmaster_pid
{
	open my $fh, '<', $node->data_dir . '/postmaster.pid' or return '';
	my $pid = <$fh>;
	chomp $pid;
	return $pid;
}

sub status_errors
{
	return sql(q{SELECT string_agg(coalesce(last_error, ''), ' | ' ORDER BY shard)
		FROM ob.outbox_status});
}

ok(pause_delivery($node, $shards), 'delivery paused');
sql(q{SELECT ob.outbox_send('ddl', 'swapped-' || i, 'k' || i) FROM generate_series(1, 4) i});
sql(q{ALTER TABLE ob.outbox RENAME COLUMN topic TO tmp;
	ALTER TABLE ob.outbox RENAME COLUMN last_error TO topic;
	ALTER TABLE ob.outbox RENAME COLUMN tmp TO last_error});
my $postmaster = postmaster_pid();
my $workers_before = join(',', @{ worker_pids($node) });
$offset = -s $node->logfile;
reload_with($node, 'outbox.enabled = on');
my $shape_error = qr/the outbox table "outbox" was altered: column 3 is named "last_error", expected "topic"/;
ok(wait_until(30, sub { status_errors() =~ $shape_error }),
	'(d) outbox_status.last_error names the table and the column')
  or diag(status_errors());
# a few passes of each worker, each failing after its back-off (200 ms,
# doubling to 2 s)
ok(wait_until(30, sub {
	!grep { log_count($node, qr/\[$_\] ERROR:  $shape_error/, $offset) < 2 }
	  @{ worker_pids($node) } }),
	'(d) every worker logs it, again after a back-off');
is(log_count($node, qr/terminated by signal|reinitializing/, $offset), 0,
	'(d) no worker crashed');
is(postmaster_pid(), $postmaster, '(d) the postmaster is the same');
is(join(',', @{ worker_pids($node) }), $workers_before, '(d) so are the workers');
is(sql(q{SELECT count(*) FROM ob.outbox}), '4', '(d) nothing was sent or lost meanwhile');

sql(q{ALTER TABLE ob.outbox RENAME COLUMN topic TO tmp;
	ALTER TABLE ob.outbox RENAME COLUMN last_error TO topic;
	ALTER TABLE ob.outbox RENAME COLUMN tmp TO last_error});
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM ob.outbox', 30),
	'(d) with the names put back, the events are delivered');
$got = values_in('ddl');
is(scalar(grep { $got->{"swapped-$_"} } 1 .. 4), 4, '(d) all four are in Kafka');

# a row outbox_send() would never write: NULL where the table had NOT NULL
$offset = -s $node->logfile;
my $null_id = sql(q{ALTER TABLE ob.outbox ALTER COLUMN topic DROP NOT NULL;
	INSERT INTO ob.outbox (id, shard, topic, created_at)
	VALUES (nextval('ob.outbox_id_seq'), 0, NULL, now()) RETURNING id});
ok(wait_until(30, sub { status_errors() =~ /an outbox row has a NULL topic \(id $null_id\)/ }),
	'(d) a row with a NULL topic is reported with its id')
  or diag(status_errors());
is(log_count($node, qr/terminated by signal|reinitializing/, $offset), 0,
	'(d) and no worker crashed');
sql(qq{DELETE FROM ob.outbox WHERE id = $null_id;
	ALTER TABLE ob.outbox ALTER COLUMN topic SET NOT NULL});
sql(q{SELECT ob.outbox_send('ddl', 'after-null', 'k0')});
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM ob.outbox', 30),
	'(d) with that row gone, events are delivered again');

# ---- (c) an event in a database outbox.databases leaves out -------------
$node->append_conf('postgresql.conf', "outbox.databases = 'postgres'");
$node->reload;
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
		qr/outbox.databases does not include database "otherdb": no worker will deliver this event/,
		"session $session: the WARNING says no worker delivers it");
}
sleep 2;
is($node->safe_psql('otherdb', 'SELECT count(*) FROM outbox'), '6',
	'the events stay in the other database\'s outbox');
is(workers_of($node, 'otherdb'), 0, 'no worker serves otherdb');
($ret, $out, $err) = $node->psql('postgres', q{SELECT ob.outbox_send('ddl', 'no-warning', 'x')},
	stdout => \my $o2, stderr => \my $e2);
unlike($e2, qr/WARNING/, 'no WARNING in a database outbox.databases names');

$node->stop;

# ---- (b) DROP DATABASE of a delivered database ---------------------------
my $app = new_outbox_node('dropdb', $broker, shards => $shards, no_extension => 1);
$t0 = time;
$app->safe_psql('postgres', 'CREATE DATABASE appdb');
$app->safe_psql('appdb', 'CREATE EXTENSION outbox');
$app->safe_psql('appdb', q{SELECT outbox_send('app', 'first-' || i, 'a' || i) FROM generate_series(1, 4) i});
ok(wait_query($app, 'appdb', 'SELECT count(*) = 0 FROM outbox', 30),
	'appdb, created after the start, is delivered');
diag(sprintf('FIGURES appdb created after start: delivered %.1f s later', time - $t0));
$got = values_in('app');
is(scalar(grep { $got->{"first-$_"} } 1 .. 4), 4, 'the appdb events are in Kafka');
is(workers_of($app, 'appdb'), $shards, 'the workers are connected to appdb');

$offset = -s $app->logfile;
$t0 = time;
($ret, $out, $err) = $app->psql('postgres', 'DROP DATABASE appdb', stderr => \my $dropdb_err);
my $dropdb_s = time - $t0;
is($ret, 0, 'DROP DATABASE appdb succeeds') or diag($dropdb_err);
diag(sprintf('FIGURES DROP DATABASE of a delivered database took %.2f s', $dropdb_s));
cmp_ok($dropdb_s, '<', 20, 'DROP DATABASE is not blocked by the workers');
sleep 12;    # longer than a failed worker's restart delay
is(log_count($app, qr/FATAL:\s+database .* does not exist/, $offset), 0,
	'no worker tries to connect to the dropped database');
is(log_count($app, qr/terminated by signal|server process .* was terminated/, $offset), 0,
	'no worker crashed');

# appdb back: delivered again.
$t0 = time;
$app->safe_psql('postgres', 'CREATE DATABASE appdb');
$app->safe_psql('appdb', 'CREATE EXTENSION outbox');
$app->safe_psql('appdb', q{SELECT outbox_send('app', 'again-' || i, 'a' || i) FROM generate_series(1, 4) i});
ok(wait_query($app, 'appdb', 'SELECT count(*) = 0 FROM outbox', 30),
	'after CREATE DATABASE and CREATE EXTENSION the events are delivered');
diag(sprintf('FIGURES appdb re-created: delivered %.1f s later', time - $t0));
$got = values_in('app');
is(scalar(grep { $got->{"again-$_"} } 1 .. 4), 4, 'the new appdb events are in Kafka');

$app->stop;
$broker->stop;
done_testing();
