# Indexes and column/sequence changes on the outbox (review findings M3,
# L6, L7):
#  (a) CREATE INDEX CONCURRENTLY on outbox(topic) during a load: no
#      outbox_send() fails, the new index holds every row (amcheck's
#      bt_index_check(index, true)), the events are delivered with it in
#      place (a session holding a lock keeps the CREATE INDEX waiting with
#      its index in the catalog, so the load sends through that window).
#      Also M3's scenario A: a session whose cache is warm runs
#      BEGIN; SELECT 1; another creates an index; the first sends and
#      commits; the index must hold that row.
#  (b) REINDEX TABLE CONCURRENTLY outbox and REINDEX INDEX CONCURRENTLY
#      outbox_pkey during a load: no outbox_send() fails (the *_ccnew and
#      *_ccold indexes are not "foreign"), nothing is lost.
#  (c) ALTER TABLE outbox ALTER attempts TYPE text: outbox_send() raises
#      SQLSTATE 55000 naming the column instead of crashing the server.
#  (d) ALTER SEQUENCE outbox_id_seq CACHE 50: outbox_send() raises 55000
#      (ids would no longer be handed out in call order); CACHE 1 again and
#      it works.
#  (e) the retry and held indexes re-created without their predicate and
#      the primary key as (id), all under their names: outbox_send()'s
#      rows are in every index (the direct insert writes the key's entry
#      only, right only for the shapes the install script made), and the
#      events are delivered, in order.
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
my $broker = start_broker(topics => [ 'idx_cic:4', 'idx_a:2', 'idx_reindex:4', 'idx_types:2', 'idx_shape:2' ]);
my $node = new_outbox_node('indexes', $broker, shards => $shards, conf => qq{
outbox.batch_size = 200
restart_after_crash = on
});

# psql with SQLSTATEs in the messages: (exit code, stdout, stderr).
sub try_sql
{
	my ($query) = @_;
	my ($out, $err) = ('', '');
	my $ret = $node->psql('postgres', "\\set VERBOSITY verbose\n$query",
		stdout => \$out, stderr => \$err);
	return ($ret, $out, $err);
}

# bt_index_check with heapallindexed: '' if it passes, else the error.
sub index_check
{
	my ($index) = @_;
	my ($ret, $out, $err) = try_sql("SELECT bt_index_check('$index', true)");
	return $ret == 0 ? '' : ($err || "psql exited with $ret");
}

sub set_delivery
{
	my ($on) = @_;
	my $offset = -s $node->logfile;
	$node->append_conf('postgresql.conf', 'outbox.enabled = ' . ($on ? 'on' : 'off') . "\n");
	$node->reload;
	return 1 if $on;
	return wait_until(10, sub {
		log_count($node, qr/outbox "postgres" shard \d+: delivery paused/, $offset) >= $shards });
}

