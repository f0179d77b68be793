#!/usr/bin/perl
# A TCP proxy in front of Kafka brokers that answers one Produce request
# itself, with a retriable error (NOT_ENOUGH_REPLICAS), without passing it
# on, while the requests after it go through: what a real cluster cannot
# be told to do. Kafka, holding no state for a new producer on a
# partition, writes the later requests (it takes any sequence number), and
# librdkafka's idempotent producer, seeing them succeed, reports the
# refused message delivered without an offset. t/109_kafka_unproven_ack.pl
# runs it in front of a cluster started with proxied => 1.
#
# And, the other way round, one whose answer is lost: passed on to the
# broker, which writes it, and answered REQUEST_TIMED_OUT in its place, as
# a broker that came back from a pause answers what waited for its
# followers too long (t/117_kafka_outage_duplicates.pl). That answer (and
# those after it on the connection, which Kafka answers in order) waits
# until a later request of one of its partitions has gone to the broker,
# at most HOLD_S: librdkafka learns that the later one succeeded only
# after the refusal, the case where it reports the lost one's messages
# delivered without an offset. Left to chance, a quiet partition's retry
# comes first and is answered with its offset. And librdkafka sends no
# later request to a partition with 5 messages unanswered (its count
# against Kafka's 5 requests in flight), so the answer lost is that of
# the next Produce request that leaves each of its partitions at most 4
# records unanswered on the connection: a bigger one (a burst after a
# slow answer) would be followed by none.
#
# Usage: produce_proxy.pl LISTEN_PORT:BROKER_PORT ...  (127.0.0.1 only)
# Prints "ready" once listening. SIGUSR1: each route refuses the next
# Produce request a client sends through it, and prints "refused ...".
# SIGUSR2: each route passes the next one on but answers it
# REQUEST_TIMED_OUT, and prints "lost the answer to ... records=N" (and
# "no later request of ..." if none came within HOLD_S).
# Produce versions 3 to 8 (librdkafka 2.0.2 sends 7). Ends when stdin
# closes.
use strict;
use warnings;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time);

$| = 1;
my $PRODUCE = 0;				# Kafka's api key of a Produce request
my $NOT_ENOUGH_REPLICAS = 19;
my $REQUEST_TIMED_OUT = 7;
my $HOLD_S = 2;
my $FOLLOWABLE = 4;			# librdkafka's in-flight limit, less one
my (%listener_route, %peer, %client_route, %pending, %answers, %lose, %held, %unanswered, %counted);
my $select = IO::Select->new(\*STDIN);

for my $route (@ARGV)
{
	my ($listen, $target) = $route =~ /^(\d+):(\d+)$/ or die "bad route $route\n";
	my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $listen,
		Listen => 16, ReuseAddr => 1) or die "listen on $listen: $!\n";
	$listener_route{$s} = { target => $target, listen => $listen, refuse => 0, lose => 0 };
	$select->add($s);
}
$SIG{USR1} = sub { $_->{refuse}++ for values %listener_route; };
$SIG{USR2} = sub { $_->{lose}++ for values %listener_route; };
print "ready\n";

sub accept_client
{
	my ($listener) = @_;
	my $route = $listener_route{$listener};
	my $client = $listener->accept or return;
	my $broker = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $route->{target})
	  or do { close $client; return; };
	@peer{ $client, $broker } = ($broker, $client);
	$client_route{$client} = $route;
	$pending{$client} = '';
	$answers{$broker} = '';
	$lose{$broker} = {};
	$unanswered{$broker} = {};
	$counted{$broker} = {};
	$select->add($client, $broker);
}

sub close_pair
{
	my ($s) = @_;
	my $other = $peer{$s};
	for my $h ($s, $other)
	{
		next unless $h;
		$select->remove($h);
		delete $peer{$h};
		delete $client_route{$h};
		delete $pending{$h};
		delete $answers{$h};
		delete $lose{$h};
		delete $held{$h};
		delete $unanswered{$h};
		delete $counted{$h};
		close $h;
	}
}


