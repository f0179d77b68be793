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
extern bool outbox_wait_durable(XLogRecPtr lsn);

#endif							/* OUTBOX_DURABILITY_H */
