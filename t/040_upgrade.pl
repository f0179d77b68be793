# Upgrade in place: every released version is installed, events are sent
# while delivery is paused, ALTER EXTENSION outbox UPDATE brings it to the
# current version, and then
#  - the updated extension's catalog (member objects, columns, constraints,
#    indexes, functions with their bodies and settings, privileges,
#    comments, dump configuration) equals a fresh install of the current
#    version, and
#  - the events sent before the update are delivered after it, with the
#    headers of the current version.
# The versions updated from are installed from their full scripts as
# released, frozen in sql/frozen/ (the current one is generated from
# sql/outbox.sql). Every new version adds its predecessor to @from and
# copies the predecessor's generated script there, never to be edited:
# without it, CREATE EXTENSION ... VERSION would build the predecessor
# from an older script and the updates instead.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my @from = ('0.1.0', '0.2.0', '0.3.0', '0.4.0', '0.5.0', '0.6.0');
my $current = '0.7.0';

my $broker = start_broker(topics => ['upgrade:3']);
my $node = new_outbox_node('upgrade', $broker, no_extension => 1,
	conf => "outbox.enabled = off\n");

# The extension's catalog, as text that does not depend on OIDs.
my $catalog_sql = q{
WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'outbox'),
members AS (
  SELECT classid, objid FROM pg_depend, ext
  WHERE refclassid = 'pg_extension'::regclass AND refobjid = ext.oid AND deptype = 'e')
SELECT 'member ' || pg_describe_object(classid, objid, 0)
       || coalesce(' comment ' || obj_description(objid, classid::regclass::text), '')
FROM members
UNION ALL
SELECT format('column %s.%s %s %s notnull=%s default=%s', c.relname, a.attnum, a.attname,
              format_type(a.atttypid, a.atttypmod), a.attnotnull,
              pg_get_expr(d.adbin, d.adrelid))
FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
UNION ALL
SELECT format('relation %s kind=%s acl=%s options=%s', c.relname, c.relkind, c.relacl, c.reloptions)
FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
UNION ALL
SELECT format('index %s', pg_get_indexdef(i.indexrelid))
FROM members m JOIN pg_index i ON m.classid = 'pg_class'::regclass AND i.indrelid = m.objid
UNION ALL
SELECT format('constraint %s.%s %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid))
FROM members m JOIN pg_constraint c ON m.classid = 'pg_class'::regclass AND c.conrelid = m.objid
UNION ALL
SELECT format('function %s (%s) returns %s volatile=%s secdef=%s config=%s acl=%s body=%s',
              p.oid::regprocedure, pg_get_function_arguments(p.oid), p.prorettype::regtype,
              p.provolatile, p.prosecdef, p.proconfig, p.proacl, md5(p.prosrc))
FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
UNION ALL
SELECT 'dumped ' || array_to_string(ARRAY(SELECT unnest(extconfig)::regclass::text ORDER BY 1), ',')
FROM pg_extension WHERE extname = 'outbox'
ORDER BY 1
};

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION outbox');
my $fresh = $node->safe_psql('fresh', $catalog_sql);
like($fresh, qr/outbox_status/, 'the fresh catalog lists the current objects');

# An application role's EXECUTE on outbox_send() survives the update that
# adds the partition (0.7.0) as it was: the function is not replaced, and
# the grant stays the application's, so pg_dump keeps it.
$node->safe_psql('postgres', 'CREATE ROLE upgrade_app');

