/*
 * position_delete.h
 *		Deleting delivered events at the positions the worker read them
 *		at, through the table access method.
 */
#ifndef OUTBOX_POSITION_DELETE_H
#define OUTBOX_POSITION_DELETE_H

#include "postgres.h"

#include "storage/itemptr.h"

/*
 * Deletes the rows of table relid at tids[i] that still hold event ids[i]
 * and sets *deleted to how many it deleted; the others (moved by a table
 * rewrite or an update, deleted by someone else) are left to the caller.
 * Returns false, deleting nothing, if the table has a trigger or rule a
 * DELETE statement would run: the caller's statement must do it.
 */
extern bool outbox_delete_at_positions(Oid relid, const ItemPointerData *tids,
									   const int64 *ids, int n, uint64 *deleted);

#endif							/* OUTBOX_POSITION_DELETE_H */
