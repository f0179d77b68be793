/*
 * worker.c
 *		The delivery worker, one per shard: read a batch of committed
 *		events, produce them, wait for Kafka's acknowledgements, delete what
 *		was acknowledged, and sleep until a commit wakes it.
 *
 * The worker waits instead of exiting when the database is being dropped,
 * the extension is absent, the server is in recovery, delivery is paused
 * or Kafka is unreachable; an error in a pass is logged and the pass is
 * retried after a back-off, so the worker never crash-loops.
 */
#include "message.h"
#include "stats.h"

#include <ctype.h>

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* How often the wait for delivery reports looks at interrupts. */
#define SERVE_SLICE_MS 100

/* Longest sleep between two looks at Kafka's state and the shard's lag. */
#define LOOK_AROUND_MS 1000

typedef enum WaitReason
{
	WAIT_NONE,
	WAIT_DISABLED,
	WAIT_RECOVERY,
	WAIT_PRODUCER
} WaitReason;

typedef struct WorkerState
{
	int			slot;			/* in shared memory (shmem.c) */
	int			shard;
	bool		extension_gone;	/* a read found no extension: exit */
	OutboxProducer *producer;
	char	   *producer_settings;	/* what the producer was built from */
	bool		rebuild_producer;	/* settings changed since */
	int64		cursor;			/* every id below is read or can't appear */
	uint64		rewind_generation;
	bool		adopted_orphans;
	int			backoff_ms;		/* 0 while delivery succeeds */
	TimestampTz backoff_until;	/* commits do not cut a back-off short */
	WaitReason	logged_wait;	/* so each wait is logged once */
	/* two batches: one in flight while the next is read and produced */
	MemoryContext batch_contexts[2];
	OutboxBatch batches[2];
	OutboxBatch *in_flight;		/* produced, reports not all served; or NULL */
	OutboxBatch *settling;		/* reports served, rows not settled; or NULL */
	MemoryContext pass_context;	/* anything else a pass allocates */
	XLogRecPtr	settled_lsn;	/* commit of the last settle, maybe unflushed */
	TimestampTz next_pass_at;	/* unless a commit wakes the worker first */
} WorkerState;

/* For the log, the envelope and Kafka's client.id: set once connected. */
static char database_name[NAMEDATALEN];
static char worker_name[NAMEDATALEN + 32] = "outbox";
static char client_id[NAMEDATALEN + 32];

const char *
outbox_worker_name(void)
{
	return worker_name;
}

/*
 * Without the extension (never created, or dropped) the worker exits once
 * nothing is in flight; the launcher learns it from the slot.
 */
static void
exit_unless_extension(WorkerState *st, bool found)
{
	if (found)
	{
		outbox_worker_found_extension(st->slot, true);
		return;
	}
	if (st->in_flight != NULL || st->settling != NULL)
		return;
	outbox_worker_found_extension(st->slot, false);
	outbox_stats_set_state(SHARD_NO_EXTENSION);
	proc_exit(0);
}

static void
log_wait_once(WorkerState *st, WaitReason reason, const char *message)
{
	if (st->logged_wait == reason)
		return;
	st->logged_wait = reason;
	ereport(LOG, (errmsg("%s: %s", worker_name, message)));
}

/* Doubles the back-off within its bounds and returns it. */
static long
back_off(WorkerState *st)
{
	int			max_ms = Max(outbox_retry_backoff_min_ms, outbox_retry_backoff_max_ms);

	if (st->backoff_ms <= 0)
		st->backoff_ms = outbox_retry_backoff_min_ms;
	else
		st->backoff_ms = (int) Min((long) max_ms, 2L * st->backoff_ms);
	st->backoff_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), st->backoff_ms);
	return st->backoff_ms;
}

static long
backoff_remaining_ms(WorkerState *st)
{
	long		secs;
	int			usecs;

	if (st->backoff_until == 0)
		return 0;
	TimestampDifference(GetCurrentTimestamp(), st->backoff_until, &secs, &usecs);
	return secs * 1000 + usecs / 1000;
}

