/*
 * send.c
 *		outbox_send(): checks an event where it enters and inserts it into
 *		the outbox in the caller's transaction; at commit, wakes the workers
 *		of the shards it touched. A prepared transaction's events wait in
 *		the registry for COMMIT PREPARED (registry.c).
 *
 * The row is inserted directly (heap and its one index) rather than
 * through SPI: this is what keeps outbox_send() close to the cost of a
 * plain INSERT, and it lets an application role call outbox_send() without
 * any privilege on the table itself.
 */
#include "send/send.h"
#include "compat.h"
#include "kafka/message.h"
#include "send/executor_insert.h"
#include "send/schema_check.h"
#include "send/tracing.h"
#include "settings.h"
#include "shared/registry.h"
#include "shared/slots.h"
#include "table/index_shape.h"
#include "table/outbox_table.h"
#include "topic_name.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/heapam.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/pg_sequence.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(outbox_send_jsonb);
PG_FUNCTION_INFO_V1(outbox_send_text);
PG_FUNCTION_INFO_V1(outbox_send_bytea);
PG_FUNCTION_INFO_V1(outbox_shard_of);
PG_FUNCTION_INFO_V1(outbox_prepare_reinsert);

/* What this transaction has sent, for the commit callback. */
static uint64 touched_shards = 0;
static bool sent_this_xact = false;

static bool warned_not_delivered = false;

static void
check_topic(text *topic)
{
	int			len = VARSIZE_ANY_EXHDR(topic);
	TopicNameFault fault = outbox_topic_name_fault(VARDATA_ANY(topic), len);

	if (fault == TOPIC_NAME_EMPTY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("outbox topic must not be empty")));
	if (fault == TOPIC_NAME_TOO_LONG)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("outbox topic is %d characters long, Kafka allows at most %d",
						len, KAFKA_MAX_TOPIC_LENGTH)));
	if (fault == TOPIC_NAME_DOTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("outbox topic must not be \".\" or \"..\"")));
	if (fault == TOPIC_NAME_BAD_CHARACTER)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("outbox topic \"%s\" contains a character Kafka does not allow",
						text_to_cstring(topic)),
				 errhint("Topic names may use only ASCII letters, digits, '.', '_' and '-'.")));
}

/*
 * Headers must be a flat JSON object of strings, without our own names.
 * Returns the bytes of their names and values.
 */
static Size
check_headers(Jsonb *headers)
{
	Size		bytes = 0;

	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken token;
	const char *reserved;

	if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("outbox headers must be a JSON object of strings")));

	it = JsonbIteratorInit(&headers->root);
	while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (token == WJB_KEY || (token == WJB_VALUE && v.type == jbvString))
			bytes += v.val.string.len;
		if (token == WJB_KEY &&
			(reserved = outbox_message_header_reserved(v.val.string.val, v.val.string.len)) != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("outbox header \"%.*s\" is reserved",
							v.val.string.len, v.val.string.val),
					 errdetail("%s", reserved)));
		if (token == WJB_VALUE && v.type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("outbox headers must be a JSON object of strings"),
					 errdetail("A header value is a JSON %s.",
							   v.type == jbvBinary ? "object or array" :
							   v.type == jbvNumeric ? "number" :
							   v.type == jbvBool ? "boolean" : "null")));
	}
	return bytes;
}

/*
 * The record Kafka gets must fit its limit, counted by the size rule of
 * message.c.
 */
static void
check_record_size(Size payload, Size key, Size headers)
{
	Size		record = outbox_message_counted_size(payload, key, headers);

	if (record > (Size) outbox_max_message_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("outbox event is %zu bytes, more than outbox.max_message_bytes (%d)",
						record, outbox_max_message_bytes),
				 errdetail("Payload %zu bytes, key %zu and headers %zu bytes, the last two counted twice: the envelope repeats them.",
						   payload, key, headers)));
}

