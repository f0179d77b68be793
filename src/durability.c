/*
 * durability.c
 *		An event may reach Kafka only once the commit that made it visible
 *		can no longer be lost: flushed to this server's disk and, when
 *		synchronous replication is configured, confirmed by the synchronous
 *		standbys. Otherwise an asynchronous commit (synchronous_commit =
 *		off, which any user may set) or a failover to a standby that never
 *		received the commit would leave Kafka with an event whose
 *		transaction does not exist.
 */
#include "durability.h"
#include "compat.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "pgstat.h"
#include "replication/syncrep.h"
#include "replication/walsender_private.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

/* How often a worker looks whether the synchronous standbys caught up. */
#define SYNC_POLL_MS 10

/*
 * The end of every commit visible to a snapshot taken before this call.
 * The insert position right after a page header is also the end of the
 * previous page, which is where the last record ended.
 */
XLogRecPtr
outbox_visible_commits_end(void)
{
	XLogRecPtr	lsn = GetXLogInsertRecPtr();

	if (lsn % XLOG_BLCKSZ <= SizeOfXLogLongPHD)
		lsn -= lsn % XLOG_BLCKSZ;
	return lsn;
}

/* As the checkpointer last published synchronous_standby_names. */
static bool
sync_standbys_defined(void)
{
	/* a bool before the minor releases of 2025-05-08, a status since */
	compat_sync_standbys s = ((volatile WalSndCtlData *) WalSndCtl)->COMPAT_SYNC_STANDBYS_FIELD;

	return COMPAT_SYNC_STANDBYS_DEFINED(s);
}

static XLogRecPtr
sync_standbys_flushed(void)
{
	XLogRecPtr	lsn;

	LWLockAcquire(SyncRepLock, LW_SHARED);
	lsn = WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH];
	LWLockRelease(SyncRepLock);
	return lsn;
}

/*
 * Makes WAL up to lsn durable: flushes it, then waits for the synchronous
 * standbys, as long as any are configured. Returns false, without waiting
 * further, when the worker is asked to stop.
 */
bool
outbox_wait_durable(XLogRecPtr lsn)
{
	bool		reported = false;

	XLogFlush(lsn);
	while (sync_standbys_defined() && sync_standbys_flushed() < lsn)
	{
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			return false;
		if (!reported)
			pgstat_report_activity(STATE_RUNNING,
								   "outbox: waiting for the synchronous standbys");
		reported = true;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 SYNC_POLL_MS, compat_wait_event(OUTBOX_WAIT_SYNC_STANDBY));
		ResetLatch(MyLatch);
	}
	return true;
}
