# Bench::Kafka: the Kafka side of the benchmark's environment, a base class
# of Bench::Env: the cluster (the project's broker, OutboxTest's
# start_broker, or with --kafka real a real three-broker Apache Kafka,
# t/KafkaCluster.pm), fresh topics, end offsets, and the two plain
# librdkafka helpers (the latency consumer that measures every latency, the
# producer that is the baseline).
package Bench::Kafka;

use strict;
use warnings;

use Bench::Util qw(slurp num);
use IPC::Run ();
use OutboxTest qw(wait_until);
use Time::HiRes ();

use constant PARTITIONS => 12;
use constant TOPIC      => 'bench';


sub start_broker
{
	my ($self) = @_;
	if ($self->real_kafka)
	{
		$self->start_real_kafka;
	}
	else
	{
		$self->{broker} = OutboxTest::start_broker(brokers => 3, topics => [ TOPIC . ':' . PARTITIONS ]);
	}
	$self->say('broker at ', $self->bootstrap);
}

sub real_kafka { return ($_[0]{kafka} // 'mock') eq 'real'; }

# Three KRaft brokers in the work directory, replication factor 3,
# min.insync.replicas 2 (t/KafkaCluster.pm). The drain and memory parts
# write gigabytes (three copies each): the bench topic keeps about the
# last 1.2 GB, and takes the memory part's 1 MB events (outbox.max_message_bytes
# 2MB there).
sub start_real_kafka
{
	my ($self) = @_;
	require KafkaCluster;
	my $c = KafkaCluster::start_kafka_cluster(dir => $self->file('kafka'),
		conf => "log.retention.check.interval.ms=10000");
	$self->say(sprintf('Kafka 4.4 cluster (3 brokers) up in %.1f s', $c->startup_s));
	$c->create_topic(TOPIC, partitions => PARTITIONS, config => {
		'max.message.bytes' => 4194304,
		'retention.bytes' => 104857600,
		'segment.bytes' => 16777216 });
	# nothing is created on first use there: exactly-once delivery's
	# progress records (the part modes)
	$c->create_topic('outbox_progress', partitions => 3,
		config => { 'cleanup.policy' => 'compact', 'segment.ms' => 600000 });
	$self->{broker} = $c;
}

sub bootstrap { return $_[0]{broker}->bootstrap; }

# Load segments: at most this many seconds and messages each, each on a
# fresh topic (Bench::Load). The mock broker finds a fetch's offset by
# walking the partition's whole log, so its topics must stay short; real
# Kafka has an offset index, so a segment there is only what the sustained
# part's hooks need between calls.
sub segment_limits
{
	my ($self) = @_;
	return $self->real_kafka ? (30, 1e9) : (Bench::Load::SEGMENT_S(), Bench::Load::SEGMENT_MESSAGES());
}

# A topic of PARTITIONS partitions that nothing wrote to yet (see
# segment_limits); on real Kafka created with replication factor 3 and
# waited for until every partition has its full ISR.
sub fresh_topic
{
	my ($self, $label) = @_;
	my $name = sprintf('lat_%s_%d', $label, ++$self->{topics});
	if ($self->real_kafka)
	{
		# the broker's append time on every record: latency-consumer
		# splits each latency there (send to append, append to consumer)
		$self->{broker}->create_topic($name, partitions => PARTITIONS,
			config => { 'message.timestamp.type' => 'LogAppendTime' });
	}
	else
	{
		$self->{broker}->command("create $name " . PARTITIONS);
	}
	return $name;
}

# Waits, on real Kafka, until fresh topics' followers fetch them. A
# follower's fetch request already waiting on a leader (up to
# replica.fetch.wait.max.ms, 500 ms) names only the partitions it followed
# when it was sent, and an acks=all produce waits for the followers: on a
# topic created just before its load, the load's first requests waited
# 290-300 ms for those fetches to time out (the brokers' request log), a
# stall no long-lived topic has (docs/performance.md, "A load's first
# second"). Loaded 1.5 s after their topics were created, no plain
# producer's first quarter second took over 51 ms (14 loads; 7 of 10 took
# 125-322 ms before).
use constant FOLLOWERS_FETCH_S => 1.5;

sub await_followers
{
	my ($self) = @_;
	Time::HiRes::sleep(FOLLOWERS_FETCH_S) if $self->real_kafka;
}

# Deletes topics a load is done with, on real Kafka: every load writes to
# fresh topics, and three brokers on two cores slow down as partitions
# pile up (600 partitions: the plain producer's p50 at 1000/s 35-39 ms
# against 6; back to 6 once deleted; docs/performance.md). The project's
# broker keeps them (it has no deletion).
sub drop_topics
{
	my ($self, @topics) = @_;
	$self->{broker}->delete_topics(@topics) if $self->real_kafka && @topics;
}

# Opens each topic's partitions for every shard's producer and waits
# until the worker delivered what that took: a producer's first keyed
# events to a partition go one at a time until Kafka acknowledged one
# there (src/kafka/partitions.c), which a long-lived topic paid once and
# the plain producer of the floor never pays. WARM_KEYS distinct keys
# miss a (shard, partition) pair with a chance under 1e-8 with 2 shards,
# about 1e-3 with 4.
use constant WARM_KEYS => 512;
# After one round every partition of a fresh topic holds more than
# index.interval.bytes (4096) and no offset index entry yet, so its next
# append writes the segment's first one, into a page of the memory-mapped
# index never touched before: that page fault held each partition's first
# request of the load 8-17 ms (median) on the leader and as long on each
# follower, all 12 partitions at once and, one request at a time per
# connection, the load's first quarter second (docs/performance.md, "A
# load's first second"). The second round takes it before the load, as a
# long-lived topic did long before.
use constant WARM_ROUNDS => 2;

sub warm_topics
{
	my ($self, @topics) = @_;
	for (1 .. WARM_ROUNDS)
	{
		$self->send_warm_up(undef, WARM_KEYS, @topics);
		$self->wait_empty(120);
	}
}

# The warm-up's events: $keys keyed events to each of @topics, sent in
# database $db (undef: the benchmark's own).
sub send_warm_up
{
	my ($self, $db, $keys, @topics) = @_;
	$self->sql("SELECT count(outbox_send(t, 'warm-up', 'warm-up-' || k)) FROM unnest(ARRAY['"
		  . join("', '", @topics) . "']) t, generate_series(1, $keys) k", $db);
}

# The sum of the end offsets of the topic's partitions (kcat -Q).
sub kafka_total
{
	my ($self, $topic) = @_;
	$topic //= TOPIC;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-Q', '-b', $self->bootstrap,
		map { ('-t', "$topic:$_:-1") } 0 .. PARTITIONS - 1 ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat -Q failed: $err";
	my @offsets = $out =~ /offset (-?\d+)/g;
	die "kcat -Q: " . scalar(@offsets) . " offsets for $topic: $out" unless @offsets == PARTITIONS;
	my $sum = 0;
	$sum += $_ for @offsets;
	return $sum;
}


# The consumer's fetch.wait.max.ms. The mock holds an empty fetch for that
# long even when data arrives meanwhile, so it bounds what the consumer adds
# to a latency there; a real broker answers a waiting fetch as soon as the
# high watermark moves, and 1 ms would only make three JVMs answer ~3000
# empty fetches a second on the benchmark's two cores.
sub fetch_wait_ms { return $_[0]->real_kafka ? 100 : 1; }

# Starts latency-consumer at the end of $topic and waits for READY.
sub start_consumer
{
	my ($self, $topic) = @_;
	my $out = $self->file("consumer_$topic.out");
	my @cmd = ("$self->{helpers}/latency-consumer", '-b', $self->bootstrap, '-t', $topic,
		'-T', 100000, '-f', $self->fetch_wait_ms, '-d', "$out.samples");
	my $h = Bench::Util::start_bg(\@cmd, '<', \undef, '>', $out, '2>', "$out.err");
	wait_until(30, sub { slurp($out) =~ /^READY/m })
	  or die "latency-consumer not ready: " . slurp("$out.err");
	return { h => $h, out => $out, topic => $topic };
}

# Stops it, after $grace seconds (default 1) for stragglers: { count, bad,
# p50_ms, p99_ms, max_ms, samples => [[receive time (Unix s), ms], ...] }.
sub stop_consumer
{
	my ($self, $c, $grace) = @_;
	Time::HiRes::sleep($grace // 1);
	$c->{h}->signal('TERM');
	Bench::Util::finish_bg($c->{h});
	my $text = slurp($c->{out});
	$text =~ /^RESULT (.*)$/m or die "latency-consumer printed no result: " . slurp("$c->{out}.err");
	my %r = map { split /=/, $_, 2 } split ' ', $1;
	$_ = num($_) for values %r;
	open my $fh, '<', "$c->{out}.samples" or die "$c->{out}.samples: $!";
	$r{samples} = [ map { [ split ' ' ] } <$fh> ];
	return \%r;
}

# Requests the shards' producers have sent to every broker so far
# (outbox_kafka_brokers.requests, from librdkafka's statistics, which the
# workers take in every second).
sub requests_sent
{
	my ($self) = @_;
	Time::HiRes::sleep(1.5);
	return $self->sql('SELECT coalesce(sum(requests), 0) FROM outbox_kafka_brokers') + 0;
}

# The plain librdkafka producer: [args] -> { msgs, msgs_per_s, ... }.
sub produce
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ "$self->{helpers}/baseline-producer", '-b', $self->bootstrap, @args ],
		'<', \undef, '>', \$out, '2>', \$err) or die "baseline-producer: $out $err";
	$out =~ /^RESULT (.*)$/m or die "baseline-producer: $out $err";
	my %r = map { split /=/, $_, 2 } split ' ', $1;
	return \%r;
}

1;
