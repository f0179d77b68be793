# The database owner cannot slow or stop the workers through settings
# (review M4). A non-superuser owns databases base and app; in app it sets
# on the database planner switches and costs, JIT for every statement, and
# later a role. The server's own configuration sets random_page_cost =
# 1.1, which the workers must keep. auto_explain (preloaded, every
# statement, with the settings that differ from the defaults) shows in the
# log the plans the workers of both databases run. Asserted: after a
# restart, the worker of app reads with an index scan, JIT-compiles
# nothing, and plans with the server's random_page_cost and none of the
# owner's settings, as in base (the deletes of what Kafka acknowledged
# run no statement at all, src/table/position_delete.c: no plan, so no planner
# setting, can reach them); the same
# backlog drains in app about as fast as in base; and with role, then
# also session_authorization (a role without rights), set on the database,
# the worker of app still delivers.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $events = 40000;
my $broker = start_broker(topics => ['own:4']);
my $node = new_outbox_node('owner', $broker, no_extension => 1, conf => q{
shared_preload_libraries = 'outbox, auto_explain'
auto_explain.log_min_duration = 0
auto_explain.log_nested_statements = on
auto_explain.log_settings = on
random_page_cost = 1.1
outbox.enabled = off
});

$node->safe_psql('postgres', q{CREATE ROLE app_owner LOGIN;
CREATE DATABASE base OWNER app_owner; CREATE DATABASE app OWNER app_owner;});
$node->safe_psql($_, 'CREATE EXTENSION outbox') for qw(base app);

sub as_owner
{
	my ($q) = @_;
	return $node->safe_psql('app', $q, connstr => $node->connstr('app') . ' user=app_owner');
}
as_owner(q{
ALTER DATABASE app SET enable_indexscan = off;
ALTER DATABASE app SET enable_indexonlyscan = off;
ALTER DATABASE app SET enable_bitmapscan = off;
ALTER DATABASE app SET enable_tidscan = off;
ALTER DATABASE app SET random_page_cost = 1e6;
ALTER DATABASE app SET cpu_index_tuple_cost = 1e6;
ALTER DATABASE app SET jit = on;
ALTER DATABASE app SET jit_above_cost = 0;
ALTER DATABASE app SET jit_optimize_above_cost = 0;
ALTER DATABASE app SET jit_inline_above_cost = 0;
});

for my $db (qw(base app))
{
	$node->safe_psql($db, "SELECT count(outbox_send('own', '$db-' || i, 'k' || i % 100))"
		  . " FROM generate_series(1, $events) i");
}

