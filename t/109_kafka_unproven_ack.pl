# Kafka's acknowledgement of a later request does not prove an earlier one
# was written. A proxy in front of the brokers (tools/kafka/produce_proxy.pl)
# answers a fresh producer's first Produce request to a partition with a
# retriable error (NOT_ENOUGH_REPLICAS), without passing it on, while the
# next ones go through: the real broker, holding no state for the producer
# there, writes the next ones (it takes any sequence number), and
# librdkafka reports the refused message delivered, without an offset (an
# "implicit acknowledgement", its debug context eos says IMPLICITACK).
# The worker takes only an offset as proof (src/kafka/errors.c): the event is
# produced again and every one arrives (without that: 19 of 20, and 18 of
# 20 when a keyed opener's request is the one refused).
# Keyless events, and a keyed partition opener followed by keyless ones; in
# exactly-once mode, keyless events read with read_committed.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $cluster = start_real_kafka(proxied => 1, topics => [ 'keyless:1', 'opener:1' ]);
my ($in, $out, $err) = ('', '', '');
my $proxy = IPC::Run::start(
	[ 'perl', "$FindBin::RealBin/../tools/kafka/produce_proxy.pl", $cluster->proxy_routes ],
	'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(600));
$proxy->pump until $out =~ /^ready$/m;
END { $proxy->kill_kill if $proxy && $proxy->pumpable; }

# what the worker is pointed at: the brokers, through the proxy
my $through_proxy = bless { bootstrap => $cluster->bootstrap_proxied }, 'ProxiedKafka';
# one message a request: the burst is several requests in flight at once
my $node = new_outbox_node('unproven_ack', $through_proxy, shards => 1,
	kafka_config => "$OutboxTest::TEST_KAFKA_CONFIG,batch.num.messages=1");

my @figures;
for my $case ([ keyless => 'keyless events', 'NULL' ],
	[ opener => 'a keyed opener, then keyless events', "CASE WHEN i = 1 THEN 'k' END" ])
{
	my ($topic, $label, $key) = @$case;
	ok(pause_delivery($node, 1), "$label: delivery paused");
	$node->safe_psql('postgres',
		"SELECT outbox_send('$topic', 'e' || i, $key) FROM generate_series(1, 20) i");
	$out = '';
	$proxy->signal('USR1');
	my $t0 = time;
	reload_with($node, 'outbox.enabled = on');
	ok(wait_for_empty($node, 120), "$label: the outbox drains");
	my $drained = time - $t0;
	$proxy->pump_nb;
	like($out, qr/^refused Produce request/m, "$label: the proxy refused the first Produce request");
	my $records = consume($cluster, $topic);
	my %seen;
	my @got = grep { !$seen{$_}++ } map { $_->{value} } @$records;
	is_deeply([ sort @got ], [ sort map { "e$_" } 1 .. 20 ],
		"$label: every event arrived, the one acknowledged without an offset too");
	is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0',
		"$label: no dead letter");
	push @figures, sprintf('%s: drained_s=%.1f arrived=%d of 20, records=%d', $topic, $drained,
		scalar @got, scalar @$records);
}
$node->stop;

# Exactly once: the transaction that holds such a report is aborted and
# read again; a read_committed consumer sees each event once.
$cluster->create_topic('eos', partitions => 1);
$cluster->create_topic('outbox_progress', partitions => 3,
	config => { 'cleanup.policy' => 'compact', 'segment.ms' => 60000 });
my $eos = new_outbox_node('unproven_ack_eos', $through_proxy, shards => 1,
	kafka_config => "$OutboxTest::TEST_KAFKA_CONFIG,batch.num.messages=1",
	conf => 'outbox.delivery = exactly_once');
ok(pause_delivery($eos, 1), 'exactly once: delivery paused');
$eos->safe_psql('postgres', "SELECT outbox_send('eos', 'e' || i) FROM generate_series(1, 20) i");
$out = '';
$proxy->signal('USR1');
reload_with($eos, 'outbox.enabled = on');
ok(wait_for_empty($eos, 120), 'exactly once: the outbox drains');
$proxy->pump_nb;
like($out, qr/^refused Produce request/m, 'exactly once: the proxy refused a Produce request');
my $committed = consume($cluster, 'eos', undef, 'read_committed');
is_deeply([ sort map { $_->{value} } @$committed ], [ sort map { "e$_" } 1 .. 20 ],
	'exactly once: read_committed, every event once');
push @figures, sprintf('eos: read_committed records=%d', scalar @$committed);
$eos->stop;

diag("FIGURES unproven acknowledgements, real Kafka, first request refused: @figures");
$proxy->kill_kill;
$cluster->stop;
done_testing();

package ProxiedKafka;
sub bootstrap { return $_[0]{bootstrap}; }
