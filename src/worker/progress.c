/*
 * progress.c
 *		The progress records of exactly-once delivery: what each committed
 *		Kafka transaction of a shard carried, written in that transaction
 *		to the compacted topic outbox.progress_topic, keyed by the shard's
 *		transactional.id. After a start or a producer failure the worker
 *		reads its key's last committed record back (read_committed) and
 *		settles (deletes) the ids it names before producing anything, so an
 *		event whose transaction committed is never produced again.
 *
 * The read is bounded. The record's partition is murmur2(key) over the
 * topic's partitions; the worker remembers, while it lives, the offset of
 * its last committed record and reads from there. Otherwise (a new
 * process) it reads backwards from the end in chunks of PROGRESS_CHUNK
 * offsets until a chunk holds its key: with the topic compacted (and small
 * segments), the distance to a key's last record is about the number of
 * keys plus the uncompacted tail. A read ends at the high watermark the
 * first fetch reported: once init_transactions returned, our last
 * transaction is complete and nothing of ours can come after it; the
 * read_committed end (the last stable offset) may lag behind it while
 * another shard's transaction is open, so the read waits for it to pass.
 *
 * Which records count (the key holds the system identifier and the
 * database's oid, so a promoted standby has the same key and fences the
 * old primary's producer):
 *   - of this extension (its oid) on this timeline, of this instance: all
 *     its ids are settled;
 *   - of the instance this one replaced on this timeline (the server was
 *     moved: another host or data directory, step.c), written at a WAL
 *     position the replacement's WAL holds (previous_until): all its ids
 *     are settled. Whichever shard rotated the instance first, each
 *     shard's recovery recognises its own last record; a copy running at
 *     the same time wrote its later records past the point where the two
 *     WALs diverged, which this server's own history does not hold;
 *   - of this extension on an earlier timeline (the old primary, before a
 *     promotion or a point-in-time recovery): its ids are settled where
 *     the row was created no later than the record was written, since a
 *     row made here since may reuse an id the old primary had sent but
 *     never shipped (an asynchronous standby);
 *   - of a later timeline: this server was failed over; it delivers
 *     nothing more (superseded);
 *   - anything else (another extension, a copy on the same timeline): not
 *     ours, ignored.
 *
 * librdkafka's threads never log here: the consumer gets no log callback
 * that reports (its errors come back as messages, served on this thread).
 */
#include "worker/progress.h"
#include "compat.h"
#include "kafka/conf.h"
#include "settings.h"
#include "stop.h"
#include "table/step.h"

#include <librdkafka/rdkafka.h>

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* Offsets read per step of a backward search. */
#define PROGRESS_CHUNK 10000

/* How long one recovery may take before it is tried again later. */
#define RECOVERY_DEADLINE_MS 30000

/* A librdkafka call's wait, between two looks at interrupts. */
#define POLL_MS 100

#define PROGRESS_MAGIC "pg_outbox progress 1"

/*
 * One decoded record. "flushed" is the server's WAL flush position when it
 * wrote the record: every row it names was committed and flushed by then
 * (a read waits for that before it is produced).
 */
typedef struct ProgressRecord
{
	char		instance[64];
	int64		timeline;
	Oid			extension;
	TimestampTz written_at;
	XLogRecPtr	flushed;		/* the WAL its server had flushed; 0: not said */
	int64	   *ids;
	int			nids;
} ProgressRecord;

int32
outbox_progress_partition(const char *key, int partitions)
{
	return rd_kafka_msg_partitioner_murmur2(NULL, key, strlen(key), partitions, NULL, NULL);
}

/* "a-b" for a run of consecutive ids, "a" alone; comma separated. */
static void
append_ranges(StringInfo out, const int64 *ids, int n)
{
	for (int i = 0; i < n;)
	{
		int			j = i;

		while (j + 1 < n && ids[j + 1] == ids[j] + 1)
			j++;
		if (i > 0)
			appendStringInfoChar(out, ',');
		if (j > i)
			appendStringInfo(out, INT64_FORMAT "-" INT64_FORMAT, ids[i], ids[j]);
		else
			appendStringInfo(out, INT64_FORMAT, ids[i]);
		i = j + 1;
	}
}

char *
outbox_progress_encode(const char *instance, Oid extension, const int64 *ids, int n)
{
	StringInfoData out;

	initStringInfo(&out);
	appendStringInfo(&out, "%s\ninstance=%s\ntimeline=%u\nextension=%u\nwritten_at=" INT64_FORMAT
					 "\nflushed=" UINT64_FORMAT "\nids=",
					 PROGRESS_MAGIC, instance, GetWALInsertionTimeLine(), extension,
					 (int64) GetCurrentTimestamp(), (uint64) GetFlushRecPtr(NULL));
	append_ranges(&out, ids, n);
	appendStringInfoChar(&out, '\n');
	return out.data;
}

