# table.expand.json.payload against Debezium itself (where Debezium's jars
# are: OUTBOX_DEBEZIUM_LIBS, by default where scripts/common.sh fetches
# them for OUTBOX_TEST_DEBEZIUM=1; no Kafka needed): 400 generated payloads (objects nested four deep,
# arrays of numbers, strings, nulls, arrays and objects, every number kind,
# strings with escapes) and edge cases, run through outbox_debezium() and
# through Debezium 3.6.1's EventRouter and Kafka's JsonConverter in Java
# (tools/debezium/ExpandCheck.java), once per table.json.payload.null.behavior.
# Every value equal byte for byte, but where Debezium's converter fails the
# record (its expansion failed half-way): there pg_outbox sends the payload
# as a JSON string; and where an array's objects differ in their members,
# whose merged order Debezium takes from Java's hash order: there the same
# members in another order (docs/debezium.md).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Encode ();
use IPC::Run;
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $libs = $ENV{OUTBOX_DEBEZIUM_LIBS} // '/var/cache/pg_outbox/debezium/libs';
plan skip_all => "no Debezium jars in $libs (OUTBOX_TEST_DEBEZIUM=1 scripts/test.sh fetches them)"
  unless -f "$libs/debezium-connect-plugins-3.6.1.Final.jar";

# ---- the payloads ----------------------------------------------------------
srand(11);
my @strings = ('a', "\x{e9}\t\"x", '', ' ', "line\nnext", "ctl\x{01}\x{1f}/");
my @doubles = (1.5, 0.1, 39.98, 1e-7, 123456789.25, -0.5);
sub pick { return $_[ int(rand(@_)) ]; }

# Members of an array's objects are scalars: where those objects differ,
# Debezium merges their schemas in Java's hash order, which decides the
# merged members' order (compared here without it) and, for a member that
# is itself an object of different members in two elements, its content.
sub scalar_value
{
	my $r = rand();
	return JSON::PP::null if $r < 0.2;
	return pick(JSON::PP::true, JSON::PP::false) if $r < 0.4;
	return int(rand(2**32)) - 2**31 if $r < 0.6;
	return pick(@doubles) if $r < 0.8;
	return pick(@strings);
}

sub value
{
	my ($depth) = @_;
	my $r = rand();
	$r *= 0.6 if $depth > 3;
	return JSON::PP::null if $r < 0.12;
	return pick(JSON::PP::true, JSON::PP::false) if $r < 0.24;
	return int(rand(2**32)) - 2**31 if $r < 0.36;
	return pick(3000000000, -(2**40), '9223372036854775807') + 0 if $r < 0.42;
	return pick(@doubles) if $r < 0.5;
	return pick(@strings) if $r < 0.6;
	if ($r < 0.8)
	{
		my $n = int(rand(4));
		my $k = rand();
		return [ map { int(rand(10)) } 1 .. $n ] if $k < 0.4;
		return [ map { pick('s', JSON::PP::null) } 1 .. $n ] if $k < 0.6;
		if ($k < 0.8)
		{
			my @keys = (pick('p', 'q', 'r'), pick('p', 'q', 'r'));
			my @objects;
			for (1 .. $n)
			{
				my %o;
				$o{$_} = scalar_value() for @keys;
				push @objects, \%o;
			}
			return \@objects;
		}
		return [ map { [ map { int(rand(10)) } 1 .. int(rand(3)) ] } 1 .. $n ];
	}
	my %o;
	$o{ pick('a', 'bb', 'c', 'dd', 'e') . $_ } = value($depth + 1) for 0 .. int(rand(5)) - 1;
	return \%o;
}

my $json = JSON::PP->new->canonical->utf8;
my @payloads;
for (1 .. 400)
{
	my %o;
	$o{"k$_"} = value(0) for 0 .. int(rand(5));
	push @payloads, $json->encode(\%o);
}
push @payloads, '[1, 2]', '{"a": [1, "x"]}', '{"a": []}', '{"a": [null, null]}',
  '{"a": [[1,2],[3]]}', '{"a": [[],[1]]}', '{"n": 100000000000000000000}',
  '{"x": {"y": null}}', ' {"a": 1}', '{"a": 1} trailing',
  '{"a": [{"p": 1}, {"p": 2.5}]}', '{"a": [{"p": 1}, {"q": "s"}]}',
  '{"big": 9223372036854775808, "neg": -2147483649, "e": 1E+2, "f": -0.0}';

