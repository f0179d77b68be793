/*
 * producer.h
 *		The worker's Kafka producer (librdkafka).
 */
#ifndef OUTBOX_PRODUCER_H
#define OUTBOX_PRODUCER_H

#include "kafka/message.h"

typedef struct OutboxProducer OutboxProducer;

/* What the delivery reports served by one call said. */
typedef struct OutboxReports
{
	int			delivered;
	int			failed;
	int			unconfirmed;	/* of both: Kafka may or may not have it */
} OutboxReports;

/* What the delivery report of a transaction's progress record said. */
typedef struct OutboxProgressReport
{
	bool		reported;
	bool		failed;
	const char *error;			/* librdkafka's static description */
	int64		offset;			/* where Kafka wrote it */
} OutboxProgressReport;

/* transactional_id: the delivery mode's (exactly once), NULL for none */
extern OutboxProducer *outbox_producer_create(const char *name,
											  const char *client_id,
											  const char *transactional_id,
											  char **error);
extern void outbox_producer_destroy(OutboxProducer *producer);

/*
 * Whether the settings, read again, now give librdkafka other properties
 * than the producer was built with (it must then be rebuilt); logs which.
 */
extern bool outbox_producer_outdated(OutboxProducer *producer,
									 const char *transactional_id);

typedef enum ProduceResult
{
	PRODUCED,
	PRODUCE_REFUSED,			/* at once: the outcome is on the event */
	PRODUCE_HELD				/* its partition waits for a first report */
} ProduceResult;

/*
 * Hands one event to librdkafka; its delivery report writes the event's
 * outcome. Short of PRODUCED, the rest of its key is to be held back. The
 * record's memory must live until the report was served or the producer
 * destroyed.
 */
extern ProduceResult outbox_producer_produce(OutboxProducer *producer, OutboxEvent *event,
											 const OutboxRecord *record);

/* Serves what librdkafka has for us, without waiting; adds to *reports. */
extern void outbox_producer_serve(OutboxProducer *producer, OutboxReports *reports);

/* Readable when librdkafka has something to serve: for WaitEventSet. */
extern int	outbox_producer_wait_fd(OutboxProducer *producer);

/*
 * Fails everything not yet acknowledged, queued or in flight, so that
 * nothing behind an event that timed out is written before it is sent
 * again; purge_queued fails what librdkafka has not sent yet (after a
 * refusal: also its retries, see worker.c's withdraw_queued), and
 * withdraw_waiting only what the pacing holds back (partitions.c).
 */
extern void outbox_producer_withdraw(OutboxProducer *producer);
extern void outbox_producer_purge_queued(OutboxProducer *producer);
extern void outbox_producer_withdraw_waiting(OutboxProducer *producer);

/*
 * message.timeout.ms as the user set it (0: none), which the worker
 * enforces: time_out withdraws everything, the
 * events produced before produced_before as timed out.
 */
extern int	outbox_producer_timeout_ms(OutboxProducer *producer);
extern void outbox_producer_time_out(OutboxProducer *producer, TimestampTz produced_before);

/* Fails everything queued or in flight and serves the reports. */
extern void outbox_producer_purge(OutboxProducer *producer, OutboxReports *reports);

extern char *outbox_producer_fatal(OutboxProducer *producer, bool *whole);
extern bool outbox_producer_refused(OutboxProducer *producer);
extern void outbox_producer_report_state(OutboxProducer *producer);
extern bool outbox_producer_kafka_down(OutboxProducer *producer);
extern void outbox_producer_publish_brokers(OutboxProducer *producer);

/*
 * Makes a producer that has nothing to send connect to some broker, so
 * that its statistics tell whether Kafka came back (producer.c says why).
 */
extern void outbox_producer_probe(OutboxProducer *producer);

/* Exactly-once (transaction.c): the transactional producer's extras. */
struct rd_kafka_s;
extern struct rd_kafka_s *outbox_producer_handle(OutboxProducer *producer);
extern bool outbox_producer_produce_progress(OutboxProducer *producer, const char *topic,
											 int32 partition, const char *key,
											 const char *value, size_t valuelen,
											 const char **error);
extern const OutboxProgressReport *outbox_producer_progress(OutboxProducer *producer);

#endif							/* OUTBOX_PRODUCER_H */
