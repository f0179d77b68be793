/*
 * stats.c
 *		Delivery statistics per (database, shard), in shared memory: the
 *		worker of a shard writes its entry, any backend of the database
 *		reads it through outbox_shard_stats() and outbox_broker_stats()
 *		(behind the outbox_status and outbox_kafka_brokers views and
 *		outbox_explain()), and outbox_stats_reset() clears it.
 *
 * Nothing here writes a table: reading the views or delivering writes no
 * row. Entries outlive their worker (a restarted worker goes on counting);
 * a server restart starts them afresh. There are twice as many entries as
 * workers can run; when a new (database, shard) needs one and none is
 * free, the least recently used entry of a shard without a worker goes.
 */
#include "shared/stats.h"
#include "settings.h"
#include "shared/slots.h"

#include <math.h>

#include "access/htup_details.h"
#include "catalog/pg_type_d.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

/*
 * Acknowledgement latency: a histogram per 5 s window, 12 windows for the
 * last minute. Buckets are logarithmic, 4 per doubling of microseconds
 * (about 19 % wide), up to about an hour.
 */
#define WINDOW_SECONDS 5
#define NWINDOWS 12
#define LATENCY_BUCKETS 128
#define BUCKETS_PER_DOUBLING 4

#define ERROR_LENGTH 256

/* The counters, atomics outside the entry's mutex. */
#define SHARD_COUNTERS(X) \
	X(delivered) \
	X(failed_attempts) \
	X(dead_lettered) \
	X(txn_commits) \
	X(txn_aborts)

#define COUNTER_FIELD(name) pg_atomic_uint64 name;

typedef struct LatencyWindow
{
	int64		number;			/* seconds since the epoch / WINDOW_SECONDS */
	uint32		counts[LATENCY_BUCKETS];
} LatencyWindow;

typedef struct ShardStats
{
	slock_t		mutex;			/* protects all but the counters */
	Oid			dboid;			/* InvalidOid: free */
	int			shard;
	bool		attached;		/* a worker writes this entry */
	TimestampTz last_used;
	OutboxShardState state;		/* what the running worker does */
	TimestampTz state_since;	/* or when the last one left */
	bool		no_extension;	/* the last one left as it found none */
	SHARD_COUNTERS(COUNTER_FIELD)
	TimestampTz last_delivered_at;
	char		last_error[ERROR_LENGTH];
	TimestampTz last_error_at;
	TimestampTz stats_reset;
	int64		in_flight_first;	/* 0: nothing in flight */
	int64		in_flight_last;
	TimestampTz in_flight_since;
	char		delivery[32];	/* the mode serving the producer, "" before one */
	int			txn_events;		/* in the open Kafka transaction */
	TimestampTz txn_opened_at;	/* 0: none open */
	LatencyWindow windows[NWINDOWS];
	int			nbrokers;
	OutboxBrokerInfo brokers[OUTBOX_MAX_BROKERS];
	/* lag_alert.c's state, kept across worker restarts */
	bool		lag_warned;
	TimestampTz lag_line_at;
} ShardStats;

typedef struct StatsShared
{
	slock_t		claim_mutex;	/* serialises finding an entry for a worker */
	int			nentries;
	ShardStats	entries[FLEXIBLE_ARRAY_MEMBER];
} StatsShared;

static StatsShared *stats = NULL;
static ShardStats *mine = NULL;

static const char *const state_names[] = {
	[SHARD_STARTING] = "starting",
	[SHARD_IDLE] = "idle",
	[SHARD_DELIVERING] = "delivering",
	[SHARD_WAITING_FOR_KAFKA] = "waiting_for_kafka",
	[SHARD_WAITING_FOR_REGISTRY] = "waiting_for_registry",
	[SHARD_BACKING_OFF] = "backing_off",
	[SHARD_PAUSED] = "paused",
	[SHARD_RECOVERY] = "recovery",
	[SHARD_SUPERSEDED] = "superseded",
	[SHARD_SUBSCRIBED] = "subscribed",
	[SHARD_NO_EXTENSION] = "no_extension",
	[SHARD_SLEEPING] = "sleeping",
	[SHARD_STOPPED] = "stopped",
};

static int
entry_count(void)
{
	return Max(4, 2 * outbox_max_workers);
}

