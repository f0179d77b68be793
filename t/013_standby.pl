# A streaming standby replays the outbox but must not deliver it: its
# workers wait for promotion. The primary is paused (outbox.enabled = off)
# so events accumulate; after the primary stops and the standby is
# promoted, the new primary delivers every event committed on the old one,
# and the new ones it commits itself.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $shards = 2;
my $broker = start_broker(topics => [ 'failover:6' ]);
my $primary = new_outbox_node('primary', $broker, shards => $shards,
	allows_streaming => 1);

sub all_shards_logged
{
	my ($node, $offset, $what) = @_;
	my $log = log_since($node, $offset);
	return !grep { $log !~ /outbox "postgres" shard $_: \Q$what\E/ } 0 .. $shards - 1;
}

# ---- pause the primary, build the standby -----------------------------------

my $offset = -s $primary->logfile;
$primary->append_conf('postgresql.conf', "outbox.enabled = off\n");
$primary->reload;
ok(wait_until(30, sub { all_shards_logged($primary, $offset, 'delivery paused') }),
	'the primary\'s workers pause');

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
# the standby inherited outbox.enabled = off; switch it on so that only
# recovery keeps its workers from delivering
$standby->append_conf('postgresql.conf', "outbox.enabled = on\n");
$standby->start;

ok(wait_until(30, sub { all_shards_logged($standby, 0, 'server is in recovery, waiting for promotion') }),
	'the standby\'s workers run and wait for promotion');

# ---- events committed on the paused primary ---------------------------------

my $load = start_load($primary, sessions => 3, per_session => 150, topic => 'failover',
	first_session => 1);
wait_load($load);
$primary->wait_for_catchup($standby);
my $pending = $primary->safe_psql('postgres', 'SELECT count(*) FROM outbox');
ok($pending > 0, "$pending events wait in the primary's outbox");
is($standby->safe_psql('postgres', 'SELECT count(*) FROM outbox'), $pending,
	'the standby replayed the same outbox');

# give a wrongly delivering standby worker time to do it (poll interval 1 s)
sleep 3;
is(scalar @{ consume($broker, 'failover') }, 0, 'nothing reached Kafka: neither node delivered');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM outbox'), $pending,
	'the standby\'s outbox is untouched');
my $standby_log = log_since($standby, 0);
unlike($standby_log, qr/outbox "postgres" shard \d: (?:Kafka error|rebuilding)|terminated by signal/,
	'the standby\'s workers neither produced nor crashed');

# ---- failover -----------------------------------------------------------------

$primary->stop('immediate');
$offset = -s $standby->logfile;
my $promoted_at = time;
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'the standby is promoted');
ok(wait_for_empty($standby, 60), 'the new primary delivers the old primary\'s events');
diag sprintf('outbox of %d events delivered %.1f s after promotion', $pending, time - $promoted_at);

# and what it commits itself
$load = start_load($standby, sessions => 2, per_session => 100, topic => 'failover',
	first_session => 4);
wait_load($load);
ok(wait_for_empty($standby), 'the new primary delivers its own events');

my $r = check_delivery('failover to a promoted standby', committed_events($standby),
	consume($broker, 'failover'));
is($r->{duplicates}, 0, 'no duplicates: the paused primary sent nothing');
unlike(log_since($standby, $offset), qr/terminated by signal/, 'no worker crashed');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM outbox_dead_letter'), '0',
	'no dead letters');

$standby->stop;
$broker->stop;
done_testing();
