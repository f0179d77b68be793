# The migration of docs/debezium-migration.md tried under load (issue 41,
# "A migration that loses nothing"): pgbench inserts into a table of
# Debezium's outbox shape at a steady rate while a running Debezium 3.6.1
# outbox connector hands its table over to pg_outbox's outbox_debezium()
# trigger, and then back (the rollback), each switch done as the page says.
# A consumer (kcat) then reads the topic and counts, by the id header,
# every row the table holds: each exactly once, or the losses and
# duplicates. Per-key order across the switches is counted too.
#
# Only with OUTBOX_TEST_DEBEZIUM=1 (it needs Debezium's jars); on a real
# cluster always. MIGRATION_RATE (default 500/s) and MIGRATION_SECONDS
# (default 90) set the load.
use strict;
use warnings;

use File::Basename qw(dirname);
use lib dirname(__FILE__);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxTest;
use DebeziumConnect;
use IPC::Run ();
use Time::HiRes ();

if (my $why = DebeziumConnect::skip_reason()) { plan skip_all => $why; }

my $RATE = $ENV{MIGRATION_RATE} // 500;
my $SECONDS = $ENV{MIGRATION_SECONDS} // 90;
# names of their own: a cluster shared between runs (OUTBOX_TEST_KAFKA_BOOTSTRAP)
# keeps the topics of the last one
my $RUN = $$;
my $AGG = "migr$RUN";
my $TOPIC = "outbox.event.$AGG";
my $TABLE = 'outboxevent';
my $tmp = $PostgreSQL::Test::Utils::tmp_check;

my $FENCE = "outbox.event.fence$RUN";
my $kafka = start_real_kafka(topics => [ "$TOPIC:3", "$FENCE:1", "__debezium-heartbeat.mig$RUN:1",
		"__debezium-heartbeat.back$RUN:1" ]);
my $node = DebeziumConnect::node('migration', $kafka);
sql("CREATE TABLE $TABLE (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, "
	  . 'aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)');
sql('CREATE SEQUENCE seq');
sql("CREATE PUBLICATION mig_pub FOR TABLE $TABLE");

# What Debezium users run: the JSON converter without schemas, the
# router's defaults; heartbeats, so that the slot's confirmed position
# follows the WAL while the table is quiet (the page's prerequisite)
my %converters = map { ("$_.converter" => 'org.apache.kafka.connect.json.JsonConverter',
		"$_.converter.schemas.enable" => 'false') } qw(key value);
sub start_connector
{
	my ($name, $slot) = @_;
	return DebeziumConnect->start(dir => "$tmp/connect_$name", bootstrap => $kafka->bootstrap,
		connectors => [ DebeziumConnect::connector(node => $node, name => $name, slot => $slot,
				publication => 'mig_pub', table => $TABLE, converters => \%converters,
				extra => { 'heartbeat.interval.ms' => 1000 }) ]);
}
my $connect = start_connector("mig$RUN", 'mig_slot');
ok(wait_until(60, sub { sql("SELECT active FROM pg_replication_slots WHERE slot_name = 'mig_slot'") eq 't' }),
	'Debezium streams');

# the load: one row per transaction, 50 keys, a sequence number; one
# client, so that each key's sequence numbers are its commit order
my $script = "$tmp/insert.sql";
PostgreSQL::Test::Utils::append_to_file($script, "\\set k random(1, 50)\n"
	  . "INSERT INTO $TABLE VALUES (gen_random_uuid(), '$AGG', 'k' || :k, 'Tick', "
	  . "jsonb_build_object('seq', nextval('seq')));\n");
my ($pgb_out, $pgb_err) = ('', '');
my $pgbench = IPC::Run::start([ 'pgbench', '-n', '-h', $node->host, '-p', $node->port, '-c', 1, '-j', 1,
		'-R', $RATE, '-T', $SECONDS, '-f', $script, 'postgres' ], '<', \undef, '>', \$pgb_out, '2>', \$pgb_err);
my $t0 = Time::HiRes::time();
sleep 10;

# ---- Debezium -> pg_outbox ------------------------------------------------
# pg_outbox holds its events until Debezium has delivered every row before
# the switch (per-key order); the switch is one transaction: a fence row
# Debezium still reads, then the table leaves the publication and gets the
# trigger at the same commit
reload_with($node, 'outbox.enabled = off');
my $lsn = switch_to_outbox();
my $t_switch = Time::HiRes::time();
ok(wait_until(120, sub { end_offsets_sum($kafka, $FENCE, 1) >= 1 }), 'Debezium delivered the fence');
my $fence_s = Time::HiRes::time() - $t_switch;
my $caught_up = wait_until(30, sub {
	sql("SELECT confirmed_flush_lsn >= '$lsn' FROM pg_replication_slots WHERE slot_name = 'mig_slot'") eq 't' });
my $catch_up_s = Time::HiRes::time() - $t_switch;
ok($caught_up, sprintf('the slot confirmed the fence\'s LSN %s after %.1f s (fence in Kafka after %.1f s): %s',
		$lsn, $catch_up_s, $fence_s,
		sql("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'mig_slot'")));
