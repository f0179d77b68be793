# A physical copy of the server started as a primary keeps the dedup keys
# unique (review L9). pg_basebackup copies a running primary with the
# extension; the copy starts at another data directory without
# standby.signal, so it does crash recovery on the same timeline, with the
# same system identifier and database OIDs. Both then deliver to the same
# Kafka with ids from the same sequence position. Asserted: the events of
# the two carry different outbox-instance headers, no (outbox-instance,
# outbox-id) pair names two different events, and a plain restart of the
# original keeps its instance.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $topic = 'clone';
my $per = 100;    # more than the 32 ids a sequence logs ahead
my $broker = start_broker(topics => ["$topic:2"]);
my $orig = new_outbox_node('orig', $broker, allows_streaming => 1);

sub send_events
{
	my ($node, $label) = @_;
	$node->safe_psql('postgres', "SELECT count(outbox_send('$topic', '$label-' || i, 'k' || i % 5))"
		  . " FROM generate_series(1, $per) i");
	return wait_for_empty($node, 60);
}
sub instance_of { return $_[0]->safe_psql('postgres', 'SELECT id FROM outbox_instance'); }

ok(send_events($orig, 'before'), 'the original delivers');
my $first = instance_of($orig);
$orig->restart;
ok(send_events($orig, 'restarted'), 'the original delivers after a restart');
my $after_restart = instance_of($orig);

$orig->backup('copy');
my $clone = PostgreSQL::Test::Cluster->new('clone');
$clone->init_from_backup($orig, 'copy');
$clone->start;
is($clone->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 'f', 'the copy runs as a primary');
is($clone->safe_psql('postgres', "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"),
	$orig->safe_psql('postgres', "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"),
	'on the same timeline');
ok(send_events($clone, 'clone'), 'the copy delivers');
ok(send_events($orig, 'orig'), 'the original delivers after the copy');

my %instances_of;    # label => {instance => count}
my %events_of;       # "instance:id" => {value => 1}
for my $m (@{ consume($broker, $topic) })
{
	my ($label) = $m->{value} =~ /^(\w+)-/;
	my $instance = $m->{headers}{'outbox-instance'} // '';
	$instances_of{$label}{$instance}++;
	$events_of{"$instance:$m->{id}"}{ $m->{value} } = 1;
}
my $clashes = grep { keys %{ $events_of{$_} } > 1 } keys %events_of;
my %one = map { $_ => join(',', sort keys %{ $instances_of{$_} // {} }) } qw(before restarted clone orig);
diag(sprintf('FIGURES clone: instances before=%s restarted=%s clone=%s orig=%s '
	  . 'keys_naming_two_events=%d delivered=%d',
	@one{qw(before restarted clone orig)}, $clashes, scalar keys %events_of));
is($after_restart, $first, 'a restart keeps the instance');
is($one{restarted}, $first, 'the events after the restart carry the same instance');
is($one{orig}, $first, 'the original keeps its instance after being copied');
isnt($one{clone}, $first, 'the copy delivers under another instance');
is(instance_of($clone), $one{clone}, 'the copy\'s outbox_instance holds it');
is($clashes, 0, 'no (outbox-instance, outbox-id) pair names two events');
is(scalar keys %events_of, 4 * $per, 'every event reached Kafka once');

$clone->stop;
$orig->stop;
done_testing();
