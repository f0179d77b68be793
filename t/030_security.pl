# Security of the workers and settings (review findings C1, H5, L14, L4):
# (a) a non-superuser database owner who plants functions and operators
#     the worker's SQL could pick (public.power(float8, int), public."*",
#     evil.now(), evil."=" on oid and bigint) and sets search_path,
#     default_transaction_read_only and timeouts on the database never gets
#     them run by a worker, and delivery, retries and dead-lettering go on;
# (b) DROP DATABASE of the delivered database by a role that may not drop
#     it, inside a transaction block, or cancelled by statement_timeout
#     (also a superuser's) does not stop delivery for longer than a restart;
# (c) outbox.kafka_config (it may hold passwords) is masked to members of
#     pg_read_all_settings and absent from pg_settings;
# (d) reserved librdkafka properties cannot be smuggled in with a topic.
#     prefix, nor plugins or delivery-report settings.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $broker = start_broker(topics => ['sec:2']);
my $shards = 2;
# message.max.bytes=2000: a 5000-byte payload is refused for good (permanent).
my $kafka = "$OutboxTest::TEST_KAFKA_CONFIG,message.max.bytes=2000";
my $node = new_outbox_node('security', $broker, shards => $shards, kafka_config => $kafka,
	conf => "outbox.max_attempts = 3\n");
my $conf_file = $node->data_dir . '/postgresql.conf';
my $baseline = slurp_file($conf_file);
my $n_event = 0;

sub as_role { my ($role, $q) = @_; return $node->safe_psql('postgres', $q, connstr => $node->connstr('postgres') . " user=$role"); }
sub send_event { return sql("SELECT outbox_send('sec', '$_[0]', 'k" . ($n_event++ % 7) . "')"); }
sub kafka_values { return { map { $_->{value} => 1 } @{ consume($broker, 'sec') } }; }
sub pid_list { return join(',', @{ worker_pids($node) }); }

# Waits until all workers are connected and the outbox is empty.
sub workers_ready
{
	return wait_until(60, sub { @{ worker_pids($node) } == $shards })
	  && wait_query($node, 'postgres', 'SELECT count(*) = 0 FROM outbox', 60);
}

# A psql session that stays open (stderr merged into stdout, in order).
sub open_session
{
	my ($db, $user) = @_;
	my $s = { in => '', out => '', n => 0, timer => IPC::Run::timeout(60) };
	$s->{h} = IPC::Run::start([ 'psql', '-X', '-Atq', '-d', $node->connstr($db) . ($user ? " user=$user" : '') ],
		'<', \$s->{in}, '>', \$s->{out}, '2>&1', $s->{timer});
	return $s;
}

# Runs $q in the session; returns what psql printed for it.
sub run_in
{
	my ($s, $q) = @_;
	my $mark = 'done-' . ++$s->{n};
	$s->{out} = '';
	$s->{in} .= "$q\n\\echo $mark\n";
	$s->{timer}->start(60);
	$s->{h}->pump until $s->{out} =~ /^\Q$mark\E$/m;
	(my $said = $s->{out}) =~ s/^\Q$mark\E\n//m;
	return $said;
}

sub close_session { my ($s) = @_; $s->{in} .= "\\q\n"; $s->{timer}->start(60); $s->{h}->finish; }

# Rewrites postgresql.conf atomically (baseline plus $extra) and reloads.
sub reload_with
{
	my ($extra) = @_;
	open my $fh, '>', "$conf_file.tmp" or die "cannot write $conf_file.tmp: $!";
	print $fh $baseline, $extra;
	close $fh;
	chmod 0600, "$conf_file.tmp";
	rename "$conf_file.tmp", $conf_file or die "cannot rename to $conf_file: $!";
	$node->reload;
}

# ---- (c) L14: who can read outbox.kafka_config ------------------------------
sql('CREATE ROLE reader LOGIN; GRANT pg_read_all_settings TO reader;');
my %seen = (
	show => as_role('reader', 'SHOW outbox.kafka_config'),
	current => as_role('reader', q{SELECT current_setting('outbox.kafka_config')}),
	rows => as_role('reader', q{SELECT count(*) FROM pg_settings WHERE name = 'outbox.kafka_config'}),
	show_all => scalar(grep { /message\.max\.bytes/ } split /\n/, as_role('reader', 'SHOW ALL')),
	su_show => sql('SHOW outbox.kafka_config'),
	su_rows => sql(q{SELECT count(*) FROM pg_settings WHERE name = 'outbox.kafka_config'}));
