# Duplicates after a whole-cluster outage (issue 40), on the real cluster,
# at about 1000 events/s (pgbench), with the producer's default time-outs.
# (a) Answers lost: a proxy in front of the brokers
# (tools/kafka/produce_proxy.pl) passes a Produce request on, Kafka writes
# it, and the proxy answers REQUEST_TIMED_OUT in its place, as a broker
# back from a pause answers what waited too long for its followers. When a
# later request of the partition succeeds, librdkafka reports the events of
# the lost one delivered without an offset (the proxy loses a request
# librdkafka can follow, one leaving its partitions at most 4 records
# unanswered, and holds its answer until such a request went out, at most
# 2 s: left to chance, CI runs saw none); the worker produces them again
# (src/kafka/errors.c), and only them: each at most one duplicate, and it
# leaves what librdkafka holds to it (src/worker/worker.c,
# withdraw_queued). (b) As bench/parts/Debezium.pm: every broker paused
# (SIGSTOP) for 60 s, librdkafka's socket.timeout.ms, while the events
# come, then resumed. The requests in flight when the brokers stopped time
# out, or are answered with an error though written, as they come back:
# the same unproven acknowledgements, at most what was in flight then
# (the window, outbox.window_size). Before the fix,
# one of them made the worker drop librdkafka's queue, with the retries of
# those requests in it: the gap-less producer failed, was rebuilt, and
# what it had in flight went again (511 duplicates in the benchmark).
# Asserted for each: nothing lost, nothing rolled back sent, per-key
# order, duplicates within docs/guarantees.md's bound, and only of events
# the worker said Kafka may have written (its log: reported without an
# offset, failed after an unanswered request, or never reported before a
# rebuild); in (a) no producer rebuilt, in (b) none for a purge of the
# worker's. Whether librdkafka itself fails as the brokers come back is a
# race with their return (CI once saw it; its reason is printed).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use List::Util qw(sum0);
use Time::HiRes qw(time sleep);

my $rate = 1000;
my $outage_s = 60;
my $partitions = 6;

my $cluster = start_real_kafka(proxied => 1, topics => [ "lost:$partitions", "outage:$partitions" ]);
my ($proxy, $proxy_out) = start_produce_proxy($cluster);

# the production defaults (message.timeout.ms 5 min, socket.timeout.ms
# 60 s), as in the benchmark, but for librdkafka's eos debug lines in the
# log (IMPLICITACK: the events reported delivered without an offset); the
# worker goes through the proxy
my $node = new_outbox_node('outage_duplicates', bless({ bootstrap => $cluster->bootstrap_proxied }, 'ProxiedKafka'),
	kafka_config => 'debug=eos', conf => 'log_min_messages = debug1');
OutboxTest::create_sent_table($node);
$node->safe_psql('postgres', 'CREATE SEQUENCE sent_seq');

