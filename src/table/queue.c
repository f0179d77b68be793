/*
 * queue.c
 *		The worker's SQL: find the extension, read a batch of committed
 *		events of one shard, and settle events afterwards (delete what
 *		Kafka acknowledged, record failures, move dead letters). Each step
 *		is one short transaction, so no snapshot stays open while the
 *		worker waits for Kafka.
 *
 * Statements are prepared once per extension schema and kept as saved SPI
 * plans; they are rebuilt only when the extension is dropped and created
 * again.
 */
#include "table/queue.h"
#include "backoff.h"
#include "settings.h"
#include "shared/registry.h"
#include "shared/stats.h"
#include "table/durability.h"
#include "table/outbox_table.h"
#include "table/position_delete.h"
#include "table/prepared.h"
#include "table/retry_probe.h"
#include "table/step.h"
#include "table/subscription.h"

#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/params.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

typedef struct Plans
{
	SPIPlanPtr	read_fresh;		/* next events of a shard with no retry */
	SPIPlanPtr	read;			/* next events, no key held back */
	SPIPlanPtr	read_holding;	/* next events, keys behind a retry skipped */
	SPIPlanPtr	any_retry;		/* whether any event has a retry time */
	SPIPlanPtr	held_min;		/* the lowest id waiting for its retry time */
	SPIPlanPtr	any_due_keyed;	/* the lowest keyed retry now due */
	SPIPlanPtr	due_keyed_min;	/* the same, not in flight */
	SPIPlanPtr	delete;
	SPIPlanPtr	delete_by_id;
	SPIPlanPtr	record_failures;
	SPIPlanPtr	dead_letter;
	SPIPlanPtr	reshard;
	SPIPlanPtr	oldest;			/* created_at of the shard's first pending event */
	SPIPlanPtr	pending;		/* how many events the shard has pending */
} Plans;

static Oid	plans_extension_oid = InvalidOid;
static Plans plans;
static Oid	plans_table = InvalidOid;	/* the outbox table the plans name */
static char plans_schema[2 * NAMEDATALEN + 3];	/* its schema, quoted */

/*
 * Whether the extension must be looked up again before the plans are used:
 * set when the plans' table is invalidated (DROP EXTENSION drops it), and
 * checked at least this often anyway (a table taken out of the extension
 * before the DROP is not invalidated). A lookup by name is a catalog index
 * scan, which every read made before: 5 % of a busy worker's samples.
 */
static bool extension_unverified = true;
static TimestampTz extension_verified_at = 0;
#define EXTENSION_RECHECK_MS 1000

/* The id space of this extension's ids (outbox_instance), and its timeline. */
static char instance_id[64] = "";
static TimeLineID instance_timeline = 0;


#define CURRENT_TIMELINE() GetWALInsertionTimeLine()

static SPIPlanPtr
prepare_with(const char *sql, int nargs, Oid *argtypes, int cursor_options)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, argtypes, cursor_options);

	if (plan == NULL)
		elog(ERROR, "outbox: SPI_prepare failed (%s): %s",
			 SPI_result_code_string(SPI_result), sql);
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "outbox: SPI_keepplan failed");
	return plan;
}

static SPIPlanPtr
prepare(const char *sql, int nargs, Oid *argtypes)
{
	return prepare_with(sql, nargs, argtypes, 0);
}

static void
free_plan(SPIPlanPtr *plan)
{
	if (*plan != NULL)
		SPI_freeplan(*plan);
	*plan = NULL;
}

static void
forget_plans(void)
{
	free_plan(&plans.read_fresh);
	free_plan(&plans.read);
	free_plan(&plans.read_holding);
	free_plan(&plans.any_retry);
	free_plan(&plans.held_min);
	free_plan(&plans.any_due_keyed);
	free_plan(&plans.due_keyed_min);
	free_plan(&plans.delete);
	free_plan(&plans.delete_by_id);
	free_plan(&plans.record_failures);
	free_plan(&plans.dead_letter);
	free_plan(&plans.reshard);
	free_plan(&plans.oldest);
	free_plan(&plans.pending);
	plans_extension_oid = InvalidOid;
	plans_table = InvalidOid;
	instance_timeline = 0;
}

/*
 * A retry is due: its time (next_attempt_at of the row as col) has come.
 * An event without one is due at once. The install script's
 * outbox_held_by() and outbox_explain() say when it is not, in SQL.
 */
#define RETRY_DUE(col) " " col " OPERATOR(pg_catalog.<=) pg_catalog.now()"

/*
 * The read's columns, by position: the table's, by their names in
 * outbox_table.h, then where the row is (to delete it by).
 */
#define READ_COLUMN_LIST(TABLE, SYSTEM) \
	TABLE(ID) TABLE(TOPIC) TABLE(KEY) TABLE(PAYLOAD) TABLE(HEADERS) \
	TABLE(CREATED_AT) TABLE(PAYLOAD_TYPE) TABLE(ATTEMPTS) TABLE(PARTITION) \
	SYSTEM(CTID, "ctid")

#define READ_TABLE_POSITION(tag) COL_##tag,
#define READ_SYSTEM_POSITION(tag, name) COL_##tag,
enum
{
	READ_COLUMN_LIST(READ_TABLE_POSITION, READ_SYSTEM_POSITION)
	READ_NCOLUMNS
};

static const char *const table_names[] = {OUTBOX_TABLE_COLUMNS(OUTBOX_COLUMN_NAME)};

#define READ_TABLE_NAME(tag) table_names[OUTBOX_COL_##tag],
#define READ_SYSTEM_NAME(tag, name) name,