static char *
current_producer_settings(void)
{
	return MemoryContextStrdup(TopMemoryContext,
							   psprintf("%s|%s|%d", outbox_brokers, outbox_kafka_config,
										outbox_max_message_bytes));
}

static void
reload_settings(WorkerState *st)
{
	char	   *settings;

	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	settings = current_producer_settings();
	if (st->producer_settings != NULL && strcmp(settings, st->producer_settings) != 0)
		st->rebuild_producer = true;
	pfree(settings);
}

static void
drop_producer(WorkerState *st)
{
	if (st->producer != NULL)
		outbox_producer_destroy(st->producer);
	st->producer = NULL;
	st->rebuild_producer = false;
}

/* librdkafka's threads must be gone before the process exits */
static void
drop_producer_at_exit(int code, Datum arg)
{
	drop_producer((WorkerState *) DatumGetPointer(arg));
}

static bool
ensure_producer(WorkerState *st)
{
	char	   *error = NULL;

	if (st->producer != NULL && !st->rebuild_producer &&
		!outbox_producer_is_fatal(st->producer))
		return true;
	if (st->producer != NULL)
		ereport(LOG, (errmsg("%s: rebuilding the Kafka producer", worker_name)));
	drop_producer(st);

	if (st->producer_settings != NULL)
		pfree(st->producer_settings);
	st->producer_settings = current_producer_settings();
	st->producer = outbox_producer_create(worker_name, client_id, &error);
	if (st->producer == NULL)
	{
		outbox_stats_set_state(SHARD_BACKING_OFF);
		outbox_stats_error(error);
		log_wait_once(st, WAIT_PRODUCER,
					  psprintf("cannot create the Kafka producer, waiting for a settings change: %s",
							   error));
		return false;
	}
	return true;
}

/* Produces the batch in id order; a key refused at once holds its rest. */
static void
produce_batch(WorkerState *st, OutboxBatch *batch)
{
	int		   *refused = palloc(sizeof(int) * Max(batch->nevents, 1));
	int			nrefused = 0;

	for (int i = 0; i < batch->nevents; i++)
	{
		OutboxEvent *event = &batch->events[i];
		OutboxRecord record;
		bool		held = false;

		for (int r = 0; r < nrefused && !event->key_isnull; r++)
		{
			OutboxEvent *earlier = &batch->events[refused[r]];

			if (!earlier->key_isnull && earlier->keylen == event->keylen &&
				memcmp(earlier->key, event->key, event->keylen) == 0)
				held = true;
		}
		if (held)
			continue;

		outbox_message_build(event, outbox_instance_id(), &record);
		if (!outbox_producer_produce(st->producer, batch, event, &record))
			refused[nrefused++] = i;
	}
}

/*
 * Reports that did not come back even after a purge: their fate is
 * unknown, so the events stay for another attempt, and the producer goes
 * (destroying it is the only way to be sure no late report lands in
 * memory about to be reused).
 */
static void
abandon_reports(WorkerState *st, OutboxBatch *batch)
{
	drop_producer(st);
	for (int i = 0; i < batch->nevents; i++)
	{
		if (batch->events[i].outcome != EVENT_IN_FLIGHT)
			continue;
		batch->events[i].outcome = EVENT_FAILED_RETRIABLE;
		batch->events[i].error = "no delivery report before the producer was stopped";
	}
	batch->in_flight = 0;
}

/* The state to show: "otherwise", unless the producer finds Kafka down. */
static OutboxShardState
kafka_state(WorkerState *st, OutboxShardState otherwise)
{
	if (st->producer != NULL && outbox_producer_kafka_down(st->producer))
		return SHARD_WAITING_FOR_KAFKA;
	return otherwise;
}

