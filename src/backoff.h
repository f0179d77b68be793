/*
 * backoff.h
 *		The one retry back-off policy: an event Kafka refused, a worker
 *		pass that failed, and librdkafka's reconnects all wait by it.
 */
#ifndef OUTBOX_BACKOFF_H
#define OUTBOX_BACKOFF_H

#include "event.h"

/*
 * The wait before the next try after `failures` failures in a row (1 for
 * the first): outbox.retry_backoff_min, doubling up to
 * outbox.retry_backoff_max.
 */
extern int	outbox_backoff_ms(int failures);

/* The wait before a failed event's retry (written into its row). */
extern int	outbox_backoff_event_ms(const OutboxEvent *event);

/* librdkafka's reconnect back-off bounds, from the same settings. */
extern int	outbox_reconnect_backoff_min_ms(void);
extern int	outbox_reconnect_backoff_max_ms(void);

#endif							/* OUTBOX_BACKOFF_H */
