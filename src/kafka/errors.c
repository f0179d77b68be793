/*
 * errors.c
 *		Every decision pg_outbox takes on a librdkafka error, written once:
 *		which errors Kafka will get over (the event waits, uncounted), which
 *		blame the event (an attempt, then a dead letter), which refuse its
 *		batch for size, which refuse the producer as a whole, and which end a
 *		Kafka transaction. The producer (producer.c), exactly once
 *		(transaction.c) and the worker's fatal check ask here; what each
 *		outcome then does to the row is event.c's table.
 *
 * A new kind of Kafka failure is a line in error_classes, and a test.
 */
#include "kafka/errors.h"

typedef struct KafkaErrorEntry
{
	rd_kafka_resp_err_t err;
	KafkaErrorClass class;
} KafkaErrorEntry;

/*
 * Errors not listed refuse the event. Among those Kafka will get over: the
 * idempotent producer's gap-less failure (the events in flight beside one
 * Kafka refused fail with it, through no fault of their own). A topic
 * Kafka does not know is not among them: a typo'd topic would otherwise
 * hold its key forever; counted as an attempt, it becomes a dead letter
 * after outbox.max_attempts, and outbox_dead_letter_retry() sends it once
 * the topic exists. Kafka's size limits apply to the record batch (see
 * solo.c). The producer is refused as a whole when Kafka refuses it its
 * id (not authorized to write anywhere, or no idempotence): as an event's
 * report that still blames the event, until the producer's fatal error
 * says so (worker.c's kafka_unavailable).
 */
static const KafkaErrorEntry error_classes[] = {
	{RD_KAFKA_RESP_ERR_NO_ERROR, KAFKA_NO_ERROR},
	{RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__TIMED_OUT, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__TRANSPORT, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__RESOLVE, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__FATAL, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__QUEUE_FULL, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__NODE_UPDATE, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__STATE, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__ISR_INSUFF, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__INCONSISTENT, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_REPLICA_NOT_AVAILABLE, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_THROTTLING_QUOTA_EXCEEDED, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_NOT_COORDINATOR, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS, KAFKA_LATER},
	{RD_KAFKA_RESP_ERR__FENCED, KAFKA_TXN_ABORTED},
	{RD_KAFKA_RESP_ERR_PRODUCER_FENCED, KAFKA_TXN_ABORTED},
	{RD_KAFKA_RESP_ERR_INVALID_TXN_STATE, KAFKA_TXN_ABORTED},
	{RD_KAFKA_RESP_ERR_TRANSACTION_COORDINATOR_FENCED, KAFKA_TXN_ABORTED},
	{RD_KAFKA_RESP_ERR_INVALID_PRODUCER_ID_MAPPING, KAFKA_TXN_ABORTED},
	{RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, KAFKA_BATCH_TOO_LARGE},
	{RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE, KAFKA_BATCH_TOO_LARGE},
	{RD_KAFKA_RESP_ERR__PURGE_QUEUE, KAFKA_WITHDRAWN},
	{RD_KAFKA_RESP_ERR__PURGE_INFLIGHT, KAFKA_WITHDRAWN},
	{RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED, KAFKA_REFUSES_PRODUCER},
	{RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KAFKA_REFUSES_PRODUCER},
	{RD_KAFKA_RESP_ERR_INVALID_TRANSACTION_TIMEOUT, KAFKA_REFUSES_PRODUCER},
	{RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE, KAFKA_REFUSES_PRODUCER},
};

KafkaErrorClass
outbox_kafka_error_class(rd_kafka_resp_err_t err)
{
	for (size_t i = 0; i < lengthof(error_classes); i++)
		if (error_classes[i].err == err)
			return error_classes[i].class;
	return KAFKA_REFUSES_EVENT;
}

/*
 * A report of success that proves nothing: librdkafka's idempotent producer
 * also says NO_ERROR, with no offset, of a message whose own request failed
 * retriably once a later request of its partition succeeded (an "implicit
 * acknowledgement"). It counts on Kafka to have refused the later request
 * otherwise, which Kafka does only where it already holds the producer's
 * state: never on a partition this producer has not written to yet (after
 * a worker's start, a crash, a rebuild), where it takes any sequence
 * number. Only an offset proves a write; without one the event is produced
 * again (a duplicate, at worst; exactly once aborts its transaction).
 */
rd_kafka_resp_err_t
outbox_kafka_report_error(const rd_kafka_message_t *message)
{
	if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR && message->offset < 0)
		return UNPROVEN_DELIVERY;
	return message->err;
}

