# The instance rotation is on disk before an event carries the new
# instance (review 695dcef L5). The worker commits asynchronously, so
# before, the rotation's UPDATE of outbox_instance could still be only in
# memory when the read that made it produced its events: a crash then
# lost it, the next worker rotated to a third instance, and the events it
# sent again could not be told from new ones. A crash in that window
# cannot be aimed at, so the test looks at the WAL instead. A fresh
# worker's first produce happens to flush all WAL written so far (it has
# not yet flushed for any asynchronous commit), so the case is a worker
# that has delivered already: paused, the extension is dropped and created
# again in one transaction (the worker stays) and its new instance made
# elsewhere (its host changed); the worker's next read rotates and
# produces one event, which stays in flight (the broker does not answer),
# so the worker writes nothing more. The WAL flushed then must reach the
# rotation's commit record (found afterwards with pg_walinspect, from the
# LSN on outbox_instance's page, by the new row's xmin). The WAL writer,
# which would flush it on its own, does so only every 10 s
# (wal_writer_delay), and nothing else writes or flushes WAL meanwhile (no
# autovacuum, wal_level minimal, no background writer writing pages).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => ['inst:1']);
my $node = new_outbox_node('instance_durable', $broker, conf => q{
wal_writer_delay = 10s
autovacuum = off
bgwriter_lru_maxpages = 0
});

sql('CREATE EXTENSION pageinspect; CREATE EXTENSION pg_walinspect');
sql(q{SELECT outbox_send('inst', 'warm', 'k')});
ok(wait_for_empty($node, 30), 'the worker delivers');

# paused, the same worker sees the extension made again, elsewhere
ok(pause_delivery($node, 1), 'delivery paused');
my ($pid) = @{ worker_pids($node) };
sql('BEGIN; DROP EXTENSION outbox; CREATE EXTENSION outbox; COMMIT');
sql(q{UPDATE outbox_instance SET host = 'elsewhere'});
my $before = sql('SELECT id FROM outbox_instance');
my $id = sql(q{SELECT outbox_send('inst', 'rotated', 'k')});
$broker->command('rtt all 60000');
reload_with($node, 'outbox.enabled = on');
ok(wait_in_flight($node, $id, 30), 'the event is in flight');
my ($page_lsn, $flushed, $inserted, $xid) = split /\|/, sql(q{
	SELECT p.lsn, pg_current_wal_flush_lsn(), pg_current_wal_insert_lsn(),
		(SELECT xmin FROM outbox_instance)
	FROM page_header(get_raw_page('outbox_instance', 0)) p});
my $after = sql('SELECT id FROM outbox_instance');
isnt($after, $before, 'the read rotated the instance');
is(join(',', @{ worker_pids($node) }), $pid, 'the same worker');

$broker->command('rtt all 0');
ok(wait_for_empty($node, 30), 'the event is delivered');
sql('CHECKPOINT');    # all WAL flushed, so pg_walinspect reads it
my $commit_end = sql(qq{SELECT end_lsn FROM pg_get_wal_records_info('$page_lsn', pg_current_wal_flush_lsn())
	WHERE xid = '$xid'::xid AND resource_manager = 'Transaction' AND record_type = 'COMMIT'});
diag("FIGURES L5 rotation: update_lsn=$page_lsn commit_end=$commit_end flushed_when_in_flight=$flushed inserted=$inserted");
isnt($commit_end, '', 'the rotation\'s commit record is found');
is(sql("SELECT '$flushed'::pg_lsn >= '$commit_end'::pg_lsn"), 't',
	'the rotation\'s commit was flushed before its event was produced');
# (the broker wrote what it did not answer: the time-out may send it twice)
my @got = grep { $_->{value} eq 'rotated' } @{ consume($broker, 'inst') };
cmp_ok(scalar(@got), '>=', 1, 'it reached Kafka');
is(scalar(grep { $_->{headers}{'outbox-instance'} ne $after } @got), 0, 'under the new instance');

$node->stop;
$broker->stop;
done_testing();