diag("FIGURES L14: reader_show='$seen{show}' reader_current_setting='$seen{current}' reader_pg_settings_rows=$seen{rows}"
	  . " reader_show_all_lines_with_value=$seen{show_all} superuser_show='$seen{su_show}' superuser_pg_settings_rows=$seen{su_rows}");
is($seen{show}, '********', 'L14: SHOW is masked for a pg_read_all_settings member');
is($seen{current}, '********', 'L14: current_setting() is masked for a pg_read_all_settings member');
is($seen{rows}, '0', 'L14: no pg_settings row for a pg_read_all_settings member');
is($seen{show_all}, 0, 'L14: SHOW ALL does not give the value away');
is($seen{su_rows}, '0', 'L14: no pg_settings row for a superuser either');
is($seen{su_show}, $kafka, 'L14: a superuser\'s SHOW gives the real value');

# ---- (d) L4: reserved properties, also behind topic. ------------------------
my %refused;
for my $prop ('topic.partitioner=random', 'topic.queuing.strategy=lifo', 'plugin.library.paths=x',
	'delivery.report.only.error=true', 'queue.buffering.max.kbytes=1')
{
	my ($name) = $prop =~ /^([^=]+)/;
	my $offset = -s $node->logfile;
	reload_with("outbox.kafka_config = '$OutboxTest::TEST_KAFKA_CONFIG,$prop'\n");
	my $ended = wait_until(30, sub {
		log_since($node, $offset) =~ /contains errors|parameter "outbox\.kafka_config" changed to/ });
	my $log = log_since($node, $offset);
	my $errors = $log =~ /configuration file ".*" contains errors/;
	my ($why) = $log =~ /outbox\.kafka_config[^\n]*\n[^\n]*DETAIL:  ([^\n]*)/;
	$refused{$name} = $errors ? 'refused(' . ($why // '?') . ')' : 'ACCEPTED';
	ok($ended && $errors, "L4: $prop is refused at reload");
	like($log, qr/DETAIL:  property "\Q$name\E" is set by pg_outbox/, "L4: $prop: the log says it is reserved");
	is(sql('SHOW outbox.kafka_config'), $kafka, "L4: $prop: the old value stays in force");
	unlike($log, qr/rebuilding the Kafka producer/, "L4: $prop: the producer is not rebuilt");
	reload_with('');
	wait_until(30, sub { sql('SHOW outbox.kafka_config') eq $kafka });
}
diag('FIGURES L4: ' . join(' ', map { "$_=$refused{$_}" } sort keys %refused));

# ---- (b) H5: DROP DATABASE attempts that must not stop delivery -------------
# $who: role name, or undef for the superuser; $hold: a superuser session
# holds an ACCESS EXCLUSIVE lock on the outbox while the DROP runs, so that
# a worker told to stop cannot (it waits for the lock inside its step) and
# the DROP's timeout lands while the hook waits; the lock is released
# before the event is sent. The DROP's session stays open meanwhile.
sql('CREATE DATABASE scratch; CREATE ROLE nobody LOGIN;');
sub drop_case
{
	my ($label, $who, $drop, $hold, $within, $error_re) = @_;
	ok(workers_ready(), "H5 $label: workers ready");
	my $pids = pid_list();
	my $blocker;
	if ($hold)
	{
		$blocker = open_session('postgres');
		run_in($blocker, 'BEGIN; LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;');
		ok(wait_query($node, 'postgres', "SELECT count(*) = $shards FROM pg_stat_activity"
				  . " WHERE backend_type = 'outbox shard' AND wait_event_type = 'Lock'", 20),
			"H5 $label: the workers wait for the lock");
	}
	my $s = open_session('scratch', $who);
	my $t_drop = time;
	my $said = run_in($s, $drop);
	my $drop_s = time - $t_drop;
	if ($blocker) { run_in($blocker, 'COMMIT;'); close_session($blocker); }
	like($said, $error_re, "H5 $label: the DROP fails");
	my $value = "h5-$label";
	my $id = send_event($value);
	my $t0 = time;
	my $delivered = wait_query($node, 'postgres', "SELECT count(*) = 0 FROM outbox WHERE id = $id", $within);
	my $latency = time - $t0;
	my $after = pid_list();
	my $in_kafka = kafka_values()->{$value} ? 1 : 0;
	close_session($s);
	my ($err) = $said =~ /ERROR:  ([^\n]*)/;
	diag sprintf('FIGURES H5 %s: drop_error="%s" drop_s=%.1f delivered=%s after_s=%.1f in_kafka=%d pids_before=%s pids_after=%s',
		$label, $err // $said, $drop_s, $delivered ? 'yes' : 'NO', $latency, $in_kafka, $pids, $after || '-');
	ok($delivered, "H5 $label: an event sent afterwards leaves the outbox within $within s");
	ok($in_kafka, "H5 $label: and is in Kafka");
	is($after, $pids, "H5 $label: the workers were not signalled") if defined $who;
}
my $not_owner = qr/ERROR:  must be owner of database postgres/;
drop_case('role-timeout', 'nobody', "SET statement_timeout = '100ms'; DROP DATABASE postgres;", 0, 15, $not_owner);
drop_case('role-timeout-workers-busy', 'nobody', "SET statement_timeout = '100ms'; DROP DATABASE postgres;", 1, 15, $not_owner);
drop_case('role-in-transaction', 'nobody', 'BEGIN; DROP DATABASE postgres;', 0, 15,
	qr/ERROR:  DROP DATABASE cannot run inside a transaction block/);
# A superuser's DROP, slowed by the locker's connection to the database
# and the busy workers, is cancelled by its statement_timeout.
drop_case('superuser-cancelled', undef, "SET statement_timeout = '2s'; DROP DATABASE postgres;", 1, 20,
	qr/ERROR:  canceling statement due to statement timeout/);

# ---- (a) C1: planted functions and database settings ------------------------
# The test's own sessions pin their settings (PGOPTIONS beats ALTER
# DATABASE), so only the workers can run what mallory plants.
$ENV{PGOPTIONS} = '-c search_path=pg_catalog,public -c default_transaction_read_only=off'
  . ' -c statement_timeout=0 -c lock_timeout=0 -c idle_in_transaction_session_timeout=0'
  . ' -c default_transaction_isolation=read\ committed';
ok(workers_ready(), 'C1: workers ready');
sql('CREATE ROLE mallory LOGIN; ALTER DATABASE postgres OWNER TO mallory;');
is(sql(q{SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'}), 'f', 'C1: mallory is no superuser');
# Every planted body records who ran it (into mallory's table, and in the
# log, which works in a read-only transaction too) and then behaves.
as_role('mallory', q{
CREATE SCHEMA evil;
CREATE TABLE evil.rec (what text, usr name, su text, backend text);
CREATE FUNCTION evil.record(what text) RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $f$
BEGIN
	RAISE LOG 'PLANTED % ran as % superuser=%', what, current_user, current_setting('is_superuser');
	INSERT INTO evil.rec SELECT what, current_user, current_setting('is_superuser'),
		(SELECT a.backend_type FROM pg_stat_get_activity(pg_backend_pid()) a);
EXCEPTION WHEN OTHERS THEN NULL;
END $f$;
CREATE FUNCTION public.power(double precision, integer) RETURNS double precision LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $f$
BEGIN PERFORM evil.record('public.power'); RETURN pg_catalog.power($1, $2::float8); END $f$;
CREATE FUNCTION evil.mul(integer, double precision) RETURNS double precision LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $f$
BEGIN PERFORM evil.record('public.*'); RETURN $1::float8 * $2; END $f$;
CREATE OPERATOR public.* (FUNCTION = evil.mul, LEFTARG = integer, RIGHTARG = double precision);
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $f$
BEGIN PERFORM evil.record('evil.now'); RETURN pg_catalog.now(); END $f$;
CREATE FUNCTION evil.oideq(oid, oid) RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $f$
BEGIN PERFORM evil.record('evil.=(oid)'); RETURN $1 = $2; END $f$;
CREATE OPERATOR evil.= (FUNCTION = evil.oideq, LEFTARG = oid, RIGHTARG = oid);
CREATE FUNCTION evil.int8eq(bigint, bigint) RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $f$
BEGIN PERFORM evil.record('evil.=(bigint)'); RETURN $1 = $2; END $f$;
CREATE OPERATOR evil.= (FUNCTION = evil.int8eq, LEFTARG = bigint, RIGHTARG = bigint);
});

# Control: a superuser session under the database's search_path does run
# the planted code (so the recorders work); the recorder is then emptied.
sub control_calls
{
	my $offset = -s $node->logfile;
	{
		local $ENV{PGOPTIONS} = '-c default_transaction_read_only=off -c statement_timeout=0';
		sql('SELECT 2 * power(2::float8, 1), now(), 1::oid = 1::oid, 1::bigint = 1::bigint');
	}
	as_role('mallory', 'TRUNCATE evil.rec');
	return join(',', sort keys %{ { map { $_ => 1 } log_since($node, $offset) =~ /PLANTED (\S+) ran as \S+ superuser=on/g } });
}

# Applies mallory's database settings, restarts the workers so they
# connect under them, sends events and a poison that is refused
# max_attempts (3) times and dead-lettered, and checks nothing planted ran.
sub attack_phase
{
	my ($label, @settings) = @_;
	as_role('mallory', "ALTER DATABASE postgres SET $_") for @settings;
	my $control = control_calls();
	like($control, qr/public\.power/, "C1 $label: control: the planted code runs in a superuser session");
	my $offset = -s $node->logfile;
	my %old = map { $_ => 1 } @{ worker_pids($node) };
	sql(q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'outbox shard'});
	ok(wait_until(40, sub { my @p = @{ worker_pids($node) }; @p == $shards && !grep { $old{$_} } @p }),
		"C1 $label: the workers restarted under the database's settings");
	my @values = map { "c1-$label-$_" } 1 .. 6;
	send_event($_) for @values;
	my $poison = sql(qq{SELECT outbox_send('sec', repeat('x', 5000), 'P-$label')});
	my $settled = wait_query($node, 'postgres', 'SELECT (SELECT count(*) = 0 FROM outbox) AND'
		  . " (SELECT count(*) = 1 FROM outbox_dead_letter WHERE id = $poison)", 30);
	my $got = kafka_values();
	my $arrived = grep { $got->{$_} } @values;
	my ($calls, $by_worker, $as_su) = split /\|/, sql(q{SELECT count(*), count(*) FILTER (WHERE backend = 'outbox shard'),
		count(*) FILTER (WHERE su = 'on') FROM evil.rec});
	my $log = log_since($node, $offset);
	my $logged = () = $log =~ /PLANTED [^\n]*superuser=on/g;
	my %what = map { $_ => 1 } $log =~ /PLANTED (\S+) ran/g;
	my ($left, $attempts) = split /\|/, sql("SELECT (SELECT count(*) FROM outbox),
		coalesce((SELECT attempts FROM outbox_dead_letter WHERE id = $poison), (SELECT attempts FROM outbox WHERE id = $poison))");
	diag("FIGURES C1 $label: control_superuser_session_ran=[$control] recorded_calls=$calls by_worker=$by_worker as_superuser=$as_su"
		  . " planted_log_lines_superuser=$logged planted=[" . join(',', sort keys %what) . ']'
		  . " delivered=$arrived/6 outbox_left=$left poison_attempts=" . ($attempts // '-')
		  . ' poison_dead_lettered=' . ($settled ? 1 : 0));
	is($calls, 0, "C1 $label: the recorder table stays empty");
	is($logged, 0, "C1 $label: no planted function ran as superuser");
	is($arrived, 6, "C1 $label: the normal events are in Kafka");
	ok($settled, "C1 $label: the outbox drains and the poison is dead-lettered after 3 attempts");
}
attack_phase('public-functions');
attack_phase('search-path', 'search_path = evil, public, pg_catalog');
attack_phase('read-only-timeouts', 'default_transaction_read_only = on', q{lock_timeout = '10ms'},
	q{statement_timeout = '10ms'}, q{idle_in_transaction_session_timeout = '10ms'},
	q{default_transaction_isolation = 'serializable'});
unlike(slurp_file($node->logfile), qr/terminated by signal|PANIC/, 'no crash');

$node->stop;
$broker->stop;
done_testing();
