# An asynchronous commit read while the WAL ends exactly at a page
# boundary: the insert position then points past the next page's header,
# where nothing was written yet. Flushing up to it fails ("xlog flush
# request ... is not satisfied"), and on a server writing no other WAL
# every retry failed the same way: the event waited for someone else's
# WAL. The worker flushes to the end of the last record instead.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $broker = start_broker(topics => ['boundary:3']);
my $node = new_outbox_node('boundary', $broker, shards => 1);

# Fills the current WAL page with one logical message, so that the WAL
# ends at the page's end; true if the insert position is then just past
# the next page's header (no other WAL came in between).
sub end_wal_at_page_boundary
{
	my $left = $node->safe_psql('postgres',
		q{SELECT 8192 - pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint % 8192});
	# a record too small for what is left: spill onto the next page first
	if ($left < 320)
	{
		$node->safe_psql('postgres', q{SELECT pg_logical_emit_message(false, 'p', repeat('x', 400))});
		$left = $node->safe_psql('postgres',
			q{SELECT 8192 - pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint % 8192});
	}
	# record header 24, long data header 5, message header 24, prefix 'p\0' 2
	my $size = $left - 55;
	$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 'p', repeat('x', $size))");
	my $offset = $node->safe_psql('postgres',
		q{SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint % 8192});
	return $offset == 24 || $offset == 40;
}

my ($hit, @sent) = (0);
for my $round (1 .. 5)
{
	pause_delivery($node) or die 'delivery did not pause';
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres',
		"SET synchronous_commit = off; SELECT outbox_send('boundary', 'round $round', 'k')");
	push @sent, "round $round";
	next unless end_wal_at_page_boundary();
	$hit++;
	my $t0 = time;
	reload_with($node, 'outbox.enabled = on');
	ok(wait_for_empty($node, 20), "round $round: the event is delivered");
	diag(sprintf('FIGURES wal page boundary round %d: delivered after %.2f s', $round, time - $t0));
	unlike(log_since($node, $offset), qr/is not satisfied/, "round $round: no failed flush");
	last if $hit >= 2;
}
cmp_ok($hit, '>=', 1, 'the WAL ended at a page boundary when the worker read');
reload_with($node, 'outbox.enabled = on');
ok(wait_for_empty($node, 20), 'every round delivered');
is_deeply([ sort map { $_->{value} } @{ consume($broker, 'boundary') } ], [ sort @sent ],
	'each round\'s event once');

$node->stop;
done_testing();
