/*
 * queue.h
 *		The worker's SQL: find the extension, read the next committed events
 *		of a shard, settle delivered and failed events.
 */
#ifndef OUTBOX_QUEUE_H
#define OUTBOX_QUEUE_H

#include "event.h"

#include "access/xlogdefs.h"

/* One read: events in id order, and what the read saw. */
typedef struct OutboxBatch
{
	int			nevents;
	OutboxEvent *events;
	int64		bytes;			/* of what its events hold (OutboxEvent.size) */
	bool		more;			/* the read stopped at a limit: read again */
	int64		scan_from;		/* the read covered ids from here */
	bool		from_start;		/* ... from 0: a rewind, or another extension */
	int64	   *open_ids;		/* of the transactions open at the read,
								 * ascending (registry.c) */
	int			nopen;
	uint64		rewind_generation;	/* of the registry, when read */
	Oid			extension_oid;	/* the extension the rows were read from */
	const char *instance;		/* its outbox_instance id, read with the rows */
	const char *held_by;		/* a subscription replicating into the outbox:
								 * nothing was read (subscription.c) */
	XLogRecPtr	visible_lsn;	/* every commit the read saw ends before */
	XLogRecPtr	async_commits_lsn;	/* flush to here for asynchronous commits */
	uint64		async_commits_ended;	/* as registry.c counted, at the read */
} OutboxBatch;

/* qsort's and bsearch's order of event ids (int64), ascending. */
extern int	outbox_compare_ids(const void *a, const void *b);

/* -1 while a subscription holds the outbox (nothing was moved) */
extern int	outbox_reshard_orphans(int shard);
extern bool outbox_extension_exists(void);

/*
 * Where a read finds the ids the worker's window holds unsettled, of the
 * cursor's extension, at or above from_id (PG_INT64_MIN: all), palloc'd:
 * the read leaves them out.
 */
typedef struct OutboxWindowIds
{
	int			(*at_or_above) (void *window, int64 from_id, int64 **ids);
	void	   *window;
} OutboxWindowIds;

/*
 * Where the worker's last read left it: the cursor (every id below is read
 * or can't appear but in a transaction of open_ids), the extension it is
 * of, the rewind generation it took in, and the ids (ascending) of the
 * transactions open at that read below the cursor.
 */
typedef struct OutboxReadPosition
{
	int64		cursor;
	Oid			extension;
	uint64		rewind_generation;
	const int64 *open_ids;
	int			nopen;
} OutboxReadPosition;

/*
 * Reads up to limit events (and max_bytes of what they hold, at least one
 * event) into batch, in the current memory context: from the cursor, or
 * from where a transaction of the position's open ids ended since (another
 * extension than the position's is read from its start), leaving out the
 * window's events.
 * While a subscription replicates into the outbox, reads nothing and
 * names it in held_by.
 */
extern bool outbox_read_batch(OutboxBatch *batch, int slot, int shard,
							  const OutboxReadPosition *position,
							  const OutboxWindowIds *window,
							  int limit, int64 max_bytes);

/* What a settle does with the rows of events Kafka did not take. */
typedef enum SettlePolicy
{
	SETTLE_RECORDING_FAILURES,	/* retry times, attempts, dead letters */
	SETTLE_LEAVING_FAILURES		/* untouched: Kafka was unavailable */
} SettlePolicy;

/*
 * Deletes the delivered events of a list and, by policy, records the
 * failed ones, in one transaction; events of another extension than the
 * current one (dropped since) are left alone. Returns false if that
 * extension is gone. who: the worker, for the log.
 */
extern bool outbox_settle_events(const char *who, OutboxEvent **events, int nevents,
								 Oid extension_oid, int shard, SettlePolicy policy);

/*
 * The lag look's lower bound: the lowest id the worker may still have to
 * deliver that is not waiting for a retry (those are looked up through the
 * retry index), of the extension from_extension: another one is looked at
 * from its start.
 */
extern bool outbox_oldest_pending(int shard, int64 from_id, Oid from_extension,
								  TimestampTz *created_at, int64 *id);
extern int64 outbox_pending_count(int shard, int64 from_id, Oid from_extension,
								  int64 *retries);

#endif							/* OUTBOX_QUEUE_H */
