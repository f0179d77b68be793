/*
 * durability.c
 *		An event may reach Kafka only once the commit that made it visible
 *		can no longer be lost: flushed to this server's disk and, when
 *		synchronous replication is configured, confirmed by the synchronous
 *		standbys. Otherwise an asynchronous commit (synchronous_commit =
 *		off, which any user may set) or a failover to a standby that never
 *		received the commit would leave Kafka with an event whose
 *		transaction does not exist.
 *
 * Without synchronous standbys, only the asynchronous commits among the
 * read's transactions need a flush: a synchronous one flushed its commit
 * before it became visible. Flushing to the insert position instead would
 * queue the worker on WALWriteLock behind every other session's commit.
 */
#include "durability.h"
#include "compat.h"
#include "stop.h"

#include "access/transam.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
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

/*
 * Where the asynchronous commits of the given transactions (the xmins of
 * the rows a read returned) end, InvalidXLogRecPtr if none needs a flush.
 * The commit log keeps, per small group of transactions, the end of their
 * latest asynchronous commit (what hint bits wait for); a synchronous
 * commit leaves none. Before a commit log page leaves memory the WAL up to
 * those ends is flushed, and before a segment is truncated a record after
 * every commit it holds: a transaction whose page is gone (or older than
 * the log, as a frozen row's xmin can be) is durable.
 */
XLogRecPtr
outbox_async_commits_end(const TransactionId *xids, int n)
{
	XLogRecPtr	end = InvalidXLogRecPtr;
	TransactionId next;

	if (n == 0)
		return end;
	/* the log neither truncated meanwhile nor looked up past its end */
	LWLockAcquire(XactTruncationLock, LW_SHARED);
	next = ReadNextTransactionId();
	for (int i = 0; i < n; i++)
	{
		TransactionId xid = xids[i];

		if (!TransactionIdIsNormal(xid) ||
			TransactionIdPrecedes(xid, COMPAT_OLDEST_CLOG_XID) ||
			!TransactionIdPrecedes(xid, next))
			continue;
		end = Max(end, TransactionIdGetCommitLSN(xid));
	}
	LWLockRelease(XactTruncationLock);
	return end;
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
 * Makes a read's commits durable: flushes the WAL of its asynchronous
 * commits (async_end) or, when synchronous standbys are configured, all
 * WAL up to visible_end and waits for them to confirm it, as long as they
 * are configured: a commit made with synchronous_commit = local (or whose
 * wait was cancelled) is visible before they confirm it, and leaves no
 * trace in the commit log. Returns false, without waiting further, when
 * the worker is asked to stop.
 */
bool
outbox_wait_durable(XLogRecPtr visible_end, XLogRecPtr async_end)
{
	XLogRecPtr	lsn = visible_end;
	bool		reported = false;

	if (!sync_standbys_defined())
	{
		XLogFlush(async_end);
		return true;
	}
	XLogFlush(lsn);
	while (sync_standbys_defined() && sync_standbys_flushed() < lsn)
	{
		CHECK_FOR_INTERRUPTS();
		if (outbox_stop_requested())
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
