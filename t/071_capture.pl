# Row capture end to end: outbox_capture() on a table with a composite
# primary key, written by concurrent sessions on two shards. In Kafka each
# row's events arrive in commit order, on one partition, with before and
# after right; ignore= leaves a column out; tombstone_on_delete follows the
# delete event with a record whose value is null; skip_unchanged sends
# nothing for a no-op update; rolled-back changes send nothing.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $sessions = 4;
my $orders = 25;    # per session

my $broker = start_broker(topics => [ 'lines:3', 'plain:1' ]);
my $node = new_outbox_node('capture', $broker, shards => 2);

$node->safe_psql('postgres', q{
CREATE TABLE lines (
    order_id int,
    line     int,
    qty      int NOT NULL,
    secret   text,
    PRIMARY KEY (order_id, line)
);
CREATE TRIGGER lines_capture AFTER INSERT OR UPDATE OR DELETE ON lines
    FOR EACH ROW EXECUTE FUNCTION
    outbox_capture('lines', '', 'ignore=secret', 'tombstone_on_delete', 'skip_unchanged', 'type');
});

# Each session works on its own orders, one statement per transaction
# unless said otherwise. The events each row should produce, in order.
my %expected;
my @clients;
for my $s (1 .. $sessions)
{
	my $sql = '';
	for my $i (1 .. $orders)
	{
		my $o = $s * 100 + $i;
		$sql .= "INSERT INTO lines VALUES ($o, 1, 1, 'a'), ($o, 2, 1, 'a');\n"
		  . "UPDATE lines SET qty = qty + 1 WHERE order_id = $o;\n"
		  # only the ignored column changes: nothing sent
		  . "UPDATE lines SET secret = 'b' WHERE order_id = $o AND line = 1;\n"
		  # a no-op update: nothing sent
		  . "UPDATE lines SET qty = qty WHERE order_id = $o AND line = 2;\n"
		  . "BEGIN;\nUPDATE lines SET qty = 99 WHERE order_id = $o;\nROLLBACK;\n"
		  . "DELETE FROM lines WHERE order_id = $o AND line = 2;\n"
		  . "UPDATE lines SET qty = qty + 1 WHERE order_id = $o AND line = 1;\n";
		$expected{qq({"order_id":$o,"line":1})} =
		  [ [ 'c', undef, 1 ], [ 'u', 1, 2 ], [ 'u', 2, 3 ] ];
		$expected{qq({"order_id":$o,"line":2})} =
		  [ [ 'c', undef, 1 ], [ 'u', 1, 2 ], [ 'd', 2, undef ], ['tombstone'] ];
	}
	my $file = PostgreSQL::Test::Utils::tempdir() . "/capture_$s.sql";
	PostgreSQL::Test::Utils::append_to_file($file, $sql);
	push @clients, IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-f', $file ],
		'<', \undef, '>', '/dev/null', '2>', "$file.err");
}
for my $h (@clients)
{
	ok($h->finish, 'a writing session succeeded');
}
ok(wait_for_empty($node), 'the outbox drains');

my $received = consume($broker, 'lines');
my $want = 0;
$want += @$_ for values %expected;
is(scalar @$received, $want, "$want messages: nothing skipped is sent, nothing rolled back");

# Per key: one partition, and the events in order with the right images.
my (%got, %partitions, @bad_value, @bad_headers);
for my $m (@$received)
{
	$partitions{ $m->{key} }{ $m->{partition} } = 1;
	if ($m->{size} == -1)
	{
		push @{ $got{ $m->{key} } }, ['tombstone'];
		push @bad_headers, $m unless ($m->{headers}{op} // '') eq 'd'
		  && !exists $m->{headers}{'content-type'};
		next;
	}
	my $v = eval { decode_json($m->{value}) };
	if (!$v || $v->{schema} ne 'public' || $v->{table} ne 'lines'
		|| grep { defined $_ && exists $_->{secret} } $v->{before}, $v->{after})
	{
		push @bad_value, $m;
		next;
	}
	my $op = $v->{op};
	push @bad_headers, $m unless ($m->{headers}{op} // '') eq $op
	  && ($m->{headers}{type} // '') eq "lines.$op"
	  && ($m->{headers}{'content-type'} // '') eq 'application/json'
	  && defined $m->{headers}{'outbox-id'};
	# the key names the row the image shows
	my $image = $op eq 'd' ? $v->{before} : $v->{after};
	push @bad_value, $m
	  unless $m->{key} eq qq({"order_id":$image->{order_id},"line":$image->{line}});
	push @{ $got{ $m->{key} } },
	  [ $op, $v->{before} ? $v->{before}{qty} : undef, $v->{after} ? $v->{after}{qty} : undef ];
}
is(scalar @bad_value, 0, 'every value is the JSON change event, without the ignored column, keyed by its row')
  or diag explain $bad_value[0];
is(scalar @bad_headers, 0, 'headers: op, type, content-type application/json (none on a tombstone)')
  or diag explain $bad_headers[0];
is(scalar(grep { keys %{ $partitions{$_} } != 1 } keys %partitions), 0,
	'each row\'s events are on one partition');
my @wrong = grep { !eq_array($got{$_} // [], $expected{$_}) } sort keys %expected;
is(scalar @wrong, 0, 'each row\'s events arrive in order: insert, updates, delete, tombstone')
  or diag explain { key => $wrong[0], got => $got{ $wrong[0] }, want => $expected{ $wrong[0] } };

# A message shown whole: the first event of one row.
my ($first) = grep { $_->{key} eq '{"order_id":101,"line":1}' } @$received;
is($first->{value},
	'{"op": "c", "schema": "public", "table": "lines", "before": null, "after": {"order_id":101,"line":1,"qty":1}}',
	'the insert event of (101, 1), byte for byte');

# skip_unchanged alone: a no-op update of every row sends nothing.
my $before = $node->safe_psql('postgres', q{SELECT last_value FROM outbox_id_seq});
$node->safe_psql('postgres', q{UPDATE lines SET qty = qty, secret = secret});
is($node->safe_psql('postgres', q{SELECT last_value FROM outbox_id_seq}), $before,
	'a no-op UPDATE of all rows sends no event');

# Without skip_unchanged the same update is sent, one event per row.
$node->safe_psql('postgres', q{
CREATE TABLE plain (id int PRIMARY KEY, v text);
CREATE TRIGGER plain_capture AFTER INSERT OR UPDATE ON plain
    FOR EACH ROW EXECUTE FUNCTION outbox_capture('plain');
INSERT INTO plain VALUES (1, 'x');
UPDATE plain SET v = v;
});
ok(wait_for_empty($node), 'the plain table\'s events are delivered');
my $plain = consume($broker, 'plain');
is_deeply([ map { $_->{headers}{op} } @$plain ], [ 'c', 'u' ],
	'without skip_unchanged a no-op update is sent');
ok(!exists $plain->[0]{headers}{type}, 'no type header without the option');

done_testing();
