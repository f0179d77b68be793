# A real XA client (issue 36): the PostgreSQL JDBC driver's PGXADataSource
# drives two-phase commits as a JTA transaction manager does
# (tools/xa/XaClient.java), each branch recording its event in the
# business table and sending it; every 7th branch is rolled back after its
# prepare. (a) 120 branches prepared and decided at once. (b) 14 branches
# prepared, then the client exits without deciding them (its crash between
# prepare and commit), later branches delivered meanwhile, (c) an
# immediate stop of the server with them in doubt and more branches after
# the start, (d) a new client's recovery (XAResource.recover) decides them.
# Every committed event arrives, none rolled back, per-key commit order
# (keys k0..k4 on 3 partitions; the branches recovered in (d) committed
# after higher numbers); duplicates only from the immediate stop.
use strict;
use warnings;
use FindBin;
use IPC::Run;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $libs = $ENV{OUTBOX_XA_LIBS} // '/var/cache/pg_outbox/xa/libs';
plan skip_all => "no PostgreSQL JDBC driver in $libs (scripts/common.sh ensure_xa_jars)"
  unless glob("$libs/postgresql-*.jar");

my $broker = start_broker(topics => ['xa:3']);
my $node = new_outbox_node('xa', $broker, conf => q{
max_prepared_transactions = 20
listen_addresses = '127.0.0.1'
});
OutboxTest::create_sent_table($node);
my $user = $node->safe_psql('postgres', 'SELECT current_user');

# The branches in the order they committed, as the clients report them.
my @commit_order;

# Runs the XA client; returns its lines ("<i> committed" / "<i> rolled back").
sub xa_client
{
	my @args = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'java', '-cp', "$libs/*", "$FindBin::RealBin/../tools/xa/XaClient.java",
			$node->port, $user, @args ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(180))
	  or die "XaClient @args failed: $err";
	my @lines = grep { length } split /\n/, $out;
	push @commit_order, map { /^(\d+) committed$/ ? $1 : () } @lines;
	return \@lines;
}

sub count_of { my ($what, $lines) = @_; return scalar grep { /^\d+ \Q$what\E$/ } @$lines; }

# (a) branches prepared and decided at once
my $run = xa_client('run', 1, 120, 'xa');
is(count_of('committed', $run), 103, '(a) 103 of 120 branches committed after their prepare');

# (b) branches left in doubt by the client, later ones delivered meanwhile
xa_client('prepare', 121, 14, 'xa');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '14',
	'(b) 14 branches prepared, undecided');
xa_client('run', 135, 20, 'xa');
ok(wait_until(60, sub { grep { $_->{value} eq 'xa:153' } @{ consume($broker, 'xa') } }),
	'(b) a branch committed after them is delivered');

# (c) the server crashes with them in doubt; more branches after its start
$node->stop('immediate');
$node->start;
xa_client('run', 155, 20, 'xa');

# (d) a transaction manager's recovery decides the branches in doubt
my $recovered = xa_client('recover');
is(scalar @$recovered, 14, '(d) recovery found the 14 branches in doubt');
is(count_of('committed', $recovered), 12, '(d) and committed 12 of them');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0',
	'(d) nothing is left prepared');

ok(wait_for_empty($node, 60), 'the outbox drains');
# what committed, as the business table says, in commit order (the
# branches in doubt committed last, after higher numbers)
is_deeply([ sort { $a <=> $b } @commit_order ],
	[ split /\n/, $node->safe_psql('postgres', 'SELECT seq FROM sent ORDER BY seq') ],
	'the business table holds exactly the branches the clients committed');
my $pos = 0;
my @committed = map { { key => 'k' . ($_ % 5), value => "xa:$_", seq => $pos++ } } @commit_order;
my $r = check_delivery('xa', \@committed, consume($broker, 'xa'));
is($r->{delivered}, 103 + 12 + 17 + 18, 'every committed branch delivered its event');

$node->stop;
$broker->stop;
done_testing();
