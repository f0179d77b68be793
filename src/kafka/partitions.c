/*
 * partitions.c
 *		The one owner of what a producer knows of each partition of a
 *		topic, asked once per event: whether the event is held, opens its
 *		partition, waits for it, or goes now.
 *
 * The warm-up keeps a key's order on a partition a producer has not
 * written to yet. Kafka holds a producer id's state on a partition only
 * once it took a first batch from it there, and until then takes any
 * sequence number: when a new producer's first request to a partition
 * fails (the batch too large, a leader moving) while its next one is in
 * flight, the next one is written first. So until a partition acknowledged
 * an event of this producer, at most one keyed event is in flight to it;
 * keyless events have no order to keep. Once Kafka holds the producer's
 * state there, its sequence checks keep the order.
 *
 * The pacing keeps a keyed event in the worker while its partition can
 * take no new request. librdkafka's idempotent producer sends nothing more
 * to a partition with 5 or more messages in flight (it counts messages
 * against Kafka's limit of 5 requests), and while such a partition has
 * messages queued past their linger.ms, its broker thread polls without
 * waiting until an acknowledgement comes (librdkafka 2.0.2 to 2.14,
 * rd_kafka_toppar_producer_serve): on a cluster that takes tens of
 * milliseconds to acknowledge, most of a core per broker thread. So once a
 * partition has 5 events in flight (produced, not reported: at least
 * librdkafka's count), its next events wait here, in order, and go to
 * librdkafka together once its reports bring it under 5 again: when
 * librdkafka would have sent them, without the polling. (librdkafka may
 * still send the first of them before the rest are handed over, and poll
 * until the next acknowledgement; far less often.) outbox.partition_pacing
 * = off lets what waits here go as its reports come, and nothing more
 * waits. An event that opens its partition is not paced.
 *
 * Both need an event's partition before it is produced: it is the key
 * mapped as librdkafka's murmur2_random partitioner does (the producer's
 * "partitioner", which no setting changes), over the partition count
 * librdkafka last partitioned with, once per event. The partitioner
 * callback records that count, from whichever thread librdkafka calls it
 * on, and touches nothing else. Until the count is known, the topic's first
 * keyed event goes alone.
 */
#include "kafka/partitions.h"

#include "port/atomics.h"
#include "settings.h"
#include "utils/memutils.h"

/* librdkafka's RD_KAFKA_IDEMP_MAX_INFLIGHT */
#define IN_FLIGHT_LIMIT 5

typedef enum WarmState
{
	PARTITION_COLD = 0,			/* nothing of this producer acknowledged there */
	PARTITION_OPENING,			/* one keyed event in flight to open it */
	PARTITION_WARM				/* Kafka acknowledged one of its events there */
} WarmState;

typedef struct Pace
{
	int			outstanding;	/* produced, report not served */
	List	   *waiting;		/* messages held here, oldest first */
} Pace;

struct TopicPartitions
{
	pg_atomic_uint32 partitions;	/* librdkafka's last count, 0: unknown */
	MemoryContext context;
	bool		paced;
	/* the warm-up */
	int			nstates;
	uint8	   *states;			/* WarmState by partition */
	bool		opening_topic;	/* a keyed event in flight, sent before the
								 * count was known */
	int32		warmed_untracked;	/* acknowledged beyond nstates, -1: none */
	int			nwarm;			/* states that are PARTITION_WARM */
	/* the pacing */
	int			npaces;			/* the count the paces were made for */
	Pace	   *paces;
	int			nwaiting;		/* partitions with messages waiting */
};

/* librdkafka's partitioner: records the count, then maps as before. */
static int32_t
partition_and_count(const rd_kafka_topic_t *rkt, const void *key, size_t keylen,
					int32_t partition_cnt, void *rkt_opaque, void *msg_opaque)
{
	TopicPartitions *partitions = (TopicPartitions *) rkt_opaque;

	pg_atomic_write_u32(&partitions->partitions, (uint32) partition_cnt);
	return rd_kafka_msg_partitioner_murmur2_random(rkt, key, keylen, partition_cnt,
												   rkt_opaque, msg_opaque);
}