Size
outbox_stats_shmem_size(void)
{
	return add_size(offsetof(StatsShared, entries),
					mul_size(entry_count(), sizeof(ShardStats)));
}

static void
clear_counters(ShardStats *entry, TimestampTz now)
{
#define CLEAR_COUNTER(name) pg_atomic_write_u64(&entry->name, 0);
	SHARD_COUNTERS(CLEAR_COUNTER)
	entry->last_delivered_at = 0;
	entry->last_error[0] = '\0';
	entry->last_error_at = 0;
	memset(entry->windows, 0, sizeof(entry->windows));
	entry->stats_reset = now;
}

/* Called with AddinShmemInitLock held. */
void
outbox_stats_shmem_startup(void)
{
	bool		found;

	stats = ShmemInitStruct("outbox stats", outbox_stats_shmem_size(), &found);
	if (found)
		return;
	SpinLockInit(&stats->claim_mutex);
	stats->nentries = entry_count();
	for (int i = 0; i < stats->nentries; i++)
	{
		ShardStats *entry = &stats->entries[i];

		memset(entry, 0, sizeof(*entry));
		SpinLockInit(&entry->mutex);
#define INIT_COUNTER(name) pg_atomic_init_u64(&entry->name, 0);
		SHARD_COUNTERS(INIT_COUNTER)
	}
}

/* ---- the worker's side ------------------------------------------------- */

/* The entry of (dboid, shard), a free one, or the least recently used. */
static ShardStats *
find_entry_to_claim(Oid dboid, int shard)
{
	ShardStats *best = NULL;

	for (int i = 0; i < stats->nentries; i++)
	{
		ShardStats *entry = &stats->entries[i];

		if (entry->dboid == dboid && entry->shard == shard)
			return entry;
		if (entry->attached)
			continue;
		if (best == NULL || !OidIsValid(entry->dboid) ||
			(OidIsValid(best->dboid) && entry->last_used < best->last_used))
			best = entry;
	}
	return best;
}

/*
 * What a worker's arrival and its departure both reset (the entry's mutex
 * held): the entry is in use (or not) from now, and nothing of the last
 * worker's in flight or brokers shows.
 */
static void
mark_attached(ShardStats *entry, bool attached, bool no_extension, TimestampTz now)
{
	entry->attached = attached;
	entry->last_used = now;
	entry->state_since = now;
	entry->no_extension = no_extension;
	entry->in_flight_first = 0;
	entry->nbrokers = 0;
	entry->delivery[0] = '\0';
}

/*
 * Runs before the slot's own exit callback (registered after it), so the
 * slot still says whether the worker leaves for want of the extension: the
 * slot is freed soon after, and the shard goes on showing no_extension.
 */
static void
detach(int code, Datum arg)
{
	TimestampTz now = GetCurrentTimestamp();
	OutboxSlotState slot = outbox_my_slot_state();

	SpinLockAcquire(&mine->mutex);
	mark_attached(mine, false, slot == SLOT_NO_EXTENSION, now);
	if (slot == SLOT_SLEEPING)
		mine->state = SHARD_SLEEPING;
	SpinLockRelease(&mine->mutex);
	mine = NULL;
}

/*
 * Takes the entry of this worker's (database, shard), keeping what an
 * earlier worker of it counted. Entries outnumber workers two to one, so
 * one is always free to take. True if the shard's last worker had left
 * asleep (a commit woke this one).
 */
bool
outbox_stats_attach(Oid dboid, int shard)
{
	TimestampTz now = GetCurrentTimestamp();
	ShardStats *entry;
	bool		woken = false;

	SpinLockAcquire(&stats->claim_mutex);
	entry = find_entry_to_claim(dboid, shard);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		woken = entry->dboid == dboid && entry->shard == shard &&
			entry->state == SHARD_SLEEPING;
		if (entry->dboid != dboid || entry->shard != shard)
		{
			entry->dboid = dboid;
			entry->shard = shard;
			clear_counters(entry, now);
			entry->lag_warned = false;
			entry->lag_line_at = 0;
		}
		mark_attached(entry, true, false, now);
		entry->state = SHARD_STARTING;
		SpinLockRelease(&entry->mutex);
	}
	SpinLockRelease(&stats->claim_mutex);
	if (entry == NULL)
		elog(FATAL, "outbox: no free statistics entry for shard %d", shard);
	mine = entry;
	on_shmem_exit(detach, (Datum) 0);
	return woken;
}

