/*
 * kafka_stats.c
 *		What a producer's librdkafka statistics say of Kafka: each broker's
 *		state, round trip and requests in flight (for outbox_kafka_brokers),
 *		and whether Kafka is down, i.e. no broker reachable (for the
 *		worker's back-off and outbox_status). Telemetry on the side of the
 *		transport (producer.c), which feeds it from librdkafka's callbacks.
 *
 * Monitoring must never stall delivery: the callbacks only copy, the
 * worker parses once a second with PostgreSQL's JSON parser, and
 * statistics that cannot be read are skipped (said once per producer).
 */
#include "kafka/kafka_stats.h"
#include "compat.h"
#include "shared/stats.h"

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/memutils.h"

/* Statistics kept between two looks of the worker; older ones are dropped. */
#define MAX_PENDING_STATISTICS 8

struct OutboxKafkaStats
{
	const char *name;			/* the worker's, for the log */
	bool		kafka_down;		/* no broker reachable, none seen up since */
	/* librdkafka's statistics not yet published, oldest first (malloc'd) */
	char	   *statistics[MAX_PENDING_STATISTICS];
	int			nstatistics;
	/* what the statistics said of each broker, rtt as last measured */
	OutboxBrokerInfo brokers[OUTBOX_MAX_BROKERS];
	bool		broker_was_up[OUTBOX_MAX_BROKERS];
	bool		broker_seen[OUTBOX_MAX_BROKERS];	/* in the last statistics */
	int			nbrokers;
	/* the bootstrap addresses, as of the last statistics */
	bool		bootstrap_tried;	/* one is DOWN */
	bool		bootstrap_up;
	bool		statistics_unreadable;	/* the last ones were: logged */
};

/* In TopMemoryContext; name is the worker's, for the log. */
OutboxKafkaStats *
outbox_kafka_stats_create(const char *name)
{
	OutboxKafkaStats *ks = MemoryContextAllocZero(TopMemoryContext, sizeof(OutboxKafkaStats));

	ks->name = name;
	return ks;
}

void
outbox_kafka_stats_destroy(OutboxKafkaStats *ks)
{
	for (int i = 0; i < ks->nstatistics; i++)
		free(ks->statistics[i]);
	pfree(ks);
}

/* librdkafka said every broker is down (its error callback: records only). */
void
outbox_kafka_stats_all_down(OutboxKafkaStats *ks)
{
	ks->kafka_down = true;
}

/* Kafka acknowledged a message (the delivery callback: records only). */
void
outbox_kafka_stats_delivered(OutboxKafkaStats *ks)
{
	ks->kafka_down = false;
}

/* True after librdkafka said every broker is down, until one is seen up. */
bool
outbox_kafka_stats_down(OutboxKafkaStats *ks)
{
	return ks->kafka_down;
}

/*
 * Where the top-level "brokers" object of librdkafka's statistics is: a
 * scan that only tells strings from structure and stops at the object's
 * end. librdkafka writes "brokers" before "topics", whose size grows with
 * topics x partitions, so that part is never looked at. False if absent.
 */
static bool
find_brokers(const char *json, size_t len, size_t *start, size_t *end)
{
	int			depth = 0;
	bool		key = false;	/* the last string at depth 1 was "brokers" */
	bool		value = false;	/* ... and its colon came: the value is next */
	bool		inside = false;

	for (size_t i = 0; i < len; i++)
	{
		const char *string = json + i + 1;

		switch (json[i])
		{
			case '"':
				for (i++; i < len && json[i] != '"'; i++)
					if (json[i] == '\\')
						i++;
				key = depth == 1 && json + i - string == 7 && memcmp(string, "brokers", 7) == 0;
				break;
			case ':':
				value = key;
				break;
			case '{':
			case '[':
				if (value && json[i] == '{' && !inside)
				{
					inside = true;
					*start = i;
				}
				depth++;
				value = key = false;
				break;
			case '}':
			case ']':
				if (--depth == 1 && inside)
				{
					*end = i + 1;
					return true;
				}
				if (depth < 0)
					return false;
				break;
			case ',':
				value = key = false;
				break;
		}
	}
	return false;
}

/*
 * Keeps the "brokers" part of librdkafka's statistics for the worker to
 * publish. Called from librdkafka's statistics callback: parsing here
 * could raise an error inside librdkafka's call, so it only copies
 * (malloc, never palloc) and never reports.
 */
void
outbox_kafka_stats_keep(OutboxKafkaStats *ks, const char *json, size_t json_len)
{
	size_t		start = 0;
	size_t		end = 0;
	char	   *copy;

	if (!find_brokers(json, json_len, &start, &end) ||
		(copy = malloc(end - start + 1)) == NULL)
		return;
	memcpy(copy, json + start, end - start);
	copy[end - start] = '\0';
	if (ks->nstatistics == MAX_PENDING_STATISTICS)
	{
		free(ks->statistics[0]);
		memmove(ks->statistics, ks->statistics + 1,
				sizeof(char *) * (MAX_PENDING_STATISTICS - 1));
		ks->nstatistics--;
	}
	ks->statistics[ks->nstatistics++] = copy;
}

