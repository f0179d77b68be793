/*
 * database_hooks.c
 *		Keeps the launcher informed of the DDL that concerns delivery, and
 *		keeps the workers out of the way of the DDL that needs a database
 *		free of connections.
 *
 * - CREATE EXTENSION outbox and CREATE DATABASE ask the launcher, at
 *   commit, to look at the database(s) again: delivery starts at once.
 * - DROP DATABASE, ALTER DATABASE ... RENAME / SET TABLESPACE and
 *   CREATE DATABASE ... TEMPLATE refuse to run while anyone is connected
 *   to the database. Before them, the backend pauses the database's
 *   workers (the launcher starts none while the pause lasts), stops them
 *   (they finish their batch, bounded by outbox.shutdown_timeout) and
 *   waits for them to leave; the pause ends with the transaction, however
 *   it ends.
 *   Only a statement that can succeed does this: by a role allowed to run
 *   it, at top level, so no role can stop delivery at will.
 */
#include "database_hooks.h"
#include "settings.h"
#include "shmem.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/syscache.h"

static ProcessUtility_hook_type prev_utility_hook = NULL;

/* What this transaction did that the launcher must hear of at its end. */
static bool created_extension = false;
static bool created_database = false;
static Oid	paused_database = InvalidOid;

static bool
owns_database(Oid dboid)
{
#if PG_VERSION_NUM >= 160000
	return object_ownercheck(DatabaseRelationId, dboid, GetUserId());
#else
	return pg_database_ownercheck(dboid, GetUserId());
#endif
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

/*
 * The database a statement needs free of connections, if the caller may
 * run it; InvalidOid otherwise.
 */
static Oid
database_needed_free(Node *node, ProcessUtilityContext context)
{
	const char *dbname = NULL;
	bool		copy = false;
	Oid			dboid;

	if (IsA(node, DropdbStmt))
	{
		/* refused in a transaction block anyway: no pause for it */
		if (context != PROCESS_UTILITY_TOPLEVEL || IsTransactionBlock())
			return InvalidOid;
		dbname = ((DropdbStmt *) node)->dbname;
	}
	else if (IsA(node, RenameStmt) && ((RenameStmt *) node)->renameType == OBJECT_DATABASE)
		dbname = ((RenameStmt *) node)->subname;
	else if (IsA(node, AlterDatabaseStmt) &&
			 option_value(((AlterDatabaseStmt *) node)->options, "tablespace") != NULL)
		dbname = ((AlterDatabaseStmt *) node)->dbname;
	else if (IsA(node, CreatedbStmt))
	{
		dbname = option_value(((CreatedbStmt *) node)->options, "template");
		copy = true;
	}
	if (dbname == NULL || context != PROCESS_UTILITY_TOPLEVEL)
		return InvalidOid;
	dboid = get_database_oid(dbname, true);
	if (!OidIsValid(dboid))
		return InvalidOid;
	/* CREATE DATABASE copies a template, or a database its owner owns */
	if (copy && !(have_createdb_privilege() && (is_template(dboid) || owns_database(dboid))))
		return InvalidOid;
	if (!copy && !owns_database(dboid))
		return InvalidOid;
	return dboid;
}

static bool
any_worker_running(Oid dboid)
{
	for (int i = 0; i < outbox_worker_slot_count(); i++)
	{
		OutboxWorkerInfo info = outbox_worker_info(i);

		if (info.dboid == dboid && info.pid != 0)
			return true;
	}
	return false;
}

static void
stop_workers_and_wait(Oid dboid)
{
	long		waited_ms = 0;
	long		limit_ms = outbox_shutdown_timeout_ms + 5000L;

	for (int i = 0; i < outbox_worker_slot_count(); i++)
	{
		OutboxWorkerInfo info = outbox_worker_info(i);

		if (info.dboid == dboid && info.pid != 0)
			kill(info.pid, SIGTERM);
	}
	while (any_worker_running(dboid) && waited_ms < limit_ms)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 20, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		waited_ms += 20;
	}
}

static void
note_for_commit(Node *node)
{
	if (IsA(node, CreateExtensionStmt) &&
		strcmp(((CreateExtensionStmt *) node)->extname, "outbox") == 0)
		created_extension = true;
	else if (IsA(node, CreatedbStmt))
		created_database = true;
}

static void
run_utility(PlannedStmt *pstmt, const char *queryString,
#if PG_VERSION_NUM >= 140000
			bool readOnlyTree,
#endif
			ProcessUtilityContext context, ParamListInfo params,
			QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_utility_hook)
		prev_utility_hook(pstmt, queryString,
#if PG_VERSION_NUM >= 140000
						  readOnlyTree,
#endif
						  context, params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString,
#if PG_VERSION_NUM >= 140000
								readOnlyTree,
#endif
								context, params, queryEnv, dest, qc);
}

static void
outbox_utility_hook(PlannedStmt *pstmt, const char *queryString,
#if PG_VERSION_NUM >= 140000
					bool readOnlyTree,
#endif
					ProcessUtilityContext context, ParamListInfo params,
					QueryEnvironment *queryEnv, DestReceiver *dest,
					QueryCompletion *qc)
{
	Node	   *node = pstmt->utilityStmt;

	if (outbox_shmem_available() && node != NULL)
	{
		Oid			dboid;

		note_for_commit(node);
		dboid = database_needed_free(node, context);
		/* the pause lasts until the transaction ends, however it ends */
		if (OidIsValid(dboid) && !OidIsValid(paused_database) &&
			outbox_pause_database(dboid))
		{
			paused_database = dboid;
			stop_workers_and_wait(dboid);
		}
	}
	run_utility(pstmt, queryString,
#if PG_VERSION_NUM >= 140000
				readOnlyTree,
#endif
				context, params, queryEnv, dest, qc);
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
	if (OidIsValid(paused_database))
		outbox_resume_database(paused_database);
	if (event == XACT_EVENT_COMMIT && created_database)
		outbox_request_launcher(InvalidOid);
	else if (event == XACT_EVENT_COMMIT && created_extension)
		outbox_request_launcher(MyDatabaseId);
	paused_database = InvalidOid;
	created_extension = created_database = false;
}

void
outbox_install_utility_hook(void)
{
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = outbox_utility_hook;
	RegisterXactCallback(tell_launcher_at_end, NULL);
}
