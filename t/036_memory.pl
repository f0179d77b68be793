# A worker's memory is bounded by bytes, not by event count (review M5):
# with outbox.max_message_bytes = 2MB, the default outbox.batch_size (1000)
# and the default outbox.window_bytes (64MB), 2000 events of 1 MB each are
# sent while delivery is paused, then delivered by one worker. Its private
# resident memory (RssAnon in /proc/PID/status, sampled every 100 ms while
# it drains) must stay under 3 x window_bytes + 16 MB, 208 MB
# (docs/settings.md, outbox.window_bytes, promises about 2-3 x
# window_bytes), its peak resident memory VmHWM (which a sample cannot
# miss, but which counts the shared buffers it touched too) under that +
# shared_buffers, and all 2000 events must reach Kafka. Done once with
# message_format = payload, once with envelope, once with large headers.
# Without the worker's fixed malloc thresholds (src/worker/heap.c) the
# peak reached 193-265 MB with the envelope.
# The payloads compress to almost nothing (lz4), so the table stays small:
# what is measured is the worker's copies, not the disk. The broker keeps
# only the last ~5 MiB of a partition, so delivery is counted from the
# partitions' end offsets (kcat -Q), and the messages still kept are read
# back to check their size.
use strict;
use warnings;
use FindBin;
use IPC::Run;
use List::Util ();
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $events = 2000;
my $mb = 1048576;
my $partitions = 4;
my $bound_mb = 3 * 64 + 16;
my $abort_mb = 1024;    # the old code takes GBs: stop before the machine does

my $broker = start_broker(topics => [ "mem_payload:$partitions", "mem_envelope:$partitions",
	"mem_headers:$partitions" ]);
my $node = new_outbox_node('memory', $broker, shards => 1, conf => q{
outbox.max_message_bytes = '2MB'
outbox.enabled = off
});

# ---- helpers ---------------------------------------------------------------

# $events events of 1 MB + a unique 9-byte prefix ("00000042:"), no key,
# in transactions of 250, stored lz4-compressed.
sub send_big
{
	my ($topic) = @_;
	for (my $from = 1; $from <= $events; $from += 250)
	{
		my $to = $from + 249;
		sql(qq{SET default_toast_compression = lz4;
SELECT count(outbox_send('$topic', lpad(i::text, 8, '0') || ':' || repeat('x', $mb)))
FROM generate_series($from, $to) i});
	}
}

# RssAnon and VmHWM of a process in MB; () once it is gone.
sub proc_mem
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/status") or return ();
	my %kb = map { /^(\w+):\s+(\d+) kB/ ? ($1 => $2) : () } <$fh>;
	return (($kb{RssAnon} // 0) / 1024, ($kb{VmHWM} // 0) / 1024);
}

# Resumes delivery and samples the worker's memory until the outbox is
# empty (checked every second) or 150 s passed; the worker is stopped if it
# passes $abort_mb. Returns {anon, hwm, seconds, samples, drained, aborted}.
sub drain_and_sample
{
	my ($pid) = @{ worker_pids($node) };
	my %r = (anon => 0, hwm => 0, samples => 0, drained => 0, aborted => 0);
	reload_with($node, 'outbox.enabled = on');
	my $t0 = time;
	my $next_check = $t0 + 1;
	while (time - $t0 < 150)
	{
		my ($anon, $hwm) = proc_mem($pid);
		last unless defined $anon;    # the worker exited: checked below
		$r{samples}++;
		$r{anon} = $anon if $anon > $r{anon};
		$r{hwm} = $hwm if $hwm > $r{hwm};
		if ($anon > $abort_mb)
		{
			diag("worker $pid holds $anon MB of anonymous memory: stopping it");
			$r{aborted} = 1;
			pause_delivery($node, 1);
			sql("SELECT pg_terminate_backend($pid)");
			last;
		}
		if (time >= $next_check)
		{
			$next_check = time + 1;
			if (sql('SELECT count(*) FROM outbox') eq '0') { $r{drained} = 1; last; }
		}
		sleep 0.1;
	}
	$r{seconds} = time - $t0;
	$r{same_worker} = (grep { $_ == $pid } @{ worker_pids($node) }) ? 1 : 0;
	return \%r;
}

# A process's memory contexts, as pg_log_backend_memory_contexts logs them.
sub memory_contexts
{
	my ($pid) = @_;
	my $from = -s $node->logfile;
	sql("SELECT pg_log_backend_memory_contexts($pid)");
	my $log = '';
	wait_until(10, sub { $log = slurp_file($node->logfile, $from); $log =~ /Grand total:/ })
	  or die "no memory contexts logged for $pid";
	return $log;
}

# The sizes of the messages the broker still keeps: [bytes, ...].
sub kept_sizes
{
	my ($topic) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-C', '-b', $broker->bootstrap, '-t', $topic, '-e', '-q',
		'-f', '%S\n' ], '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(120))
	  or die "kcat failed: $err";
	return [ grep { length } split /\n/, $out ];
}