static int
shard_for(const char *key, int keylen, bool key_isnull, int64 id,
				 int nshards)
{
	/* events without a key have no order to keep: spread them by id */
	if (key_isnull)
		return (int) ((uint64) id % (uint64) nshards);
	return (int) (hash_bytes((const unsigned char *) key, keylen) % (uint32) nshards);
}

static void
warn_if_not_delivered(void)
{
	char	   *dbname;

	if (warned_not_delivered)
		return;
	warned_not_delivered = true;

	if (!outbox_slots_available())
	{
		ereport(WARNING,
				(errmsg("outbox is not in shared_preload_libraries: no worker will deliver this event"),
				 errhint("Add outbox to shared_preload_libraries and restart the server; events stay in the outbox until then.")));
		return;
	}
	dbname = get_database_name(MyDatabaseId);
	if (dbname != NULL && !outbox_database_allowed(dbname))
		ereport(WARNING,
				(errmsg("outbox.databases does not include database \"%s\": no worker will deliver this event",
						dbname),
				 errhint("Add \"%s\" to outbox.databases and reload the configuration.", dbname)));
}

/*
 * The extension's relations, looked up once per backend and again only
 * after an invalidation touches one of them (DDL, DROP EXTENSION, REINDEX):
 * with one event per transaction, looking them up per query would cost as
 * much as the insert. What the table looks like (its indexes, triggers,
 * constraints, column types, the sequence's options) is examined again
 * under the table's lock, after every such invalidation, so no DDL can
 * slip between the look and the insert.
 */
typedef struct SendRelations
{
	Oid			namespace;		/* InvalidOid: look them up again */
	Oid			table;
	Oid			index;
	Oid			sequence;
	bool		examined;		/* the checks below hold for the locked table */
	bool		pristine;		/* indexes of its own shapes only, no triggers or checks */
	bool		before_0_3;		/* no payload_type yet: ALTER EXTENSION pending */
	bool		before_0_7;		/* no partition yet: ALTER EXTENSION pending */
	IndexInfo  *index_info;		/* of the primary key, for the direct insert */
} SendRelations;

static SendRelations relations;
static MemoryContext relations_context = NULL;

static void
forget_relations(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == relations.table ||
		relid == relations.index || relid == relations.sequence)
		relations.namespace = InvalidOid;
}

/* ALTER SEQUENCE changes pg_sequence, not the sequence's relcache entry */
static void
forget_sequence_options(Datum arg, int cacheid, uint32 hashvalue)
{
	relations.examined = false;
}

static void
find_relations(Oid namespace)
{
	memset(&relations, 0, sizeof(relations));
	relations.table = get_relname_relid("outbox", namespace);
	relations.index = get_relname_relid("outbox_pkey", namespace);
	relations.sequence = get_relname_relid("outbox_id_seq", namespace);
	if (!OidIsValid(relations.table) || !OidIsValid(relations.index) ||
		!OidIsValid(relations.sequence))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("the outbox extension's table is missing from schema \"%s\"",
						get_namespace_name(namespace))));
	relations.namespace = namespace;
}

/*
 * The columns outbox_send() writes values of, by position, with the names
 * the worker reads them by and the types written.
 */
static void
check_columns(Relation rel)
{
	/*
	 * Between the new library's start and ALTER EXTENSION outbox UPDATE,
	 * the table has the columns of before 0.3.0: sending goes on.
	 */
	int			natts = RelationGetDescr(rel)->natts;

	relations.before_0_3 = (natts == OUTBOX_NCOLUMNS_BEFORE_0_3);
	relations.before_0_7 = (natts == OUTBOX_NCOLUMNS_BEFORE_0_7 || relations.before_0_3);
	outbox_check_table_columns(rel, relations.before_0_3 ? OUTBOX_NCOLUMNS_BEFORE_0_3 :
							   relations.before_0_7 ? OUTBOX_NCOLUMNS_BEFORE_0_7 :
							   OUTBOX_NCOLUMNS);
}

