/*
 * event.h
 *		One outbox event as the worker holds it: the row, copied out of SPI,
 *		and what became of it. The reader (queue.c) fills the row, the
 *		producer writes the outcome, the window (window.c) settles it, by
 *		the outcome's policy (event.c).
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

/* What the payload was given to outbox_send() as; names its content type. */
#define OUTBOX_PAYLOAD_JSON 'j'
#define OUTBOX_PAYLOAD_TEXT 't'
#define OUTBOX_PAYLOAD_BYTES 'b'
/*
 * The value is the record's as a Debezium-style router built it
 * (debezium.c): sent as it is in every format, with no content-type.
 */
#define OUTBOX_PAYLOAD_RECORD 'r'

/* How long a failure recorded on its row waits before its retry (backoff.c). */
typedef enum OutcomeBackoff
{
	BACKOFF_NONE,				/* not recorded */
	BACKOFF_SHORTEST,			/* the first step of the curve, every time */
	BACKOFF_BY_ATTEMPTS			/* longer with each attempt counted */
} OutcomeBackoff;

/*
 * What an outcome does once its event is settled, one owner for every
 * reader of an outcome (event.c): the settle (worker.c, queue.c), the
 * back-off (backoff.c) and the statistics (stats.c).
 */
typedef struct EventOutcomePolicy
{
	bool		deleted;		/* delivered: its row goes */
	bool		recorded;		/* a failure recorded on its row (last_error,
								 * next_attempt_at); counted as a failed
								 * attempt in the statistics */
	bool		counts_attempt; /* Kafka refused it: attempts + 1, and a dead
								 * letter after outbox.max_attempts */
	bool		rewinds;		/* produced and not delivered: the window
								 * rewinds */
	bool		read_again;		/* the next read starts at or below it (but a
								 * keyless failure recorded on its row) */
	OutcomeBackoff backoff;
} EventOutcomePolicy;

extern const EventOutcomePolicy outbox_outcome_policies[];

static inline const EventOutcomePolicy *
outbox_outcome_policy(EventOutcome outcome)
{
	return &outbox_outcome_policies[outcome];
}

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
	int32		partition;		/* chosen by the sender; -1: the partitioner's */
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
	bool		unproven;		/* reported delivered without an offset
								 * (kafka/errors.c): failed, but most likely
								 * written */
	bool		settled;		/* its row was deleted or updated (window.c) */
} OutboxEvent;

/* A timestamp as microseconds since the Unix epoch, as Kafka counts time. */
static inline int64
outbox_unix_microseconds(TimestampTz t)
{
	return t + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
}

/* A failure to record on the row. */
static inline bool
outbox_event_failed(const OutboxEvent *event)
{
	return outbox_outcome_policy(event->outcome)->recorded;
}

/* Produced, or meant to be, and not delivered: the window must rewind. */
static inline bool
outbox_event_undelivered(const OutboxEvent *event)
{
	return outbox_outcome_policy(event->outcome)->rewinds;
}

/* Whether two events share a key (keyless events share none). */
static inline bool
outbox_event_same_key(const OutboxEvent *a, const OutboxEvent *b)
{
	return !a->key_isnull && !b->key_isnull && a->keylen == b->keylen &&
		memcmp(a->key, b->key, a->keylen) == 0;
}

#endif							/* OUTBOX_EVENT_H */
