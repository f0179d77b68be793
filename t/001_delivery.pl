# Core delivery: committed events arrive exactly as sent, rolled-back ones
# never do, from several sessions and a trigger, with two shards; per-key
# order and Java-client partitioning hold; the envelope decodes with
# proto/outbox.proto alone; the outbox is empty afterwards.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $partitions = 6;
my $broker = start_broker(topics => [ "events:$partitions", 'orders:3', 'raw:2', 'envelope:1' ]);
my $node = new_outbox_node('delivery', $broker, shards => 2);

# Several sessions at once, one event per transaction, some rolled back.
my $load = start_load($node, sessions => 4, per_session => 250, topic => 'events');

# Meanwhile, events from a PL/pgSQL trigger on an ordinary table.
$node->safe_psql('postgres', q{
CREATE TABLE orders (id int PRIMARY KEY, customer text, total numeric);
CREATE FUNCTION orders_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox_send('orders', to_jsonb(NEW), NEW.customer,
                        jsonb_build_object('op', TG_OP));
    RETURN NEW;
END $$;
CREATE TRIGGER orders_outbox AFTER INSERT OR UPDATE ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_to_outbox();
INSERT INTO orders VALUES (1, 'alice', 10), (2, 'bob', 20);
BEGIN; INSERT INTO orders VALUES (3, 'carol', 30); ROLLBACK;
UPDATE orders SET total = 11 WHERE id = 1;
});

wait_load($load);
ok(wait_for_empty($node), 'the outbox drains');

my $committed = committed_events($node);
my $received = consume($broker, 'events');
my $r = check_delivery('concurrent sessions, 2 shards', $committed, $received);
is($r->{duplicates}, 0, 'no duplicates without faults');

# Keyed messages sit where the Java client would put them.
my $misplaced = grep { $_->{partition} != kafka_partition($_->{key}, $partitions) } @$received;
is($misplaced, 0, 'every key is on the partition Kafka\'s murmur2 partitioner chooses');
# On a real cluster, ask the Java client itself.
if ($broker->can('java_partitions'))
{
	my %keys = map { $_->{key} => $_->{partition} } @$received;
	my $java = $broker->java_partitions($partitions, sort keys %keys);
	my @differ = grep { ($java->{$_} // -1) != $keys{$_} } sort keys %keys;
	is("@differ", '', 'every key is on the partition the Java client picks for it');
}

# Every message carries its event id; ids are unique.
my %ids = map { $_->{id} => 1 } grep { defined $_->{id} } @$received;
is(scalar keys %ids, scalar @$received, 'each message has a distinct outbox-id header');

# The trigger's events: the committed ones, in order, with their headers.
my $orders = consume($broker, 'orders');
is(scalar @$orders, 3, 'three trigger events committed, the rolled-back one absent');
my @alice = grep { $_->{key} eq 'alice' } @$orders;
is(scalar @alice, 2, 'insert and update of alice both arrived');
is($alice[0]{headers}{op}, 'INSERT', 'header round-trips (insert)');
is($alice[1]{headers}{op}, 'UPDATE', 'header round-trips (update), after the insert');
ok(!grep({ $_->{key} eq 'carol' } @$orders), 'rolled-back trigger event never sent');

# The raw payload format: the value is the payload's bytes; no key stays null.
$node->safe_psql('postgres', q{SELECT outbox_send('raw', 'plain text value')});
ok(wait_for_empty($node), 'payload-format event delivered');
my ($plain) = grep { $_->{value} eq 'plain text value' } @{ consume($broker, 'raw') };
ok($plain, 'payload format: the value is the payload itself');
is($plain->{key}, '', 'payload format: an event without a key has no key');

# The envelope (the default format), decoded by protoc with
# proto/outbox.proto alone.
$node->append_conf('postgresql.conf', "outbox.message_format = 'envelope'");
$node->reload;
# the workers take the change on SIGHUP; give them a moment
$node->poll_query_until('postgres', "SELECT current_setting('outbox.message_format') = 'envelope'");
sleep 2;
my $id = $node->safe_psql('postgres', q{
SELECT outbox_send('envelope', '{"n": 1}'::jsonb, 'dave', '{"trace": "abc", "x": "y"}')});
ok(wait_for_empty($node), 'the envelope event is delivered');
my $decoded = decode_envelope($broker, 'envelope', 0, 0);
note $decoded;
like($decoded, qr/^id: $id$/m, 'envelope: id');
like($decoded, qr/^topic: "envelope"$/m, 'envelope: topic');
like($decoded, qr/^key: "dave"$/m, 'envelope: key');
like($decoded, qr/^payload: "\{\\"n\\": 1\}"$/m, 'envelope: payload as sent (jsonb text)');
like($decoded, qr/key: "trace"\s+value: "abc"/, 'envelope: headers');
like($decoded, qr/^source_database: "postgres"$/m, 'envelope: source database');
like($decoded, qr/^created_at_us: \d{16}$/m, 'envelope: created_at in microseconds');

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox'), '0', 'outbox empty at the end');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0', 'no dead letters');

$node->stop;
$broker->stop;
done_testing();