/* "o.id, o.topic, ...", in the read's order. */
static char *
read_columns(void)
{
	const char *const names[READ_NCOLUMNS] = {READ_COLUMN_LIST(READ_TABLE_NAME, READ_SYSTEM_NAME)};
	StringInfoData list;

	initStringInfo(&list);
	for (int i = 0; i < READ_NCOLUMNS; i++)
		appendStringInfo(&list, "%so.%s", i > 0 ? ", " : "", names[i]);
	return list.data;
}

/* Everything due from the scan start on: the read's second place below. */
static char *
read_from_sql(const char *s, const char *hold)
{
	return psprintf("SELECT %s FROM %s.outbox o"
					" WHERE o.shard" EQ "$1 AND o.id OPERATOR(pg_catalog.>=) $2"
					" AND (o.next_attempt_at IS NULL OR" RETRY_DUE("o.next_attempt_at") ")"
					"%s ORDER BY o.id LIMIT $3",
					read_columns(), s, hold);
}

/*
 * The read: the lowest due ids of a shard that are not behind a retry of
 * their key, in id order, from two places:
 *   - due retries below the scan start, found through the small partial
 *     retry index (so a waiting retry never pins the scan start, and the
 *     scan never walks what was deleted since);
 *   - everything due from the scan start on.
 * $1 shard, $2 scan start, $3 limit. Planned once (a generic plan): a
 * worker reads hundreds of times a second under load, and planning each
 * read was a third of its main thread's time. The ids the window holds
 * (found again by a read that starts below them where an open transaction
 * ended, or as due retries until they are settled) are left out by the
 * receiver, not by the query: the limit counts them in.
 */
static char *
read_sql(const char *s, const char *hold)
{
	return psprintf("SELECT * FROM ("
					"(SELECT %s FROM %s.outbox o"
					" WHERE o.shard" EQ "$1 AND o.next_attempt_at IS NOT NULL"
					" AND" RETRY_DUE("o.next_attempt_at")
					" AND o.id OPERATOR(pg_catalog.<) $2"
					"%s ORDER BY o.id LIMIT $3)"
					" UNION ALL (%s)"
					") r ORDER BY r.id LIMIT $3",
					read_columns(), s, hold, read_from_sql(s, hold));
}

/*
 * A keyed event waits behind an earlier one of its key that waits for its
 * retry: the install script's outbox_held_by() says which (the one
 * definition, which outbox_explain() uses too). The planner inlines it;
 * the OFFSET keeps the lookup per candidate, not an anti-join that sorts
 * the whole backlog.
 */
#define HOLD_SQL " AND NOT EXISTS (SELECT FROM %s.outbox_held_by(o.shard, o.key, o.id) OFFSET 0)"

/* The lowest keyed retry of a shard now due, the window's ids left out or not. */
#define DUE_KEYED_SQL "SELECT pg_catalog.min(id) FROM %s.outbox" \
	" WHERE shard" EQ "$1 AND key IS NOT NULL AND next_attempt_at IS NOT NULL" \
	" AND" RETRY_DUE("next_attempt_at") "%s"

static void
prepare_read_plans(const char *s)
{
	Oid			read_args[] = {INT4OID, INT8OID, INT4OID};
	Oid			shard_arg[] = {INT4OID};
	Oid			due_args[] = {INT4OID, INT8ARRAYOID};
	char	   *holding = psprintf(HOLD_SQL, s);

	/* a shard in which no event has a retry time (nearly always): one index scan */
	plans.read_fresh = prepare_with(read_from_sql(s, ""), 3, read_args, CURSOR_OPT_GENERIC_PLAN);
	plans.read = prepare_with(read_sql(s, ""), 3, read_args, CURSOR_OPT_GENERIC_PLAN);
	plans.read_holding = prepare_with(read_sql(s, holding), 3, read_args,
									  CURSOR_OPT_GENERIC_PLAN);
	plans.any_due_keyed = prepare(psprintf(DUE_KEYED_SQL, s, ""), 1, due_args);
	plans.due_keyed_min = prepare(psprintf(DUE_KEYED_SQL, s,
										   " AND id OPERATOR(pg_catalog.<>) ALL ($2)"),
								  2, due_args);
	plans.any_retry = prepare(psprintf(
									   "SELECT EXISTS (SELECT FROM %s.outbox"
									   " WHERE shard" EQ "$1 AND next_attempt_at IS NOT NULL)", s),
							  1, shard_arg);
	plans.held_min = prepare(psprintf(
									  "SELECT pg_catalog.min(id) FROM %s.outbox"
									  " WHERE shard" EQ "$1"
									  " AND NOT" RETRY_DUE("next_attempt_at"), s),
							 1, shard_arg);
}