void
outbox_stats_set_state(OutboxShardState state)
{
	if (mine == NULL || mine->state == state)
		return;
	SpinLockAcquire(&mine->mutex);
	mine->state = state;
	mine->state_since = GetCurrentTimestamp();
	SpinLockRelease(&mine->mutex);
}

void
outbox_stats_error(const char *message)
{
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	strlcpy(mine->last_error, message, sizeof(mine->last_error));
	mine->last_error_at = GetCurrentTimestamp();
	SpinLockRelease(&mine->mutex);
}

void
outbox_stats_last_error(char *buf, size_t size)
{
	buf[0] = '\0';
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	strlcpy(buf, mine->last_error, size);
	SpinLockRelease(&mine->mutex);
}

static int
latency_bucket(TimestampTz from, TimestampTz to)
{
	double		us = Max(1.0, (double) (to - from));
	int			bucket = (int) (BUCKETS_PER_DOUBLING * log2(us));

	return Min(bucket, LATENCY_BUCKETS - 1);
}

/* The representative latency of a bucket: its geometric middle, in ms. */
static double
bucket_ms(int bucket)
{
	return pow(2.0, (bucket + 0.5) / BUCKETS_PER_DOUBLING) / 1000.0;
}

static int64
window_number(TimestampTz t)
{
	return (int64) (t / (USECS_PER_SEC * WINDOW_SECONDS));
}

/*
 * Counts what the reports of settled events said: deliveries with their
 * latency from created_at, failures (of every kind, also those that will be
 * retried), and the first failure's error.
 */
void
outbox_stats_settled(OutboxEvent *const *events, int nevents)
{
	uint32		counts[LATENCY_BUCKETS] = {0};
	uint64		delivered = 0;
	uint64		failed = 0;
	TimestampTz last_ack = 0;
	const char *error = NULL;
	LatencyWindow *window;
	int64		number;

	if (mine == NULL)
		return;
	for (int i = 0; i < nevents; i++)
	{
		const OutboxEvent *event = events[i];

		if (event->outcome == EVENT_DELIVERED)
		{
			counts[latency_bucket(event->created_at, event->acked_at)]++;
			last_ack = Max(last_ack, event->acked_at);
			delivered++;
		}
		else if (outbox_event_failed(event))
		{
			failed++;
			if (error == NULL)
				error = event->error;
		}
	}
	pg_atomic_fetch_add_u64(&mine->delivered, delivered);
	pg_atomic_fetch_add_u64(&mine->failed_attempts, failed);
	if (error != NULL)
		outbox_stats_error(error);
	if (delivered == 0)
		return;

	number = window_number(last_ack);
	SpinLockAcquire(&mine->mutex);
	window = &mine->windows[number % NWINDOWS];
	if (window->number != number)
	{
		memset(window->counts, 0, sizeof(window->counts));
		window->number = number;
	}
	for (int b = 0; b < LATENCY_BUCKETS; b++)
		window->counts[b] += counts[b];
	mine->last_delivered_at = last_ack;
	mine->last_used = last_ack;
	SpinLockRelease(&mine->mutex);
}

/* Whether the shard's lag was last reported as too high, and when. */
bool
outbox_stats_lag_warned(TimestampTz *line_at)
{
	bool		warned;

	*line_at = 0;
	if (mine == NULL)
		return false;
	SpinLockAcquire(&mine->mutex);
	warned = mine->lag_warned;
	*line_at = mine->lag_line_at;
	SpinLockRelease(&mine->mutex);
	return warned;
}

void
outbox_stats_set_lag_warned(bool warned, TimestampTz line_at)
{
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	mine->lag_warned = warned;
	mine->lag_line_at = line_at;
	SpinLockRelease(&mine->mutex);
}

void
outbox_stats_dead_lettered(uint64 count)
{
	if (mine != NULL)
		pg_atomic_fetch_add_u64(&mine->dead_lettered, count);
}

/*
 * The range of ids the worker holds unsettled (first 0: none), for
 * outbox_explain(); "since" is when the window was last empty.
 */
void
outbox_stats_in_flight(int64 first_id, int64 last_id)
{
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	if (first_id != 0 && mine->in_flight_first == 0)
		mine->in_flight_since = GetCurrentTimestamp();
	mine->in_flight_first = first_id;
	mine->in_flight_last = last_id;
	SpinLockRelease(&mine->mutex);
}

