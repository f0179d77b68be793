/*
 * capture.c
 *		outbox_capture(): a trigger function that turns every row an INSERT,
 *		UPDATE or DELETE writes into an event, in the same transaction,
 *		so that a table is captured with one CREATE TRIGGER instead of a
 *		trigger function of the application's own.
 *
 *		CREATE TRIGGER orders_outbox AFTER INSERT OR UPDATE OR DELETE ON orders
 *			FOR EACH ROW EXECUTE FUNCTION outbox_capture('orders', '', 'type');
 *
 * Arguments: the topic; the key columns, comma-separated ('' or absent:
 * the primary key); then options, one per argument: columns=a,b or
 * ignore=c,d, tombstone_on_delete, skip_unchanged, type.
 *
 * The payload is {"op": ..., "schema": ..., "table": ..., "before": ...,
 * "after": ...} with the column values as row_to_json() writes them; the
 * key is the row's key columns as a compact JSON object, the same bytes
 * for the same values, so that a row's events keep their order (one shard
 * here, one partition in Kafka).
 *
 * A captured INSERT must cost little more than the INSERT itself. So the
 * arguments are parsed, and the columns, their output functions and the
 * fixed parts of the JSON resolved, once per trigger and backend, not per
 * row or statement; an entry is resolved again after an invalidation of
 * its table's relcache entry (any DDL on the table, its triggers or its
 * indexes) or of a schema. The JSON is written straight into the
 * payload's buffer, with each column type's output function.
 */
#include "send/send.h"
#include "compat.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/jsonapi.h"
#include "executor/tuptable.h"
#include "lib/stringinfo.h"
#include "parser/parse_coerce.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/varlena.h"

PG_FUNCTION_INFO_V1(outbox_capture);

/*
 * How row_to_json() writes a value of a type (json.c's JsonTypeCategory,
 * which is not exported before PostgreSQL 16).
 */
typedef enum CaptureValueKind
{
	VALUE_BOOL,					/* true/false */
	VALUE_NUMBER,				/* unquoted when a valid JSON number */
	VALUE_DATE,					/* ISO 8601, quoted */
	VALUE_TIMESTAMP,
	VALUE_TIMESTAMPTZ,
	VALUE_JSON,					/* json, jsonb: as they are */
	VALUE_ARRAY,				/* a JSON array, by array_to_json() */
	VALUE_COMPOSITE,			/* a JSON object, by row_to_json() */
	VALUE_CAST,					/* a user type with a cast to json */
	VALUE_STRING				/* the output function's text, quoted */
} CaptureValueKind;

typedef struct CaptureColumn
{
	AttrNumber	attnum;
	char	   *label;			/* "name": JSON-escaped, with the colon */
	int			labellen;
	CaptureValueKind kind;
	FmgrInfo	output;			/* output function, or the cast to json */
	int16		typlen;			/* for skip_unchanged's comparison */
	bool		typbyval;
} CaptureColumn;

/* Operations, as the payload's "op" names them. */
enum
{
	OP_CREATE, OP_UPDATE, OP_DELETE, NUM_OPS
};
static const char op_letters[NUM_OPS] = {'c', 'u', 'd'};

/*
 * One capture trigger, resolved against its table: an entry of the
 * backend's cache, keyed by the trigger's OID. Everything it points to
 * lives in its own memory context.
 */
typedef struct CaptureTrigger
{
	Oid			trigger;		/* hash key */
	Oid			relid;
	int			natts;			/* of the table when resolved */
	bool		valid;			/* false: the table changed, resolve again */
	MemoryContext context;
	text	   *topic;
	int			ncolumns;		/* the columns sent, in table order */
	CaptureColumn *columns;
	int			nkeys;			/* the key columns, in key order */
	CaptureColumn *keys;
	int		   *key_column;		/* index of each key in columns[], or -1 */
	AttrNumber	last_attnum;	/* the highest attnum read from a row */
	bool		tombstone_on_delete;
	bool		skip_unchanged;
	char	   *source;			/* "schema": "...", "table": "..." */
	Jsonb	   *headers[NUM_OPS];
} CaptureTrigger;