# A Produce request (versions 3-8): its version, correlation id, topics
# as [topic, [partitions]], how many records its batches hold, and how
# many each "topic:partition" holds.
sub parse_produce
{
	my ($request) = @_;
	my ($version, $correlation, $client_len) = unpack('x4 x2 n N s>', $request);
	my $at = 14 + ($client_len > 0 ? $client_len : 0);
	die "Produce v$version: only versions 3 to 8 are understood\n" if $version < 3 || $version > 8;
	my $txn_len = unpack("x$at s>", $request);
	$at += 2 + ($txn_len > 0 ? $txn_len : 0) + 2 + 4;	# transactional id, acks, timeout
	my ($ntopics) = unpack("x$at N", $request);
	$at += 4;
	my @topics;
	my $records = 0;
	my %by_partition;
	for (1 .. $ntopics)
	{
		my $name_len = unpack("x$at n", $request);
		my $name = substr($request, $at + 2, $name_len);
		$at += 2 + $name_len;
		my $nparts = unpack("x$at N", $request);
		$at += 4;
		my @partitions;
		for (1 .. $nparts)
		{
			my ($partition, $records_len) = unpack("x$at N l>", $request);
			push @partitions, $partition;
			# a record batch's count is 57 bytes into it
			$by_partition{"$name:$partition"} =
			  $records_len >= 61 ? unpack('x' . ($at + 8 + 57) . ' N', $request) : 0;
			$records += $by_partition{"$name:$partition"};
			$at += 8 + ($records_len > 0 ? $records_len : 0);
		}
		push @topics, [ $name, \@partitions ];
	}
	return { version => $version, correlation => $correlation, topics => \@topics,
		records => $records, by_partition => \%by_partition };
}

# Kafka's answer to it, had every partition been refused with $error.
sub produce_error_response
{
	my ($version, $correlation, $topics, $error) = @_;
	my $body = pack('N N', $correlation, scalar @$topics);
	for my $topic (@$topics)
	{
		my ($name, $partitions) = @$topic;
		$body .= pack('n/a* N', $name, scalar @$partitions);
		for my $partition (@$partitions)
		{
			$body .= pack('N s> q> q>', $partition, $error, -1, -1);
			$body .= pack('q>', -1) if $version >= 5;	# log start offset
			$body .= pack('N s>', 0, -1) if $version >= 8;	# record errors, message
		}
	}
	$body .= pack('N', 0);		# throttle time
	return pack('N', length $body) . $body;
}