void
outbox_stats_brokers(const OutboxBrokerInfo *brokers, int nbrokers)
{
	if (mine == NULL)
		return;
	nbrokers = Min(nbrokers, OUTBOX_MAX_BROKERS);
	SpinLockAcquire(&mine->mutex);
	memcpy(mine->brokers, brokers, sizeof(OutboxBrokerInfo) * nbrokers);
	mine->nbrokers = nbrokers;
	SpinLockRelease(&mine->mutex);
}

void
outbox_stats_delivery(const char *mode)
{
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	strlcpy(mine->delivery, mode, sizeof(mine->delivery));
	SpinLockRelease(&mine->mutex);
}

/* Exactly-once (transaction.c): the open Kafka transaction. */
void
outbox_stats_transaction(int events, TimestampTz opened_at)
{
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	mine->txn_events = events;
	mine->txn_opened_at = opened_at;
	SpinLockRelease(&mine->mutex);
}

void
outbox_stats_transaction_ended(bool committed)
{
	if (mine == NULL)
		return;
	pg_atomic_fetch_add_u64(committed ? &mine->txn_commits : &mine->txn_aborts, 1);
}

/* ---- SQL: the readers -------------------------------------------------- */

static void
require_shared_memory(void)
{
	if (stats == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("outbox is not in shared_preload_libraries: no worker runs and no statistics are kept"),
				 errhint("Add outbox to shared_preload_libraries and restart the server.")));
}

/*
 * A result column as the C side fills it; each reader's X-macro list below
 * gives one row per column: its name, SQL type, when it is NULL, and its
 * value (read only when not NULL).
 */
typedef struct StatsColumn
{
	const char *name;
	Oid			type;
} StatsColumn;

#define COLUMN_DEF(name, type, isnull, value) {name, type},
#define FILL_COLUMN(name, type, isnull, value) \
	nulls[column] = (isnull); \
	values[column] = nulls[column] ? (Datum) 0 : (value); \
	column++;

/*
 * The function's declared columns must be the list's, in its order; an
 * extension not yet updated declares the first ones only (each version
 * added columns at the end), and gets those.
 */
static void
check_columns(TupleDesc desc, const StatsColumn *columns, int ncolumns)
{
	if (desc->natts > ncolumns)
		elog(ERROR, "outbox: the function returns %d columns, the library knows %d",
			 desc->natts, ncolumns);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (strcmp(NameStr(att->attname), columns[i].name) != 0 ||
			att->atttypid != columns[i].type)
			elog(ERROR, "outbox: column %d is \"%s\" of type %u, the library expects \"%s\" of type %u",
				 i + 1, NameStr(att->attname), att->atttypid, columns[i].name, columns[i].type);
	}
}

/*
 * Sets up a materialized result (by hand: InitMaterializedSRF is 15+) with
 * the given columns.
 */
static Tuplestorestate *
begin_rows(FunctionCallInfo fcinfo, TupleDesc *desc,
		   const StatsColumn *columns, int ncolumns)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Tuplestorestate *store;
	MemoryContext old;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		(rsinfo->allowedModes & SFRM_Materialize) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	if (get_call_result_type(fcinfo, NULL, desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "outbox: return type must be a row type");
	check_columns(*desc, columns, ncolumns);
	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	*desc = CreateTupleDescCopy(*desc);
	store = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = store;
	rsinfo->setDesc = *desc;
	MemoryContextSwitchTo(old);
	return store;
}

/* A consistent copy of the entry of (this database, shard), if any. */
static bool
copy_entry(int shard, ShardStats *copy)
{
	for (int i = 0; i < stats->nentries; i++)
	{
		ShardStats *entry = &stats->entries[i];
		bool		match;

		SpinLockAcquire(&entry->mutex);
		match = entry->dboid == MyDatabaseId && entry->shard == shard;
		if (match)
			memcpy(copy, entry, sizeof(*copy));
		SpinLockRelease(&entry->mutex);
		if (match)
		{
			/* the counters are atomics, not covered by the mutex */
#define COPY_COUNTER(name) pg_atomic_init_u64(&copy->name, pg_atomic_read_u64(&entry->name));
			SHARD_COUNTERS(COPY_COUNTER)
			return true;
		}
	}
	return false;
}

