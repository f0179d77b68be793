/*
 * position_delete.c
 *		The settle's delete, by position. The worker knows where each
 *		event it read lies; a DELETE statement that joined those positions
 *		with the ids cost the worker nearly a quarter of its instructions per
 *		delivered event (a function scan, a hash build, a TID scan and the
 *		executor's per-row work around the same fetch and delete this
 *		module does directly).
 *
 * Only for a table without triggers or rules: an audit trigger, a foreign
 * key pointing at the outbox or pg_repack's log trigger runs only through
 * the caller's DELETE statement, so that statement stays the way for them.
 */
#include "table/position_delete.h"
#include "compat.h"
#include "table/outbox_table.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "executor/tuptable.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

static bool
deletable_directly(Relation rel)
{
	return rel->rd_rel->relkind == RELKIND_RELATION &&
		rel->trigdesc == NULL && rel->rd_rules == NULL;
}

/*
 * Whether the row at *tid, as the snapshot sees it, is event id. A rewrite
 * (VACUUM FULL, CLUSTER, pg_repack) may have put another event there, or
 * shortened the table below it; vacuum may have reused the position.
 */
static bool
holds_event(Relation rel, ItemPointer tid, int64 id, BlockNumber nblocks,
			Snapshot snapshot, TupleTableSlot *slot)
{
	bool		isnull;
	Datum		value;

	if (!ItemPointerIsValid(tid) || ItemPointerGetBlockNumber(tid) >= nblocks)
		return false;
	if (!table_tuple_fetch_row_version(rel, tid, snapshot, slot))
		return false;
	value = slot_getattr(slot, OUTBOX_COL_ID + 1, &isnull);
	return !isnull && DatumGetInt64(value) == id;
}

/*
 * Deletes the row a fetch found. Updated or deleted since the snapshot
 * (waited for, as a DELETE statement would): not deleted here.
 */
static bool
delete_row(Relation rel, ItemPointer tid, CommandId cid, Snapshot snapshot)
{
	TM_FailureData failure;
	TM_Result	result;

	result = compat_table_tuple_delete(rel, tid, cid, snapshot, &failure);
	switch (result)
	{
		case TM_Ok:
			return true;
		case TM_SelfModified:
		case TM_Updated:
		case TM_Deleted:
			return false;
		default:
			elog(ERROR, "outbox: unexpected result %d deleting a delivered event", (int) result);
	}
	return false;
}

bool
outbox_delete_at_positions(Oid relid, const ItemPointerData *tids,
						   const int64 *ids, int n, uint64 *deleted)
{
	Relation	rel = table_open(relid, RowExclusiveLock);
	Snapshot	snapshot = GetActiveSnapshot();
	CommandId	cid = GetCurrentCommandId(true);
	TupleTableSlot *slot;
	BlockNumber nblocks;

	*deleted = 0;
	if (!deletable_directly(rel))
	{
		table_close(rel, NoLock);
		return false;
	}
	/* no truncation while the lock is held: vacuum needs a stronger one */
	nblocks = RelationGetNumberOfBlocks(rel);
	slot = table_slot_create(rel, NULL);
	for (int i = 0; i < n; i++)
	{
		ItemPointerData tid = tids[i];

		if (holds_event(rel, &tid, ids[i], nblocks, snapshot, slot) &&
			delete_row(rel, &tid, cid, snapshot))
			(*deleted)++;
	}
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, NoLock);
	return true;
}
