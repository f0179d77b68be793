# The read's look for retry times goes to the partial retry index directly
# (src/table/retry_probe.c), not through a statement, and still finds them:
#  (a) as installed: an event waiting for its retry while later ones are
#      delivered (the cursor passes it) arrives once due, through the
#      read's retry branch, which only that look opens; the look's
#      statement never runs (pg_stat_statements, every level), the read's
#      statements do;
#  (b) after REINDEX INDEX CONCURRENTLY outbox_retry_idx (a new index under
#      the same name): the same;
#  (c) the index replaced by one of another shape (no predicate): the look
#      is the statement again, and the retry still arrives.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my @phases = ('as_installed', 'reindexed', 'other_shape');
my $broker = start_broker(topics => [ map { "probe_$_:2" } @phases ]);
my $node = new_outbox_node('retry_probe', $broker, shards => 1, conf => q{
shared_preload_libraries = 'outbox,pg_stat_statements'
pg_stat_statements.track = all
});

sql('CREATE EXTENSION pg_stat_statements');

# Calls of the worker's statements whose text is like $pattern.
sub calls
{
	my ($pattern) = @_;
	return sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '$pattern'");
}

sub look_statement_calls { return calls('SELECT EXISTS (SELECT FROM %next_attempt_at IS NOT NULL)'); }
sub read_calls { return calls('%ORDER BY o.id LIMIT%'); }

# An event waiting 2 s for its retry, then five delivered past it one by
# one: returns the values that must arrive.
sub retry_behind_cursor
{
	my ($topic) = @_;
	ok(pause_delivery($node, 1), "$topic: delivery paused");
	sql("SELECT outbox_send('$topic', 'waiting', 'k-waiting')");
	sql(q{UPDATE outbox SET attempts = 1, last_error = 'set by the test',
		next_attempt_at = now() + interval '2 s'});
	sql('SELECT pg_stat_statements_reset()');
	reload_with($node, 'outbox.enabled = on');
	my @values = ('waiting', commit_one_by_one($node, $topic, 'later', 5));
	ok(wait_for_empty($node, 30), "$topic: the outbox drains, the retry included");
	return @values;
}

sql(q{SELECT outbox_send('probe_as_installed', 'warm', 'w')});
ok(wait_for_empty($node, 30), 'the topic is known');

# ---- (a) as installed ------------------------------------------------------
my @values = retry_behind_cursor('probe_as_installed');
check_sent_once($broker, 'probe_as_installed', \@values, 'warm', 'retry probe as installed');
cmp_ok(read_calls(), '>', 0, 'the worker read (its statements are counted)');
is(look_statement_calls(), 0, 'no read asked for retry times with a statement');

# ---- (b) a new index under the same name -----------------------------------
my $before = sql(q{SELECT 'outbox_retry_idx'::regclass::oid});
sql('REINDEX INDEX CONCURRENTLY outbox_retry_idx');
isnt(sql(q{SELECT 'outbox_retry_idx'::regclass::oid}), $before, 'the index is a new one');
@values = retry_behind_cursor('probe_reindexed');
check_sent_once($broker, 'probe_reindexed', \@values, 'warm', 'retry probe reindexed');
is(look_statement_calls(), 0, 'the new index is probed too');

# ---- (c) an index of another shape under the name --------------------------
sql('DROP INDEX outbox_retry_idx');
sql('CREATE INDEX outbox_retry_idx ON outbox (shard, id)');
@values = retry_behind_cursor('probe_other_shape');
check_sent_once($broker, 'probe_other_shape', \@values, 'warm', 'retry probe other shape');
cmp_ok(look_statement_calls(), '>', 0, 'an index of another shape: the statement asks');

$node->stop;
done_testing();