/* p in (0, 1]: the latency below which that share of the last minute's fall. */
static bool
latency_percentile(const ShardStats *entry, double p, TimestampTz now, double *ms)
{
	uint64		counts[LATENCY_BUCKETS] = {0};
	uint64		total = 0;
	uint64		rank;
	uint64		seen = 0;
	int64		newest = window_number(now);

	for (int w = 0; w < NWINDOWS; w++)
	{
		const LatencyWindow *window = &entry->windows[w];

		if (window->number <= newest - NWINDOWS || window->number > newest)
			continue;
		for (int b = 0; b < LATENCY_BUCKETS; b++)
		{
			counts[b] += window->counts[b];
			total += window->counts[b];
		}
	}
	if (total == 0)
		return false;
	rank = (uint64) ceil(p * total);
	for (int b = 0; b < LATENCY_BUCKETS; b++)
	{
		seen += counts[b];
		if (seen >= rank)
		{
			*ms = bucket_ms(b);
			return true;
		}
	}
	*ms = bucket_ms(LATENCY_BUCKETS - 1);
	return true;
}

/*
 * What a running worker published; without one, what the slots say: one
 * is starting, the shard sleeps, or none runs, unless the last one left
 * for want of the extension, which outlives its slot.
 */
static OutboxShardState
shown_state(const ShardStats *entry, int pid, OutboxSlotState slot)
{
	if (pid != 0)
		return entry->state;
	if (entry->no_extension)
		return SHARD_NO_EXTENSION;
	if (slot == SLOT_SLEEPING)
		return SHARD_SLEEPING;
	return slot == SLOT_STARTING ? SHARD_STARTING : SHARD_STOPPED;
}

/* A running worker says what its producer is; otherwise the setting. */
static const char *
shown_delivery(const ShardStats *entry, int pid)
{
	if (pid != 0 && entry->attached && entry->delivery[0] != '\0')
		return entry->delivery;
	return GetConfigOption("outbox.delivery", false, false);
}

#define COUNTER(name) Int64GetDatum((int64) pg_atomic_read_u64(&e->name))

/*
 * The OUT columns of outbox_shard_stats(), in the order the install script
 * declares them, read from add_shard_row's e (the entry), pid, slot,
 * in_flight and the latency percentiles.
 */
#define SHARD_COLUMNS(X) \
	X("shard", INT4OID, false, Int32GetDatum(shard)) \
	X("pid", INT4OID, pid == 0, Int32GetDatum(pid)) \
	X("state", TEXTOID, false, CStringGetTextDatum(state_names[shown_state(e, pid, slot)])) \
	X("state_since", TIMESTAMPTZOID, e->state_since == 0, TimestampTzGetDatum(e->state_since)) \
	X("delivered", INT8OID, false, COUNTER(delivered)) \
	X("failed_attempts", INT8OID, false, COUNTER(failed_attempts)) \
	X("dead_lettered", INT8OID, false, COUNTER(dead_lettered)) \
	X("last_delivered_at", TIMESTAMPTZOID, e->last_delivered_at == 0, \
	  TimestampTzGetDatum(e->last_delivered_at)) \
	X("last_error", TEXTOID, e->last_error[0] == '\0', CStringGetTextDatum(e->last_error)) \
	X("last_error_at", TIMESTAMPTZOID, e->last_error_at == 0, TimestampTzGetDatum(e->last_error_at)) \
	X("ack_latency_p50_ms", FLOAT8OID, !has_p50, Float8GetDatum(p50_ms)) \
	X("ack_latency_p99_ms", FLOAT8OID, !has_p99, Float8GetDatum(p99_ms)) \
	X("stats_reset", TIMESTAMPTZOID, e->stats_reset == 0, TimestampTzGetDatum(e->stats_reset)) \
	X("in_flight_first_id", INT8OID, !in_flight, Int64GetDatum(e->in_flight_first)) \
	X("in_flight_last_id", INT8OID, !in_flight, Int64GetDatum(e->in_flight_last)) \
	X("in_flight_since", TIMESTAMPTZOID, !in_flight, TimestampTzGetDatum(e->in_flight_since)) \
	X("delivery", TEXTOID, false, CStringGetTextDatum(shown_delivery(e, pid))) \
	X("transaction_events", INT4OID, pid == 0 || e->txn_opened_at == 0, Int32GetDatum(e->txn_events)) \
	X("transaction_since", TIMESTAMPTZOID, pid == 0 || e->txn_opened_at == 0, \
	  TimestampTzGetDatum(e->txn_opened_at)) \
	X("transactions_committed", INT8OID, false, COUNTER(txn_commits)) \
	X("transactions_aborted", INT8OID, false, COUNTER(txn_aborts))

