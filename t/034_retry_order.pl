# Retries keep their promises (review M2, H1, M7, M4):
#  (a) per-key order holds when more than 10,000 events wait for a retry:
#      E1 (key k) waits for its retry behind 10,001 waiting events with
#      lower ids (keyless ones, then keyed ones), E2 (key k) is due; Kafka
#      must get E1 before E2;
#  (b) outbox_dead_letter_retry() while the batch in flight fails (broker
#      down longer than message.timeout.ms): the retried events are
#      delivered within seconds, without a worker restart;
#  (c) an event for a topic Kafka does not know is dead-lettered after
#      outbox.max_attempts, and the later event of its key is delivered;
#  (d) a settle that keeps failing (a trigger refusing dead letters) never
#      re-sends the batch: no duplicates; an event with attempts = 1100 that
#      fails again is recorded (no overflow in the back-off arithmetic).
use strict;
use warnings;
use FindBin;
use IPC::Run;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => [ 'held:3', 'held2:3', 'order:3', 'h1load:3', 'retried:3',
	'm7good:3', 'm4:3' ]);
my $node = new_outbox_node('retry', $broker, shards => 1);
OutboxTest::create_sent_table($node);

# Reloads outbox.kafka_config and waits for the producer to be rebuilt.
sub set_kafka_config
{
	my ($extra) = @_;
	my $from = -s $node->logfile;
	reload_with($node, "outbox.kafka_config = '$OutboxTest::TEST_KAFKA_CONFIG$extra'");
	ok(wait_until(30, sub { log_since($node, $from) =~ /rebuilding the Kafka producer/ }),
		"producer rebuilt with '$extra'");
}

sub values_of
{
	my ($topic, $key) = @_;
	return [ map { $_->{value} } grep { !defined $key || $_->{key} eq $key } @{ consume($broker, $topic) } ];
}

# When the worker produced each message of $topic (Kafka's timestamp, ms).
# How often each of @values is in $topic: (missing, duplicates).
sub count_copies
{
	my ($topic, @values) = @_;
	my %n;
	$n{$_}++ for @{ values_of($topic) };
	my ($missing, $dups) = (0, 0);
	for (@values) { $n{$_} ? ($dups += $n{$_} - 1) : $missing++; }
	return ($missing, $dups);
}

# ---- (a) per-key order with more than 10,000 events waiting ---------------

for my $case ([ 'keyless', 'held', 'NULL::text', '1 hour' ], [ 'keyed', 'held2', q{'h' || g}, '15 seconds' ])
{
	my ($label, $held_topic, $held_key, $held_for) = @$case;
	ok(pause_delivery($node, 1), 'delivery paused');
	sql("SELECT count(outbox_send('$held_topic', 'h' || g, $held_key)) FROM generate_series(1, 10001) g");
	my $e1 = sql("SELECT outbox_send('order', 'E1-$label', 'k-$label')");
	sql("UPDATE outbox SET attempts = 1, last_error = 'set by the test', next_attempt_at = now()
	       + CASE id WHEN $e1 THEN interval '8 seconds' ELSE interval '$held_for' END
	     WHERE topic = '$held_topic' OR id = $e1");
	my $e2 = sql("SELECT outbox_send('order', 'E2-$label', 'k-$label')");
	cmp_ok($e1, '>', sql("SELECT max(id) FROM outbox WHERE topic = '$held_topic'"),
		"(a $label) E1 has a higher id than the 10,001 waiting events");
	my $t0 = time;
	reload_with($node, 'outbox.enabled = on');
	ok(wait_query($node, 'postgres', "SELECT count(*) = 0 FROM outbox WHERE id IN ($e1, $e2)", 60),
		"(a $label) E1 and E2 delivered");
	my $order = join(',', @{ values_of('order', "k-$label") });
	is($order, "E1-$label,E2-$label", "(a $label) Kafka got E1 before E2");
	diag(sprintf('FIGURES (a) M2 %s: waiting=10001 kafka_order=%s delivered_after_s=%.1f',
			$label, $order, time - $t0));
	sql("DELETE FROM outbox WHERE topic = '$held_topic'");
}

# ---- (b) dead letters retried while the batch in flight fails ----------------

my $pids_before = join(',', @{ worker_pids($node) });
sql('CREATE TABLE stop_load (x int)');
my $load = IPC::Run::start([ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-c', q{
DO $$
DECLARE i int := 0;
BEGIN
	WHILE NOT EXISTS (SELECT FROM stop_load) LOOP
		i := i + 1;
		INSERT INTO sent VALUES (40, i, 'k' || i % 5, 's40:' || i);
		PERFORM outbox_send('h1load', 's40:' || i, 'k' || i % 5);
		COMMIT;
		PERFORM pg_sleep(0.01);
	END LOOP;
END $$} ], '<', \undef, '>', '/dev/null', '2>', \my $load_err);
ok(wait_until(30, sub { @{ values_of('h1load') } >= 50 }), '(b) the load flows');
$broker->command('rtt all 500');
my ($rounds, $stuck_rounds, @latency) = (4, 0);
for my $round (1 .. $rounds)
{
	my $ids = join(',', split /\n/, sql(qq{
		INSERT INTO outbox_dead_letter (id, topic, key, payload, headers, created_at, attempts,
		                                last_error, failed_at)
		SELECT nextval('outbox_id_seq'), 'retried', NULL, convert_to('dl-$round-' || g, 'UTF8'),
		       NULL, now(), 3, 'planted by the test', now()
		FROM generate_series(1, 5) g RETURNING id}));
	sleep 1.5;    # the cursor moves past them
	is(sql('SELECT outbox_dead_letter_retry()'), '5', "(b$round) five dead letters put back");
	# the batch produced while the retry committed is answered 500 ms later:
	# take the brokers down before that, for longer than message.timeout.ms
	sleep 0.45;
	$broker->command('down all');
	sleep 6;
	$broker->command('up all');
	my $t0 = time;    # acknowledged = deleted (kcat is slow while the brokers lag)
	my $ok = wait_until(20, sub { sql("SELECT count(*) FROM outbox WHERE id IN ($ids)") eq '0' });
	push @latency, sprintf('%.1f', time - $t0);
	$stuck_rounds++ unless $ok;
	ok($ok, "(b$round) the retried dead letters are delivered within 20 s of the brokers' return");
}
my %dl = map { $_ => 1 } grep { /^dl-/ } @{ values_of('retried') };
is(scalar(keys %dl), 5 * $rounds, '(b) every retried dead letter is in Kafka');
sql('INSERT INTO stop_load VALUES (1)');
eval { $load->finish } or diag("load: $load_err");
$broker->command('rtt all 0');
ok(wait_for_empty($node, 30), '(b) the outbox drains');
check_delivery('(b) load during the dead-letter retries', committed_of($node, 40, 40),
	[ grep { $_->{value} =~ /^s40:/ } @{ consume($broker, 'h1load') } ]);
