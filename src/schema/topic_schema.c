/*
 * topic_schema.c
 *		The one reader of outbox_topic_schema: every row, cached per process,
 *		read again only after a change to the table was committed (or made
 *		by this transaction).
 *
 * A plain UPDATE raises no invalidation of its own, so the table carries a
 * statement trigger, outbox_topic_schema_changed() below, that raises a
 * relcache invalidation of the table: PostgreSQL sends it to every backend
 * once the change commits (and to this one at its next command), and the
 * relcache callback here marks the cache stale. A send to a topic without
 * a schema then costs a check of the invalidation queue and, while the table
 * has rows, one hash probe: no query.
 *
 * The table is found in the extension's schema, never through search_path,
 * and read through the table access method, so neither the caller's
 * privileges nor row security decide what the send check sees. The rows
 * are read with the latest snapshot, not the transaction's: an invalidation
 * is only sent once its change is visible to a new snapshot, so what a
 * reload reads is never older than what made it reload.
 */
#include "schema/topic_schema.h"
#include "compat.h"
#include "topic_name.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

PG_FUNCTION_INFO_V1(outbox_topic_schema_changed);

/* a hash key: 'v' or 'k', then the topic */
#define KEY_LENGTH (KAFKA_MAX_TOPIC_LENGTH + 2)

typedef struct CachedSchema
{
	char		hash_key[KEY_LENGTH];
	TopicSchema schema;
} CachedSchema;

static struct
{
	bool		valid;
	Oid			table;			/* InvalidOid: not found at the last load */
	long		rows;
	HTAB	   *by_topic;
	MemoryContext context;
} cache;

static void
table_invalidated(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == cache.table)
		cache.valid = false;
}

static void
make_key(char *hash_key, const char *topic, bool key)
{
	hash_key[0] = key ? 'k' : 'v';
	strlcpy(hash_key + 1, topic, KEY_LENGTH - 1);
}

static int
column(TupleDesc desc, const char *name)
{
	for (int i = 0; i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped &&
			strcmp(NameStr(TupleDescAttr(desc, i)->attname), name) == 0)
			return i;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("table outbox_topic_schema has no column \"%s\"", name),
			 errhint("Run ALTER EXTENSION outbox UPDATE.")));
	return -1;					/* not reached */
}

/* the attribute numbers of the columns read, by name */
typedef struct Columns
{
	int			topic,
				part,
				format,
				lookup,
				subject,
				version,
				indexes,
				text,
				id,
				error;
} Columns;

static Columns
find_columns(TupleDesc desc)
{
	Columns		c;

	c.topic = column(desc, "topic");
	c.part = column(desc, "part");
	c.format = column(desc, "format");
	c.lookup = column(desc, "lookup");
	c.subject = column(desc, "subject");
	c.version = column(desc, "version");
	c.indexes = column(desc, "message_indexes");
	c.text = column(desc, "schema_text");
	c.id = column(desc, "schema_id");
	c.error = column(desc, "last_error");
	return c;
}

static char *
text_or_null(TupleTableSlot *slot, int column)
{
	return slot->tts_isnull[column] ? NULL :
		TextDatumGetCString(slot->tts_values[column]);
}

static SchemaFormat
format_of(const char *name)
{
	if (strcmp(name, "avro") == 0)
		return SCHEMA_FORMAT_AVRO;
	if (strcmp(name, "protobuf") == 0)
		return SCHEMA_FORMAT_PROTOBUF;
	return SCHEMA_FORMAT_JSON_SCHEMA;
}

static void
read_indexes(TopicSchema *schema, TupleTableSlot *slot, int column)
{
	Datum	   *elements;
	bool	   *nulls;
	int			n;
	int32	   *indexes;

	if (slot->tts_isnull[column])
	{
		schema->n_indexes = 0;
		schema->message_indexes = NULL;
		return;
	}
	deconstruct_array(DatumGetArrayTypeP(slot->tts_values[column]), INT4OID,
					  sizeof(int32), true, TYPALIGN_INT, &elements, &nulls, &n);
	indexes = palloc(sizeof(int32) * Max(n, 1));
	for (int i = 0; i < n; i++)
		indexes[i] = nulls[i] ? 0 : DatumGetInt32(elements[i]);
	schema->n_indexes = n;
	schema->message_indexes = indexes;
}

