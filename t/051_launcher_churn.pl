# The launcher under churn.
#  (a) Databases created, given the extension, dropped, and the server
#      restarted in quick succession: the launcher keeps starting and
#      stopping workers, and none of them may crash (a worker once took over
#      a slot the launcher had given up, with no database in it, and crashed
#      the server).
#  (b) With outbox.max_workers = 4, a database whose extension is created
#      again and again while other databases are created and dropped in a
#      loop (probe workers that exit at once): each time, exactly one worker
#      per shard starts, no shard stays `starting` for long, every event is
#      delivered once. (The launcher once kept the handles of the workers it
#      started in memory it reset at every look: a shard's handle answered
#      for another worker, slots were given up early or never. On an
#      assert-enabled server that launcher aborted in (a) already, in
#      GetBackgroundWorkerPid.)
#  (c) A worker that keeps failing is started again no faster than every
#      10 s, however often a role without privileges runs CREATE EXTENSION
#      IF NOT EXISTS outbox in its database, or a CREATEDB role creates and
#      drops databases.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

my $broker = start_broker(topics => ['churn:2']);

# ---- (a) -------------------------------------------------------------------
my $node = new_outbox_node('churn', $broker, shards => 2, no_extension => 1);
for my $i (1 .. 15)
{
	$node->safe_psql('postgres', "CREATE DATABASE d$i");
	$node->safe_psql("d$i", 'CREATE EXTENSION outbox') if $i % 2;
	sleep 0.2;
	$node->safe_psql('postgres', "DROP DATABASE d$i") if $i % 3 == 0;
	$node->restart if $i % 5 == 0;
}
$node->safe_psql('d13', q{SELECT outbox_send('churn', 'after the churn', 'k')});
ok(wait_query($node, 'd13', 'SELECT count(*) = 0 FROM outbox', 30),
	'a database that survived the churn is delivered');
my $crashes = () = slurp_file($node->logfile) =~ /terminated by signal/g;
diag("FIGURES launcher churn: 15 databases, 5 dropped, 3 restarts, crashed workers $crashes");
is($crashes, 0, 'no worker crashed');
$node->stop;

# ---- (b) -------------------------------------------------------------------
my $shards = 2;
$node = new_outbox_node('churn4', $broker, shards => $shards, no_extension => 1,
	conf => "outbox.max_workers = 4\n");
$node->safe_psql('postgres', 'CREATE DATABASE deliv');

# Statements run by a client of their own until it is killed.
sub start_loop
{
	my ($db, $sql, $name) = @_;
	my $file = PostgreSQL::Test::Utils::tempdir() . "/$name.sql";
	PostgreSQL::Test::Utils::append_to_file($file, $sql);
	return IPC::Run::start([ 'psql', '-X', '-q', '-d', $node->connstr($db), '-f', $file ],
		'<', \undef, '>', '/dev/null', '2>', "$file.err");
}

sub stop_loop
{
	my ($h) = @_;
	$h->kill_kill;
	eval { $h->finish };
}

my $churn = start_loop('postgres',
	join('', map { "CREATE DATABASE churn_$_;\nDROP DATABASE churn_$_;\n" } 1 .. 2000), 'churn');

