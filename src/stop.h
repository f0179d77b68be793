/*
 * stop.h
 *		Whether this process was asked to stop (SIGTERM, through PostgreSQL's
 *		SignalHandlerForShutdownRequest): the one reader of PostgreSQL's
 *		flag, for the worker's modes and for the waits that must end early.
 */
#ifndef OUTBOX_STOP_H
#define OUTBOX_STOP_H

#include "postgres.h"

#include "postmaster/interrupt.h"

static inline bool
outbox_stop_requested(void)
{
	return ShutdownRequestPending;
}

#endif							/* OUTBOX_STOP_H */
