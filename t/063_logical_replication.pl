# A logical subscriber of the outbox (a FOR ALL TABLES publication, the
# usual set-up of a blue/green major upgrade) must not produce the
# publisher's events, and the documented cut-over (docs/operations.md,
# "Logical replication") must lose nothing and send nothing twice.
#
# Two servers on the project's broker, both with pg_outbox preloaded and
# the extension created (as a schema copied with pg_dump --schema-only has
# it). The subscriber has two databases, each subscribed:
#  - "postgres" follows the documented cut-over: writes stopped, the
#    publisher's delivery paused with events left, the subscriber caught
#    up, its sequence set past the publisher's, the subscription dropped;
#    then the new primary sends events of its own;
#  - "unclean" shows the bound: its subscription is disabled while the
#    publisher still has events, the publisher delivers them (their deletes
#    never reach it), and the subscription is dropped: exactly those are
#    sent again, under ids at or below the sequence value set at the
#    cut-over.
# Every message is attributed to a server by its outbox-instance header.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $shards = 2;
my $topic = 'logrep';
my $broker = start_broker(topics => ["$topic:2", 'logrep_priv:1']);
my $pub = new_outbox_node('pub', $broker, shards => $shards, allows_streaming => 'logical');
my $sub = new_outbox_node('sub', $broker, shards => $shards);
$sub->safe_psql('postgres', 'CREATE DATABASE unclean');
$sub->safe_psql('unclean', 'CREATE EXTENSION outbox');

