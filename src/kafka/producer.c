/*
 * producer.c
 *		The worker's Kafka producer: builds the librdkafka handle from the
 *		settings, produces events, serves delivery reports, and sorts each
 *		failure by its class (errors.c).
 *
 * Rules that keep the server safe (see the README): the handle is created
 * in the worker, never before fork; librdkafka's logs, errors and delivery
 * reports reach us only through rd_kafka_poll on this thread (log queue),
 * and the callbacks only record what happened: they never ereport. A
 * delivery report writes its event's outcome and nothing else; librdkafka
 * wakes the worker through a pipe when it has reports to serve. What its
 * statistics say of the brokers is kafka_stats.c's.
 */
#include "kafka/producer.h"
#include "backoff.h"
#include "compat.h"
#include "kafka/conf.h"
#include "kafka/errors.h"
#include "kafka/kafka_stats.h"
#include "kafka/partitions.h"
#include "settings.h"
#include "shared/stats.h"
#include "stop.h"

#include <fcntl.h>
#include <unistd.h>
#include <librdkafka/rdkafka.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * A topic handle per topic the producer writes to, kept for the producer's
 * life: every event goes through one, with its partition warm-up and
 * pacing (partitions.c), however many topics. No limit would bound
 * anything: librdkafka keeps each topic it was told of, with its
 * partitions, in its list until the producer is destroyed (giving a handle
 * back only drops the application's reference; librdkafka 2.0.2 to 2.16,
 * rd_kafka_topic_destroy_app), refreshes their metadata and counts them in
 * its statistics; and a handle made again for such a topic would keep its
 * first topic configuration, whose opaque is the TopicPartitions
 * librdkafka's partitioner writes to. A producer is rebuilt with none at
 * each worker start and settings change. Longer names (Kafka allows none;
 * outbox_send refuses them) are refused.
 */
#define TOPIC_NAME_KEY 256

typedef struct TopicHandle
{
	char		name[TOPIC_NAME_KEY];	/* hash key */
	rd_kafka_topic_t *rkt;
	TopicPartitions *partitions;	/* its warm-up and pacing */
	bool		listed;			/* in the producer's waiting_topics */
} TopicHandle;

/*
 * An event's message from its placing to its report (librdkafka's opaque):
 * what its partitions hold of it stays here, out of the event. While it
 * waits in partitions.c, what librdkafka will be given (the event's memory
 * holds the topic, key and value meanwhile). Reused once reported.
 */
typedef struct Message
{
	OutboxEvent *event;
	TopicPartitions *partitions;
	PartitionClaim claim;
	OutboxRecord record;		/* while waiting; its headers in headers */
	rd_kafka_headers_t *headers;
	struct Message *next_free;
} Message;

/* The producer's configuration being built (kafka/conf.c). */
typedef struct ConfBuild
{
	KafkaConf	kc;
	const char *client_id;
	const char *transactional_id;	/* exactly once's; NULL: not transactional */
	int			timeout_ms;		/* the user's message.timeout.ms */
} ConfBuild;

/*
 * librdkafka times a message out message.timeout.ms after the worker
 * would, and at least this much: a worker kept from its loop (by a lock,
 * say) for less still times out the events of a partition together.
 */
#define LIBRDKAFKA_TIMEOUT_MARGIN_MS 2000

/* How long a probe for a broker blocks the worker at most. */
#define PROBE_WAIT_MS 1

struct OutboxProducer
{
	rd_kafka_t *rk;
	const char *name;			/* the worker's, for the log */
	char	   *client_id;
	char	   *settings;		/* every "name=value\n" librdkafka was given */
	HTAB	   *topics;			/* TopicHandle by name */
	MemoryContext partitions_context;	/* the topics' TopicPartitions, and
										 * what waits in them: outlives rk */
	MemoryContext message_context;	/* the Messages */
	Message    *free_messages;	/* reported, to reuse */
	int			waiting;		/* messages waiting in partitions.c */
	List	   *waiting_topics; /* handles that may have some of them, in
								 * message_context: a serve visits those, not
								 * every topic */
	int			wake_pipe[2];	/* librdkafka writes to [1] when it has news */
	int			in_flight;		/* produced, report not served */
	int			timeout_ms;		/* message.timeout.ms as the user set it, 0 = none */
	TimestampTz timed_out_before;	/* purged events produced before it
									 * timed out (outbox_producer_time_out) */
	OutboxReports unclaimed;	/* reports served, not yet handed out */
	rd_kafka_resp_err_t last_error;	/* from error_cb, not yet logged */
	char		last_reason[512];
	rd_kafka_resp_err_t logged_error;	/* last one logged, to log once */
	bool		hinted;			/* logged a hint, not yet recovered */
	bool		unreachable;	/* logged "unreachable", not yet recovered */
	OutboxKafkaStats *kafka;	/* what the statistics say of the brokers */
	bool		transactional;	/* built with a transactional.id */
	OutboxProgressReport progress;	/* of the last progress record produced */
};