# Like OutboxTest::start_load (keys s<s>-k<seq % 5>, values s<s>:<seq>,
# "sent" recorded in the same transaction), but keeps each client's
# stderr file so that failed outbox_send() calls can be counted.
sub start_counted_load
{
	my ($topic, $first, $sessions, $per) = @_;
	OutboxTest::create_sent_table($node);
	my @load;
	for my $s ($first .. $first + $sessions - 1)
	{
		my $sql = "\\set VERBOSITY verbose\n";
		for my $i (1 .. $per)
		{
			my ($key, $value) = ("s$s-k" . $i % 5, "s$s:$i");
			$sql .= "BEGIN;\nINSERT INTO sent VALUES ($s, $i, '$key', '$value');\n"
			  . "SELECT outbox_send('$topic', '$value', '$key');\nCOMMIT;\n"
			  . "SELECT pg_sleep(0.01);\n";
		}
		my $file = PostgreSQL::Test::Utils::tempdir() . "/load_$s.sql";
		append_to_file($file, $sql);
		push @load, { err => "$file.err", h => IPC::Run::start(
			[ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-f', $file ],
			'<', \undef, '>', '/dev/null', '2>', "$file.err") };
	}
	return \@load;
}

# Waits for the clients; returns their ERROR lines.
sub finish_counted_load
{
	my ($load) = @_;
	my @errors;
	for my $c (@$load)
	{
		$c->{h}->finish;
		push @errors, grep { /ERROR:/ } split /\n/, slurp_file($c->{err});
	}
	return \@errors;
}

# A transaction holding ROW EXCLUSIVE on the outbox for $seconds: a
# concurrent CREATE INDEX or REINDEX CONCURRENTLY waits for it with its new
# index already in the catalog, so the load sends through that window.
sub start_blocker
{
	my ($seconds) = @_;
	return IPC::Run::start([ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-c',
		"BEGIN; LOCK TABLE outbox IN ROW EXCLUSIVE MODE; SELECT pg_sleep($seconds); COMMIT;" ],
		'<', \undef, '>', '/dev/null', '2>', '/dev/null');
}

sub committed_count { return sql("SELECT count(*) FROM sent WHERE session BETWEEN $_[0] AND $_[1]"); }

ok(wait_until(30, sub { @{ worker_pids($node) } == $shards }), "$shards workers run");
sql('CREATE EXTENSION amcheck');

# ---- (a) CREATE INDEX CONCURRENTLY during a load, then scenario A ---------
# Delivery paused, so that every row sent is still in the heap when amcheck
# compares it with the index.
ok(set_delivery(0), '(a) delivery paused');
my $load = start_counted_load('idx_cic', 1, 3, 400);
ok(wait_until(30, sub { committed_count(1, 3) >= 100 }), '(a) the load runs');
my $before = committed_count(1, 3);
my $blocker = start_blocker(1.5);
sleep 0.2;
sql('CREATE INDEX CONCURRENTLY outbox_topic_idx ON outbox (topic)');
$blocker->finish;
my $at_index = committed_count(1, 3);
my $errors = finish_counted_load($load);
my $with_index = committed_count(1, 3) - $at_index;
my $rows = sql('SELECT count(*) FROM outbox');
my $cic_check = index_check('outbox_topic_idx');
diag(sprintf('FIGURES cic: sent_before=%d sent_during=%d sent_after=%d send_errors=%d rows_checked=%d bt_index_check=%s',
	$before, $at_index - $before, $with_index, scalar @$errors, $rows, $cic_check eq '' ? 'ok' : 'FAILED'));
diag("first load error: $errors->[0]") if @$errors;
is(scalar @$errors, 0, '(a) no outbox_send() failed during and after CREATE INDEX CONCURRENTLY');
cmp_ok($with_index, '>', 0, '(a) events were sent with the new index in place');
is($cic_check, '', '(a) bt_index_check(outbox_topic_idx, true) passes');

# Delivered with the extra index present; then it goes.
ok(set_delivery(1), '(a) delivery resumed');
ok(wait_for_empty($node, 60), '(a) the outbox drains with the extra index present');
check_delivery('cic', committed_of($node, 1, 3), consume($broker, 'idx_cic'));
sql('DROP INDEX outbox_topic_idx');

# Scenario A, on the pristine table: S's cache is warm, it is in a
# transaction begun before the index exists and has taken no lock on the
# outbox yet. Delivery paused again, for amcheck.
ok(set_delivery(0), '(a) scenario A: delivery paused');
my ($in, $out, $err) = ('', '', '');
my $s = IPC::Run::start([ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-f', '-' ],
	\$in, \$out, \$err, IPC::Run::timeout(60));
$in .= "SELECT outbox_send('idx_a', 'warm', 'ka');\nBEGIN;\nSELECT 'began';\n";
$s->pump until $out =~ /began/;
sql('CREATE INDEX outbox_topic_a ON outbox (topic)');
$in .= "SELECT outbox_send('idx_a', 'scenario-a', 'ka');\nCOMMIT;\nSELECT 'done';\n\\q\n";
$s->finish;
note("scenario A: $out $err");
unlike($err, qr/ERROR/, '(a) scenario A: both sends succeed');
my $a_check = index_check('outbox_topic_a');
diag(sprintf('FIGURES scenario_a: send_error=%s rows_checked=%d bt_index_check=%s',
	$err =~ /ERROR/ ? 'yes' : 'no', sql('SELECT count(*) FROM outbox'),
	$a_check eq '' ? 'ok' : 'FAILED'));
is($a_check, '', '(a) scenario A: bt_index_check(outbox_topic_a, true) passes') or diag($a_check);
is(index_check('outbox_pkey'), '', '(a) bt_index_check(outbox_pkey, true) passes');
ok(set_delivery(1), '(a) scenario A: delivery resumed');
ok(wait_for_empty($node, 60), '(a) scenario A: the outbox drains');
my %a = map { $_->{value} => 1 } @{ consume($broker, 'idx_a') };
ok($a{warm} && $a{'scenario-a'}, '(a) scenario A: both events are in Kafka');
sql('DROP INDEX outbox_topic_a');

# ---- (b) REINDEX CONCURRENTLY during a load -------------------------------
# Kafka answers slowly, so that the outbox holds a backlog the REINDEX has
# to copy while the load sends; each REINDEX waits for a blocker.
$broker->command('rtt all 300');
$load = start_counted_load('idx_reindex', 11, 3, 900);
ok(wait_until(30, sub { committed_count(11, 13) >= 100 }), '(b) the load runs');
my @took;
for my $reindex (('REINDEX TABLE CONCURRENTLY outbox', 'REINDEX INDEX CONCURRENTLY outbox_pkey') x 2)
{
	my $t0 = time;
	$blocker = start_blocker(1.5);
	sleep 0.2;
	sql($reindex);
	$blocker->finish;
	push @took, sprintf('%.2f', time - $t0);
	sleep 0.5;
}
my $after_reindex = committed_count(11, 13);
$errors = finish_counted_load($load);
my $sent_after = committed_count(11, 13) - $after_reindex;
diag(sprintf('FIGURES reindex: reindexes=4 took_s=%s send_errors=%d committed=%d sent_after=%d',
	join('/', @took), scalar @$errors, committed_count(11, 13), $sent_after));
diag("first load error: $errors->[0]") if @$errors;
is(scalar @$errors, 0, '(b) no outbox_send() failed during REINDEX CONCURRENTLY');
is(sql(q{SELECT count(*) FROM pg_index WHERE indrelid = 'outbox'::regclass AND indisvalid}), '3',
	'(b) the outbox has its three valid indexes again');
is(index_check('outbox_pkey'), '', '(b) bt_index_check(outbox_pkey, true) passes');
$broker->command('rtt all 0');
ok(wait_for_empty($node, 90), '(b) the outbox drains');
check_delivery('reindex', committed_of($node, 11, 13), consume($broker, 'idx_reindex'));

# ---- (c) a column of another type -----------------------------------------
ok(set_delivery(0), '(c) delivery paused');
my $offset = -s $node->logfile;
sql('ALTER TABLE outbox ALTER attempts DROP DEFAULT, ALTER attempts TYPE text USING attempts::text');
my ($ret, $stdout, $stderr) = try_sql(q{SELECT outbox_send('idx_types', 'bad-type', 'kt')});
my $crashed = log_count($node, qr/terminated by signal|all server processes terminated/, $offset);
diag(sprintf('FIGURES alter_type: psql_exit=%d crash_restarts=%d error=%s',
	$ret, $crashed, ($stderr =~ /^[^\n]*(?:ERROR|FATAL|server closed)[^\n]*/m ? $& : 'none')));
isnt($ret, 0, '(c) outbox_send() fails with attempts of type text');
like($stderr, qr/ERROR:  55000: /, '(c) ... with SQLSTATE 55000');
like($stderr, qr/attempts/, '(c) ... naming the column');
is($crashed, 0, '(c) the server did not crash');
ok(wait_until(60, sub { sql('SELECT 1') eq '1' }), '(c) the server answers');
sql('ALTER TABLE outbox ALTER attempts TYPE integer USING attempts::integer, ALTER attempts SET DEFAULT 0');
($ret) = try_sql(q{SELECT outbox_send('idx_types', 'type-restored', 'kt')});
is($ret, 0, '(c) with the type restored, outbox_send() works');

# ---- (d) a sequence cache -------------------------------------------------
sql('ALTER SEQUENCE outbox_id_seq CACHE 50');
($ret, $stdout, $stderr) = try_sql(q{SELECT outbox_send('idx_types', 'cache-50', 'kt')});
diag(sprintf('FIGURES sequence_cache: cache50_exit=%d error=%s',
	$ret, ($stderr =~ /^[^\n]*ERROR[^\n]*/m ? $& : 'none')));
isnt($ret, 0, '(d) outbox_send() fails with CACHE 50');
like($stderr, qr/ERROR:  55000: /, '(d) ... with SQLSTATE 55000');
sql('ALTER SEQUENCE outbox_id_seq CACHE 1');
($ret) = try_sql(q{SELECT outbox_send('idx_types', 'cache-1', 'kt')});
is($ret, 0, '(d) with CACHE 1 again, outbox_send() works');

ok(set_delivery(1), '(c, d) delivery resumed');
ok(wait_for_empty($node, 60), '(c, d) the outbox drains');
my %t = map { $_->{value} => 1 } @{ consume($broker, 'idx_types') };
diag('FIGURES types_in_kafka: ' . join(',', sort keys %t));
ok($t{'type-restored'} && $t{'cache-1'}, '(c, d) the events sent after the restores are in Kafka');
ok(!$t{'bad-type'} && !$t{'cache-50'}, '(c, d) the refused events are not');

# ---- (e) indexes re-created in another shape ------------------------------
ok(set_delivery(0), '(e) delivery paused');
sql(q{DROP INDEX outbox_retry_idx; CREATE INDEX outbox_retry_idx ON outbox (shard, id);
	DROP INDEX outbox_held_idx; CREATE INDEX outbox_held_idx ON outbox USING hash (key);
	ALTER TABLE outbox DROP CONSTRAINT outbox_pkey, ADD CONSTRAINT outbox_pkey PRIMARY KEY (id)});
my @shaped = map { "shape-$_" } 1 .. 20;
($ret, $stdout, $stderr) = try_sql(join('', map { "SELECT outbox_send('idx_shape', '$_', 'ks');\n" } @shaped));
is($ret, 0, '(e) outbox_send() works') or diag($stderr);
is(index_check('outbox_retry_idx'), '', '(e) bt_index_check(outbox_retry_idx, true) passes');
is(index_check('outbox_pkey'), '', '(e) bt_index_check(outbox_pkey, true) passes');
my $by_key = q{SET enable_seqscan = off; SET enable_bitmapscan = off;
	%s SELECT count(*) FROM outbox WHERE key = 'ks'::bytea};
like(sql(sprintf($by_key, 'EXPLAIN')), qr/outbox_held_idx/, '(e) a look-up by key uses the hash index');
is(sql(sprintf($by_key, '')), scalar @shaped, '(e) ... and finds every row');
ok(set_delivery(1), '(e) delivery resumed');
ok(wait_for_empty($node, 60), '(e) the outbox drains');
is_deeply([ map { $_->{value} } @{ consume($broker, 'idx_shape') } ], \@shaped,
	'(e) every event arrived once, in order');

$node->stop;
$broker->stop;
done_testing();
