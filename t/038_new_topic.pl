# The first event to a topic the worker has not produced to yet: with a
# steady worker (connected, idle), it reaches a consumer in about one
# metadata round trip, not after librdkafka's 1 s topic scan (librdkafka
# 2.0.2 asks for the metadata of a topic named in producev() only from that
# timer). Measured over several brand-new topics, from the record's
# timestamp (the event's created_at) to the moment a consumer that was
# already reading the topic receives it; also the first event after a
# restart of the server (a new producer).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time sleep);

my $broker = start_broker(topics => ['warm:6']);
my $node = new_outbox_node('new_topic', $broker, shards => 1);

# One psql session for every send: a new client per event would keep the
# test from watching the consumer while it starts and stops.
my ($sql_in, $sql_out, $sql_err) = ('', '', '');
my $psql = IPC::Run::start([ 'psql', '-X', '-A', '-t', '-q', '-d', $node->connstr('postgres') ],
	\$sql_in, \$sql_out, \$sql_err, IPC::Run::timeout(600));

sub send_event
{
	my ($topic, $value) = @_;
	$sql_out = '';
	$sql_in .= "SELECT outbox_send('$topic', '$value', 'k') IS NOT NULL;\n";
	$psql->pump until $sql_out =~ /^t$/m;
}

# Starts a consumer of every partition of $topic from the beginning, and
# waits until it read a marker another producer (kcat) wrote: from then on
# it is fetching, so what arrives later is seen as it arrives.
sub start_consumer
{
	my ($topic) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $marker = "marker-$topic";
	my ($pout, $perr) = ('', '');
	IPC::Run::run([ 'kcat', '-P', '-b', $broker->bootstrap, '-t', $topic, '-p', '0' ],
		'<', \"$marker\n", '>', \$pout, '2>', \$perr, IPC::Run::timeout(60))
	  or die "kcat -P failed: $perr";
	my $h = IPC::Run::start([ 'kcat', '-C', '-q', '-u', '-b', $broker->bootstrap, '-t', $topic,
		'-o', 'beginning', '-X', 'fetch.wait.max.ms=5', '-X', 'fetch.error.backoff.ms=5',
		'-f', '%T %s\n' ], \$in, \$out, \$err, IPC::Run::timeout(60));
	$h->pump until $out =~ /\Q$marker\E/;
	return { h => $h, out => \$out };
}

# Sends one event to $topic and returns the ms from its created_at to its
# arrival at the consumer. The send falls at a random point of a second, so
# that it is not in step with librdkafka's 1 s timers.
my $sent = 0;
sub first_event_latency
{
	my ($topic) = @_;
	my $c = start_consumer($topic);
	my $value = "first-$topic-" . ++$sent;
	sleep(rand(1));
	send_event($topic, $value);
	my $deadline = time + 30;
	my ($created_ms, $arrived);
	while (time < $deadline)
	{
		$c->{h}->pump_nb;
		if (${ $c->{out} } =~ /^(\d+) \Q$value\E$/m)
		{
			($created_ms, $arrived) = ($1, time);
			last;
		}
		sleep 0.001;
	}
	$c->{h}->kill_kill;
	die "$value did not arrive within 30 s" unless defined $arrived;
	return $arrived * 1000 - $created_ms;
}

sub median
{
	my @s = sort { $a <=> $b } @_;
	return @s % 2 ? $s[$#s / 2] : ($s[@s / 2 - 1] + $s[@s / 2]) / 2;
}

# A steady worker: connected to every broker, idle.
sub warm_up
{
	send_event('warm', "w$_") for 1 .. 12;
	ok(wait_for_empty($node, 30), 'the warm-up events are delivered');
	sleep 1;
}

warm_up();

# The same measure for a topic the worker knows already, for comparison.
my @known = map { first_event_latency('warm') } 1 .. 3;

my $topics = 8;
my @latencies;
for my $i (1 .. $topics)
{
	$broker->command("create fresh$i 3");
	push @latencies, first_event_latency("fresh$i");
}
my $median = median(@latencies);
diag(sprintf('FIGURES first event to a new topic (steady worker, %d topics): median=%.0fms max=%.0fms all=[%s]; known topic: [%s]',
		$topics, $median, (sort { $b <=> $a } @latencies)[0],
		join(' ', map { sprintf('%.0f', $_) } @latencies),
		join(' ', map { sprintf('%.0f', $_) } @known)));
cmp_ok($median, "<", 150, "the first event to a new topic arrives within 150 ms (median)");

# After a restart every topic is new to the worker's producer.
$psql->kill_kill;
$node->restart;
$psql = IPC::Run::start([ 'psql', '-X', '-A', '-t', '-q', '-d', $node->connstr('postgres') ],
	\$sql_in, \$sql_out, \$sql_err, IPC::Run::timeout(600));
ok(wait_query($node, 'postgres', q{SELECT bool_and(state = 'idle') FROM outbox_status}, 30),
	'the worker is back and idle after the restart');
sleep 2;
my $after_restart = first_event_latency('warm');
$broker->command('create fresh_restart 3');
my $new_after_restart = first_event_latency('fresh_restart');
diag(sprintf('FIGURES first event after a restart: known topic %.0fms, new topic %.0fms',
		$after_restart, $new_after_restart));
cmp_ok($after_restart, '<', 1000, 'the first event after a restart arrives within 1 s');

is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox'), '0', 'nothing left in the outbox');
$psql->kill_kill;
$node->stop;
$broker->stop;
done_testing();