is(join(',', @{ worker_pids($node) }), $pids_before, '(b) no worker restarted');
diag("FIGURES (b) H1 dead-letter retry while the batch in flight fails: rounds=$rounds "
	  . "stuck_rounds=$stuck_rounds seconds_after_up=@latency");

# ---- (c) a topic Kafka does not know ----------------------------------------
# The mock broker creates any topic a Metadata request names: the error is
# set before any client names it. librdkafka 2.0.2 believes a topic does
# not exist only after topic.metadata.propagation.max.ms (30 s); with
# message.timeout.ms below that (5 s here) the message just times out
# (retriable): the probe shows it (its companion makes the worker record
# it). With the propagation time under the time-out, as in librdkafka's
# defaults (30 s < 300 s), UNKNOWN_TOPIC_OR_PART is reported and counts.
$broker->command('topic-error nosuch UNKNOWN_TOPIC_OR_PART');
my $probe = (split /\n/, sql(q{BEGIN; SELECT outbox_send('nosuch', 'probe', 'probe');
	SELECT outbox_send('m7probe', 'companion', 'c'); COMMIT}))[0];
wait_query($node, 'postgres', "SELECT last_error IS NOT NULL FROM outbox WHERE id = $probe", 30);
diag('FIGURES (c) M7 unknown topic, message.timeout.ms=5000: attempts|last_error='
	  . sql("SELECT attempts, last_error FROM outbox WHERE id = $probe"));
sql("DELETE FROM outbox WHERE id = $probe");

reload_with($node, "outbox.max_attempts = 3\noutbox.retry_backoff_min = 2s");
set_kafka_config(',topic.metadata.propagation.max.ms=1000');
my $bad = sql(q{SELECT outbox_send('nosuch', 'bad', 'm7')});
my $t0 = time;
ok(wait_query($node, 'postgres', "SELECT status = 'retry_wait' FROM outbox_explain($bad)", 20),
	'(c) the event for the unknown topic waits for its retry');
# sent while it waits: held behind it until it is a dead letter
my $good = sql(q{SELECT outbox_send('m7good', 'good-after-bad', 'm7')});
ok(wait_query($node, 'postgres',
		"SELECT status = 'held' AND blocking_id = $bad FROM outbox_explain($good)", 20),
	'(c) the later event of its key is held while the refused one waits for its retry');
ok(wait_query($node, 'postgres', "SELECT count(*) = 1 FROM outbox_dead_letter WHERE id = $bad", 45),
	'(c) the event for the unknown topic becomes a dead letter');
