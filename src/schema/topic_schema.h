/*
 * topic_schema.h
 *		The topics whose records are framed for a Schema Registry, as
 *		outbox_topic_schema holds them: the one reader of that table, for the
 *		senders' backends (the check in the sender's transaction) and the
 *		workers (resolving and framing).
 */
#ifndef OUTBOX_SCHEMA_TOPIC_SCHEMA_H
#define OUTBOX_SCHEMA_TOPIC_SCHEMA_H

#include "postgres.h"

typedef enum SchemaFormat
{
	SCHEMA_FORMAT_JSON_SCHEMA,
	SCHEMA_FORMAT_AVRO,
	SCHEMA_FORMAT_PROTOBUF
} SchemaFormat;

/* lookup: how the registry's schema is found */
#define SCHEMA_LOOKUP_ID 'i'
#define SCHEMA_LOOKUP_VERSION 'v'
#define SCHEMA_LOOKUP_REGISTER 'r'

typedef struct TopicSchema
{
	const char *topic;
	bool		key;			/* the record's key, else its value */
	SchemaFormat format;
	char		lookup;			/* SCHEMA_LOOKUP_* */
	const char *subject;		/* may be NULL with lookup by id */
	const char *version;		/* a number or "latest"; NULL unless lookup by version */
	int			n_indexes;
	const int32 *message_indexes;	/* Protobuf's path to the message, {0} by default */
	const char *schema_text;	/* NULL until known */
	int64		schema_id;		/* -1 until known */
	const char *last_error;		/* the workers' last failure to resolve it, or NULL */
} TopicSchema;

/*
 * The schema of a topic's value (key false) or key, NULL if it has none.
 * Sees every change committed before the call (and the caller's own), with
 * no privilege on the table; reads the table again only after a change.
 * Call it in a transaction. Valid until the next call.
 */
extern const TopicSchema *outbox_topic_schema_find(const char *topic, bool key);

/* the name of a format as outbox_topic_schema.format spells it */
extern const char *outbox_schema_format_name(SchemaFormat format);

#endif							/* OUTBOX_SCHEMA_TOPIC_SCHEMA_H */
