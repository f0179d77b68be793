/*
 * heap.c
 *		A worker's resident memory follows what it holds, not what it once
 *		held.
 *
 * glibc's malloc raises its mmap threshold each time a large block is
 * freed, up to 32 MB: after the first large events, their copies (and
 * librdkafka's, in its threads' arenas) come from arenas that keep what
 * was freed, and the worker's resident memory grows past what it holds.
 * A fixed threshold maps every block of 128 kB or more on its own and
 * gives it back when freed, so memory follows outbox.window_bytes.
 *
 * Smaller blocks stay in the arenas: a backlog (an outage's, on real
 * Kafka) leaves the freed messages of librdkafka's queue there, 110 MB of
 * them after a 60-s outage at 1000/s, only the top of each arena being
 * given back. Once the shard has been idle for a second, the worker hands
 * the free pages inside them back too (malloc_trim), once per idle spell:
 * a busy worker, or one between two events at a low rate, pays nothing.
 */
#include "worker/heap.h"

#include "utils/timestamp.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#define RELEASE_AFTER_IDLE_MS 1000

/* the idle spell whose freed memory went back already */
static TimestampTz released_for_idle_since = 0;

void
outbox_heap_bound_retention(void)
{
#ifdef M_MMAP_THRESHOLD
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	mallopt(M_TRIM_THRESHOLD, 4 * 1024 * 1024);
#endif
}

TimestampTz
outbox_heap_release_due(TimestampTz idle_since)
{
#ifdef __GLIBC__
	if (idle_since == 0 || idle_since == released_for_idle_since)
		return 0;
	return TimestampTzPlusMilliseconds(idle_since, RELEASE_AFTER_IDLE_MS);
#else
	return 0;
#endif
}

void
outbox_heap_release(TimestampTz idle_since)
{
#ifdef __GLIBC__
	malloc_trim(0);
#endif
	released_for_idle_since = idle_since;
}