my $dead_s = time - $t0;
my ($dl_attempts, $dl_error) = split /\|/, sql("SELECT attempts, last_error FROM outbox_dead_letter WHERE id = $bad") . '|';
is($dl_attempts, 3, '(c) after outbox.max_attempts (3) attempts');
like($dl_error, qr/unknown topic/i, '(c) last_error names the unknown topic');
ok(wait_query($node, 'postgres', "SELECT count(*) = 0 FROM outbox WHERE id = $good", 15),
	'(c) the later event of its key is delivered');
is(join(',', @{ values_of('m7good') }), 'good-after-bad', '(c) once, in Kafka');
reload_with($node, 'outbox.retry_backoff_min = 200ms');
diag(sprintf("FIGURES (c) M7 unknown topic, propagation 1 s: dead_letter_after_s=%.1f attempts=%s last_error='%s'",
		$dead_s, $dl_attempts // '', $dl_error // ''));
sql('SELECT outbox_dead_letter_purge(\'0 s\')');

# ---- (d) a settle that keeps failing -----------------------------------------
# message.max.bytes=2000: librdkafka refuses the 5000-byte poison at once.

reload_with($node, 'outbox.max_attempts = 1');
set_kafka_config(',message.max.bytes=2000');
sql(q{CREATE FUNCTION refuse_dead_letter() RETURNS trigger LANGUAGE plpgsql
	AS $$ BEGIN RAISE EXCEPTION 'dead letters refused by the test'; END $$;
	CREATE TRIGGER refuse BEFORE INSERT ON outbox_dead_letter
	FOR EACH ROW EXECUTE FUNCTION refuse_dead_letter()});
my $offset = -s $node->logfile;
my @good = map { "good-$_" } 1 .. 20;
my $poison = (split /\n/, sql(join(";\n", 'BEGIN',
	(map { "SELECT outbox_send('m4', 'good-$_', 'g$_')" } 1 .. 10),
	q{SELECT outbox_send('m4', repeat('x', 5000), 'P')},
	(map { "SELECT outbox_send('m4', 'good-$_', 'g$_')" } 11 .. 20), 'COMMIT')))[10];
sleep 10;    # some 20-30 failed settles
my ($missing, $dups) = count_copies('m4', @good);
my $failures = log_count($node, qr/dead letters refused by the test/, $offset);
is($dups, 0, '(d) no good event sent twice while the settle keeps failing');
cmp_ok($failures, '>=', 1, '(d) the settle did fail');
sql('DROP TRIGGER refuse ON outbox_dead_letter');
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox', 30), '(d) the outbox drains once the trigger is gone');
is(sql("SELECT count(*) FROM outbox_dead_letter WHERE id = $poison"), '1', '(d) the poison is a dead letter');
my ($missing_end, $dups_end) = count_copies('m4', @good);
is("$missing_end/$dups_end", '0/0', '(d) every good event in Kafka exactly once');
diag("FIGURES (d) M4 settle failing 10 s: good=20 settle_failures_logged=$failures "
	  . "duplicates_after_10s=$dups missing_after_10s=$missing duplicates_end=$dups_end missing_end=$missing_end");

# attempts = 1100, max_attempts = 100000: one more failure is just recorded
reload_with($node, 'outbox.max_attempts = 100000');
ok(pause_delivery($node, 1), 'delivery paused');
my @good2 = map { "good2-$_" } 1 .. 5;
my $big = (split /\n/, sql(join(";\n", 'BEGIN',
	q{SELECT outbox_send('m4', repeat('y', 5000), 'P2')},
	(map { "SELECT outbox_send('m4', 'good2-$_', 'h$_')" } 1 .. 5), 'COMMIT')))[0];
sql("UPDATE outbox SET attempts = 1100 WHERE id = $big");
$offset = -s $node->logfile;
reload_with($node, 'outbox.enabled = on');
ok(wait_query($node, 'postgres', "SELECT attempts >= 1101 FROM outbox WHERE id = $big", 20),
	'(d) the failure after 1100 attempts is recorded');
ok(wait_query($node, 'postgres', q{SELECT count(*) = 1 FROM outbox}, 15), '(d) the good events delivered');
sleep 5;
($missing, $dups) = count_copies('m4', @good2);
my $overflows = log_count($node, qr/value out of range/, $offset);
is($overflows, 0, "(d) no 'value out of range' in the log");
is("$missing/$dups", '0/0', '(d) the good events of that batch are in Kafka exactly once');
my $wait_ms = sql("SELECT extract(epoch FROM next_attempt_at - last_attempt_at) * 1000 FROM outbox WHERE id = $big");
diag("FIGURES (d) M4 attempts=1100 max_attempts=100000: overflow_errors=$overflows duplicates=$dups "
	  . "missing=$missing next_wait_ms=$wait_ms");
sql("DELETE FROM outbox WHERE id = $big");

$node->stop;
$broker->stop;
done_testing();