/*
 * What a message that timed out while Kafka was unreachable failed with:
 * librdkafka's "Message timed out" and the error that made Kafka
 * unreachable (a wrong password, an untrusted certificate...), so that
 * outbox_status.last_error keeps saying why. Lives as long as the process,
 * as the events pointing to it may outlive their producer.
 */
static char timed_out_error[600];

/*
 * What a report says of an event (from librdkafka, or for a message it
 * never took: partitions.c's), counted for the worker to claim.
 */
static void
take_report(OutboxProducer *producer, OutboxEvent *event, rd_kafka_resp_err_t err)
{
	bool		delivered = (err == RD_KAFKA_RESP_ERR_NO_ERROR);

	/* withdrawn because it timed out: said as librdkafka would */
	if (outbox_kafka_error_class(err) == KAFKA_WITHDRAWN &&
		event->produced_at <= producer->timed_out_before)
		err = RD_KAFKA_RESP_ERR__MSG_TIMED_OUT;
	outbox_kafka_error_outcome(event, err);
	if (err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT && producer->unreachable)
		event->error = timed_out_error;
	producer->in_flight--;
	if (delivered)
	{
		event->acked_at = GetCurrentTimestamp();
		producer->unreachable = false;
		outbox_kafka_stats_delivered(producer->kafka);
		producer->unclaimed.delivered++;
	}
	else
		producer->unclaimed.failed++;
}

/* A Message for event, reused if one was reported. */
static Message *
new_message(OutboxProducer *producer, OutboxEvent *event, TopicHandle *handle)
{
	Message    *message = producer->free_messages;

	if (message != NULL)
		producer->free_messages = message->next_free;
	else
		message = MemoryContextAlloc(producer->message_context, sizeof(Message));
	message->event = event;
	message->partitions = handle->partitions;
	return message;
}

static void
free_message(OutboxProducer *producer, Message *message)
{
	message->next_free = producer->free_messages;
	producer->free_messages = message;
}

/*
 * A message's report: its partitions told (the partition it is on, -1 if
 * librdkafka never took it), then its event's outcome.
 */
static void
report_message(OutboxProducer *producer, Message *message, int32 partition,
			   rd_kafka_resp_err_t err)
{
	outbox_partitions_reported(message->partitions, &message->claim, partition,
							   err == RD_KAFKA_RESP_ERR_NO_ERROR);
	take_report(producer, message->event, err);
	free_message(producer, message);
}

/*
 * Whether a report leaves it open if Kafka wrote the message: delivered
 * without an offset (kafka/errors.c), or failed, purged included, after a
 * request that carried it went unanswered (librdkafka's "possibly
 * persisted"). Such an event is produced again: the one kind of event that
 * can arrive twice.
 */
static bool
write_unconfirmed(const rd_kafka_message_t *message, rd_kafka_resp_err_t err)
{
	return err == UNPROVEN_DELIVERY ||
		(err != RD_KAFKA_RESP_ERR_NO_ERROR &&
		 rd_kafka_message_status(message) == RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED);
}

/* Served on this thread from poll/flush: records, never reports. */
static void
on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *message, void *opaque)
{
	OutboxProducer *producer = (OutboxProducer *) opaque;
	Message    *produced = (Message *) message->_private;
	rd_kafka_resp_err_t err = outbox_kafka_report_error(message);

	/* the progress record of a transaction (transaction.c) has no event */
	if (produced == NULL)
	{
		producer->progress.reported = true;
		producer->progress.failed = (err != RD_KAFKA_RESP_ERR_NO_ERROR);
		producer->progress.error = err == UNPROVEN_DELIVERY ?
			"acknowledged without an offset" : rd_kafka_err2str(err);
		producer->progress.offset = message->offset;
		return;
	}
	if (write_unconfirmed(message, err))
		producer->unclaimed.unconfirmed++;
	report_message(producer, produced, message->partition, err);
}

static void
on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	OutboxProducer *producer = (OutboxProducer *) opaque;

	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
	{
		outbox_kafka_stats_all_down(producer->kafka);
		/* the error that brought them down says more */
		if (producer->last_error != RD_KAFKA_RESP_ERR_NO_ERROR)
			return;
	}
	producer->last_error = (rd_kafka_resp_err_t) err;
	strlcpy(producer->last_reason, reason, sizeof(producer->last_reason));
}

/* Statistics are parsed later, by the worker: see kafka_stats.c. */
static int
on_statistics(rd_kafka_t *rk, char *json, size_t json_len, void *opaque)
{
	OutboxProducer *producer = (OutboxProducer *) opaque;

	outbox_kafka_stats_keep(producer->kafka, json, json_len);
	return 0;
}

