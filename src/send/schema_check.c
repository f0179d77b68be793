/*
 * schema_check.c
 *		An event checked against its topic's Schema Registry schemas where it
 *		enters, in the sender's transaction: a payload that does not fit is
 *		the caller's error before any row is written, not a dead letter after
 *		the commit. The schemas are the ones outbox_topic_schema holds
 *		(topic_schema.c): nothing here asks the registry.
 *
 * What each format checks is its module's (json_schema.c, avro_value.c,
 * protobuf_wire.c); this file owns which input each format takes, and the
 * errors: 22023 for a value that does not fit, 55000 for a schema a worker
 * has not fetched yet, 0A000 for a schema that cannot be checked.
 */
#include "send/schema_check.h"
#include "event.h"
#include "schema/avro_value.h"
#include "schema/json_schema.h"
#include "schema/json_value.h"
#include "schema/protobuf_wire.h"
#include "schema/topic_schema.h"
#include "topic_name.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(outbox_check_schema_text);

/* one part of an event, as the check sees it */
typedef struct Part
{
	const TopicSchema *schema;
	const char *topic;
	const char *data;
	int			len;
	char		payload_type;	/* 0 for the key */
	Jsonb	   *json;
} Part;

static const char *
part_name(const Part *p)
{
	return p->schema->key ? "key" : "value";
}

static const char *
format_label(SchemaFormat format)
{
	switch (format)
	{
		case SCHEMA_FORMAT_JSON_SCHEMA:
			return "JSON Schema";
		case SCHEMA_FORMAT_AVRO:
			return "Avro schema";
		case SCHEMA_FORMAT_PROTOBUF:
			return "Protobuf schema";
	}
	return "schema";
}

/* which schema of the registry: subject, and id or version */
static char *
schema_label(const TopicSchema *s)
{
	StringInfoData label;

	initStringInfo(&label);
	if (s->subject)
		appendStringInfo(&label, "subject \"%s\", ", s->subject);
	if (s->schema_id >= 0)
		appendStringInfo(&label, "id %lld", (long long) s->schema_id);
	else if (s->version)
		appendStringInfo(&label, "version %s", s->version);
	else
		appendStringInfoString(&label, "not registered yet");
	return label.data;
}

static void
refuse(const Part *p, const char *path, const char *reason)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("outbox %s of topic \"%s\" does not fit its %s (%s)",
					part_name(p), p->topic, format_label(p->schema->format),
					schema_label(p->schema)),
			 path ? errdetail("%s %s.", path, reason) : errdetail("%s", reason)));
}

static void
cannot_check(const Part *p, const char *reason)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("outbox cannot check the %s of topic \"%s\" against its %s (%s)",
					part_name(p), p->topic, format_label(p->schema->format),
					schema_label(p->schema)),
			 errdetail("%s", reason),
			 errhint("Set a schema that pg_outbox checks (docs/message.md) with outbox_topic_schema().")));
}

static void
not_known_yet(const Part *p)
{
	const TopicSchema *s = p->schema;

	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("outbox cannot check the %s of topic \"%s\" yet: its %s (%s) has not been fetched from the Schema Registry",
					part_name(p), p->topic, format_label(s->format), schema_label(s)),
			 s->last_error ? errdetail("The last attempt failed: %s", s->last_error) : 0,
			 errhint("A worker fetches it, and outbox_topic_schema.last_error says why it could not; outbox_topic_schema(topic, format, schema => ...) gives it in SQL.")));
}

/* the part as JSON, for the formats that take JSON */
static Jsonb *
json_of(Part *p)
{
	char	   *error;
	Jsonb	   *json;

	if (p->json)
		return p->json;
	if (p->payload_type == OUTBOX_PAYLOAD_BYTES)
		refuse(p, NULL, psprintf("The value is bytea; a %s takes JSON: send it as jsonb or text.",
								 format_label(p->schema->format)));
	json = outbox_json_parse(p->data, p->len, &error);
	if (json == NULL)
		refuse(p, NULL, psprintf("The %s is not JSON: %s", part_name(p), error));
	return json;
}