/* What the trigger's arguments say, before they are resolved. */
typedef struct CaptureOptions
{
	const char *topic;
	const char *key;			/* NULL or "": the primary key */
	const char *columns;		/* columns=: only these */
	const char *ignore;			/* ignore=: all but these */
	bool		tombstone_on_delete;
	bool		skip_unchanged;
	bool		type_header;
} CaptureOptions;

static HTAB *capture_triggers = NULL;

/*
 * The memory of entries replaced or forgotten during a transaction, freed
 * when it ends: a call of outbox_capture() works on a copy of its entry
 * whose pointers must stay good until it returns, and it may be a nested
 * one (a cast to json, or a trigger on the outbox, writing a captured
 * table) while an outer call is building its event.
 */
static MemoryContext retired_context = NULL;
static bool have_retired = false;
static bool have_invalid = false;

/* ---- the cache --------------------------------------------------------- */

/*
 * Invalidation callbacks only mark entries (they run whenever invalidations
 * are processed: in a catalog lookup of an output function, when the
 * outbox is locked). An entry is resolved again when it is next looked up,
 * or removed when the transaction ends (its trigger may be gone).
 */
static void
forget_table(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	CaptureTrigger *entry;

	hash_seq_init(&status, capture_triggers);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (relid == InvalidOid || entry->relid == relid)
		{
			entry->valid = false;
			have_invalid = true;
		}
}

/* ALTER SCHEMA ... RENAME changes the payload's "schema" and no relcache entry. */
static void
forget_all(Datum arg, int cacheid, uint32 hashvalue)
{
	forget_table(arg, InvalidOid);
}

/* At the end of a transaction no call is running: free what was retired. */
static void
release_retired(XactEvent event, void *arg)
{
	HASH_SEQ_STATUS status;
	CaptureTrigger *entry;

	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PREPARE)
		return;
	if (have_retired)
		MemoryContextDeleteChildren(retired_context);
	if (have_invalid)
	{
		hash_seq_init(&status, capture_triggers);
		while ((entry = hash_seq_search(&status)) != NULL)
			if (!entry->valid)
			{
				MemoryContextDelete(entry->context);
				hash_search(capture_triggers, &entry->trigger, HASH_REMOVE, NULL);
			}
	}
	have_retired = have_invalid = false;
}

static void
create_cache(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(CaptureTrigger);
	ctl.hcxt = CacheMemoryContext;
	capture_triggers = hash_create("outbox capture triggers", 16, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	retired_context = AllocSetContextCreate(CacheMemoryContext, "outbox capture retired",
											ALLOCSET_SMALL_SIZES);
	CacheRegisterRelcacheCallback(forget_table, (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, forget_all, (Datum) 0);
	RegisterXactCallback(release_retired, NULL);
}

/* ---- misuse ------------------------------------------------------------ */

static void
refuse_trigger(TriggerData *trigdata, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
			 errmsg("outbox_capture() must be fired AFTER INSERT, UPDATE or DELETE FOR EACH ROW: trigger \"%s\" on table \"%s\" %s",
					trigdata->tg_trigger->tgname,
					RelationGetRelationName(trigdata->tg_relation), what),
			 errhint("CREATE TRIGGER ... AFTER INSERT OR UPDATE OR DELETE ON ... FOR EACH ROW EXECUTE FUNCTION outbox_capture('topic').")));
}

/* The trigger's event, checked on every call: a few bit tests. */
static void
check_trigger_event(TriggerData *trigdata)
{
	TriggerEvent event = trigdata->tg_event;

	if (TRIGGER_FIRED_BY_TRUNCATE(event))
		refuse_trigger(trigdata, "fires on TRUNCATE");
	if (!TRIGGER_FIRED_FOR_ROW(event))
		refuse_trigger(trigdata, "is FOR EACH STATEMENT");
	if (TRIGGER_FIRED_BEFORE(event))
		refuse_trigger(trigdata, "is a BEFORE trigger");
	if (TRIGGER_FIRED_INSTEAD(event))
		refuse_trigger(trigdata, "is an INSTEAD OF trigger");
}