static void
parse_ids(ProgressRecord *rec, const char *text)
{
	int			cap = 64;

	rec->ids = palloc(sizeof(int64) * cap);
	rec->nids = 0;
	while (*text != '\0' && *text != '\n')
	{
		char	   *end;
		int64		from = strtoll(text, &end, 10);
		int64		to = from;

		if (*end == '-')
			to = strtoll(end + 1, &end, 10);
		if (end == text || to < from || to - from > 10000000)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("outbox: a progress record has a bad id range")));
		for (int64 id = from; id <= to; id++)
		{
			if (rec->nids == cap)
			{
				cap *= 2;
				rec->ids = repalloc(rec->ids, sizeof(int64) * cap);
			}
			rec->ids[rec->nids++] = id;
		}
		text = (*end == ',') ? end + 1 : end;
	}
}

/* The value of "name=" in a record, up to the line's end, or NULL. */
static char *
field(const char *value, const char *name)
{
	char	   *pattern = psprintf("\n%s=", name);
	const char *at = strstr(value, pattern);
	const char *end;

	if (at == NULL)
		return NULL;
	at += strlen(pattern);
	end = strchr(at, '\n');
	return pnstrdup(at, end == NULL ? strlen(at) : (size_t) (end - at));
}

static bool
decode(const char *value, ProgressRecord *rec)
{
	char	   *instance = field(value, "instance");
	char	   *timeline = field(value, "timeline");
	char	   *extension = field(value, "extension");
	char	   *written_at = field(value, "written_at");
	char	   *flushed = field(value, "flushed");
	char	   *ids = field(value, "ids");

	if (strncmp(value, PROGRESS_MAGIC "\n", strlen(PROGRESS_MAGIC) + 1) != 0 ||
		instance == NULL || timeline == NULL || extension == NULL ||
		written_at == NULL || ids == NULL)
		return false;
	strlcpy(rec->instance, instance, sizeof(rec->instance));
	rec->timeline = strtoll(timeline, NULL, 10);
	rec->extension = (Oid) strtoul(extension, NULL, 10);
	rec->written_at = (TimestampTz) strtoll(written_at, NULL, 10);
	/* a record of 0.5.0 does not say: it is recognised by its instance only */
	rec->flushed = flushed == NULL ? InvalidXLogRecPtr : (XLogRecPtr) strtoull(flushed, NULL, 10);
	parse_ids(rec, ids);
	return true;
}

/* Silent: librdkafka may call it from its own threads. */
static void
quiet_log(const rd_kafka_t *rk, int level, const char *facility, const char *message)
{
}

/* Its own properties, before the user's (the security settings among them). */
static bool
set_consumer_properties(KafkaConf *kc, void *arg, char **error)
{
	const char *fixed[][2] = {
		{"group.id", "pg_outbox-progress"},
		{"enable.auto.commit", "false"},
		{"enable.auto.offset.store", "false"},
		{"isolation.level", "read_committed"},
		{"enable.partition.eof", "true"},
		{"allow.auto.create.topics", "false"},
	};

	for (size_t i = 0; i < lengthof(fixed); i++)
		if (!outbox_kafka_conf_set(kc, fixed[i][0], fixed[i][1], error))
			return false;
	return true;
}

/* The user's own isolation.level must not win. */
static bool
insist_read_committed(KafkaConf *kc, void *arg, char **error)
{
	return outbox_kafka_conf_set(kc, "isolation.level", "read_committed", error);
}

/*
 * A read_committed consumer with the producer's connection settings;
 * producer-only properties are ignored.
 */
static rd_kafka_t *
create_consumer(void)
{
	KafkaConfRole role = {set_consumer_properties, insist_read_committed, NULL};
	KafkaConf	kc;
	char	   *error = NULL;
	char		errstr[512];
	rd_kafka_t *rk;

	if (!outbox_kafka_conf_build(&kc, &role, &error))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("outbox: cannot configure the progress consumer: %s", error)));
	pfree(kc.applied.data);
	rd_kafka_conf_set_log_cb(kc.conf, quiet_log);
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc.conf, errstr, sizeof(errstr));
	if (rk == NULL)
	{
		rd_kafka_conf_destroy(kc.conf);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("outbox: cannot create the progress consumer: %s", errstr)));
	}
	return rk;
}

