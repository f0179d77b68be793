/*
 * errors.h
 *		What each librdkafka error means for pg_outbox, as one table
 *		(errors.c): whose fault it is, and what becomes of the event.
 */
#ifndef OUTBOX_KAFKA_ERRORS_H
#define OUTBOX_KAFKA_ERRORS_H

#include "event.h"

#include <librdkafka/rdkafka.h>

typedef enum KafkaErrorClass
{
	KAFKA_NO_ERROR,
	KAFKA_LATER,				/* Kafka will take the same event later */
	KAFKA_TXN_ABORTED,			/* exactly once: a fenced or aborted
								 * transaction, which blames no event */
	KAFKA_REFUSES_EVENT,		/* the event's fault: counts an attempt */
	KAFKA_BATCH_TOO_LARGE,		/* refused for its record batch's size (solo.c) */
	KAFKA_WITHDRAWN,			/* the worker purged it */
	KAFKA_REFUSES_PRODUCER,		/* fatal, and no event is to blame */
	KAFKA_FATAL					/* the producer failed: rebuild it */
} KafkaErrorClass;

/*
 * A delivery report of success without an offset (errors.c says why it
 * proves nothing). Librdkafka reports no delivery with this code of its own.
 */
#define UNPROVEN_DELIVERY RD_KAFKA_RESP_ERR__BEGIN

extern KafkaErrorClass outbox_kafka_error_class(rd_kafka_resp_err_t err);
extern rd_kafka_resp_err_t outbox_kafka_report_error(const rd_kafka_message_t *message);
extern void outbox_kafka_error_outcome(OutboxEvent *event, rd_kafka_resp_err_t err);
extern KafkaErrorClass outbox_kafka_fatal(rd_kafka_t *rk, char *reason, size_t size);
extern char *outbox_kafka_error_hint(rd_kafka_t *rk, rd_kafka_resp_err_t err);
extern KafkaErrorClass outbox_kafka_call_error(const rd_kafka_error_t *error);

#endif							/* OUTBOX_KAFKA_ERRORS_H */
