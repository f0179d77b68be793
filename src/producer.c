/*
 * producer.c
 *		The worker's Kafka producer: builds the librdkafka handle from the
 *		settings, produces events, serves delivery reports, and sorts each
 *		failure into "Kafka will take it later" or "Kafka refuses it".
 *
 * Rules that keep the server safe (see the README): the handle is created
 * in the worker, never before fork; librdkafka's logs, errors and delivery
 * reports reach us only through rd_kafka_poll on this thread (log queue),
 * and the callbacks only record what happened: they never ereport. A
 * delivery report writes its event's outcome and nothing else; librdkafka
 * wakes the worker through a pipe when it has reports to serve.
 */
#include "producer.h"
#include "backoff.h"
#include "settings.h"
#include "stats.h"

#include <fcntl.h>
#include <unistd.h>
#include <librdkafka/rdkafka.h>

#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* Every librdkafka call that can fail goes through this check. */
#define KAFKA_CONF_SET(conf, name, value) \
	do { \
		char		errstr_[512]; \
		if (rd_kafka_conf_set((conf), (name), (value), errstr_, sizeof(errstr_)) != RD_KAFKA_CONF_OK) \
		{ \
			*error = psprintf("%s=%s: %s", (name), (value), errstr_); \
			rd_kafka_conf_destroy(conf); \
			return NULL; \
		} \
	} while (0)

/* Statistics kept between two looks of the worker; older ones are dropped. */
#define MAX_PENDING_STATISTICS 8

struct OutboxProducer
{
	rd_kafka_t *rk;
	const char *name;			/* the worker's, for the log */
	int			wake_pipe[2];	/* librdkafka writes to [1] when it has news */
	int			in_flight;		/* produced, report not served */
	OutboxReports unclaimed;	/* reports served, not yet handed out */
	rd_kafka_resp_err_t last_error;	/* from error_cb, not yet logged */
	char		last_reason[512];
	rd_kafka_resp_err_t logged_error;	/* last one logged, to log once */
	bool		unreachable;	/* logged "unreachable", not yet recovered */
	bool		kafka_down;		/* no broker reachable, none seen up since */
	/* librdkafka's statistics not yet published, oldest first (malloc'd) */
	char	   *statistics[MAX_PENDING_STATISTICS];
	int			nstatistics;
	/* what the statistics said of each broker, rtt as last measured */
	OutboxBrokerInfo brokers[OUTBOX_MAX_BROKERS];
	bool		broker_was_up[OUTBOX_MAX_BROKERS];
	int			nbrokers;
};

/*
 * Errors after which Kafka will accept the same event later. A topic Kafka
 * does not know is not among them: a typo'd topic would otherwise hold its
 * key forever; counted as an attempt, it becomes a dead letter after
 * outbox.max_attempts, and outbox_dead_letter_retry() sends it once the
 * topic exists.
 */
static bool
is_retriable(rd_kafka_resp_err_t err)
{
	switch (err)
	{
		case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
		case RD_KAFKA_RESP_ERR__TIMED_OUT:
		case RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE:
		case RD_KAFKA_RESP_ERR__TRANSPORT:
		case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
		case RD_KAFKA_RESP_ERR__RESOLVE:
		case RD_KAFKA_RESP_ERR__FATAL:
		case RD_KAFKA_RESP_ERR__QUEUE_FULL:
		case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
		case RD_KAFKA_RESP_ERR__NODE_UPDATE:
		case RD_KAFKA_RESP_ERR__STATE:
		case RD_KAFKA_RESP_ERR__ISR_INSUFF:
		case RD_KAFKA_RESP_ERR__INCONSISTENT:
		case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
		case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
		case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
		case RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE:
		case RD_KAFKA_RESP_ERR_REPLICA_NOT_AVAILABLE:
		case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
		case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
		case RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION:
		case RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR:
		case RD_KAFKA_RESP_ERR_THROTTLING_QUOTA_EXCEEDED:
		case RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER:
		case RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID:
		case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH:
		case RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE:
		case RD_KAFKA_RESP_ERR_NOT_COORDINATOR:
		case RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS:
		case RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS:
			return true;
		default:
			return false;
	}
}

static void
record_outcome(OutboxEvent *event, rd_kafka_resp_err_t err)
{
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		event->outcome = EVENT_DELIVERED;
		return;
	}
	/* the worker purged it: Kafka may have it or not, it is read again */
	if (err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT)
		event->outcome = EVENT_NOT_SENT;
	else
		event->outcome = is_retriable(err) ? EVENT_FAILED_RETRIABLE : EVENT_FAILED_PERMANENT;
	/* librdkafka's descriptions are static strings */
	event->error = rd_kafka_err2str(err);
}