# A signal may cut a write short: the rest follows.
sub write_all
{
	my ($h, $data) = @_;
	while (length $data)
	{
		my $n = syswrite($h, $data);
		return 0 unless defined $n || $!{EINTR};
		substr($data, 0, $n // 0, '');
	}
	return 1;
}

# A client's bytes go on whole request by whole request, so that one
# Produce request can be answered here instead.
sub forward_requests
{
	my ($client) = @_;
	my $route = $client_route{$client};
	while (length $pending{$client} >= 8)
	{
		my ($size, $api_key) = unpack('N n', $pending{$client});
		last if length $pending{$client} < 4 + $size;
		my $request = substr($pending{$client}, 0, 4 + $size, '');
		# parsed once; a version parse_produce does not understand fails
		# only a refusal or a loss, and is otherwise forwarded uncounted
		my $must_parse = $route->{refuse} > 0 || $route->{lose} > 0 || %{ $lose{ $peer{$client} } };
		my $p = $api_key != $PRODUCE ? undef
		  : $must_parse ? parse_produce($request) : eval { parse_produce($request) };
		if ($p && $route->{refuse} > 0)
		{
			$route->{refuse}--;
			write_all($client, produce_error_response($p->{version}, $p->{correlation}, $p->{topics},
				$NOT_ENOUGH_REPLICAS)) or return close_pair($client);
			print "refused Produce request $p->{correlation} (v$p->{version}) to port $route->{target}: ",
			  join(' ', map { "$_->[0]@[@{ $_->[1] }]" } @{ $p->{topics} }), "\n";
			next;
		}
		if ($p && $route->{lose} > 0 && followable($peer{$client}, $p))
		{
			$route->{lose}--;
			$lose{ $peer{$client} }{ $p->{correlation} } =
			  { version => $p->{version}, topics => $p->{topics}, followed => 0 };
			print "lost the answer to Produce request $p->{correlation} (v$p->{version}) to port $route->{target}: ",
			  join(' ', map { "$_->[0]@[@{ $_->[1] }]" } @{ $p->{topics} }), " records=$p->{records}\n";
		}
		elsif ($p && %{ $lose{ $peer{$client} } })
		{
			mark_followed($peer{$client}, $p);
		}
		count_unanswered($peer{$client}, $p) if $p;
		write_all($peer{$client}, $request) or return close_pair($client);
	}
	forward_answers($peer{$client}) if $held{ $peer{$client} } && $held{ $peer{$client} }{lost}{followed};
}

# Whether librdkafka can send a later request to each partition of $p, a
# parsed Produce request to $broker, before its answer comes: at most
# $FOLLOWABLE records of the partition unanswered with it.
sub followable
{
	my ($broker, $p) = @_;
	my $by_partition = $p->{by_partition};
	return !grep { ($unanswered{$broker}{$_} // 0) + $by_partition->{$_} > $FOLLOWABLE } keys %$by_partition;
}

# The records of each partition that $broker has not answered yet: a
# request's are counted as it goes, and taken off as its answer comes back.
sub count_unanswered
{
	my ($broker, $p) = @_;
	$counted{$broker}{ $p->{correlation} } = $p->{by_partition};
	$unanswered{$broker}{$_} += $p->{by_partition}{$_} for keys %{ $p->{by_partition} };
}

sub uncount_answered
{
	my ($broker, $correlation) = @_;
	my $by_partition = delete $counted{$broker}{$correlation} or return;
	$unanswered{$broker}{$_} -= $by_partition->{$_} for keys %$by_partition;
}

# The lost answers on $broker that $p, a later Produce request, shares a
# partition with.
sub mark_followed
{
	my ($broker, $p) = @_;
	my %sent = map { ($_ => 1) } keys %{ $p->{by_partition} };
	for my $lost (values %{ $lose{$broker} })
	{
		$lost->{followed} ||= grep { my $t = $_; grep { $sent{"$t->[0]:$_"} } @{ $t->[1] } }
		  @{ $lost->{topics} };
	}
}

# A broker's answers go back whole, in order, the lost ones replaced once
# followed (or HOLD_S after they came).
sub forward_answers
{
	my ($broker) = @_;
	delete $held{$broker};
	while (length $answers{$broker} >= 8)
	{
		my ($size, $correlation) = unpack('N N', $answers{$broker});
		last if length $answers{$broker} < 4 + $size;
		my $lost = $lose{$broker}{$correlation};
		if ($lost && !$lost->{followed})
		{
			$lost->{until} //= time + $HOLD_S;
			$held{$broker} = { broker => $broker, lost => $lost, until => $lost->{until} };
			return;
		}
		my $answer = substr($answers{$broker}, 0, 4 + $size, '');
		uncount_answered($broker, $correlation);
		if ($lost)
		{
			delete $lose{$broker}{$correlation};
			$answer = produce_error_response($lost->{version}, $correlation, $lost->{topics},
				$REQUEST_TIMED_OUT);
		}
		write_all($peer{$broker}, $answer) or return close_pair($broker);
	}
}

# Held answers whose later request did not come in time go back anyway.
sub release_expired
{
	for my $hold (grep { $_->{until} <= time } values %held)
	{
		$hold->{lost}{followed} = 1;
		print 'no later request of ', join(' ', map { "$_->[0]@[@{ $_->[1] }]" } @{ $hold->{lost}{topics} }),
		  " within $HOLD_S s\n";
		forward_answers($hold->{broker});
	}
}

while (1)
{
	release_expired();
	for my $s ($select->can_read(0.05))
	{
		if ($s == \*STDIN)
		{
			exit 0 unless sysread(STDIN, my $ignored, 4096);
			next;
		}
		if ($listener_route{$s})
		{
			accept_client($s);
			next;
		}
		next unless $peer{$s};
		my $n = sysread($s, my $data, 65536);
		if (!$n)
		{
			close_pair($s);
			next;
		}
		if (exists $client_route{$s})
		{
			$pending{$s} .= $data;
			forward_requests($s);
		}
		else
		{
			$answers{$s} .= $data;
			forward_answers($s);
		}
	}
}
