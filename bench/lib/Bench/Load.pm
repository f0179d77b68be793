# Bench::Load: load at a fixed rate, read back by latency-consumer, for the
# latency and sustained parts; pg_outbox (pgbench calling outbox_send) and
# the floor (a plain librdkafka producer) go through the same code.
#
# The load runs as back-to-back segments of at most SEGMENT_S seconds (and
# SEGMENT_MESSAGES messages, whichever is shorter, at least 1 s; on real
# Kafka, Bench::Kafka's segment_limits: 30 s), each
# into a topic nothing wrote to before, each read by its own consumer. The
# mock broker (librdkafka 2.0.2) walks a partition's whole log on every
# fetch, so on one long-lived topic the consumer's latency grows with the
# topic's history, whoever produced it: that was the old floor's 27-77 ms
# (bench/README.md). A consumer is started before its segment and stopped
# during the next one, so the load itself has no gaps.
package Bench::Load;

use strict;
use warnings;
use Bench::Stats ();
use Bench::Util ();

use IPC::Run ();
use POSIX ();
use Time::HiRes ();

use constant SEGMENT_S        => 5;
use constant SEGMENT_MESSAGES => 15000;
# the floor's linger.ms: the workers' own (src/kafka/producer.c; 0 until 2026-12-05)
use constant FLOOR_LINGER_MS  => 5;
# settle_brokers: unmeasured plain-producer loads of SETTLE_S at 1000/s,
# at most SETTLE_LOADS, until two in a row have a p50 within SETTLE_RATIO;
# after a backlog at least SETTLE_AFTER_BACKLOG of them: the brokers can
# stay slow at one level for two loads before they speed up (42.2, then
# 42.8 ms once on 2026-12-05; quick is 6-9 ms)
use constant SETTLE_S             => 10;
use constant SETTLE_LOADS         => 9;
use constant SETTLE_RATIO         => 1.25;
use constant SETTLE_AFTER_BACKLOG => 6;

