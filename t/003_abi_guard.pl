# The minor-release ABI guard (module.c, compat.h): a library built on a
# minor on the other side of the WalSndCtlData change (the minors of
# 2025-05-08) from the running server keeps the server from starting, and
# the log names both versions. No older minor's headers are at hand here
# (Debian has one minor per major), so the same sources are built with the
# build version the guard compares set to such a minor
# (OUTBOX_ABI_BUILT_VERSION_NUM); the same build claiming the running
# minor starts, which shows that only the version made the difference.
use strict;
use warnings;
use File::Copy qw(copy);
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::RealBin/..";
# a release candidate ("PostgreSQL 19rc1") has no minor: no break known in it
my ($major, $minor) = `pg_config --version` =~ /PostgreSQL (\d+)(?:\.(\d+))?/
  or die "no version from pg_config";
# the first minor with sync_standbys_status; 18 had it from 18.0
my %since = (15 => 13, 16 => 9, 17 => 5);
plan skip_all => "no known ABI break within PostgreSQL $major" unless $since{$major};
my $other = $minor >= $since{$major} ? $since{$major} - 1 : $since{$major};

# A copy of the built tree: only module.c is compiled again.
my $dir = PostgreSQL::Test::Utils::tempdir;
system('cp', '-a', "$root/src", "$root/proto", "$root/Makefile", $dir) == 0
  or die "copy failed";
sub build_claiming
{
	my ($claimed_minor) = @_;
	unlink "$dir/src/module.o", "$dir/outbox.so";
	my $num = $major * 10000 + $claimed_minor;
	my $out = `make -s -C $dir PG_CONFIG=pg_config COPT=-DOUTBOX_ABI_BUILT_VERSION_NUM=$num outbox.so 2>&1`;
	die "build failed: $out" if $?;
}

my $node = PostgreSQL::Test::Cluster->new('abi');
$node->init;
# "outbox" resolves to the copy, for the workers too
$node->append_conf('postgresql.conf', qq{
dynamic_library_path = '$dir:\$libdir'
shared_preload_libraries = 'outbox'
outbox.enabled = off
});

build_claiming($other);
my $offset = -s $node->logfile // 0;
my $t0 = time;
ok(!$node->start(fail_ok => 1),
	"a library claiming $major.$other does not start on $major.$minor");
my $log = slurp_file($node->logfile, $offset);
like($log,
	qr/outbox was built for PostgreSQL $major\.$other and cannot run on PostgreSQL $major\.$minor/,
	'the log names both versions');
like($log, qr/sync_standbys_status/, 'and what changed between them');
diag("FIGURES abi guard: running=$major.$minor claimed=$major.$other refused_in_s=" . (time - $t0));

build_claiming($minor);
ok($node->start(fail_ok => 1), "the same build claiming $major.$minor starts");
is($node->safe_psql('postgres', 'SHOW outbox.enabled'), 'off', 'and has the library loaded');
$node->stop;

done_testing();
