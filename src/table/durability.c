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
 * Without synchronous standbys, only asynchronous commits of events need a
 * flush: a synchronous one flushed its commit before it became visible.
 * The senders say which commits are asynchronous (registry.c). The commit
 * log's record of asynchronous commits cannot: it keeps one position per
 * group of 32 transactions, which the worker's own asynchronous deletes
 * fill, so flushing by it made the worker flush its own deletes, queued on
 * WALWriteLock behind other sessions' commits, under a load of
 * synchronous commits alone.
 */
#include "table/durability.h"
#include "compat.h"
#include "stop.h"

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
 * The count of ended asynchronous commits (registry.c) up to which this
 * worker flushed what its reads needed; unknown at its start.
 */
static uint64 flushed_async_ended = PG_UINT64_MAX;

/*
 * The end of every commit visible to a snapshot taken before this call.
 * The insert position right after a page header is also the end of the
 * previous page, which is where the last record ended. Only right after
 * the header: a record that ran over from the previous page may end a
 * few bytes further (at 32 or 40 on a page with a 24-byte header), and
 * cutting those off left its commit unflushed (t/033's (a'): an event in
 * Kafka whose transaction a crash lost).
 */
XLogRecPtr
outbox_visible_commits_end(void)
{
	XLogRecPtr	lsn = GetXLogInsertRecPtr();
	uint32		header = XLogSegmentOffset(lsn, wal_segment_size) < XLOG_BLCKSZ ?
		SizeOfXLogLongPHD : SizeOfXLogShortPHD;

	if (lsn % XLOG_BLCKSZ == header)
		lsn -= header;
	return lsn;
}

/*
 * Where a read's WAL must be flushed to for its asynchronous commits,
 * InvalidXLogRecPtr if it needs no flush: none was under way when its
 * snapshot was taken, and none ended since this worker's last flush. A
 * count that moved may be of a commit that became visible only after the
 * snapshot (its events are read next time): the end of the WAL, taken
 * now, is past its commit record too. Never the raw insert position: at a
 * page boundary it is past the next page's header, which nothing wrote
 * yet, and a flush to it fails until someone else writes WAL
 * (t/065_wal_page_boundary).
 */
XLogRecPtr
outbox_async_flush_target(const OutboxAsyncCommits *async)
{
	if (!async->under_way && async->ended == flushed_async_ended)
		return InvalidXLogRecPtr;
	return outbox_visible_commits_end();
}

/* A read whose snapshot saw this count of ended commits is durable. */
void
outbox_async_commits_flushed(uint64 ended)
{
	flushed_async_ended = ended;
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
 * commits (async_end) and, when synchronous standbys are configured, all
 * WAL up to visible_end and waits for them to confirm it, as long as they
 * are configured: a commit made with synchronous_commit = local (or whose
 * wait was cancelled) is visible before they confirm it. Returns false,
 * without waiting further, when the worker is asked to stop.
 */
bool
outbox_wait_durable(XLogRecPtr visible_end, XLogRecPtr async_end)
{
	XLogRecPtr	lsn = visible_end;
	bool		reported = false;

	if (!sync_standbys_defined())
	{
		if (!XLogRecPtrIsInvalid(async_end))
			ereport(DEBUG1,
					(errmsg_internal("outbox: flushing the WAL to %X/%X for asynchronous commits",
									 LSN_FORMAT_ARGS(async_end))));
		XLogFlush(async_end);
		return true;
	}
	XLogFlush(Max(lsn, async_end));
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
