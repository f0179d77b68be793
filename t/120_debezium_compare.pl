# pg_outbox's Debezium-shaped capture beside Debezium itself (issue 41,
# "Proof by the real thing"): the same rows inserted into one outbox table
# of Debezium's documented shape are read by Debezium 3.6.1's PostgreSQL
# connector with its EventRouter (Kafka Connect 4.3.0, JSON converter) and
# by pg_outbox's capture trigger, each configuration under a topic prefix
# of its own (<scenario>_D for Debezium, <scenario>_P for pg_outbox), with
# the EventRouter's options set one way and another. Then kcat reads both
# back and every record is compared byte for byte: topic (the prefix
# mapped), partition, key, value, headers, timestamp. The table it prints
# is the list docs/debezium-comparison.md explains.
#
# Only with OUTBOX_TEST_DEBEZIUM=1 (it needs Debezium's jars, which CI's
# default run does not fetch); on a real cluster always (Debezium's
# producer is Java's, the partitioner included).
use strict;
use warnings;

use File::Basename qw(dirname);
use lib dirname(__FILE__);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use OutboxTest;
use DebeziumConnect;
use IPC::Run ();

if (my $why = DebeziumConnect::skip_reason()) { plan skip_all => $why; }

my $TABLE = 'outboxevent';
my $PARTITIONS = 3;

# The rows: aggregatetype, aggregateid, type, payload (jsonb literal or
# undef), tenant, part, version. Payloads chosen for what a converter can
# get wrong: nesting, nulls, escapes, non-ASCII, scalars, arrays, big
# integers, a null payload.
my @ROWS = (
	[ 'Order', 'o-1', 'OrderCreated', '{"id": 1, "total": 10.5, "lines": [{"sku": "A-1", "qty": 2}]}', 'acme', 0, 1 ],
	[ 'Order', 'o-1', 'OrderShipped', '{"id": 1, "carrier": null, "shipped": true}', 'acme', 1, 2 ],
	[ 'Customer', 'c-7', 'CustomerMoved', '{"name": "Zo\u00eb \"Z\" \u00dcnal", "note": "line1\nline2\ttab \u2713"}', 'globex', 2, 1 ],
	[ 'Customer', 'c-8', 'CustomerMoved', '"just a string"', 'globex', 0, 1 ],
	[ 'order-lines', 'ol-1', 'OrderCreated', '[1, 2.5, "x", null, {"a": []}]', 'acme', 1, 1 ],
	[ 'Order', 'o-2', 'OrderCreated', '42', 'acme', 2, 3 ],
	[ 'Order', 'o-2', 'OrderShipped', '{}', 'acme', 0, 1 ],
	[ 'Customer', 'c-9', 'CustomerMoved', undef, 'globex', 1, 1 ],
	[ 'Order', "\x{43a}\x{43b}\x{44e}\x{447}-3", 'OrderCreated', '{"big": 9007199254740993, "neg": -1.25}', 'acme', 2, 1 ],
	[ 'Order', 'o-4', 'OrderCreated', '{"nested": {"deep": {"deeper": [true, false]}}, "s": ""}', 'acme', 0, 1 ],
	(map { [ 'Customer', "c-$_", 'CustomerMoved', qq({"n": $_}), 'globex', $_ % 3, 1 ] } 10 .. 13),
);

# Kafka Connect's default: JsonConverter with schemas (the worker's
# converters); a connector overrides a converter's settings only with the
# converter itself
my $SCHEMAS = {};
my $NO_SCHEMAS = { map { ("$_.converter" => 'org.apache.kafka.connect.json.JsonConverter',
			"$_.converter.schemas.enable" => 'false') } qw(key value) };

# name => [EventRouter options beyond the topic prefix, converters, the
# column the topic comes from, the routed value => topic suffix]
my @SCENARIOS = (
	[ dflt => {}, $SCHEMAS ],
	[ nosch => {}, $NO_SCHEMAS ],
	[ route => { 'route.by.field' => 'type' }, $NO_SCHEMAS, 2 ],
	[ regex => { 'route.topic.regex' => '(?<routedByValue>[A-Za-z]+)(.*)',
			'route.topic.replacement' => 'ev.${routedByValue}.x$2' }, $NO_SCHEMAS ],
	[ key => { 'table.field.event.key' => 'tenant' }, $NO_SCHEMAS ],
	[ expand => { 'table.expand.json.payload' => 'true' }, $NO_SCHEMAS ],
	[ expands => { 'table.expand.json.payload' => 'true' }, $SCHEMAS ],
	[ ts => { 'table.field.event.timestamp' => 'created_at' }, $NO_SCHEMAS ],
	[ place => { 'table.fields.additional.placement' =>
			  'tenant:header,version:envelope:eventVersion,part:partition,type:header:eventType' }, $NO_SCHEMAS ],
);

