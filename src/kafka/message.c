/*
 * message.c
 *		Turns an event into its Kafka record for outbox.message_format:
 *		topic, key, value, headers and timestamp. The worker asks for a
 *		record and hands it to the producer, which sends it as it is. Each
 *		format is a row of formats[]: its value, the headers it adds and the
 *		header names it reserves (send.c refuses them), and what it adds to
 *		the record's size; adding one touches the table, the setting and
 *		the docs.
 *
 * Every format:
 * - the record's timestamp (CreateTime) is the event's created_at;
 * - a NULL payload (sent with a key) is a record with a null value, a
 *   tombstone, whatever the format;
 * - the headers are the event's own, then outbox-id and outbox-instance
 *   (consumers deduplicate on the pair).
 * 'payload' and 'cloudevents' add content-type (unless the event has one);
 * 'cloudevents' is the CloudEvents Kafka binding in binary mode: the value
 * is the payload, the attributes are ce_ headers.
 *
 * A topic with a schema (outbox_topic_schema, resolved by the worker) has
 * its value, or key, in Confluent's wire format (frame()), whatever the
 * format: the body is the JSON text for json_schema, its Avro binary for
 * avro, and for protobuf the payload's bytes (the format's envelope under
 * 'envelope', registrable as proto/outbox.proto). Such a value gets no
 * content-type: its deserializer reads the schema id.
 */
#include "kafka/message.h"
#include "kafka/envelope.h"
#include "schema/avro_value.h"
#include "settings.h"

#include "lib/stringinfo.h"
#include "port/pg_bswap.h"
#include "utils/datetime.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* Headers added to the event's own: outbox's 2, content-type, 7 CloudEvents. */
#define MAX_ADDED_HEADERS 10

static char *default_source = NULL;

/*
 * What the worker adds to an event (its own headers, the CloudEvents
 * attributes, the envelope's fields) fits in this margin over
 * outbox.max_message_bytes.
 */
#define ADDED_BYTES_MARGIN 65536L

typedef void (*ValueEncoder) (OutboxRecord *record, OutboxEvent *event, const char *instance);
typedef void (*HeaderAdder) (OutboxRecord *record, const OutboxEvent *event, const char *instance);

typedef struct MessageFormat
{
	int			format;			/* outbox.message_format's value */
	const char *name;			/* as the setting spells it */
	ValueEncoder encode;		/* the record's value of a payload */
	bool		content_type;	/* adds content-type (unless the event has one) */
	HeaderAdder add_headers;	/* its own headers, if any */
	const char *const *reserved;	/* the header names it sets, NULL-ended */
	const char *reserved_why;	/* outbox_send()'s detail when refusing one */
	long		added_bytes;	/* at most, over outbox.max_message_bytes */
} MessageFormat;

static void encode_envelope(OutboxRecord *record, OutboxEvent *event, const char *instance);
static void encode_payload(OutboxRecord *record, OutboxEvent *event, const char *instance);
static void add_cloudevents_headers(OutboxRecord *record, const OutboxEvent *event,
									const char *instance);

/* Refused in every format: each message carries them. */
static const char *const outbox_headers[] = {OUTBOX_ID_HEADER, OUTBOX_INSTANCE_HEADER, NULL};

/*
 * The CloudEvents attributes the workers set. Refused in every format, so
 * that what was sent stays valid when the format changes.
 */
static const char *const cloudevents_headers[] = {
	"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", NULL
};

static const MessageFormat formats[] = {
	{OUTBOX_FORMAT_ENVELOPE, "envelope", encode_envelope, false, NULL, NULL, NULL,
	ADDED_BYTES_MARGIN},
	{OUTBOX_FORMAT_PAYLOAD, "payload", encode_payload, true, NULL, NULL, NULL,
	ADDED_BYTES_MARGIN},
	{OUTBOX_FORMAT_CLOUDEVENTS, "cloudevents", encode_payload, true, add_cloudevents_headers,
	cloudevents_headers,
	"the workers set the CloudEvents attributes; the \"type\" header sets ce_type",
	ADDED_BYTES_MARGIN},
};

static const MessageFormat *
find_format(int format)
{
	for (size_t i = 0; i < lengthof(formats); i++)
		if (formats[i].format == format)
			return &formats[i];
	elog(ERROR, "outbox: unknown message format %d", format);
	pg_unreachable();
}

static bool
is_named(const char *const *names, const char *name, int len)
{
	for (; names != NULL && *names != NULL; names++)
		if ((int) strlen(*names) == len && strncmp(*names, name, len) == 0)
			return true;
	return false;
}

/*
 * Why a header name (not NUL-terminated) is reserved, or NULL if it is
 * not: outbox_send() refuses the names any format sets.
 */
