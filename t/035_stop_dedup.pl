# A graceful stop re-sends nothing, and the dedup key is unique:
#  (a) review M1: under a steady load of one key per session, with small
#      batches and a slow Kafka (rtt 75 ms) so that batches are always in
#      flight, both workers are terminated (pg_terminate_backend) again and
#      again, each time once they are back from the previous stop. A SIGTERM
#      must let the worker settle the batch it produced before it exits:
#      after everything drained, Kafka holds every committed event exactly
#      once (duplicates = 0), in per-key order;
#  (b) review M6: events sent, then DROP EXTENSION + CREATE EXTENSION (ids
#      start at 1 again), then as many events again. Every message carries
#      the headers outbox-id and outbox-instance; the instance is a UUID,
#      the one CREATE EXTENSION put in table outbox_instance (the server
#      stays on its timeline), one per extension lifetime, and a new one
#      after the re-creation, so (outbox-instance, outbox-id) is
#      unique over everything Kafka received although the ids repeat. The
#      envelope (message_format = envelope) carries the same instance.
use strict;
use warnings;
use FindBin;
use IPC::Run;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $shards = 2;
my $rounds = 15;        # each round terminates both workers: 30 stops
my $sessions = 6;       # one key each
my $n_dedup = 20;       # events per extension lifetime in (b)
my $uuid_re = qr/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

my $broker = start_broker(topics => [ 'stop_term:6', 'dedup:3' ]);
my $node = new_outbox_node('stopdedup', $broker, shards => $shards,
	conf => "outbox.batch_size = 20\n");

# ---- helpers ---------------------------------------------------------------

# The instance in table outbox_instance; '' without that table (old build).
sub instance
{
	$node->psql('postgres', 'SELECT id FROM outbox_instance', stdout => \my $id);
	return $id // '';
}

# Waits until $shards workers run and none of them is one of @old.
sub wait_for_new_workers
{
	my ($timeout, @old) = @_;
	my %old = map { $_ => 1 } @old;
	return wait_until($timeout, sub {
		my $pids = worker_pids($node);
		return @$pids == $shards && !grep { $old{$_} } @$pids;
	});
}