static void
check_json_schema(Part *p)
{
	char	   *path;
	char	   *reason;

	if (!outbox_json_schema_fits(p->schema->schema_text, json_of(p), &path, &reason))
	{
		if (path == NULL)
			cannot_check(p, reason);
		refuse(p, path, reason);
	}
}

static void
check_avro(Part *p)
{
	StringInfoData encoded;
	char	   *path;
	char	   *reason;

	initStringInfo(&encoded);
	if (!outbox_avro_encode_jsonb(p->schema->schema_text, json_of(p), &encoded, &path, &reason))
	{
		if (path == NULL)
			cannot_check(p, reason);
		refuse(p, path, reason);
	}
	pfree(encoded.data);
}

static void
check_protobuf(Part *p)
{
	char	   *fault;

	if (p->payload_type == OUTBOX_PAYLOAD_JSON || p->payload_type == OUTBOX_PAYLOAD_TEXT)
		refuse(p, NULL, "The value is JSON or text; a Protobuf schema takes the encoded message as bytea.");
	fault = outbox_protobuf_wire_fault((const uint8 *) p->data, p->len);
	if (fault != NULL)
		refuse(p, NULL, psprintf("The %s is not a Protobuf message: %s.", part_name(p), fault));
}

static void
check_part(Part *p)
{
	switch (p->schema->format)
	{
		case SCHEMA_FORMAT_JSON_SCHEMA:
			if (p->schema->schema_text == NULL)
				not_known_yet(p);
			check_json_schema(p);
			break;
		case SCHEMA_FORMAT_AVRO:
			if (p->schema->schema_text == NULL)
				not_known_yet(p);
			check_avro(p);
			break;
		case SCHEMA_FORMAT_PROTOBUF:
			/* the wire format needs no schema text */
			check_protobuf(p);
			break;
	}
}

void
outbox_check_schemas(text *topic, bytea *payload, char payload_type, Jsonb *json,
					 const char *key, int keylen, bool key_isnull)
{
	char		name[KAFKA_MAX_TOPIC_LENGTH + 1];
	int			len = Min(VARSIZE_ANY_EXHDR(topic), KAFKA_MAX_TOPIC_LENGTH);
	Part		p = {.topic = name};

	memcpy(name, VARDATA_ANY(topic), len);
	name[len] = '\0';
	if (payload != NULL && (p.schema = outbox_topic_schema_find(name, false)) != NULL)
	{
		p.data = VARDATA_ANY(payload);
		p.len = VARSIZE_ANY_EXHDR(payload);
		p.payload_type = payload_type;
		p.json = json;
		check_part(&p);
	}
	if (!key_isnull && (p.schema = outbox_topic_schema_find(name, true)) != NULL)
	{
		p.data = key;
		p.len = keylen;
		p.payload_type = 0;
		p.json = NULL;
		check_part(&p);
	}
}

/*
 * outbox_check_schema_text(format, schema): outbox_topic_schema()'s check
 * that a schema text given in SQL is one the send check can use; a
 * Protobuf schema's text is the registry's to check.
 */
Datum
outbox_check_schema_text(PG_FUNCTION_ARGS)
{
	char	   *format;
	char	   *schema;
	char	   *refusal = NULL;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_VOID();
	format = text_to_cstring(PG_GETARG_TEXT_PP(0));
	schema = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (strcmp(format, "json_schema") == 0)
		refusal = outbox_json_schema_refusal(schema);
	else if (strcmp(format, "avro") == 0)
		refusal = outbox_avro_schema_refusal(schema);
	if (refusal != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("outbox_topic_schema: the %s schema is not one pg_outbox can check", format),
				 errdetail("%s", refusal)));
	PG_RETURN_VOID();
}