# ---- the test --------------------------------------------------------------

ok(wait_until(30, sub { @{ worker_pids($node) } == 1 }), 'the worker runs');
# (psql, not safe_psql: a build without the setting still gets measured)
$node->psql('postgres', 'SHOW outbox.window_bytes', stdout => \my $window_bytes);
is($window_bytes, '64MB', 'outbox.window_bytes exists, at its default');
my $shared_mb = sql(q{SELECT pg_size_bytes(current_setting('shared_buffers')) / 1048576});

for my $format ('payload', 'envelope')
{
	my $topic = "mem_$format";
	ok(pause_delivery($node, 1, $format eq 'payload' ? 0 : undef), "($format) delivery paused");
	reload_with($node, "outbox.message_format = '$format'");
	my $t_send = time;
	send_big($topic);
	my $send_s = time - $t_send;
	my $table_mb = sql(q{SELECT pg_total_relation_size('outbox') / 1048576});
	is(sql('SELECT count(*) FROM outbox'), $events, "($format) $events events of 1 MB wait");
	my $bytes = sql('SELECT sum(octet_length(payload)) FROM outbox');

	my $r = drain_and_sample();
	my $delivered = end_offsets_sum($broker, $topic, $partitions);
	my $left = sql('SELECT count(*) FROM outbox');
	diag(sprintf('FIGURES (%s) memory: events=%d bytes=%d table_mb=%d send_s=%.1f '
		  . 'peak_rss_anon_mb=%.0f peak_vmhwm_mb=%.0f drain_s=%.1f samples=%d delivered=%d left=%d',
		$format, $events, $bytes, $table_mb, $send_s, $r->{anon}, $r->{hwm}, $r->{seconds},
		$r->{samples}, $delivered, $left));
	ok(!$r->{aborted}, "($format) the worker never passed $abort_mb MB");
	cmp_ok($r->{samples}, '>=', 5, "($format) the worker's memory was sampled while it drained");
	ok($r->{same_worker}, "($format) one worker drained it all, without a restart");
	cmp_ok($r->{anon}, '<', $bound_mb, "($format) peak RssAnon under $bound_mb MB");
	cmp_ok($r->{hwm}, '<', $bound_mb + $shared_mb,
		"($format) VmHWM under $bound_mb MB + shared_buffers ($shared_mb MB)");
	ok($r->{drained}, "($format) the outbox drained within 150 s");
	is($left, 0, "($format) the outbox is empty");
	is($delivered, $events, "($format) Kafka received $events messages");

	my $sizes = kept_sizes($topic);
	my $want = $format eq 'payload' ? $mb + 9 : undef;
	my $bad = grep { defined $want ? $_ != $want : $_ <= $mb + 9 } @$sizes;
	cmp_ok(scalar @$sizes, '>', 0, "($format) the broker still keeps some of them");
	is($bad, 0, "($format) the kept messages (" . scalar(@$sizes) . ") carry the whole payload");
	last if $r->{aborted};
}

