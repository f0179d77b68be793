/*
 * index_shape.c
 *		Whether an index of the outbox is of the shape the install script
 *		gave it. outbox_send()'s direct insert writes the primary key's
 *		entry and no other, which is right only while the key is (shard,
 *		id) and every other index takes no entry for a new row; the
 *		worker's retry probe reads the retry index directly. An index an
 *		operator re-created in another shape, under the same name or not,
 *		sends both down the general path (the executor, a statement)
 *		instead of leaving entries out of it.
 */
#include "table/index_shape.h"
#include "table/outbox_table.h"

#include "catalog/pg_am.h"
#include "catalog/pg_opfamily.h"
#include "nodes/primnodes.h"
#include "utils/rel.h"

/* What both of the install script's btrees start with. */
static bool
btree_leading_with_shard(Relation index)
{
	return index->rd_rel->relkind == RELKIND_INDEX &&
		index->rd_rel->relam == BTREE_AM_OID &&
		index->rd_index->indkey.values[0] == OUTBOX_COL_SHARD + 1 &&
		index->rd_opfamily[0] == INTEGER_BTREE_FAM_OID;
}

bool
outbox_index_is_primary_key(Relation index)
{
	Form_pg_index form = index->rd_index;

	return btree_leading_with_shard(index) &&
		form->indisunique &&
		form->indnatts == 2 && form->indnkeyatts == 2 &&
		form->indkey.values[1] == OUTBOX_COL_ID + 1 &&
		index->rd_opfamily[1] == INTEGER_BTREE_FAM_OID &&
		RelationGetIndexExpressions(index) == NIL &&
		RelationGetIndexPredicate(index) == NIL;
}

bool
outbox_index_is_retry_index(Relation index)
{
	return btree_leading_with_shard(index) && outbox_index_only_for_retries(index);
}

bool
outbox_index_only_for_retries(Relation index)
{
	List	   *predicate = RelationGetIndexPredicate(index);
	NullTest   *test;

	if (list_length(predicate) != 1 || !IsA(linitial(predicate), NullTest))
		return false;
	test = linitial_node(NullTest, predicate);
	return test->nulltesttype == IS_NOT_NULL && IsA(test->arg, Var) &&
		((Var *) test->arg)->varattno == OUTBOX_COL_NEXT_ATTEMPT_AT + 1;
}
