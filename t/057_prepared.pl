# Prepared transactions (issue 36): events sent in a transaction that is
# then prepared (PREPARE TRANSACTION, as XA transaction managers and Citus
# do) reach Kafka after COMMIT PREPARED, run by another session, and never
# after ROLLBACK PREPARED. The read floor covers a prepared transaction,
# so a later event committed and delivered meanwhile (the worker's cursor
# passes the prepared event's id) does not leave the prepared event behind
# once it commits, and a key's event of a prepared transaction committed
# first reaches Kafka before the same key's next event. All of that also
# across an immediate stop with the transaction still prepared (the
# registry in shared memory is empty after it; the worker finds the
# prepared transaction's rows, one of them inserted in a subtransaction).
# COMMIT PREPARED wakes the worker: outbox.poll_interval is 1 h, so the
# events come from the wake-up, not a poll. Last, a server with
# max_prepared_transactions = 0 refuses PREPARE as PostgreSQL does, and
# delivers as before.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = start_broker(topics => ['prep:1']);
my $node = new_outbox_node('prepared', $broker, conf => q{
max_prepared_transactions = 10
outbox.poll_interval = '1h'
});

# The values that reached topic prep, in partition order.
sub arrived { return [ map { $_->{value} } @{ consume($broker, 'prep') } ]; }

sub has_arrived
{
	my ($value) = @_;
	return scalar grep { $_ eq $value } @{ arrived() };
}

sub wait_arrived
{
	my ($value) = @_;
	return wait_until(30, sub { has_arrived($value) });
}

# Whether $first arrived, and before $second (on the one partition).
sub arrived_before
{
	my ($first, $second) = @_;
	my %at;
	my $values = arrived();
	$at{ $values->[$_] } //= $_ for 0 .. $#$values;
	return defined $at{$first} && defined $at{$second} && $at{$first} < $at{$second};
}

# Sends $value with $key in a transaction prepared as $gid.
sub send_prepared
{
	my ($gid, $key, $value) = @_;
	sql(qq{BEGIN; SELECT outbox_send('prep', '$value', '$key');
	PREPARE TRANSACTION '$gid'});
}

# Commits $value with $key and waits until it arrived.
sub deliver
{
	my ($key, $value) = @_;
	sql(qq{SELECT outbox_send('prep', '$value', '$key')});
	return wait_arrived($value);
}

# ---- COMMIT PREPARED from another session ---------------------------------

send_prepared('p1', 'ka', 'a1');
is(sql(q{SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'p1'}), '1',
	'a transaction that sent an event prepares');
ok(deliver('kz', 'z1'), 'an event committed while a1 is prepared arrives');
ok(!has_arrived('a1'), 'the prepared event a1 does not arrive before COMMIT PREPARED');
sql(q{COMMIT PREPARED 'p1'});
ok(wait_arrived('a1'), 'a1 arrives after COMMIT PREPARED in another session, though the worker '
	  . 'delivered a later id meanwhile');
ok(deliver('ka', 'a2'), 'the next event of key ka arrives');
ok(arrived_before('a1', 'a2'),
	'the prepared transaction committed first, its event of key ka arrives first');

# ---- ROLLBACK PREPARED ------------------------------------------------------

send_prepared('p2', 'kr', 'r1');
sql(q{ROLLBACK PREPARED 'p2'});
ok(deliver('kz', 'z2'), 'an event committed after ROLLBACK PREPARED arrives');
ok(wait_for_empty($node, 30), 'the outbox is empty');
ok(!has_arrived('r1'), 'the event of a prepared transaction rolled back never arrives');

# ---- prepared across an immediate stop --------------------------------------

# the lower id in a subtransaction: only pg_subtrans ties its row to the
# prepared transaction after the restart
sql(q{BEGIN;
SAVEPOINT s; SELECT outbox_send('prep', 'b1', 'kb'); RELEASE SAVEPOINT s;
SELECT outbox_send('prep', 'b1+', 'kb');
PREPARE TRANSACTION 'p3'});
sql(q{CREATE TABLE plain (x int); BEGIN; INSERT INTO plain VALUES (1);
PREPARE TRANSACTION 'p4'});
my $offset = -s $node->logfile;
$node->stop('immediate');
$node->start;
is(sql(q{SELECT string_agg(gid, ',' ORDER BY gid) FROM pg_prepared_xacts}), 'p3,p4',
	'both transactions are still prepared after the restart');
ok(deliver('kz', 'z3'), 'an event committed after the restart arrives');
ok(!has_arrived('b1'), 'the prepared events do not arrive before COMMIT PREPARED');
like(log_since($node, $offset), qr/found 2 prepared transaction/,
	'the worker registered the two prepared transactions the restart left');
sql(q{COMMIT PREPARED 'p3'});
ok(wait_arrived('b1') && wait_arrived('b1+'),
	'both events of the transaction prepared before the restart arrive after COMMIT PREPARED');
sql(q{ROLLBACK PREPARED 'p4'});
ok(deliver('kb', 'b2'), 'the next event of key kb arrives');
ok(arrived_before('b1', 'b1+') && arrived_before('b1+', 'b2'), 'in commit order');
ok(wait_for_empty($node, 30), 'the outbox is empty');

# ---- max_prepared_transactions = 0 ------------------------------------------

$node->append_conf('postgresql.conf', 'max_prepared_transactions = 0');
$node->restart;
my ($ret, $out, $err) = $node->psql('postgres', q{BEGIN;
SELECT outbox_send('prep', 'n1', 'kn');
PREPARE TRANSACTION 'p5'});
like($err, qr/prepared transactions are disabled/,
	'without prepared transactions, PREPARE is refused as PostgreSQL refuses it');
ok(deliver('kn', 'n2'), 'an event committed afterwards arrives');
ok(wait_for_empty($node, 30), 'the outbox is empty');
ok(!has_arrived('n1'), 'the refused transaction sent nothing');

my @values = @{ arrived() };
my %seen;
is(scalar(grep { $seen{$_}++ } @values), 0, 'no event arrived twice');

$node->stop;
$broker->stop;
done_testing();
