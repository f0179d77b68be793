# Bench::Env: what every part of the benchmark drives. One PostgreSQL node
# (PostgreSQL::Test::Cluster, from the private installation bench/run.sh
# made) with the extension preloaded, psql and pgbench; the Kafka side
# comes from its base class Bench::Kafka. Parts call these instead of
# spelling out commands.
package Bench::Env;

use strict;
use warnings;
use parent 'Bench::Kafka';

use Bench::Util qw(slurp);
use IPC::Run ();
use OutboxTest qw(wait_until);
use PostgreSQL::Test::Cluster;
use Time::HiRes ();

use constant TOPIC => 'bench';

sub new
{
	my ($class, %o) = @_;
	my $self = bless {%o, shards => 1, topics => 0}, $class;
	return $self;
}

sub say { my ($self, @msg) = @_; print {$self->{out}} @msg, "\n"; }
sub log { my ($self, @msg) = @_; $self->say("\n== ", @msg); }
sub bin { my ($self, $cmd) = @_; return "$self->{install_path}/bin/$cmd"; }
sub file { my ($self, $name) = @_; return "$self->{work}/$name"; }

sub start_node
{
	my ($self) = @_;
	my $node = PostgreSQL::Test::Cluster->new('bench', install_path => $self->{install_path});
	$node->init;
	# the harness's test defaults (fsync off, every statement logged) would
	# change what is measured: this is the old benchmark's configuration
	$node->append_conf('postgresql.conf', qq{
# pg_outbox benchmark
fsync = on
log_statement = none
log_line_prefix = '%m [%p] %b '
max_connections = 50
shared_preload_libraries = 'outbox'
shared_buffers = 1GB
max_wal_size = 4GB
checkpoint_timeout = 15min
autovacuum = on
max_worker_processes = 16
log_checkpoints = on
log_autovacuum_min_duration = 0
outbox.brokers = '@{[ $self->bootstrap ]}'
outbox.shards = 1
# the parts measure running workers (pids, threads); the tenants part
# measures sleeping ones
outbox.worker_idle_timeout = 0
});
	# the debezium part: a logical slot read over TCP (JDBC has no Unix sockets)
	$node->append_conf('postgresql.conf', "wal_level = logical\nmax_wal_senders = 4\nmax_replication_slots = 4\n"
		  . "listen_addresses = '127.0.0.1'\n")
	  if $self->{logical};
	# --set: a setting changed for the whole run (meta.outbox_settings shows it)
	$node->append_conf('postgresql.conf', join('', map { s/=(.*)/ = '$1'\n/r } @{ $self->{settings} }));
	$node->start;
	$self->{node} = $node;
	$self->sql('CREATE EXTENSION outbox');
	$self->psql_file("$self->{bench}/sql/setup.sql");
	$self->wait_workers(1);
}

sub node { return $_[0]{node}; }

sub sql
{
	my ($self, $sql, $db) = @_;
	return $self->{node}->safe_psql($db // 'postgres', $sql);
}

sub psql_cmd
{
	my ($self, $db) = @_;
	return [ $self->bin('psql'), '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1',
		'-h', $self->{node}->host, '-p', $self->{node}->port, '-d', $db // 'postgres' ];
}

sub psql_file
{
	my ($self, $file) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ @{ $self->psql_cmd }, '-f', $file ], '<', \undef, '>', \$out, '2>', \$err)
	  or die "psql -f $file: $err";
	return $out;
}

# A psql in the background running each of @sql; Bench::Util::finish_bg it.
sub psql_bg
{
	my ($self, $outfile, @sql) = @_;
	return Bench::Util::start_bg([ @{ $self->psql_cmd }, map { ('-c', $_) } @sql ],
		'<', \undef, '>', $outfile, '2>', "$outfile.err");
}

# Another session holding a REPEATABLE READ snapshot for $seconds (VACUUM
# cannot remove what is deleted meanwhile); finish with Bench::Util::finish_bg.
sub hold_snapshot
{
	my ($self, $name, $seconds) = @_;
	return $self->psql_bg($self->file("$name.out"),
		"BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM plain LIMIT 1; SELECT pg_sleep($seconds); COMMIT;");
}

# One statement's time in ms, commit included (psql's \timing).
sub timed_sql
{
	my ($self, $sql) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ @{ $self->psql_cmd }, '-c', '\timing on', '-c', $sql ],
		'<', \undef, '>', \$out, '2>', \$err) or die "psql: $err";
	$out =~ /^Time: ([0-9.]+) ms/m or die "no timing in: $out";
	return $1;
}

# Sets a server setting with ALTER SYSTEM if this build knows it: the
# worker is being rewritten and settings come and go. True if set.
sub set_setting
{
	my ($self, $name, $value) = @_;
	return 0 unless $self->has_setting($name);
	$self->sql("ALTER SYSTEM SET $name = '$value'");
	$self->sql('SELECT pg_reload_conf()');
	return 1;
}

