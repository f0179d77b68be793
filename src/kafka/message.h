/*
 * message.h
 *		The Kafka record an event becomes, in the configured format.
 */
#ifndef OUTBOX_MESSAGE_H
#define OUTBOX_MESSAGE_H

#include "event.h"

/* Kafka header that carries the event id on every message */
#define OUTBOX_ID_HEADER "outbox-id"

/*
 * Kafka header that names the id space the event id belongs to: a UUID made
 * at CREATE EXTENSION and replaced when ids may repeat (promotion to a new
 * timeline). Consumers deduplicate on the pair.
 */
#define OUTBOX_INSTANCE_HEADER "outbox-instance"

typedef struct OutboxHeader
{
	const char *name;
	const char *value;
} OutboxHeader;

typedef struct OutboxRecord
{
	const char *topic;
	const char *key;			/* NULL: no key */
	size_t		keylen;
	const void *value;			/* NULL: a tombstone */
	size_t		valuelen;
	int			nheaders;
	OutboxHeader *headers;
	int64		timestamp_ms;	/* CreateTime: the event's created_at */
	int32		partition;		/* the sender's choice; -1: the partitioner's */
} OutboxRecord;

extern void outbox_message_init(const char *database);

/*
 * The size rule of a record, written once: what an event counts against
 * outbox.max_message_bytes when it is sent, and the limit librdkafka is
 * given, which leaves room for what the worker adds.
 */
extern Size outbox_message_counted_size(Size payload, Size key, Size headers);
extern long outbox_message_kafka_max_bytes(void);

/* Why outbox_send() must refuse a header name, or NULL (message.c). */
extern const char *outbox_message_header_reserved(const char *name, int len);

/*
 * Builds the record of an event, in the current memory context (the
 * batch's): librdkafka sends the value without a copy of its own, so it
 * must live until the event's delivery report was served.
 */
extern void outbox_message_build(OutboxEvent *event, const char *instance,
								 OutboxRecord *record);

#endif							/* OUTBOX_MESSAGE_H */
