# What pg_stat_activity shows a waiting worker and the launcher wait for:
# from 17 on their own named wait events (listed in pg_wait_events too),
# before it the generic "Extension". On 18, pg_get_loaded_modules() names
# the library with its version, the extension's default version.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = start_broker(topics => ['waits:1']);
my $node = new_outbox_node('waits', $broker);
my $version = $node->safe_psql('postgres', 'SHOW server_version_num');
my $named = $version >= 170000;

# delivery works, so the worker then waits for the next event
$node->safe_psql('postgres', q{SELECT outbox_send('waits', 'one', 'k')});
ok(wait_for_empty($node), 'the event is delivered');

my %expected = $named
  ? ('outbox shard' => 'OutboxWorkerMain', 'outbox launcher' => 'OutboxLauncherMain')
  : ('outbox shard' => 'Extension', 'outbox launcher' => 'Extension');
for my $type (sort keys %expected)
{
	my $seen = '';
	my $ok = wait_until(30, sub {
		$seen = $node->safe_psql('postgres', qq{SELECT wait_event_type || '/' || wait_event
			FROM pg_stat_activity WHERE backend_type = '$type'});
		return $seen eq "Extension/$expected{$type}";
	});
	ok($ok, "$type waits on Extension/$expected{$type}") or diag("seen: '$seen'");
}

SKIP:
{
	skip 'named wait events are 17+', 1 unless $named;
	is($node->safe_psql('postgres', q{SELECT string_agg(name, ',' ORDER BY name)
		FROM pg_wait_events WHERE type = 'Extension' AND name LIKE 'Outbox%'}),
		'OutboxLauncherMain,OutboxWorkerMain', 'pg_wait_events lists the events in use');
}

SKIP:
{
	skip 'pg_get_loaded_modules() is 18+', 1 unless $version >= 180000;
	is($node->safe_psql('postgres', q{SELECT m.version = e.default_version
		FROM pg_get_loaded_modules() m, pg_available_extensions e
		WHERE m.module_name = 'outbox' AND e.name = 'outbox'}),
		't', 'pg_get_loaded_modules() reports the library version');
}

diag("FIGURES wait events: server_version_num=$version named=" . ($named ? 1 : 0));
done_testing();
