/*
 * schema_resolution.c
 *		Where a worker learns each topic's schema: it loads
 *		outbox_topic_schema before each produce (a row set or replaced in
 *		SQL applies to every event committed after it), asks the Schema
 *		Registry for what a row leaves to it (registers a schema text, looks
 *		up a subject's version, fetches the text of a fixed id), writes the
 *		answer back to the row (schema_id, schema_text, resolved_at,
 *		last_error: what the senders check payloads against), and gives each
 *		event the framing of its value and key.
 *
 * Whose fault a failure is, is the registry client's word: an outage (no
 * registry answered, or not as a registry should) makes the topic's events
 * wait, uncounted, as they do while Kafka is down; a refusal (no such
 * subject or version, a schema incompatible or invalid) blames the events,
 * which count attempts and become dead letters. Either way the registry is
 * asked again after the project's back-off, and what it said last stays on
 * the row. A row resolved once keeps its id through an outage (a 'latest'
 * looked up again when outbox.schema_registry_refresh has passed); a
 * fixed id frames JSON Schema and Protobuf records without any registry.
 *
 * Every call blocks the worker for at most outbox.schema_registry_timeout
 * per URL, and ends once it is asked to stop; after one outage in a
 * refresh, the other rows wait for their next turn instead of each timing
 * out in turn.
 */
#include "worker/schema_resolution.h"
#include "backoff.h"
#include "schema/registry_client.h"
#include "table/step.h"
#include "topic_name.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* The hash key: the part's letter ('v' or 'k'), then the topic. */
#define ENTRY_KEY_LEN (KAFKA_MAX_TOPIC_LENGTH + 2)

typedef struct SchemaEntry
{
	char		key[ENTRY_KEY_LEN];
	/* the row, as the last load read it */
	char	   *signature;		/* its configuration: a change resolves it again */
	char	   *format_name;
	SchemaFormat format;
	char		lookup;			/* SCHEMA_LOOKUP_* */
	char	   *subject;
	char	   *version;
	int			nindexes;
	int32	   *indexes;
	char	   *schema_text;
	int32		schema_id;		/* -1: NULL */
	TimestampTz resolved_at;	/* 0: NULL */
	/* this process's tries, kept across loads while the signature holds */
	bool		tried;
	RegistryResult result;
	char	   *error;
	int			failures;
	TimestampTz retry_at;
	bool		write_back;		/* resolved or failed since the last write */
} SchemaEntry;

static HTAB *entries = NULL;
static MemoryContext entries_context = NULL;

/*
 * The row's configuration, spelled the same way when loaded and when the
 * resolution is written back: the answer goes only to the row it was for.
 * A psprintf() format.
 */
#define SIGNATURE_SQL \
	"pg_catalog.format('%%L %%L %%L %%L %%L %%L %%L', format, lookup, subject, version, " \
	"message_indexes, CASE WHEN lookup OPERATOR(pg_catalog.=) 'register' THEN schema_text END, " \
	"CASE WHEN lookup OPERATOR(pg_catalog.=) 'id' THEN schema_id END)"

static char *
text_column(HeapTuple tuple, TupleDesc desc, int column)
{
	char	   *value = SPI_getvalue(tuple, desc, column);

	return value ? MemoryContextStrdup(entries_context, value) : NULL;
}

static void
read_indexes(SchemaEntry *entry, HeapTuple tuple, TupleDesc desc, int column)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, column, &isnull);
	Datum	   *values;
	int			n;

	deconstruct_array(DatumGetArrayTypeP(d), INT4OID, 4, true, TYPALIGN_INT,
					  &values, NULL, &n);
	entry->nindexes = n;
	entry->indexes = MemoryContextAlloc(entries_context, sizeof(int32) * Max(n, 1));
	for (int i = 0; i < n; i++)
		entry->indexes[i] = DatumGetInt32(values[i]);
}

/* The process's tries carry over to the same configuration. */
static void
carry_over(SchemaEntry *entry, HTAB *old)
{
	bool		found;
	SchemaEntry *before = old ? hash_search(old, entry->key, HASH_FIND, &found) : NULL;

	if (before == NULL || strcmp(before->signature, entry->signature) != 0)
		return;
	entry->tried = before->tried;
	entry->result = before->result;
	entry->error = before->error ? MemoryContextStrdup(entries_context, before->error) : NULL;
	entry->failures = before->failures;
	entry->retry_at = before->retry_at;
}