/* librdkafka's own chatter (reconnect attempts...) stays at DEBUG1. */
static void
on_log(const rd_kafka_t *rk, int level, const char *facility, const char *message)
{
	ereport(DEBUG1,
			(errmsg_internal("outbox: librdkafka %s: %s", facility, message)));
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
fit_topic_wait_to_timeout(ConfBuild *build, char **error)
{
	long		timeout_ms = conf_number(build->kc.conf, "message.timeout.ms");
	long		wait_ms = conf_number(build->kc.conf, "topic.metadata.propagation.max.ms");
	char		value[32];

	if (timeout_ms <= 0 || wait_ms < 0 || wait_ms < timeout_ms)
		return true;
	snprintf(value, sizeof(value), "%ld", Max(1L, timeout_ms / 2));
	return outbox_kafka_conf_set(&build->kc, "topic.metadata.propagation.max.ms", value, error);
}

/* A property the worker derives from the settings (set_derived_properties). */
typedef struct DerivedProperty
{
	const char *name;
	const char *value;
} DerivedProperty;

/*
 * librdkafka times messages out one at a time: when one times out while
 * later ones of its partition are queued or in flight, it renumbers those
 * (a new producer epoch), they go out first as soon as a leader answers,
 * and their key's order is gone. So the worker keeps message.timeout.ms
 * for itself (outbox_producer_time_out withdraws everything at once) and
 * gives librdkafka a longer one, which never ends first.
 */
static bool
take_over_message_timeout(ConfBuild *build, char **error)
{
	long		timeout_ms = conf_number(build->kc.conf, "message.timeout.ms");
	char		value[32];

	build->timeout_ms = (int) Max(timeout_ms, 0);
	if (timeout_ms <= 0)
		return true;
	snprintf(value, sizeof(value), "%ld",
			 Min(timeout_ms + Max(timeout_ms, LIBRDKAFKA_TIMEOUT_MARGIN_MS), (long) PG_INT32_MAX));
	return outbox_kafka_conf_set(&build->kc, "message.timeout.ms", value, error);
}

/*
 * Exactly-once: a transactional producer. librdkafka wants
 * message.timeout.ms (the one it got, see take_over_message_timeout) at
 * most transaction.timeout.ms, and would make socket.timeout.ms as long as
 * the transaction's timeout unless told otherwise (set before the user's
 * properties, which may change it).
 */
static bool
set_transactional(ConfBuild *build, char **error)
{
	long		timeout_ms = conf_number(build->kc.conf, "message.timeout.ms");
	char		value[32];

	if (build->transactional_id == NULL)
		return true;
	snprintf(value, sizeof(value), "%ld", Max(timeout_ms, 60000L));
	return outbox_kafka_conf_set(&build->kc, "transactional.id", build->transactional_id, error) &&
		outbox_kafka_conf_set(&build->kc, "transaction.timeout.ms", value, error);
}

/*
 * The properties the worker derives from the settings, before the user's
 * (outbox.kafka_config, the secrets file: kafka/conf.c).
 */
static bool
set_derived_properties(KafkaConf *kc, void *arg, char **error)
{
	ConfBuild  *build = (ConfBuild *) arg;
	DerivedProperty derived[] = {
		{"client.id", build->client_id},
		/* the documented way to keep partition order through retries */
		{"enable.idempotence", "true"},
		/* a message lost after a later one was written is fatal, not a gap */
		{"enable.gapless.guarantee", "true"},
		/* places keys on the partitions the Java client would choose */
		{"partitioner", "murmur2_random"},
		{"log.queue", "true"},

		/*
		 * Kafka 4's own default. Events waiting for their partition
		 * (kafka/partitions.c) are handed over one by one once its reports
		 * come; with no linger, librdkafka's broker thread sends the first
		 * of them before the rest arrive, and the rest a round trip later.
		 */
		{"linger.ms", "5"},
		/* requests pipelined on one connection must not wait for delayed ACKs */
		{"socket.nagle.disable", "true"},
		{"reconnect.backoff.ms", psprintf("%d", outbox_reconnect_backoff_min_ms())},
		{"reconnect.backoff.max.ms", psprintf("%d", outbox_reconnect_backoff_max_ms())},
		/* for outbox_kafka_brokers; outbox.kafka_config may change or disable it */
		{"statistics.interval.ms", "1000"},
		{"message.max.bytes", psprintf("%ld", outbox_message_kafka_max_bytes())},

		/*
		 * The window is queued at most: outbox.window_bytes, plus the event
		 * that crossed it, plus headers and envelopes.
		 */
		{"queue.buffering.max.kbytes",
		psprintf("%ld", ((long) outbox_window_bytes + outbox_max_message_bytes) / 1024 + 4096)},
		{"queue.buffering.max.messages",
		psprintf("%d", Max(100000, outbox_window_size + outbox_batch_size))},
	};

	for (size_t i = 0; i < lengthof(derived); i++)
	{
		/* a transaction, not the gap-less rule, fails what follows a failure */
		bool		skip = build->transactional_id != NULL &&
			strcmp(derived[i].name, "enable.gapless.guarantee") == 0;

		if (!skip && !outbox_kafka_conf_set(kc, derived[i].name, derived[i].value, error))
			return false;
	}
	return build->transactional_id == NULL ||
		outbox_kafka_conf_set(kc, "socket.timeout.ms", "60000", error);
}

/* What follows from the user's properties, set after them. */
static bool
fit_to_user_properties(KafkaConf *kc, void *arg, char **error)
{
	ConfBuild  *build = (ConfBuild *) arg;

	if (!fit_topic_wait_to_timeout(build, error))
		return false;
	return take_over_message_timeout(build, error) && set_transactional(build, error);
}

/*
 * A configuration from the current settings, and in build->kc.applied
 * what it says. Returns false with *error set when a setting is refused.
 */
static bool
build_conf(ConfBuild *build, const char *client_id, const char *transactional_id,
		   char **error)
{
	KafkaConfRole role = {set_derived_properties, fit_to_user_properties, build};

	build->client_id = client_id;
	build->transactional_id = transactional_id;
	return outbox_kafka_conf_build(&build->kc, &role, error);
}

static void
set_callbacks(rd_kafka_conf_t *conf, OutboxProducer *producer)
{
	rd_kafka_conf_set_opaque(conf, producer);
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rd_kafka_conf_set_error_cb(conf, on_error);
	rd_kafka_conf_set_log_cb(conf, on_log);
	rd_kafka_conf_set_stats_cb(conf, on_statistics);
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

static HTAB *
create_topic_handles(void)
{
	HASHCTL		ctl;

	ctl.keysize = TOPIC_NAME_KEY;
	ctl.entrysize = sizeof(TopicHandle);
	ctl.hcxt = TopMemoryContext;
	return hash_create("outbox producer topics", 64, &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

static void
free_producer(OutboxProducer *producer)
{
	outbox_kafka_stats_destroy(producer->kafka);
	if (producer->topics != NULL)
		hash_destroy(producer->topics);
	MemoryContextDelete(producer->partitions_context);
	MemoryContextDelete(producer->message_context);
	if (producer->settings != NULL)
		pfree(producer->settings);
	pfree(producer->client_id);
	pfree(producer);
}

/* Returns NULL with *error set when the settings are refused. */
OutboxProducer *
outbox_producer_create(const char *name, const char *client_id,
					   const char *transactional_id, char **error)
{
	OutboxProducer *producer = MemoryContextAllocZero(TopMemoryContext, sizeof(OutboxProducer));
	ConfBuild	build;
	char		errstr[512];

	producer->name = name;
	producer->client_id = MemoryContextStrdup(TopMemoryContext, client_id);
	producer->kafka = outbox_kafka_stats_create(name);
	producer->topics = create_topic_handles();
	producer->partitions_context = AllocSetContextCreate(TopMemoryContext, "outbox partitions",
														 ALLOCSET_DEFAULT_SIZES);
	producer->message_context = AllocSetContextCreate(TopMemoryContext, "outbox messages",
													  ALLOCSET_DEFAULT_SIZES);
	if (!build_conf(&build, client_id, transactional_id, error))
	{
		free_producer(producer);
		return NULL;
	}
	producer->settings = MemoryContextStrdup(TopMemoryContext, build.kc.applied.data);
	producer->timeout_ms = build.timeout_ms;
	producer->transactional = (transactional_id != NULL);
	pfree(build.kc.applied.data);
	set_callbacks(build.kc.conf, producer);
	producer->rk = rd_kafka_new(RD_KAFKA_PRODUCER, build.kc.conf, errstr, sizeof(errstr));
	if (producer->rk == NULL)
	{
		rd_kafka_conf_destroy(build.kc.conf);
		*error = pstrdup(errstr);
		free_producer(producer);
		return NULL;
	}
	rd_kafka_set_log_queue(producer->rk, NULL);
	if (!enable_wake_pipe(producer, error))
	{
		rd_kafka_destroy(producer->rk);
		free_producer(producer);
		return NULL;
	}
	return producer;
}

/* librdkafka wants every topic handle given back before its own end. */
static void
destroy_topic_handles(OutboxProducer *producer)
{
	HASH_SEQ_STATUS seq;
	TopicHandle *handle;

	hash_seq_init(&seq, producer->topics);
	while ((handle = hash_seq_search(&seq)) != NULL)
		if (handle->rkt != NULL)
			rd_kafka_topic_destroy(handle->rkt);
}

void
outbox_producer_destroy(OutboxProducer *producer)
{
	OutboxReports ignored = {0};
	rd_kafka_queue_t *queue = rd_kafka_queue_get_main(producer->rk);

	outbox_producer_purge(producer, &ignored);
	rd_kafka_queue_io_event_enable(queue, -1, NULL, 0);
	rd_kafka_queue_destroy(queue);
	destroy_topic_handles(producer);
	rd_kafka_destroy(producer->rk);
	close(producer->wake_pipe[0]);
	close(producer->wake_pipe[1]);
	free_producer(producer);
}

/* The value of the last "name=" line of settings, or NULL. */
static const char *
setting_value(const char *settings, const char *name, int *len)
{
	const char *found = NULL;
	size_t		namelen = strlen(name);

	for (const char *line = settings; *line != '\0';)
	{
		const char *end = strchr(line, '\n');

		if (strncmp(line, name, namelen) == 0 && line[namelen] == '=')
		{
			found = line + namelen + 1;
			*len = (int) (end - found);
		}
		line = end + 1;
	}
	return found;
}

/* Appends to *names each property whose value differs in the other list. */
static void
note_differences(const char *from, const char *to, StringInfo names)
{
	for (const char *line = from; *line != '\0';)
	{
		const char *end = strchr(line, '\n');
		const char *eq = strchr(line, '=');
		char	   *name;
		int			from_len = 0;
		int			to_len = 0;
		const char *from_value;
		const char *to_value;

		/* the rest of a value with a newline in it: not a name */
		if (eq == NULL || eq > end)
		{
			line = end + 1;
			continue;
		}
		name = pnstrdup(line, eq - line);
		from_value = setting_value(from, name, &from_len);
		to_value = setting_value(to, name, &to_len);
		if ((to_value == NULL || from_len != to_len ||
			 memcmp(from_value, to_value, from_len) != 0) &&
			strstr(names->data, psprintf(" %s,", name)) == NULL)
			appendStringInfo(names, " %s,", name);
		line = end + 1;
	}
}

/*
 * Whether the settings now say something else to librdkafka than they did
 * when the producer was built: then it must be rebuilt, since librdkafka
 * reads its configuration only then. Logs the names of the properties
 * that changed, never their values. A secrets file that cannot be applied
 * keeps the producer as it is (logged).
 */
bool
outbox_producer_outdated(OutboxProducer *producer, const char *transactional_id)
{
	ConfBuild	build;
	char	   *error = NULL;
	StringInfoData names;

	if (!build_conf(&build, producer->client_id, transactional_id, &error))
	{
		ereport(LOG,
				(errmsg("%s: the new Kafka settings cannot be applied, the producer keeps its own: %s",
						producer->name, error)));
		return false;
	}
	rd_kafka_conf_destroy(build.kc.conf);
	if (strcmp(build.kc.applied.data, producer->settings) == 0)
		return false;
	initStringInfo(&names);
	note_differences(producer->settings, build.kc.applied.data, &names);
	note_differences(build.kc.applied.data, producer->settings, &names);
	if (names.len > 0)
		names.data[--names.len] = '\0';
	ereport(LOG,
			(errmsg("%s: the Kafka producer's settings changed (%s); it is rebuilt once its events in flight are settled",
					producer->name, names.data + 1)));
	return true;
}

/*
 * The handle of a topic, made when the topic is first produced to. Making
 * it asks Kafka for the topic's metadata at once; librdkafka 2.0.2 does not
 * when a message names a topic it does not know, and the message then
 * waits up to a second for its topic scan (fixed in librdkafka 2.10.1).
 * NULL: librdkafka makes none for that name.
 */
static TopicHandle *
topic_handle(OutboxProducer *producer, const char *topic)
{
	TopicHandle *handle;
	rd_kafka_topic_t *rkt;
	rd_kafka_topic_conf_t *topic_conf;

	if (strlen(topic) >= TOPIC_NAME_KEY)
		return NULL;
	handle = hash_search(producer->topics, topic, HASH_FIND, NULL);
	if (handle != NULL)
		return handle;
	/* entered first: the entry cannot fail once librdkafka made the handle */
	handle = hash_search(producer->topics, topic, HASH_ENTER, NULL);
	handle->listed = false;
	/* a transaction's commit must find all its events in librdkafka */
	handle->partitions = outbox_partitions_create(producer->partitions_context, producer->rk,
												  !producer->transactional, &topic_conf);
	rkt = rd_kafka_topic_new(producer->rk, topic, topic_conf);
	if (rkt == NULL)
	{
		rd_kafka_topic_conf_destroy(topic_conf);
		hash_search(producer->topics, topic, HASH_REMOVE, NULL);
		return NULL;
	}
	handle->rkt = rkt;
	return handle;
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

#define MESSAGE_FIELDS 8

/* The message of an event, for rd_kafka_produceva. */
static void
describe_message(rd_kafka_vu_t *vu, rd_kafka_topic_t *rkt, const OutboxRecord *record,
				 rd_kafka_headers_t *headers, Message *message)
{
	vu[0].vtype = RD_KAFKA_VTYPE_RKT;
	vu[0].u.rkt = rkt;
	vu[1].vtype = RD_KAFKA_VTYPE_KEY;
	vu[1].u.mem.ptr = (void *) record->key;
	vu[1].u.mem.size = record->keylen;
	vu[2].vtype = RD_KAFKA_VTYPE_VALUE;
	vu[2].u.mem.ptr = (void *) record->value;
	vu[2].u.mem.size = record->valuelen;
	vu[3].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
	vu[3].u.i = 0;
	vu[4].vtype = RD_KAFKA_VTYPE_TIMESTAMP;
	vu[4].u.i64 = record->timestamp_ms;
	vu[5].vtype = RD_KAFKA_VTYPE_HEADERS;
	vu[5].u.headers = headers;
	vu[6].vtype = RD_KAFKA_VTYPE_OPAQUE;
	vu[6].u.ptr = message;
	vu[7].vtype = RD_KAFKA_VTYPE_PARTITION;
	vu[7].u.i32 = record->partition >= 0 ? record->partition : RD_KAFKA_PARTITION_UA;
}

/* One attempt; librdkafka owns headers if it took the message. */
static rd_kafka_resp_err_t
hand_over(OutboxProducer *producer, rd_kafka_topic_t *rkt, const OutboxRecord *record,
		  rd_kafka_headers_t *headers, Message *message)
{
	rd_kafka_vu_t vu[MESSAGE_FIELDS];
	rd_kafka_error_t *failure;
	rd_kafka_resp_err_t err;

	describe_message(vu, rkt, record, headers, message);
	failure = rd_kafka_produceva(producer->rk, vu, lengthof(vu));
	if (failure == NULL)
		return RD_KAFKA_RESP_ERR_NO_ERROR;
	err = rd_kafka_error_code(failure);
	rd_kafka_error_destroy(failure);
	return err;
}

/* In flight from here on: with librdkafka, or waiting to be. */
static void
count_in_flight(OutboxProducer *producer, OutboxEvent *event)
{
	event->outcome = EVENT_IN_FLIGHT;
	event->produced_at = GetCurrentTimestamp();
	producer->in_flight++;
}

/*
 * Hands a partition's waiting messages to librdkafka in order, or (withdraw)
 * reports them as purged from its queue. One librdkafka refuses fails as at
 * produce time, and those behind it are withdrawn, so none of its key goes
 * first.
 */
static void
release_partition(OutboxProducer *producer, TopicHandle *handle, int32 partition, bool withdraw)
{
	List	   *messages = outbox_partitions_take(handle->partitions, partition);
	ListCell   *lc;

	foreach(lc, messages)
	{
		Message    *message = lfirst(lc);
		rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__PURGE_QUEUE;

		if (!withdraw)
			err = hand_over(producer, handle->rkt, &message->record, message->headers,
							message);
		producer->waiting--;
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			rd_kafka_headers_destroy(message->headers);
			report_message(producer, message, -1, err);
			withdraw = true;
		}
	}
	list_free(messages);
}

/* A topic's partitions whose messages may go now (all: every one). */
static void
release_topic(OutboxProducer *producer, TopicHandle *handle, bool all, bool withdraw)
{
	int32		partition = -1;

	while ((partition = outbox_partitions_next(handle->partitions, partition, all)) >= 0)
		release_partition(producer, handle, partition, withdraw);
}

/* A topic some of whose messages wait, visited by release_waiting. */
static void
list_waiting(OutboxProducer *producer, TopicHandle *handle)
{
	MemoryContext old;

	if (handle->listed)
		return;
	old = MemoryContextSwitchTo(producer->message_context);
	producer->waiting_topics = lappend(producer->waiting_topics, handle);
	MemoryContextSwitchTo(old);
	handle->listed = true;
}

static void
release_waiting(OutboxProducer *producer, bool withdraw)
{
	List	   *topics = producer->waiting_topics;
	ListCell   *lc;

	if (producer->waiting == 0)
		return;
	producer->waiting_topics = NIL;
	foreach(lc, topics)
	{
		TopicHandle *handle = lfirst(lc);

		handle->listed = false;
		release_topic(producer, handle, withdraw, withdraw);
		if (outbox_partitions_next(handle->partitions, -1, true) >= 0)
			list_waiting(producer, handle);
	}
	list_free(topics);
}

/* Where the event goes among its topic's partitions (partitions.c). */
static Placement
place(OutboxProducer *producer, TopicHandle *handle, Message *message)
{
	Placement	placement;

	while ((placement = outbox_partitions_place(handle->partitions, handle->rkt, message->event,
												message, &message->claim)) == PLACE_RELEASE_FIRST)
		release_topic(producer, handle, true, false);
	return placement;
}

/* A message librdkafka refused: its partitions hear of it as never taken. */
static void
unplace(OutboxProducer *producer, Message *message)
{
	outbox_partitions_reported(message->partitions, &message->claim, -1, false);
	free_message(producer, message);
}

/*
 * Interrupts while a placed message waits for room in librdkafka's queue:
 * one that errors out (a cancel) leaves it unproduced, unplaced first.
 */
static void
check_interrupts_placed(OutboxProducer *producer, Message *message)
{
	PG_TRY();
	{
		CHECK_FOR_INTERRUPTS();
	}
	PG_CATCH();
	{
		unplace(producer, message);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* The event waits in partitions.c, its message made ready. */
static void
wait_for_partition(OutboxProducer *producer, Message *message, const OutboxRecord *record)
{
	message->record = *record;
	message->record.headers = NULL;
	message->record.nheaders = 0;
	message->headers = build_headers(record);
	producer->waiting++;
	count_in_flight(producer, message->event);
}

/*
 * Hands one event to librdkafka, unless its partition waits for this
 * producer's first acknowledgement there (partitions.c). PRODUCE_REFUSED:
 * refused at once (the
 * outcome is recorded on the event). Either way short of PRODUCED the
 * caller must hold back the rest of its key. PRODUCED includes an event
 * waiting for its partition (partitions.c's pacing): it has its report
 * like the others. The value is not copied: it must stay valid until the
 * event's delivery report was served or the producer destroyed.
 */
ProduceResult
outbox_producer_produce(OutboxProducer *producer, OutboxEvent *event,
						const OutboxRecord *record)
{
	TopicHandle *handle = topic_handle(producer, record->topic);
	Message    *message;
	rd_kafka_resp_err_t err;

	/* a name Kafka would refuse too */
	if (handle == NULL)
	{
		outbox_kafka_error_outcome(event, RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION);
		return PRODUCE_REFUSED;
	}
	message = new_message(producer, event, handle);
	switch (place(producer, handle, message))
	{
		case PLACE_HELD:
			free_message(producer, message);
			return PRODUCE_HELD;
		case PLACE_WAITS:
			wait_for_partition(producer, message, record);
			list_waiting(producer, handle);
			return PRODUCED;
		default:
			break;
	}
	for (;;)
	{
		rd_kafka_headers_t *headers = build_headers(record);

		err = hand_over(producer, handle->rkt, record, headers, message);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
			break;
		rd_kafka_headers_destroy(headers);
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
		{
			outbox_kafka_error_outcome(event, err);
			unplace(producer, message);
			return PRODUCE_REFUSED;
		}
		/* a stopping worker produces nothing more; the event stays */
		check_interrupts_placed(producer, message);
		if (outbox_stop_requested())
		{
			event->outcome = EVENT_FAILED_RETRIABLE;
			event->error = "the worker is stopping";
			unplace(producer, message);
			return PRODUCE_REFUSED;
		}
		/* librdkafka's queue is full: let deliveries drain it */
		rd_kafka_poll(producer->rk, 10);
	}
	count_in_flight(producer, event);
	return PRODUCED;
}

static void
claim_reports(OutboxProducer *producer, OutboxReports *reports)
{
	reports->delivered += producer->unclaimed.delivered;
	reports->failed += producer->unclaimed.failed;
	reports->unconfirmed += producer->unclaimed.unconfirmed;
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
	release_waiting(producer, false);
	claim_reports(producer, reports);
}

int
outbox_producer_wait_fd(OutboxProducer *producer)
{
	return producer->wake_pipe[0];
}

/*
 * Everything Kafka has not acknowledged is withdrawn, in flight included.
 * A gap in a partition's sequence with later messages of it left behind
 * (a retry withdrawn from the queue ahead of requests in flight, or one
 * librdkafka itself times out in flight) makes librdkafka bump the
 * producer epoch and number those later messages afresh: Kafka takes
 * them, before the withdrawn ones are sent again. With nothing left
 * behind, Kafka only takes what comes in sequence. The price: what was in
 * flight may have been written, and is sent again.
 */
void
outbox_producer_withdraw(OutboxProducer *producer)
{
	release_waiting(producer, true);
	rd_kafka_purge(producer->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
}

/*
 * After a refusal, only what was not sent is withdrawn: the refused event
 * waits out a back-off while its key's later events are held, and what is
 * in flight is let through rather than sent twice.
 */
void
outbox_producer_purge_queued(OutboxProducer *producer)
{
	release_waiting(producer, true);
	rd_kafka_purge(producer->rk, RD_KAFKA_PURGE_F_QUEUE);
}

/* Only what waits in partitions.c, never handed to librdkafka. */
void
outbox_producer_withdraw_waiting(OutboxProducer *producer)
{
	release_waiting(producer, true);
}

int
outbox_producer_timeout_ms(OutboxProducer *producer)
{
	return producer->timeout_ms;
}

void
outbox_producer_time_out(OutboxProducer *producer, TimestampTz produced_before)
{
	producer->timed_out_before = produced_before;
	outbox_producer_withdraw(producer);
}

void
outbox_producer_purge(OutboxProducer *producer, OutboxReports *reports)
{
	outbox_producer_withdraw(producer);
	/* purged in-flight reports can take a moment to come back */
	for (int i = 0; i < 50 && producer->in_flight > 0; i++)
		rd_kafka_poll(producer->rk, i == 0 ? 0 : 100);
	claim_reports(producer, reports);
}

/*
 * The producer's fatal error, if it has one (NULL if not): librdkafka's
 * reason, and in *whole whether Kafka refused the producer as a whole.
 */
char *
outbox_producer_fatal(OutboxProducer *producer, bool *whole)
{
	char		reason[512];
	KafkaErrorClass class = outbox_kafka_fatal(producer->rk, reason, sizeof(reason));

	if (class == KAFKA_NO_ERROR)
		return NULL;
	*whole = (class == KAFKA_REFUSES_PRODUCER);
	return pstrdup(reason);
}

/* True if Kafka refused the producer as a whole (see above). */
bool
outbox_producer_refused(OutboxProducer *producer)
{
	return outbox_kafka_fatal(producer->rk, NULL, 0) == KAFKA_REFUSES_PRODUCER;
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
		/* once until Kafka accepts events, however errors alternate */
		char	   *hint = producer->hinted ? NULL : outbox_kafka_error_hint(producer->rk, err);

		ereport(LOG,
				(errmsg("%s: Kafka error: %s", producer->name,
						producer->last_reason),
				 errdetail("librdkafka error %s. Events Kafka did not acknowledge stay in the outbox and are sent again.",
						   rd_kafka_err2name(err)),
				 hint != NULL ? errhint("%s", hint) : 0));
		producer->hinted |= (hint != NULL);
		/* "all brokers are down" must not hide why they are */
		if (err != RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || !producer->unreachable)
		{
			outbox_stats_error(producer->last_reason);
			snprintf(timed_out_error, sizeof(timed_out_error), "%s (Kafka unreachable: %s)",
					 rd_kafka_err2str(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT), producer->last_reason);
		}
		producer->logged_error = err;
		producer->unreachable = true;
	}
	else if (!producer->unreachable && producer->logged_error != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		ereport(LOG,
				(errmsg("%s: Kafka accepts events again", producer->name)));
		producer->logged_error = RD_KAFKA_RESP_ERR_NO_ERROR;
		producer->hinted = false;
	}
	producer->last_error = RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* Whether Kafka is down, as its statistics and callbacks say (kafka_stats.c). */
bool
outbox_producer_kafka_down(OutboxProducer *producer)
{
	return outbox_kafka_stats_down(producer->kafka);
}

/*
 * librdkafka connects only to the brokers it needs (sparse connections):
 * a producer with nothing to send whose brokers all went down may stay
 * unconnected long after they are back (31 s seen with librdkafka 2.14,
 * t/060), and its statistics keep saying Kafka is down. A metadata
 * request that waits for nothing makes librdkafka connect to a broker
 * when none is up; its answer is not needed.
 */
void
outbox_producer_probe(OutboxProducer *producer)
{
	const struct rd_kafka_metadata *metadata = NULL;

	if (rd_kafka_metadata(producer->rk, 0, NULL, &metadata, PROBE_WAIT_MS) ==
		RD_KAFKA_RESP_ERR_NO_ERROR)
		rd_kafka_metadata_destroy(metadata);
}

/* Publishes what the statistics since the last look say (kafka_stats.c). */
void
outbox_producer_publish_brokers(OutboxProducer *producer)
{
	outbox_kafka_stats_publish(producer->kafka);
}

/* The librdkafka handle, for transaction.c's calls. */
struct rd_kafka_s *
outbox_producer_handle(OutboxProducer *producer)
{
	return producer->rk;
}

/*
 * Produces a transaction's progress record (copied) to an explicit
 * partition; its report lands in outbox_producer_progress(). Returns false
 * with *error if librdkafka refused it at once.
 */
bool
outbox_producer_produce_progress(OutboxProducer *producer, const char *topic,
								 int32 partition, const char *key,
								 const char *value, size_t valuelen,
								 const char **error)
{
	rd_kafka_resp_err_t err;

	memset(&producer->progress, 0, sizeof(producer->progress));
	err = rd_kafka_producev(producer->rk,
							RD_KAFKA_V_TOPIC(topic),
							RD_KAFKA_V_PARTITION(partition),
							RD_KAFKA_V_KEY(key, strlen(key)),
							RD_KAFKA_V_VALUE((void *) value, valuelen),
							RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
							RD_KAFKA_V_OPAQUE(NULL),
							RD_KAFKA_V_END);
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		return true;
	*error = rd_kafka_err2str(err);
	return false;
}

const OutboxProgressReport *
outbox_producer_progress(OutboxProducer *producer)
{
	return &producer->progress;
}