/*
 * Workers start each read at the lowest id an open transaction holds: that
 * needs ids handed out in call order, which a per-backend cache or a cycle
 * would break.
 */
static void
check_sequence(Relation rel)
{
	HeapTuple	tuple = SearchSysCache1(SEQRELID, ObjectIdGetDatum(relations.sequence));
	Form_pg_sequence seq;
	bool		ordered;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for sequence %u", relations.sequence);
	seq = (Form_pg_sequence) GETSTRUCT(tuple);
	ordered = seq->seqcache == 1 && !seq->seqcycle;
	ReleaseSysCache(tuple);
	if (!ordered)
		outbox_refuse_table_shape(rel, "its sequence outbox_id_seq must have CACHE 1 and NO CYCLE");
}

/*
 * The primary key as the install script made it, and every other index
 * partial on a retry time: the direct insert writes the key's entry, and
 * a new row (no retry time) needs no other.
 */
static bool
has_own_indexes_only(Relation rel)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *cell;
	bool		own = list_member_oid(indexes, relations.index);

	foreach(cell, indexes)
	{
		Relation	index;

		if (!own)
			break;
		index = index_open(lfirst_oid(cell), AccessShareLock);
		own = lfirst_oid(cell) == relations.index ?
			outbox_index_is_primary_key(index) :
			outbox_index_only_for_retries(index);
		index_close(index, AccessShareLock);
	}
	list_free(indexes);
	return own;
}

/* The columns every row outbox_send() writes has a value in. */
static bool
always_written(int column)
{
	switch (column)
	{
		case OUTBOX_COL_ID:
		case OUTBOX_COL_SHARD:
		case OUTBOX_COL_TOPIC:
		case OUTBOX_COL_CREATED_AT:
		case OUTBOX_COL_ATTEMPTS:
		case OUTBOX_COL_PAYLOAD_TYPE:
			return true;
		default:
			return false;
	}
}

/*
 * No NOT NULL the direct insert could break: on a column outbox_send()
 * leaves NULL in some rows (a key, say), only the executor checks it.
 */
static bool
has_own_not_nulls_only(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int i = 0; i < desc->natts; i++)
		if (TupleDescAttr(desc, i)->attnotnull && !always_written(i))
			return false;
	return true;
}

/*
 * Examines the table under its lock. A table that is just as the extension
 * made it gets the direct insert, which writes a heap tuple and the primary
 * key's entry; one with anything added (an index, even one being built or
 * swapped by CREATE INDEX or REINDEX CONCURRENTLY, a trigger such as
 * pg_repack's or an audit trigger, a check or NOT NULL constraint, a
 * partition's constraint, another table access method) gets the
 * executor's insert, which honours all of them.
 */
static void
examine_table(Relation rel)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	Relation	index;
	MemoryContext old;

	check_columns(rel);
	check_sequence(rel);
	relations.pristine = rel->trigdesc == NULL &&
		(constr == NULL || constr->num_check == 0) &&
		has_own_not_nulls_only(rel) &&
		!rel->rd_rel->relispartition &&
		rel->rd_rel->relam == HEAP_TABLE_AM_OID &&
		has_own_indexes_only(rel);

	if (relations_context == NULL)
		relations_context = AllocSetContextCreate(CacheMemoryContext, "outbox send relations",
												  ALLOCSET_SMALL_SIZES);
	MemoryContextReset(relations_context);
	index = index_open(relations.index, RowExclusiveLock);
	old = MemoryContextSwitchTo(relations_context);
	relations.index_info = BuildIndexInfo(index);
	MemoryContextSwitchTo(old);
	index_close(index, NoLock);
	relations.examined = true;
}

/*
 * Opens the outbox of the calling function's schema with RowExclusiveLock
 * and returns it examined. Taking the lock processes pending invalidations,
 * which may make the relations found before it stale: then again.
 */