static void
prepare_settle_plans(const char *s)
{
	Oid			delete_args[] = {TIDARRAYOID, INT8ARRAYOID};
	Oid			by_id_args[] = {INT4OID, INT8ARRAYOID};
	Oid			failure_args[] = {INT4OID, INT8ARRAYOID, TEXTARRAYOID, BOOLARRAYOID,
	INT4ARRAYOID};
	Oid			dead_args[] = {INT4OID, INT8ARRAYOID, INT4OID};

	/*
	 * By row position, for a table with triggers or rules (the others go
	 * through position_delete.c): no index descent per event. The id
	 * check keeps a table rewrite (VACUUM FULL, CLUSTER, pg_repack) from
	 * turning an old position into another, undelivered event; the rows a
	 * rewrite moved are then deleted by id. The rows the list of positions fetches,
	 * hash-joined with the (position, id) pairs: one generic plan whatever
	 * the table's statistics (the list's size is unknown to it), where
	 * the two lists alone would be planned for each batch (the planner
	 * estimating each element: a third of the worker's instructions) or,
	 * planned once, compare each row's id with the whole list.
	 */
	plans.delete = prepare_with(psprintf(
										 "DELETE FROM %s.outbox o USING ROWS FROM"
										 " (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS d(ctid, id)"
										 " WHERE o.ctid" EQ "ANY($1)"
										 " AND o.ctid" EQ "d.ctid AND o.id" EQ "d.id", s),
								2, delete_args, CURSOR_OPT_GENERIC_PLAN);
	plans.delete_by_id = prepare_with(outbox_delete_by_id_sql(s, ""),
									  2, by_id_args, CURSOR_OPT_CUSTOM_PLAN);

	/*
	 * A refused event counts an attempt; the wait before its retry comes
	 * from the back-off policy (backoff.c), computed per event
	 */
	plans.record_failures = prepare(psprintf(
											 "UPDATE %s.outbox o SET"
											 " attempts = o.attempts OPERATOR(pg_catalog.+)"
											 "   (CASE WHEN f.permanent THEN 1 ELSE 0 END),"
											 " last_error = f.error,"
											 " last_attempt_at = pg_catalog.now(),"
											 " next_attempt_at = pg_catalog.now() OPERATOR(pg_catalog.+)"
											 "  (interval '1 ms' OPERATOR(pg_catalog.*) f.wait_ms)"
											 " FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3),"
											 "   pg_catalog.unnest($4), pg_catalog.unnest($5))"
											 "   AS f(id, error, permanent, wait_ms)"
											 " WHERE o.shard" EQ "$1 AND o.id" EQ "f.id", s),
									5, failure_args);
	plans.dead_letter = prepare(psprintf(
										 "WITH moved AS (%s)"
										 " INSERT INTO %s.outbox_dead_letter"
										 " (id, topic, key, payload, headers, created_at, attempts,"
										 " last_error, payload_type, partition, failed_at)"
										 " SELECT *, pg_catalog.now() FROM moved",
										 outbox_delete_by_id_sql(s, " AND attempts OPERATOR(pg_catalog.>=) $3"
																 " RETURNING id, topic, key, payload, headers,"
																 " created_at, attempts, last_error, payload_type,"
																 " partition"),
										 s),
								3, dead_args);
}

/*
 * The lag look's and its count's statements: from the worker's position
 * ($2; the deleted rows before it are skipped, which a long snapshot keeps
 * from being removed), and the retries below it through the small retry
 * index.
 */
#define RETRIES_BELOW_SQL " FROM %s.outbox WHERE shard" EQ "$1" \
	" AND next_attempt_at IS NOT NULL AND id OPERATOR(pg_catalog.<) $2"
#define FROM_POSITION_SQL " FROM %s.outbox WHERE shard" EQ "$1" \
	" AND id OPERATOR(pg_catalog.>=) $2"

static void
prepare_lag_plans(const char *s)
{
	Oid			lag_args[] = {INT4OID, INT8OID};
	char	   *retries = psprintf(RETRIES_BELOW_SQL, s);
	char	   *from_position = psprintf(FROM_POSITION_SQL, s);

	plans.oldest = prepare(psprintf(
									"SELECT * FROM ("
									"(SELECT created_at, id%s ORDER BY id LIMIT 1)"
									" UNION ALL (SELECT created_at, id%s ORDER BY id LIMIT 1)"
									") r ORDER BY r.id LIMIT 1", retries, from_position),
						   2, lag_args);
	plans.pending = prepare(psprintf(
									 "SELECT (SELECT pg_catalog.count(*)%s),"
									 " (SELECT pg_catalog.count(*)%s)", from_position, retries),
							2, lag_args);
}

static void
prepare_plans(const char *schema)
{
	const char *s = quote_identifier(schema);
	Oid			reshard_args[] = {INT4OID, INT4OID};

	prepare_read_plans(s);
	prepare_settle_plans(s);
	plans.reshard = prepare(psprintf(
									 "UPDATE %s.outbox SET shard = $1"
									 " WHERE shard OPERATOR(pg_catalog.>=) $2"
									 " AND %s.outbox_shard_of(key, id)" EQ "$1", s, s),
							2, reshard_args);
	prepare_lag_plans(s);
}

/*
 * Reads the id space of the extension's ids, replacing it first when the
 * server now writes on another timeline than the one it was made on, the
 * database is a copy of the one it was made in, or the server is not
 * where it was made (step.c). True if it replaced it: the caller makes
 * that durable once committed.
 */
static bool
load_instance(void)
{
	TimeLineID	timeline = CURRENT_TIMELINE();
	OutboxInstance instance;
	bool		rotated;

	if (instance_timeline == timeline)
		return false;
	rotated = outbox_step_instance(plans_schema, true, &instance);
	strlcpy(instance_id, instance.id, sizeof(instance_id));
	instance_timeline = timeline;
	return rotated;
}

static void
table_invalidated(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == plans_table)
		extension_unverified = true;
}

/* Whether the plans are known to be of the extension as it is. */
static bool
extension_still_verified(void)
{
	static bool callback_registered = false;
	TimestampTz now = GetCurrentTimestamp();

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(table_invalidated, (Datum) 0);
		callback_registered = true;
	}
	if (!extension_unverified && OidIsValid(plans_extension_oid) &&
		!TimestampDifferenceExceeds(extension_verified_at, now, EXTENSION_RECHECK_MS))
		return true;
	/* an invalidation from here on is for the next look */
	extension_unverified = false;
	/* until find_extension() found it and its table as they should be */
	extension_verified_at = 0;
	return false;
}

/*
 * The read selects the table's columns by name, and outbox_send() writes
 * them by position: a column renamed, or two of a type swapping names,
 * would have the worker read another column than outbox_send() wrote (a
 * NULL topic, say). The lock is kept to the step's end: no DDL comes
 * between the check and the step's statements. DDL committed just after a
 * step's look is seen by the next step's (its invalidation); the read's
 * NULL checks (check_required) cover the step in between.
 */
