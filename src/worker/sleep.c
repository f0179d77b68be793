/*
 * sleep.c
 *		A worker whose shard had nothing to deliver for
 *		outbox.worker_idle_timeout exits, so that a server with many quiet
 *		databases keeps no process, producer, librdkafka thread or broker
 *		connection for them; the next commit of its shard has the launcher
 *		start it again (slots.c, launcher.c).
 *
 * Leaving is a handshake with the committing backends, so that no commit
 * is left without a worker: the worker first marks its slot asleep, then
 * looks at its shard of the outbox once more, in a snapshot taken after
 * the mark. A commit that look did not see became visible after it, and
 * its wake-up (outbox_wake_shards) finds the slot asleep and asks the
 * launcher for a worker. A look that finds any row (a commit since, an
 * event waiting for its retry) keeps the worker awake.
 */
#include "worker/sleep.h"
#include "settings.h"
#include "shared/slots.h"
#include "table/queue.h"

#include "utils/timestamp.h"

/* When a worker idle since then may leave; 0: never (setting 0, or busy). */
TimestampTz
outbox_sleep_due(TimestampTz idle_since)
{
	if (idle_since == 0 || outbox_worker_idle_timeout_ms == 0)
		return 0;
	return TimestampTzPlusMilliseconds(idle_since, outbox_worker_idle_timeout_ms);
}

/* Whether the worker may exit now: its shard's outbox is empty. */
bool
outbox_fall_asleep(int shard)
{
	TimestampTz created_at;
	int64		id;

	outbox_worker_fall_asleep();
	/* from id 0: every row of the shard, those waiting for a retry too */
	if (!outbox_oldest_pending(shard, 0, InvalidOid, &created_at, &id))
		return true;
	outbox_worker_stay_awake();
	return false;
}
