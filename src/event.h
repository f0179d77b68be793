/*
 * event.h
 *		One outbox event as the worker holds it: the row, copied out of SPI,
 *		and what became of it. The reader (queue.c) fills the row, the
 *		producer writes the outcome, the window (window.c) settles it.
 */
#ifndef OUTBOX_EVENT_H
#define OUTBOX_EVENT_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/itemptr.h"

typedef enum EventOutcome
{
	EVENT_SKIPPED,				/* not produced: held back, read again later */
	EVENT_IN_FLIGHT,
	EVENT_DELIVERED,
	EVENT_FAILED_RETRIABLE,		/* Kafka will take it later: no attempt counted */
	EVENT_FAILED_PERMANENT,		/* counts an attempt; may become a dead letter */
	EVENT_NOT_SENT				/* withdrawn (purged) by the worker, or Kafka
								 * took nothing: read again, nothing recorded */
} EventOutcome;

typedef struct OutboxEvent
{
	int64		id;
	ItemPointerData ctid;		/* where the row is, to delete it by */
	char	   *topic;
	char	   *key;
	int			keylen;
	bool		key_isnull;
	char	   *payload;
	int			payloadlen;
	bool		payload_isnull;	/* a tombstone */
	char		payload_type;	/* what outbox_send() was given, 0 if unknown */
	int			nheaders;
	char	  **header_names;
	char	  **header_values;
	TimestampTz created_at;
	int64		size;			/* bytes the worker holds for it: payload, key,
								 * headers, topic, and librdkafka's copies */
	int			attempts;		/* refusals counted so far */
	EventOutcome outcome;
	TimestampTz produced_at;	/* when it was last handed to librdkafka */
	TimestampTz acked_at;		/* when Kafka acknowledged it (DELIVERED) */
	const char *error;			/* set with a FAILED outcome */
	bool		alone;			/* produced with nothing else in flight */
	bool		batch_too_large;	/* Kafka refused its batch for size, and
									 * it was not alone: see solo.c */
	bool		settled;		/* its row was deleted or updated (window.c) */
} OutboxEvent;

/* A failure to record on the row. */
static inline bool
outbox_event_failed(const OutboxEvent *event)
{
	return event->outcome == EVENT_FAILED_RETRIABLE ||
		event->outcome == EVENT_FAILED_PERMANENT;
}

/* Produced, or meant to be, and not delivered: the window must rewind. */
static inline bool
outbox_event_undelivered(const OutboxEvent *event)
{
	return outbox_event_failed(event) || event->outcome == EVENT_NOT_SENT;
}

/* Whether two events share a key (keyless events share none). */
static inline bool
outbox_event_same_key(const OutboxEvent *a, const OutboxEvent *b)
{
	return !a->key_isnull && !b->key_isnull && a->keylen == b->keylen &&
		memcmp(a->key, b->key, a->keylen) == 0;
}

#endif							/* OUTBOX_EVENT_H */