# The workers connect again, with the database's settings, and deliver.
$node->restart;
my $offset = -s $node->logfile;
my $started = time;
reload_with($node, 'outbox.enabled = on');
my %drained;
wait_until(300, sub {
	for my $db (qw(base app))
	{
		$drained{$db} //= time - $started
		  if $node->safe_psql($db, 'SELECT NOT EXISTS (SELECT FROM outbox)') eq 't';
	}
	return keys %drained == 2;
});
my %pid = map { my $db = $_; $db => $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox shard' AND datname = '$db'") }
  qw(base app);

# auto_explain's entries of one worker: its log lines with what follows them
sub plans_of
{
	my ($pid) = @_;
	my @entries = split /\n(?=\S)/, log_since($node, $offset);
	return grep { /\[$pid\][^\n]*duration: [\d.]+ ms  plan:/ } @entries;
}
my %seen;
for my $db (qw(base app))
{
	my @plans = plans_of($pid{$db});
	# a shard with retry times gets the two-part read, the others its second part alone
	my @reads = grep { /Query Text: SELECT (?:\* FROM \(\(SELECT )?o\.id, o\.topic.*ORDER BY [or]\.id LIMIT/ } @plans;
	my @deletes = grep { /Query Text: DELETE FROM \S+\.outbox (?:o USING|WHERE ctid)/ } @plans;
	# the worker's reads switch sequential and bitmap scans off themselves
	my ($settings) = map { /Settings: ([^\n]*)/ ? $1 : () } @plans;
	$settings =~ s/,?\s*enable_(?:bitmapscan|seqscan) = 'off'//g if defined $settings;
	$settings =~ s/^,\s*// if defined $settings;
	$seen{$db} = {
		plans => scalar @plans,
		reads => scalar @reads,
		index_reads => scalar(grep { /Index (Only )?Scan[^\n]* on outbox/ } @reads),
		deletes => scalar @deletes,
		tid_deletes => scalar(grep { /Tid Scan on outbox/ } @deletes),
		seq_reads => scalar(grep { /Seq Scan on outbox / } @reads),
		jit => scalar(grep { /\n\s*JIT:/ } @plans),
		settings => $settings // '',
	};
	diag(sprintf("FIGURES owner settings %s: events=%d drain_s=%.1f plans=%d reads=%d index_reads=%d "
		  . "deletes=%d tid_deletes=%d seq_scan_reads=%d jit=%d settings: %s",
		$db, $events, $drained{$db} // -1, @{ $seen{$db} }{qw(plans reads index_reads deletes tid_deletes seq_reads jit settings)}));
}
ok(defined $drained{$_}, "$_: the backlog drains") for qw(base app);
for my $db (qw(base app))
{
	my $s = $seen{$db};
	cmp_ok($s->{reads}, '>', 0, "$db: the worker's reads are in the log");
	is($s->{index_reads}, $s->{reads}, "$db: every read uses an index");
	is($s->{seq_reads}, 0, "$db: no read scans the outbox sequentially");
	is($s->{deletes}, 0, "$db: the worker's deletes run no statement (nothing to plan)");
	is($s->{jit}, 0, "$db: no statement is JIT-compiled");
	like($s->{settings}, qr/random_page_cost = '1.1'/, "$db: the server's random_page_cost applies");
	unlike($s->{settings}, qr/enable_|jit|cpu_index_tuple_cost|1e\+06/, "$db: none of the owner's settings applies");
}
cmp_ok($drained{app} // 1e9, '<=', 3 * ($drained{base} // 0) + 10, 'app drains about as fast as base');

# A role set on the database: the worker's SQL would run as the owner.
as_owner(q{ALTER DATABASE app SET role = 'app_owner'});
$node->restart;
# (the test's own sessions, the bootstrap superuser's, leave the role)
$node->safe_psql('app', "SET ROLE NONE; SELECT count(outbox_send('own', 'role-' || i, 'r')) FROM generate_series(1, 20) i");
my $t0 = time;
my $ok = wait_query($node, 'app', 'SET ROLE NONE; SELECT NOT EXISTS (SELECT FROM outbox)', 60);
my $role_s = time - $t0;
my $got = grep { $_->{value} =~ /^role-/ } @{ consume($broker, 'own') };
diag(sprintf('FIGURES owner settings role: delivered=%d of 20 in %.1f s', $got, $role_s));
ok($ok, 'with role set on the database, the worker still delivers');
is($got, 20, 'all 20 reached Kafka');

# session_authorization set on the database (review 695dcef L1): a worker
# connects without a user name, so PostgreSQL would apply it and the
# worker's SQL would run as that role, here one without any rights.
$node->safe_psql('postgres', 'CREATE ROLE nobody_role');
as_owner(q{ALTER DATABASE app SET session_authorization = 'nobody_role'});
my $old_pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox shard' AND datname = 'app'");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_pid)");
ok(wait_until(30, sub {
	my $pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox shard' AND datname = 'app'");
	return $pid ne '' && $pid ne $old_pid;
}), 'the worker of app connects again, with session_authorization set on the database');
$offset = -s $node->logfile;
$node->safe_psql('app', "SET ROLE NONE; SELECT count(outbox_send('own', 'auth-' || i, 'a')) FROM generate_series(1, 20) i");
$t0 = time;
$ok = wait_query($node, 'app', 'SET ROLE NONE; SELECT NOT EXISTS (SELECT FROM outbox)', 30);
my $auth_s = time - $t0;
$got = grep { $_->{value} =~ /^auth-/ } @{ consume($broker, 'own') };
my $denied = () = log_since($node, $offset) =~ /permission denied/g;
diag(sprintf('FIGURES owner settings session_authorization: delivered=%d of 20 in %.1f s, permission_denied_lines=%d',
	$got, $auth_s, $denied));
ok($ok, 'with session_authorization set on the database, the worker still delivers');
is($got, 20, 'all 20 reached Kafka');
is($denied, 0, 'no permission denied in the log');

$node->stop;
done_testing();
