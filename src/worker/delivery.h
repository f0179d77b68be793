/*
 * delivery.h
 *		The delivery mode (outbox.delivery) as the worker holds it: the few
 *		points of the pipeline where a mode acts, as a table of operations.
 *		At least once is the trivial mode (delivery.c); exactly once is
 *		transaction.c's (with progress.c). A new mode is a file defining
 *		its table, declared here and registered in delivery.c.
 *
 * The worker chooses the mode of outbox.delivery when it makes a producer
 * (a change of the setting rebuilds the producer once the window drained,
 * so a mode always serves the producer it was chosen with), and keeps it
 * until the next one.
 */
#ifndef OUTBOX_DELIVERY_H
#define OUTBOX_DELIVERY_H

#include "kafka/producer.h"
#include "table/queue.h"
#include "worker/window.h"

#include "utils/timestamp.h"

/* What finish asks of the worker once every report is in. */
typedef enum DeliveryFinish
{
	FINISH_NOTHING,				/* nothing to do, not due yet, or to call again */
	FINISH_SETTLE,				/* committed: settle the window, then read */
	FINISH_READ_AGAIN,			/* not committed: read its delivered events
								 * again */
	FINISH_READ_AGAIN_LATER,	/* the same, but the mode's own record failed
								 * (no event's fault): after a back-off */
	FINISH_REBUILD				/* its outcome is unknown: read again with a
								 * new producer */
} DeliveryFinish;

typedef struct OutboxDeliveryMode
{
	const char *name;			/* outbox.delivery's value */

	/* At the worker's start, whatever the mode (who: the worker, for the log). */
	void		(*start) (int shard, const char *who);

	/* The transactional.id its producers are built with, NULL for none. */
	const char *(*transactional_id) (void);

	/* Whether a read may be produced now. May block briefly. */
	bool		(*ready) (OutboxProducer *producer, bool window_empty);

	/* Around the produce of a read. */
	void		(*begin) (OutboxProducer *producer);
	void		(*produced) (OutboxProducer *producer, OutboxBatch *batch);

	/*
	 * Once every report is in (called every pass; NULL producer: none);
	 * *why: what the events read again are told.
	 */
	DeliveryFinish (*finish) (OutboxProducer *producer, OutboxWindow *window,
							  const char **why);

	/* Whether the window may be settled; whether at once. */
	bool		(*may_settle) (void);
	bool		(*settle_now) (void);

	/* After a settle. */
	void		(*settled) (bool window_empty);

	/* When finish is to be called again of itself, 0 if not. */
	TimestampTz (*call_again_at) (void);

	/* Another server delivers the shard: this one delivers nothing. */
	bool		(*superseded) (void);

	/*
	 * The producer goes: why what the window delivered must be read again
	 * (the mode had not made it final), NULL if it need not.
	 */
	const char *(*forget) (void);
} OutboxDeliveryMode;

extern const OutboxDeliveryMode outbox_at_least_once;	/* delivery.c */
extern const OutboxDeliveryMode outbox_exactly_once;	/* transaction.c */

/* Starts every mode; returns the one outbox.delivery names now. */
extern const OutboxDeliveryMode *outbox_delivery_start(int shard, const char *who);

/* The mode outbox.delivery names now. */
extern const OutboxDeliveryMode *outbox_delivery_mode(void);

#endif							/* OUTBOX_DELIVERY_H */
