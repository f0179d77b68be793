/*
 * retry_probe.h
 *		Whether a shard has events with a retry time, asked of the
 *		partial retry index directly.
 */
#ifndef OUTBOX_RETRY_PROBE_H
#define OUTBOX_RETRY_PROBE_H

#include "postgres.h"

/*
 * Sets *any to whether a row of the shard, as the active snapshot sees it,
 * has a retry time (next_attempt_at), through index "outbox_retry_idx" of
 * table relid. Returns false, setting nothing, when that index is not the
 * extension's as it was created (dropped, invalid, or of another shape):
 * the caller then asks with a statement.
 */
extern bool outbox_probe_retry(Oid relid, int32 shard, bool *any);

#endif							/* OUTBOX_RETRY_PROBE_H */