static void
load_row(HeapTuple tuple, TupleDesc desc, HTAB *old)
{
	char	   *part = SPI_getvalue(tuple, desc, 1);
	char	   *topic = SPI_getvalue(tuple, desc, 2);
	char		key[ENTRY_KEY_LEN];
	SchemaEntry *entry;
	bool		isnull;
	Datum		d;

	if (strlen(topic) > KAFKA_MAX_TOPIC_LENGTH)
		return;					/* no event can have it */
	memset(key, 0, sizeof(key));
	key[0] = part[0];
	strlcpy(key + 1, topic, sizeof(key) - 1);
	entry = hash_search(entries, key, HASH_ENTER, NULL);
	memset((char *) entry + sizeof(entry->key), 0, sizeof(SchemaEntry) - sizeof(entry->key));
	entry->format_name = text_column(tuple, desc, 3);
	for (SchemaFormat f = SCHEMA_FORMAT_JSON_SCHEMA; f <= SCHEMA_FORMAT_PROTOBUF; f++)
		if (strcmp(entry->format_name, outbox_schema_format_name(f)) == 0)
			entry->format = f;
	/* 'id', 'version', 'register': SCHEMA_LOOKUP_* */
	entry->lookup = SPI_getvalue(tuple, desc, 4)[0];
	entry->subject = text_column(tuple, desc, 5);
	entry->version = text_column(tuple, desc, 6);
	read_indexes(entry, tuple, desc, 7);
	entry->schema_text = text_column(tuple, desc, 8);
	d = SPI_getbinval(tuple, desc, 9, &isnull);
	entry->schema_id = isnull ? -1 : DatumGetInt32(d);
	d = SPI_getbinval(tuple, desc, 10, &isnull);
	entry->resolved_at = isnull ? 0 : DatumGetTimestampTz(d);
	entry->signature = text_column(tuple, desc, 11);
	carry_over(entry, old);
}

static SPIPlanPtr
load_plan(const char *schema)
{
	static SPIPlanPtr plan = NULL;
	static char plan_schema[NAMEDATALEN * 2 + 3] = "";
	const char *quoted = quote_identifier(schema);
	char	   *sql;

	if (plan != NULL && strcmp(plan_schema, quoted) == 0)
		return plan;
	if (plan != NULL)
		SPI_freeplan(plan);
	sql = psprintf("SELECT part, topic, format, lookup, subject, version, message_indexes, "
				   "schema_text, schema_id, resolved_at, " SIGNATURE_SQL
				   " FROM %s.outbox_topic_schema", quoted);
	plan = SPI_prepare(sql, 0, NULL);
	if (plan == NULL || SPI_keepplan(plan) != 0)
		elog(ERROR, "outbox: preparing the read of outbox_topic_schema failed");
	strlcpy(plan_schema, quoted, sizeof(plan_schema));
	return plan;
}

