/*
 * prepared.h
 *		The read floor of transactions a restart left prepared: their
 *		lowest outbox ids, found in the outbox (prepared.c).
 */
#ifndef OUTBOX_PREPARED_H
#define OUTBOX_PREPARED_H

#include "postgres.h"

/* the worker's read, before its floor (queue.c) */
extern void outbox_register_restarted_prepared(Oid table);

#endif							/* OUTBOX_PREPARED_H */