/* Served on this thread from poll/flush: records, never reports. */
static void
on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *message, void *opaque)
{
	OutboxProducer *producer = (OutboxProducer *) opaque;
	OutboxEvent *event = (OutboxEvent *) message->_private;

	record_outcome(event, message->err);
	producer->in_flight--;
	if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		event->acked_at = GetCurrentTimestamp();
		producer->unreachable = false;
		producer->kafka_down = false;
		producer->unclaimed.delivered++;
	}
	else
		producer->unclaimed.failed++;
}

static void
on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	OutboxProducer *producer = (OutboxProducer *) opaque;

	producer->last_error = (rd_kafka_resp_err_t) err;
	strlcpy(producer->last_reason, reason, sizeof(producer->last_reason));
	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
		producer->kafka_down = true;
}

/*
 * Keeps librdkafka's statistics (JSON) for the worker to publish; parsing
 * them here could raise an error inside librdkafka's call.
 */
static int
on_statistics(rd_kafka_t *rk, char *json, size_t json_len, void *opaque)
{
	OutboxProducer *producer = (OutboxProducer *) opaque;
	char	   *copy = malloc(json_len + 1);

	if (copy == NULL)
		return 0;
	memcpy(copy, json, json_len);
	copy[json_len] = '\0';
	if (producer->nstatistics == MAX_PENDING_STATISTICS)
	{
		free(producer->statistics[0]);
		memmove(producer->statistics, producer->statistics + 1,
				sizeof(char *) * (MAX_PENDING_STATISTICS - 1));
		producer->nstatistics--;
	}
	producer->statistics[producer->nstatistics++] = copy;
	return 0;
}

/* librdkafka's own chatter (reconnect attempts...) stays at DEBUG1. */
static void
on_log(const rd_kafka_t *rk, int level, const char *facility, const char *message)
{
	ereport(DEBUG1,
			(errmsg_internal("outbox: librdkafka %s: %s", facility, message)));
}

