/*
 * durability.h
 *		When an event may be produced: once its commit can no longer be
 *		lost.
 */
#ifndef OUTBOX_DURABILITY_H
#define OUTBOX_DURABILITY_H

#include "postgres.h"

#include "access/xlogdefs.h"

extern XLogRecPtr outbox_visible_commits_end(void);
extern XLogRecPtr outbox_async_commits_end(const TransactionId *xids, int n);
extern bool outbox_wait_durable(XLogRecPtr visible_end, XLogRecPtr async_end);

#endif							/* OUTBOX_DURABILITY_H */
