# Workers absorb what the server asks of every process while they hold
# events in flight (review e11b06c H4): DROP DATABASE, DROP TABLESPACE and
# ALTER DATABASE ... SET TABLESPACE of another database wait for every
# process to accept a ProcSignalBarrier, and must finish in their normal
# time with Kafka down and under steady load. Memory-context logging is
# absorbed the same way. A stopping worker never waits longer than
# outbox.shutdown_timeout, also during a back-off (L7), and a stop asked for
# is quiet: no FATAL line.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => ['bar:4', 'bar_down:1']);
my $node = new_outbox_node('barriers', $broker,
	kafka_config => 'message.timeout.ms=120000,socket.timeout.ms=3000', conf => q{
outbox.shutdown_timeout = '3s'
});
my $tsdir = PostgreSQL::Test::Utils::tempdir();

# Runs $ddl in database postgres with a 10 s statement_timeout: its seconds.
sub timed_ddl
{
	my ($ddl) = @_;
	my $t0 = time;
	my ($ret, $out, $err) = $node->psql('postgres', "SET statement_timeout = '10s'; $ddl");
	my $s = time - $t0;
	diag("'$ddl' failed: $err") if $ret != 0;
	return $ret == 0 ? $s : -1;
}

# The three statements that wait for a barrier, each on an unrelated database.
sub barrier_ddl
{
	my ($label) = @_;
	my %s;
	sql('CREATE DATABASE scratch');
	$s{drop_database} = timed_ddl('DROP DATABASE scratch');
	sql("CREATE TABLESPACE ts LOCATION '$tsdir'") unless $label eq 'load';
	sql('CREATE DATABASE mover');
	$s{set_tablespace} = timed_ddl('ALTER DATABASE mover SET TABLESPACE ts');
	sql('DROP DATABASE mover');
	$s{drop_tablespace} = timed_ddl('DROP TABLESPACE ts');
	sql("CREATE TABLESPACE ts LOCATION '$tsdir'");
	for my $what (sort keys %s)
	{
		ok($s{$what} >= 0 && $s{$what} < 5, "($label) $what finishes in its normal time");
	}
	diag("FIGURES ($label) H4 barrier DDL seconds: "
		  . join(' ', map { sprintf('%s=%.2f', $_, $s{$_}) } sort keys %s));
}

# ---- (a) Kafka down, an event in flight ------------------------------------
$broker->command('down all');
ok(wait_in_flight($node, sql(q{SELECT outbox_send('bar_down', 'in-flight', 'k')})),
	'(a) an event is in flight');
barrier_ddl('kafka down');

# memory-context logging is absorbed too, with the window still holding it
my ($pid) = @{ worker_pids($node) };
my $offset = -s $node->logfile;
sql("SELECT pg_log_backend_memory_contexts($pid)");
ok(wait_until(5, sub { log_since($node, $offset) =~ /\[$pid\] LOG:  logging memory contexts of PID $pid/ }),
	'(a) the worker logs its memory contexts while its window is not empty');
is(sql(q{SELECT count(*) FROM outbox}), '1', '(a) the event is still waiting');
$broker->command('up all');
ok(wait_for_empty($node, 30), '(a) the event is delivered once Kafka is back');

# ---- (b) steady load, a 20 ms round trip ------------------------------------
$broker->command('rtt all 20');
my $load = start_load($node, sessions => 3, per_session => 3000, keys => 5, topic => 'bar',
	rollback_every => 0);
sleep 2;
barrier_ddl('load');
wait_load($load);
$broker->command('rtt all 0');
ok(wait_for_empty($node, 60), '(b) the load is delivered');
check_delivery('(b) load with barrier DDL', committed_events($node), consume($broker, 'bar'));

# ---- (c) a stop during a pass back-off (L7) and quiet stops ----------------
# A settle that fails (a trigger refuses the DELETE) puts the pass into a
# back-off of at least 30 s; a stop must still end within shutdown_timeout.
sql(q{CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql
	AS $$ BEGIN RAISE EXCEPTION 'deletes refused by the test'; END $$;
	CREATE TRIGGER refuse BEFORE DELETE ON outbox FOR EACH ROW EXECUTE FUNCTION refuse_delete()});
reload_with($node, "outbox.retry_backoff_min = '30s'\noutbox.retry_backoff_max = '60s'");
$offset = -s $node->logfile;
sql(q{SELECT outbox_send('bar_down', 'undeletable', 'k')});
ok(wait_until(20, sub { log_since($node, $offset) =~ /deletes refused by the test/ }),
	'(c) the settle fails: the pass backs off');
($pid) = @{ worker_pids($node) };
my $t0 = time;
sql("SELECT pg_terminate_backend($pid)");
ok(wait_until(30, sub { !kill(0, $pid) }), '(c) the worker stops');
my $stop_s = time - $t0;
cmp_ok($stop_s, '<', 3 + 4, '(c) within outbox.shutdown_timeout (3 s) and a margin, not the 30 s back-off');
sql('DROP TRIGGER refuse ON outbox');
reload_with($node, "outbox.retry_backoff_min = '200ms'\noutbox.retry_backoff_max = '2s'");
ok(wait_for_empty($node, 60), '(c) a new worker delivers the event');
diag(sprintf('FIGURES (c) L7 stop during a 30 s pass back-off, shutdown_timeout 3 s: stopped_after_s=%.1f', $stop_s));

my $fatal = log_count($node, qr/FATAL:  terminating background worker "outbox/, 0);
is($fatal, 0, 'no FATAL line for a stop that was asked for (DDL, pg_terminate_backend)');
diag("FIGURES quiet stops: fatal_lines_for_outbox_workers=$fatal");

$node->stop;
$broker->stop;
done_testing();