my $rounds = 8;
my ($bad_starts, $max_starting, $max_up, $undelivered) = (0, 0, 0, 0);
for my $round (1 .. $rounds)
{
	my $offset = -s $node->logfile;
	my $t0 = time;
	$node->safe_psql('deliv', 'CREATE EXTENSION outbox');
	$node->safe_psql('deliv', "SELECT outbox_send('churn', 'round-$round', 'k$round')");
	# sample the shards' states until both run and the event is delivered
	my (%starting_since, $up_s, $delivered);
	while (time - $t0 < 30)
	{
		my $now = time;
		my $states = $node->safe_psql('deliv', q{SELECT string_agg(shard || ':' || state || ':' ||
			coalesce(pid, 0), ',' ORDER BY shard) FROM outbox_status});
		my $up = 0;
		for (split /,/, $states)
		{
			my ($shard, $state, $pid) = split /:/;
			if ($state eq 'starting') { $starting_since{$shard} //= $now; }
			else { delete $starting_since{$shard}; }
			$up++ if $pid;
		}
		for my $since (values %starting_since)
		{
			$max_starting = $now - $since if $now - $since > $max_starting;
		}
		$up_s //= $now - $t0 if $up == $shards;
		$delivered = $node->safe_psql('deliv', 'SELECT count(*) = 0 FROM outbox') eq 't';
		last if defined $up_s && $delivered;
		sleep 0.1;
	}
	$undelivered++ unless $delivered;
	$max_up = $up_s if ($up_s // 99) > $max_up;
	my $log = log_since($node, $offset);
	for my $shard (0 .. $shards - 1)
	{
		my $n = () = $log =~ /outbox "deliv" shard $shard of $shards started/g;
		$bad_starts++ if $n != 1;
		note("round $round shard $shard: $n start(s)") if $n != 1;
	}
	$node->safe_psql('deliv', 'DROP EXTENSION outbox');
	wait_until(30, sub { $node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'outbox shard' AND datname = 'deliv'}) == 0 });
}
stop_loop($churn);
my %got;
$got{ $_->{value} }++ for @{ consume($broker, 'churn') };
my $once = grep { ($got{"round-$_"} // 0) == 1 } 1 .. $rounds;
$crashes = () = slurp_file($node->logfile) =~ /terminated by signal/g;
diag(sprintf('FIGURES launcher churn, 4 slots, %d rounds: shards started other than once %d, '
	  . 'longest starting %.1f s, longest until both shards run %.1f s, undelivered rounds %d, '
	  . 'events in Kafka once %d, crashed workers %d',
		$rounds, $bad_starts, $max_starting, $max_up, $undelivered, $once, $crashes));
is($bad_starts, 0, 'each round, exactly one worker per shard starts');
cmp_ok($max_starting, '<', 5, 'no shard shows starting for 5 s or more');
cmp_ok($max_up, '<', 8, 'both shards run within 8 s of CREATE EXTENSION (no 10 s restart delay)');
is($once, $rounds, 'every round\'s event is in Kafka, once');
is($crashes, 0, 'no process crashed');

# ---- (c) -------------------------------------------------------------------
# An extension older than the library: the worker's first look fails, and
# it exits with an error (until ALTER EXTENSION ... UPDATE).
$node->safe_psql('postgres', q{CREATE DATABASE stale;
	CREATE ROLE app LOGIN; CREATE ROLE maker LOGIN CREATEDB});
$node->safe_psql('stale', q{CREATE EXTENSION outbox VERSION '0.2.0'});
# Each start of that worker logs the error once, under its own pid.
sub stale_starts
{
	my ($from) = @_;
	my %pids = map { $_ => 1 } log_since($node, $from) =~
	  /\[(\d+)\] [^\n]*?ERROR:  extension "outbox" is at version 0\.2\.0/g;
	return scalar keys %pids;
}
my $offset = -s $node->logfile;
ok(wait_until(30, sub { stale_starts($offset) >= 1 }), 'the worker of database stale fails');

# The worker's starts while a client runs $sql for $seconds.
sub failures_during
{
	my ($seconds, $db, $user, $sql, $name) = @_;
	sleep 1;
	my $from = -s $node->logfile;
	my $file = PostgreSQL::Test::Utils::tempdir() . "/$name.sql";
	PostgreSQL::Test::Utils::append_to_file($file, $sql);
	my $h = IPC::Run::start([ 'psql', '-X', '-q', '-U', $user, '-d', $node->connstr($db),
			'-f', $file ], '<', \undef, '>', '/dev/null', '2>', "$file.err");
	sleep $seconds;
	stop_loop($h);
	my $errors = () = slurp_file("$file.err") =~ /ERROR/g;
	note("$name: $errors errors from the client");
	return stale_starts($from);
}

my $pokes = failures_during(12, 'stale', 'app',
	join('', map { "CREATE EXTENSION IF NOT EXISTS outbox;\nSELECT pg_sleep(0.2);\n" } 1 .. 1000),
	'if_not_exists');
my $creates = failures_during(12, 'postgres', 'maker',
	join('', map { "CREATE DATABASE poke_$_;\nDROP DATABASE poke_$_;\n" } 1 .. 1000), 'createdb');
diag("FIGURES failing worker starts in 12 s: under CREATE EXTENSION IF NOT EXISTS every 0.2 s "
	  . "$pokes, under CREATE/DROP DATABASE $creates (restart delay 10 s)");
cmp_ok($pokes, '<=', 2, 'CREATE EXTENSION IF NOT EXISTS does not restart a failing worker early');
cmp_ok($creates, '<=', 2, 'CREATE DATABASE does not restart a failing worker early');

$node->stop;
$broker->stop;
done_testing();
