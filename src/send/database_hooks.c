/*
 * database_hooks.c
 *		Keeps the launcher informed of the DDL that concerns delivery, and
 *		keeps the workers out of the way of the DDL that needs a database
 *		free of connections.
 *
 * - CREATE EXTENSION outbox, once it created the extension, asks the
 *   launcher at commit to start the database's workers at once; CREATE
 *   DATABASE only wakes it, to look at the new database at once. A
 *   statement that changed nothing (IF NOT EXISTS) tells it nothing: any
 *   role may run one, and must not make it restart failed workers early.
 * - DROP DATABASE, ALTER DATABASE ... RENAME / SET TABLESPACE and
 *   CREATE DATABASE ... TEMPLATE refuse to run while anyone is connected
 *   to the database. Before them, the backend pauses the database's
 *   workers (the launcher starts none while the pause lasts, and one
 *   starting meanwhile does not connect), stops them (they finish their
 *   batch, bounded by outbox.shutdown_timeout) and waits for them to
 *   leave; the pause ends with the transaction, however it ends.
 *   Wherever PostgreSQL runs the statement this is done, for every
 *   database it names: RENAME also in a transaction block (several in
 *   one), in a DO block or in a procedure.
 *   Only a statement that can succeed does this: by a role allowed to run
 *   it, where PostgreSQL runs it, so no role can stop delivery at will.
 * - CREATE TRIGGER of outbox_debezium(), once it made the trigger, has its
 *   options checked against the table (debezium.c), so that bad ones fail
 *   the CREATE TRIGGER rather than the first insert.
 * - COMMIT PREPARED, once it made a prepared transaction's events visible,
 *   wakes the database's workers: the backend that sent them (if it is
 *   still there) hears nothing of it (registry.c, "prepared transactions").
 */
#include "send/database_hooks.h"
#include "compat.h"
#include "send/debezium.h"
#include "settings.h"
#include "shared/inbox.h"
#include "shared/pauses.h"
#include "shared/registry.h"
#include "shared/slots.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/syscache.h"

static ProcessUtility_hook_type prev_utility_hook = NULL;

/* Databases one transaction can pause; the shared table holds no more. */
#define MAX_PAUSED 16

/* What this transaction did that the launcher must hear of at its end. */
static bool created_extension = false;
static bool created_database = false;
static Oid	paused_databases[MAX_PAUSED];
static int	npaused = 0;

static bool
owns_database(Oid dboid)
{
	return compat_database_ownercheck(dboid, GetUserId());
}

static bool
is_template(Oid dboid)
{
	HeapTuple	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dboid));
	bool		template = false;

	if (HeapTupleIsValid(tuple))
	{
		template = ((Form_pg_database) GETSTRUCT(tuple))->datistemplate;
		ReleaseSysCache(tuple);
	}
	return template;
}

static const char *
option_value(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *option = lfirst_node(DefElem, lc);

		if (strcmp(option->defname, name) == 0 && option->arg != NULL)
			return defGetString(option);
	}
	return NULL;
}

/* The database a statement names, if it exists and is not ours. */
static Oid
other_database(const char *dbname)
{
	Oid			dboid = get_database_oid(dbname, true);

	return dboid == MyDatabaseId ? InvalidOid : dboid;
}

/* RenameDatabase's checks: an owner with CREATEDB, and a free new name. */
static Oid
renamed_database(RenameStmt *stmt)
{
	Oid			dboid = other_database(stmt->subname);

	if (!OidIsValid(dboid) || !owns_database(dboid) || !compat_have_createdb_privilege() ||
		OidIsValid(get_database_oid(stmt->newname, true)))
		return InvalidOid;
	return dboid;
}

/* createdb's checks: CREATEDB, and a template, or a database one owns. */
static Oid
copied_database(CreatedbStmt *stmt)
{
	const char *template = option_value(stmt->options, "template");
	Oid			dboid = template ? get_database_oid(template, true) : InvalidOid;

	if (!OidIsValid(dboid) || !compat_have_createdb_privilege() ||
		!(is_template(dboid) || owns_database(dboid)))
		return InvalidOid;
	return dboid;
}

/*
 * The database a statement needs free of connections, if the caller may
 * run it; InvalidOid otherwise. RENAME runs anywhere, the others only as a
 * top-level statement outside a transaction block.
 */