# ---- pg_outbox's values ---------------------------------------------------------
my $broker = start_broker(topics => ['ignore:1', 'bytes:1']);
my $node = new_outbox_node('expand', $broker, conf => "outbox.enabled = off\n");
$node->safe_psql('postgres', q{
CREATE TABLE outboxevent (id uuid, aggregatetype text, aggregateid text, payload text, n int);
CREATE TRIGGER ignoring AFTER INSERT ON outboxevent FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'table.expand.json.payload=true', 'route.topic.replacement=ignore');
CREATE TRIGGER keeping AFTER INSERT ON outboxevent FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
  'table.expand.json.payload=true', 'route.topic.replacement=bytes',
  'table.json.payload.null.behavior=optional_bytes');
});
my $dir = PostgreSQL::Test::Utils::tempdir();
my $file = "$dir/payloads.txt";
open my $fh, '>:raw', $file or die "$file: $!";
print $fh join('', map { "$_\n" } @payloads);
close $fh;
chmod 0644, $file;
$node->safe_psql('postgres', qq{
INSERT INTO outboxevent
SELECT gen_random_uuid(), 'check', 'k', l.payload, l.n
FROM regexp_split_to_table(rtrim(pg_read_file('$file'), E'\\n'), E'\\n') WITH ORDINALITY AS l(payload, n)
ORDER BY l.n;
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM outboxevent'), scalar @payloads,
	'every payload inserted');

for my $behavior ('ignore', 'optional_bytes')
{
	my $topic = $behavior eq 'ignore' ? 'ignore' : 'bytes';
	my @ours = split /\n/, $node->safe_psql('postgres', qq{
		SELECT convert_from(payload, 'UTF8') FROM outbox WHERE topic = '$topic' ORDER BY id});
	my ($out, $err) = ('', '');
	IPC::Run::run([ $ENV{JAVA} // 'java', '-cp', "$libs/*",
		"$FindBin::RealBin/../tools/debezium/ExpandCheck.java", $file, $behavior ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(300))
	  or die "ExpandCheck failed: $err";
	my @theirs = split /\n/, $out;
	is(scalar @theirs, scalar @payloads, "$behavior: Debezium's value of every payload");
	my ($equal, $reordered, $failed, @differ) = (0, 0, 0);
	for my $i (0 .. $#payloads)
	{
		if ($theirs[$i] eq 'CONVERT-FAIL')
		{
			$failed++;
			# the payload as a JSON string: the value when it is not expanded
			push @differ, $i
			  unless $ours[$i] =~ /^"/
			  && JSON::PP->new->utf8->allow_nonref->decode($ours[$i]) eq Encode::decode('UTF-8', $payloads[$i]);
			next;
		}
		if ($theirs[$i] eq $ours[$i])
		{
			$equal++;
			next;
		}
		# the same members, in Java's hash order where objects were merged
		my $canonical = JSON::PP->new->utf8->canonical;
		if ($canonical->encode(JSON::PP->new->utf8->decode($theirs[$i])) eq
			$canonical->encode(JSON::PP->new->utf8->decode($ours[$i])))
		{
			$reordered++;
			next;
		}
		push @differ, $i;
	}
	diag(sprintf('FIGURES debezium expansion %s: payloads=%d equal=%d merged_order_only=%d debezium_fails=%d differ=%d',
			$behavior, scalar @payloads, $equal, $reordered, $failed, scalar @differ));
	diag("payload: $payloads[$_]\n debezium: $theirs[$_]\n pg_outbox: $ours[$_]") for @differ[0 .. ($#differ < 2 ? $#differ : 2)];
	is(scalar @differ, 0, "$behavior: every value equal, or the payload as a string where Debezium fails");
	cmp_ok($equal, '>', 300, "$behavior: most payloads expand alike");
}

$node->stop;
done_testing();