static bool
set_user_property(void *target, const char *name, const char *value, char **error)
{
	char		errstr[512];

	if (rd_kafka_conf_set((rd_kafka_conf_t *) target, name, value,
						  errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
	{
		*error = psprintf("outbox.kafka_config: %s", errstr);
		return false;
	}
	return true;
}

static long
conf_number(rd_kafka_conf_t *conf, const char *name)
{
	char		value[64];
	size_t		size = sizeof(value);

	if (rd_kafka_conf_get(conf, name, value, &size) != RD_KAFKA_CONF_OK)
		return -1;
	return atol(value);
}

/*
 * librdkafka waits topic.metadata.propagation.max.ms for a topic it does
 * not know before it says "unknown topic"; a message that times out first
 * only says "timed out", which is retried forever. So an unknown topic must
 * be reported within message.timeout.ms.
 */
static bool
fit_topic_wait_to_timeout(rd_kafka_conf_t *conf, char **error)
{
	long		timeout_ms = conf_number(conf, "message.timeout.ms");
	long		wait_ms = conf_number(conf, "topic.metadata.propagation.max.ms");
	char		value[32];

	if (timeout_ms <= 0 || wait_ms < 0 || wait_ms < timeout_ms)
		return true;
	snprintf(value, sizeof(value), "%ld", Max(1L, timeout_ms / 2));
	KAFKA_CONF_SET(conf, "topic.metadata.propagation.max.ms", value);
	return true;
}

static rd_kafka_conf_t *
build_conf(OutboxProducer *producer, const char *client_id, char **error)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char		value[64];

	KAFKA_CONF_SET(conf, "bootstrap.servers", outbox_brokers);
	KAFKA_CONF_SET(conf, "client.id", client_id);
	/* the documented way to keep partition order through retries */
	KAFKA_CONF_SET(conf, "enable.idempotence", "true");
	/* a message lost after a later one was written is fatal, not a gap */
	KAFKA_CONF_SET(conf, "enable.gapless.guarantee", "true");
	/* places keys on the partitions the Java client would choose */
	KAFKA_CONF_SET(conf, "partitioner", "murmur2_random");
	KAFKA_CONF_SET(conf, "log.queue", "true");
	/*
	 * An event goes out as soon as it is produced: under load, events
	 * produced while a request is in flight make the next one bigger.
	 */
	KAFKA_CONF_SET(conf, "linger.ms", "0");
	/* requests pipelined on one connection must not wait for delayed ACKs */
	KAFKA_CONF_SET(conf, "socket.nagle.disable", "true");
	snprintf(value, sizeof(value), "%d", outbox_reconnect_backoff_min_ms());
	KAFKA_CONF_SET(conf, "reconnect.backoff.ms", value);
	snprintf(value, sizeof(value), "%d", outbox_reconnect_backoff_max_ms());
	KAFKA_CONF_SET(conf, "reconnect.backoff.max.ms", value);
	/* for outbox_kafka_brokers; outbox.kafka_config may change or disable it */
	KAFKA_CONF_SET(conf, "statistics.interval.ms", "1000");
	snprintf(value, sizeof(value), "%d",
			 (int) Min(1000000000L, Max(1000000L, (long) outbox_max_message_bytes + 65536L)));
	KAFKA_CONF_SET(conf, "message.max.bytes", value);
	/*
	 * The window is queued at most: outbox.window_bytes, plus the event
	 * that crossed it, plus headers and envelopes.
	 */
	snprintf(value, sizeof(value), "%ld",
			 ((long) outbox_window_bytes + outbox_max_message_bytes) / 1024 + 4096);
	KAFKA_CONF_SET(conf, "queue.buffering.max.kbytes", value);
	snprintf(value, sizeof(value), "%d", Max(100000, outbox_window_size + outbox_batch_size));
	KAFKA_CONF_SET(conf, "queue.buffering.max.messages", value);

	if (!outbox_apply_kafka_config(outbox_kafka_config, conf, set_user_property, error))
	{
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	if (!fit_topic_wait_to_timeout(conf, error))
		return NULL;

	rd_kafka_conf_set_opaque(conf, producer);
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rd_kafka_conf_set_error_cb(conf, on_error);
	rd_kafka_conf_set_log_cb(conf, on_log);
	rd_kafka_conf_set_stats_cb(conf, on_statistics);
	return conf;
}

/*
 * librdkafka writes a byte into the pipe when its main queue (delivery
 * reports, errors, logs, statistics) goes from empty to not empty; both
 * ends are non-blocking, so a full pipe never stalls one of its threads.
 */
static bool
enable_wake_pipe(OutboxProducer *producer, char **error)
{
	rd_kafka_queue_t *queue;

	if (pipe(producer->wake_pipe) != 0)
	{
		*error = psprintf("could not create a pipe: %m");
		return false;
	}
	for (int i = 0; i < 2; i++)
		if (fcntl(producer->wake_pipe[i], F_SETFL, O_NONBLOCK) != 0 ||
			fcntl(producer->wake_pipe[i], F_SETFD, FD_CLOEXEC) != 0)
		{
			*error = psprintf("could not set up a pipe: %m");
			close(producer->wake_pipe[0]);
			close(producer->wake_pipe[1]);
			return false;
		}
	queue = rd_kafka_queue_get_main(producer->rk);
	rd_kafka_queue_io_event_enable(queue, producer->wake_pipe[1], "1", 1);
	rd_kafka_queue_destroy(queue);
	return true;
}

/* Returns NULL with *error set when the settings are refused. */
OutboxProducer *
outbox_producer_create(const char *name, const char *client_id, char **error)
{
	OutboxProducer *producer = MemoryContextAllocZero(TopMemoryContext, sizeof(OutboxProducer));
	rd_kafka_conf_t *conf;
	char		errstr[512];

	producer->name = name;
	conf = build_conf(producer, client_id, error);
	if (conf == NULL)
	{
		pfree(producer);
		return NULL;
	}
	producer->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (producer->rk == NULL)
	{
		rd_kafka_conf_destroy(conf);
		*error = pstrdup(errstr);
		pfree(producer);
		return NULL;
	}
	rd_kafka_set_log_queue(producer->rk, NULL);
	if (!enable_wake_pipe(producer, error))
	{
		rd_kafka_destroy(producer->rk);
		pfree(producer);
		return NULL;
	}
	return producer;
}

void
outbox_producer_destroy(OutboxProducer *producer)
{
	OutboxReports ignored = {0};
	rd_kafka_queue_t *queue = rd_kafka_queue_get_main(producer->rk);

	outbox_producer_purge(producer, &ignored);
	rd_kafka_queue_io_event_enable(queue, -1, NULL, 0);
	rd_kafka_queue_destroy(queue);
	rd_kafka_destroy(producer->rk);
	close(producer->wake_pipe[0]);
	close(producer->wake_pipe[1]);
	for (int i = 0; i < producer->nstatistics; i++)
		free(producer->statistics[i]);
	pfree(producer);
}

static rd_kafka_headers_t *
build_headers(const OutboxRecord *record)
{
	rd_kafka_headers_t *headers = rd_kafka_headers_new(record->nheaders);

	for (int i = 0; i < record->nheaders; i++)
		rd_kafka_header_add(headers, record->headers[i].name, -1,
							record->headers[i].value, -1);
	return headers;
}

/*
 * Hands one event to librdkafka. Returns false if it was refused at once
 * (the outcome is recorded on the event): the caller must then hold back
 * the rest of its key. The value is not copied: it must stay valid until
 * the event's delivery report was served or the producer destroyed.
 */
bool
outbox_producer_produce(OutboxProducer *producer, OutboxEvent *event,
						const OutboxRecord *record)
{
	rd_kafka_resp_err_t err;

	for (;;)
	{
		rd_kafka_headers_t *headers = build_headers(record);

		err = rd_kafka_producev(producer->rk,
								RD_KAFKA_V_TOPIC(record->topic),
								RD_KAFKA_V_KEY(record->key, record->keylen),
								RD_KAFKA_V_VALUE((void *) record->value, record->valuelen),
								RD_KAFKA_V_MSGFLAGS(0),
								RD_KAFKA_V_TIMESTAMP(record->timestamp_ms),
								RD_KAFKA_V_HEADERS(headers),
								RD_KAFKA_V_OPAQUE(event),
								RD_KAFKA_V_END);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
			break;
		rd_kafka_headers_destroy(headers);
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
		{
			record_outcome(event, err);
			return false;
		}
		/* a stopping worker produces nothing more; the event stays */
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
		{
			event->outcome = EVENT_FAILED_RETRIABLE;
			event->error = "the worker is stopping";
			return false;
		}
		/* librdkafka's queue is full: let deliveries drain it */
		rd_kafka_poll(producer->rk, 10);
	}
	event->outcome = EVENT_IN_FLIGHT;
	producer->in_flight++;
	return true;
}

static void
claim_reports(OutboxProducer *producer, OutboxReports *reports)
{
	reports->delivered += producer->unclaimed.delivered;
	reports->failed += producer->unclaimed.failed;
	memset(&producer->unclaimed, 0, sizeof(producer->unclaimed));
}

static void
drain_wake_pipe(OutboxProducer *producer)
{
	char		buf[64];

	while (read(producer->wake_pipe[0], buf, sizeof(buf)) > 0)
		;
}

/*
 * The pipe is emptied before the queue is served: news arriving after the
 * serve writes to it again.
 */
void
outbox_producer_serve(OutboxProducer *producer, OutboxReports *reports)
{
	drain_wake_pipe(producer);
	rd_kafka_poll(producer->rk, 0);
	claim_reports(producer, reports);
}

int
outbox_producer_wait_fd(OutboxProducer *producer)
{
	return producer->wake_pipe[0];
}

void
outbox_producer_purge_queued(OutboxProducer *producer)
{
	rd_kafka_purge(producer->rk, RD_KAFKA_PURGE_F_QUEUE);
}

void
outbox_producer_purge(OutboxProducer *producer, OutboxReports *reports)
{
	rd_kafka_purge(producer->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
	/* purged in-flight reports can take a moment to come back */
	for (int i = 0; i < 50 && producer->in_flight > 0; i++)
		rd_kafka_poll(producer->rk, i == 0 ? 0 : 100);
	claim_reports(producer, reports);
}

bool
outbox_producer_is_fatal(OutboxProducer *producer)
{
	return rd_kafka_fatal_error(producer->rk, NULL, 0) != RD_KAFKA_RESP_ERR_NO_ERROR;
}

/*
 * Logs what error_cb recorded, once per kind of error rather than once
 * per retry, and Kafka's return after it was unreachable.
 */
void
outbox_producer_report_state(OutboxProducer *producer)
{
	rd_kafka_resp_err_t err = producer->last_error;

	if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != producer->logged_error)
	{
		ereport(LOG,
				(errmsg("%s: Kafka error: %s", producer->name,
						producer->last_reason),
				 errdetail("librdkafka error %s. Events Kafka did not acknowledge stay in the outbox and are sent again.",
						   rd_kafka_err2name(err))));
		outbox_stats_error(producer->last_reason);
		producer->logged_error = err;
		producer->unreachable = true;
	}
	else if (!producer->unreachable && producer->logged_error != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		ereport(LOG,
				(errmsg("%s: Kafka accepts events again", producer->name)));
		producer->logged_error = RD_KAFKA_RESP_ERR_NO_ERROR;
	}
	producer->last_error = RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* True after librdkafka said every broker is down, until one is seen up. */
bool
outbox_producer_kafka_down(OutboxProducer *producer)
{
	return producer->kafka_down;
}

static bool
json_field(JsonbContainer *object, const char *name, JsonbValue *value)
{
	return getKeyJsonValueFromContainer(object, name, strlen(name), value) != NULL;
}

static void
json_text(JsonbContainer *object, const char *name, char *buf, size_t size)
{
	JsonbValue	v;

	buf[0] = '\0';
	if (json_field(object, name, &v) && v.type == jbvString)
		strlcpy(buf, v.val.string.val, Min(size, (size_t) v.val.string.len + 1));
}

static double
json_number(JsonbContainer *object, const char *name)
{
	JsonbValue	v;

	if (!json_field(object, name, &v) || v.type != jbvNumeric)
		return 0;
	return DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(v.val.numeric)));
}

/* The entry of a broker by name, added if new (NULL when full). */
static OutboxBrokerInfo *
known_broker(OutboxProducer *producer, const char *name)
{
	for (int i = 0; i < producer->nbrokers; i++)
		if (strcmp(producer->brokers[i].name, name) == 0)
			return &producer->brokers[i];
	if (producer->nbrokers == OUTBOX_MAX_BROKERS)
		return NULL;
	memset(&producer->brokers[producer->nbrokers], 0, sizeof(OutboxBrokerInfo));
	producer->broker_was_up[producer->nbrokers] = false;
	strlcpy(producer->brokers[producer->nbrokers].name, name, sizeof(producer->brokers[0].name));
	return &producer->brokers[producer->nbrokers++];
}

/*
 * Takes in one broker of the statistics: those with a node id (known from
 * metadata), not a bootstrap address not yet matched to a broker nor
 * librdkafka's internal one. The round trip is kept from the last interval
 * that had a request in it.
 */
static void
take_in_broker(OutboxProducer *producer, JsonbContainer *broker)
{
	char		name[128];
	JsonbValue	rtt;
	OutboxBrokerInfo *info;

	if (json_number(broker, "nodeid") < 0)
		return;
	json_text(broker, "nodename", name, sizeof(name));
	info = known_broker(producer, name);
	if (info == NULL)
		return;
	json_text(broker, "state", info->state, sizeof(info->state));
	if (strcmp(info->state, "UP") == 0)
		producer->broker_was_up[info - producer->brokers] = true;
	info->in_flight = (int64) json_number(broker, "waitresp_cnt");
	if (json_field(broker, "rtt", &rtt) && rtt.type == jbvBinary &&
		json_number(rtt.val.binary.data, "cnt") > 0)
		info->rtt_avg_ms = json_number(rtt.val.binary.data, "avg") / 1000.0;
}

static void
take_in_statistics(OutboxProducer *producer, const char *text)
{
	Jsonb	   *json = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
	JsonbValue	brokers;
	JsonbIterator *it;
	JsonbIteratorToken token;
	JsonbValue	v;

	if (!json_field(&json->root, "brokers", &brokers) || brokers.type != jbvBinary)
		return;
	it = JsonbIteratorInit(brokers.val.binary.data);
	while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		if (token == WJB_VALUE && v.type == jbvBinary)
			take_in_broker(producer, v.val.binary.data);
	pfree(json);
}

static void
take_in_and_free(OutboxProducer *producer, char *text)
{
	PG_TRY();
	{
		take_in_statistics(producer, text);
	}
	PG_FINALLY();
	{
		free(text);
	}
	PG_END_TRY();
}

/*
 * Kafka is unreachable when brokers were tried and none is up. A broker in
 * INIT was never needed, or went back there after its connection was lost
 * (librdkafka's sparse connections): only the latter says something.
 */
static bool
brokers_all_down(OutboxProducer *producer)
{
	bool		tried = false;

	for (int i = 0; i < producer->nbrokers; i++)
	{
		if (strcmp(producer->brokers[i].state, "UP") == 0)
			return false;
		if (strcmp(producer->brokers[i].state, "INIT") != 0 || producer->broker_was_up[i])
			tried = true;
	}
	return tried;
}

/*
 * Publishes the brokers of the statistics librdkafka sent since the last
 * look, and whether Kafka is reachable by their states.
 */
void
outbox_producer_publish_brokers(OutboxProducer *producer)
{
	char	   *pending[MAX_PENDING_STATISTICS];
	int			npending = producer->nstatistics;

	if (npending == 0)
		return;
	memcpy(pending, producer->statistics, sizeof(char *) * npending);
	producer->nstatistics = 0;
	for (int i = 0; i < npending; i++)
		take_in_and_free(producer, pending[i]);
	producer->kafka_down = brokers_all_down(producer);
	outbox_stats_brokers(producer->brokers, producer->nbrokers);
}
