/*
 * solo.c
 *		The events a worker sends alone next time. A broker checks a
 *		topic's max.message.bytes against the whole record batch the
 *		producer built, not against each record, so a refusal for size
 *		says nothing about any one event of the batch: small events
 *		batched with a large one, or many small ones to a topic with a
 *		small limit, would all count attempts and become dead letters.
 *		Such events are retried in a batch of their own (worker.c waits
 *		until nothing else is in flight), where a refusal is their own.
 *
 * Kept in the worker's memory only: after a restart an event goes round
 * once more, in a batch again, and is remembered again. The set is small
 * and bounded; an event it has no room for goes round again too.
 */
#include "worker/solo.h"

#include "utils/memutils.h"

#define SOLO_MAX 1024

static int64 *solo_ids;
static int	solo_count;

static int
solo_index(int64 id)
{
	for (int i = 0; i < solo_count; i++)
		if (solo_ids[i] == id)
			return i;
	return -1;
}

void
outbox_solo_remember(int64 id)
{
	if (solo_ids == NULL)
		solo_ids = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * SOLO_MAX);
	if (solo_index(id) >= 0)
		return;
	if (solo_count < SOLO_MAX)
		solo_ids[solo_count++] = id;
}

/* Whether event id is to be sent alone. */
bool
outbox_solo_wanted(int64 id)
{
	return solo_count > 0 && solo_index(id) >= 0;
}

/* Event id goes alone now: it is forgotten. */
void
outbox_solo_forget(int64 id)
{
	int			i = solo_index(id);

	if (i >= 0)
		solo_ids[i] = solo_ids[--solo_count];
}
