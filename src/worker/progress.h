/*
 * progress.h
 *		Exactly-once delivery's progress records: their encoding, and the
 *		recovery that reads a shard's last committed one back and settles
 *		its events (progress.c says which records count).
 */
#ifndef OUTBOX_PROGRESS_H
#define OUTBOX_PROGRESS_H

#include "postgres.h"

typedef enum ProgressRecovery
{
	PROGRESS_NONE,				/* no record of ours: nothing to settle */
	PROGRESS_SETTLED,			/* the last record's events are settled */
	PROGRESS_SUPERSEDED,		/* a later timeline wrote it: deliver nothing */
	PROGRESS_STOPPED			/* a stop request ended the read */
} ProgressRecovery;

/* Where key's records go in a topic of that many partitions (murmur2). */
extern int32 outbox_progress_partition(const char *key, int partitions);

/* The record of a transaction carrying ids (ascending), palloc'd text. */
extern char *outbox_progress_encode(const char *instance, Oid extension,
									const int64 *ids, int n);

/*
 * Reads key's last committed record (from *known_offset if >= 0) and
 * settles shard's events it names; sets *partition (where the records of
 * key go), *known_offset (the record's offset) and *settled (rows deleted).
 * Bounded in time; an error (ereport) when it cannot finish.
 */
extern ProgressRecovery outbox_progress_recover(const char *who, const char *key, int shard,
												int32 *partition, int64 *known_offset,
												int *settled);

#endif							/* OUTBOX_PROGRESS_H */
