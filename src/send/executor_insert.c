/*
 * executor_insert.c
 *		outbox_send()'s insert through the executor, for an outbox that is
 *		not as the extension made it (send.c decides): a trigger (an audit
 *		trigger, pg_repack's, a foreign key's), a check or NOT NULL
 *		constraint, an index, a partition constraint, another table access
 *		method. The row goes in as a one-row INSERT statement puts it:
 *		BEFORE and AFTER STATEMENT triggers around it, with its transition
 *		table, BEFORE and AFTER ROW triggers, constraints, and every index
 *		that is ready for inserts.
 *
 * As for the direct insert, no privilege on the table is checked (an
 * application role may send without any), no rule or row security policy
 * applies, and triggers run as the caller.
 */
#include "send/executor_insert.h"
#include "compat.h"

#include "access/tableam.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "parser/parse_relation.h"
#include "utils/rel.h"

/*
 * The executor's state for an insert into rel. The result relation is one
 * the executor knows as opened, so that its trigger code finds it rather
 * than open the relation again (a reference that only
 * ExecCloseResultRelations() gives back).
 */
static EState *
insert_state(Relation rel, ResultRelInfo *result)
{
	EState	   *estate = CreateExecutorState();
	RangeTblEntry *rte = makeNode(RangeTblEntry);

	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	compat_ExecInitRangeTable(estate, rte);
	InitResultRelInfo(result, rel, 1, NULL, 0);
	estate->es_opened_result_relations = list_make1(result);
	estate->es_output_cid = GetCurrentCommandId(true);
	ExecOpenIndices(result, false);
	return estate;
}

/* The row in a slot of the table access method's kind. */
static TupleTableSlot *
row_slot(EState *estate, Relation rel, Datum *values, bool *nulls)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleTableSlot *slot = ExecInitExtraTupleSlot(estate, desc, table_slot_callbacks(rel));

	ExecClearTuple(slot);
	memcpy(slot->tts_values, values, sizeof(Datum) * desc->natts);
	memcpy(slot->tts_isnull, nulls, sizeof(bool) * desc->natts);
	return ExecStoreVirtualTuple(slot);
}

/* The row itself: its row triggers, constraints, the table and its indexes. */
static void
insert_row(EState *estate, ResultRelInfo *result, TupleTableSlot *slot,
		   TransitionCaptureState *transitions)
{
	Relation	rel = result->ri_RelationDesc;
	List	   *recheck = NIL;

	/* a BEFORE ROW trigger may change the row, or keep it out */
	if (result->ri_TrigDesc != NULL && result->ri_TrigDesc->trig_insert_before_row &&
		!ExecBRInsertTriggers(estate, result, slot))
		return;
	if (rel->rd_att->constr != NULL)
		ExecConstraints(result, slot, estate);
	if (rel->rd_rel->relispartition)
		(void) ExecPartitionCheck(result, slot, estate, true);
	simple_table_tuple_insert(rel, slot);
	if (result->ri_NumIndices > 0)
		recheck = compat_ExecInsertIndexTuples(result, slot, estate);
	ExecARInsertTriggers(estate, result, slot, recheck, transitions);
	list_free(recheck);
}

void
outbox_insert_through_executor(Relation rel, Datum *values, bool *nulls)
{
	ResultRelInfo *result = makeNode(ResultRelInfo);
	EState	   *estate = insert_state(rel, result);
	TupleTableSlot *slot = row_slot(estate, rel, values, nulls);
	TransitionCaptureState *transitions;

	AfterTriggerBeginQuery();
	/* NULL unless a trigger has a transition table of inserted rows */
	transitions = MakeTransitionCaptureState(rel->trigdesc, RelationGetRelid(rel), CMD_INSERT);
	ExecBSInsertTriggers(estate, result);
	insert_row(estate, result, slot, transitions);
	ExecASInsertTriggers(estate, result, transitions);
	AfterTriggerEndQuery(estate);

	ExecCloseResultRelations(estate);
	ExecResetTupleTable(estate->es_tupleTable, false);
	FreeExecutorState(estate);
}
