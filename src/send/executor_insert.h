/*
 * executor_insert.h
 *		outbox_send()'s insert of a row through the executor, for a table
 *		that is not as the extension made it.
 */
#ifndef OUTBOX_EXECUTOR_INSERT_H
#define OUTBOX_EXECUTOR_INSERT_H

#include "postgres.h"

#include "utils/relcache.h"

extern void outbox_insert_through_executor(Relation rel, Datum *values, bool *nulls);

#endif							/* OUTBOX_EXECUTOR_INSERT_H */