for my $version (@from)
{
	my $topic = 'upgrade';
	$node->safe_psql('postgres', "CREATE EXTENSION outbox VERSION '$version'");
	my $before = $node->safe_psql('postgres',
		"SELECT count(*) FROM (SELECT outbox_send('$topic', 'from-$version-' || i, 'k' || (i % 3))
		 FROM generate_series(1, 20) i) s");
	is($before, 20, "$version: 20 events stored before the update");

	$node->safe_psql('postgres',
		'GRANT EXECUTE ON FUNCTION outbox_send(text, jsonb, text, jsonb) TO upgrade_app');
	# an application's function bound to it (a dependency: DROP would refuse)
	$node->safe_psql('postgres', q{CREATE FUNCTION app_send(p jsonb) RETURNS bigint
		LANGUAGE sql BEGIN ATOMIC SELECT outbox_send('upgrade', p, 'g'); END});
	my $oid_sql = q{SELECT 'outbox_send(text, jsonb, text, jsonb)'::regprocedure::oid};
	my $oid = $node->safe_psql('postgres', $oid_sql);

	$node->safe_psql('postgres', 'ALTER EXTENSION outbox UPDATE');
	is($node->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'outbox'"),
		$current, "$version: updated to $current");
	is($node->safe_psql('postgres', $oid_sql), $oid,
		"$version: outbox_send(jsonb) is the same function after the update");
	is($node->safe_psql('postgres', q{
		SELECT string_agg(p.oid::regprocedure::text, ',' ORDER BY 1) FROM pg_proc p
		WHERE p.proname = 'outbox_send' AND has_function_privilege('upgrade_app', p.oid, 'EXECUTE')}),
		'outbox_send(text,jsonb,text,jsonb)',
		"$version: the application role's EXECUTE on outbox_send(jsonb) survives, on that variant only");
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_init_privs i, aclexplode(i.initprivs) a
		WHERE a.grantee = 'upgrade_app'::regrole}), '0',
		"$version: the role's grant is not among the extension's initial privileges");
	my ($dump, $dump_err) = run_command(
		[ 'pg_dump', '--schema-only', '-d', $node->connstr('postgres') ]);
	diag($dump_err) if $dump_err;
	like($dump,
		qr/^GRANT (?:ALL|EXECUTE) ON FUNCTION public\.outbox_send\(topic text, payload jsonb, key text, headers jsonb\) TO upgrade_app;$/m,
		"$version: pg_dump keeps the role's grant");
	# sent as the role as before, through its function; the partition is granted apart
	$node->safe_psql('postgres', q{SET ROLE upgrade_app;
		SELECT app_send('{"granted": 4}')});
	$node->safe_psql('postgres', 'DROP FUNCTION app_send(jsonb)');
	$node->safe_psql('postgres',
		'GRANT EXECUTE ON FUNCTION outbox_send(text, jsonb, text, jsonb, integer) TO upgrade_app');
	$node->safe_psql('postgres', q{SET ROLE upgrade_app;
		SELECT outbox_send('upgrade', '{"granted": 5}'::jsonb, 'g', NULL, 1)});
	$node->safe_psql('postgres',
		'REVOKE EXECUTE ON FUNCTION outbox_send(text, jsonb, text, jsonb) FROM upgrade_app');
	$node->safe_psql('postgres',
		'REVOKE EXECUTE ON FUNCTION outbox_send(text, jsonb, text, jsonb, integer) FROM upgrade_app');
	my $updated = $node->safe_psql('postgres', $catalog_sql);
	is($updated, $fresh, "$version: the updated catalog equals a fresh $current install");

	$node->append_conf('postgresql.conf', "outbox.enabled = on\n");
	$node->reload;
	ok(wait_for_empty($node, 60), "$version: the events sent before the update are delivered");
	my @all = @{ consume($broker, $topic) };
	my @got = grep { $_->{value} =~ /^from-\Q$version\E-/ } @all;
	my $instance = $node->safe_psql('postgres', 'SELECT id FROM outbox_instance');
	my @mine = grep { ($_->{headers}{'outbox-instance'} // '') eq $instance } @all;
	my @granted = grep { $_->{value} eq '{"granted": 4}' } @mine;
	my @placed = grep { $_->{value} eq '{"granted": 5}' } @mine;
	is(scalar @granted, 1, "$version: the role's event after the update arrived");
	is(scalar @placed, 1, "$version: and its event with a partition");
	is($placed[0]{partition}, 1, "$version: in the partition it chose");
	my $tagged = grep { ($_->{headers}{'outbox-instance'} // '') eq $instance } @got;
	diag(sprintf('FIGURES upgrade %s->%s: sent=20 delivered=%d with_instance=%d catalog_equal=%d',
			$version, $current, scalar @got, $tagged, $updated eq $fresh ? 1 : 0));
	is(scalar @got, 20, "$version: all 20 reached Kafka");
	is($tagged, 20, "$version: each carries the instance of the updated extension");

	$node->safe_psql('postgres', 'DROP EXTENSION outbox');
	$node->append_conf('postgresql.conf', "outbox.enabled = off\n");
	$node->reload;
}

$node->stop;
done_testing();