/* one row into the cache (in the cache's context) */
static void
add_row(TupleTableSlot *slot, const Columns *c)
{
	char	   *topic = text_or_null(slot, c->topic);
	char	   *part = text_or_null(slot, c->part);
	char	   *lookup = text_or_null(slot, c->lookup);
	char		hash_key[KEY_LENGTH];
	CachedSchema *entry;
	TopicSchema *s;

	/* no event can have such a topic (send.c refuses it) */
	if (topic == NULL || strlen(topic) > KAFKA_MAX_TOPIC_LENGTH || part == NULL ||
		lookup == NULL || slot->tts_isnull[c->format])
		return;
	make_key(hash_key, topic, strcmp(part, "key") == 0);
	entry = hash_search(cache.by_topic, hash_key, HASH_ENTER, NULL);
	s = &entry->schema;
	s->topic = topic;
	s->key = (hash_key[0] == 'k');
	s->format = format_of(text_or_null(slot, c->format));
	s->lookup = lookup[0] == 'i' ? SCHEMA_LOOKUP_ID :
		lookup[0] == 'v' ? SCHEMA_LOOKUP_VERSION : SCHEMA_LOOKUP_REGISTER;
	s->subject = text_or_null(slot, c->subject);
	s->version = text_or_null(slot, c->version);
	read_indexes(s, slot, c->indexes);
	s->schema_text = text_or_null(slot, c->text);
	s->schema_id = slot->tts_isnull[c->id] ? -1 : DatumGetInt32(slot->tts_values[c->id]);
	s->last_error = text_or_null(slot, c->error);
	cache.rows++;
}

static void
read_table(Relation rel)
{
	Columns		c = find_columns(RelationGetDescr(rel));
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	TableScanDesc scan = compat_table_beginscan(rel, snapshot);
	TupleTableSlot *slot = table_slot_create(rel, NULL);

	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		slot_getallattrs(slot);
		add_row(slot, &c);
	}
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
}

/* the table of the extension's schema; InvalidOid before 0.7.0 */
static Oid
find_table(void)
{
	Relation	extensions = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			namespace = InvalidOid;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("outbox"));
	scan = systable_beginscan(extensions, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		namespace = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scan);
	table_close(extensions, AccessShareLock);
	return OidIsValid(namespace) ?
		get_relname_relid("outbox_topic_schema", namespace) : InvalidOid;
}

static void
load(void)
{
	HASHCTL		ctl;
	MemoryContext old;
	Relation	rel;

	if (cache.context == NULL)
	{
		cache.context = AllocSetContextCreate(CacheMemoryContext, "outbox topic schemas",
											  ALLOCSET_SMALL_SIZES);
		CacheRegisterRelcacheCallback(table_invalidated, (Datum) 0);
	}
	MemoryContextReset(cache.context);
	cache.by_topic = NULL;
	cache.rows = 0;
	cache.table = find_table();
	/* not cached before the update to 0.7.0 made the table: look again */
	cache.valid = OidIsValid(cache.table);
	if (!cache.valid)
		return;

	ctl.keysize = KEY_LENGTH;
	ctl.entrysize = sizeof(CachedSchema);
	ctl.hcxt = cache.context;
	cache.by_topic = hash_create("outbox topic schemas", 16, &ctl,
								 HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	old = MemoryContextSwitchTo(cache.context);
	PG_TRY();
	{
		/* taking the lock may invalidate what is read: valid is set before */
		rel = table_open(cache.table, AccessShareLock);
		read_table(rel);
		table_close(rel, AccessShareLock);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(old);
		cache.valid = false;
		PG_RE_THROW();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(old);
}

const TopicSchema *
outbox_topic_schema_find(const char *topic, bool key)
{
	char		hash_key[KEY_LENGTH];
	CachedSchema *entry;

	AcceptInvalidationMessages();
	if (!cache.valid)
		load();
	if (cache.rows == 0)
		return NULL;
	make_key(hash_key, topic, key);
	entry = hash_search(cache.by_topic, hash_key, HASH_FIND, NULL);
	return entry ? &entry->schema : NULL;
}

const char *
outbox_schema_format_name(SchemaFormat format)
{
	switch (format)
	{
		case SCHEMA_FORMAT_JSON_SCHEMA:
			return "json_schema";
		case SCHEMA_FORMAT_AVRO:
			return "avro";
		case SCHEMA_FORMAT_PROTOBUF:
			return "protobuf";
	}
	return "?";
}

/*
 * The statement trigger of outbox_topic_schema: every process reads the
 * table again after this statement's transaction commits.
 */
Datum
outbox_topic_schema_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigger = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("outbox_topic_schema_changed() must be called as a trigger")));
	CacheInvalidateRelcache(trigger->tg_relation);
	return PointerGetDatum(NULL);
}