static void
refuse_option(TriggerData *trigdata, const char *message, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s in trigger \"%s\" on table \"%s\"", message,
					trigdata->tg_trigger->tgname,
					RelationGetRelationName(trigdata->tg_relation)),
			 detail ? errdetail_internal("%s", detail) : 0,
			 errhint("outbox_capture() takes the topic, the key columns ('' for the primary key), then options: columns=a,b or ignore=c,d, tombstone_on_delete, skip_unchanged, type.")));
}

/* ---- the trigger's arguments ------------------------------------------- */

static bool
option_value(const char *arg, const char *name, const char **value)
{
	size_t		len = strlen(name);

	if (strncmp(arg, name, len) != 0 || arg[len] != '=')
		return false;
	*value = arg + len + 1;
	return true;
}

static void
set_flag(TriggerData *trigdata, bool *flag, const char *arg)
{
	if (*flag)
		refuse_option(trigdata, psprintf("outbox_capture() option \"%s\" given twice", arg), NULL);
	*flag = true;
}

static void
set_list(TriggerData *trigdata, const char **list, const char *value, const char *arg)
{
	if (*list != NULL)
		refuse_option(trigdata, psprintf("outbox_capture() option \"%.*s\" given twice",
										 (int) (value - arg), arg), NULL);
	*list = value;
}

static void
parse_arguments(TriggerData *trigdata, CaptureOptions *options)
{
	Trigger    *trigger = trigdata->tg_trigger;

	memset(options, 0, sizeof(CaptureOptions));
	if (trigger->tgnargs < 1)
		refuse_option(trigdata, "outbox_capture() needs a topic", "The first argument is the topic.");
	options->topic = trigger->tgargs[0];
	if (trigger->tgnargs >= 2)
		options->key = trigger->tgargs[1];

	for (int i = 2; i < trigger->tgnargs; i++)
	{
		const char *arg = trigger->tgargs[i];
		const char *value;

		if (option_value(arg, "columns", &value))
			set_list(trigdata, &options->columns, value, arg);
		else if (option_value(arg, "ignore", &value))
			set_list(trigdata, &options->ignore, value, arg);
		else if (strcmp(arg, "tombstone_on_delete") == 0)
			set_flag(trigdata, &options->tombstone_on_delete, arg);
		else if (strcmp(arg, "skip_unchanged") == 0)
			set_flag(trigdata, &options->skip_unchanged, arg);
		else if (strcmp(arg, "type") == 0)
			set_flag(trigdata, &options->type_header, arg);
		else
			refuse_option(trigdata, psprintf("unknown outbox_capture() option \"%s\"", arg), NULL);
	}
	if (options->columns != NULL && options->ignore != NULL)
		refuse_option(trigdata, "outbox_capture() options columns= and ignore= cannot be used together", NULL);
}

/*
 * A comma-separated list of column names, as SQL writes identifiers:
 * unquoted names fold to lower case, "Quoted" ones keep theirs.
 */
static List *
split_column_list(TriggerData *trigdata, const char *list, const char *what)
{
	List	   *names = NIL;

	if (!SplitIdentifierString(pstrdup(list), ',', &names) || names == NIL)
		refuse_option(trigdata, psprintf("invalid column list \"%s\" for %s", list, what),
					  "Give column names separated by commas; double-quote a name to keep its case.");
	return names;
}

/* An option given where the key columns go (the second argument)? */
static bool
looks_like_option(const char *name)
{
	return strchr(name, '=') != NULL || strcmp(name, "tombstone_on_delete") == 0 ||
		strcmp(name, "skip_unchanged") == 0 || strcmp(name, "type") == 0;
}

