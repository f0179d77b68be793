# Monitoring from SQL with running workers: outbox_status counts what
# Kafka received and shows each shard's state as Kafka goes away and comes
# back, outbox_kafka_brokers follows the brokers' round trip, the lag
# WARNING appears once per shard and the recovery LOG after it, and
# outbox_explain() says why each kind of waiting event is not in Kafka yet;
# with hundreds of topics the brokers' statistics stay cheap and current.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest qw(!sql);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => ['st:3']);
my $node = new_outbox_node('status', $broker, shards => 2,
	kafka_config => "$OutboxTest::TEST_KAFKA_CONFIG,statistics.interval.ms=500",
	conf => "outbox.lag_warning = 0\n");
$node->safe_psql('postgres', 'CREATE DATABASE x');
$node->safe_psql('x', 'CREATE EXTENSION outbox');

sub sql { return $node->safe_psql($_[1] // 'postgres', $_[0]); }
sub send_event
{
	my ($topic, $value, $key, $db) = @_;
	return sql("SELECT outbox_send('$topic', '$value', '$key')", $db);
}
sub explain_event
{
	my ($id, $db) = @_;
	my ($status, $blocking, $detail) = split /\|/,
	  sql("SELECT status, blocking_id, detail FROM outbox_explain($id)", $db), 3;
	return { status => $status, blocking_id => $blocking, detail => $detail };
}

# ---- (a) a row per shard, each with its worker ---------------------------
ok(wait_query($node, 'postgres', q{SELECT count(*) = 2
	AND bool_and(state = 'idle' AND pid IS NOT NULL AND stats_reset IS NOT NULL)
	FROM outbox_status}), 'each of the 2 shards has an idle worker');

# ---- (b) the counters equal what Kafka received --------------------------
sql(q{SELECT count(*) FROM (SELECT outbox_send('st', 'c' || i, 'k' || (i % 10))
	FROM generate_series(1, 200) i) s});
ok(wait_for_empty($node, 60), '200 events delivered');
my $received = grep { $_->{value} =~ /^c\d+$/ } @{ consume($broker, 'st') };
my ($delivered, $failed, $shards_counting, $p50, $p99, $last) = split /\|/, sql(q{
	SELECT sum(delivered), sum(failed_attempts), count(*) FILTER (WHERE delivered > 0),
	       max(ack_latency_p50_ms), max(ack_latency_p99_ms), bool_and(last_delivered_at IS NOT NULL)
	FROM outbox_status});
diag(sprintf('FIGURES status counters: kafka=%d delivered=%d failed=%d p50=%.2fms p99=%.2fms',
		$received, $delivered, $failed, $p50, $p99));
is($received, 200, 'Kafka holds the 200 events');
is($delivered, $received, 'delivered counts what Kafka received');
is($failed, 0, 'no failed attempt counted');
is($shards_counting, 2, 'both shards counted deliveries');
ok($p50 > 0 && $p99 >= $p50, 'acknowledgement latency p50 and p99 reported');
is($last, 't', 'last_delivered_at set');

# ---- (c) brokers, their round trip, an event in flight -------------------
ok(wait_query($node, 'postgres', q{SELECT count(*) = 6
	AND count(DISTINCT shard) FILTER (WHERE state = 'UP') = 2 FROM outbox_kafka_brokers}, 20),
	'each shard lists the 3 brokers, those it uses up');
my $requests_before = sql('SELECT sum(requests) FROM outbox_kafka_brokers');
send_event('st', "req$_", 'kreq0') for 1 .. 3;
ok(wait_query($node, 'postgres', "SELECT sum(requests) >= $requests_before + 3 FROM outbox_kafka_brokers", 20),
	'outbox_kafka_brokers counts the requests a shard sent: one produce request per event sent alone');
$broker->command('rtt all 1500');
my $slow = send_event('st', 'slow', 'kslow');
ok(wait_until(10, sub { explain_event($slow)->{status} eq 'in_flight' }),
	'an event waiting for a slow acknowledgement is in_flight');
ok(wait_query($node, 'postgres', 'SELECT max(rtt_avg_ms) > 1000 FROM outbox_kafka_brokers', 20),
	'the raised round trip shows in outbox_kafka_brokers');
diag('FIGURES status brokers: ' . sql(q{SELECT string_agg(format('%s %s %s rtt=%sms', shard, broker,
	state, round(rtt_avg_ms::numeric, 1)), '; ') FROM outbox_kafka_brokers}));
$broker->command('rtt all 0');
ok(wait_for_empty($node, 30), 'the slow event delivered');

# ---- (d) Kafka down: waiting_for_kafka within 5 s, back after ------------
my $t0 = time;
$broker->command('down all');
my $noticed = wait_query($node, 'postgres', q{SELECT bool_and(state = 'waiting_for_kafka'
	AND last_error IS NOT NULL) FROM outbox_status}, 5);
my $after = time - $t0;
ok($noticed, 'both shards are waiting_for_kafka with a last_error within 5 s');
my $waiting = send_event('st', 'during-outage', 'kw');
ok(wait_until(5, sub { explain_event($waiting)->{status} eq 'waiting_for_kafka' }),
	'an event sent while Kafka is down is waiting_for_kafka');
ok(wait_query($node, 'postgres', q{SELECT bool_and(state <> 'UP') FROM outbox_kafka_brokers}, 10),
	'the brokers are shown down');
$t0 = time;
$broker->command('up all');
ok(wait_for_empty($node, 30), 'the event sent during the outage is delivered');
ok(wait_query($node, 'postgres',
		q{SELECT bool_and(state IN ('idle', 'delivering')) FROM outbox_status}, 10),
	'both shards are idle or delivering again')
  or diag('status: ' . sql(q{SELECT string_agg(format('%s %s %s', shard, state, last_error), '; ')
	FROM outbox_status}) . ' brokers: ' . sql(q{SELECT string_agg(format('%s %s %s', shard, broker,
	state), '; ') FROM outbox_kafka_brokers}));
diag(sprintf('FIGURES status outage: waiting_for_kafka after %.1f s, delivering again after %.1f s',
		$after, time - $t0));

# ---- (e) paused: lag grows, one WARNING per shard ------------------------
my $from = -s $node->logfile;
reload_with($node, "outbox.lag_warning = 3s\noutbox.enabled = off");
ok(wait_query($node, 'postgres', q{SELECT bool_and(state = 'paused') FROM outbox_status}, 10),
	'both shards paused');
my @paused = map { send_event('st', "paused-$_", "kp$_") } 1 .. 10;
is(explain_event($paused[0])->{status}, 'paused', 'an event sent while paused is paused');
ok(wait_query($node, 'postgres', q{SELECT count(*) = 2 AND bool_and(pending > 0 AND lag > interval '3 s')
	FROM outbox_status}, 20), 'the lag of both shards passes 3 s');
my $warning = qr/outbox "postgres" shard (\d): the oldest pending event is [\d.]+ s old, over outbox.lag_warning/;
ok(wait_until(10, sub { log_count($node, $warning, $from) >= 2 }), 'the lag WARNING is logged');
my $warned_at = time;
my $lag1 = sql(q{SELECT extract(epoch FROM max(lag)) FROM outbox_status});
sleep(3);
my $lag2 = sql(q{SELECT extract(epoch FROM max(lag)) FROM outbox_status});
ok($lag2 > $lag1, "the lag grows while paused ($lag1 s, then $lag2 s)");
reload_with($node, 'outbox.enabled = on');
ok(wait_for_empty($node, 30), 'the paused events are delivered once enabled');

# ---- (f) dead letter, retry wait, held, pending (database x) -------------
# Sends an event in database x that Kafka refuses (permanently) under the
# given settings, and waits until outbox_explain() gives it $status.
sub send_refused
{
	my ($settings, $value, $key, $status) = @_;
	reload_with($node, $settings);
	sleep(1);
	$broker->command('produce-errors 1 TOPIC_AUTHORIZATION_FAILED');
	my $id = send_event('st', $value, $key, 'x');
	ok(wait_until(30, sub { explain_event($id, 'x')->{status} eq $status }),
		"a refused event under '$settings' is $status");
	return $id;
}

my $dead = send_refused('outbox.max_attempts = 1', 'dead', 'kd', 'dead_letter');
like(explain_event($dead, 'x')->{detail}, qr/authorization/i, 'the dead letter explains its error');

my $poison = send_refused("outbox.max_attempts = 10\noutbox.retry_backoff_min = 60s\n"
	  . "outbox.retry_backoff_max = 120s", 'poison', 'kh', 'retry_wait');
my $behind = send_event('st', 'behind-poison', 'kh', 'x');
sleep(0.5);
like(explain_event($poison, 'x')->{detail}, qr/authorization.*next attempt at/i,
	'retry_wait names the error and the next attempt');
my $held = explain_event($behind, 'x');
is($held->{status}, 'held', 'a later event of its key is held');
is($held->{blocking_id}, $poison, '... behind the refused event');
my ($x_dead, $x_failed) = split /\|/, sql(q{SELECT sum(dead_lettered), sum(failed_attempts)
	FROM outbox_status}, 'x');
is($x_dead, 1, 'dead_lettered counts the dead letter');
ok($x_failed >= 2, "failed_attempts counts the refusals ($x_failed)");

reload_with($node, "outbox.databases = 'postgres'");
ok(wait_query($node, 'x', q{SELECT bool_and(state = 'stopped' AND pid IS NULL) FROM outbox_status}, 30),
	'a database left out of outbox.databases shows its shards stopped');
my $pending = explain_event(send_event('st', 'unserved', 'ku', 'x'), 'x');
is($pending->{status}, 'pending', 'an event of a shard without a worker is pending');
like($pending->{detail}, qr/stopped/, '... and says the worker is stopped');
reload_with($node, "outbox.databases = '*'");

# ---- (g) counters survive a worker restart; reset clears them ------------
my $before = sql('SELECT sum(delivered) FROM outbox_status');
my $old_pid = sql('SELECT pid FROM outbox_status WHERE shard = 0');
sql("SELECT pg_terminate_backend($old_pid)");
ok(wait_query($node, 'postgres', qq{SELECT pid IS NOT NULL AND pid <> $old_pid AND state = 'idle'
	FROM outbox_status WHERE shard = 0}, 40), 'the terminated worker is replaced');
is(sql('SELECT sum(delivered) FROM outbox_status'), $before,
	"the counters survive the worker's restart ($before)");
my $reset_before = sql('SELECT max(stats_reset) FROM outbox_status');
sql('SELECT outbox_stats_reset()');
is(sql(qq{SELECT bool_and(delivered = 0 AND failed_attempts = 0 AND dead_lettered = 0
	AND last_error IS NULL AND ack_latency_p50_ms IS NULL AND stats_reset > '$reset_before')
	FROM outbox_status}), 't', 'outbox_stats_reset() clears the counters and sets stats_reset');
is(sql('SELECT sum(dead_lettered) FROM outbox_status', 'x'), 1,
	"another database's counters are not reset");

# ---- (h) the recovery LOG, 10 s after the WARNING (lag_warning 3 s) -----
my $caught_up = qr/outbox "postgres" shard (\d): caught up: the oldest pending event is/;
ok(wait_until(25 - (time - $warned_at), sub { log_count($node, $caught_up, $from) >= 2 }),
	'each shard logs that it caught up');
my $log = log_since($node, $from);
for my $shard (0, 1)
{
	my $warnings = () = $log =~ /outbox "postgres" shard $shard: the oldest pending event/g;
	my $recoveries = () = $log =~ /outbox "postgres" shard $shard: caught up/g;
	is($warnings, 1, "shard $shard: one lag WARNING");
	is($recoveries, 1, "shard $shard: one recovery LOG");
}
like($log, qr/WARNING:  outbox "postgres" shard \d: the oldest pending event is .*\n.*DETAIL:  \d+ event\(s\) pending in shard \d; last error: /,
	'the WARNING names the pending count and the last error');

# ---- (i) many topics: the brokers' statistics stay cheap and current -----
# librdkafka's statistics list every partition of every topic; the worker
# reads only their brokers.
$from = -s $node->logfile;
sql(q{SELECT count(*) FROM (SELECT outbox_send('many' || t, 'm', 'k' || p)
	FROM generate_series(1, 300) t, generate_series(1, 4) p) s});
ok(wait_for_empty($node, 120), '1,200 events to 300 topics delivered');
sleep(2);
my @pids = grep { length } split /\n/, sql('SELECT pid FROM outbox_status ORDER BY shard');
# the workers' CPU, their main threads and librdkafka's threads apart
sub workers_cpu_s
{
	my %sum = (main => 0, librdkafka => 0);
	for my $pid (@pids)
	{
		my $t = thread_cpu_s($pid);
		$sum{$_} += $t->{$_} for keys %sum;
	}
	return \%sum;
}
my ($cpu0, $t1) = (workers_cpu_s(), time);
sleep(10);
my $cpu1 = workers_cpu_s();
my %idle_ms_per_s = map { $_ => ($cpu1->{$_} - $cpu0->{$_}) * 1000 / (time - $t1) / scalar(@pids) }
  qw(main librdkafka);
# a request to every broker while they are slow: each shard sees it (after
# the 1,200 events, no broker in use shows an earlier slow round trip)
ok(wait_query($node, 'postgres', q{SELECT coalesce(max(rtt_avg_ms), 0) < 300
	FROM outbox_kafka_brokers WHERE state = 'UP'}, 20), 'the brokers in use are fast');
$broker->command('rtt all 400');
sql(q{SELECT count(*) FROM (SELECT outbox_send('many' || t, 'slow', 'k' || (t % 4 + 1))
	FROM generate_series(1, 300) t) s});
my $followed = wait_query($node, 'postgres', q{SELECT count(DISTINCT shard) = 2
	FROM outbox_kafka_brokers WHERE rtt_avg_ms > 300}, 30);
$broker->command('rtt all 0');
ok(wait_for_empty($node, 60), 'the events sent while the brokers were slow are delivered');
diag(sprintf('FIGURES statistics with 300 topics x 4 partitions, every 500 ms: an idle worker\'s CPU, main thread %.1f ms/s, librdkafka\'s threads %.1f ms/s',
		@idle_ms_per_s{qw(main librdkafka)}));
ok($followed, 'with 300 topics, outbox_kafka_brokers still follows the round trip');
# The worker's main thread reads the statistics librdkafka's threads
# write: its share against theirs, in the same seconds, does not depend
# on the machine's speed (an absolute 30 ms/s failed on a slow day at
# 31.5, librdkafka's threads 23 of it). e11b06c parsed the whole
# statistics with jsonb_in: 48 ms/s in all, so its main thread took
# about as much as librdkafka's threads; 0.13 of theirs since.
cmp_ok($idle_ms_per_s{main}, '<', 0.5 * $idle_ms_per_s{librdkafka},
	'an idle worker with 300 topics: its main thread uses under half the CPU of librdkafka\'s threads');
unlike(log_since($node, $from), qr/statistics could not be read/, 'the statistics were read');

$node->stop;
done_testing();
