/*
 * delivery.c
 *		The delivery modes the worker can hold (delivery.h), and at least
 *		once, the trivial one: what Kafka acknowledged is final, so every
 *		read may go, and the window settles in groups as reports come.
 *		Per-key order after a failure is the worker's own (its rewind), in
 *		every mode.
 */
#include "worker/delivery.h"
#include "settings.h"

/* outbox.delivery's values, each to its mode: one row a mode. */
static const OutboxDeliveryMode *const modes[] = {
	[OUTBOX_AT_LEAST_ONCE] = &outbox_at_least_once,
	[OUTBOX_EXACTLY_ONCE] = &outbox_exactly_once,
};

const OutboxDeliveryMode *
outbox_delivery_mode(void)
{
	return modes[outbox_delivery];
}

/*
 * Every mode starts, not only the one set: a reload may choose another,
 * and the producer's configuration is built from the setting then.
 */
const OutboxDeliveryMode *
outbox_delivery_start(int shard, const char *who)
{
	for (size_t i = 0; i < lengthof(modes); i++)
		if (modes[i]->start != NULL)
			modes[i]->start(shard, who);
	return outbox_delivery_mode();
}

static bool
always(void)
{
	return true;
}

static bool
never(void)
{
	return false;
}

static bool
ready(OutboxProducer *producer, bool window_empty)
{
	return true;
}

static void
begin(OutboxProducer *producer)
{
}

static void
produced(OutboxProducer *producer, OutboxBatch *batch)
{
}

static DeliveryFinish
finish(OutboxProducer *producer, OutboxWindow *window, const char **why)
{
	return FINISH_NOTHING;
}

static void
settled(bool window_empty)
{
}

static TimestampTz
call_again_at(void)
{
	return 0;
}

static const char *
forget(void)
{
	return NULL;
}

static const char *
no_transactional_id(void)
{
	return NULL;
}

const OutboxDeliveryMode outbox_at_least_once = {
	.name = "at_least_once",
	.start = NULL,
	.transactional_id = no_transactional_id,
	.ready = ready,
	.begin = begin,
	.produced = produced,
	.finish = finish,
	.may_settle = always,
	.settle_now = never,
	.settled = settled,
	.call_again_at = call_again_at,
	.superseded = never,
	.forget = forget,
};
