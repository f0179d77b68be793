# Without shared_preload_libraries, outbox_send() still stores events and
# says once per session that no worker will deliver them; once the library
# is preloaded, the stored events are delivered.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = start_broker(topics => ['late:2']);
my $node = PostgreSQL::Test::Cluster->new('not_preloaded');
$node->init;
$node->append_conf('postgresql.conf', qq{
outbox.brokers = '@{[ $broker->bootstrap ]}'
outbox.message_format = 'payload'
outbox.shards = 2
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION outbox');

my ($out, $err) = ('', '');
$node->psql('postgres', q{
SELECT outbox_send('late', 'first', 'k');
SELECT outbox_send('late', 'second', 'k');
}, stdout => \$out, stderr => \$err);
my @warnings = ($err =~ /WARNING:  outbox is not in shared_preload_libraries/g);
is(scalar @warnings, 1, 'one WARNING per session, not one per event');
unlike($err, qr/invalid configuration parameter/, 'startup-only settings in the file are not flagged');
like($err, qr/HINT:  Add outbox to shared_preload_libraries/, 'the WARNING says what to do');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox'), '2', 'both events stored');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox WHERE shard <> outbox_shard_of('\x6b', id)}),
	'0', 'placed by the configured outbox.shards');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox shard'}),
	'0', 'no worker runs without preloading');

# Preload and restart: the stored events are delivered.
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'outbox'");
$node->restart;
ok(wait_for_empty($node, 60), 'events stored before preloading are delivered after');
my @values = map { $_->{value} } @{ consume($broker, 'late') };
is_deeply(\@values, [ 'first', 'second' ], 'in order, exactly once');

$node->stop;
$broker->stop;
done_testing();
