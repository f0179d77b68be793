# An extension dropped and created again (review e11b06c H2) must never
# strand the new extension's first events, whichever step of the worker
# notices the new extension first; and a database whose extension is at
# another version than the library keeps one worker that retries, instead
# of a worker that exits and is restarted every 10 s (L2).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => ['re:1']);
# reads only when a commit wakes the worker: the idle worker's only SQL is
# its look around (lag, Kafka's state) once a second
my $node = new_outbox_node('recreate', $broker, conf => q{
outbox.poll_interval = '1h'
});

sub values_in_kafka { return [ map { $_->{value} } @{ consume($broker, 're') } ]; }

sub delivered_within
{
	my ($timeout, @values) = @_;
	my $t0 = time;
	my $ok = wait_until($timeout, sub {
		my %have = map { $_ => 1 } @{ values_in_kafka() };
		return !grep { !$have{$_} } @values;
	});
	return ($ok, time - $t0);
}

# ---- (a) re-created while idle: the look around notices it first ----------
sql("SELECT outbox_send('re', 'before-$_', 'k') FROM generate_series(1, 25)");
ok(wait_for_empty($node, 30), '(a) the first 25 events are delivered (the cursor is past 25)');
sql('BEGIN; DROP EXTENSION outbox; CREATE EXTENSION outbox; COMMIT;');
sleep 2;    # the look around runs and re-prepares the worker's statements
my $ids = join(',', split /\n/, sql("SELECT outbox_send('re', 'after-' || i, 'k') FROM generate_series(1, 3) i"));
is($ids, '1,2,3', '(a) the new extension starts its ids again');
my ($ok, $s) = delivered_within(10, map { "after-$_" } 1 .. 3);
ok($ok, '(a) the new extension\'s first events are delivered within 10 s');
diag(sprintf('FIGURES (a) H2 re-created while idle, poll_interval 1h: delivered=%s after %.2f s', $ok ? 'yes' : 'no', $s));

# ---- (b) re-created while an event is in flight and Kafka is down ---------
reload_with($node, "outbox.poll_interval = '200ms'");
$broker->command('down all');
ok(wait_in_flight($node, sql(q{SELECT outbox_send('re', 'in-flight', 'k')})),
	'(b) an event is in flight while Kafka is down');
sql('DROP EXTENSION outbox');
sleep 1;    # a read finds no extension while the window still holds the event
sql('CREATE EXTENSION outbox');
$broker->command('up all');
sleep 10;   # the window settles (the event went with the old extension)
my $pid_before = join(',', @{ worker_pids($node) });
sql(q{SELECT outbox_send('re', 'ten-seconds-later', 'k')});
($ok, $s) = delivered_within(30, 'ten-seconds-later');
ok($ok, '(b) an event sent 10 s after the re-create is delivered within 30 s');
isnt($pid_before, '', '(b) the database kept a worker');
diag(sprintf('FIGURES (b) H2 re-created with Kafka down and an event in flight: delivered=%s after %.2f s worker=%s',
		$ok ? 'yes' : 'no', $s, $pid_before));

# ---- (c) an extension of another version (L2) ------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE oldver');
my $offset = -s $node->logfile;
$node->safe_psql('oldver', q{CREATE EXTENSION outbox VERSION '0.2.0'});
ok(wait_until(20, sub { log_since($node, $offset) =~ /extension "outbox" is at version 0\.2\.0/ }),
	'(c) the worker says the extension is at another version');
my $pid_of = sub {
	return $node->safe_psql('postgres', q{SELECT string_agg(pid::text, ',') FROM pg_stat_activity
		WHERE backend_type = 'outbox shard' AND datname = 'oldver'});
};
my $first_pid = $pid_of->();
my @seen = ($first_pid);
for (1 .. 15)
{
	sleep 2;
	push @seen, $pid_of->();
}
my %distinct = map { $_ => 1 } grep { length } @seen;
is(scalar(keys %distinct), 1, '(c) one worker for 30 s, not one every 10 s');
my $errors = log_count($node, qr/extension "outbox" is at version 0\.2\.0/, $offset);
cmp_ok($errors, '>=', 2, '(c) it retried, logging the error each time');
# a retry per back-off (200 ms, doubling to 2 s here): about 20 in 30 s
cmp_ok($errors, '<=', 60, '(c) once per back-off, not as fast as it can');
$node->safe_psql('oldver', 'ALTER EXTENSION outbox UPDATE');
$node->safe_psql('oldver', q{SELECT outbox_send('re', 'after-update', 'k')});
($ok, $s) = delivered_within(60, 'after-update');
ok($ok, '(c) after ALTER EXTENSION UPDATE the database is delivered');
diag(sprintf('FIGURES (c) L2 version mismatch for 30 s: worker_pids=%s errors_logged=%d delivered_after_update_s=%.1f',
		join('/', sort keys %distinct), $errors, $s));

$node->stop;
$broker->stop;
done_testing();