# %o: label, rate (events/s), seconds, source ('outbox', 'producer', or
# 'transactions': the plain producer one Kafka transaction at a time, as
# exactly-once delivery works; any other: pgbench with script),
# clients (pgbench), beside (with 'producer': a pgbench script run at the
# same rate meanwhile, 8 clients), before_load (sub called once all is ready),
# after_segment (sub called with the segment number and the seconds since
# the start, between segments); for another system's pgbench load (the
# debezium part): script (sub: topic -> pgbench script), warm (sub called
# with the fresh topics instead of the outbox's warm-up), pending (sub:
# segment -> true while its messages are still on their way) and drained
# (sub called with the result so far and the topics once the load ended,
# instead of waiting for an empty outbox).
# Returns { samples => [[receive time, ms(, ms to the leader's append)]],
#           committed, received, bad, tps, t0 (Unix s), segments }, with a
#           plain producer requests (sent to the brokers), for 'transactions'
#           commit_ms and ack_ms: the median over segments of each one's
#           median commit (EndTxn) and wait for acknowledgements, and over
#           the messages due_to_commit_ms (from falling due to its
#           transaction's commit returning) and commit_to_visible_ms (from
#           there to the consumer: the commit markers' way).
sub run
{
	my ($env, %o) = @_;
	# at most SEGMENT_MESSAGES per segment on the mock: at low rates each is
	# a message set of the plain producer, and the mock walks them all per fetch
	my ($seg_s, $seg_messages) = $env->segment_limits;
	my $seg = POSIX::floor($seg_messages / $o{rate});
	$seg = $seg_s if $seg > $seg_s;
	$seg = 1 if $seg < 1;
	my $n = POSIX::ceil($o{seconds} / $seg);
	my $len = POSIX::floor($o{seconds} / $n) || 1;
	my %r = (samples => [], committed => 0, received => 0, bad => 0, segments => $n);
	my (@tps, @pending, %txn, @commits);
	# fresh topics, known to the worker's producer (pg_outbox) before the
	# load: a producer first learns a new topic's partitions, which holds
	# its first messages and, in a stop-and-wait worker, the others behind
	# them, for up to a second (the plain producer does so before its
	# clock starts)
	my @topics = map { $env->fresh_topic($o{label}) } 1 .. $n;
	$env->await_followers;
	if ($o{warm}) { $o{warm}->(@topics); }
	elsif ($o{source} eq 'outbox') { $env->warm_topics(@topics); }
	my $next = $env->start_consumer($topics[0]);
	$o{before_load}->() if $o{before_load};
	$r{t0} = Time::HiRes::time();
	for my $i (1 .. $n)
	{
		my $c = $next;
		my $load = start_source($env, \%o, $c->{topic}, $len);
		@pending = grep { !($o{pending} && $o{pending}->($_)) && !collect_if_delivered($env, \%r, $_) } @pending;
		$next = $env->start_consumer($topics[$i]) if $i < $n;
		my $res = finish_source($env, $load);
		$r{committed} += $res->{count};
		$c->{count} = $res->{count};
		push @tps, $res->{tps};
		push @{ $txn{$_} }, $res->{$_} for grep { defined $res->{$_} } qw(commit_ms ack_ms);
		$r{requests} += $res->{requests} if defined $res->{requests};
		push @commits, @{ $res->{commits} // [] };
		# the segment's events are the outbox's ids up to here
		$c->{last_id} = $o{source} eq 'outbox' ? $env->sql('SELECT coalesce(max(id), 0) FROM outbox') : 0;
		push @pending, $c;
		$o{after_segment}->($i, Time::HiRes::time() - $r{t0}) if $o{after_segment};
	}
	if ($o{drained}) { $o{drained}->(\%r, @topics); }
	elsif ($o{source} eq 'outbox') { $env->wait_empty(900); }
	collect($env, \%r, $_, 1) for @pending;
	$env->drop_topics(@topics);
	my $sum = 0;
	$sum += $_ for @tps;
	$r{tps} = $sum / @tps;
	$r{$_} = Bench::Stats::percentile(0.5, @{ $txn{$_} }) for keys %txn;
	commit_visibility(\%r, @commits) if @commits;
	return \%r;
}

# Brings the real cluster to its steady state before measured loads; returns
# how many loads that took. %o: after_backlog (a drain or an outage since
# the last measured load). After a backlog, and on a fresh cluster, the
# brokers take about a minute of load to be quick again (their JVMs
# compile the small-request path, G1 regrows its young generation):
# whichever source loads first pays it (docs/performance.md, "The slow
# first load after a backlog is the brokers'").
sub settle_brokers
{
	my ($env, %o) = @_;
	return 0 unless $env->real_kafka;
	my $min = $o{after_backlog} ? SETTLE_AFTER_BACKLOG : 2;
	my $prev;
	for my $i (1 .. SETTLE_LOADS)
	{
		my $l = run($env, label => 'settle', rate => 1000, seconds => SETTLE_S, source => 'producer');
		my $p50 = Bench::Stats::percentile(0.5, map { $_->[1] } @{ $l->{samples} }) // 1e9;
		$env->say(sprintf('settling the brokers: load %d, p50 %.1f ms', $i, $p50));
		return $i if $i >= $min && $p50 <= SETTLE_RATIO * $prev && $prev <= SETTLE_RATIO * $p50;
		$prev = $p50;
	}
	return SETTLE_LOADS;
}

# Splits each transactional message's latency at its transaction's commit
# (commits: [first due, last due, committed], Unix microseconds, in order).
sub commit_visibility
{
	my ($r, @commits) = @_;
	my (@to_commit, @to_visible);
	for my $s (@{ $r->{samples} })
	{
		my ($received, $ms) = @$s;
		my $due = ($received - $ms / 1000) * 1e6;
		my ($lo, $hi) = (0, $#commits);
		while ($lo < $hi)
		{
			my $mid = int(($lo + $hi + 1) / 2);
			if ($commits[$mid][0] <= $due + 2) { $lo = $mid; } else { $hi = $mid - 1; }
		}
		my $c = $commits[$lo];
		next unless $c->[0] <= $due + 2 && $due <= $c->[1] + 2;
		push @to_commit, ($c->[2] - $due) / 1000;
		push @to_visible, $received * 1000 - $c->[2] / 1000;
	}
	return unless @to_commit;
	$r->{due_to_commit_ms} = Bench::Stats::percentile(0.5, @to_commit);
	$r->{commit_to_visible_ms} = Bench::Stats::percentile(0.5, @to_visible);
}

# A segment's consumer is stopped once the worker delivered every event of
# the segment (none left with an id up to its last), so that a stall shows
# as latency, not as events missing. True if stopped.
sub collect_if_delivered
{
	my ($env, $r, $c) = @_;
	return 0 if $c->{last_id}
	  && $env->sql("SELECT EXISTS (SELECT FROM outbox WHERE id <= $c->{last_id})") eq 't';
	collect($env, $r, $c, 0.5);
	return 1;
}

sub collect
{
	my ($env, $r, $c, $grace) = @_;
	my $res = $env->stop_consumer($c, $grace);
	push @{ $r->{samples} }, @{ $res->{samples} };
	$r->{received} += $res->{count};
	$r->{bad} += $res->{bad};
}

sub start_source
{
	my ($env, $o, $topic, $len) = @_;
	my $out = $env->file("load_$topic.out");
	if ($o->{source} ne 'producer' && $o->{source} ne 'transactions')
	{
		my $clients = $o->{clients} // 8;
		return { out => $out, kind => 'pgbench', h => $env->pgbench_bg($out,
				$o->{script} ? $o->{script}->($topic) : $env->latency_script($topic), '-c', $clients, '-j', ($clients > 1 ? 2 : 1),
				'-R', $o->{rate}, '-T', $len) };
	}
	my $commits = $env->file("commits_$topic");
	my @cmd = ("$env->{helpers}/baseline-producer", '-b', $env->bootstrap, '-t', $topic,
		'-n', int($o->{rate} * $len), '-k', 1000, '-r', $o->{rate}, '-X', 'linger.ms=' . FLOOR_LINGER_MS, '-S',
		($o->{source} eq 'transactions' ? ('-x', "bench-floor-$topic", '-l', $commits) : ()));
	# the application's transactions beside it, at the same rate (a loaded floor)
	my $beside = $o->{beside} && $env->pgbench_bg("$out.beside", $o->{beside}, '-c', 8, '-j', 2,
		'-R', $o->{rate}, '-T', $len);
	return { out => $out, kind => 'producer', commits => $commits, beside => $beside,
		h => Bench::Util::start_bg(\@cmd, '<', \undef, '>', $out, '2>&1') };
}

# Waits for the segment's load: { count, tps }.
sub finish_source
{
	my ($env, $load) = @_;
	Bench::Util::finish_bg($load->{h}) or die "$load->{kind} failed: " . Bench::Util::slurp($load->{out});
	return Bench::Env::pgbench_result($load->{out}) if $load->{kind} eq 'pgbench';
	Bench::Util::finish_bg($load->{beside}) or die 'pgbench beside the producer failed: ' . Bench::Util::slurp("$load->{out}.beside")
	  if $load->{beside};
	my $text = Bench::Util::slurp($load->{out});
	$text =~ /^RESULT msgs=(\d+) errors=\d+ seconds=[0-9.]+ msgs_per_s=([0-9.]+)(.*)$/m
	  or die "baseline-producer: $text";
	my %r = (count => $1, tps => $2);
	my $rest = $3;
	$r{$1} = $2 while $rest =~ /\b(commit_ms|ack_ms)_p50=([0-9.]+)/g;
	$r{requests} = $1 if $rest =~ /\brequests=(\d+)/;
	$r{commits} = [ map { [ split ' ' ] } split /\n/, Bench::Util::slurp($load->{commits}) ]
	  if -f $load->{commits};
	return \%r;
}

1;