/* The lowest id the worker may still have to deliver. */
static int64
lowest_undelivered_id(WorkerState *st)
{
	int64		id = st->cursor;

	if (st->in_flight != NULL && st->in_flight->nevents > 0)
		id = Min(id, st->in_flight->events[0].id);
	if (st->settling != NULL && st->settling->nevents > 0)
		id = Min(id, st->settling->events[0].id);
	return id;
}

/*
 * What the worker does about once a second whatever it is waiting for:
 * publish what its producer knows of Kafka, and look at the shard's lag.
 * Outside any transaction.
 */
static void
look_around(WorkerState *st)
{
	if (st->producer != NULL)
	{
		outbox_producer_poll(st->producer);
		outbox_producer_report_state(st->producer);
		outbox_producer_publish_brokers(st->producer);
	}
	outbox_check_lag(st->shard, lowest_undelivered_id(st));
}

/*
 * Serves delivery reports until every event is settled. A stop request
 * (SIGTERM) or a producer rebuild waits at most outbox.shutdown_timeout,
 * then purges the rest, which stays in the outbox for the next attempt.
 */
static void
wait_for_reports(WorkerState *st, OutboxBatch *batch)
{
	TimestampTz deadline = 0;

	while (batch->in_flight > 0)
	{
		if (ProcDiePending || st->rebuild_producer)
		{
			if (deadline == 0)
				deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   outbox_shutdown_timeout_ms);
			if (GetCurrentTimestamp() >= deadline)
			{
				outbox_producer_purge(st->producer);
				break;
			}
		}
		if (!PostmasterIsAlive())
			proc_exit(1);
		if (ConfigReloadPending)
			reload_settings(st);
		outbox_producer_serve(st->producer, SERVE_SLICE_MS);
		outbox_stats_set_state(kafka_state(st, SHARD_DELIVERING));
		look_around(st);
	}
	if (batch->in_flight > 0)
		abandon_reports(st, batch);
}

/*
 * When nothing got through and Kafka said "later" for everything, Kafka
 * is down or unreachable: keep the rows untouched and retry them all, in
 * order, after a back-off, instead of writing a retry time on each row.
 */
static bool
kafka_unavailable(OutboxBatch *batch)
{
	int			retriable = 0;
	const char *error = NULL;

	for (int i = 0; i < batch->nevents; i++)
	{
		EventOutcome outcome = batch->events[i].outcome;

		if (outcome == EVENT_DELIVERED || outcome == EVENT_FAILED_PERMANENT)
			return false;
		if (outcome == EVENT_FAILED_RETRIABLE)
		{
			retriable++;
			error = batch->events[i].error;
		}
	}
	if (retriable == 0)
		return false;
	ereport(DEBUG1,
			(errmsg_internal("outbox: Kafka took none of %d events: %s", retriable, error)));
	for (int i = 0; i < batch->nevents; i++)
		if (batch->events[i].outcome == EVENT_FAILED_RETRIABLE)
			batch->events[i].outcome = EVENT_SKIPPED;
	return true;
}

/*
 * The next read starts at the lowest id that may still be in the outbox
 * for us: an event of this batch that will not be deleted (events in
 * flight are counted as delivered: if one fails, the cursor is computed
 * again once the batch is settled), one waiting for its retry, one an open
 * transaction may still commit, or the first id not read.
 */
static int64
next_cursor(OutboxBatch *batch)
{
	int64		cursor = Min(batch->floor, batch->held_min_id);

	if (batch->nevents == 0)
		return Min(cursor, batch->scan_from);
	cursor = Min(cursor, batch->events[batch->nevents - 1].id + 1);
	for (int i = 0; i < batch->nevents; i++)
	{
		EventOutcome outcome = batch->events[i].outcome;

		if (outcome != EVENT_DELIVERED && outcome != EVENT_IN_FLIGHT)
			cursor = Min(cursor, batch->events[i].id);
	}
	return cursor;
}

static bool
all_delivered(OutboxBatch *batch)
{
	for (int i = 0; i < batch->nevents; i++)
		if (batch->events[i].outcome != EVENT_DELIVERED)
			return false;
	return true;
}