/* Between two waits: interrupts, a stop request, the deadline. */
static void
check_wait(TimestampTz deadline, const char *what)
{
	CHECK_FOR_INTERRUPTS();
	if (outbox_stop_requested())
		ereport(ERROR,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("outbox: stopping before %s", what)));
	if (GetCurrentTimestamp() >= deadline)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("outbox: timed out %s", what)));
}

static int
partition_count(rd_kafka_t *rk, const char *topic, TimestampTz deadline)
{
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);

	for (;;)
	{
		const struct rd_kafka_metadata *md = NULL;
		rd_kafka_resp_err_t err;

		check_wait(deadline, "reading the progress topic's metadata");
		err = rd_kafka_metadata(rk, 0, rkt, &md, 500);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1)
		{
			rd_kafka_resp_err_t terr = md->topics[0].err;
			int			count = md->topics[0].partition_cnt;

			rd_kafka_metadata_destroy(md);
			if (terr == RD_KAFKA_RESP_ERR_NO_ERROR && count > 0)
			{
				rd_kafka_topic_destroy(rkt);
				return count;
			}
			if (terr == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
				terr == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)
			{
				rd_kafka_topic_destroy(rkt);
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("outbox: the progress topic \"%s\" cannot be read: %s",
								topic, rd_kafka_err2str(terr)),
						 errhint("Create it compacted (cleanup.policy=compact) and grant Read and Write on it.")));
			}
		}
		else if (md != NULL)
			rd_kafka_metadata_destroy(md);
	}
}

/* Where a read of [start, end) stands; end < 0: to the first high watermark. */
typedef struct ReadRange
{
	int64		start;
	int64		end;
	bool		found;
	int64		offset;			/* of the last record of the key */
	StringInfoData value;
} ReadRange;

static bool
reached_end(rd_kafka_t *rk, const char *topic, int32 partition, ReadRange *range, int64 offset)
{
	int64		lo;
	int64		hi;

	if (range->end < 0 &&
		rd_kafka_get_watermark_offsets(rk, topic, partition, &lo, &hi) == RD_KAFKA_RESP_ERR_NO_ERROR &&
		hi >= 0)
		range->end = hi;
	return range->end >= 0 && offset >= range->end;
}

/* Reads [start, end) of the partition, keeping the key's last record. */
static void
read_range(rd_kafka_t *rk, const char *topic, int32 partition, const char *key,
		   ReadRange *range, TimestampTz deadline)
{
	rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(1);
	size_t		keylen = strlen(key);

	rd_kafka_topic_partition_list_add(parts, topic, partition)->offset = range->start;
	rd_kafka_assign(rk, parts);
	rd_kafka_topic_partition_list_destroy(parts);
	if (range->end >= 0 && range->start >= range->end)
		return;
	for (;;)
	{
		rd_kafka_message_t *msg;
		bool		done = false;

		check_wait(deadline, "reading the progress topic");
		msg = rd_kafka_consumer_poll(rk, POLL_MS);
		if (msg == NULL)
			continue;
		if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
			done = reached_end(rk, topic, partition, range, msg->offset);
		else if (msg->err == RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			done = reached_end(rk, topic, partition, range, msg->offset);
			if (!done && msg->key_len == keylen && memcmp(msg->key, key, keylen) == 0)
			{
				range->found = true;
				range->offset = msg->offset;
				resetStringInfo(&range->value);
				appendBinaryStringInfo(&range->value, msg->payload, msg->len);
			}
		}
		else if (msg->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
				 msg->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
				 msg->err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION)
		{
			char	   *reason = pstrdup(rd_kafka_message_errstr(msg));

			rd_kafka_message_destroy(msg);
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("outbox: the progress topic \"%s\" cannot be read: %s", topic, reason)));
		}
		rd_kafka_message_destroy(msg);
		if (done)
			return;
	}
}

/*
 * The key's last committed record: from *from (an offset this process
 * knows to be at or below it), else backwards from the end in chunks.
 */
static bool
find_last_record(rd_kafka_t *rk, const char *topic, int32 partition, const char *key,
				 int64 from, StringInfo value, int64 *offset, TimestampTz deadline)
{
	ReadRange	range = {0};
	int64		lo = 0;
	int64		stable = 0;

	initStringInfo(&range.value);
	for (;;)
	{
		check_wait(deadline, "reading the progress topic's offsets");
		if (rd_kafka_query_watermark_offsets(rk, topic, partition, &lo, &stable, 500) ==
			RD_KAFKA_RESP_ERR_NO_ERROR)
			break;
	}
	range.start = from >= lo ? from : Max(lo, stable - PROGRESS_CHUNK);
	range.end = -1;
	for (;;)
	{
		read_range(rk, topic, partition, key, &range, deadline);
		if (range.found || range.start <= lo)
			break;
		range.end = range.start;
		range.start = Max(lo, range.start - PROGRESS_CHUNK);
	}
	if (!range.found)
		return false;
	appendBinaryStringInfo(value, range.value.data, range.value.len);
	*offset = range.offset;
	return true;
}

