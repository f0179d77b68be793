/*
 * partition_warmup.h
 *		A new producer's first keyed event to each partition goes alone
 *		(partition_warmup.c says why).
 */
#ifndef OUTBOX_PARTITION_WARMUP_H
#define OUTBOX_PARTITION_WARMUP_H

#include "postgres.h"

#include "event.h"

#include <librdkafka/rdkafka.h>

typedef struct PartitionWarmup PartitionWarmup;

/*
 * One per topic handle, in context (which must outlive the librdkafka
 * handle: its threads may still partition a message); the returned topic
 * configuration carries it to librdkafka.
 */
extern PartitionWarmup *outbox_warmup_create(MemoryContext context, rd_kafka_t *rk,
											 rd_kafka_topic_conf_t **topic_conf);

/*
 * Whether the event may be produced now; if it opens a partition, the
 * event says which (outbox_warmup_produced marks it open once produced).
 * The caller sets event->opens to 0 first.
 */
extern bool outbox_warmup_admits(PartitionWarmup *warmup, const rd_kafka_topic_t *rkt,
								 OutboxEvent *event);
extern int32 outbox_warmup_partition_of(PartitionWarmup *warmup, const rd_kafka_topic_t *rkt,
										const OutboxEvent *event, int *partitions);
extern void outbox_warmup_produced(PartitionWarmup *warmup, const OutboxEvent *event);

/* A delivery report of an event produced through warmup's topic handle. */
extern void outbox_warmup_reported(PartitionWarmup *warmup, const OutboxEvent *event,
								   int32 partition, bool delivered);

#endif							/* OUTBOX_PARTITION_WARMUP_H */