# The topic a row goes to under a scenario, without its side's prefix.
sub topic_of
{
	my ($sc, $row) = @_;
	my ($name, $router) = @$sc;
	my $routed = $row->[ $router->{'route.by.field'} ? 2 : 0 ];
	return "$name.ev.$1.x$2" if $router->{'route.topic.regex'} && $routed =~ /^([A-Za-z]+)(.*)$/;
	return "$name.outbox.event.$routed";
}

# The EventRouter options of a scenario for one side ('D' or 'P'): its
# topic prefix goes into route.topic.replacement.
sub router_options
{
	my ($sc, $side) = @_;
	my %o = %{ $sc->[1] };
	$o{'route.topic.replacement'} = "$sc->[0]_$side." . ($o{'route.topic.replacement'} // 'outbox.event.${routedByValue}');
	return \%o;
}

# topic names of their own: a cluster shared between runs
# (OUTBOX_TEST_KAFKA_BOOTSTRAP) keeps the topics of the last one
$_->[0] .= $$ % 1000 for @SCENARIOS;

my %topics;
for my $sc (@SCENARIOS)
{
	$topics{ topic_of($sc, $_) } = 1 for @ROWS;
}
my @all_topics = map { ("${_}" =~ s/^([^.]+)\./$1_D./r, "${_}" =~ s/^([^.]+)\./$1_P./r) } sort keys %topics;

my $kafka = start_real_kafka(topics => [ map { "$_:$PARTITIONS" } @all_topics ]);
my $node = DebeziumConnect::node('dbzcmp', $kafka);

sql("CREATE TABLE $TABLE (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, "
	  . 'aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb, '
	  . 'tenant text, part integer, version integer, '
	  . "created_at timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'))");
sql("CREATE PUBLICATION dbzcmp_pub FOR TABLE $TABLE");

# pg_outbox's side: one capture trigger per scenario, Debezium's option
# names as its arguments
for my $sc (@SCENARIOS)
{
	my $o = router_options($sc, 'P');
	my $conv = $sc->[2];
	$o->{'value.converter.schemas.enable'} = $conv->{'value.converter.schemas.enable'} // 'true';
	$o->{'key.converter.schemas.enable'} = $conv->{'key.converter.schemas.enable'} // 'true';
	my $args = join ', ', map { "'" . ("$_=$o->{$_}" =~ s/'/''/gr) . "'" } sort keys %$o;
	next if $ENV{DEV_NO_PG};
	sql("CREATE TRIGGER outbox_$sc->[0] AFTER INSERT ON $TABLE FOR EACH ROW EXECUTE FUNCTION outbox_debezium($args)");
}

# Debezium's side: one connector (and slot) per scenario in one Connect
my $connect = DebeziumConnect->start(dir => "$PostgreSQL::Test::Utils::tmp_check/connect",
	bootstrap => $kafka->bootstrap,
	connectors => [ map {
		DebeziumConnect::connector(node => $node, name => $_->[0], slot => "dbzcmp_$_->[0]",
			publication => 'dbzcmp_pub', table => $TABLE, router => router_options($_, 'D'),
			converters => $_->[2]) } @SCENARIOS ]);
ok(wait_until(60, sub { sql('SELECT count(*) FROM pg_replication_slots WHERE active') == @SCENARIOS }),
	'every connector streams from its slot');

# The rows, in two transactions; each transaction's start is pg_outbox's
# timestamp, its commit what Debezium reads
my @ids;
my %txn_start;
for my $half ([ 0 .. 6 ], [ 7 .. $#ROWS ])
{
	my $values = join ",\n", map {
		my $r = $ROWS[$_];
		push @ids, sprintf('00000000-0000-4000-8000-%012d', $_ + 1);
		sprintf("('%s', %s, %s, %s, %s, %s, %d, %d, DEFAULT)", $ids[-1],
			(map { defined $_ ? "'" . (s/'/''/gr) . "'" : 'NULL' } @$r[ 0 .. 4 ]), @$r[ 5, 6 ]);
	} @$half;
	utf8::encode($values);
	my $start = sql("BEGIN; INSERT INTO $TABLE VALUES $values; "
		  . "SELECT (extract(epoch FROM now()) * 1000)::bigint; COMMIT;");
	$txn_start{ $ids[$_] } = $start for @$half;
}

# both sides deliver every row
my %want;
$want{ topic_of($SCENARIOS[$_ / @ROWS], $ROWS[ $_ % @ROWS ]) }++ for 0 .. @SCENARIOS * @ROWS - 1;
my %read;
for my $side (qw(D P))
{
	my $ok = wait_until(120, sub { end_offsets($kafka, $side, \%want) });
	ok($ok, ($side eq 'D' ? 'Debezium' : 'pg_outbox') . ' delivered every row under every scenario');
	for my $t (sort keys %want)
	{
		my $full = $t =~ s/^([^.]+)\./$1_$side./r;
		$read{$side}{$t} = DebeziumConnect::read_topic($kafka, $full);
	}
}
$connect->stop;

# ---- the comparison -------------------------------------------------------

# (Debezium 3's __debezium.context.* headers apart from the others)
my @FIELDS = qw(topic partition key value headers context timestamp);
# Differences that remain, each with its reason (docs/debezium-comparison.md)
my %KNOWN = ();

my @table;
for my $sc (@SCENARIOS)
{
	my $name = $sc->[0];
	my %by_id;
	for my $side (qw(D P))
	{
		for my $t (grep { /^\Q$name\E\./ } keys %{ $read{$side} })
		{
			for my $m (@{ $read{$side}{$t} })
			{
				my $id = $m->{headers}{id} // $m->{headers}{'outbox-id'} // '?';
				push @{ $by_id{$id}{$side} }, { %$m, topic => $t };
			}
		}
	}
	my %diff;
	my $compared = 0;
	for my $i (0 .. $#ROWS)
	{
		my $id = $ids[$i];
		my ($d, $p) = map { $by_id{$id}{$_} } qw(D P);
		if (!$d || !$p || @$d != 1 || @$p != 1)
		{
			push @{ $diff{record} }, sprintf('row %d: Debezium %d record(s), pg_outbox %d', $i + 1,
				scalar @{ $d // [] }, scalar @{ $p // [] });
			next;
		}
		($d, $p) = ($d->[0], $p->[0]);
		$compared++;
		for my $f (@FIELDS)
		{
			my ($a, $b) = map { field($f, $_, $txn_start{$id}) } $d, $p;
			note("$name row " . ($i + 1) . " $f: Debezium $a") if $f ne 'context';
			push @{ $diff{$f} }, sprintf('row %d: Debezium %s | pg_outbox %s', $i + 1, $a, $b) if $a ne $b;
		}
	}
	for my $f ('record', @FIELDS)
	{
		my $n = scalar @{ $diff{$f} // [] };
		my $of = $f eq 'record' ? @ROWS : $compared;
		push @table, [ $name, $f, !$of ? 'not compared' : $n ? "$n of $of differ" : "equal ($of)", $n ? $diff{$f}[0] : '' ];
		local $TODO = $KNOWN{"$name $f"} // $KNOWN{"* $f"};
		ok($of && !$n, "$name: $f equal in every row") or diag(join "\n", @{ $diff{$f} });
	}
}
diag(sprintf("%-8s %-10s %-16s %s", 'scenario', 'field', 'result', 'first difference'));
diag(sprintf("%-8s %-10s %-16s %s", @$_)) for @table;

done_testing();

# One field of a record as the table prints it: bytes in hex where they
# may not be text, the timestamp as its distance from the transaction's
# start (pg_outbox's documented timestamp).
sub field
{
	my ($f, $m, $start) = @_;
	return $m->{topic} =~ s/^([^.]+)_[DP]\./$1./r if $f eq 'topic';
	return $m->{partition} if $f eq 'partition';
	return defined $m->{$f} ? unpack('H*', $m->{$f}) . " ($m->{$f})" : 'null' if $f eq 'key' || $f eq 'value';
	my $context = sub { ($_[0] =~ /^__debezium\.context\./ ? 1 : 0) == ($f eq 'context' ? 1 : 0) };
	return join ',', map { "$_=$m->{headers}{$_}" } grep { $context->($_) } sort keys %{ $m->{headers} }
	  if $f eq 'headers' || $f eq 'context';
	return sprintf('start%+d ms', $m->{timestamp} - $start);
}

# True once each topic of a side holds at least the records it should (one
# kcat -Q for all).
sub end_offsets
{
	my ($cluster, $side, $want) = @_;
	my @t = map { s/^([^.]+)\./$1_$side./r } sort keys %$want;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-Q', '-b', $cluster->bootstrap, map { my $t = $_; map { ('-t', "$t:$_:-1") } 0 .. $PARTITIONS - 1 } @t ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60)) or die "kcat -Q failed: $err";
	my %sum;
	$sum{$1} += $2 while $out =~ /^(\S+) \[\d+\] offset (\d+)$/mg;
	return !grep { ($sum{ s/^([^.]+)\./$1_$side./r } // 0) < $want->{$_} } keys %$want;
}
