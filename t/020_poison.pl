# Poison events: an event Kafka refuses for good counts attempts on its
# row, waits longer each time, holds back only the later events of its key
# (other keys flow), and after outbox.max_attempts becomes a dead letter;
# the held events follow in their order, and outbox_dead_letter_retry()
# delivers the poison with its original id once the cause is gone.
# Permanent errors from the broker count the same way; retriable ones
# never count an attempt.
#
# Under injected produce errors the mock broker may report a message
# delivered that it never stored (see /work/shared/kafka-notes.md), so this
# test checks each event's outcome (its row, the dead letters, what Kafka
# holds afterwards), not a loss count.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $broker = start_broker(topics => [ 'poison:3', 'broker:3', 'retriable:3', 'stuck:3' ]);

# message.max.bytes=2000 overrides what the worker derives from
# outbox.max_message_bytes (1MB, which lets 5000 bytes through
# outbox_send()): librdkafka refuses the big event at produce time, every
# time. Back-off 5 s doubling to an 8 s cap, so that each state lasts long
# enough to be seen even on a slow machine: attempts at t0, t0+5 s,
# t0+13 s. Parts (b)-(d) use shorter waits.
my $small_kafka = "$OutboxTest::TEST_KAFKA_CONFIG,message.max.bytes=2000";
my $node = new_outbox_node('poison', $broker, shards => 1,
	kafka_config => $small_kafka,
	conf => "outbox.max_attempts = 3\n"
	  . "outbox.retry_backoff_min = 5s\n"
	  . "outbox.retry_backoff_max = 8s\n");

sub send_event
{
	my ($topic, $payload, $key) = @_;
	return sql("SELECT outbox_send('$topic', '$payload', '$key')");
}

sub row_of
{
	my ($id) = @_;
	my $r = sql("SELECT attempts, coalesce(last_error, ''), last_attempt_at IS NOT NULL,
	             coalesce(extract(epoch FROM next_attempt_at - last_attempt_at) * 1000, -1)::int
	           FROM outbox WHERE id = $id");
	return undef unless length $r;
	my @f = split /\|/, $r;
	return { attempts => $f[0], last_error => $f[1], attempted => $f[2], wait_ms => $f[3] };
}

# A first event, so that the producer is connected before the clock runs.
send_event('poison', 'warm-up', 'W');
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox'), 'warm-up event delivered');

# ---- (a) client-side poison: message too large for the producer ----------

my $log_offset = -s $node->logfile;
my $poison_id = sql(q{SELECT outbox_send('poison', repeat('x', 5000), 'P')});
my $t0 = time;
ok(wait_query($node, 'postgres', "SELECT attempts >= 1 FROM outbox WHERE id = $poison_id", 30),
	'the poison event fails its first attempt');
my $row = row_of($poison_id);
is($row->{attempts}, 1, 'first failure counts one attempt');
like($row->{last_error}, qr/size/i, 'last_error says the message is too large');
diag("poison last_error: $row->{last_error}");
ok($row->{attempted}, 'last_attempt_at set');
is($row->{wait_ms}, 5000, 'first retry waits outbox.retry_backoff_min (5 s)');

# While the poison waits: later events of its key, and events of other keys.
my @p_ids = map { send_event('poison', "small-P-$_", 'P') } 1 .. 3;
my $t_others = time;
my @o_ids;
for my $i (1 .. 3)
{
	push @o_ids, send_event('poison', "other-A-$i", 'A');
	push @o_ids, send_event('poison', "other-B-$i", 'B');
}
my $o_list = join(',', @o_ids);
my $p_list = join(',', @p_ids);
ok(wait_query($node, 'postgres', "SELECT count(*) = 0 FROM outbox WHERE id IN ($o_list)", 30),
	'events of other keys are delivered while the poison waits');
my $others_latency = time - $t_others;
diag(sprintf('FIGURES poison: other keys delivered %.2f s after sending, poison still waiting', $others_latency));
$row = row_of($poison_id);
ok(defined $row && $row->{attempts} < 3, 'the poison is still in the outbox, not yet a dead letter');
is(sql("SELECT count(*) FROM outbox WHERE id IN ($p_list) AND attempts = 0"), '3',
	'later events of the poison\'s key are held back in the outbox, no attempt counted');
my @now_in_kafka = @{ consume($broker, 'poison') };
is(scalar(grep { $_->{key} eq 'A' || $_->{key} eq 'B' } @now_in_kafka), 6,
	'all six other-key events are in Kafka');
is(scalar(grep { $_->{key} eq 'P' } @now_in_kafka), 0,
	'no event of the poison\'s key is in Kafka yet');

# The second attempt: the wait doubles up to the cap (5 s * 2 = 10 s > 8 s).
ok(wait_query($node, 'postgres', "SELECT coalesce((SELECT attempts >= 2 FROM outbox WHERE id = $poison_id), true)", 30),
	'the poison fails its second attempt');
$row = row_of($poison_id);
if ($row && $row->{attempts} == 2)
{
	is($row->{wait_ms}, 8000, 'second retry waits min(5 s * 2, retry_backoff_max = 8 s)');
	is(sql("SELECT count(*) FROM outbox WHERE id IN ($p_list)"), '3',
		'held events still wait behind the poison');
}
else
{
	fail('saw the poison with 2 attempts');
}

# The third failure makes it a dead letter, in the same transaction.
ok(wait_query($node, 'postgres', "SELECT count(*) = 1 FROM outbox_dead_letter WHERE id = $poison_id", 30),
	'after outbox.max_attempts the poison is a dead letter');
my $dead_after = time - $t0;
my $dl = sql("SELECT attempts, last_error, failed_at IS NOT NULL, length(payload), encode(key, 'escape')
            FROM outbox_dead_letter WHERE id = $poison_id");
my ($dl_attempts, $dl_error, $dl_failed, $dl_len, $dl_key) = split /\|/, $dl;
is($dl_attempts, 3, 'dead letter has attempts = 3');
like($dl_error, qr/size/i, 'dead letter keeps last_error');
is($dl_failed, 't', 'dead letter has failed_at');
is($dl_len, 5000, 'dead letter keeps the payload');
is($dl_key, 'P', 'dead letter keeps the key');
is(sql("SELECT count(*) FROM outbox WHERE id = $poison_id"), '0', 'the poison is gone from the outbox');
ok($node->wait_for_log(qr/moved 1 event\(s\) to outbox_dead_letter after 3 attempts/, $log_offset),
	'the move to the dead letters is logged');

# The held events now flow, in their send order.
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox', 30), 'held events delivered after the dead-lettering');
my $released_after = time - $t0;
diag(sprintf('FIGURES poison: dead letter %.2f s after sending, held events delivered %.2f s after sending',
		$dead_after, $released_after));
my @p_msgs = grep { $_->{key} eq 'P' } @{ consume($broker, 'poison') };
is(join(',', map { $_->{value} } @p_msgs), 'small-P-1,small-P-2,small-P-3',
	'held events arrive in their send order, and the poison not at all');
is(join(',', map { $_->{id} } @p_msgs), $p_list, 'held events carry their ids');

# Lift the cause (no message.max.bytes override) and put the poison back.
$log_offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "outbox.kafka_config = '$OutboxTest::TEST_KAFKA_CONFIG'\n"
	  . "outbox.retry_backoff_min = 500ms\noutbox.retry_backoff_max = 1s\n");
$node->reload;
$node->wait_for_log(qr/rebuilding the Kafka producer/, $log_offset);
is(sql('SELECT outbox_dead_letter_retry()'), '1', 'outbox_dead_letter_retry() puts the poison back');
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox', 30), 'the retried event is delivered');
is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'no dead letters left');
my ($big) = grep { $_->{key} eq 'P' && length($_->{value}) == 5000 } @{ consume($broker, 'poison') };
ok($big, 'the 5000-byte event arrived');
is($big && $big->{id}, $poison_id, 'with its original id in the outbox-id header');