const char *
outbox_message_header_reserved(const char *name, int len)
{
	if (is_named(outbox_headers, name, len))
		return psprintf("Every message carries the event's id and its instance in headers \"%s\" and \"%s\".",
						OUTBOX_ID_HEADER, OUTBOX_INSTANCE_HEADER);
	for (size_t i = 0; i < lengthof(formats); i++)
		if (is_named(formats[i].reserved, name, len))
			return psprintf("In outbox.message_format = '%s' %s.",
							formats[i].name, formats[i].reserved_why);
	return NULL;
}

/*
 * The payload, and the key and headers twice: the envelope repeats them.
 * send.c refuses an event over outbox.max_message_bytes by this count.
 */
Size
outbox_message_counted_size(Size payload, Size key, Size headers)
{
	return payload + 2 * (key + headers);
}

/* message.max.bytes: the limit plus the margin, within librdkafka's bounds. */
long
outbox_message_kafka_max_bytes(void)
{
	long		added = 0;

	/* the most any format adds: the limit does not depend on the format */
	for (size_t i = 0; i < lengthof(formats); i++)
		added = Max(added, formats[i].added_bytes);
	return Min(1000000000L, Max(1000000L, (long) outbox_max_message_bytes + added));
}

/* A URI reference naming the database: /postgresql/<name, percent-encoded>. */
void
outbox_message_init(const char *database)
{
	StringInfoData source;

	initStringInfo(&source);
	appendStringInfoString(&source, "/postgresql/");
	for (const char *c = database; *c; c++)
	{
		unsigned char u = (unsigned char) *c;

		if ((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') ||
			u == '-' || u == '.' || u == '_' || u == '~')
			appendStringInfoChar(&source, (char) u);
		else
			appendStringInfo(&source, "%%%02X", u);
	}
	default_source = MemoryContextStrdup(TopMemoryContext, source.data);
	pfree(source.data);
	outbox_envelope_init(database);
}

static const char *
header_value(const OutboxEvent *event, const char *name)
{
	for (int i = 0; i < event->nheaders; i++)
		if (strcmp(event->header_names[i], name) == 0)
			return event->header_values[i];
	return NULL;
}

static const char *
content_type(const OutboxEvent *event)
{
	switch (event->payload_type)
	{
		case OUTBOX_PAYLOAD_JSON:
			return "application/json";
		case OUTBOX_PAYLOAD_TEXT:
			return "text/plain; charset=utf-8";
		case OUTBOX_PAYLOAD_BYTES:
			return "application/octet-stream";
		default:
			return NULL;		/* sent before 0.3.0: not known */
	}
}

/* RFC 3339 in UTC, with microseconds. */
static char *
rfc3339(TimestampTz t)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (timestamp2tm(t, NULL, &tm, &fsec, NULL, NULL) != 0)
		return pstrdup("1970-01-01T00:00:00Z");
	return psprintf("%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year, tm.tm_mon, tm.tm_mday,
					tm.tm_hour, tm.tm_min, tm.tm_sec, (int) fsec);
}

static void
add_header(OutboxRecord *record, const char *name, const char *value)
{
	record->headers[record->nheaders].name = name;
	record->headers[record->nheaders].value = value;
	record->nheaders++;
}

static void
add_cloudevents_headers(OutboxRecord *record, const OutboxEvent *event, const char *instance)
{
	const char *type = header_value(event, "type");
	const char *traceparent = header_value(event, "traceparent");
	const char *tracestate = header_value(event, "tracestate");

	add_header(record, "ce_specversion", "1.0");
	add_header(record, "ce_id", psprintf("%s:" INT64_FORMAT, instance, event->id));
	add_header(record, "ce_source",
			   outbox_cloudevents_source[0] ? outbox_cloudevents_source : default_source);
	add_header(record, "ce_type", type ? type : event->topic);
	add_header(record, "ce_time", rfc3339(event->created_at));
	if (traceparent != NULL)
		add_header(record, "ce_traceparent", traceparent);
	if (tracestate != NULL)
		add_header(record, "ce_tracestate", tracestate);
}

/* The value: the payload as stored. */
static void
encode_payload(OutboxRecord *record, OutboxEvent *event, const char *instance)
{
	record->value = event->payload;
	record->valuelen = event->payloadlen;
}

/* The value: the envelope holding the payload. */
static void
encode_envelope(OutboxRecord *record, OutboxEvent *event, const char *instance)
{
	record->value = outbox_envelope_encode_copy(event, instance, &record->valuelen);
	/* the envelope holds the payload now: keep the batch's bytes at one copy */
	pfree(event->payload);
	event->payload = NULL;
}

/*
 * Confluent's wire format: the magic byte 0, the schema id (4 bytes, big
 * endian), for Protobuf the message's path (a count, then the indexes;
 * the first message, [0], as the single byte 0), then the body.
 */
