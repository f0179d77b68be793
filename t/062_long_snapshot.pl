# A long snapshot or a sender's transaction left open keeps the rows the
# worker deleted from being removed, and their index entries from being
# killed (review 695dcef M1). Neither the lag look nor the reads may walk
# them again and again:
#  (a) a REPEATABLE READ snapshot held while $events events drain: the
#      30 idle seconds after add only a few of outbox_pkey's index tuples
#      read (pg_stat_user_indexes.idx_tup_read), not the dead ones;
#  (b) a transaction idle after outbox_send(): a drain of $events costs
#      about what one without it costs in the same run; a transaction
#      opened after it, passed by the reads and committed while it stays
#      open, is delivered at once; once the idle one commits, its event is
#      delivered, ahead of the next event of its key.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $events = 200_000;
my $broker = start_broker(topics => [ 'snap:4', 'pin:4' ]);
my $node = new_outbox_node('long_snapshot', $broker, shards => 1);

# from shared memory: the view would count the outbox
sub delivered { return sql('SELECT coalesce(sum(delivered), 0) FROM outbox_shard_stats()'); }

sub pkey_tuples_read
{
	return sql(q{SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'outbox_pkey'});
}

# A psql session kept open; $ready is what its script prints once set up.
sub open_session
{
	my ($script, $ready) = @_;
	my %s = (in => $script, out => '', err => '');
	$s{h} = IPC::Run::start([ 'psql', '-X', '-At', '-d', $node->connstr('postgres'), '-f', '-' ],
		\$s{in}, \$s{out}, \$s{err}, IPC::Run::timeout(300));
	$s{h}->pump until $s{out} =~ /$ready/;
	return \%s;
}

sub end_session
{
	my ($s, $sql, $done) = @_;
	$s->{in} .= "$sql\nSELECT '$done';\n";
	$s->{h}->pump until $s->{out} =~ /$done/;
	$s->{in} .= "\\q\n";
	$s->{h}->finish;
}

# Sends $events events of $topic while paused, then times their delivery.
my $drains = 0;

sub drain
{
	my ($topic) = @_;
	$drains++;
	ok(pause_delivery($node, 1), "($topic) delivery paused");
	sql("SELECT count(outbox_send('$topic', 'd$drains-' || i, 'k' || (i % 100)))"
		  . " FROM generate_series(1, $events) i");
	my ($done0, $read0) = (delivered(), pkey_tuples_read());
	my $t0 = time;
	reload_with($node, 'outbox.enabled = on');
	my $deadline = $t0 + 180;
	sleep 0.01 while delivered() < $done0 + $events && time < $deadline;
	my $s = time - $t0;
	ok(delivered() >= $done0 + $events, "($topic) $events events delivered");
	sleep 1.5;    # the worker's statistics reach pg_stat_user_indexes
	return ($s, (pkey_tuples_read() - $read0) / $events);
}

ok(wait_until(30, sub { @{ worker_pids($node) } == 1 }), 'the worker runs');
sql(q{SELECT outbox_send('snap', 'warm', 'w')});
ok(wait_for_empty($node, 30), 'the topic is known');

# (a) a report's snapshot, older than every delete that follows
my $report = open_session("BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT 'snapshot ' || count(*) FROM pg_class;\n",
	'snapshot');
my ($snap_s) = drain('snap');
my $read0 = pkey_tuples_read();
sleep 30;    # three of the old full lag looks
my $idle_read = pkey_tuples_read() - $read0;
end_session($report, 'COMMIT;', 'report ended');
cmp_ok($idle_read, '<', $events / 20,
	'idle for 30 s under a held snapshot, the worker reads few index tuples');

# (b) the same drain without, then with a sender's transaction left open
my ($clean_s, $clean_per_event) = drain('pin');
my $pinned = open_session("BEGIN;\nSELECT 'pinned ' || outbox_send('pin', 'pinned', 'kp');\n", 'pinned');
my ($pinned_id) = $pinned->{out} =~ /pinned (\d+)/;
my ($pinned_s, $pinned_per_event) = drain('pin');

# a transaction opened after the pin, passed by reads of later commits,
# committed while the pin holds: delivered now, not when the pin ends
my $later = open_session("BEGIN;\nSELECT 'later ' || outbox_send('pin', 'later', 'kl');\n", 'later');
my ($later_id) = $later->{out} =~ /later (\d+)/;
my @passing = commit_one_by_one($node, 'pin', 'passing', 3);
ok(wait_query($node, 'postgres', "SELECT NOT EXISTS (SELECT FROM outbox WHERE id > $later_id)", 30),
	'the reads passed the open transaction');
end_session($later, 'COMMIT;', 'later committed');
ok(wait_query($node, 'postgres', "SELECT NOT EXISTS (SELECT FROM outbox WHERE id = $later_id)", 30),
	'an event committed below the reads while the pin holds is delivered');
is(sql("SELECT count(*) FROM outbox WHERE id = $pinned_id"), '0', 'the pinned event is not visible yet');

# the pin ends; an event of its key sent after its commit follows it
end_session($pinned, 'COMMIT;', 'pin committed');
sql(q{SELECT outbox_send('pin', 'after', 'kp')});
ok(wait_for_empty($node, 60), 'the outbox drains, the pinned event with it');
my $arrived = consume($broker, 'pin');
my @kp = map { $_->{value} } grep { ($_->{key} // '') eq 'kp' } @$arrived;
is_deeply(\@kp, [ 'pinned', 'after' ], 'the pinned event went once, before the next of its key');
# the broker keeps only the last few MiB of a partition: the count is theirs
is(end_offsets_sum($broker, 'pin', 4), 2 * $events + 6, 'every event of the topic arrived once');
my %copies;
$copies{ $_->{value} }++ for @$arrived;
is(join(',', map { $copies{$_} // 0 } 'later', @passing), '1,1,1,1',
	'the events committed while the pin held arrived once each');

diag(sprintf('FIGURES M1 drain of %d: held snapshot s=%.2f, then idle 30 s: outbox_pkey '
	  . 'tuples read=%d (%.3f per drained event); clean s=%.2f pkey_read_per_event=%.2f; '
	  . 'pinned s=%.2f pkey_read_per_event=%.2f; ratio_s=%.2f',
	$events, $snap_s, $idle_read, $idle_read / $events, $clean_s, $clean_per_event,
	$pinned_s, $pinned_per_event, $pinned_s / $clean_s));
cmp_ok($pinned_s, '<', 1.5 * $clean_s, 'a drain under an open sender takes about as long as without');
cmp_ok($pinned_per_event, '<', 2 * $clean_per_event + 1,
	'and reads about as many index tuples per event');

$node->stop;
$broker->stop;
done_testing();
