/*
 * lag_alert.c
 *		Tells the server log when a shard falls behind: a WARNING when its
 *		oldest pending event gets older than outbox.lag_warning, a LOG line
 *		when it is back under, never more than one line per shard per
 *		outbox.lag_warning (10 s at least), so that a log-based alert
 *		fires once per incident: whoever alerts on a lag of a minute
 *		wants no more than a line a minute of a shard that hovers there.
 *
 * The worker of the shard looks about once a second, also while delivery
 * is paused or Kafka is unreachable (from its wait for acknowledgements):
 * those are the times lag grows. What was last said, and when, is kept
 * with the shard's statistics, so a restarted worker does not repeat it.
 */
#include "worker/lag_alert.h"
#include "settings.h"
#include "shared/stats.h"
#include "table/queue.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define MIN_LINE_INTERVAL_MS (10 * 1000)

static void
report(const char *who, int shard, int64 from_id, Oid from_extension, bool late, double lag_s)
{
	char		last_error[256];
	int64		pending;
	int64		retries;

	if (!late)
	{
		ereport(LOG,
				(errmsg("%s: caught up: the oldest pending event is %.1f s old, under outbox.lag_warning (%d ms)",
						who, lag_s, outbox_lag_warning_ms)));
		return;
	}
	outbox_stats_last_error(last_error, sizeof(last_error));
	pending = outbox_pending_count(shard, from_id, from_extension, &retries);
	ereport(WARNING,
			(errmsg("%s: the oldest pending event is %.1f s old, over outbox.lag_warning (%d ms)",
					who, lag_s, outbox_lag_warning_ms),
			 errdetail("" INT64_FORMAT " event(s) pending in shard %d; last error: %s",
					   pending + retries, shard, last_error[0] ? last_error : "none")));
}

static void
check(const char *who, int shard, int64 from_id, Oid from_extension, TimestampTz now)
{
	TimestampTz oldest;
	int64		oldest_id;
	TimestampTz last_line;
	double		lag_s = 0;
	bool		late;
	/* in shared memory: a restarted worker does not warn again */
	bool		warned = outbox_stats_lag_warned(&last_line);

	if (outbox_oldest_pending(shard, from_id, from_extension, &oldest, &oldest_id) &&
		oldest < now)
		lag_s = (double) (now - oldest) / USECS_PER_SEC;
	late = lag_s * 1000.0 > outbox_lag_warning_ms;
	if (late == warned)
		return;
	/* a change soon after the last line waits for a later look */
	if (last_line != 0 &&
		!TimestampDifferenceExceeds(last_line, now, Max(outbox_lag_warning_ms, MIN_LINE_INTERVAL_MS)))
		return;
	report(who, shard, from_id, from_extension, late, lag_s);
	outbox_stats_set_lag_warned(late, now);
}

/*
 * Looks at the lag of the shard's events from from_id on (of the extension
 * from_extension; another is looked at from its start) and of those
 * waiting for a retry below it; the worker's look around calls it, at most
 * once a second (its clock is the only one). Runs its own
 * transactions, so it must be called outside one; an error is logged and
 * leaves the worker's state as it was.
 */
void
outbox_check_lag(const char *who, int shard, int64 from_id, Oid from_extension)
{
	MemoryContext context = CurrentMemoryContext;
	uint32		holdoff = InterruptHoldoffCount;
	TimestampTz now = GetCurrentTimestamp();

	if (outbox_lag_warning_ms <= 0 || RecoveryInProgress())
		return;
	PG_TRY();
	{
		check(who, shard, from_id, from_extension, now);
	}
	PG_CATCH();
	{
		InterruptHoldoffCount = holdoff;
		MemoryContextSwitchTo(context);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(context);
}
