/*
 * heap.h
 *		How much freed memory a worker's process keeps: malloc's thresholds,
 *		and what it gives back once its shard is idle.
 */
#ifndef OUTBOX_HEAP_H
#define OUTBOX_HEAP_H

#include "postgres.h"

#include "datatype/timestamp.h"

extern void outbox_heap_bound_retention(void);

/* When a worker idle since then gives freed memory back; 0: not (again). */
extern TimestampTz outbox_heap_release_due(TimestampTz idle_since);
extern void outbox_heap_release(TimestampTz idle_since);

#endif							/* OUTBOX_HEAP_H */