static Relation
open_outbox(FunctionCallInfo fcinfo)
{
	Oid			namespace;
	Relation	rel;

	if (fcinfo->flinfo->fn_extra == NULL)
	{
		fcinfo->flinfo->fn_extra = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, sizeof(Oid));
		*(Oid *) fcinfo->flinfo->fn_extra = get_func_namespace(fcinfo->flinfo->fn_oid);
	}
	namespace = *(Oid *) fcinfo->flinfo->fn_extra;

	for (;;)
	{
		if (relations.namespace != namespace)
			find_relations(namespace);
		rel = table_open(relations.table, RowExclusiveLock);
		if (relations.namespace == namespace)
			break;
		table_close(rel, RowExclusiveLock);
	}
	if (!relations.examined)
		examine_table(rel);
	return rel;
}

/* The direct insert: the heap and the primary key, nothing else. */
static void
insert_directly(Relation rel, Datum *values, bool *nulls, int shard, int64 id)
{
	HeapTuple	tuple = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	Relation	index = index_open(relations.index, RowExclusiveLock);
	Datum		index_values[2] = {Int32GetDatum(shard), Int64GetDatum(id)};
	bool		index_nulls[2] = {false, false};

	simple_heap_insert(rel, tuple);
	index_insert(index, index_values, index_nulls, &tuple->t_self, rel,
				 UNIQUE_CHECK_YES, false, relations.index_info);
	index_close(index, NoLock);
	heap_freetuple(tuple);
}

static int64
insert_event(FunctionCallInfo fcinfo, text *topic, bytea *payload, char payload_type,
			 const char *key, int keylen, bool key_isnull, Jsonb *headers,
			 const OutboxSendExtras *extras)
{
	Relation	rel = open_outbox(fcinfo);
	Datum		values[OUTBOX_NCOLUMNS];
	bool		nulls[OUTBOX_NCOLUMNS];
	int64		id;
	int			shard;

	if (payload == NULL && relations.before_0_3)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a tombstone (NULL payload) needs version 0.3.0 of extension \"outbox\""),
				 errhint("Run ALTER EXTENSION outbox UPDATE.")));
	if (extras->partition >= 0 && relations.before_0_7)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a partition chosen by the sender needs version 0.7.0 of extension \"outbox\""),
				 errhint("Run ALTER EXTENSION outbox UPDATE.")));
	id = outbox_next_id_registered(relations.sequence);
	shard = shard_for(key, keylen, key_isnull, id, outbox_shards);

	memset(nulls, false, sizeof(nulls));
	values[OUTBOX_COL_ID] = Int64GetDatum(id);
	values[OUTBOX_COL_SHARD] = Int32GetDatum(shard);
	values[OUTBOX_COL_TOPIC] = PointerGetDatum(topic);
	if (key_isnull)
		nulls[OUTBOX_COL_KEY] = true;
	else
	{
		bytea	   *keydatum = (bytea *) palloc(VARHDRSZ + keylen);

		SET_VARSIZE(keydatum, VARHDRSZ + keylen);
		memcpy(VARDATA(keydatum), key, keylen);
		values[OUTBOX_COL_KEY] = PointerGetDatum(keydatum);
	}
	values[OUTBOX_COL_PAYLOAD] = PointerGetDatum(payload);
	nulls[OUTBOX_COL_PAYLOAD] = (payload == NULL);
	values[OUTBOX_COL_PAYLOAD_TYPE] = CharGetDatum(payload_type);
	values[OUTBOX_COL_HEADERS] = PointerGetDatum(headers);
	nulls[OUTBOX_COL_HEADERS] = (headers == NULL);
	values[OUTBOX_COL_CREATED_AT] = TimestampTzGetDatum(extras->created_at_set ?
														extras->created_at :
														GetCurrentTransactionStartTimestamp());
	values[OUTBOX_COL_ATTEMPTS] = Int32GetDatum(0);
	nulls[OUTBOX_COL_LAST_ERROR] = true;
	nulls[OUTBOX_COL_LAST_ATTEMPT_AT] = true;
	nulls[OUTBOX_COL_NEXT_ATTEMPT_AT] = true;
	values[OUTBOX_COL_PARTITION] = Int32GetDatum(extras->partition);
	nulls[OUTBOX_COL_PARTITION] = (extras->partition < 0);

	if (relations.pristine)
		insert_directly(rel, values, nulls, shard, id);
	else
		outbox_insert_through_executor(rel, values, nulls);
	table_close(rel, NoLock);

	touched_shards |= UINT64CONST(1) << shard;
	sent_this_xact = true;
	return id;
}

