# Many concurrent senders cannot starve the worker's read (review M3).
# Every outbox_send holds the id registry's lock shared across its
# nextval(); a worker's read takes it exclusively, and an LWLock prefers
# no one. 16 pgbench clients (OUTBOX_TEST_SENDERS) call outbox_send
# unthrottled for 20 s, each event committed together with a row of a
# business table, while delivery is on; a procedure samples the shard
# worker's wait event, its step and its delivered counter in
# pg_stat_activity every 100 ms, with the highest id its reads took in
# (outbox_shard_stats). Asserted, with generous bounds: the
# worker is never seen waiting in LWLock/outbox for long (longest streak
# of such samples), neither delivery nor the reads stand still for long
# while the senders run, and every committed event reaches Kafka once
# the senders stop. The broker keeps about 5 MiB per partition, so the
# ~50 MB the senders produce are spread over 1024 keys and 64 partitions.
use strict;
use warnings;
use FindBin;
use IPC::Run;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $clients = $ENV{OUTBOX_TEST_SENDERS} // 16;
my $seconds = 20;
my $max_streak_s = 2;       # longest seen wait on the registry's locks
my $max_gap_s = 5;          # longest delivery standstill while sending

my $broker = start_broker(topics => ['many:64']);
my $node = new_outbox_node('many', $broker, conf => "max_connections = 60\n");

OutboxTest::create_sent_table($node);
$node->safe_psql('postgres', q{
CREATE SEQUENCE sent_seq;
CREATE FUNCTION send_one(c int) RETURNS bigint LANGUAGE sql AS $$
  INSERT INTO sent SELECT c, n, 'k' || c || '-' || n % 64, 'c' || c || ':' || n
  FROM (SELECT nextval('sent_seq') AS n) s;
  SELECT outbox_send('many', value, key) FROM sent
  WHERE session = c AND seq = currval('sent_seq');
$$;
CREATE UNLOGGED TABLE samples (t timestamptz, wait_type text, wait text, delivered bigint,
                               step text, step_start timestamptz, read_up_to bigint);
CREATE PROCEDURE sample(n int) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. n LOOP
    INSERT INTO samples
    SELECT clock_timestamp(), a.wait_event_type, a.wait_event,
           (SELECT sum(s.delivered) FROM outbox_shard_stats() s), a.query, a.query_start,
           (SELECT max(s.in_flight_last_id) FROM outbox_shard_stats() s)
    FROM pg_stat_activity a WHERE a.backend_type = 'outbox shard';
    COMMIT;    -- a new view of pg_stat_activity each time
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
});

my $script = PostgreSQL::Test::Utils::tempdir() . '/send.sql';
PostgreSQL::Test::Utils::append_to_file($script, "SELECT send_one(:client_id);\n");

my $started = time;
my $sampler = IPC::Run::start(
	[ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-c', 'CALL sample(' . ($seconds * 10 + 50) . ')' ],
	'<', \undef, '>', '/dev/null', '2>', \my $sampler_err);
my ($out, $err) = ('', '');
# asynchronous commits: the senders spend more of their time in nextval()
local $ENV{PGOPTIONS} = '-c synchronous_commit=off';
my $pgbench_ok = IPC::Run::run(
	[ 'pgbench', '-n', '-c', $clients, '-j', 4, '-T', $seconds, '-f', $script,
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout($seconds + 120));
my $ran = time - $started;
ok($pgbench_ok, 'pgbench ran') or diag($err);
my ($processed) = $out =~ /number of transactions actually processed: (\d+)/;
my ($tps) = $out =~ /tps = ([\d.]+)/;
$sampler->finish;

# samples taken while the senders ran
my $window = "t < (SELECT min(t) FROM samples) + interval '$seconds s'";
my ($samples, $lwlock, $streak) = split /\|/, $node->safe_psql('postgres', qq{
WITH s AS (SELECT t, coalesce(wait_type = 'LWLock' AND wait = 'outbox', false) AS w,
                  row_number() OVER (ORDER BY t) AS n
           FROM samples WHERE $window),
runs AS (SELECT count(*) AS len FROM s WHERE w
         GROUP BY n - (SELECT count(*) FROM s s2 WHERE s2.w AND s2.t <= s.t))
SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM s WHERE w),
       coalesce((SELECT max(len) FROM runs), 0)});
my $gap = $node->safe_psql('postgres', qq{
WITH c AS (SELECT t, delivered IS DISTINCT FROM lag(delivered) OVER (ORDER BY t) AS changed
           FROM samples WHERE $window),
p AS (SELECT t FROM c WHERE changed)
SELECT round(extract(epoch FROM coalesce(max(d), interval '0'))::numeric, 2)
FROM (SELECT t - lag(t) OVER (ORDER BY t) AS d FROM p) x});
# the highest id the worker's reads took in (outbox_shard_stats), as the
# samples saw it: the longest time it stood still while senders commit
# thousands a second is the longest time between two reads that found
# events. (The reads' own activity is sampled too, for the figures: a
# read shorter than the sampling interval is often missed.)
my $read_gap = $node->safe_psql('postgres', qq{
WITH m AS (SELECT t, max(read_up_to) OVER (ORDER BY t) AS up_to FROM samples WHERE $window),
c AS (SELECT t, up_to IS DISTINCT FROM lag(up_to) OVER (ORDER BY t) AS moved FROM m),
p AS (SELECT t FROM c WHERE moved)
SELECT round(extract(epoch FROM coalesce(max(d), interval '0'))::numeric, 2)
FROM (SELECT t - lag(t) OVER (ORDER BY t) AS d FROM p) x});
my $sampled_read_gap = $node->safe_psql('postgres', qq{
SELECT round(extract(epoch FROM coalesce(max(d), interval '0'))::numeric, 2)
FROM (SELECT s - lag(s) OVER (ORDER BY s) AS d
      FROM (SELECT DISTINCT step_start AS s FROM samples
            WHERE $window AND step = 'outbox: reading a batch') r) x});
my $waits = $node->safe_psql('postgres', qq{
SELECT string_agg(w || '=' || n, ' ' ORDER BY n DESC) FROM
 (SELECT coalesce(wait_type || '/' || wait, 'cpu') AS w, count(*) AS n
  FROM samples WHERE $window GROUP BY 1) x});

ok(wait_for_empty($node, 180), 'the outbox drains after the senders stop');
my $committed = committed_events($node);
my $received = consume($broker, 'many');
diag(sprintf('FIGURES many senders: clients=%d seconds=%.1f transactions=%d tps=%s samples=%d '
	  . 'lwlock_outbox_samples=%d longest_lwlock_streak_ms=%d longest_delivery_gap_s=%s longest_read_gap_s=%s'
	  . ' longest_gap_between_sampled_reads_s=%s waits: %s',
	$clients, $ran, $processed // -1, $tps // '?', $samples, $lwlock, $streak * 100, $gap, $read_gap,
	$sampled_read_gap, $waits // ''));
cmp_ok($samples, '>=', $seconds * 5, 'the worker was sampled throughout');
cmp_ok($processed // 0, '>', 1000, 'the senders sent');
cmp_ok($streak * 100, '<=', $max_streak_s * 1000,
	"the worker never waits ${max_streak_s}s for the registry's locks");
cmp_ok($gap, '<=', $max_gap_s, "delivery never stands still for ${max_gap_s}s while sending");
cmp_ok($read_gap, '<=', $max_gap_s, "no ${max_gap_s}s between two reads while sending");
is(scalar @$committed, $processed, 'the business table holds each committed transaction');
check_delivery('many senders', $committed, $received);

$node->stop;
done_testing();