/* The entry of a broker by name, added if new (NULL when full). */
static OutboxBrokerInfo *
known_broker(OutboxKafkaStats *ks, const char *name)
{
	for (int i = 0; i < ks->nbrokers; i++)
		if (strcmp(ks->brokers[i].name, name) == 0)
			return &ks->brokers[i];
	if (ks->nbrokers == OUTBOX_MAX_BROKERS)
		return NULL;
	memset(&ks->brokers[ks->nbrokers], 0, sizeof(OutboxBrokerInfo));
	ks->broker_was_up[ks->nbrokers] = false;
	strlcpy(ks->brokers[ks->nbrokers].name, name, sizeof(ks->brokers[0].name));
	return &ks->brokers[ks->nbrokers++];
}

/* What one broker's object of the statistics says, as it is parsed. */
typedef struct BrokerSeen
{
	double		nodeid;
	char		nodename[128];
	char		state[16];
	char		source[16];		/* "configured": a bootstrap address */
	double		waitresp_cnt;
	double		tx;				/* requests sent */
	double		rtt_avg;
	double		rtt_cnt;
} BrokerSeen;

/*
 * The parse of the "brokers" object: depth 1 is that object, 2 a broker's,
 * 3 the objects in a broker (its "rtt" among them).
 */
typedef struct BrokersParse
{
	OutboxKafkaStats *ks;
	int			depth;
	const char *field;			/* the last field name at depth 2 */
	const char *rtt_field;		/* the last field name in "rtt" */
	bool		in_rtt;
	BrokerSeen	seen;
} BrokersParse;

/*
 * Takes in one broker of the statistics: those with a node id (known from
 * metadata), not a bootstrap address not yet matched to a broker nor
 * librdkafka's internal one. The round trip is kept from the last interval
 * that had a request in it.
 */
static void
take_in_broker(OutboxKafkaStats *ks, const BrokerSeen *seen)
{
	OutboxBrokerInfo *info;

	if (seen->nodeid < 0)
	{
		/* not librdkafka's internal broker: one of outbox.brokers */
		if (strcmp(seen->source, "configured") != 0)
			return;
		if (strcmp(seen->state, "UP") == 0)
			ks->bootstrap_up = true;
		else if (strcmp(seen->state, "DOWN") == 0)
			ks->bootstrap_tried = true;
		return;
	}
	info = known_broker(ks, seen->nodename);
	if (info == NULL)
		return;
	strlcpy(info->state, seen->state, sizeof(info->state));
	ks->broker_seen[info - ks->brokers] = true;
	if (strcmp(info->state, "UP") == 0)
		ks->broker_was_up[info - ks->brokers] = true;
	info->in_flight = (int64) seen->waitresp_cnt;
	info->requests = (int64) seen->tx;
	if (seen->rtt_cnt > 0)
		info->rtt_avg_ms = seen->rtt_avg / 1000.0;
}

#define JSON_ACTION COMPAT_JSON_ACTION
#define JSON_ACTION_DONE COMPAT_JSON_ACTION_DONE

static JSON_ACTION
brokers_nest(void *state)
{
	BrokersParse *parse = (BrokersParse *) state;

	parse->depth++;
	if (parse->depth == 2)
	{
		memset(&parse->seen, 0, sizeof(parse->seen));
		parse->seen.nodeid = -1;
		parse->field = NULL;
	}
	else if (parse->depth == 3)
	{
		parse->in_rtt = parse->field != NULL && strcmp(parse->field, "rtt") == 0;
		parse->rtt_field = NULL;
	}
	JSON_ACTION_DONE;
}

static JSON_ACTION
brokers_unnest(void *state)
{
	BrokersParse *parse = (BrokersParse *) state;

	if (parse->depth == 2)
		take_in_broker(parse->ks, &parse->seen);
	else if (parse->depth == 3)
		parse->in_rtt = false;
	parse->depth--;
	JSON_ACTION_DONE;
}

static JSON_ACTION
brokers_field(void *state, char *fname, bool isnull)
{
	BrokersParse *parse = (BrokersParse *) state;

	if (parse->depth == 2)
		parse->field = fname;
	else if (parse->depth == 3 && parse->in_rtt)
		parse->rtt_field = fname;
	JSON_ACTION_DONE;
}

