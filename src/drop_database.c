/*
 * drop_database.c
 *		Keeps the workers from blocking DROP DATABASE of outbox.database.
 *
 * A worker stays connected to its database, and DROP DATABASE refuses to
 * run while anyone is. So before the drop, the dropping backend marks the
 * drop as pending, stops the workers (they finish their batch, bounded by
 * outbox.shutdown_timeout) and waits for them to leave; restarted workers
 * wait while the mark is set and the dropping backend lives.
 *
 * Only a drop that can happen may do this: a top-level DROP DATABASE,
 * outside a transaction block, by a role allowed to drop the database.
 * Anything else would let any role stop delivery at will. The mark is
 * cleared however the drop ends (error, cancel, timeout).
 */
#include "outbox.h"

#include <signal.h>

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "tcop/utility.h"

static ProcessUtility_hook_type prev_utility_hook = NULL;

static bool
may_drop_database(const char *dbname)
{
	Oid			dboid = get_database_oid(dbname, true);

	if (!OidIsValid(dboid))
		return false;
#if PG_VERSION_NUM >= 160000
	return object_ownercheck(DatabaseRelationId, dboid, GetUserId());
#else
	return pg_database_ownercheck(dboid, GetUserId());
#endif
}

static bool
drops_outbox_database(PlannedStmt *pstmt, ProcessUtilityContext context)
{
	Node	   *node = pstmt->utilityStmt;

	return node != NULL && IsA(node, DropdbStmt) &&
		strcmp(((DropdbStmt *) node)->dbname, outbox_database) == 0 &&
		context == PROCESS_UTILITY_TOPLEVEL && !IsTransactionBlock() &&
		may_drop_database(outbox_database);
}

static bool
any_worker_running(void)
{
	for (int shard = 0; shard < outbox_shards; shard++)
		if (outbox_worker_pid(shard) != 0)
			return true;
	return false;
}

static void
stop_workers_and_wait(void)
{
	long		waited_ms = 0;
	long		limit_ms = outbox_shutdown_timeout_ms + 5000L;

	for (int shard = 0; shard < outbox_shards; shard++)
	{
		int			pid = outbox_worker_pid(shard);

		if (pid != 0)
			kill(pid, SIGTERM);
	}
	while (any_worker_running() && waited_ms < limit_ms)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 50, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		waited_ms += 50;
	}
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
	bool		dropping = outbox_shmem_available() &&
		drops_outbox_database(pstmt, context);

	PG_TRY();
	{
		if (dropping)
		{
			outbox_set_drop_pending(MyProcPid);
			stop_workers_and_wait();
		}
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
	PG_FINALLY();
	{
		if (dropping)
			outbox_set_drop_pending(0);
	}
	PG_END_TRY();
}

void
outbox_install_utility_hook(void)
{
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = outbox_utility_hook;
}
