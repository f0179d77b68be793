/*
 * partitions.h
 *		What a producer's topic holds of each of its partitions: the
 *		warm-up (a new producer's first keyed event to a partition goes
 *		alone) and the pacing (a keyed event waits in the worker while its
 *		partition has 5 in flight). partitions.c says why. The producer asks
 *		once per event and tells once per delivery report.
 */
#ifndef OUTBOX_PARTITIONS_H
#define OUTBOX_PARTITIONS_H

#include "postgres.h"

#include "event.h"
#include "nodes/pg_list.h"

#include <librdkafka/rdkafka.h>

typedef struct TopicPartitions TopicPartitions;

/* What one message holds of its topic's partitions until its report. */
typedef struct PartitionClaim
{
	int32		opens;			/* the partition it opens for this producer,
								 * plus one; OPENS_TOPIC: its topic's count of
								 * partitions was unknown; 0: none */
	int32		counted;		/* counted in flight there; -1: nowhere */
} PartitionClaim;

#define OPENS_TOPIC (-1)

typedef enum Placement
{
	PLACED,						/* to produce now, as claimed */
	PLACE_HELD,					/* its partition waits for this producer's
								 * first acknowledgement: not produced */
	PLACE_WAITS,				/* its message waits here for its partition */
	PLACE_RELEASE_FIRST			/* the topic gained partitions while messages
								 * wait: release them all, then place again */
} Placement;

/*
 * One per topic handle, in context (which must outlive the librdkafka
 * handle: its threads may still partition a message); the returned topic
 * configuration carries it to librdkafka. Without paced (exactly-once: a
 * transaction's commit must find all its events in librdkafka) only the
 * warm-up applies.
 */
extern TopicPartitions *outbox_partitions_create(MemoryContext context, rd_kafka_t *rk,
												 bool paced,
												 rd_kafka_topic_conf_t **topic_conf);

/*
 * Where an event goes. PLACED and PLACE_WAITS fill the claim, which is
 * given back with the message's report (a message librdkafka refused is
 * reported too, not delivered); PLACE_WAITS keeps message.
 */
extern Placement outbox_partitions_place(TopicPartitions *partitions, const rd_kafka_topic_t *rkt,
										 const OutboxEvent *event, void *message,
										 PartitionClaim *claim);

/* Served from librdkafka's poll on the worker's thread: allocates nothing. */
extern void outbox_partitions_reported(TopicPartitions *partitions, const PartitionClaim *claim,
									   int32 partition, bool delivered);

/*
 * The next partition after "after" (-1 to start) whose waiting messages
 * may go now (all: whether or not they may), or -1; then its messages, in
 * the order they came, counted in flight there from now on.
 */
extern int32 outbox_partitions_next(TopicPartitions *partitions, int32 after, bool all);
extern List *outbox_partitions_take(TopicPartitions *partitions, int32 partition);

#endif							/* OUTBOX_PARTITIONS_H */