static void
append_prefix(StringInfo buf, const OutboxFraming *framing)
{
	uint32		id = pg_hton32((uint32) framing->schema_id);

	appendStringInfoChar(buf, 0);
	appendBinaryStringInfo(buf, (const char *) &id, sizeof(id));
	if (framing->format == SCHEMA_FORMAT_PROTOBUF)
	{
		if (framing->nindexes == 1 && framing->indexes[0] == 0)
			appendStringInfoChar(buf, 0);
		else
		{
			outbox_zigzag_varint_append(buf, framing->nindexes);
			for (int i = 0; i < framing->nindexes; i++)
				outbox_zigzag_varint_append(buf, framing->indexes[i]);
		}
	}
}

/*
 * The framed bytes of a value or key: the prefix, then the body, which
 * Avro encodes from the JSON text with the schema the id names. False if
 * the JSON does not fit that schema, with *error.
 */
static bool
frame(const OutboxFraming *framing, const char *body, size_t len, const char **framed,
	  size_t *framedlen, char **error)
{
	StringInfoData buf;

	initStringInfo(&buf);
	enlargeStringInfo(&buf, (int) len + 16);
	append_prefix(&buf, framing);
	if (framing->format == SCHEMA_FORMAT_AVRO)
	{
		if (!outbox_avro_encode(framing->schema_text, body, (int) len, &buf, error))
		{
			pfree(buf.data);
			return false;
		}
	}
	else
		appendBinaryStringInfo(&buf, body, (int) len);
	*framed = buf.data;
	*framedlen = buf.len;
	return true;
}

/* A payload or key its schema refuses: the event's fault, with the reason. */
static bool
refuse(OutboxEvent *event, const char *part, const OutboxFraming *framing, const char *error)
{
	event->outcome = EVENT_FAILED_PERMANENT;
	event->error = psprintf("the %s does not fit the %s schema %d of topic \"%s\": %s", part,
							outbox_schema_format_name(framing->format), framing->schema_id,
							event->topic, error);
	return false;
}

/* The framed value: its body by the schema's format, after the prefix. */
static bool
encode_framed(OutboxRecord *record, OutboxEvent *event, const char *instance,
			  const MessageFormat *format, const OutboxFraming *framing)
{
	const char *framed;
	char	   *error = NULL;

	if (framing->format == SCHEMA_FORMAT_PROTOBUF && format->format == OUTBOX_FORMAT_ENVELOPE)
	{
		void	   *envelope;

		format->encode(record, event, instance);
		envelope = (void *) record->value;
		frame(framing, envelope, record->valuelen, &framed, &record->valuelen, &error);
		record->value = framed;
		pfree(envelope);
		return true;
	}
	if (!frame(framing, event->payload, event->payloadlen, &framed, &record->valuelen, &error))
		return refuse(event, "payload", framing, error);
	record->value = framed;
	return true;
}

bool
outbox_message_build(OutboxEvent *event, const char *instance, const OutboxFraming *value,
					 const OutboxFraming *key, OutboxRecord *record)
{
	/*
	 * A router's record (debezium.c) goes as it was built whatever the
	 * format: its payload unwrapped, and no content-type (content_type()
	 * knows none for it).
	 */
	const MessageFormat *format = find_format(event->payload_type == OUTBOX_PAYLOAD_RECORD ?
											  OUTBOX_FORMAT_PAYLOAD : outbox_message_format);
	const char *type = content_type(event);

	bool		framed = value != NULL && value->schema_id >= 0 && !event->payload_isnull;

	record->topic = event->topic;
	record->key = event->key_isnull ? NULL : event->key;
	record->keylen = event->key_isnull ? 0 : (size_t) event->keylen;
	if (key != NULL && key->schema_id >= 0 && !event->key_isnull)
	{
		char	   *error = NULL;

		if (!frame(key, event->key, event->keylen, &record->key, &record->keylen, &error))
			return refuse(event, "key", key, error);
	}
	record->timestamp_ms = outbox_unix_microseconds(event->created_at) / 1000;
	record->partition = event->partition;
	record->headers = palloc(sizeof(OutboxHeader) * (event->nheaders + MAX_ADDED_HEADERS));
	record->nheaders = 0;
	for (int i = 0; i < event->nheaders; i++)
		add_header(record, event->header_names[i], event->header_values[i]);
	add_header(record, OUTBOX_ID_HEADER, psprintf(INT64_FORMAT, event->id));
	add_header(record, OUTBOX_INSTANCE_HEADER, instance);
	if (format->content_type && type != NULL && !framed &&
		!event->payload_isnull && header_value(event, "content-type") == NULL)
		add_header(record, "content-type", type);
	if (format->add_headers != NULL)
		format->add_headers(record, event, instance);
	/* a tombstone, whatever the format */
	if (event->payload_isnull)
	{
		record->value = NULL;
		record->valuelen = 0;
	}
	else if (framed)
		return encode_framed(record, event, instance, format, value);
	else
		format->encode(record, event, instance);
	return true;
}
