/*
 * partition_pacing.h
 *		Keyed events wait in the worker, not in librdkafka, while their
 *		partition can take no new request (partition_pacing.c says why).
 */
#ifndef OUTBOX_PARTITION_PACING_H
#define OUTBOX_PARTITION_PACING_H

#include "postgres.h"

#include "nodes/pg_list.h"

typedef struct PartitionPacing PartitionPacing;

/* One per topic handle, in context (with what waits in it). */
extern PartitionPacing *outbox_pacing_create(MemoryContext context);

/*
 * Takes the topic's count of partitions first: true if it changed while
 * messages wait, which the caller must then all release (below). Then
 * whether a message for the partition must wait (without pace_it, only
 * behind others waiting: order), and makes it wait.
 */
extern bool outbox_pacing_count_changed(PartitionPacing *pacing, int partitions);
extern bool outbox_pacing_must_wait(PartitionPacing *pacing, int32 partition, bool pace_it);
extern void outbox_pacing_wait(PartitionPacing *pacing, int32 partition, void *message);

/* A message handed to librdkafka, and its delivery report served. */
extern void outbox_pacing_sent(PartitionPacing *pacing, int32 partition);
extern void outbox_pacing_reported(PartitionPacing *pacing, int32 partition);

/*
 * The next partition after "after" (-1 to start) whose waiting messages
 * may go now (all: whether or not they may), or -1; then its messages, in
 * the order they came, which leave the pacing.
 */
extern int32 outbox_pacing_next(PartitionPacing *pacing, int32 after, bool all);
extern List *outbox_pacing_take(PartitionPacing *pacing, int32 partition);

#endif							/* OUTBOX_PARTITION_PACING_H */