static void
log_refusals(WorkerState *st, OutboxBatch *batch)
{
	OutboxEvent *first = NULL;
	int			refused = 0;

	for (int i = 0; i < batch->nevents; i++)
	{
		if (batch->events[i].outcome != EVENT_FAILED_PERMANENT)
			continue;
		if (first == NULL)
			first = &batch->events[i];
		refused++;
	}
	if (first != NULL)
		ereport(LOG,
				(errmsg("%s: Kafka refused %d event(s), the first with id " INT64_FORMAT ": %s",
						worker_name, refused, first->id, first->error),
				 errdetail("Refused events are retried after a back-off and become dead letters after outbox.max_attempts.")));
}

static MemoryContext
batch_context(WorkerState *st, OutboxBatch *batch)
{
	return st->batch_contexts[batch - st->batches];
}

/*
 * The batch slot neither in flight nor settling, emptied for the next
 * read. A read happens only once the previous batch was settled, so one
 * of the two slots is always free then.
 */
static OutboxBatch *
free_slot(WorkerState *st)
{
	int			slot = (st->in_flight == &st->batches[0]) ? 1 : 0;

	Assert(st->settling == NULL);
	MemoryContextReset(st->batch_contexts[slot]);
	return &st->batches[slot];
}

/* Drops from batch the events of the batch in flight (read again because
 * an open transaction's lower id made the scan start below them). */
static void
drop_in_flight_events(OutboxBatch *batch, OutboxBatch *in_flight)
{
	int			kept = 0;
	int			j = 0;

	/* ids start again at 1 in a re-created extension: not the same events */
	if (batch->extension_oid != in_flight->extension_oid)
		return;
	for (int i = 0; i < batch->nevents; i++)
	{
		int64		id = batch->events[i].id;

		/* both batches are in id order */
		while (j < in_flight->nevents && in_flight->events[j].id < id)
			j++;
		if (j < in_flight->nevents && in_flight->events[j].id == id)
			continue;
		batch->events[kept++] = batch->events[i];
	}
	batch->nevents = kept;
}

/* Reads the next batch from the cursor; NULL while the extension is absent. */
static OutboxBatch *
read_next_batch(WorkerState *st)
{
	OutboxBatch *batch = free_slot(st);
	MemoryContext old = MemoryContextSwitchTo(batch_context(st, batch));
	bool		found;

	found = outbox_read_batch(batch, st->slot, st->shard, st->cursor,
							  outbox_batch_size, st->rewind_generation);
	MemoryContextSwitchTo(old);
	if (!found)
	{
		st->extension_gone = true;
		return NULL;
	}
	if (st->in_flight != NULL)
		drop_in_flight_events(batch, st->in_flight);
	return batch;
}

/*
 * Takes in what a read saw: where the next read starts, and the rewind
 * (dead letters put back) it covered. Only a read whose batch is used may
 * do so: one thrown away must leave the rewind for the next read.
 */
static void
take_in_read(WorkerState *st, OutboxBatch *batch)
{
	st->cursor = next_cursor(batch);
	st->rewind_generation = batch->rewind_generation;
}

/*
 * Produces a batch once the commits it saw are durable. Returns false,
 * producing nothing, when the worker stops before that.
 */
static bool
start_batch(WorkerState *st, OutboxBatch *batch)
{
	MemoryContext old;

	/*
	 * Settles commit asynchronously (they are not on the path of a commit
	 * fsync, which other sessions' commits usually do for them), but a
	 * settle's deletes must be durable before the batch after next is
	 * produced: then a crash re-sends at most the two batches in flight.
	 */
	if (!XLogRecPtrIsInvalid(st->settled_lsn))
		XLogFlush(st->settled_lsn);
	if (!outbox_wait_durable(batch->visible_lsn))
		return false;
	pgstat_report_activity(STATE_RUNNING, "outbox: producing a batch");
	/* in flight before the first message: an error halfway keeps it */
	st->in_flight = batch;
	take_in_read(st, batch);
	outbox_stats_set_state(SHARD_DELIVERING);
	old = MemoryContextSwitchTo(batch_context(st, batch));
	produce_batch(st, batch);
	MemoryContextSwitchTo(old);
	outbox_stats_in_flight(batch);
	return true;
}

