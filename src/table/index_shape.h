/*
 * index_shape.h
 *		Whether an index of the outbox is of the shape the install script
 *		gave it.
 */
#ifndef OUTBOX_INDEX_SHAPE_H
#define OUTBOX_INDEX_SHAPE_H

#include "postgres.h"

#include "utils/relcache.h"

/* A btree, unique, on (shard, id) and nothing else. */
extern bool outbox_index_is_primary_key(Relation index);

/*
 * Partial on "next_attempt_at IS NOT NULL" alone: a new row (no retry
 * time) takes no entry in it.
 */
extern bool outbox_index_only_for_retries(Relation index);

/* A btree leading with shard, partial on a retry time alone. */
extern bool outbox_index_is_retry_index(Relation index);

#endif							/* OUTBOX_INDEX_SHAPE_H */
