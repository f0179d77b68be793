/*
 * retry_probe.c
 *		Whether a shard has events with a retry time, asked of the partial
 *		retry index directly. Every read asks first (an operator may set
 *		retry times too), and as a statement the question cost as much as
 *		the read itself: executor start-up for one index descent. Paced
 *		and small reads made it a fifth of the worker's main thread.
 *
 * The index is used only while it is the one the install script made, on
 * a heap table: anything else, and the caller's statement asks instead.
 */
#include "table/retry_probe.h"
#include "table/index_shape.h"
#include "table/outbox_table.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_am.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"

#define RETRY_INDEX "outbox_retry_idx"

/*
 * Whether the planner could use the index: built, valid, and (built with
 * broken HOT chains) old enough for this transaction's snapshots.
 */
static bool
usable_now(Relation index)
{
	Form_pg_index form = index->rd_index;

	if (!form->indisvalid || !form->indisready || !form->indislive)
		return false;
	return !form->indcheckxmin ||
		TransactionIdPrecedes(HeapTupleHeaderGetXmin(index->rd_indextuple->t_data),
							  TransactionXmin);
}

static bool
is_retry_index(Relation index, Oid relid)
{
	/* its shape first: a relation of another kind has no rd_index */
	return outbox_index_is_retry_index(index) &&
		index->rd_index->indrelid == relid && usable_now(index);
}

/* The first row of the shard in the index with a retry time, if any. */
static bool
shard_has_retry(Relation table, Oid index, int32 shard)
{
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found = false;

	ScanKeyInit(&key, OUTBOX_COL_SHARD + 1, BTEqualStrategyNumber, F_INT4EQ,
				Int32GetDatum(shard));
	scan = systable_beginscan(table, index, true, GetActiveSnapshot(), 1, &key);
	/* the check is the index's predicate again, for a scan of the table */
	while (!found && HeapTupleIsValid(tuple = systable_getnext(scan)))
		found = !heap_attisnull(tuple, OUTBOX_COL_NEXT_ATTEMPT_AT + 1,
								RelationGetDescr(table));
	systable_endscan(scan);
	return found;
}

bool
outbox_probe_retry(Oid relid, int32 shard, bool *any)
{
	Relation	table = table_open(relid, AccessShareLock);
	Oid			index_oid = get_relname_relid(RETRY_INDEX, RelationGetNamespace(table));
	Relation	index = NULL;
	bool		usable;

	/* locked before it is looked at: dropped in between, it is not opened */
	if (OidIsValid(index_oid))
		index = try_relation_open(index_oid, AccessShareLock);
	/* the rows are read as heap tuples, of a table of the heap's own kind */
	usable = table->rd_rel->relam == HEAP_TABLE_AM_OID &&
		index != NULL && is_retry_index(index, relid);
	if (usable)
		*any = shard_has_retry(table, index_oid, shard);
	if (index != NULL)
		relation_close(index, NoLock);
	table_close(table, NoLock);
	return usable;
}