static bool
may_start_batch(WorkerState *st)
{
	return outbox_enabled && !ProcDiePending && !st->rebuild_producer &&
		!RecoveryInProgress();
}

/*
 * Deletes what Kafka acknowledged and records failures. An error leaves
 * the batch settling: the next pass retries the settle alone, after a
 * back-off, and never produces the batch again.
 */
static void
settle(WorkerState *st)
{
	OutboxBatch *batch = st->settling;

	outbox_finish_batch(batch, st->shard);
	st->settled_lsn = XactLastCommitEnd;
	st->settling = NULL;
	outbox_stats_in_flight(st->in_flight);
	if (st->in_flight == NULL)
		st->cursor = next_cursor(batch);
	/* an idle worker holds no payloads */
	MemoryContextReset(batch_context(st, batch));
	batch->nevents = 0;
	batch->events = NULL;
}

/*
 * One step of the delivery pipeline: read the next batch while Kafka
 * acknowledges the one in flight, then settle that one; the next is
 * produced before the settling transaction, so its acknowledgements come
 * while the database works. A batch is produced only after the previous
 * one was delivered in full: after any failure the worker rereads from the
 * failed event, so per-key order holds. Returns how long to sleep before
 * the next step (0: go on at once).
 */
static long
deliver_step(WorkerState *st)
{
	OutboxBatch *done;
	OutboxBatch *next = NULL;
	bool		unavailable = false;

	if (st->settling != NULL)
		settle(st);
	done = st->in_flight;
	if (may_start_batch(st))
	{
		next = read_next_batch(st);
		if (next == NULL && done == NULL)
			return outbox_poll_interval_ms;
	}
	if (done == NULL)
	{
		/* without a producer (a settle retried after it was dropped), the
		 * next pass makes one before anything is produced */
		if (next == NULL || next->nevents == 0 || st->producer == NULL)
		{
			if (next != NULL && next->nevents == 0)
				take_in_read(st, next);
			outbox_stats_set_state(kafka_state(st, SHARD_IDLE));
			return outbox_poll_interval_ms;
		}
		start_batch(st, next);
		return 0;
	}

	wait_for_reports(st, done);
	outbox_stats_batch_done(done);
	unavailable = kafka_unavailable(done);
	log_refusals(st, done);
	st->in_flight = NULL;
	st->settling = done;
	if (all_delivered(done) && next != NULL && next->nevents > 0 &&
		may_start_batch(st) && st->producer != NULL)
		start_batch(st, next);
	settle(st);
	pgstat_report_activity(STATE_IDLE, NULL);

	if (unavailable)
	{
		outbox_stats_set_state(SHARD_WAITING_FOR_KAFKA);
		return back_off(st);
	}
	st->backoff_ms = 0;
	st->backoff_until = 0;
	return 0;
}

/*
 * A stop request (SIGTERM) must not cut a step short while a batch is in
 * flight, or its acknowledgements would be lost and the batch sent again:
 * interrupts are held, the step notices the request itself
 * (ProcDiePending), waits at most outbox.shutdown_timeout for the
 * acknowledgements, deletes what was acknowledged and starts nothing new;
 * the main loop then exits.
 */
static long
deliver(WorkerState *st)
{
	long		wait_ms;

	HOLD_INTERRUPTS();
	wait_ms = deliver_step(st);
	RESUME_INTERRUPTS();
	return wait_ms;
}

