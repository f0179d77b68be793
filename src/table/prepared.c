/*
 * prepared.c
 *		Finds the lowest outbox id of each transaction a restart left
 *		prepared, so that the read floor covers it again.
 *
 * A prepared transaction keeps its rows, invisible, until COMMIT PREPARED
 * or ROLLBACK PREPARED, which any session may run, also after a restart.
 * The registry (registry.c, "prepared transactions") holds its lowest id
 * while the server runs, but lives in shared memory: a restart, a crash's
 * reinitialization or a promotion empties it and brings the transaction
 * back prepared. Its rows would then fall below the worker's cursor once
 * later events are read, and stay there after it commits. So before each
 * read's floor the worker asks the registry for prepared transactions of
 * its database it has no entry for; there are none but after a restart
 * (every PREPARE registers its transaction, events or not), and then the
 * worker scans the outbox once, every row version (SnapshotAny: their rows
 * are not visible), for the rows they or their subtransactions inserted,
 * and registers the lowest id of each, or that it has none. A prepared
 * transaction inserts nothing more, so that is the lowest id it can
 * commit. With max_prepared_transactions = 0 nothing of this runs.
 */
#include "table/prepared.h"
#include "compat.h"
#include "shared/registry.h"
#include "table/outbox_table.h"

#include "access/subtrans.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/twophase.h"
#include "executor/tuptable.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/*
 * Which of xids (oldest the oldest) inserted a row with this xmin, itself
 * or through a subtransaction; -1 if none. A subtransaction's xid follows
 * its parent's, and every xid from the oldest on is at or after this
 * transaction's xmin (the prepared ones were in progress when it began or
 * began later), so pg_subtrans still knows it.
 */
static int
inserted_by(TransactionId xmin, const TransactionId *xids, int n, TransactionId oldest)
{
	if (!TransactionIdIsNormal(xmin) || TransactionIdPrecedes(xmin, oldest) ||
		TransactionIdPrecedes(xmin, TransactionXmin))
		return -1;
	xmin = SubTransGetTopmostTransaction(xmin);
	for (int k = 0; k < n; k++)
		if (xids[k] == xmin)
			return k;
	return -1;
}

static const char *const column_names[] = {OUTBOX_TABLE_COLUMNS(OUTBOX_COLUMN_NAME)};

/* lowest[k]: the lowest id of the rows xids[k] inserted, 0 if none. */
static void
find_lowest_ids(Oid table, const TransactionId *xids, int n, int64 *lowest)
{
	Relation	rel = table_open(table, AccessShareLock);
	const char *id_name = column_names[OUTBOX_COL_ID];
	AttrNumber	id_column = get_attnum(table, id_name);
	TableScanDesc scan;
	TupleTableSlot *slot;
	TransactionId oldest = xids[0];

	if (id_column == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("outbox table \"%s\" has no column \"%s\"",
						RelationGetRelationName(rel), id_name)));
	for (int k = 0; k < n; k++)
	{
		lowest[k] = 0;
		if (TransactionIdPrecedes(xids[k], oldest))
			oldest = xids[k];
	}
	scan = compat_table_beginscan(rel, SnapshotAny);
	slot = table_slot_create(rel, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		xmin = slot_getsysattr(slot, MinTransactionIdAttributeNumber, &isnull);
		int			k = inserted_by(DatumGetTransactionId(xmin), xids, n, oldest);
		Datum		id;

		if (k < 0)
			continue;
		id = slot_getattr(slot, id_column, &isnull);
		if (!isnull && (lowest[k] == 0 || DatumGetInt64(id) < lowest[k]))
			lowest[k] = DatumGetInt64(id);
	}
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	table_close(rel, AccessShareLock);
}

/*
 * Registers the lowest ids of the prepared transactions of this database
 * the registry does not know (after a restart). In the read's transaction.
 */
void
outbox_register_restarted_prepared(Oid table)
{
	TransactionId *xids;
	int64	   *lowest;
	int			n;

	if (max_prepared_xacts == 0)
		return;
	xids = palloc(sizeof(TransactionId) * max_prepared_xacts);
	n = outbox_unregistered_prepared(xids);
	if (n > 0)
	{
		lowest = palloc(sizeof(int64) * n);
		find_lowest_ids(table, xids, n, lowest);
		for (int k = 0; k < n; k++)
			outbox_register_prepared(xids[k], lowest[k]);
		ereport(LOG,
				(errmsg("outbox: found %d prepared transaction(s) of this database the registry did not know, their lowest ids registered",
						n)));
		pfree(lowest);
	}
	pfree(xids);
}