/* The attribute number of a column of the table, or an error. */
static AttrNumber
find_column(TriggerData *trigdata, const char *name, const char *what, bool in_key)
{
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(desc, i);

		if (!attr->attisdropped && strcmp(NameStr(attr->attname), name) == 0)
			return attr->attnum;
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_COLUMN),
			 errmsg("column \"%s\" of %s of trigger \"%s\" does not exist in table \"%s\"",
					name, what, trigdata->tg_trigger->tgname,
					RelationGetRelationName(trigdata->tg_relation)),
			 (in_key && looks_like_option(name)) ?
			 errhint("The second argument names the key columns; give '' there to key by the primary key, then the options.") : 0));
	return InvalidAttrNumber;	/* keep compiler quiet */
}

/* ---- columns ----------------------------------------------------------- */

/* json.c's json_categorize_type(), for the value kinds above. */
static CaptureValueKind
value_kind(Oid type, Oid *funcoid)
{
	bool		varlena;
	Oid			castfunc;

	*funcoid = InvalidOid;
	type = getBaseType(type);
	switch (type)
	{
		case BOOLOID:
			return VALUE_BOOL;
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case FLOAT4OID:
		case FLOAT8OID:
		case NUMERICOID:
			getTypeOutputInfo(type, funcoid, &varlena);
			return VALUE_NUMBER;
		case DATEOID:
			return VALUE_DATE;
		case TIMESTAMPOID:
			return VALUE_TIMESTAMP;
		case TIMESTAMPTZOID:
			return VALUE_TIMESTAMPTZ;
		case JSONOID:
		case JSONBOID:
			getTypeOutputInfo(type, funcoid, &varlena);
			return VALUE_JSON;
		default:
			break;
	}
	if (OidIsValid(get_element_type(type)))
		return VALUE_ARRAY;
	if (type_is_rowtype(type))
		return VALUE_COMPOSITE;
	if (type >= FirstNormalObjectId &&
		find_coercion_pathway(JSONOID, type, COERCION_EXPLICIT, &castfunc) == COERCION_PATH_FUNC &&
		OidIsValid(castfunc))
	{
		*funcoid = castfunc;
		return VALUE_CAST;
	}
	getTypeOutputInfo(type, funcoid, &varlena);
	return VALUE_STRING;
}

static void
init_column(CaptureColumn *column, Relation rel, AttrNumber attnum, MemoryContext context)
{
	Form_pg_attribute attr = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	StringInfoData label;
	Oid			funcoid;

	column->attnum = attnum;
	column->typlen = attr->attlen;
	column->typbyval = attr->attbyval;
	column->kind = value_kind(attr->atttypid, &funcoid);
	if (OidIsValid(funcoid))
		fmgr_info_cxt(funcoid, &column->output, context);

	initStringInfo(&label);
	escape_json(&label, NameStr(attr->attname));
	appendStringInfoChar(&label, ':');
	column->label = MemoryContextStrdup(context, label.data);
	column->labellen = label.len;
}

/* The key columns: the key argument's, or the primary key's in its order. */
static List *
key_attnums(TriggerData *trigdata, const char *key)
{
	Relation	rel = trigdata->tg_relation;
	List	   *attnums = NIL;
	List	   *indexes;
	ListCell   *lc;

	if (key != NULL && key[0] != '\0')
	{
		foreach(lc, split_column_list(trigdata, key, "the key"))
		{
			AttrNumber	attnum = find_column(trigdata, lfirst(lc), "the key", true);

			if (list_member_int(attnums, attnum))
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("column \"%s\" appears twice in the key of trigger \"%s\" on table \"%s\"",
								(char *) lfirst(lc), trigdata->tg_trigger->tgname,
								RelationGetRelationName(rel))));
			attnums = lappend_int(attnums, attnum);
		}
		return attnums;
	}

	/*
	 * From pg_index rather than the relcache's primary key, which leaves
	 * out a DEFERRABLE one.
	 */
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		HeapTuple	tuple = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));
		Form_pg_index index;

		if (!HeapTupleIsValid(tuple))
			elog(ERROR, "cache lookup failed for index %u", lfirst_oid(lc));
		index = (Form_pg_index) GETSTRUCT(tuple);
		if (index->indisprimary)
			for (int i = 0; i < index->indnkeyatts; i++)
				attnums = lappend_int(attnums, index->indkey.values[i]);
		ReleaseSysCache(tuple);
	}
	list_free(indexes);
	if (attnums == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("table \"%s\" has no primary key to key the events of trigger \"%s\" by",
						RelationGetRelationName(rel), trigdata->tg_trigger->tgname),
				 errhint("Name the key columns in outbox_capture()'s second argument, e.g. outbox_capture('topic', 'id').")));
	return attnums;
}

