/*
 * backoff.c
 *		The retry back-off policy, written once: exponential from
 *		outbox.retry_backoff_min to outbox.retry_backoff_max; and who waits
 *		how long by it, but for the worker's own waits (worker.c back_off).
 */
#include "backoff.h"
#include "settings.h"

int
outbox_backoff_ms(int failures)
{
	int64		max_ms = Max(outbox_retry_backoff_min_ms, outbox_retry_backoff_max_ms);
	int64		wait_ms = outbox_retry_backoff_min_ms;

	/* doubling stops at the cap long before the shift could overflow */
	for (int i = 1; i < failures && wait_ms < max_ms; i++)
		wait_ms *= 2;
	return (int) Min(wait_ms, max_ms);
}

/*
 * The wait before an event's retry, as its outcome's policy says
 * (event.c): one Kafka refused waits longer with each attempt; one Kafka
 * will take later waits the shortest back-off.
 */
int
outbox_backoff_event_ms(const OutboxEvent *event)
{
	if (outbox_outcome_policy(event->outcome)->backoff == BACKOFF_BY_ATTEMPTS)
		return outbox_backoff_ms(event->attempts + 1);
	return outbox_backoff_ms(1);
}

/*
 * A broker that went away is tried again by librdkafka itself, within the
 * same bounds but at most a second apart: a reconnect is cheap, and the
 * worker should see Kafka back within about a second of its return.
 */
int
outbox_reconnect_backoff_min_ms(void)
{
	return Min(outbox_backoff_ms(1), 1000);
}

int
outbox_reconnect_backoff_max_ms(void)
{
	return Max(outbox_reconnect_backoff_min_ms(),
			   Min(Max(outbox_retry_backoff_min_ms, outbox_retry_backoff_max_ms), 1000));
}
