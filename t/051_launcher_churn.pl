# Databases created, given the extension, dropped, and the server restarted
# in quick succession: the launcher keeps starting and stopping workers, and
# none of them may crash (a worker once took over a slot the launcher had
# given up, with no database in it, and crashed the server).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = start_broker(topics => ['churn:2']);
my $node = new_outbox_node('churn', $broker, shards => 2, no_extension => 1);
for my $i (1 .. 15)
{
	$node->safe_psql('postgres', "CREATE DATABASE d$i");
	$node->safe_psql("d$i", 'CREATE EXTENSION outbox') if $i % 2;
	sleep 0.2;
	$node->safe_psql('postgres', "DROP DATABASE d$i") if $i % 3 == 0;
	$node->restart if $i % 5 == 0;
}
$node->safe_psql('d13', q{SELECT outbox_send('churn', 'after the churn', 'k')});
ok(wait_query($node, 'd13', 'SELECT count(*) = 0 FROM outbox', 30),
	'a database that survived the churn is delivered');
my $crashes = () = slurp_file($node->logfile) =~ /terminated by signal/g;
diag("FIGURES launcher churn: 15 databases, 5 dropped, 3 restarts, crashed workers $crashes");
is($crashes, 0, 'no worker crashed');
$node->stop;
$broker->stop;
done_testing();