/* The outcome an error gives its event (a report, or a refusal at once). */
void
outbox_kafka_error_outcome(OutboxEvent *event, rd_kafka_resp_err_t err)
{
	event->unproven = (err == UNPROVEN_DELIVERY);
	if (err == UNPROVEN_DELIVERY)
	{
		event->outcome = EVENT_FAILED_RETRIABLE;
		event->error = "Kafka reported it delivered without an offset "
			"(an implicit acknowledgement), which does not prove it was written: produced again";
		return;
	}
	/*
	 * A partition the sender chose that the topic does not have: the
	 * event's own problem (a dead letter after its attempts), where a
	 * partition the partitioner chose is Kafka's, for later.
	 */
	if (err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION && event->partition >= 0)
	{
		event->outcome = EVENT_FAILED_PERMANENT;
		event->error = "the topic has no such partition: the one the sender chose (outbox.partition) is out of range";
		return;
	}
	switch (outbox_kafka_error_class(err))
	{
		case KAFKA_NO_ERROR:
			event->outcome = EVENT_DELIVERED;
			return;
		case KAFKA_WITHDRAWN:
			/* Kafka may have it or not: it is read again */
			event->outcome = EVENT_NOT_SENT;
			break;
		case KAFKA_BATCH_TOO_LARGE:
			/* alone, its own size is to blame */
			if (event->alone)
				event->outcome = EVENT_FAILED_PERMANENT;
			else
			{
				event->outcome = EVENT_FAILED_RETRIABLE;
				event->batch_too_large = true;
			}
			break;
		case KAFKA_LATER:
		case KAFKA_TXN_ABORTED:
			event->outcome = EVENT_FAILED_RETRIABLE;
			break;
		case KAFKA_REFUSES_EVENT:
		case KAFKA_REFUSES_PRODUCER:
		case KAFKA_FATAL:
			event->outcome = EVENT_FAILED_PERMANENT;
			break;
	}
	/* librdkafka's descriptions are static strings */
	event->error = rd_kafka_err2str(err);
}

/*
 * The one question to librdkafka whether a producer failed: KAFKA_NO_ERROR
 * if not, KAFKA_REFUSES_PRODUCER if Kafka refused it as a whole, else
 * KAFKA_FATAL; with librdkafka's reason when reason is not NULL.
 */
KafkaErrorClass
outbox_kafka_fatal(rd_kafka_t *rk, char *reason, size_t size)
{
	rd_kafka_resp_err_t err = rd_kafka_fatal_error(rk, reason, size);

	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		return KAFKA_NO_ERROR;
	if (outbox_kafka_error_class(err) == KAFKA_REFUSES_PRODUCER)
		return KAFKA_REFUSES_PRODUCER;
	return KAFKA_FATAL;
}

/*
 * librdkafka before 2.6.1 writes the client nonce twice into its SCRAM
 * client-final message (librdkafka issue 4895): Kafka 4.0 and later
 * refuse it as invalid credentials, whatever the password, and Kafka 3.x
 * took it. A refusal cannot tell that from a wrong password, so what an
 * operator can do about it goes beside the error.
 */
#define SCRAM_NONCE_FIXED 0x020601ff	/* librdkafka 2.6.1 */

static bool
conf_starts_with(rd_kafka_t *rk, const char *name, const char *prefix)
{
	char		value[64];
	size_t		size = sizeof(value);

	return rd_kafka_conf_get(rd_kafka_conf(rk), name, value, &size) == RD_KAFKA_CONF_OK &&
		pg_strncasecmp(value, prefix, strlen(prefix)) == 0;
}

/*
 * What to do about an error of the producer rk that librdkafka's reason
 * does not say, or NULL.
 */
char *
outbox_kafka_error_hint(rd_kafka_t *rk, rd_kafka_resp_err_t err)
{
	if (err != RD_KAFKA_RESP_ERR__AUTHENTICATION || rd_kafka_version() >= SCRAM_NONCE_FIXED ||
		!conf_starts_with(rk, "security.protocol", "sasl_") ||
		!conf_starts_with(rk, "sasl.mechanisms", "SCRAM-"))
		return NULL;
	return psprintf("SASL/SCRAM authentication failed with librdkafka %s, which sends a SCRAM "
					"message Kafka 4.0 and later reject (fixed in librdkafka 2.6.1): with "
					"Kafka 4, install librdkafka 2.6.1 or later, see docs/operations.md.",
					rd_kafka_version_str());
}

/*
 * What a failed transactional call (init, commit, abort) means: call it
 * again later, abort the transaction, or the producer failed.
 */
KafkaErrorClass
outbox_kafka_call_error(const rd_kafka_error_t *error)
{
	if (rd_kafka_error_is_retriable(error))
		return KAFKA_LATER;
	if (rd_kafka_error_txn_requires_abort(error))
		return KAFKA_TXN_ABORTED;
	return KAFKA_FATAL;
}