# Every message of $topic without its value (envelopes are binary):
# [{partition, offset, key, headers => {..}}].
sub consume_headers
{
	my ($topic) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-C', '-b', $broker->bootstrap, '-t', $topic, '-e', '-q',
		'-f', '%p\t%o\t%k\t%h\n' ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(60)) or die "kcat failed: $err";
	return [ map {
		my ($p, $o, $k, $h) = split /\t/, $_, 4;
		{ partition => $p, offset => $o, key => $k,
		  headers => { map { split /=/, $_, 2 } grep { length } split /,/, ($h // '') } }
	} grep { length } split /\n/, $out ];
}

ok(wait_for_new_workers(30), "$shards workers run");

# ---- (a) repeated pg_terminate_backend under load (M1) ---------------------

# one key per session; both shards must get traffic
my $shard_list = sql(join ' UNION ', map {
	"SELECT outbox_shard_of(convert_to('s$_-k0', 'UTF8'), 0) AS s" } 1 .. $sessions);
my %busy_shards = map { $_ => 1 } grep { length } split /\n/, $shard_list;
is(scalar keys %busy_shards, $shards, "the $sessions session keys cover both shards");

$broker->command('rtt all 75');
# more events than the rounds take; the clients are stopped after the last round
my $load = start_load($node, sessions => $sessions, per_session => 20000, keys => 1,
	topic => 'stop_term', first_session => 1, sleep => 0.03);
ok(wait_until(30, sub { sql(q{SELECT (SELECT count(*) FROM sent)
	- (SELECT count(*) FROM outbox) >= 50}) eq 't' }), '(a) delivery flows');

my $offset = -s $node->logfile;
my ($stops, $stops_with_backlog, $back_ok, $max_backlog) = (0, 0, 0, 0);
my $t_rounds = time;
for my $round (1 .. $rounds)
{
	# a varying moment: sometimes mid-drain of the backlog built up while
	# the workers were away, sometimes in the steady stream
	sleep(0.3 + rand(2.5));
	my @old = @{ worker_pids($node) };
	my $backlog = sql('SELECT count(*) FROM outbox');
	my $n = sql(q{SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE backend_type = 'outbox shard'});
	$stops += $n;
	$stops_with_backlog += $n if $backlog > 0;
	$max_backlog = $backlog if $backlog > $max_backlog;
	my $back = wait_for_new_workers(25, @old);
	$back_ok++ if $back;
	note "(a) round $round: terminated $n workers with $backlog events waiting; back: $back";
}
my $rounds_s = time - $t_rounds;
is($back_ok, $rounds, '(a) the workers came back after every termination');

# stop the clients: their open transaction rolls back (no row in sent
# either), every commit has its business row
$_->kill_kill for @$load;
wait_load($load, 1);
$broker->command('rtt all 0');
my $stop_msgs = log_count($node,
	qr/outbox "postgres" shard \d+: stopping as asked/, $offset);
is($stop_msgs, $stops, "(a) every termination ($stops) logged as a stop asked for");
ok(wait_for_empty($node, 120), '(a) the outbox drains');
my $r = check_delivery('(a) repeated pg_terminate_backend under load', committed_events($node),
	consume($broker, 'stop_term'));
diag(sprintf('FIGURES (a) stops: rounds=%d terminations=%d with_backlog=%d max_backlog=%d '
	  . 'seconds=%.0f committed=%d duplicates=%d', $rounds, $stops, $stops_with_backlog,
	$max_backlog, $rounds_s, scalar @{ committed_events($node) }, $r->{duplicates}));
cmp_ok($stops_with_backlog, '>=', $rounds, '(a) the workers were stopped with events to deliver');
is($r->{duplicates}, 0, '(a) a graceful stop re-sends nothing: no duplicates');

# ---- (b) the dedup key across DROP/CREATE EXTENSION (M6) -------------------
# Two lifetimes of the extension, each from a fresh CREATE EXTENSION, so the
# ids 1..$n_dedup are sent twice. Envelopes are binary: read headers and keys.

$node->append_conf('postgresql.conf', "outbox.message_format = 'envelope'\n");
$node->reload;
sleep 1;

# Re-creates the extension, sends $n_dedup events (keys l<life>-<i>), waits
# for their delivery; returns the instance read right after CREATE
# EXTENSION and the one read after the delivery.
sub lifetime
{
	my ($life) = @_;
	sql('DROP EXTENSION outbox');
	sql('CREATE EXTENSION outbox');
	my $created = instance();
	my $ids = sql(qq{SELECT string_agg(outbox_send('dedup', 'payload-$life-' || i,
		'l$life-' || i)::text, ',' ORDER BY i) FROM generate_series(1, $n_dedup) i});
	note "(b) lifetime $life: ids $ids";
	ok(wait_for_empty($node, 60), "(b) lifetime $life: the events are delivered");
	return ($created, instance());
}

my (@created, @inst);
($created[$_], $inst[$_]) = lifetime($_) for 1, 2;
my $all = consume_headers('dedup');
is(scalar @$all, 2 * $n_dedup, '(b) both lifetimes\' messages are in Kafka');

my (%instances_of_life, %pairs, %instances_of_id, %all_instances);
my ($no_header, $pair_dups) = (0, 0);
for my $m (@$all)
{
	my ($life) = $m->{key} =~ /^l(\d)-/;
	my ($inst, $id) = @{ $m->{headers} }{ 'outbox-instance', 'outbox-id' };
	if (!defined $inst || !defined $id || !defined $life) { $no_header++; next; }
	$instances_of_life{$life}{$inst}++;
	$all_instances{$inst}++;
	$pair_dups++ if $pairs{"$inst/$id"}++;
	$instances_of_id{$id}{$inst}++;
}
my @shared_ids = grep { keys %{ $instances_of_id{$_} } > 1 } keys %instances_of_id;
my $same_id_same_inst = grep { $_ > 1 } map { values %$_ } values %instances_of_id;
diag(sprintf('FIGURES (b) dedup: messages=%d without_headers=%d instances=%d '
	  . 'ids_sent_twice=%d pair_duplicates=%d instance_replaced_after_create=%d',
	scalar @$all, $no_header, scalar(keys %all_instances), scalar @shared_ids, $pair_dups,
	scalar(grep { ($created[$_] // '') ne ($inst[$_] // '') } 1, 2)));
is($no_header, 0, '(b) every message has the headers outbox-id and outbox-instance');
is(scalar(grep { $_ !~ $uuid_re } keys %all_instances), 0, '(b) outbox-instance is a UUID');
for my $life (1, 2)
{
	is_deeply([ keys %{ $instances_of_life{$life} // {} } ], [ $inst[$life] ],
		"(b) all messages of lifetime $life carry one instance, outbox_instance.id");
	is($created[$life], $inst[$life],
		"(b) lifetime $life: the instance sent is the one CREATE EXTENSION made");
}
isnt($inst[1], $inst[2], '(b) the re-created extension has a new instance');
is(scalar @shared_ids, $n_dedup, '(b) every id was sent in both lifetimes (the case at stake)');
is($same_id_same_inst, 0, '(b) messages with equal outbox-id differ in outbox-instance');
is($pair_dups, 0, '(b) (outbox-instance, outbox-id) is unique over all messages');

# the envelope names the instance too
for my $life (1, 2)
{
	my ($m) = grep { $_->{key} eq "l$life-1" } @$all;
	my $text = $m ? decode_envelope($broker, 'dedup', $m->{partition}, $m->{offset}) : '';
	my $id = $m ? $m->{headers}{'outbox-id'} // '' : '';
	like($text, qr/^instance: "\Q$inst[$life]\E"$/m,
		"(b) lifetime $life: the envelope's instance is the header's");
	like($text, qr/^id: \Q$id\E$/m, "(b) lifetime $life: the envelope's id is the header's");
}

is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'no dead letters');
$node->stop;
$broker->stop;
done_testing();
