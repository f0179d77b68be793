/*
 * durability.h
 *		When an event may be produced: once its commit can no longer be
 *		lost.
 */
#ifndef OUTBOX_DURABILITY_H
#define OUTBOX_DURABILITY_H

#include "postgres.h"

#include "shared/registry.h"

#include "access/xlogdefs.h"

extern XLogRecPtr outbox_visible_commits_end(void);
extern XLogRecPtr outbox_async_flush_target(const OutboxAsyncCommits *async);
extern bool outbox_wait_durable(XLogRecPtr visible_end, XLogRecPtr async_end);
extern void outbox_async_commits_flushed(uint64 ended);

#endif							/* OUTBOX_DURABILITY_H */