# ---- headers count too (review e11b06c H3) ----------------------------------
# 3000 events with an empty payload and 200 kB of headers each (they
# compress to almost nothing on disk): the read and the window count the
# headers against outbox.window_bytes, so the worker holds about a window's
# worth of them, not 3000 x 200 kB.
{
	my $topic = 'mem_headers';
	my $n = 3000;
	ok(pause_delivery($node, 1, undef), '(headers) delivery paused');
	reload_with($node, "outbox.message_format = 'payload'");
	for (my $from = 1; $from <= $n; $from += 500)
	{
		my $to = $from + 499;
		sql(qq{SET default_toast_compression = lz4;
SELECT count(outbox_send('$topic', '', 'k' || i,
	jsonb_build_object('h', lpad(i::text, 8, '0') || repeat('h', 200000))))
FROM generate_series($from, $to) i});
	}
	my $r = drain_and_sample();
	my $delivered = end_offsets_sum($broker, $topic, $partitions);
	diag(sprintf('FIGURES (headers) H3 memory: events=%d header_bytes_each=200008 payload_bytes=0 '
		  . 'peak_rss_anon_mb=%.0f peak_vmhwm_mb=%.0f drain_s=%.1f samples=%d delivered=%d',
		$n, $r->{anon}, $r->{hwm}, $r->{seconds}, $r->{samples}, $delivered));
	ok(!$r->{aborted}, "(headers) the worker never passed $abort_mb MB");
	ok($r->{same_worker}, '(headers) one worker drained it all, without a restart');
	cmp_ok($r->{anon}, '<', $bound_mb, "(headers) peak RssAnon under $bound_mb MB");
	ok($r->{drained}, '(headers) the outbox drained');
	is($delivered, $n, "(headers) Kafka received $n messages");
}

# ---- many small reads in flight ---------------------------------------------
# Each read keeps its memory until all its events are settled. A read of a
# few events must not keep room for outbox.batch_size of them: it kept
# 1000 x 168 bytes each, so at 1000-3000 events/s against a real cluster
# (a few hundred reads in flight) the worker held 21-113 MB (bench part
# cpu; 10-14 MB with each read's array grown as its rows come). 40
# one-event transactions 30 ms apart (about a read each) while
# acknowledgements take 2.5 s (under socket.timeout.ms), then each read's
# memory ("outbox batch" contexts, pg_log_backend_memory_contexts: it
# lists up to 100).
{
	my $topic = 'mem_payload';
	my $n = 40;
	my $bound = 32768;
	my ($pid) = @{ worker_pids($node) };
	reload_with($node, 'outbox.enabled = on');
	# a new producer reads no more until its first event is acknowledged
	sql("SELECT outbox_send('$topic', 'warm')");
	ok(wait_for_empty($node, 30), '(small reads) the producer is warm');
	$broker->command('rtt all 2500');
	sql(join "\n", map { "BEGIN; SELECT outbox_send('$topic', 'small $_'); COMMIT;"
		  . " SELECT pg_sleep(0.03);" } 1 .. $n);
	my $in_flight = sql('SELECT count(*) FROM outbox');
	my @reads = memory_contexts($pid) =~ /outbox batch: (\d+) total/g;
	$broker->command('rtt all 0');
	ok(wait_for_empty($node, 60), '(small reads) the outbox drains');
	my $per_read = @reads ? List::Util::sum(@reads) / @reads : 0;
	diag(sprintf('FIGURES (small reads) memory: events=%d in_flight_at_look=%d reads=%d '
		  . 'bytes_per_read=%.0f largest=%d', $n, $in_flight, scalar @reads, $per_read,
		List::Util::max(@reads, 0)));
	cmp_ok(scalar @reads, '>=', 5, '(small reads) the window holds several reads');
	cmp_ok($per_read, '<', $bound, "(small reads) a read of a few events holds under $bound bytes");
}

is(sql('SELECT count(*) FROM outbox_dead_letter'), '0', 'no dead letters');
$node->stop;
$broker->stop;
done_testing();