sub rows { my ($node, $db) = @_; return $node->safe_psql($db, 'SELECT count(*) FROM outbox'); }
sub instance_of { my ($node, $db) = @_; return $node->safe_psql($db // 'postgres', 'SELECT id FROM outbox_instance'); }

# every shard of $db shows $state in outbox_status
sub shards_in_state
{
	my ($node, $db, $state, $timeout) = @_;
	return wait_query($node, $db, "SELECT count(*) = $shards FROM outbox_status WHERE state = '$state'",
		$timeout // 20);
}

# messages of the topic per outbox-instance header
sub by_instance
{
	my %of;
	push @{ $of{ $_->{headers}{'outbox-instance'} // '' } }, $_ for @{ consume($broker, $topic) };
	return \%of;
}

# ---- set-up: the publication, a subscription in each database ------------

OutboxTest::create_sent_table($pub);
$pub->safe_psql('postgres', 'CREATE PUBLICATION everything FOR ALL TABLES');
(my $pub_conninfo = $pub->connstr('postgres')) =~ s/'/''/g;
for my $db ('postgres', 'unclean')
{
	OutboxTest::create_sent_table($sub, $db);
	# the documented step: the publisher's outbox_instance row is copied in
	# instead of failing on the subscriber's own (one row, primary key)
	$sub->safe_psql($db, 'DELETE FROM outbox_instance');
	$sub->safe_psql($db, sprintf("CREATE SUBSCRIPTION %s CONNECTION '%s' PUBLICATION everything",
			$db eq 'postgres' ? 'clean' : 'unclean', $pub_conninfo));
}
$sub->wait_for_subscription_sync($pub, 'clean', 'postgres');
$sub->wait_for_subscription_sync($pub, 'unclean', 'unclean');
ok(shards_in_state($sub, $_, 'subscribed'), "$_: the subscriber's shards say subscribed")
  for 'postgres', 'unclean';

# ---- A: the publisher paused, its events replicated ----------------------

ok(pause_delivery($pub, $shards), 'the publisher is paused');
wait_load(start_load($pub, sessions => 2, per_session => 100, topic => $topic, first_session => 1));
$pub->wait_for_catchup($_) for 'clean', 'unclean';
my $a_rows = rows($pub, 'postgres');
is(rows($sub, $_), $a_rows, "$_: the subscriber holds the publisher's $a_rows events") for 'postgres', 'unclean';
# the workers read at least once a poll interval (1 s); what they could
# have produced meanwhile is counted below, after B
ok(shards_in_state($sub, $_, 'subscribed'), "$_: still subscribed") for 'postgres', 'unclean';
is(rows($sub, $_), $a_rows, "$_: the subscriber deleted none of them") for 'postgres', 'unclean';
like(log_since($sub, 0), qr/outbox "postgres" shard 0: the outbox is the target of subscription "clean"/,
	'the subscriber\'s log says why it does not deliver');

# the "unclean" database stops applying here: it keeps A's rows
$sub->safe_psql('unclean', 'ALTER SUBSCRIPTION unclean DISABLE');

# ---- B: the publisher delivers under load, replicating -------------------

my $offset = -s $pub->logfile;
OutboxTest::reload_with($pub, 'outbox.enabled = on');
wait_load(start_load($pub, sessions => 2, per_session => 150, topic => $topic, first_session => 3,
		sleep => 0.005));
ok(wait_for_empty($pub, 60), 'the publisher delivers A and B');
$pub->wait_for_catchup('clean');
is(rows($sub, 'postgres'), 0, 'postgres: the publisher\'s deletes replicated');
is(rows($sub, 'unclean'), $a_rows, 'unclean: a disabled subscription still holds its rows');
ok(shards_in_state($sub, 'unclean', 'subscribed', 5), 'unclean: a disabled subscription still holds delivery');
my $pub_instance = instance_of($pub);
my $before = by_instance();
my @foreign = grep { $_ ne $pub_instance } keys %$before;
my $foreign = 0;
$foreign += @{ $before->{$_} } for @foreign;
is($foreign, 0, 'before any cut-over every message came from the publisher');

# ---- the unclean cut-over: the publisher's deletes never arrived ---------

my $unclean_cutover_id = $pub->safe_psql('postgres', 'SELECT last_value FROM outbox_id_seq');
$sub->safe_psql('unclean', "SELECT setval('outbox_id_seq', $unclean_cutover_id)");
my %left_unclean = map { $_ => 1 } split /\n/, $sub->safe_psql('unclean', 'SELECT id FROM outbox');
$sub->safe_psql('unclean', 'DROP SUBSCRIPTION unclean');
ok($sub->poll_query_until('unclean', 'SELECT count(*) = 0 FROM outbox'),
	'unclean: the new primary delivers what it held');

# ---- the documented cut-over ----------------------------------------------

# 1. events written before the writes stop, left undelivered on the publisher
ok(pause_delivery($pub, $shards), 'the publisher is paused again');
wait_load(start_load($pub, sessions => 1, per_session => 100, topic => $topic, first_session => 5));
my $c_rows = rows($pub, 'postgres');
# 2. writes stopped, the publisher paused (its window empty): catch up
ok(shards_in_state($pub, 'postgres', 'paused'), 'the publisher\'s shards are paused');
$pub->wait_for_catchup('clean');
# 3. the sequence past the publisher's, 4. the subscription dropped
my $cutover_id = $pub->safe_psql('postgres', 'SELECT last_value FROM outbox_id_seq');
$sub->safe_psql('postgres', "SELECT setval('outbox_id_seq', $cutover_id)");
$sub->safe_psql('postgres', 'DROP SUBSCRIPTION clean');
# 5. writes on the new primary
wait_load(start_load($sub, sessions => 1, per_session => 100, topic => $topic, first_session => 6));
ok(wait_for_empty($sub, 60), 'the new primary delivers what the publisher left and its own');
my $new_instance = instance_of($sub);
my $unclean_instance = instance_of($sub, 'unclean');

# ---- what arrived -----------------------------------------------------------

my $after = by_instance();
my @clean = (@{ $after->{$pub_instance} // [] }, @{ $after->{$new_instance} // [] });
my $r = check_delivery('logical_replication', committed_events($sub), \@clean);
is($r->{duplicates}, 0, 'the documented cut-over sends nothing twice');
my %pub_ids;
$pub_ids{ $_->{id} }++ for @{ $after->{$pub_instance} // [] };
my ($left_by_pub, $own, $own_min_id) = (0, 0, undef);
for my $m (@{ $after->{$new_instance} // [] })
{
	if ($m->{value} =~ /^s5:/) { $left_by_pub++; next; }
	$own++;
	$own_min_id = $m->{id} if !defined $own_min_id || $m->{id} < $own_min_id;
}
my @unclean = @{ $after->{$unclean_instance} // [] };
my %unclean_ids;
$unclean_ids{ $_->{id} }++ for @unclean;
my $twice = grep { $pub_ids{$_} } keys %unclean_ids;
diag(sprintf('FIGURES logical_replication_subscriber: replicated_while_paused=%d subscriber_sent_before_cutover=%d '
	  . 'left_by_publisher=%d delivered_by_new_primary=%d new_primary_own=%d own_min_id=%d '
	  . 'unclean_held=%d unclean_sent=%d unclean_sent_twice=%d unclean_max_id=%d unclean_cutover_id=%d',
	$a_rows, $foreign, $c_rows, $left_by_pub, $own, $own_min_id // 0, scalar keys %left_unclean,
	scalar @unclean,
	$twice, (sort { $b <=> $a } keys %unclean_ids)[0] // 0, $unclean_cutover_id));
isnt($new_instance, $pub_instance, 'the new primary delivers under an instance of its own');
cmp_ok($own_min_id // 0, '>', $cutover_id, 'the new primary\'s own ids are above the cut-over id');
is($left_by_pub, $c_rows, 'the events the publisher left were delivered by the new primary, once each');
is_deeply([ sort { $a <=> $b } keys %unclean_ids ], [ sort { $a <=> $b } keys %left_unclean ],
	'unclean: what it sent is exactly what it held at the cut-over');
is(scalar @unclean, scalar keys %unclean_ids, 'unclean: each once');
is($twice, scalar keys %left_unclean,
	'unclean: those are the events the publisher delivered after the subscriber stopped applying');
ok(!grep({ $_ > $unclean_cutover_id } keys %unclean_ids), 'unclean: every one at or below its cut-over id');

# ---- the privilege side: only an owner that may write into the outbox holds it

# a subscription whose owner may not insert into the outbox cannot hold its
# delivery (on 16 and later a member of pg_create_subscription can create
# one; on 15 only a superuser, here made one and demoted after)
$sub->safe_psql('unclean', q{CREATE ROLE subber LOGIN SUPERUSER});
$sub->safe_psql('unclean', sprintf(q{SET ROLE subber; CREATE SUBSCRIPTION other CONNECTION '%s'}
	  . q{ PUBLICATION everything WITH (copy_data = false)}, $pub_conninfo));
ok(shards_in_state($sub, 'unclean', 'subscribed'), 'a superuser\'s subscription holds delivery');
$sub->safe_psql('unclean', 'ALTER ROLE subber NOSUPERUSER');
ok(wait_query($sub, 'unclean', "SELECT count(*) = 0 FROM outbox_status WHERE state = 'subscribed'", 20),
	'one whose owner may not insert into the outbox does not');
$sub->safe_psql('unclean', "SELECT outbox_send('logrep_priv', 'after-demotion', 'k')");
ok(wait_until(20, sub { grep { $_->{value} eq 'after-demotion' } @{ consume($broker, 'logrep_priv') } }),
	'and an event sent meanwhile is delivered');
$sub->safe_psql('unclean', 'GRANT INSERT ON outbox TO subber');
ok(shards_in_state($sub, 'unclean', 'subscribed'), 'granted INSERT on the outbox, it holds delivery again');
# dropping it connects to the publisher as its owner: on 16 and later a
# non-superuser owner needs a password there, so the owner is one again
$sub->safe_psql('unclean', 'ALTER ROLE subber SUPERUSER; DROP SUBSCRIPTION other');

$sub->stop;
$pub->stop;
done_testing();