/* The rows afresh, in a step of their own; false without the extension. */
static bool
load_rows(char **schema_out)
{
	MemoryContext caller_context = CurrentMemoryContext;
	MemoryContext old_context = entries_context;
	HTAB	   *old = entries;
	HASHCTL		ctl;
	Oid			oid;
	char	   *schema;
	bool		found;

	outbox_step_begin("outbox: reading the topics' schemas");
	found = outbox_step_find_extension(&oid, &schema);
	entries_context = AllocSetContextCreate(TopMemoryContext, "outbox topic schemas",
											ALLOCSET_SMALL_SIZES);
	ctl.keysize = ENTRY_KEY_LEN;
	ctl.entrysize = sizeof(SchemaEntry);
	ctl.hcxt = entries_context;
	entries = hash_create("outbox topic schemas", 16, &ctl,
						  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	if (found)
	{
		if (SPI_execute_plan(load_plan(schema), NULL, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "outbox: reading outbox_topic_schema failed");
		for (uint64 i = 0; i < SPI_processed; i++)
			load_row(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, old);
		*schema_out = MemoryContextStrdup(entries_context, schema);
	}
	outbox_step_end(caller_context);
	if (old_context != NULL)
		MemoryContextDelete(old_context);
	return found;
}

/* Whether an entry's events can be framed now. */
static bool
usable(const SchemaEntry *entry)
{
	if (entry->schema_id < 0)
		return false;
	if (entry->resolved_at != 0)
		return entry->format != SCHEMA_FORMAT_AVRO || entry->schema_text != NULL;
	/* a fixed id needs the registry only for Avro's schema text */
	return entry->lookup == SCHEMA_LOOKUP_ID && entry->format != SCHEMA_FORMAT_AVRO;
}

/* Whether the registry is to be asked about an entry now. */
static bool
resolution_due(const SchemaEntry *entry, TimestampTz now)
{
	if (entry->tried && now < entry->retry_at)
		return false;
	if (!usable(entry))
		return true;
	if (entry->resolved_at == 0)
		/* a fixed id: its text, for the senders, once a registry is set */
		return outbox_schema_registry_url[0] != '\0';
	return entry->lookup == SCHEMA_LOOKUP_VERSION && strcmp(entry->version, "latest") == 0 &&
		now >= TimestampTzPlusMilliseconds(entry->resolved_at, outbox_schema_registry_refresh_ms);
}

/* One call to the registry for an entry, by how its row finds the schema. */
static void
resolve(SchemaEntry *entry, TimestampTz now)
{
	RegistrySchema found = {-1, 0, NULL};
	char	   *error = NULL;
	MemoryContext old = MemoryContextSwitchTo(entries_context);

	if (entry->lookup == SCHEMA_LOOKUP_REGISTER)
		entry->result = outbox_registry_register(entry->subject,
												 outbox_registry_schema_type(entry->format_name),
												 entry->schema_text, &found, &error);
	else if (entry->lookup == SCHEMA_LOOKUP_VERSION)
		entry->result = outbox_registry_version(entry->subject, entry->version, &found, &error);
	else
		entry->result = outbox_registry_schema(entry->schema_id, &found, &error);
	MemoryContextSwitchTo(old);
	entry->tried = true;
	entry->write_back = true;
	entry->error = error;
	if (entry->result == REGISTRY_OK)
	{
		entry->failures = 0;
		entry->schema_id = found.id;
		if (entry->lookup != SCHEMA_LOOKUP_REGISTER && found.schema != NULL)
			entry->schema_text = found.schema;
		entry->resolved_at = now;
		entry->retry_at = 0;
		return;
	}
	entry->failures++;
	entry->retry_at = TimestampTzPlusMilliseconds(now, outbox_backoff_ms(entry->failures));
}

static SPIPlanPtr
write_plan(const char *schema, bool resolved)
{
	static SPIPlanPtr plans[2];
	static char plan_schema[NAMEDATALEN * 2 + 3] = "";
	const char *quoted = quote_identifier(schema);
	Oid			types[5] = {TEXTOID, TEXTOID, TEXTOID, INT4OID, TEXTOID};

	if (strcmp(plan_schema, quoted) != 0)
	{
		for (int i = 0; i < 2; i++)
			if (plans[i] != NULL)
				SPI_freeplan(plans[i]);
		plans[0] = plans[1] = NULL;
		strlcpy(plan_schema, quoted, sizeof(plan_schema));
	}
	if (plans[resolved] != NULL)
		return plans[resolved];
	/* $1 topic, $2 part, $3 signature, then $4 id and $5 text, or $4 the error */
	plans[resolved] = SPI_prepare(psprintf(resolved ?
										   "UPDATE %s.outbox_topic_schema SET schema_id = $4, "
										   "schema_text = COALESCE($5, schema_text), "
										   "resolved_at = pg_catalog.now(), last_error = NULL "
										   "WHERE topic" EQ "$1 AND part" EQ "$2 AND " SIGNATURE_SQL EQ "$3" :
										   "UPDATE %s.outbox_topic_schema SET last_error = $4 "
										   "WHERE topic" EQ "$1 AND part" EQ "$2 AND " SIGNATURE_SQL EQ "$3 "
										   "AND (last_error IS NULL OR last_error OPERATOR(pg_catalog.<>) $4)",
										   quoted),
								  resolved ? 5 : 4, resolved ? types : (Oid[]) {TEXTOID, TEXTOID, TEXTOID, TEXTOID});
	if (plans[resolved] == NULL || SPI_keepplan(plans[resolved]) != 0)
		elog(ERROR, "outbox: preparing the write of outbox_topic_schema failed");
	return plans[resolved];
}

static void
write_entry(const char *schema, SchemaEntry *entry)
{
	bool		resolved = entry->result == REGISTRY_OK;
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

	values[0] = CStringGetTextDatum(entry->key + 1);
	values[1] = CStringGetTextDatum(entry->key[0] == 'k' ? "key" : "value");
	values[2] = CStringGetTextDatum(entry->signature);
	if (resolved)
	{
		values[3] = Int32GetDatum(entry->schema_id);
		if (entry->lookup == SCHEMA_LOOKUP_REGISTER || entry->schema_text == NULL)
			nulls[4] = 'n';
		else
			values[4] = CStringGetTextDatum(entry->schema_text);
	}
	else
		values[3] = CStringGetTextDatum(entry->error ? entry->error : "");
	if (SPI_execute_plan(write_plan(schema, resolved), values, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "outbox: writing outbox_topic_schema failed");
	entry->write_back = false;
}

/* What the registry said, onto the rows, in a step of its own. */
static void
write_back(const char *schema)
{
	MemoryContext caller_context = CurrentMemoryContext;
	HASH_SEQ_STATUS seq;
	SchemaEntry *entry;
	Oid			oid;
	char	   *found_schema;

	outbox_step_begin("outbox: writing the topics' schemas");
	if (outbox_step_find_extension(&oid, &found_schema) && strcmp(found_schema, schema) == 0)
	{
		hash_seq_init(&seq, entries);
		while ((entry = hash_seq_search(&seq)) != NULL)
			if (entry->write_back)
				write_entry(schema, entry);
	}
	outbox_step_end(caller_context);
}

void
outbox_schemas_refresh(void)
{
	HASH_SEQ_STATUS seq;
	SchemaEntry *entry;
	char	   *schema = NULL;
	TimestampTz now = GetCurrentTimestamp();
	bool		outage = false;
	bool		asked = false;

	if (!load_rows(&schema))
		return;
	hash_seq_init(&seq, entries);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		if (!resolution_due(entry, now))
			continue;
		if (outage)
		{
			/* the same registry: its next turn, not another time-out now */
			entry->retry_at = Max(entry->retry_at, TimestampTzPlusMilliseconds(now, outbox_backoff_ms(1)));
			continue;
		}
		resolve(entry, now);
		asked = true;
		outage = entry->result == REGISTRY_OUTAGE;
	}
	if (asked)
		write_back(schema);
}

static bool
part_framing(OutboxEvent *event, char part, OutboxFraming *framing)
{
	char		key[ENTRY_KEY_LEN];
	SchemaEntry *entry;

	framing->schema_id = -1;
	if (entries == NULL || strlen(event->topic) > KAFKA_MAX_TOPIC_LENGTH ||
		(part == 'k' ? event->key_isnull : event->payload_isnull))
		return true;
	memset(key, 0, sizeof(key));
	key[0] = part;
	strlcpy(key + 1, event->topic, sizeof(key) - 1);
	entry = hash_search(entries, key, HASH_FIND, NULL);
	if (entry == NULL)
		return true;
	if (usable(entry))
	{
		framing->schema_id = entry->schema_id;
		framing->format = entry->format;
		framing->nindexes = entry->nindexes;
		framing->indexes = entry->indexes;
		framing->schema_text = entry->schema_text;
		return true;
	}
	if (entry->tried && entry->result == REGISTRY_REFUSED)
	{
		event->outcome = EVENT_FAILED_PERMANENT;
		event->error = psprintf("the Schema Registry refused the %s schema of topic \"%s\": %s",
								part == 'k' ? "key" : "value", event->topic, entry->error);
	}
	else
	{
		event->outcome = EVENT_FAILED_RETRIABLE;
		event->error = psprintf("waiting for the Schema Registry, for the %s schema of topic \"%s\": %s",
								part == 'k' ? "key" : "value", event->topic,
								entry->error ? entry->error : "not asked yet");
	}
	return false;
}

bool
outbox_schemas_framing(OutboxEvent *event, OutboxFraming *value, OutboxFraming *key)
{
	return part_framing(event, 'v', value) && part_framing(event, 'k', key);
}

bool
outbox_schemas_waiting(void)
{
	HASH_SEQ_STATUS seq;
	SchemaEntry *entry;
	bool		waiting = false;

	if (entries == NULL)
		return false;
	hash_seq_init(&seq, entries);
	while ((entry = hash_seq_search(&seq)) != NULL)
		if (entry->tried && entry->result == REGISTRY_OUTAGE && !usable(entry))
			waiting = true;
	return waiting;
}
