# A refusal for size is the record batch's, not an event's: Kafka checks a
# topic's max.message.bytes against the whole batch the producer built
# (t/103_kafka_topics shows it on a real cluster). Here the project's
# broker refuses one whole Produce request with MSG_SIZE_TOO_LARGE: its
# events are sent again each in a batch of its own and delivered, none
# counts an attempt, per-key order holds. An event refused for size when
# it was alone counts, and becomes a dead letter.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $broker = start_broker(topics => [ 'sized:1', 'alone:1' ]);
my $node = new_outbox_node('batch_size', $broker, shards => 1, conf => q{
outbox.max_attempts = 1
outbox.enabled = off
});

sql(q{SELECT outbox_send('sized', 'k' || (i % 5) || ':' || i, 'k' || (i % 5)) FROM generate_series(1, 60) i});
$broker->command('produce-errors 1 MSG_SIZE_TOO_LARGE');
my $t0 = time;
reload_with($node, 'outbox.enabled = on');
ok(wait_for_empty($node, 60), 'the events of the refused batch leave the outbox');
my $drained = time - $t0;
is(sql('SELECT count(*) FROM outbox_dead_letter'), '0',
	'none of them counted an attempt (outbox.max_attempts = 1)');
my $messages = consume($broker, 'sized');
my %seen = map { $_->{value} => 1 } @$messages;
is(scalar keys %seen, 60, 'all 60 arrived');
my (%last, $out_of_order);
for my $m (@$messages)
{
	my ($key, $seq) = split /:/, $m->{value};
	$out_of_order++ if defined $last{$key} && $seq < $last{$key};
	$last{$key} = $seq;
}
is($out_of_order // 0, 0, 'per key in commit order');

# Refused in a batch, then refused alone: that one counts.
$broker->command('produce-errors 2 MSG_SIZE_TOO_LARGE');
sql(q{SELECT outbox_send('alone', 'too large', 'big')});
ok(wait_query($node, 'postgres', 'SELECT count(*) = 1 FROM outbox_dead_letter', 60),
	'an event refused for size when alone becomes a dead letter');
like(sql('SELECT last_error FROM outbox_dead_letter'), qr/size too large/i,
	'with the broker\'s error');
sql(q{SELECT outbox_send('alone', 'next', 'big')});
ok(wait_for_empty($node, 60), 'its key\'s next event is delivered');
is(join(',', map { $_->{value} } @{ consume($broker, 'alone') }), 'next',
	'and only that one is in Kafka');
diag(sprintf('FIGURES batch_size_refusal: events=60 refused_batches=1 dead_letters=0 drained_s=%.1f', $drained));

$node->stop;
$broker->stop;
done_testing();