/*
 * After an error in a pass: the batches survive it (their memory is the
 * worker's, not the transaction's), so the one in flight is still seen
 * through and the one settling is settled again later, without being sent
 * again. Only a stopping worker gives them up, rather than retry an error
 * until the postmaster loses patience.
 */
static void
recover_from_error(WorkerState *st)
{
	if (ProcDiePending && (st->in_flight != NULL || st->settling != NULL))
	{
		if (st->in_flight != NULL)
			abandon_reports(st, st->in_flight);
		st->in_flight = NULL;
		st->settling = NULL;
	}
	if (st->in_flight == NULL && st->settling == NULL)
		st->cursor = 0;
}

/*
 * One pass with its own error recovery: an error is logged, the
 * transaction rolled back, and the pass retried after a back-off.
 */
static long
run_pass(WorkerState *st)
{
	MemoryContext pass_context = CurrentMemoryContext;
	uint32		holdoff = InterruptHoldoffCount;
	volatile long wait_ms = 0;

	/* a back-off holds also a settle to retry; a stop request cuts it short */
	wait_ms = backoff_remaining_ms(st);
	if (wait_ms > 0 && !ProcDiePending)
		return wait_ms;
	/* with a batch in flight or settling, always see it through */
	if (st->in_flight == NULL && st->settling == NULL)
	{
		if (!outbox_enabled)
		{
			outbox_stats_set_state(SHARD_PAUSED);
			log_wait_once(st, WAIT_DISABLED, "delivery paused (outbox.enabled = off)");
			return outbox_poll_interval_ms;
		}
		if (RecoveryInProgress())
		{
			outbox_stats_set_state(SHARD_RECOVERY);
			log_wait_once(st, WAIT_RECOVERY, "server is in recovery, waiting for promotion");
			return outbox_poll_interval_ms;
		}
		if (!ensure_producer(st))
			return outbox_poll_interval_ms;
		st->logged_wait = WAIT_NONE;
	}

	PG_TRY();
	{
		if (!st->adopted_orphans)
		{
			int			adopted = outbox_reshard_orphans(st->shard);

			if (adopted > 0)
				ereport(LOG,
						(errmsg("%s: adopted %d event(s) of removed shards",
								worker_name, adopted)));
			st->adopted_orphans = true;
		}
		wait_ms = deliver(st);
	}
	PG_CATCH();
	{
		/* an error skips deliver()'s RESUME_INTERRUPTS */
		ErrorData  *error;

		InterruptHoldoffCount = holdoff;
		MemoryContextSwitchTo(pass_context);
		error = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		outbox_stats_error(error->message);
		outbox_stats_set_state(SHARD_BACKING_OFF);
		recover_from_error(st);
		wait_ms = back_off(st);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(pass_context);
	return wait_ms;
}

/*
 * Interrupts between passes. A stop is honoured only with nothing in
 * flight or settling (a pass sees those through first); a cancel
 * (pg_cancel_backend) has no statement to cancel here, and left pending it
 * would turn into FATAL outside any error handler.
 */
static void
handle_interrupts(WorkerState *st)
{
	QueryCancelPending = false;
	if (st->in_flight == NULL && st->settling == NULL)
		CHECK_FOR_INTERRUPTS();
}

/*
 * Whatever the database's or the role's settings say, the worker's SQL
 * resolves names in pg_catalog only, and nothing a database owner can set
 * makes its transactions read-only, cancels them, or changes their
 * isolation.
 */
static void
force_session_settings(void)
{
	static const char *const settings[][2] = {
		{"search_path", "pg_catalog, pg_temp"},
		{"default_transaction_read_only", "off"},
		{"default_transaction_isolation", "read committed"},
		{"default_transaction_deferrable", "off"},
		{"statement_timeout", "0"},
		{"lock_timeout", "0"},
		{"idle_in_transaction_session_timeout", "0"},
		{"session_replication_role", "origin"},
		{"plan_cache_mode", "auto"},
		/* see start_batch() for how durability is kept */
		{"synchronous_commit", "off"},
	};

	for (size_t i = 0; i < lengthof(settings); i++)
		SetConfigOption(settings[i][0], settings[i][1], PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * Sleeps until the next pass is due or a commit (the latch) calls for one,
 * but at most a second, so look_around() runs that often.
 */
static void
wait_for_next_pass(WorkerState *st)
{
	long		secs;
	int			usecs;
	long		ms;
	int			rc;

	TimestampDifference(GetCurrentTimestamp(), st->next_pass_at, &secs, &usecs);
	ms = secs * 1000 + usecs / 1000;
	if (ms <= 0)
		return;
	rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
				   Min(ms, LOOK_AROUND_MS), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	if (rc & WL_LATCH_SET)
		st->next_pass_at = 0;
	handle_interrupts(st);
}

/*
 * Connects to the slot's database; the first worker of a database to do so
 * finds out for the launcher whether the extension is there, and exits if
 * not (the launcher starts it again when it hears of a CREATE EXTENSION).
 */
static void
connect_to_database(WorkerState *st)
{
	Oid			dboid;
	uint32		generation;
	char	   *name;

	/* the launcher gave the slot up before we came: nothing is ours */
	memcpy(&generation, MyBgworkerEntry->bgw_extra, sizeof(generation));
	if (!outbox_worker_attach(st->slot, generation, &dboid, &st->shard))
		proc_exit(0);
	outbox_stats_attach(dboid, st->shard);
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	force_session_settings();

	StartTransactionCommand();
	name = get_database_name(MyDatabaseId);
	/* dropped between the launcher's look and our connection */
	if (name == NULL)
		proc_exit(0);
	strlcpy(database_name, name, sizeof(database_name));
	CommitTransactionCommand();
	snprintf(worker_name, sizeof(worker_name), "outbox \"%s\" shard %d", database_name,
			 st->shard);
	pgstat_report_appname(psprintf("outbox %s shard %d of %d", database_name, st->shard,
								   outbox_shards));
	snprintf(client_id, sizeof(client_id), "pg_outbox-%s-shard-%d", database_name, st->shard);
	for (char *c = client_id; *c; c++)
		if (!isalnum((unsigned char) *c) && *c != '-' && *c != '.' && *c != '_')
			*c = '_';
	outbox_message_init(database_name);
	exit_unless_extension(st, outbox_extension_exists());
}

void
outbox_worker_main(Datum main_arg)
{
	WorkerState st;

	memset(&st, 0, sizeof(st));
	st.slot = DatumGetInt32(main_arg);

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	/*
	 * A reload signalled between our fork and the handler above was
	 * ignored (SIG_IGN until then), and we may have been forked with the
	 * settings from before it: read the files once now.
	 */
	ProcessConfigFile(PGC_SIGHUP);

	connect_to_database(&st);
	before_shmem_exit(drop_producer_at_exit, PointerGetDatum(&st));
	for (int i = 0; i < 2; i++)
		st.batch_contexts[i] = AllocSetContextCreate(TopMemoryContext, "outbox batch",
													 ALLOCSET_DEFAULT_SIZES);
	st.pass_context = AllocSetContextCreate(TopMemoryContext, "outbox pass",
											ALLOCSET_DEFAULT_SIZES);
	ereport(LOG,
			(errmsg("%s of %d started: delivering to %s", worker_name, outbox_shards,
					outbox_brokers)));

	for (;;)
	{
		handle_interrupts(&st);
		/* what a pass allocates outside its batches lives until the next */
		MemoryContextSwitchTo(st.pass_context);
		MemoryContextReset(st.pass_context);
		if (ConfigReloadPending)
		{
			reload_settings(&st);
			st.next_pass_at = 0;
		}
		if (GetCurrentTimestamp() >= st.next_pass_at)
			st.next_pass_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  run_pass(&st));
		if (st.extension_gone)
			exit_unless_extension(&st, false);
		look_around(&st);
		wait_for_next_pass(&st);
	}
}
