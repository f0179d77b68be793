/*
 * step.c
 *		What every SQL step of the worker does around its statements, so
 *		the read and settle (queue.c) and exactly-once's recovery
 *		(progress.c) run theirs the same way: one short transaction per
 *		step (no snapshot stays open while the worker waits for Kafka), the
 *		extension found by name with its version checked, its instance
 *		read (and renewed where the server moved), and the delete by shard
 *		and id.
 */
#include "table/step.h"

#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"

void
outbox_step_begin(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "outbox: SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

void
outbox_step_end(MemoryContext caller_context)
{
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	/* CommitTransactionCommand leaves us in TopMemoryContext */
	MemoryContextSwitchTo(caller_context);
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* An ERROR naming both versions unless the extension is the library's. */
static void
require_library_version(const char *version)
{
	if (strcmp(version, OUTBOX_VERSION) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"outbox\" is at version %s, the library is %s",
						version, OUTBOX_VERSION),
				 errhint("Run ALTER EXTENSION outbox UPDATE in database \"%s\".",
						 get_database_name(MyDatabaseId))));
}

bool
outbox_step_find_extension(Oid *oid, char **schema)
{
	static SPIPlanPtr plan = NULL;
	bool		isnull;

	if (plan == NULL)
	{
		plan = SPI_prepare("SELECT e.oid, n.nspname, e.extversion FROM pg_catalog.pg_extension e"
						   " JOIN pg_catalog.pg_namespace n ON n.oid" EQ "e.extnamespace"
						   " WHERE e.extname" EQ "'outbox'::pg_catalog.name", 0, NULL);
		if (plan == NULL || SPI_keepplan(plan) != 0)
			elog(ERROR, "outbox: preparing the extension's look-up failed");
	}
	if (SPI_execute_plan(plan, NULL, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "outbox: looking up the extension failed");
	if (SPI_processed == 0)
		return false;
	require_library_version(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3));
	*oid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
										  &isnull));
	*schema = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	return true;
}

/*
 * ids may repeat on a new timeline (an asynchronous standby promoted), in
 * a copy of the database (CREATE DATABASE ... TEMPLATE), and in a physical
 * copy of the server started as a primary on the same timeline: it has the
 * same system identifier, timeline and database, but a copy running at
 * the same time lives at another data directory or on another host. A
 * place not known yet (NULL) is recorded without a new id.
 *
 * A new id keeps the one it replaces (previous_id) and how far this
 * server's WAL is that id's own history (previous_until: the redo point
 * of its last checkpoint, at or past the end of its recovery, so past
 * everything the previous id's server had flushed): exactly-once's
 * recovery settles a progress record of the previous id written up to
 * there (progress.c), and not a record a copy running at the same time
 * wrote after the two diverged.
 */
#define DIFFERS(col, arg) " (" col " IS NULL OR " col " OPERATOR(pg_catalog.<>) " arg ")"
#define KNOWN_AND_DIFFERS(col, arg) " " col " OPERATOR(pg_catalog.<>) " arg
#define NEEDS_NEW_ID \
	" timeline OPERATOR(pg_catalog.<>) $1" \
	"  OR database OPERATOR(pg_catalog.<>) $2" \
	"  OR" KNOWN_AND_DIFFERS("system_identifier", "$3") \
	"  OR" KNOWN_AND_DIFFERS("data_directory", "$4") \
	"  OR" KNOWN_AND_DIFFERS("host", "$5")

#define ROTATE_SQL \
	"UPDATE %s.outbox_instance SET" \
	" id = CASE WHEN" NEEDS_NEW_ID \
	"  THEN pg_catalog.gen_random_uuid() ELSE id END," \
	" previous_id = CASE WHEN" NEEDS_NEW_ID \
	"  THEN id ELSE previous_id END," \
	" previous_until = CASE WHEN" NEEDS_NEW_ID \
	"  THEN $6 ELSE previous_until END," \
	" timeline = $1, database = $2, system_identifier = $3," \
	" data_directory = $4, host = $5" \
	" WHERE timeline OPERATOR(pg_catalog.<>) $1" \
	" OR database OPERATOR(pg_catalog.<>) $2" \
	" OR" DIFFERS("system_identifier", "$3") \
	" OR" DIFFERS("data_directory", "$4") \
	" OR" DIFFERS("host", "$5")

/* This server's host name, as text; "" if it has none. */
static Datum
host_name(void)
{
	char		host[256];

	if (gethostname(host, sizeof(host)) != 0)
		host[0] = '\0';
	host[sizeof(host) - 1] = '\0';
	return CStringGetTextDatum(host);
}

/*
 * Replaces the instance when the server now writes on another timeline
 * than the one it was made on, the database is a copy of the one it was
 * made in, or the server is not where it was made. True if it replaced it.
 */
static bool
rotate_instance(const char *schema)
{
	Oid			types[6] = {INT8OID, OIDOID, INT8OID, TEXTOID, TEXTOID, PG_LSNOID};
	Datum		args[6];

	args[0] = Int64GetDatum((int64) GetWALInsertionTimeLine());
	args[1] = ObjectIdGetDatum(MyDatabaseId);
	args[2] = Int64GetDatum((int64) GetSystemIdentifier());
	args[3] = CStringGetTextDatum(DataDir);
	args[4] = host_name();
	args[5] = LSNGetDatum(GetRedoRecPtr());
	if (SPI_execute_with_args(psprintf(ROTATE_SQL, schema), 6, types, args, NULL, false, 0) !=
		SPI_OK_UPDATE)
		elog(ERROR, "outbox: renewing outbox_instance failed");
	return SPI_processed > 0;
}

bool
outbox_step_instance(const char *schema, bool rotate, OutboxInstance *instance)
{
	bool		rotated = rotate && rotate_instance(schema);
	bool		isnull;
	Datum		until;

	/* after the UPDATE, not read-only: a new command sees what it wrote */
	if (SPI_execute(psprintf("SELECT id::pg_catalog.text, previous_id::pg_catalog.text,"
							 " previous_until FROM %s.outbox_instance", schema),
					!rotate, 1) != SPI_OK_SELECT || SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("outbox_instance must hold exactly one row")));
	instance->id = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	instance->previous_id = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	until = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	instance->previous_until = isnull ? InvalidXLogRecPtr : DatumGetLSN(until);
	return rotated;
}

char *
outbox_delete_by_id_sql(const char *schema, const char *more)
{
	return psprintf("DELETE FROM %s.outbox WHERE shard" EQ "$1 AND id" EQ "ANY($2)%s",
					schema, more);
}

ArrayType *
outbox_int8_array(const int64 *values, int n)
{
	Datum	   *datums = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		datums[i] = Int64GetDatum(values[i]);
	return construct_array(datums, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
}