# ---- (b) broker-side permanent error: INVALID_RECORD ----------------------
# Nothing in flight; each attempt of the one event is one Produce request,
# so exactly max_attempts errors cover it.
is(sql('SELECT count(*) FROM outbox'), '0', 'outbox empty before the broker errors');
$broker->command('produce-errors 3 INVALID_RECORD');
$log_offset = -s $node->logfile;
my $q_id = send_event('broker', 'refused-by-broker', 'Q');
$t0 = time;
ok(wait_query($node, 'postgres', "SELECT coalesce((SELECT attempts >= 1 FROM outbox WHERE id = $q_id), true)", 30),
	'the broker-refused event fails an attempt');
$row = row_of($q_id);
if ($row)
{
	is($row->{last_error}, 'Broker: Broker failed to validate record',
		'last_error is the broker\'s INVALID_RECORD text');
	cmp_ok($row->{attempts}, '>=', 1, 'an attempt is counted');
}
else
{
	fail('saw the broker-refused event fail an attempt');
}
ok(wait_query($node, 'postgres', "SELECT count(*) = 1 FROM outbox_dead_letter WHERE id = $q_id", 30),
	'after max_attempts broker refusals the event is a dead letter');
diag(sprintf('FIGURES broker INVALID_RECORD: dead letter %.2f s after sending', time - $t0));
($dl_attempts, $dl_error) = split /\|/,
  sql("SELECT attempts, last_error FROM outbox_dead_letter WHERE id = $q_id");
is($dl_attempts, 3, 'dead letter after exactly 3 attempts');
is($dl_error, 'Broker: Broker failed to validate record', 'dead letter keeps the broker error');
is(scalar(grep { $_->{value} eq 'refused-by-broker' } @{ consume($broker, 'broker') }), 0,
	'the refused event is not in Kafka');

# The injected errors are used up: a later event goes through at once.
my $filler = send_event('broker', 'after-errors', 'F');
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox', 30), 'an event after the errors is delivered');
is(sql("SELECT count(*) FROM outbox_dead_letter WHERE id = $filler"), '0', 'and is no dead letter');
sql("SELECT outbox_dead_letter_purge('0 s')");

