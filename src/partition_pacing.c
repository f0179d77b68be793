/*
 * partition_pacing.c
 *		Keeps a keyed event in the worker while its partition can take no
 *		new request. librdkafka's idempotent producer sends nothing more to
 *		a partition with 5 or more messages in flight (it counts messages
 *		against Kafka's limit of 5 requests), and while such a partition
 *		has messages queued past their linger.ms, its broker thread polls
 *		without waiting until an acknowledgement comes (librdkafka 2.0.2 to
 *		2.14, rd_kafka_toppar_producer_serve): on a cluster that takes tens
 *		of milliseconds to acknowledge, most of a core per broker thread.
 *
 * The worker knows a keyed event's partition before producing it
 * (partition_warmup.c), and the delivery reports tell it when the
 * partition's messages came back. So once a partition has 5 events in
 * flight (produced, not reported: at least librdkafka's count), its next
 * events wait here, in order, and go to librdkafka together once its
 * reports bring it under 5 again: when librdkafka would have sent them,
 * without the polling. (librdkafka may still send the first of them
 * before the rest are handed over, and poll until the next
 * acknowledgement; far less often.) outbox.partition_pacing = off lets
 * what waits here go as its reports come, and nothing more waits.
 *
 * Keyless events go where librdkafka's sticky partitioner puts them (a
 * partition for a few milliseconds, then another): the worker does not
 * know which, so a topic's keyless events are paced together, as one
 * partition. Once 5 are in flight the next ones wait, and go together
 * once the reports bring them under 5: one request, on the partition the
 * partitioner picks then.
 */
#include "partition_pacing.h"

#include "utils/memutils.h"

/* librdkafka's RD_KAFKA_IDEMP_MAX_INFLIGHT */
#define IN_FLIGHT_LIMIT 5

typedef struct Pace
{
	int			outstanding;	/* produced, report not served */
	List	   *waiting;		/* messages held here, oldest first */
} Pace;

struct PartitionPacing
{
	MemoryContext context;
	int			npaces;			/* the topic's count of partitions */
	Pace	   *paces;
	Pace		keyless;		/* the topic's keyless events, wherever
								 * librdkafka puts them */
	int			nwaiting;		/* paces with messages waiting */
};

static Pace *
pace_of(PartitionPacing *pacing, int32 partition)
{
	if (partition == OUTBOX_PACING_KEYLESS)
		return &pacing->keyless;
	Assert(partition >= 0 && partition < pacing->npaces);
	return &pacing->paces[partition];
}

static bool
may_go(const Pace *pace, bool all)
{
	return pace->waiting != NIL && (all || pace->outstanding < IN_FLIGHT_LIMIT);
}

PartitionPacing *
outbox_pacing_create(MemoryContext context)
{
	PartitionPacing *pacing = MemoryContextAllocZero(context, sizeof(PartitionPacing));

	pacing->context = context;
	return pacing;
}

/*
 * Takes the topic's count of partitions: true if it changed while
 * messages wait (a key may now map elsewhere, behind its earlier events:
 * the caller releases all first). Kafka only adds partitions.
 */
bool
outbox_pacing_count_changed(PartitionPacing *pacing, int partitions)
{
	if (partitions <= pacing->npaces)
		return false;
	if (pacing->paces == NULL)
		pacing->paces = MemoryContextAllocZero(pacing->context, sizeof(Pace) * partitions);
	else
	{
		pacing->paces = repalloc(pacing->paces, sizeof(Pace) * partitions);
		memset(pacing->paces + pacing->npaces, 0, sizeof(Pace) * (partitions - pacing->npaces));
	}
	pacing->npaces = partitions;
	return pacing->nwaiting > 0;
}

bool
outbox_pacing_must_wait(PartitionPacing *pacing, int32 partition, bool pace_it)
{
	Pace	   *pace = pace_of(pacing, partition);

	return pace->waiting != NIL || (pace_it && pace->outstanding >= IN_FLIGHT_LIMIT);
}

void
outbox_pacing_wait(PartitionPacing *pacing, int32 partition, void *message)
{
	Pace	   *pace = pace_of(pacing, partition);
	MemoryContext old = MemoryContextSwitchTo(pacing->context);

	if (pace->waiting == NIL)
		pacing->nwaiting++;
	pace->waiting = lappend(pace->waiting, message);
	MemoryContextSwitchTo(old);
}

void
outbox_pacing_sent(PartitionPacing *pacing, int32 partition)
{
	pace_of(pacing, partition)->outstanding++;
}

/* Served from librdkafka's poll on the worker's thread: allocates nothing. */
void
outbox_pacing_reported(PartitionPacing *pacing, int32 partition)
{
	Pace	   *pace;

	if (partition != OUTBOX_PACING_KEYLESS && (partition < 0 || partition >= pacing->npaces))
		return;
	pace = pace_of(pacing, partition);
	if (pace->outstanding > 0)
		pace->outstanding--;
}

int32
outbox_pacing_next(PartitionPacing *pacing, int32 after, bool all)
{
	if (pacing->nwaiting == 0 || after == OUTBOX_PACING_KEYLESS)
		return OUTBOX_PACING_NONE;
	for (int32 p = after + 1; p < pacing->npaces; p++)
		if (may_go(&pacing->paces[p], all))
			return p;
	return may_go(&pacing->keyless, all) ? OUTBOX_PACING_KEYLESS : OUTBOX_PACING_NONE;
}

List *
outbox_pacing_take(PartitionPacing *pacing, int32 partition)
{
	Pace	   *pace = pace_of(pacing, partition);
	List	   *messages = pace->waiting;

	if (messages != NIL)
		pacing->nwaiting--;
	pace->waiting = NIL;
	return messages;
}