sub reset_setting
{
	my ($self, $name) = @_;
	return unless $self->has_setting($name);
	$self->sql("ALTER SYSTEM RESET $name");
	$self->sql('SELECT pg_reload_conf()');
}

sub has_setting
{
	my ($self, $name) = @_;
	return $self->sql("SELECT count(*) FROM pg_settings WHERE name = '$name'") eq '1';
}

sub set_enabled
{
	my ($self, $on) = @_;
	$self->sql('ALTER SYSTEM SET outbox.enabled = ' . ($on ? 'on' : 'off'));
	$self->sql('SELECT pg_reload_conf()');
	Time::HiRes::sleep(0.3);
}

sub worker_pids
{
	my ($self) = @_;
	return [ split /\n/, $self->sql(q{SELECT pid FROM pg_stat_activity
		WHERE backend_type = 'outbox shard' ORDER BY pid}) ];
}

sub wait_workers
{
	my ($self, $n) = @_;
	wait_until(30, sub { @{ $self->worker_pids } == $n })
	  or die "expected $n outbox worker(s), have " . scalar @{ $self->worker_pids };
}

sub set_shards
{
	my ($self, $n) = @_;
	return if $self->{shards} == $n;
	$self->sql("ALTER SYSTEM SET outbox.shards = $n");
	$self->{node}->restart;
	$self->{shards} = $n;
	$self->wait_workers($n);
}

sub shards { return $_[0]{shards}; }

# Waits until the outbox is empty (in the server, see bench_wait_empty).
sub wait_empty
{
	my ($self, $timeout) = @_;
	$self->sql("CALL bench_wait_empty(extract(epoch from clock_timestamp())::float8, "
		  . ($timeout // 600) . ", $self->{shards}, NULL)");
}

# A script that switches delivery on and prints the seconds until the
# outbox is empty: run with psql, in the foreground or in the background.
sub timed_drain_script
{
	my ($self) = @_;
	my $file = $self->file('timed_drain.sql');
	open my $fh, '>', $file or die "$file: $!";
	print $fh <<"SQL";
SELECT extract(epoch from clock_timestamp()) AS t0 \\gset
ALTER SYSTEM SET outbox.enabled = on;
SELECT pg_reload_conf() \\g /dev/null
CALL bench_wait_empty(:t0, 900, $self->{shards}, NULL);
SQL
	close $fh;
	return $file;
}

sub timed_drain
{
	my ($self) = @_;
	my $s = $self->psql_file($self->timed_drain_script);
	chomp $s;
	return $s;
}

# $n events of the payload size, keys over 1000 values, delivery paused.
sub fill_outbox
{
	my ($self, $n, $db) = @_;
	$self->sql("SELECT count(outbox_send('" . TOPIC . "', repeat('x', $self->{payload}), 'k' || (i % 1000)))"
		  . " FROM generate_series(1, $n) i", $db);
}

# One event per key of the first 100, delivered: the producers are up.
sub warm_up
{
	my ($self) = @_;
	$self->set_enabled(1);
	$self->sql("SELECT count(outbox_send('" . TOPIC . "', repeat('x', $self->{payload}), 'k' || i))"
		  . " FROM generate_series(1, 100) i");
	$self->wait_empty(120);
}

# Writes a pgbench script; returns its path.
sub script
{
	my ($self, $name, $body) = @_;
	my $file = $self->file("$name.sql");
	open my $fh, '>', $file or die "$file: $!";
	print $fh $body;
	close $fh;
	return $file;
}

# The latency script: each event's payload is clock_timestamp() in
# microseconds, taken in the statement that calls outbox_send.
sub latency_script
{
	my ($self, $topic) = @_;
	return $self->script("latency_$topic", <<"SQL");
\\set i random(1, 1000)
SELECT outbox_send('$topic', (extract(epoch from clock_timestamp()) * 1e6)::bigint::text, 'k' || :i);
SQL
}

sub pgbench_cmd
{
	my ($self, $script, @args) = @_;
	return [ $self->bin('pgbench'), '-h', $self->{node}->host, '-p', $self->{node}->port,
		'-n', '-M', 'prepared', @args, '-f', $script, 'postgres' ];
}

# Runs pgbench to the end: { tps, count }.
sub pgbench
{
	my ($self, $script, @args) = @_;
	my $out = $self->file('pgbench.out');
	IPC::Run::run($self->pgbench_cmd($script, @args), '<', \undef, '>', $out, '2>&1')
	  or die "pgbench failed: " . slurp($out);
	return Bench::Env::pgbench_result($out);
}

sub pgbench_bg
{
	my ($self, $out, $script, @args) = @_;
	return Bench::Util::start_bg($self->pgbench_cmd($script, @args), '<', \undef, '>', $out, '2>&1');
}

sub pgbench_result
{
	my ($file) = @_;
	my $text = slurp($file);
	my ($tps) = $text =~ /^tps = ([0-9.]+) \(without initial connection time\)/m;
	my ($count) = $text =~ /^number of transactions actually processed: (\d+)/m;
	die "no tps from pgbench: $text" unless defined $tps;
	return { tps => $tps, count => $count };
}

1;