int64
outbox_send_event(FunctionCallInfo fcinfo, text *topic, bytea *payload, char payload_type,
				  Jsonb *json, const char *key, int keylen, bool key_isnull, Jsonb *headers,
				  const OutboxSendExtras *extras)
{
	Size		header_bytes = 0;
	static const OutboxSendExtras none = {-1, false, 0};

	PreventCommandIfReadOnly("outbox_send()");
	PreventCommandDuringRecovery("outbox_send()");
	if (topic == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("outbox topic must not be NULL")));
	check_topic(topic);
	if (payload == NULL && key_isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("outbox payload must not be NULL"),
				 errhint("A NULL payload is a tombstone, which needs a key.")));
	outbox_check_schemas(topic, payload, payload_type, json, key, keylen, key_isnull);
	headers = outbox_add_trace_context(headers);
	if (headers != NULL)
		header_bytes = check_headers(headers);
	check_record_size(payload ? VARSIZE_ANY_EXHDR(payload) : 0, key_isnull ? 0 : keylen,
					  header_bytes);
	if (extras == NULL)
		extras = &none;
	warn_if_not_delivered();
	return insert_event(fcinfo, topic, payload, payload_type, key, keylen, key_isnull,
						headers, extras);
}

static bytea *
bytes_to_bytea(const char *data, Size len)
{
	bytea	   *result = (bytea *) palloc(VARHDRSZ + len);

	SET_VARSIZE(result, VARHDRSZ + len);
	memcpy(VARDATA(result), data, len);
	return result;
}

#define ARG_TEXT_OR_NULL(n) (PG_ARGISNULL(n) ? NULL : PG_GETARG_TEXT_PP(n))
#define ARG_JSONB_OR_NULL(n) (PG_ARGISNULL(n) ? NULL : PG_GETARG_JSONB_P(n))

/*
 * The partition argument (the fifth, from 0.7.0): NULL leaves the choice
 * to the partitioner. The same entry point serves the four-argument
 * outbox_send() kept from earlier versions, called with four.
 */
static OutboxSendExtras
partition_argument(FunctionCallInfo fcinfo)
{
	OutboxSendExtras extras = {-1, false, 0};

	if (PG_NARGS() > 4 && !PG_ARGISNULL(4))
	{
		extras.partition = PG_GETARG_INT32(4);
		if (extras.partition < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("outbox partition must not be negative: %d", extras.partition),
					 errhint("Give NULL to let the partitioner choose by the key.")));
	}
	return extras;
}

/* The key of the text and jsonb variants; the bytea variant's is bytea. */
#define SEND_WITH_KEY(payload, type, json, key) \
	outbox_send_event(fcinfo, ARG_TEXT_OR_NULL(0), (payload), (type), (json), \
					  (key) ? VARDATA_ANY(key) : NULL, (key) ? VARSIZE_ANY_EXHDR(key) : 0, \
					  (key) == NULL, ARG_JSONB_OR_NULL(3), &extras)

Datum
outbox_send_jsonb(PG_FUNCTION_ARGS)
{
	OutboxSendExtras extras = partition_argument(fcinfo);
	text	   *key = ARG_TEXT_OR_NULL(2);
	bytea	   *payload = NULL;
	Jsonb	   *json = NULL;

	if (!PG_ARGISNULL(1))
	{
		char	   *text;

		json = PG_GETARG_JSONB_P(1);
		text = JsonbToCString(NULL, &json->root, VARSIZE(json));
		payload = bytes_to_bytea(text, strlen(text));
	}
	PG_RETURN_INT64(SEND_WITH_KEY(payload, OUTBOX_PAYLOAD_JSON, json, key));
}