$connect->stop;
sql("SELECT pg_drop_replication_slot('mig_slot')");
my $queued = sql('SELECT count(*) FROM outbox');
reload_with($node, 'outbox.enabled = on');
note(sprintf('forward switch at %.1f s: %d events waited in pg_outbox for %.1f s', $t_switch - $t0, $queued, $catch_up_s));

# ---- pg_outbox -> Debezium (the rollback) ----------------------------------
# A slot made now keeps every change from here on; the connector starts on
# it while the table is not published, and is paused over the switch until
# pg_outbox delivered what it had
sleep 5;
sql("SELECT pg_create_logical_replication_slot('back_slot', 'pgoutput')");
$connect = start_connector("back$RUN", 'back_slot');
$connect->pause("back$RUN", 'pause');
my $lsn2 = switch_to_debezium();
my $t_back = Time::HiRes::time();
ok(wait_until(120, sub { sql('SELECT count(*) FROM outbox') == 0 }), 'pg_outbox delivered what it had');
my $drain_s = Time::HiRes::time() - $t_back;
$connect->pause("back$RUN", 'resume');
note(sprintf('rollback at %.1f s (LSN %s); pg_outbox emptied its queue in %.1f s', $t_back - $t0, $lsn2, $drain_s));
ok(Time::HiRes::time() - $t0 < $SECONDS, 'both switches happened under load');

$pgbench->finish;
like($pgb_out, qr/number of transactions actually processed: \d+/, 'pgbench ran') or diag($pgb_err);
my ($tps) = $pgb_out =~ /tps = ([\d.]+)/;

# ---- what arrived ---------------------------------------------------------
my $rows = sql("SELECT count(*) FROM $TABLE WHERE aggregatetype = '$AGG'");
ok(wait_until(180, sub { end_offsets_sum($kafka, $TOPIC, 3) >= $rows }), "the topic holds at least the $rows rows");
sleep 3;    # what would come twice has come by now
$connect->stop;
my %want = map { $_ => 1 } split /\n/, sql("SELECT id FROM $TABLE WHERE aggregatetype = '$AGG'");
my (%seen, %last_seq, $no_id, $inversions, %by);
for my $m (@{ DebeziumConnect::read_topic($kafka, $TOPIC) })
{
	my $id = $m->{headers}{id};
	$no_id++, next unless defined $id;
	$seen{$id}++;
	# who delivered it: Debezium's records carry its context headers,
	# pg_outbox's its dedup pair
	$by{ exists $m->{headers}{'outbox-id'} ? 'pg_outbox' : 'Debezium' }++;
	next if $seen{$id} > 1;
	my ($seq) = ($m->{value} // '') =~ /\\?"seq\\?":\s*(\d+)/;
	$inversions++ if defined $seq && defined $last_seq{ $m->{key} } && $seq < $last_seq{ $m->{key} };
	$last_seq{ $m->{key} } = $seq if defined $seq;
}
my @missing = grep { !$seen{$_} } keys %want;
my @dup = grep { $seen{$_} > 1 } keys %seen;
my @foreign = grep { !$want{$_} } keys %seen;
diag(sprintf('migration under load: %d rows inserted at %.0f tps over %d s; forward switch at %.1f s (catch-up %.1f s, '
		  . '%d events held), rollback at %.1f s (pg_outbox drained in %.1f s); '
		  . 'records by Debezium %d, by pg_outbox %d, without id %d; lost %d, duplicated %d, unknown %d, '
		  . 'per-key inversions %d',
		$rows, $tps // 0, $SECONDS, $t_switch - $t0, $catch_up_s, $queued, $t_back - $t0, $drain_s,
		$by{Debezium} // 0, $by{pg_outbox} // 0, $no_id // 0, scalar @missing, scalar @dup, scalar @foreign, $inversions // 0));
ok(($by{Debezium} // 0) > 0 && ($by{pg_outbox} // 0) > 0, 'both sides delivered rows');
is(scalar @missing, 0, 'no row lost') or diag('lost: ' . join(' ', (sort @missing)[ 0 .. 9 ]));
is(scalar @dup, 0, 'no row delivered twice') or diag('twice: ' . join(' ', (sort @dup)[ 0 .. 9 ]));
is($no_id // 0, 0, 'every record has its id header');
is($inversions // 0, 0, "each key's rows in commit order");

done_testing();

# The page's forward switch: returns the WAL position after the fence.
sub switch_to_outbox
{
	return sql("BEGIN; INSERT INTO $TABLE VALUES (gen_random_uuid(), 'fence$RUN', 'fence', 'Fence', NULL); "
		  . 'SELECT pg_current_wal_lsn(); '
		  . "ALTER PUBLICATION mig_pub DROP TABLE $TABLE; "
		  . "CREATE TRIGGER outbox_debezium AFTER INSERT ON $TABLE FOR EACH ROW EXECUTE FUNCTION outbox_debezium("
		  . join(', ', map { "'$_=$converters{$_}'" } sort keys %converters) . '); '
		  . 'COMMIT;');
}

# The page's rollback switch.
sub switch_to_debezium
{
	return sql("BEGIN; DROP TRIGGER outbox_debezium ON $TABLE; ALTER PUBLICATION mig_pub ADD TABLE $TABLE; "
		  . 'COMMIT; SELECT pg_current_wal_lsn();');
}
