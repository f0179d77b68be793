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
 */
#include "kafka/partition_pacing.h"

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
	int			nwaiting;		/* partitions with messages waiting */
};

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
	Pace	   *pace = &pacing->paces[partition];

	Assert(partition >= 0 && partition < pacing->npaces);
	return pace->waiting != NIL || (pace_it && pace->outstanding >= IN_FLIGHT_LIMIT);
}

void
outbox_pacing_wait(PartitionPacing *pacing, int32 partition, void *message)
{
	Pace	   *pace = &pacing->paces[partition];
	MemoryContext old = MemoryContextSwitchTo(pacing->context);

	if (pace->waiting == NIL)
		pacing->nwaiting++;
	pace->waiting = lappend(pace->waiting, message);
	MemoryContextSwitchTo(old);
}

void
outbox_pacing_sent(PartitionPacing *pacing, int32 partition)
{
	pacing->paces[partition].outstanding++;
}

/* Served from librdkafka's poll on the worker's thread: allocates nothing. */
void
outbox_pacing_reported(PartitionPacing *pacing, int32 partition)
{
	if (partition >= 0 && partition < pacing->npaces && pacing->paces[partition].outstanding > 0)
		pacing->paces[partition].outstanding--;
}

int32
outbox_pacing_next(PartitionPacing *pacing, int32 after, bool all)
{
	if (pacing->nwaiting == 0)
		return -1;
	for (int32 p = after + 1; p < pacing->npaces; p++)
	{
		Pace	   *pace = &pacing->paces[p];

		if (pace->waiting != NIL && (all || pace->outstanding < IN_FLIGHT_LIMIT))
			return p;
	}
	return -1;
}

List *
outbox_pacing_take(PartitionPacing *pacing, int32 partition)
{
	List	   *messages = pacing->paces[partition].waiting;

	if (messages != NIL)
		pacing->nwaiting--;
	pacing->paces[partition].waiting = NIL;
	return messages;
}
