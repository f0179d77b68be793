/*
 * partition_pacing.h
 *		Events wait in the worker, not in librdkafka, while their partition
 *		can take no new request (partition_pacing.c says why).
 */
#ifndef OUTBOX_PARTITION_PACING_H
#define OUTBOX_PARTITION_PACING_H

#include "postgres.h"

#include "nodes/pg_list.h"

typedef struct PartitionPacing PartitionPacing;

/* Not paced; and where a topic's keyless events are, in place of a partition. */
#define OUTBOX_PACING_NONE (-1)
#define OUTBOX_PACING_KEYLESS (-2)

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
 * The next partition after "after" (OUTBOX_PACING_NONE to start; the
 * keyless ones come last) whose waiting messages may go now (all: whether
 * or not they may), or OUTBOX_PACING_NONE; then its messages, in the
 * order they came, which leave the pacing.
 */
extern int32 outbox_pacing_next(PartitionPacing *pacing, int32 after, bool all);
extern List *outbox_pacing_take(PartitionPacing *pacing, int32 partition);

#endif							/* OUTBOX_PARTITION_PACING_H */