static const StatsColumn shard_columns[] = {SHARD_COLUMNS(COLUMN_DEF)};

static void
add_shard_row(Tuplestorestate *store, TupleDesc desc, int shard, TimestampTz now)
{
	Datum		values[lengthof(shard_columns)];
	bool		nulls[lengthof(shard_columns)];
	int			column = 0;
	ShardStats	entry;
	ShardStats *e = &entry;
	OutboxSlotState slot;
	int			pid = outbox_shard_worker(MyDatabaseId, shard, &slot);
	bool		in_flight;
	double		p50_ms;
	double		p99_ms;
	bool		has_p50;
	bool		has_p99;

	if (!copy_entry(shard, &entry))
		memset(&entry, 0, sizeof(entry));
	in_flight = entry.in_flight_first != 0 && pid != 0;
	has_p50 = latency_percentile(&entry, 0.5, now, &p50_ms);
	has_p99 = latency_percentile(&entry, 0.99, now, &p99_ms);
	SHARD_COLUMNS(FILL_COLUMN)
	tuplestore_putvalues(store, desc, values, nulls);
}

/* One row per shard of this database, whether a worker runs for it or not. */
PG_FUNCTION_INFO_V1(outbox_shard_stats);
Datum
outbox_shard_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Tuplestorestate *store;
	TimestampTz now = GetCurrentTimestamp();

	require_shared_memory();
	store = begin_rows(fcinfo, &desc, shard_columns, lengthof(shard_columns));
	for (int shard = 0; shard < outbox_shards; shard++)
		add_shard_row(store, desc, shard, now);
	return (Datum) 0;
}

/* The OUT columns of outbox_broker_stats(), read from a shard's broker b. */
#define BROKER_COLUMNS(X) \
	X("shard", INT4OID, false, Int32GetDatum(shard)) \
	X("broker", TEXTOID, false, CStringGetTextDatum(b->name)) \
	X("state", TEXTOID, false, CStringGetTextDatum(b->state)) \
	X("rtt_avg_ms", FLOAT8OID, false, Float8GetDatum(b->rtt_avg_ms)) \
	X("in_flight", INT8OID, false, Int64GetDatum(b->in_flight)) \
	X("requests", INT8OID, false, Int64GetDatum(b->requests))

static const StatsColumn broker_columns[] = {BROKER_COLUMNS(COLUMN_DEF)};

/* Each broker each shard's producer reported in its last statistics. */
PG_FUNCTION_INFO_V1(outbox_broker_stats);
Datum
outbox_broker_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Tuplestorestate *store;

	require_shared_memory();
	store = begin_rows(fcinfo, &desc, broker_columns, lengthof(broker_columns));
	for (int shard = 0; shard < outbox_shards; shard++)
	{
		ShardStats	entry;

		if (!copy_entry(shard, &entry) || !entry.attached)
			continue;
		for (int i = 0; i < entry.nbrokers; i++)
		{
			const OutboxBrokerInfo *b = &entry.brokers[i];
			Datum		values[lengthof(broker_columns)];
			bool		nulls[lengthof(broker_columns)];
			int			column = 0;

			BROKER_COLUMNS(FILL_COLUMN)
			tuplestore_putvalues(store, desc, values, nulls);
		}
	}
	return (Datum) 0;
}

/* Clears the counters of this database's shards. */
PG_FUNCTION_INFO_V1(outbox_stats_reset);
Datum
outbox_stats_reset(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();

	require_shared_memory();
	for (int i = 0; i < stats->nentries; i++)
	{
		ShardStats *entry = &stats->entries[i];

		SpinLockAcquire(&entry->mutex);
		if (entry->dboid == MyDatabaseId)
			clear_counters(entry, now);
		SpinLockRelease(&entry->mutex);
	}
	PG_RETURN_VOID();
}
