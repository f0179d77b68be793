/*
 * outbox_table.c
 *		Whether a table has the outbox's columns: outbox_send() writes a
 *		row by position and the worker reads it by name, so both hold only
 *		while each column has, at its position, the name and the type of
 *		outbox_table.h. Both sides ask here, and refuse the same way.
 */
#include "table/outbox_table.h"

#include "utils/builtins.h"
#include "utils/rel.h"

static const char *const column_names[OUTBOX_NCOLUMNS] = {OUTBOX_TABLE_COLUMNS(OUTBOX_COLUMN_NAME)};
static const Oid column_types[OUTBOX_NCOLUMNS] = {OUTBOX_TABLE_COLUMNS(OUTBOX_COLUMN_TYPE)};

void
outbox_refuse_table_shape(Relation rel, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("the outbox table \"%s\" was altered: %s",
					RelationGetRelationName(rel), what),
			 errhint("Only outbox_send() and the outbox workers may change the outbox's definition; re-create the extension.")));
}

void
outbox_check_table_columns(Relation rel, int ncolumns)
{
	TupleDesc	desc = RelationGetDescr(rel);

	Assert(ncolumns <= OUTBOX_NCOLUMNS);
	if (desc->natts != ncolumns)
		outbox_refuse_table_shape(rel, psprintf("it has %d columns, expected %d",
												desc->natts, ncolumns));
	for (int i = 0; i < ncolumns; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(desc, i);

		if (attr->attisdropped)
			outbox_refuse_table_shape(rel, psprintf("column %d (\"%s\") was dropped",
													i + 1, column_names[i]));
		if (strcmp(NameStr(attr->attname), column_names[i]) != 0)
			outbox_refuse_table_shape(rel, psprintf("column %d is named \"%s\", expected \"%s\"",
													i + 1, NameStr(attr->attname),
													column_names[i]));
		if (attr->atttypid != column_types[i])
			outbox_refuse_table_shape(rel, psprintf("column %d (\"%s\") has type %s, expected %s",
													i + 1, NameStr(attr->attname),
													format_type_be(attr->atttypid),
													format_type_be(column_types[i])));
	}
}
