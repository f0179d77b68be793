/*
 * partition_warmup.c
 *		Keeps a key's order on a partition a producer has not written to
 *		yet. Kafka holds a producer id's state on a partition only once it
 *		took a first batch from it there, and until then takes any sequence
 *		number: when a new producer's first request to a partition fails
 *		(the batch too large, a leader moving) while its next one is in
 *		flight, the next one is written first. So until a partition
 *		acknowledged an event of this producer, at most one keyed event is
 *		in flight to it; keyless events have no order to keep. Once Kafka
 *		holds the producer's state there, its sequence checks keep the order.
 *
 * The worker knows an event's partition before producing it: it maps the
 * key as librdkafka's murmur2_random partitioner does (the producer's
 * "partitioner", which no setting changes), over the partition count
 * librdkafka last partitioned with. The partitioner callback records that
 * count, from whichever thread librdkafka calls it on, and touches nothing
 * else. Until the count is known, the topic's first keyed event goes alone.
 */
#include "kafka/partition_warmup.h"

#include "port/atomics.h"
#include "utils/memutils.h"

typedef enum PartitionState
{
	PARTITION_COLD = 0,			/* nothing of this producer acknowledged there */
	PARTITION_OPENING,			/* one keyed event in flight to open it */
	PARTITION_WARM				/* Kafka acknowledged one of its events there */
} PartitionState;

struct PartitionWarmup
{
	pg_atomic_uint32 partitions;	/* librdkafka's last count, 0: unknown */
	MemoryContext context;
	int			nstates;
	uint8	   *states;			/* PartitionState by partition */
	bool		opening_topic;	/* a keyed event in flight, sent before the
								 * count was known */
	int32		warmed_untracked;	/* acknowledged beyond nstates, -1: none */
	int			nwarm;			/* states that are PARTITION_WARM */
};

/* librdkafka's partitioner: records the count, then maps as before. */
static int32_t
partition_and_count(const rd_kafka_topic_t *rkt, const void *key, size_t keylen,
					int32_t partition_cnt, void *rkt_opaque, void *msg_opaque)
{
	PartitionWarmup *warmup = (PartitionWarmup *) rkt_opaque;

	pg_atomic_write_u32(&warmup->partitions, (uint32) partition_cnt);
	return rd_kafka_msg_partitioner_murmur2_random(rkt, key, keylen, partition_cnt,
												   rkt_opaque, msg_opaque);
}

PartitionWarmup *
outbox_warmup_create(MemoryContext context, rd_kafka_t *rk, rd_kafka_topic_conf_t **topic_conf)
{
	PartitionWarmup *warmup = MemoryContextAllocZero(context, sizeof(PartitionWarmup));

	pg_atomic_init_u32(&warmup->partitions, 0);
	warmup->context = context;
	warmup->warmed_untracked = -1;
	*topic_conf = rd_kafka_default_topic_conf_dup(rk);
	rd_kafka_topic_conf_set_partitioner_cb(*topic_conf, partition_and_count);
	rd_kafka_topic_conf_set_opaque(*topic_conf, warmup);
	return warmup;
}

static void
mark_warm(PartitionWarmup *warmup, int32 partition)
{
	if (warmup->states[partition] != PARTITION_WARM)
		warmup->nwarm++;
	warmup->states[partition] = PARTITION_WARM;
}

/* States for n partitions: a topic's partitions may grow in number. */
static void
track_partitions(PartitionWarmup *warmup, int n)
{
	if (n <= warmup->nstates)
		return;
	if (warmup->states == NULL)
		warmup->states = MemoryContextAllocZero(warmup->context, n);
	else
	{
		warmup->states = repalloc(warmup->states, n);
		memset(warmup->states + warmup->nstates, PARTITION_COLD, n - warmup->nstates);
	}
	warmup->nstates = n;
}

/* A keyed event's partition among n, as librdkafka maps it; -1: none. */
static int32
map_key(const rd_kafka_topic_t *rkt, const OutboxEvent *event, int n)
{
	int32		partition;

	if (event->key_isnull || n <= 0)
		return -1;
	partition = rd_kafka_msg_partitioner_murmur2_random(rkt, event->key, event->keylen, n,
														NULL, NULL);
	return partition >= 0 && partition < n ? partition : -1;
}

/*
 * The partition librdkafka will put a keyed event on, and in *partitions
 * the count it maps over; -1 without a key or before the count is known.
 */
int32
outbox_warmup_partition_of(PartitionWarmup *warmup, const rd_kafka_topic_t *rkt,
						   const OutboxEvent *event, int *partitions)
{
	*partitions = (int) pg_atomic_read_u32(&warmup->partitions);
	return map_key(rkt, event, *partitions);
}

bool
outbox_warmup_admits(PartitionWarmup *warmup, const rd_kafka_topic_t *rkt, OutboxEvent *event)
{
	int			n = (int) pg_atomic_read_u32(&warmup->partitions);
	int32		partition;

	/* every partition warm: nothing to map (the usual case, once started) */
	if (event->key_isnull || (n > 0 && warmup->nwarm == n))
		return true;
	/* where the topic's opener went is not known before its report */
	if (warmup->opening_topic)
		return false;
	if (n <= 0)
	{
		event->opens = OPENS_TOPIC;
		return true;
	}
	track_partitions(warmup, n);
	if (warmup->warmed_untracked >= 0 && warmup->warmed_untracked < n)
		mark_warm(warmup, warmup->warmed_untracked);
	warmup->warmed_untracked = -1;
	partition = map_key(rkt, event, n);
	if (partition < 0)
		return true;
	switch ((PartitionState) warmup->states[partition])
	{
		case PARTITION_WARM:
			return true;
		case PARTITION_OPENING:
			return false;
		case PARTITION_COLD:
			event->opens = partition + 1;
			return true;
	}
	return true;
}

void
outbox_warmup_produced(PartitionWarmup *warmup, const OutboxEvent *event)
{
	if (event->opens == OPENS_TOPIC)
		warmup->opening_topic = true;
	else if (event->opens > 0)
		warmup->states[event->opens - 1] = PARTITION_OPENING;
}

/*
 * Served from librdkafka's poll on the worker's thread: allocates nothing
 * (a partition not tracked yet is marked at the next admission).
 */
void
outbox_warmup_reported(PartitionWarmup *warmup, const OutboxEvent *event,
					   int32 partition, bool delivered)
{
	if (event->opens == OPENS_TOPIC)
		warmup->opening_topic = false;
	else if (event->opens > 0 && warmup->states[event->opens - 1] == PARTITION_OPENING)
		warmup->states[event->opens - 1] = PARTITION_COLD;
	if (!delivered || partition < 0)
		return;
	if (partition < warmup->nstates)
		mark_warm(warmup, partition);
	else
		warmup->warmed_untracked = partition;
}