# pgbench at $rate/s for $seconds into $topic, each event committed with
# its row in sent: client c is session $first + c, keys "s<session>-k0"
# .."-k249", seq from one sequence (a key's seq is its commit order); one
# transaction in 7 rolled back. In the background.
sub start_pgbench
{
	my ($topic, $first, $seconds) = @_;
	my $script = PostgreSQL::Test::Utils::tempdir() . "/$topic.sql";
	PostgreSQL::Test::Utils::append_to_file($script, qq{\\set k random(0, 249)
\\set rb random(1, 7)
\\set s :client_id + $first
BEGIN;
INSERT INTO sent SELECT :s, n, 's' || :s || '-k' || :k, 's' || :s || ':' || n FROM nextval('sent_seq') n;
SELECT outbox_send('$topic', 's' || :s || ':' || currval('sent_seq'), 's' || :s || '-k' || :k);
\\if :rb = 7
ROLLBACK;
\\else
COMMIT;
\\endif
});
	my %run = (out => '', err => '');
	$run{h} = IPC::Run::start(
		[ 'pgbench', '-n', '-c', 4, '-j', 2, '-R', $rate, '-T', $seconds, '-f', $script,
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'<', \undef, '>', \$run{out}, '2>', \$run{err}, IPC::Run::timeout($seconds + 120));
	return \%run;
}

sub finish_pgbench
{
	my ($label, $run) = @_;
	ok($run->{h}->finish, "$label: pgbench ran") or diag($run->{err});
	return $run->{out} =~ /number of transactions actually processed: (\d+)/ ? $1 : 0;
}

# What reached $topic against what sessions $first.. committed; since
# $offset, no event twice but those the worker said Kafka may have
# written (and within $bound), and no producer rebuilt: none for a purge
# of the worker's (librdkafka's reason names it) if $kafka_may_rebuild,
# else none at all.
sub check_topic
{
	my ($label, $topic, $first, $bound, $offset, $kafka_may_rebuild) = @_;
	my $received = [ grep { $_->{value} !~ /^warm-/ } @{ consume($cluster, $topic) } ];
	my $r = check_delivery($label, committed_of($node, $first, $first + 3), $received);
	my $log = log_since($node, $offset);
	$r->{unproven} = sum0($log =~ /IMPLICITACK: .* (\d+) message\(s\) implicitly acked/g);
	$r->{unconfirmed} = sum0($log =~ /(\d+) event\(s\) Kafka may have written are produced again/g);
	cmp_ok($r->{duplicates}, '<=', $r->{unconfirmed},
		"$label: no duplicates but the $r->{unconfirmed} event(s) Kafka may have written");
	cmp_ok($r->{duplicates}, '<=', $bound, "$label: duplicates within $bound");
	my @reasons = $log =~ /the Kafka producer failed, rebuilding it\n.*DETAIL:\s*(.*)\n/g;
	diag("$label: the producer was rebuilt: $_") for @reasons;
	$r->{rebuilt} = scalar @reasons;
	if ($kafka_may_rebuild)
	{
		is(scalar(grep { /Purged/ } @reasons), 0, "$label: the producer is not rebuilt for a purge of the worker's");
	}
	else
	{
		is($r->{rebuilt}, 0, "$label: the producer is not rebuilt");
	}
	my %copies;
	push @{ $copies{ $_->{value} } }, $_ for @$received;
	my @dups = sort { $a->{id} <=> $b->{id} } map { $_->[0] } grep { @$_ > 1 } values %copies;
	return ($r, \@dups, \%copies);
}

# Before each part: a few events, so that the producer is connected and
# every partition acknowledged some, as in a running system.
sub warm
{
	my ($topic) = @_;
	$node->safe_psql('postgres',
		"SELECT outbox_send('$topic', 'warm-' || i, 'warm-' || i) FROM generate_series(1, 60) i");
	ok(wait_for_empty($node, 60), "$topic: delivery flows");
}

# ---- (a) answers lost under load ----
warm('lost');
my $offset = -s $node->logfile;
my $load = start_pgbench('lost', 1, 12);
for (1 .. 3)
{
	sleep 3;
	$proxy->signal('USR2');
}
my $processed = finish_pgbench('answers lost', $load);
ok(wait_for_empty($node, 120), 'answers lost: the outbox drains');
$proxy->pump_nb;
my @lost = $$proxy_out =~ /^lost the answer to Produce request .* records=(\d+)$/mg;
my $lost_records = sum0(@lost);
note($$proxy_out);
cmp_ok(scalar @lost, '>=', 3, 'answers lost: the proxy lost answers to Produce requests');
my ($ra) = check_topic('answers lost', 'lost', 1, $lost_records, $offset, 0);
cmp_ok($ra->{unproven}, '>', 0, 'answers lost: some events were reported delivered without an offset');
diag(sprintf('FIGURES answers lost: rate=%d processed=%d lost_requests=%d lost_records=%d '
		  . 'unproven=%d unconfirmed=%d duplicates=%d producer_rebuilt=%d',
		$rate, $processed, scalar @lost, $lost_records, $ra->{unproven}, $ra->{unconfirmed},
		$ra->{duplicates}, $ra->{rebuilt}));

# ---- (b) every broker paused for 60 s ----
# One after the other, 0.5 s apart, under load (an outage is seldom one
# instant): what a leader had written when it stopped waits there for
# followers stopped before it, and is answered REQUEST_TIMED_OUT once it
# is back, the request's time-out long past.
warm('outage');
$offset = -s $node->logfile;
$load = start_pgbench('outage', 11, $outage_s + 4);
sleep 2;
my $paused = time;
for my $i (1 .. 3)
{
	$cluster->pause_broker($i);
	sleep 0.5 if $i < 3;
}
sleep $outage_s - (time - $paused);
my $pending = $node->safe_psql('postgres', 'SELECT count(*) FROM outbox');
$cluster->resume_broker($_) for 1 .. 3;
my $down_s = time - $paused;
$processed = finish_pgbench('cluster paused', $load);
ok($pending > 0, "cluster paused: events waited in the outbox ($pending)");
my $back = time;
ok(wait_for_empty($node, 300), 'cluster paused: the outbox drains');
my $recovery_s = time - $back;
# at most what was in flight: the window
my ($rb, $dups, $copies) = check_topic('cluster paused', 'outage', 11, 10000, $offset, 1);

# which events came twice: when they were committed (the record's
# timestamp), in seconds after the brokers stopped
my @at = map { $_->{timestamp} / 1000 - $paused } @$dups;
diag(sprintf('cluster paused: %s (id %d) committed %.2f s into the outage, partition %d offsets %s',
		$dups->[$_]{value}, $dups->[$_]{id}, $at[$_], $dups->[$_]{partition},
		join(',', map { $_->{offset} } @{ $copies->{ $dups->[$_]{value} } })))
  for 0 .. ($#$dups < 29 ? $#$dups : 29);
diag(sprintf('FIGURES cluster paused: down_s=%.1f rate=%d processed=%d pending_at_resume=%d '
		  . 'recovery_s=%.1f unproven=%d unconfirmed=%d duplicates=%d duplicates_committed_in_first_s=%d '
		  . 'producer_rebuilt=%d',
		$down_s, $rate, $processed, $pending, $recovery_s, $rb->{unproven}, $rb->{unconfirmed},
		$rb->{duplicates}, scalar(grep { $_ < 1 } @at), $rb->{rebuilt}));

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0', 'no dead letters');
$node->stop;
$proxy->kill_kill;
$cluster->stop;
done_testing();

package ProxiedKafka;
sub bootstrap { return $_[0]{bootstrap}; }
