# Part memory: a worker's memory idle, at its peak while it drains a large
# backlog (its in-flight window full all along), and after; then while it
# drains large events (big payloads, then big headers), which
# outbox.window_bytes must keep in check. VmRSS counts
# the shared buffers the worker touched (RssShmem); RssAnon and Pss_Anon
# are its private memory; palloc is PostgreSQL's share of it.
package Bench::Part::Memory;

use strict;
use warnings;
use Bench::Util ();
use Bench::Env;
use OutboxTest qw(wait_until);
use IPC::Run ();
use Time::HiRes ();

my %MB = (vmrss => 'VmRSS', rssanon => 'RssAnon', rssshmem => 'RssShmem', pss => 'Pss', pss_anon => 'Pss_Anon');

sub run
{
	my ($ctx) = @_;
	my ($env, $res, $cfg) = @$ctx{qw(env res cfg)};
	$env->log("part memory: the worker's memory idle, draining $cfg->{memory_events} events, after");
	$env->set_shards(1);
	$env->sql('TRUNCATE outbox');
	$env->warm_up;
	my ($pid) = @{ $env->worker_pids };
	for my $run (1 .. $ctx->{runs})
	{
		$env->set_enabled(0);
		sleep 1;
		record_now($ctx, $run, $pid, 'idle', qw(vmrss rssanon pss pss_anon));
		$res->record('memory', 'idle_palloc_mb', 'MB', $run, palloc_mb($env, $pid));
		$env->fill_outbox($cfg->{memory_events});
		# analyzed: the worker's plans are made again for the big table
		$env->sql('ANALYZE outbox');
		$env->sql('CHECKPOINT');
		drain_watching($ctx, $run, $pid);
		sleep 5;
		record_now($ctx, $run, $pid, 'after', qw(vmrss rssanon pss pss_anon));
		$res->record('memory', 'vmhwm_mb', 'MB', $run, Bench::Util::proc_kb($pid)->{VmHWM} / 1024);
		$res->record('memory', 'after_palloc_mb', 'MB', $run, palloc_mb($env, $pid));
		my ($pid2) = @{ $env->worker_pids };
		die "the worker restarted during the memory part ($pid -> $pid2)" unless $pid2 == $pid;
	}
	# last: glibc keeps some of what it gave back, which would blur the above
	large_payloads($ctx, $_) for 1 .. $ctx->{runs};
	large_headers($ctx, $_) for 1 .. $ctx->{runs};
	$env->set_enabled(0);
}

sub record_now
{
	my ($ctx, $run, $pid, $when, @fields) = @_;
	my $kb = Bench::Util::proc_kb($pid) or die "the worker (pid $pid) is gone";
	$ctx->{res}->record('memory', "${when}_${_}_mb", 'MB', $run, ($kb->{ $MB{$_} } // 0) / 1024) for @fields;
}

# Switches delivery on and samples the worker every 0.2 s until the backlog
# is gone: peaks, drain rate, and once a second what the worker is doing.
sub drain_watching
{
	my ($ctx, $run, $pid) = @_;
	my ($env, $res) = @$ctx{qw(env res)};
	my $out = $env->file('memory_drain.out');
	my $drain = Bench::Util::start_bg([ @{ $env->psql_cmd }, '-f', $env->timed_drain_script ], '<', \undef, '>', $out, '2>', "$out.err");
	my (%peak, %activity, $i);
	while (Bench::Util::running($drain))
	{
		my $kb = Bench::Util::proc_kb($pid) or die "the worker (pid $pid) is gone";
		$peak{$_} = max($peak{$_}, $kb->{ $MB{$_} } // 0) for keys %MB;
		$activity{ $env->sql("SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') || '|' || coalesce(query, '')
			FROM pg_stat_activity WHERE pid = $pid") }++ if $i++ % 5 == 0;
		Time::HiRes::sleep(0.2);
	}
	Bench::Util::finish_bg($drain) or die 'the drain did not finish: ' . Bench::Util::slurp("$out.err");
	my $elapsed = Bench::Util::slurp($out);
	$res->record('memory', 'drain_events_per_s', 'events/s', $run, $ctx->{cfg}{memory_events} / $elapsed);
	$res->record('memory', "peak_${_}_mb", 'MB', $run, $peak{$_} / 1024) for qw(vmrss rssanon rssshmem pss pss_anon);
	for my $k (sort keys %activity)
	{
		my ($wait, $what) = split /\|/, $k, 2;
		$res->add('memory_worker_activity', { run => $run, wait => $wait, activity => $what, samples => $activity{$k} });
	}
}

sub max { my ($a, $b) = @_; return !defined $a || $b > $a ? $b : $a; }

# The worker's palloc'd memory (all its memory contexts) in MB, from
# pg_log_backend_memory_contexts: tells its own allocations from librdkafka's.
sub palloc_mb
{
	my ($env, $pid) = @_;
	my $re = qr/\[$pid\] outbox shard LOG:  Grand total: (\d+) bytes/;
	my $from = -s $env->node->logfile;
	$env->sql("SELECT pg_log_backend_memory_contexts($pid)");
	my $bytes;
	wait_until(10, sub { ($bytes) = Bench::Util::slurp_from($env->node->logfile, $from) =~ $re; defined $bytes });
	return defined $bytes ? $bytes / 1048576 : undef;
}

# Events of 1 MB (compressible, so the table stays small on disk; the worker
# holds them uncompressed): the byte bound, not the event count, must bound
# the worker's memory.
sub large_payloads
{
	my ($ctx, $run) = @_;
	big_events($ctx, $run, 'large', "SELECT count(outbox_send('bench', convert_to(i || repeat('x', 1048576), 'UTF8'), NULL))
		FROM generate_series(1, $ctx->{cfg}{large_events}) i");
}

# The same with what an application role can put in headers instead: 3000
# events with an empty payload and 200 kB of headers each (review e11b06c
# H3; headers count against outbox.window_bytes like payloads).
sub large_headers
{
	my ($ctx, $run) = @_;
	big_events($ctx, $run, 'headers', "SELECT count(outbox_send('bench', ''::bytea, NULL,
		jsonb_build_object('h', i || repeat('h', 200000)))) FROM generate_series(1, 3000) i");
}

# Sends what $sql sends while delivery is off, then samples the worker's
# RssAnon while it drains: ${label}_drain_s and ${label}_peak_rssanon_mb.
sub big_events
{
	my ($ctx, $run, $label, $sql) = @_;
	my ($env, $res) = @$ctx{qw(env res)};
	$env->set_setting('outbox.max_message_bytes', '2MB');
	$env->set_enabled(0);
	sleep 1;
	$env->sql($sql);
	$env->set_enabled(1);
	my ($pid) = @{ $env->worker_pids };
	my $peak = 0;
	my $t0 = Time::HiRes::time();
	while ($env->sql('SELECT count(*) > 0 FROM outbox') eq 't')
	{
		my $kb = Bench::Util::proc_kb($pid) or die "the worker (pid $pid) is gone";
		$peak = $kb->{RssAnon} if $kb->{RssAnon} > $peak;
		Time::HiRes::sleep(0.1);
	}
	$res->record('memory', "${label}_drain_s", 's', $run, Time::HiRes::time() - $t0);
	$res->record('memory', "${label}_peak_rssanon_mb", 'MB', $run, $peak / 1024);
	$env->reset_setting('outbox.max_message_bytes');
}

1;