static Oid
database_needed_free(Node *node, ProcessUtilityContext context)
{
	Oid			dboid = InvalidOid;

	if (IsA(node, RenameStmt) && ((RenameStmt *) node)->renameType == OBJECT_DATABASE)
		return renamed_database((RenameStmt *) node);
	/* refused there anyway: no pause for them */
	if (context != PROCESS_UTILITY_TOPLEVEL || IsTransactionBlock())
		return InvalidOid;
	if (IsA(node, DropdbStmt))
		dboid = other_database(((DropdbStmt *) node)->dbname);
	else if (IsA(node, AlterDatabaseStmt) &&
			 option_value(((AlterDatabaseStmt *) node)->options, "tablespace") != NULL)
		dboid = other_database(((AlterDatabaseStmt *) node)->dbname);
	else if (IsA(node, CreatedbStmt))
		return copied_database((CreatedbStmt *) node);
	return OidIsValid(dboid) && owns_database(dboid) ? dboid : InvalidOid;
}

/*
 * Stops the workers connected to the database and waits for them to leave.
 * A worker still starting is not waited for: it sees the pause, set
 * before, and exits without connecting (outbox_worker_attach).
 */
static void
stop_workers_and_wait(Oid dboid)
{
	int			nslots = outbox_worker_slot_count();
	int		   *signalled = palloc0(sizeof(int) * nslots);
	long		waited_ms = 0;
	long		limit_ms = outbox_shutdown_timeout_ms + 5000L;

	for (;;)
	{
		bool		running = false;

		for (int i = 0; i < nslots; i++)
		{
			OutboxWorkerInfo info = outbox_worker_info(i);

			if (info.dboid != dboid || info.pid == 0)
				continue;
			running = true;
			if (signalled[i] != info.pid)
				kill(info.pid, SIGTERM);
			signalled[i] = info.pid;
		}
		if (!running || waited_ms >= limit_ms)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 20, compat_wait_event(OUTBOX_WAIT_WORKERS_EXIT));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		waited_ms += 20;
	}
	pfree(signalled);
}

/*
 * Pauses the database until the transaction ends (again, if this
 * transaction did already: a pause lasts a while only); false if no pause
 * entry is free.
 */
static bool
pause_for_transaction(Oid dboid)
{
	bool		known = false;

	for (int i = 0; i < npaused; i++)
		known |= (paused_databases[i] == dboid);
	if (!known && npaused >= MAX_PAUSED)
		return false;
	if (!outbox_pause_database(dboid))
		return false;
	if (!known)
		paused_databases[npaused++] = dboid;
	return true;
}

static void
run_utility(PlannedStmt *pstmt, const char *queryString,
			bool readOnlyTree,
			ProcessUtilityContext context, ParamListInfo params,
			QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_utility_hook)
		prev_utility_hook(pstmt, queryString,
						  readOnlyTree,
						  context, params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString,
								readOnlyTree,
								context, params, queryEnv, dest, qc);
}

static void
outbox_utility_hook(PlannedStmt *pstmt, const char *queryString,
					bool readOnlyTree,
					ProcessUtilityContext context, ParamListInfo params,
					QueryEnvironment *queryEnv, DestReceiver *dest,
					QueryCompletion *qc)
{
	Node	   *node = pstmt->utilityStmt;
	bool		creates_outbox = false;

	if (outbox_slots_available() && node != NULL)
	{
		Oid			dboid = database_needed_free(node, context);

		/* the pause lasts until the transaction ends, however it ends */
		if (OidIsValid(dboid) && pause_for_transaction(dboid))
			stop_workers_and_wait(dboid);
		creates_outbox = IsA(node, CreateExtensionStmt) &&
			strcmp(((CreateExtensionStmt *) node)->extname, "outbox") == 0 &&
			!OidIsValid(get_extension_oid("outbox", true));
	}
	run_utility(pstmt, queryString,
				readOnlyTree,
				context, params, queryEnv, dest, qc);
	/* only what the statement did, once it did it, is news */
	created_extension |= creates_outbox;
	if (outbox_slots_available() && node != NULL && IsA(node, CreatedbStmt))
		created_database = true;
	if (node != NULL && IsA(node, CreateTrigStmt))
		outbox_debezium_check_created((CreateTrigStmt *) node);
	if (node != NULL && IsA(node, TransactionStmt) &&
		((TransactionStmt *) node)->kind == TRANS_STMT_COMMIT_PREPARED &&
		outbox_prepared_events_ended())
		outbox_wake_shards(~UINT64CONST(0));
}

/*
 * At the end of the transaction (a dropped database is gone only once its
 * drop commits): the pause ends, and the launcher hears of what changed.
 */
static void
tell_launcher_at_end(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PREPARE)
		return;
	for (int i = 0; i < npaused; i++)
		outbox_resume_database(paused_databases[i]);
	npaused = 0;
	if (event == XACT_EVENT_COMMIT && created_extension)
		outbox_request_launcher(MyDatabaseId);
	if (event == XACT_EVENT_COMMIT && created_database)
		outbox_wake_launcher();
	created_extension = created_database = false;
}

void
outbox_install_utility_hook(void)
{
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = outbox_utility_hook;
	RegisterXactCallback(tell_launcher_at_end, NULL);
}