static void
check_table(Oid table)
{
	Relation	rel = OidIsValid(table) ? try_table_open(table, AccessShareLock) : NULL;

	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("the outbox extension's table is missing")));
	outbox_check_table_columns(rel, OUTBOX_NCOLUMNS);
	table_close(rel, NoLock);
}

/*
 * Looks the extension up, and checks its table; (re)prepares the plans if
 * it was created again (the read then sees that the cursor is of another
 * extension: the new table's ids start again from 1). Returns false while
 * it is absent.
 */
static bool
look_up_extension(void)
{
	Oid			extension_oid;
	Oid			table;
	char	   *schema;

	/* the cheap check; SQL only when the extension changed */
	extension_oid = get_extension_oid("outbox", true);
	if (OidIsValid(extension_oid) && extension_oid == plans_extension_oid)
	{
		check_table(plans_table);
		return true;
	}
	/* none are valid now; an error below leaves none, and the next step looks again */
	forget_plans();

	if (!outbox_step_find_extension(&extension_oid, &schema))
		return false;
	table = get_relname_relid("outbox", get_namespace_oid(schema, false));
	/* before the plans, which name its columns */
	check_table(table);
	prepare_plans(schema);
	strlcpy(plans_schema, quote_identifier(schema), sizeof(plans_schema));
	plans_table = table;
	plans_extension_oid = extension_oid;
	return true;
}

/*
 * Finds the extension in this database, its table with the columns the
 * worker reads. Returns false while the extension is absent. Runs inside a
 * step.
 */
static bool
find_extension(void)
{
	if (extension_still_verified())
		return true;
	if (!look_up_extension())
		return false;
	extension_verified_at = GetCurrentTimestamp();
	return true;
}

static void
copy_headers(OutboxEvent *event, Datum datum)
{
	Jsonb	   *headers = DatumGetJsonbP(datum);
	JsonbIterator *it = JsonbIteratorInit(&headers->root);
	JsonbValue	v;
	JsonbIteratorToken token;
	int			n = JB_ROOT_COUNT(headers);
	int			i = 0;

	event->header_names = palloc(sizeof(char *) * Max(n, 1));
	event->header_values = palloc(sizeof(char *) * Max(n, 1));
	while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (token == WJB_KEY)
		{
			event->header_names[i] = pnstrdup(v.val.string.val, v.val.string.len);
			event->size += 2 * (v.val.string.len + 1);
		}
		else if (token == WJB_VALUE && v.type == jbvString)
		{
			event->header_values[i++] = pnstrdup(v.val.string.val, v.val.string.len);
			event->size += 2 * (v.val.string.len + 1);
		}
	}
	event->nheaders = i;
	if ((Pointer) headers != DatumGetPointer(datum))
		pfree(headers);
}

/* Copies a bytea, detoasting it without keeping a second copy. */
static void
copy_bytes(Datum datum, char **data, int *len)
{
	bytea	   *value = DatumGetByteaPP(datum);

	*len = VARSIZE_ANY_EXHDR(value);
	*data = palloc_extended(*len + 1, MCXT_ALLOC_HUGE);
	memcpy(*data, VARDATA_ANY(value), *len);
	(*data)[*len] = '\0';
	if ((Pointer) value != DatumGetPointer(datum))
		pfree(value);
}

/*
 * The read's columns no row of the table has NULL in (the install script's
 * NOT NULL): one that does was not written by outbox_send(), or the table
 * was altered between the last check and the read. The read fails, as a
 * pass does (logged, in last_error, retried after a back-off), rather than
 * send such a row or take it for another.
 */
static void
check_required(const Datum *values, const bool *nulls)
{
	static const struct
	{
		int			read;		/* its position in the read */
		OutboxColumn table;		/* in the table */
	}			required[] = {
		{COL_ID, OUTBOX_COL_ID}, {COL_TOPIC, OUTBOX_COL_TOPIC},
		{COL_CREATED_AT, OUTBOX_COL_CREATED_AT}, {COL_ATTEMPTS, OUTBOX_COL_ATTEMPTS}
	};

	for (int i = 0; i < (int) lengthof(required); i++)
		if (nulls[required[i].read])
			ereport(ERROR,
					(errcode(ERRCODE_NOT_NULL_VIOLATION),
					 errmsg("an outbox row has a NULL %s%s", table_names[required[i].table],
							nulls[COL_ID] ? "" :
							psprintf(" (id " INT64_FORMAT ")", DatumGetInt64(values[COL_ID]))),
					 errhint("Rows of the outbox are written by outbox_send() only; delete or correct this one.")));
}

/* Copies one row of the read into an event, in the current context. */
static void
copy_event(OutboxEvent *event, const Datum *values, const bool *nulls)
{
	check_required(values, nulls);
	event->id = DatumGetInt64(values[COL_ID]);
	event->topic = TextDatumGetCString(values[COL_TOPIC]);
	event->key_isnull = nulls[COL_KEY];
	if (!event->key_isnull)
		copy_bytes(values[COL_KEY], &event->key, &event->keylen);
	event->payload_isnull = nulls[COL_PAYLOAD];
	if (!event->payload_isnull)
		copy_bytes(values[COL_PAYLOAD], &event->payload, &event->payloadlen);
	if (!nulls[COL_HEADERS])
		copy_headers(event, values[COL_HEADERS]);
	event->created_at = DatumGetTimestampTz(values[COL_CREATED_AT]);
	event->ctid = *(ItemPointer) DatumGetPointer(values[COL_CTID]);
	event->payload_type = nulls[COL_PAYLOAD_TYPE] ? 0 : DatumGetChar(values[COL_PAYLOAD_TYPE]);
	event->partition = nulls[COL_PARTITION] ? -1 : DatumGetInt32(values[COL_PARTITION]);
	event->attempts = DatumGetInt32(values[COL_ATTEMPTS]);
	event->outcome = EVENT_SKIPPED;
	event->size += (int64) event->payloadlen + 2 * (int64) event->keylen +
		strlen(event->topic) + 1;
}