static JSON_ACTION
brokers_scalar(void *state, char *token, JsonTokenType tokentype)
{
	BrokersParse *parse = (BrokersParse *) state;
	BrokerSeen *seen = &parse->seen;
	bool		number = tokentype == JSON_TOKEN_NUMBER;
	bool		string = tokentype == JSON_TOKEN_STRING;

	if (parse->depth == 2 && parse->field != NULL)
	{
		if (number && strcmp(parse->field, "nodeid") == 0)
			seen->nodeid = strtod(token, NULL);
		else if (number && strcmp(parse->field, "waitresp_cnt") == 0)
			seen->waitresp_cnt = strtod(token, NULL);
		else if (number && strcmp(parse->field, "tx") == 0)
			seen->tx = strtod(token, NULL);
		else if (string && strcmp(parse->field, "nodename") == 0)
			strlcpy(seen->nodename, token, sizeof(seen->nodename));
		else if (string && strcmp(parse->field, "state") == 0)
			strlcpy(seen->state, token, sizeof(seen->state));
		else if (string && strcmp(parse->field, "source") == 0)
			strlcpy(seen->source, token, sizeof(seen->source));
	}
	else if (parse->depth == 3 && parse->in_rtt && parse->rtt_field != NULL && number)
	{
		if (strcmp(parse->rtt_field, "avg") == 0)
			seen->rtt_avg = strtod(token, NULL);
		else if (strcmp(parse->rtt_field, "cnt") == 0)
			seen->rtt_cnt = strtod(token, NULL);
	}
	JSON_ACTION_DONE;
}

/*
 * Parses the "brokers" object with PostgreSQL's JSON parser, whose actions
 * keep only the few fields published. Returns NULL, or what was wrong.
 */
static char *
parse_brokers(OutboxKafkaStats *ks, char *text)
{
	BrokersParse parse = {.ks = ks};
	JsonSemAction sem = {
		.semstate = &parse,
		.object_start = brokers_nest,
		.object_end = brokers_unnest,
		.array_start = brokers_nest,
		.array_end = brokers_unnest,
		.object_field_start = brokers_field,
		.scalar = brokers_scalar,
	};
	JsonParseErrorType result;
	JsonLexContext *lex;

	lex = compat_makeJsonLexContextCstringLen(text, strlen(text), PG_UTF8, true);
	result = pg_parse_json(lex, &sem);
	return result == JSON_SUCCESS ? NULL : json_errdetail(result, lex);
}

/*
 * Monitoring must never stall delivery: statistics that cannot be read are
 * skipped (said once per producer), whatever went wrong.
 */
static void
take_in_and_free(OutboxKafkaStats *ks, char *text)
{
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext parse = AllocSetContextCreate(caller, "outbox statistics",
												ALLOCSET_SMALL_SIZES);
	uint32		holdoff = InterruptHoldoffCount;
	char	   *problem = NULL;

	PG_TRY();
	{
		MemoryContextSwitchTo(parse);
		problem = parse_brokers(ks, text);
		if (problem != NULL)
			problem = MemoryContextStrdup(caller, problem);
	}
	PG_CATCH();
	{
		ErrorData  *error;

		InterruptHoldoffCount = holdoff;
		MemoryContextSwitchTo(caller);
		error = CopyErrorData();
		FlushErrorState();
		problem = error->message;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(caller);
	MemoryContextDelete(parse);
	free(text);
	if (problem != NULL && !ks->statistics_unreadable)
		ereport(LOG,
				(errmsg("%s: librdkafka's statistics could not be read, outbox_kafka_brokers may be stale: %s",
						ks->name, problem)));
	ks->statistics_unreadable = problem != NULL;
}

/*
 * Kafka is unreachable when brokers were tried and none is up. A broker in
 * INIT was never needed, or went back there after its connection was lost
 * (librdkafka's sparse connections): only the latter says something. A
 * producer that never got past the bootstrap addresses (a wrong password,
 * an untrusted certificate) knows no broker yet: those addresses say, and
 * between two attempts (back in INIT) librdkafka's "all brokers down". So
 * does one whose brokers librdkafka forgot (2.14 re-bootstraps after they
 * were all down): only the brokers of the last statistics count.
 */
static bool
brokers_all_down(OutboxKafkaStats *ks)
{
	bool		tried = false;
	int			seen = 0;

	for (int i = 0; i < ks->nbrokers; i++)
		seen += ks->broker_seen[i];
	if (seen == 0)
		return !ks->bootstrap_up &&
			(ks->bootstrap_tried || ks->kafka_down);

	for (int i = 0; i < ks->nbrokers; i++)
	{
		/* gone from the statistics: librdkafka forgot it (re-bootstrap) */
		if (!ks->broker_seen[i])
			continue;
		if (strcmp(ks->brokers[i].state, "UP") == 0)
			return false;
		if (strcmp(ks->brokers[i].state, "INIT") != 0 || ks->broker_was_up[i])
			tried = true;
	}
	return tried;
}

/*
 * Publishes the brokers of the statistics librdkafka sent since the last
 * look, and whether Kafka is reachable by their states.
 */
void
outbox_kafka_stats_publish(OutboxKafkaStats *ks)
{
	char	   *pending[MAX_PENDING_STATISTICS];
	int			npending = ks->nstatistics;

	if (npending == 0)
		return;
	memcpy(pending, ks->statistics, sizeof(char *) * npending);
	ks->nstatistics = 0;
	ks->bootstrap_tried = ks->bootstrap_up = false;
	memset(ks->broker_seen, 0, sizeof(ks->broker_seen));
	for (int i = 0; i < npending; i++)
		take_in_and_free(ks, pending[i]);
	ks->kafka_down = brokers_all_down(ks);
	outbox_stats_brokers(ks->brokers, ks->nbrokers);
}