/* Which columns the payload carries: a flag per attribute. */
static bool *
sent_columns(TriggerData *trigdata, const CaptureOptions *options)
{
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	bool	   *sent = palloc0(sizeof(bool) * desc->natts);
	ListCell   *lc;

	for (int i = 0; i < desc->natts; i++)
		sent[i] = options->columns == NULL && !TupleDescAttr(desc, i)->attisdropped;
	if (options->columns != NULL)
		foreach(lc, split_column_list(trigdata, options->columns, "option columns="))
			sent[find_column(trigdata, lfirst(lc), "option columns=", false) - 1] = true;
	if (options->ignore != NULL)
		foreach(lc, split_column_list(trigdata, options->ignore, "option ignore="))
			sent[find_column(trigdata, lfirst(lc), "option ignore=", false) - 1] = false;
	return sent;
}

static Jsonb *
make_headers(char op, const char *table, bool with_type)
{
	compat_jsonb_build state = COMPAT_JSONB_BUILD_INIT;
	JsonbValue	v;
	char		letter[2] = {op, '\0'};

	compat_pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	v.type = jbvString;
	v.val.string.val = "op";
	v.val.string.len = 2;
	compat_pushJsonbValue(&state, WJB_KEY, &v);
	v.val.string.val = letter;
	v.val.string.len = 1;
	compat_pushJsonbValue(&state, WJB_VALUE, &v);
	if (with_type)
	{
		v.val.string.val = "type";
		v.val.string.len = 4;
		compat_pushJsonbValue(&state, WJB_KEY, &v);
		v.val.string.val = psprintf("%s.%c", table, op);
		v.val.string.len = strlen(v.val.string.val);
		compat_pushJsonbValue(&state, WJB_VALUE, &v);
	}
	return JsonbValueToJsonb(compat_pushJsonbEnd(&state, WJB_END_OBJECT));
}

static char *
make_source(Relation rel)
{
	StringInfoData source;

	initStringInfo(&source);
	appendStringInfoString(&source, "\"schema\": ");
	escape_json(&source, get_namespace_name(RelationGetNamespace(rel)));
	appendStringInfoString(&source, ", \"table\": ");
	escape_json(&source, RelationGetRelationName(rel));
	return source.data;
}

/*
 * Resolves the trigger's arguments against its table into *entry, in a new
 * memory context. It hangs under the caller's context until it is complete,
 * so an error (a misuse) leaves nothing behind.
 */