# ---- (c) retriable errors never count an attempt --------------------------
# The events are sent one at a time, each once the one before left the
# outbox: with several Produce requests in flight, the mock broker (which
# does not check idempotent sequence numbers) acknowledges a message it
# never stored once a later request succeeds (see tools/outbox_broker.c);
# a real broker refuses the later request instead.
for my $err ('NOT_LEADER_FOR_PARTITION', 'REQUEST_TIMED_OUT')
{
	$broker->command("produce-errors 3 $err");
	# sample each row until it is gone: none may ever show an attempt
	my ($max_attempts, $errors_seen, $samples) = (0, 0, 0);
	my @ids;
	for my $i (1 .. 5)
	{
		push @ids, send_event('retriable', "$err-$i", "R$i");
		my $deadline = time + 30;
		while (time < $deadline)
		{
			my ($n, $max, $errs) = split /\|/,
			  sql("SELECT count(*), coalesce(max(attempts), 0), count(last_error) FROM outbox WHERE id = $ids[-1]");
			$samples++;
			$max_attempts = $max if $max > $max_attempts;
			$errors_seen += $errs;
			last if $n == 0;
			usleep(20_000);
		}
	}
	my $list = join(',', @ids);
	is(sql("SELECT count(*) FROM outbox WHERE id IN ($list)"), '0', "$err: events leave the outbox");
	is($max_attempts, 0, "$err: no attempt counted ($samples samples)");
	is(sql("SELECT count(*) FROM outbox_dead_letter"), '0', "$err: no dead letters");
	my %got = map { $_->{value} => 1 } @{ consume($broker, 'retriable') };
	my $arrived = grep { $got{"$err-$_"} } 1 .. 5;
	diag("FIGURES retriable $err: 5 sent, $arrived read back from Kafka, rows with last_error seen: $errors_seen");
	is($arrived, 5, "$err: the events arrive");
}

# ---- (d) a retriable failure the worker sees: a partition whose leader is down
# The message times out (_MSG_TIMED_OUT, retriable) while another key's
# message in the same batch is delivered (a partition made leaderless
# with "leader ... -1" would do the same, but crashes the mock cluster of
# librdkafka 2.8 and 2.14 once a producer knew its leader): the row
# records the error and a
# retry time but no attempt, is retried past max_attempts cycles without
# becoming a dead letter, and is delivered once its leader is back.
$log_offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "outbox.kafka_config = 'message.timeout.ms=1500,socket.timeout.ms=3000'");
$node->reload;
$node->wait_for_log(qr/rebuilding the Kafka producer/, $log_offset);
my ($stuck_key) = grep { kafka_partition($_, 3) == 0 } map { "S$_" } 1 .. 50;
my ($free_key) = grep { kafka_partition($_, 3) != 0 } map { "G$_" } 1 .. 50;
# let the new producer learn the topic first
send_event('stuck', 'stuck-warm-up', $free_key);
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox'), 'stuck topic warmed up');
$broker->command('leader stuck 0 2');
$broker->command("leader stuck $_ 1") for 1, 2;
$broker->command('down 2');
my ($stuck_id, $free_id);
{
	my $ids = sql("BEGIN;
		SELECT outbox_send('stuck', 'stuck-1', '$stuck_key');
		SELECT outbox_send('stuck', 'free-1', '$free_key');
		COMMIT;");
	($stuck_id, $free_id) = grep { /^\d+$/ } split /\n/, $ids;
}
my $stuck_later = send_event('stuck', 'stuck-2', $stuck_key);
$t0 = time;
ok(wait_query($node, 'postgres', "SELECT count(*) = 0 FROM outbox WHERE id = $free_id", 30),
	'the other key in the same batch is delivered');
ok(wait_query($node, 'postgres', "SELECT last_error IS NOT NULL FROM outbox WHERE id = $stuck_id", 30),
	'the event on the partition whose leader is down records its failure');
$row = row_of($stuck_id);
diag("partition with its leader down, last_error: $row->{last_error}");
like($row->{last_error}, qr/timed out/i, 'last_error is a timeout');
is($row->{attempts}, 0, 'a retriable failure counts no attempt');
is($row->{wait_ms}, 500, 'it waits the shortest back-off (500 ms), uncounted');
# more than max_attempts (3) cycles of a 1.5 s time-out and a 0.5-1 s back-off
sleep 12;
is(sql("SELECT attempts FROM outbox WHERE id = $stuck_id"), '0',
	'still no attempt counted after several failed cycles');
is(sql("SELECT count(*) FROM outbox WHERE id = $stuck_later"), '1',
	'the later event of its key waits in the outbox');
is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'retriable failures make no dead letter');
$broker->command('up 2');
ok(wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox', 60), 'delivered once the leader is back');
diag(sprintf('FIGURES partition with its leader down: stuck events delivered %.2f s after sending', time - $t0));
my @stuck = grep { $_->{key} eq $stuck_key } @{ consume($broker, 'stuck') };
is(join(',', map { $_->{value} } @stuck), 'stuck-1,stuck-2', 'both stuck events arrive, in order');

$node->stop;
$broker->stop;
done_testing();