/* the events array's first size: grown by doubling (make_room) */
#define READ_FIRST_CAPACITY 16

/*
 * Takes the read's rows from the executor into the batch, in the batch's
 * context (not first into SPI's tuple table: a copy of every row), up to
 * max_bytes of what the events bring (payload, key, headers and topic; at
 * least one event): the rest is read again next time, so a worker's
 * memory is bounded by bytes, not events, whatever part of an event is
 * big.
 */
typedef struct ReadReceiver
{
	DestReceiver pub;
	OutboxBatch *batch;
	MemoryContext batch_context;
	int			limit;
	int			capacity;		/* of batch->events */
	int64		max_bytes;
	const int64 *skip;			/* the window's ids, ascending: not copied again */
	int			nskip;
} ReadReceiver;

int
outbox_compare_ids(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

static bool
in_window(const ReadReceiver *r, int64 id)
{
	return r->nskip > 0 &&
		bsearch(&id, r->skip, r->nskip, sizeof(int64), outbox_compare_ids) != NULL;
}

/*
 * The events array grows as rows come: a read's limit is a thousand, most
 * reads bring a few, and the window keeps each read's memory until all
 * its events are settled.
 */
static void
make_room(ReadReceiver *r)
{
	if (r->batch->nevents < r->capacity)
		return;
	r->capacity = Min(r->capacity * 2, r->limit);
	r->batch->events = repalloc(r->batch->events, sizeof(OutboxEvent) * r->capacity);
}

static bool
read_receive(TupleTableSlot *slot, DestReceiver *self)
{
	ReadReceiver *r = (ReadReceiver *) self;
	OutboxBatch *batch = r->batch;
	MemoryContext old;
	OutboxEvent *event;
	bool		isnull;

	if (in_window(r, DatumGetInt64(slot_getattr(slot, COL_ID + 1, &isnull))))
		return true;
	/* a row beyond the limit or the bytes: the executor stops here */
	if (batch->nevents == r->limit)
		return false;
	if (batch->nevents > 0 && batch->bytes >= r->max_bytes)
	{
		batch->more = true;
		return false;
	}
	slot_getallattrs(slot);
	make_room(r);
	event = &batch->events[batch->nevents];
	memset(event, 0, sizeof(*event));
	old = MemoryContextSwitchTo(r->batch_context);
	copy_event(event, slot->tts_values, slot->tts_isnull);
	MemoryContextSwitchTo(old);
	batch->bytes += batch->events[batch->nevents].size;
	batch->nevents++;
	return true;
}

static void
read_startup(DestReceiver *self, int operation, TupleDesc desc)
{
	Assert(desc->natts == READ_NCOLUMNS);
}

static void
read_shutdown(DestReceiver *self)
{
}

static void
read_destroy(DestReceiver *self)
{
}

/* A receiver of up to limit events into batch, but none of skip's. */
static ReadReceiver *
read_receiver(OutboxBatch *batch, MemoryContext batch_context, int limit, int64 max_bytes,
			  const int64 *skip, int nskip)
{
	ReadReceiver *r = palloc0(sizeof(ReadReceiver));

	r->pub.receiveSlot = read_receive;
	r->pub.rStartup = read_startup;
	r->pub.rShutdown = read_shutdown;
	r->pub.rDestroy = read_destroy;
	r->pub.mydest = DestNone;	/* none of SPI's: it keeps no rows */
	r->batch = batch;
	r->batch_context = batch_context;
	r->limit = limit;
	r->max_bytes = max_bytes;
	r->skip = skip;
	r->nskip = nskip;
	r->capacity = Min(Max(limit, 1), READ_FIRST_CAPACITY);
	batch->events = MemoryContextAlloc(batch_context, sizeof(OutboxEvent) * r->capacity);
	return r;
}

/* The one value a read-only statement of one shard returns. */
static Datum
shard_value(SPIPlanPtr plan, int shard, bool *isnull, const char *what)
{
	Datum		args[1] = {Int32GetDatum(shard)};

	if (SPI_execute_plan(plan, args, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "outbox: %s failed", what);
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, isnull);
}

/*
 * Whether any event of the shard has a retry time, due or not: one descent
 * of the partial retry index, usually empty. Without one, nothing is held
 * and nothing below the scan start is due, so the read needs neither its
 * look-ups nor its second index scan. Every read looks (an operator may
 * set retry times too), on a snapshot taken before the read's: a retry
 * time set in between is seen by the next read. The statement is for an
 * index no longer as the install script made it.
 */
static bool
any_retry(int shard)
{
	bool		isnull;
	bool		any;

	if (outbox_probe_retry(plans_table, shard, &any))
		return any;
	return DatumGetBool(shard_value(plans.any_retry, shard, &isnull,
									"looking for events with a retry time"));
}

/*
 * Whether any event of the shard (one with retry times) waits for its
 * retry: only then must the read look up each candidate's key.
 */
static bool
any_held(int shard)
{
	bool		isnull;

	(void) shard_value(plans.held_min, shard, &isnull, "reading events waiting for a retry");
	return !isnull;
}

/* For the rest of the step's transaction. */
static void
set_planner_option(const char *name, const char *value)
{
	(void) set_config_option(name, value, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * The worker's statements touch a few rows of a table that may hold a
 * backlog: the read is a walk of the shard's index in id order that stops
 * at its limit, the delete fetches rows by position. Statistics from when
 * the outbox was small (or none: a first backlog) make a bitmap or
 * sequential scan of the whole backlog (plus a sort) look cheaper, and one
 * such read fetches every pending row, one such delete reads them all; so,
 * for the step's transaction only, the planner gets no such choice.
 */
static void
plan_by_index_only(void)
{
	set_planner_option("enable_bitmapscan", "off");
	set_planner_option("enable_seqscan", "off");
}

/*
 * While a keyed event waits for its retry, reads pass over the later
 * events of its key (held back) and the cursor moves on past them; once
 * the retry is due, the read starts again at it, so that it and then the
 * events it held are read in id order. Returns PG_INT64_MAX if none is due
 * (the window's events, in flight, do not count).
 */
static int64
due_keyed_retry(int shard, const int64 *window_ids, int nwindow)
{
	Datum		args[2] = {Int32GetDatum(shard), (Datum) 0};
	bool		isnull;
	Datum		min_id;

	/* usually none is due: one descent of the small retry index */
	if (SPI_execute_plan(plans.any_due_keyed, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "outbox: reading events due for a retry failed");
	(void) SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return PG_INT64_MAX;
	args[1] = PointerGetDatum(outbox_int8_array(window_ids, nwindow));
	if (SPI_execute_plan(plans.due_keyed_min, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "outbox: reading events due for a retry failed");
	min_id = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? PG_INT64_MAX : DatumGetInt64(min_id);
}

/*
 * The window's events the read can find, ascending: none is read again
 * while it is there. The scan from scan_from finds those above it when it
 * starts below them, where a transaction open at an earlier read ended;
 * the due retries below scan_from (a read with retries) find a retry in
 * flight, or delivered and not yet settled: its row says it is due until
 * the settle deletes it, in exactly-once mode until the Kafka transaction
 * commits. Without retries the steady drain skips nothing (scan_from is
 * above the window).
 */
static int
window_skip(const OutboxWindowIds *window, int64 from_id, int64 **skip)
{
	int			n = window->at_or_above(window->window, from_id, skip);

	qsort(*skip, n, sizeof(int64), outbox_compare_ids);
	return n;
}

static int
no_ids(void *window, int64 from_id, int64 **ids)
{
	*ids = palloc(sizeof(int64));
	return 0;
}

/* for a read of another extension than the window's */
static const OutboxWindowIds no_window = {no_ids, NULL};

/*
 * Where the read starts (batch->scan_from: the cursor, lower where a
 * transaction open below it at the last read has ended since or for a due
 * retry, 0 to read everything again), and the window's ids it leaves out.
 */
static int
scan_start(OutboxBatch *batch, int shard, const OutboxReadPosition *position, bool retries,
		   const OutboxWindowIds *window, int64 **skip)
{
	batch->scan_from = Min(position->cursor,
						   outbox_lowest_ended(position->open_ids, position->nopen,
											   batch->open_ids, batch->nopen));
	if (retries)
	{
		int			nskip = window_skip(window, PG_INT64_MIN, skip);

		batch->scan_from = Min(batch->scan_from, due_keyed_retry(shard, *skip, nskip));
		if (batch->from_start)
			batch->scan_from = 0;
		return nskip;
	}
	if (batch->from_start)
		batch->scan_from = 0;
	return window_skip(window, batch->scan_from, skip);
}

/*
 * Runs a read plan for up to the receiver's limit
 * of events besides those it leaves out; its rows go to the receiver.
 */
static void
execute_read(SPIPlanPtr plan, int shard, int64 scan_from, ReadReceiver *receiver)
{
	static const Oid types[] = {INT4OID, INT8OID, INT4OID};
	Datum		args[3];
	SPIExecuteOptions options = {0};

	args[0] = Int32GetDatum(shard);
	args[1] = Int64GetDatum(scan_from);
	args[2] = Int32GetDatum(receiver->limit + receiver->nskip);
	options.params = makeParamList(lengthof(args));
	for (int i = 0; i < (int) lengthof(args); i++)
	{
		options.params->params[i].value = args[i];
		options.params->params[i].isnull = false;
		options.params->params[i].pflags = PARAM_FLAG_CONST;
		options.params->params[i].ptype = types[i];
	}
	options.read_only = true;
	options.dest = &receiver->pub;
	if (SPI_execute_plan_extended(plan, &options) < 0)
		elog(ERROR, "outbox: reading a batch failed");
}

/*
 * Whether a subscription replicates into the outbox (the publisher
 * delivers its rows: subscription.c); its name goes in the batch. What
 * replication writes may replace outbox_instance too: it is read again
 * once the outbox is this server's to deliver.
 */
static bool
held_by_subscription(OutboxBatch *batch, MemoryContext batch_context)
{
	const char *holder = outbox_subscription_holding(plans_table);

	if (holder == NULL)
		return false;
	batch->held_by = MemoryContextStrdup(batch_context, holder);
	instance_timeline = 0;
	return true;
}

/*
 * Reads the next events of a shard: those committed with id >= the scan
 * start, in id order, that are due and not behind a retry of their key.
 * The scan starts at the worker's cursor, or lower where a transaction
 * open below the cursor at the last read has ended since (registry.c, "the
 * read floor"), or at 0 after a rewind (dead letters put back) that the
 * worker has not yet taken in. While a subscription replicates into the
 * outbox, reads nothing and names it in held_by. The batch records what it
 * was read under; the worker takes the rewind in only when it produces the
 * batch, so a read thrown away cannot consume it. Returns false while the
 * extension does not exist.
 */
bool
outbox_read_batch(OutboxBatch *batch, int slot, int shard, const OutboxReadPosition *position,
				  const OutboxWindowIds *window, int limit, int64 max_bytes)
{
	MemoryContext batch_context = CurrentMemoryContext;
	MemoryContext old_context;
	bool		retries;
	SPIPlanPtr	plan;
	ReadReceiver *receiver;
	OutboxAsyncCommits async;
	int64	   *skip;
	int			nskip;
	bool		rotated;

	memset(batch, 0, sizeof(*batch));
	outbox_step_begin("outbox: reading a batch");
	if (!find_extension())
	{
		outbox_step_end(batch_context);
		return false;
	}
	if (held_by_subscription(batch, batch_context))
	{
		outbox_step_end(batch_context);
		return true;
	}
	rotated = load_instance();
	batch->extension_oid = plans_extension_oid;
	batch->instance = MemoryContextStrdup(batch_context, instance_id);
	/* the read's statements, its look for retries first */
	plan_by_index_only();
	retries = any_retry(shard);
	plan = !retries ? plans.read_fresh : any_held(shard) ? plans.read_holding : plans.read;

	outbox_register_restarted_prepared(plans_table);
	old_context = MemoryContextSwitchTo(batch_context);
	batch->nopen = outbox_take_snapshot_open_ids(slot, &batch->rewind_generation, &async,
												 &batch->open_ids);
	MemoryContextSwitchTo(old_context);
	qsort(batch->open_ids, batch->nopen, sizeof(int64), outbox_compare_ids);
	/* every commit this snapshot sees ended before this point */
	batch->visible_lsn = outbox_visible_commits_end();
	batch->async_commits_lsn = outbox_async_flush_target(&async);
	batch->async_commits_ended = async.ended;
	batch->from_start = batch->rewind_generation != position->rewind_generation ||
		position->extension != plans_extension_oid;
	/* the ids of the window's events are of the cursor's extension */
	if (position->extension != plans_extension_oid)
		window = &no_window;
	nskip = scan_start(batch, shard, position, retries, window, &skip);
	receiver = read_receiver(batch, batch_context, limit, max_bytes, skip, nskip);
	execute_read(plan, shard, batch->scan_from, receiver);
	batch->more |= (batch->nevents == limit);
	PopActiveSnapshot();		/* the open ids' snapshot */
	outbox_step_end(batch_context);

	/*
	 * The worker commits asynchronously: a new instance lost in a crash
	 * would be replaced by a third, and what went out under this one be
	 * sent again under that, where consumers cannot tell it is the same.
	 * So it is on disk before any event carries it, in this read or later.
	 */
	if (rotated)
		XLogFlush(XactLastCommitEnd);
	return true;
}

/*
 * The delete by position as a statement, for a table with triggers or
 * rules (position_delete.c deletes from the others), planned as a hash
 * join: a nested loop would fetch each position alone, and each such
 * fetch asks the kernel for the table's size (an lseek per event). Other
 * statements keep their joins.
 */
static void
execute_delete(Datum *args)
{
	char	   *nestloop = pstrdup(GetConfigOption("enable_nestloop", false, false));

	set_planner_option("enable_nestloop", "off");
	if (SPI_execute_plan(plans.delete, args, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "outbox: deleting delivered events failed");
	set_planner_option("enable_nestloop", nestloop);
}

/*
 * Deletes the delivered events: by position and id, and by id for those a
 * table rewrite or an update moved since they were read. A row missing
 * altogether was deleted by someone else: nothing is left to do for it.
 */
static void
delete_delivered(const char *who, OutboxEvent **events, int nevents, int shard)
{
	ItemPointerData *tids = palloc(sizeof(ItemPointerData) * Max(nevents, 1));
	int64	   *ids = palloc(sizeof(int64) * Max(nevents, 1));
	int			n = 0;
	uint64		deleted;
	Datum		args[2];

	for (int i = 0; i < nevents; i++)
	{
		if (!outbox_outcome_policy(events[i]->outcome)->deleted)
			continue;
		tids[n] = events[i]->ctid;
		ids[n] = events[i]->id;
		n++;
	}
	if (n == 0)
		return;
	args[1] = PointerGetDatum(outbox_int8_array(ids, n));
	if (!outbox_delete_at_positions(plans_table, tids, ids, n, &deleted))
	{
		Datum	   *ctids = palloc(sizeof(Datum) * n);

		for (int i = 0; i < n; i++)
			ctids[i] = PointerGetDatum(&tids[i]);
		args[0] = PointerGetDatum(construct_array(ctids, n, TIDOID, sizeof(ItemPointerData),
												  false, TYPALIGN_SHORT));
		execute_delete(args);
		deleted = SPI_processed;
	}
	if (deleted == (uint64) n)
		return;

	ereport(DEBUG1,
			(errmsg_internal("%s: " UINT64_FORMAT " of %d delivered events moved since they were read, deleting them by id",
							 who, (uint64) n - deleted, n)));
	args[0] = Int32GetDatum(shard);
	if (SPI_execute_plan(plans.delete_by_id, args, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "outbox: deleting delivered events failed");
}

/* Records failures; moves events out of attempts to the dead letters. */
static void
record_failures(const char *who, OutboxEvent **events, int nevents, int shard)
{
	int64	   *ids = palloc(sizeof(int64) * Max(nevents, 1));
	Datum	   *errors = palloc(sizeof(Datum) * Max(nevents, 1));
	Datum	   *permanent = palloc(sizeof(Datum) * Max(nevents, 1));
	Datum	   *waits = palloc(sizeof(Datum) * Max(nevents, 1));
	int			n = 0;
	Datum		args[5];

	for (int i = 0; i < nevents; i++)
	{
		OutboxEvent *event = events[i];

		if (!outbox_event_failed(event))
			continue;
		ids[n] = event->id;
		errors[n] = CStringGetTextDatum(event->error ? event->error : "unknown error");
		permanent[n] = BoolGetDatum(outbox_outcome_policy(event->outcome)->counts_attempt);
		waits[n] = Int32GetDatum(outbox_backoff_event_ms(event));
		n++;
	}
	if (n == 0)
		return;

	args[0] = Int32GetDatum(shard);
	args[1] = PointerGetDatum(outbox_int8_array(ids, n));
	args[2] = PointerGetDatum(construct_array(errors, n, TEXTOID, -1, false, TYPALIGN_INT));
	args[3] = PointerGetDatum(construct_array(permanent, n, BOOLOID, 1, true, TYPALIGN_CHAR));
	args[4] = PointerGetDatum(construct_array(waits, n, INT4OID, 4, true, TYPALIGN_INT));
	if (SPI_execute_plan(plans.record_failures, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "outbox: recording failed deliveries failed");

	args[2] = Int32GetDatum(outbox_max_attempts);
	if (SPI_execute_plan(plans.dead_letter, args, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "outbox: moving events to the dead letters failed");
	if (SPI_processed > 0)
	{
		outbox_stats_dead_lettered(SPI_processed);
		ereport(WARNING,
				(errmsg("%s: moved " UINT64_FORMAT " event(s) to outbox_dead_letter after %d attempts",
						who, (uint64) SPI_processed, outbox_max_attempts),
				 errdetail("The first failed event of the list, id " INT64_FORMAT ", failed with: %s",
						   ids[0], TextDatumGetCString(errors[0]))));
	}
}

bool
outbox_settle_events(const char *who, OutboxEvent **events, int nevents,
					 Oid extension_oid, int shard, SettlePolicy policy)
{
	MemoryContext caller_context = CurrentMemoryContext;
	bool		current;

	outbox_step_begin("outbox: settling delivered events");
	current = find_extension() && plans_extension_oid == extension_oid;
	if (current)
	{
		plan_by_index_only();
		delete_delivered(who, events, nevents, shard);
		if (policy == SETTLE_RECORDING_FAILURES)
			record_failures(who, events, nevents, shard);
	}
	outbox_step_end(caller_context);
	return current;
}

/* Whether this database has the extension (in the version of the library). */
bool
outbox_extension_exists(void)
{
	MemoryContext caller_context = CurrentMemoryContext;
	bool		found;

	outbox_step_begin("outbox: looking for the extension");
	found = find_extension();
	outbox_step_end(caller_context);
	return found;
}

/*
 * Moves events of shards that no longer exist (outbox.shards was lowered)
 * to the shard their key now maps to, if that is this one. Only this
 * worker writes into its shard this way, before it reads it, so it cannot
 * pass over them.
 */
int
outbox_reshard_orphans(int shard)
{
	MemoryContext caller_context = CurrentMemoryContext;
	Datum		args[2] = {Int32GetDatum(shard), Int32GetDatum(outbox_shards)};
	int			moved = 0;
	bool		found;

	outbox_step_begin("outbox: adopting events of removed shards");
	found = find_extension();
	/*
	 * a subscription's rows are the publisher's: moved to another shard,
	 * its deletes (by the primary key, shard and id) would miss them
	 */
	if (found && outbox_subscription_holding(plans_table) != NULL)
		moved = -1;
	else if (found)
	{
		/*
		 * Usually there is none: a walk of the shards' index above the
		 * last, which statistics of a small outbox (or none: a first
		 * backlog, before any read) would make a scan of the whole table
		 */
		plan_by_index_only();
		if (SPI_execute_plan(plans.reshard, args, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "outbox: adopting events of removed shards failed");
		moved = SPI_processed;
	}
	outbox_step_end(caller_context);
	return moved;
}

/* The lag look's lower bound, 0 for another extension than the worker's. */
static Datum *
lag_args(int shard, int64 from_id, Oid from_extension)
{
	Datum	   *args = palloc(sizeof(Datum) * 2);

	args[0] = Int32GetDatum(shard);
	args[1] = Int64GetDatum(from_extension == plans_extension_oid ? from_id : 0);
	return args;
}

/*
 * The created_at and id of the shard's first event from from_id on, or
 * waiting for a retry below it; false when there is none or no extension.
 */
bool
outbox_oldest_pending(int shard, int64 from_id, Oid from_extension,
					  TimestampTz *created_at, int64 *id)
{
	MemoryContext caller_context = CurrentMemoryContext;
	bool		found = false;
	bool		isnull;

	outbox_step_begin("outbox: looking at the oldest pending event");
	if (find_extension())
	{
		plan_by_index_only();
		if (SPI_execute_plan(plans.oldest, lag_args(shard, from_id, from_extension), NULL,
							 true, 1) != SPI_OK_SELECT)
			elog(ERROR, "outbox: reading the oldest pending event failed");
		found = (SPI_processed == 1);
		if (found)
		{
			*created_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
															SPI_tuptable->tupdesc, 1, &isnull));
			*id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 2, &isnull));
		}
	}
	outbox_step_end(caller_context);
	return found;
}

/*
 * How many events the shard has from from_id on, and how many wait for a
 * retry below it (*retries; the events their keys hold back below it are
 * in neither): a count, for a log line, not a loop.
 */
int64
outbox_pending_count(int shard, int64 from_id, Oid from_extension, int64 *retries)
{
	MemoryContext caller_context = CurrentMemoryContext;
	int64		count = 0;
	bool		isnull;

	*retries = 0;
	outbox_step_begin("outbox: counting pending events");
	if (find_extension())
	{
		plan_by_index_only();
		if (SPI_execute_plan(plans.pending, lag_args(shard, from_id, from_extension), NULL,
							 true, 1) != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "outbox: counting pending events failed");
		count = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
											1, &isnull));
		*retries = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
											   2, &isnull));
	}
	outbox_step_end(caller_context);
	return count;
}