static void
resolve_trigger(TriggerData *trigdata, CaptureTrigger *entry)
{
	Relation	rel = trigdata->tg_relation;
	CaptureOptions options;
	MemoryContext old;
	List	   *keys;
	ListCell   *lc;
	bool	   *sent;
	int			natts = RelationGetDescr(rel)->natts;

	memset(entry, 0, sizeof(CaptureTrigger));
	entry->context = AllocSetContextCreate(CurrentMemoryContext, "outbox capture trigger",
										   ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(entry->context);

	parse_arguments(trigdata, &options);
	entry->trigger = trigdata->tg_trigger->tgoid;
	entry->relid = RelationGetRelid(rel);
	entry->natts = natts;
	entry->topic = cstring_to_text(options.topic);
	entry->tombstone_on_delete = options.tombstone_on_delete;
	entry->skip_unchanged = options.skip_unchanged;

	sent = sent_columns(trigdata, &options);
	entry->columns = palloc(sizeof(CaptureColumn) * natts);
	for (int i = 0; i < natts; i++)
		if (sent[i])
			init_column(&entry->columns[entry->ncolumns++], rel, i + 1, entry->context);

	keys = key_attnums(trigdata, options.key);
	entry->nkeys = list_length(keys);
	entry->keys = palloc(sizeof(CaptureColumn) * entry->nkeys);
	entry->key_column = palloc(sizeof(int) * entry->nkeys);
	foreach(lc, keys)
	{
		int			k = foreach_current_index(lc);
		AttrNumber	attnum = lfirst_int(lc);

		init_column(&entry->keys[k], rel, attnum, entry->context);
		entry->key_column[k] = -1;
		for (int c = 0; c < entry->ncolumns; c++)
			if (entry->columns[c].attnum == attnum)
				entry->key_column[k] = c;
		entry->last_attnum = Max(entry->last_attnum, attnum);
	}
	for (int c = 0; c < entry->ncolumns; c++)
		entry->last_attnum = Max(entry->last_attnum, entry->columns[c].attnum);

	entry->source = make_source(rel);
	for (int op = 0; op < NUM_OPS; op++)
		entry->headers[op] = make_headers(op_letters[op], RelationGetRelationName(rel),
										  options.type_header);
	MemoryContextSwitchTo(old);
	entry->valid = true;
}

/*
 * The trigger's resolved entry, from the cache or resolved now, copied
 * into *trig: what it points to stays until the transaction ends at least.
 */
static void
capture_trigger(TriggerData *trigdata, CaptureTrigger *trig)
{
	Oid			trigger = trigdata->tg_trigger->tgoid;
	CaptureTrigger *entry;
	bool		found;

	if (capture_triggers == NULL)
		create_cache();
	entry = hash_search(capture_triggers, &trigger, HASH_FIND, NULL);
	if (entry != NULL && entry->valid &&
		entry->relid == RelationGetRelid(trigdata->tg_relation) &&
		entry->natts == RelationGetDescr(trigdata->tg_relation)->natts)
	{
		*trig = *entry;
		return;
	}

	resolve_trigger(trigdata, trig);
	entry = hash_search(capture_triggers, &trigger, HASH_ENTER, &found);
	if (found)
	{
		MemoryContextSetParent(entry->context, retired_context);
		have_retired = true;
	}
	*entry = *trig;
	MemoryContextSetParent(entry->context, CacheMemoryContext);
}

/* ---- the event --------------------------------------------------------- */

static void
append_text(StringInfo buf, Datum value)
{
	text	   *t = DatumGetTextPP(value);

	appendBinaryStringInfo(buf, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

static void
append_datetime(StringInfo buf, Datum value, Oid type)
{
	char		formatted[MAXDATELEN + 1];

	JsonEncodeDateTime(formatted, value, type, NULL);
	appendStringInfoChar(buf, '"');
	appendStringInfoString(buf, formatted);
	appendStringInfoChar(buf, '"');
}

/* A value as row_to_json() writes it (json.c's datum_to_json()). */
static void
append_value(StringInfo buf, CaptureColumn *column, Datum value, bool isnull)
{
	char	   *out;

	if (isnull)
	{
		appendStringInfoString(buf, "null");
		return;
	}
	switch (column->kind)
	{
		case VALUE_BOOL:
			appendStringInfoString(buf, DatumGetBool(value) ? "true" : "false");
			break;
		case VALUE_NUMBER:
			out = OutputFunctionCall(&column->output, value);
			/* NaN and Infinity are no JSON numbers */
			if (IsValidJsonNumber(out, strlen(out)))
				appendStringInfoString(buf, out);
			else
				escape_json(buf, out);
			break;
		case VALUE_DATE:
			append_datetime(buf, value, DATEOID);
			break;
		case VALUE_TIMESTAMP:
			append_datetime(buf, value, TIMESTAMPOID);
			break;
		case VALUE_TIMESTAMPTZ:
			append_datetime(buf, value, TIMESTAMPTZOID);
			break;
		case VALUE_JSON:
			appendStringInfoString(buf, OutputFunctionCall(&column->output, value));
			break;
		case VALUE_ARRAY:
			append_text(buf, DirectFunctionCall1(array_to_json, value));
			break;
		case VALUE_COMPOSITE:
			append_text(buf, DirectFunctionCall1(row_to_json, value));
			break;
		case VALUE_CAST:
			append_text(buf, FunctionCall1(&column->output, value));
			break;
		case VALUE_STRING:
			escape_json(buf, OutputFunctionCall(&column->output, value));
			break;
	}
}

/*
 * The row's sent columns as a JSON object. Where each value was written
 * goes to starts[] and ends[] (per sent column), for the key to copy.
 */
static void
append_row(StringInfo buf, CaptureTrigger *entry, TupleTableSlot *slot,
		   int *starts, int *ends)
{
	appendStringInfoChar(buf, '{');
	for (int c = 0; c < entry->ncolumns; c++)
	{
		CaptureColumn *column = &entry->columns[c];
		int			i = column->attnum - 1;

		if (c > 0)
			appendStringInfoChar(buf, ',');
		appendBinaryStringInfo(buf, column->label, column->labellen);
		if (starts != NULL)
			starts[c] = buf->len;
		append_value(buf, column, slot->tts_values[i], slot->tts_isnull[i]);
		if (ends != NULL)
			ends[c] = buf->len;
	}
	appendStringInfoChar(buf, '}');
}

/*
 * The key: the key columns as a compact JSON object, in key order. A value
 * the payload holds already is copied from there.
 */
static void
build_key(StringInfo key, CaptureTrigger *entry, TupleTableSlot *slot,
		  StringInfo payload, const int *starts, const int *ends)
{
	initStringInfo(key);
	appendStringInfoChar(key, '{');
	for (int k = 0; k < entry->nkeys; k++)
	{
		CaptureColumn *column = &entry->keys[k];
		int			c = entry->key_column[k];
		int			i = column->attnum - 1;

		if (k > 0)
			appendStringInfoChar(key, ',');
		appendBinaryStringInfo(key, column->label, column->labellen);
		if (c >= 0)
			appendBinaryStringInfo(key, payload->data + starts[c], ends[c] - starts[c]);
		else
			append_value(key, column, slot->tts_values[i], slot->tts_isnull[i]);
	}
	appendStringInfoChar(key, '}');
}

static bool
same_value(CaptureColumn *column, TupleTableSlot *old, TupleTableSlot *new)
{
	int			i = column->attnum - 1;
	Datum		a = old->tts_values[i];
	Datum		b = new->tts_values[i];

	if (old->tts_isnull[i] || new->tts_isnull[i])
		return old->tts_isnull[i] == new->tts_isnull[i];
	/* an unchanged TOASTed value: the same pointer, no need to fetch it */
	if (column->typlen == -1 &&
		VARSIZE_ANY(DatumGetPointer(a)) == VARSIZE_ANY(DatumGetPointer(b)) &&
		memcmp(DatumGetPointer(a), DatumGetPointer(b), VARSIZE_ANY(DatumGetPointer(a))) == 0)
		return true;
	return datum_image_eq(a, b, column->typbyval, column->typlen);
}

/*
 * skip_unchanged: does the update leave every sent column, and the key,
 * as it was? Compares the stored images, as a no-op UPDATE leaves them.
 */
static bool
row_unchanged(CaptureTrigger *entry, TupleTableSlot *old, TupleTableSlot *new)
{
	for (int c = 0; c < entry->ncolumns; c++)
		if (!same_value(&entry->columns[c], old, new))
			return false;
	for (int k = 0; k < entry->nkeys; k++)
		if (entry->key_column[k] < 0 && !same_value(&entry->keys[k], old, new))
			return false;
	return true;
}

/* The payload, and the key into *key. */
static bytea *
build_event(CaptureTrigger *entry, int op, TupleTableSlot *before,
			TupleTableSlot *after, StringInfo key)
{
	TupleTableSlot *keyed = (op == OP_DELETE) ? before : after;
	StringInfoData payload;
	int		   *starts = palloc(sizeof(int) * Max(entry->ncolumns, 1));
	int		   *ends = palloc(sizeof(int) * Max(entry->ncolumns, 1));

	/* bytea's header first, filled in at the end: no copy of the payload */
	initStringInfo(&payload);
	appendStringInfoSpaces(&payload, VARHDRSZ);
	appendStringInfo(&payload, "{\"op\": \"%c\", ", op_letters[op]);
	appendStringInfoString(&payload, entry->source);
	appendStringInfoString(&payload, ", \"before\": ");
	if (before != NULL)
		append_row(&payload, entry, before, before == keyed ? starts : NULL,
				   before == keyed ? ends : NULL);
	else
		appendStringInfoString(&payload, "null");
	appendStringInfoString(&payload, ", \"after\": ");
	if (after != NULL)
		append_row(&payload, entry, after, after == keyed ? starts : NULL,
				   after == keyed ? ends : NULL);
	else
		appendStringInfoString(&payload, "null");
	appendStringInfoChar(&payload, '}');

	build_key(key, entry, keyed, &payload, starts, ends);
	SET_VARSIZE(payload.data, payload.len);
	return (bytea *) payload.data;
}

/*
 * Names the trigger and table in the errors of building and sending an
 * event (a value's output function, outbox_send's checks); misuse errors
 * name them in their message.
 */
static void
capture_error_context(void *arg)
{
	TriggerData *trigdata = (TriggerData *) arg;

	errcontext("outbox_capture() of trigger \"%s\" on table \"%s\"",
			   trigdata->tg_trigger->tgname,
			   RelationGetRelationName(trigdata->tg_relation));
}

Datum
outbox_capture(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	ErrorContextCallback errcallback;
	CaptureTrigger trig;
	TupleTableSlot *before = NULL;
	TupleTableSlot *after = NULL;
	bytea	   *payload;
	StringInfoData key;
	int			op;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("outbox_capture() was not called by a trigger")));
	check_trigger_event(trigdata);
	capture_trigger(trigdata, &trig);

	errcallback.callback = capture_error_context;
	errcallback.arg = trigdata;
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;

	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
	{
		op = OP_CREATE;
		after = trigdata->tg_trigslot;
	}
	else if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		op = OP_UPDATE;
		before = trigdata->tg_trigslot;
		after = trigdata->tg_newslot;
	}
	else
	{
		op = OP_DELETE;
		before = trigdata->tg_trigslot;
	}
	if (before != NULL)
		slot_getsomeattrs(before, trig.last_attnum);
	if (after != NULL)
		slot_getsomeattrs(after, trig.last_attnum);

	if (!(op == OP_UPDATE && trig.skip_unchanged && row_unchanged(&trig, before, after)))
	{
		payload = build_event(&trig, op, before, after, &key);
		outbox_send_event(fcinfo, trig.topic, payload, OUTBOX_PAYLOAD_JSON, NULL,
						  key.data, key.len, false, trig.headers[op], NULL);
		/* a record with a null value after the delete: compaction drops the key */
		if (op == OP_DELETE && trig.tombstone_on_delete)
			outbox_send_event(fcinfo, trig.topic, NULL, OUTBOX_PAYLOAD_JSON, NULL,
							  key.data, key.len, false, trig.headers[op], NULL);
	}

	error_context_stack = errcallback.previous;
	return PointerGetDatum(NULL);
}