TopicPartitions *
outbox_partitions_create(MemoryContext context, rd_kafka_t *rk, bool paced,
						 rd_kafka_topic_conf_t **topic_conf)
{
	TopicPartitions *partitions = MemoryContextAllocZero(context, sizeof(TopicPartitions));

	pg_atomic_init_u32(&partitions->partitions, 0);
	partitions->context = context;
	partitions->paced = paced;
	partitions->warmed_untracked = -1;
	*topic_conf = rd_kafka_default_topic_conf_dup(rk);
	rd_kafka_topic_conf_set_partitioner_cb(*topic_conf, partition_and_count);
	rd_kafka_topic_conf_set_opaque(*topic_conf, partitions);
	return partitions;
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

static void
mark_warm(TopicPartitions *partitions, int32 partition)
{
	if (partitions->states[partition] != PARTITION_WARM)
		partitions->nwarm++;
	partitions->states[partition] = PARTITION_WARM;
}

/* Warm-up states for n partitions: a topic's partitions may grow in number. */
static void
track_partitions(TopicPartitions *partitions, int n)
{
	if (n > partitions->nstates)
	{
		if (partitions->states == NULL)
			partitions->states = MemoryContextAllocZero(partitions->context, n);
		else
		{
			partitions->states = repalloc(partitions->states, n);
			memset(partitions->states + partitions->nstates, PARTITION_COLD,
				   n - partitions->nstates);
		}
		partitions->nstates = n;
	}
	if (partitions->warmed_untracked >= 0 && partitions->warmed_untracked < n)
		mark_warm(partitions, partitions->warmed_untracked);
	partitions->warmed_untracked = -1;
}

/*
 * Paces for n partitions: true if n grew while messages wait (a key may
 * now map elsewhere, behind its earlier events: they are released first).
 * Kafka only adds partitions.
 */
static bool
count_changed(TopicPartitions *partitions, int n)
{
	if (n <= partitions->npaces)
		return false;
	if (partitions->paces == NULL)
		partitions->paces = MemoryContextAllocZero(partitions->context, sizeof(Pace) * n);
	else
	{
		partitions->paces = repalloc(partitions->paces, sizeof(Pace) * n);
		memset(partitions->paces + partitions->npaces, 0,
			   sizeof(Pace) * (n - partitions->npaces));
	}
	partitions->npaces = n;
	return partitions->nwaiting > 0;
}

/*
 * The pacing of a keyed event for a warm partition: it waits behind
 * others waiting there (order), or while the partition has the limit in
 * flight (unless outbox.partition_pacing is off).
 */
static Placement
pace_message(TopicPartitions *partitions, int32 partition, void *message,
			 PartitionClaim *claim)
{
	Pace	   *pace = &partitions->paces[partition];

	claim->counted = partition;
	if (pace->waiting != NIL ||
		(outbox_partition_pacing && pace->outstanding >= IN_FLIGHT_LIMIT))
	{
		MemoryContext old = MemoryContextSwitchTo(partitions->context);

		if (pace->waiting == NIL)
			partitions->nwaiting++;
		pace->waiting = lappend(pace->waiting, message);
		MemoryContextSwitchTo(old);
		return PLACE_WAITS;
	}
	pace->outstanding++;
	return PLACED;
}

Placement
outbox_partitions_place(TopicPartitions *partitions, const rd_kafka_topic_t *rkt,
						const OutboxEvent *event, void *message, PartitionClaim *claim)
{
	int			n = (int) pg_atomic_read_u32(&partitions->partitions);
	bool		all_warm = n > 0 && partitions->nwarm == n;
	int32		partition;

	claim->opens = 0;
	claim->counted = -1;
	/* nothing to map (the usual case once started, without pacing) */
	if (event->key_isnull || (all_warm && !partitions->paced))
		return PLACED;
	if (!all_warm)
	{
		/* where the topic's opener went is not known before its report */
		if (partitions->opening_topic)
			return PLACE_HELD;
		if (n <= 0)
		{
			claim->opens = OPENS_TOPIC;
			partitions->opening_topic = true;
			return PLACED;
		}
		track_partitions(partitions, n);
	}
	/* the sender's partition, or where librdkafka puts the key */
	partition = event->partition >= 0 ? (event->partition < n ? event->partition : -1) :
		map_key(rkt, event, n);
	if (partition < 0)
		return PLACED;
	if (!all_warm)
	{
		if (partitions->states[partition] == PARTITION_OPENING)
			return PLACE_HELD;
		if (partitions->states[partition] == PARTITION_COLD)
		{
			claim->opens = partition + 1;
			partitions->states[partition] = PARTITION_OPENING;
			return PLACED;
		}
	}
	if (!partitions->paced)
		return PLACED;
	if (count_changed(partitions, n))
		return PLACE_RELEASE_FIRST;
	return pace_message(partitions, partition, message, claim);
}

void
outbox_partitions_reported(TopicPartitions *partitions, const PartitionClaim *claim,
						   int32 partition, bool delivered)
{
	if (claim->opens == OPENS_TOPIC)
		partitions->opening_topic = false;
	else if (claim->opens > 0 && partitions->states[claim->opens - 1] == PARTITION_OPENING)
		partitions->states[claim->opens - 1] = PARTITION_COLD;
	if (claim->counted >= 0 && claim->counted < partitions->npaces &&
		partitions->paces[claim->counted].outstanding > 0)
		partitions->paces[claim->counted].outstanding--;
	if (!delivered || partition < 0)
		return;
	/* a partition not tracked yet is marked at the next placing */
	if (partition < partitions->nstates)
		mark_warm(partitions, partition);
	else
		partitions->warmed_untracked = partition;
}

int32
outbox_partitions_next(TopicPartitions *partitions, int32 after, bool all)
{
	if (partitions->nwaiting == 0)
		return -1;
	for (int32 p = after + 1; p < partitions->npaces; p++)
	{
		Pace	   *pace = &partitions->paces[p];

		if (pace->waiting != NIL && (all || pace->outstanding < IN_FLIGHT_LIMIT))
			return p;
	}
	return -1;
}

List *
outbox_partitions_take(TopicPartitions *partitions, int32 partition)
{
	Pace	   *pace = &partitions->paces[partition];
	List	   *messages = pace->waiting;

	if (messages != NIL)
		partitions->nwaiting--;
	pace->waiting = NIL;
	pace->outstanding += list_length(messages);
	return messages;
}
