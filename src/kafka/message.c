/*
 * message.c
 *		Turns an event into its Kafka record for outbox.message_format:
 *		topic, key, value, headers and timestamp. The worker asks for a
 *		record and hands it to the producer, which sends it as it is; adding
 *		a format touches this file, the setting and the docs only.
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
 */
#include "kafka/message.h"
#include "kafka/envelope.h"
#include "settings.h"

#include "lib/stringinfo.h"
#include "utils/datetime.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define UNIX_EPOCH_OFFSET_US ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

/* Headers added to the event's own: outbox's 2, content-type, 7 CloudEvents. */
#define MAX_ADDED_HEADERS 10

static char *default_source = NULL;

/*
 * What the worker adds to an event (its own headers, the CloudEvents
 * attributes, the envelope's fields) fits in this margin over
 * outbox.max_message_bytes.
 */
#define ADDED_BYTES_MARGIN 65536L

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
	return Min(1000000000L, Max(1000000L, (long) outbox_max_message_bytes + ADDED_BYTES_MARGIN));
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
		case 'j':
			return "application/json";
		case 't':
			return "text/plain; charset=utf-8";
		case 'b':
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

/* The value: the payload as stored, or the envelope holding it. */
static void
set_value(OutboxRecord *record, OutboxEvent *event, const char *instance)
{
	if (event->payload_isnull)
	{
		record->value = NULL;
		record->valuelen = 0;
		return;
	}
	if (outbox_message_format != OUTBOX_FORMAT_ENVELOPE)
	{
		record->value = event->payload;
		record->valuelen = event->payloadlen;
		return;
	}
	record->value = outbox_envelope_encode_copy(event, instance, &record->valuelen);
	/* the envelope holds the payload now: keep the batch's bytes at one copy */
	pfree(event->payload);
	event->payload = NULL;
}

void
outbox_message_build(OutboxEvent *event, const char *instance, OutboxRecord *record)
{
	const char *type = content_type(event);

	record->topic = event->topic;
	record->key = event->key_isnull ? NULL : event->key;
	record->keylen = event->key_isnull ? 0 : (size_t) event->keylen;
	record->timestamp_ms = (event->created_at + UNIX_EPOCH_OFFSET_US) / 1000;
	record->headers = palloc(sizeof(OutboxHeader) * (event->nheaders + MAX_ADDED_HEADERS));
	record->nheaders = 0;
	for (int i = 0; i < event->nheaders; i++)
		add_header(record, event->header_names[i], event->header_values[i]);
	add_header(record, OUTBOX_ID_HEADER, psprintf(INT64_FORMAT, event->id));
	add_header(record, OUTBOX_INSTANCE_HEADER, instance);
	if (outbox_message_format != OUTBOX_FORMAT_ENVELOPE && type != NULL &&
		!event->payload_isnull && header_value(event, "content-type") == NULL)
		add_header(record, "content-type", type);
	if (outbox_message_format == OUTBOX_FORMAT_CLOUDEVENTS)
		add_cloudevents_headers(record, event, instance);
	set_value(record, event, instance);
}