Datum
outbox_send_text(PG_FUNCTION_ARGS)
{
	OutboxSendExtras extras = partition_argument(fcinfo);
	text	   *key = ARG_TEXT_OR_NULL(2);

	/* text and bytea share one representation: store it as it came */
	PG_RETURN_INT64(SEND_WITH_KEY((bytea *) ARG_TEXT_OR_NULL(1), OUTBOX_PAYLOAD_TEXT, NULL, key));
}

Datum
outbox_send_bytea(PG_FUNCTION_ARGS)
{
	OutboxSendExtras extras = partition_argument(fcinfo);
	bytea	   *key = PG_ARGISNULL(2) ? NULL : PG_GETARG_BYTEA_PP(2);

	PG_RETURN_INT64(SEND_WITH_KEY(PG_ARGISNULL(1) ? NULL : PG_GETARG_BYTEA_PP(1),
								  OUTBOX_PAYLOAD_BYTES, NULL, key));
}

/* The shard an event belongs to under the current outbox.shards. */
Datum
outbox_shard_of(PG_FUNCTION_ARGS)
{
	bytea	   *key = PG_ARGISNULL(0) ? NULL : PG_GETARG_BYTEA_PP(0);

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("outbox event id must not be NULL")));
	PG_RETURN_INT32(shard_for(key ? VARDATA_ANY(key) : NULL,
									 key ? VARSIZE_ANY_EXHDR(key) : 0,
									 key == NULL, PG_GETARG_INT64(1),
									 outbox_shards));
}

/*
 * Announces that this transaction puts events with ids from min_id up back
 * into the outbox (dead letters retried), so no worker passes over them.
 */
Datum
outbox_prepare_reinsert(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0))
		PG_RETURN_VOID();
	outbox_register_reinsert(PG_GETARG_INT64(0));
	touched_shards = ~UINT64CONST(0);
	sent_this_xact = true;
	PG_RETURN_VOID();
}

/*
 * Whether the workers may be delivering. With outbox.enabled = off a woken
 * worker only goes back to sleep, and the wake-up is what a one-event
 * transaction pays most for beyond its insert (a kill(), and the worker
 * taking a CPU the committing backend and its client want): so a commit
 * wakes no one then. The setting is reloaded in every process alike; while
 * this backend has a reload still to read (delivery may have just been
 * switched on) it wakes as before. A worker that switches delivery on runs
 * a pass at once, and outbox.poll_interval bounds the wait of an event
 * committed by a backend that had not read the reload yet.
 */
static inline bool
delivery_may_be_on(void)
{
	return outbox_enabled || ConfigReloadPending;
}

static void
outbox_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			outbox_note_preparing();
			break;
		case XACT_EVENT_PRE_COMMIT:
			/* the commit will not wait for its flush: workers must flush it */
			if (sent_this_xact && synchronous_commit <= SYNCHRONOUS_COMMIT_OFF)
				outbox_note_async_commit();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			/* after the commit is visible: a woken worker will see it */
			outbox_clear_inflight();
			if (touched_shards != 0 && delivery_may_be_on())
				outbox_wake_shards(touched_shards);
			touched_shards = 0;
			sent_this_xact = false;
			break;
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			/* a prepared transaction's events wait for COMMIT PREPARED */
			if (event == XACT_EVENT_PREPARE)
				outbox_move_to_prepared();
			else
				outbox_clear_inflight();
			touched_shards = 0;
			sent_this_xact = false;
			break;
		default:
			break;
	}
}

void
outbox_install_send_callbacks(void)
{
	RegisterXactCallback(outbox_xact_callback, NULL);
	CacheRegisterRelcacheCallback(forget_relations, (Datum) 0);
	CacheRegisterSyscacheCallback(SEQRELID, forget_sequence_options, (Datum) 0);
}