/*
 * The extension's schema (quoted), its oid and its instance; false if
 * absent. The instance as it stands, not renewed (rotate false): the read
 * renews it (queue.c), and makes the new id durable before a batch carries
 * it; a record of the id or of the one it replaced counts either way (the
 * file's header).
 */
static bool
look_up_extension(const char **schema, Oid *oid, OutboxInstance *instance)
{
	char	   *name;

	if (!outbox_step_find_extension(oid, &name))
		return false;
	*schema = quote_identifier(name);
	outbox_step_instance(*schema, false, instance);
	return true;
}

/* Whether this server wrote the record on its timeline (the file's header). */
static bool
written_here(const ProgressRecord *rec, const OutboxInstance *instance)
{
	if (strcmp(rec->instance, instance->id) == 0)
		return true;
	return instance->previous_id != NULL && strcmp(rec->instance, instance->previous_id) == 0 &&
		!XLogRecPtrIsInvalid(rec->flushed) && rec->flushed <= instance->previous_until;
}

/*
 * Deletes the shard's rows the record names (see the file's header for
 * which records count); returns how many, or -1 if superseded.
 */
static int
settle_record(const ProgressRecord *rec, int shard)
{
	MemoryContext caller = CurrentMemoryContext;
	const char *schema;
	OutboxInstance instance;
	Oid			extension;
	int64		timeline = (int64) GetWALInsertionTimeLine();
	int			settled = 0;

	outbox_step_begin("outbox: settling a committed Kafka transaction");
	if (look_up_extension(&schema, &extension, &instance) && extension == rec->extension)
	{
		bool		same = (rec->timeline == timeline && written_here(rec, &instance));
		bool		earlier = (rec->timeline < timeline);

		if (rec->timeline > timeline)
			settled = -1;
		else if (same || earlier)
		{
			Oid			types[3] = {INT4OID, INT8ARRAYOID, TIMESTAMPTZOID};
			Datum		args[3];

			args[0] = Int32GetDatum(shard);
			args[1] = PointerGetDatum(outbox_int8_array(rec->ids, rec->nids));
			args[2] = TimestampTzGetDatum(same ? DT_NOEND : rec->written_at);
			if (SPI_execute_with_args(outbox_delete_by_id_sql(schema,
															  " AND created_at OPERATOR(pg_catalog.<=) $3"),
									  3, types, args, NULL, false, 0) != SPI_OK_DELETE)
				elog(ERROR, "outbox: settling a committed Kafka transaction failed");
			settled = (int) SPI_processed;
		}
	}
	outbox_step_end(caller);
	return settled;
}

ProgressRecovery
outbox_progress_recover(const char *who, const char *key, int shard, int32 *partition,
						int64 *known_offset, int *settled)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), RECOVERY_DEADLINE_MS);
	rd_kafka_t *volatile rk = create_consumer();
	StringInfoData value;
	int64		offset = -1;
	bool		found = false;
	ProgressRecord rec;

	MemoryContext caller = CurrentMemoryContext;

	initStringInfo(&value);
	*settled = 0;
	PG_TRY();
	{
		*partition = outbox_progress_partition(key, partition_count(rk, outbox_progress_topic,
																	 deadline));
		found = find_last_record(rk, outbox_progress_topic, *partition, key, *known_offset,
								 &value, &offset, deadline);
	}
	PG_CATCH();
	{
		rd_kafka_destroy(rk);
		/* a stop request ends the wait quietly: the next worker reads again */
		if (!outbox_stop_requested())
			PG_RE_THROW();
		MemoryContextSwitchTo(caller);
		FlushErrorState();
		return PROGRESS_STOPPED;
	}
	PG_END_TRY();
	rd_kafka_destroy(rk);
	if (!found)
		return PROGRESS_NONE;
	if (!decode(value.data, &rec))
	{
		ereport(LOG,
				(errmsg("%s: the last progress record (offset " INT64_FORMAT ") is not one of pg_outbox's; ignored",
						who, offset)));
		return PROGRESS_NONE;
	}
	*settled = settle_record(&rec, shard);
	if (*settled < 0)
		return PROGRESS_SUPERSEDED;
	*known_offset = offset;
	return PROGRESS_SETTLED;
}
