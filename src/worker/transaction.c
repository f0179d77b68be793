/*
 * transaction.c
 *		Exactly-once delivery (outbox.delivery = exactly_once): the shard's
 *		producer is transactional, and what the worker produces goes out in
 *		Kafka transactions, each with a progress record naming its event
 *		ids (progress.c). The rows are settled only once Kafka committed
 *		the transaction; after a start or a producer failure, the last
 *		committed record is read back and its events settled before
 *		anything is produced. So a read_committed consumer sees each event
 *		once, whatever crashes between producing, committing and settling.
 *
 * The worker calls in as its delivery mode (delivery.h): before a read
 * (ready), around the produce of a read (begin, produced), once every
 * report is in (finish: close, commit or abort), when it settles, and
 * when its producer goes. A transaction closes, its progress record
 * naming every event it carries produced right after them, at its first
 * short read (the backlog is drained) or once it reaches
 * MAX_TRANSACTION_EVENTS; a
 * drain's full reads accumulate in it until then, and in any case it
 * takes no read once what it produced is all acknowledged (the record
 * then names what was delivered). It commits once every report is in and
 * none failed, then the window is settled; only then does a new one
 * begin. So at most one committed transaction is ever unsettled, the one
 * the last progress record names, and a transaction holds what one read
 * found after the last commit, or the reads of a drain (at most
 * outbox.window_size events, and MAX_TRANSACTION_EVENTS and a read).
 * The record goes out right after the events, not once their reports are
 * in, so that librdkafka adds the progress topic's partition to the
 * transaction with the events' partitions and the record travels with
 * them: its own AddPartitionsToTxn and produce round trips would come on
 * top of every commit's.
 *
 *   NEED_INIT --init_transactions--> RECOVER --last record settled--> READY
 *   READY --begin--> OPEN --short or full read, or all acknowledged:
 *       progress record; all acknowledged: commit--> COMMITTED
 *       --settled--> READY
 *   OPEN --a failure: abort--> READY (the window reads the events again)
 *   OPEN --commit's outcome unknown, or fenced--> LOST --producer
 *       rebuilt--> NEED_INIT
 *   RECOVER --a later timeline's record--> SUPERSEDED (delivers nothing)
 *
 * The transactional.id is the same for (system identifier, database oid,
 * shard): a new incarnation of the worker, or a promoted standby, fences
 * the old one's producer (init_transactions), which then cannot commit.
 *
 * librdkafka's blocking calls get short timeouts and are called again:
 * they are resumable, and between two the worker serves interrupts and
 * its loop (SIGTERM, barriers).
 */
#include "worker/delivery.h"
#include "kafka/errors.h"
#include "settings.h"
#include "shared/stats.h"
#include "stop.h"
#include "table/durability.h"
#include "table/queue.h"
#include "worker/progress.h"

#include <librdkafka/rdkafka.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* One blocking librdkafka call's longest wait. */
#define CALL_TIMEOUT_MS 500

/* init_transactions calls per attempt (the next read tries again). */
#define INIT_CALLS 10

/*
 * A transaction takes no more reads past this many events: its progress
 * record (about 20 bytes an id at worst) stays far below Kafka's 1 MB.
 */
#define MAX_TRANSACTION_EVENTS 10000

/* How long a test pause lasts at most. */
#define TEST_PAUSE_MS 60000

/* A commit or abort that timed out is called again after. */
#define CALL_AGAIN_MS 20

/* What finish_transaction found. */
typedef enum TxnOutcome
{
	TXN_NOTHING,				/* nothing open, not due yet, or to call again */
	TXN_COMMITTED,				/* settle the window */
	TXN_ABORTED,				/* read its delivered events again */
	TXN_LOST_OUTCOME			/* fenced or unknown: rebuild the producer */
} TxnOutcome;

typedef enum TxnState
{
	TS_NEED_INIT,
	TS_RECOVER,
	TS_READY,
	TS_OPEN,
	TS_COMMITTED,
	TS_LOST,
	TS_SUPERSEDED
} TxnState;

typedef struct OutboxTxn
{
	TxnState	state;
	int			shard;
	const char *who;			/* the worker, for the log */
	char		key[128];		/* the transactional.id and the record's key */
	int32		partition;		/* of the progress topic, for key */
	int64		known_offset;	/* of our last committed record, -1 if unknown */
	bool		closing;		/* its progress record is produced: no more reads */
	bool		lost_told;		/* the worker heard of TS_LOST */
	bool		progress_failed;	/* refused at once */
	bool		waiting;		/* a commit or abort to call again */
	bool		logged_superseded;
	int			events;			/* in the open transaction */
	TimestampTz opened_at;
	char		instance[64];	/* outbox_instance of its reads (the record's) */
	/* what the open transaction produced, for a record before the reports */
	int64	   *ids;
	int			nids;
	int			ids_cap;
	Oid			extension;		/* of its reads, InvalidOid if they differ */
} OutboxTxn;

/* The worker's shard's (one worker a process). */
static OutboxTxn *shard_txn;

static void publish(OutboxTxn *txn);

/* The transactional.id of (system, database, shard), for the producers. */
static void
start(int shard, const char *who)
{
	OutboxTxn  *txn = MemoryContextAllocZero(TopMemoryContext, sizeof(OutboxTxn));

	txn->shard = shard;
	txn->who = who;
	txn->known_offset = -1;
	snprintf(txn->key, sizeof(txn->key), "pg_outbox-" UINT64_FORMAT "-%u-%d",
			 GetSystemIdentifier(), MyDatabaseId, shard);
	publish(txn);
	shard_txn = txn;
}

static const char *
transactional_id(void)
{
	return shard_txn->key;
}

static void
publish(OutboxTxn *txn)
{
	outbox_stats_transaction(txn->state == TS_OPEN ? txn->events : 0,
							 txn->state == TS_OPEN ? txn->opened_at : 0);
}

/*
 * The test-only pause (outbox.test_pause_at): the worker waits there, so
 * that a test can kill it in that gap. A reload that changes the setting,
 * a stop request, or a minute ends it.
 */
static void
pause_at(OutboxTxn *txn, int point, const char *name)
{
	if (outbox_test_pause_at != point)
		return;
	ereport(LOG, (errmsg("%s: test pause %s (pid %d, %d event(s))", txn->who, name, MyProcPid,
						 txn->events)));
	for (int waited = 0; waited < TEST_PAUSE_MS && outbox_test_pause_at == point; waited += 100)
	{
		pg_usleep(100 * 1000L);
		CHECK_FOR_INTERRUPTS();
		if (outbox_stop_requested())
			break;
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
	}
}

static char *
take_error(rd_kafka_error_t *error)
{
	char	   *text = psprintf("%s: %s", rd_kafka_error_name(error), rd_kafka_error_string(error));

	rd_kafka_error_destroy(error);
	return text;
}

/*
 * init_transactions, a few short calls: it fences an older producer of the
 * same transactional.id and completes (or aborts) its last transaction.
 * A fatal error is the producer's (the worker rebuilds it, with a back-off
 * when Kafka refuses it as a whole).
 */
static bool
init_transactions(OutboxTxn *txn, rd_kafka_t *rk)
{
	for (int i = 0; i < INIT_CALLS; i++)
	{
		rd_kafka_error_t *error = rd_kafka_init_transactions(rk, CALL_TIMEOUT_MS);

		if (error == NULL)
			return true;
		if (outbox_kafka_call_error(error) != KAFKA_LATER)
		{
			char	   *text = take_error(error);

			ereport(LOG,
					(errmsg("%s: the Kafka producer cannot start transactions", txn->who),
					 errdetail("%s", text)));
			outbox_stats_error(text);
			return false;
		}
		rd_kafka_error_destroy(error);
		CHECK_FOR_INTERRUPTS();
		if (outbox_stop_requested())
			return false;
	}
	return false;
}

static void
recover(OutboxTxn *txn)
{
	int			settled = 0;
	ProgressRecovery found = outbox_progress_recover(txn->who, txn->key, txn->shard,
													 &txn->partition, &txn->known_offset,
													 &settled);

	if (found == PROGRESS_SUPERSEDED)
	{
		txn->state = TS_SUPERSEDED;
		return;
	}
	if (found == PROGRESS_STOPPED)
		return;
	if (settled > 0)
		ereport(LOG,
				(errmsg("%s: settled %d event(s) of its last committed Kafka transaction",
						txn->who, settled)));
	txn->state = TS_READY;
}

/*
 * A read may be produced once transactions are initialised, and the last
 * committed transaction settled (the window empty), or while a transaction
 * open takes more reads.
 */
static bool
ready(OutboxProducer *producer, bool window_empty)
{
	OutboxTxn  *txn = shard_txn;

	if (txn->state == TS_NEED_INIT)
	{
		if (!init_transactions(txn, outbox_producer_handle(producer)))
			return false;
		txn->state = TS_RECOVER;
	}
	/* the window holds no event of ours once it is empty */
	if (txn->state == TS_RECOVER && window_empty)
		recover(txn);
	if (txn->state == TS_SUPERSEDED && !txn->logged_superseded)
	{
		ereport(WARNING,
				(errmsg("%s: a server on a later timeline delivers this shard; this one delivers nothing more",
						txn->who),
				 errdetail("The last progress record in \"%s\" was written after a failover or a point-in-time recovery of this server.",
						   outbox_progress_topic),
				 errhint("Rejoin this server as a standby, or set outbox.enabled = off on it.")));
		txn->logged_superseded = true;
	}
	publish(txn);
	if (txn->state == TS_OPEN)
		return !txn->closing && txn->events < MAX_TRANSACTION_EVENTS;
	return txn->state == TS_READY && window_empty;
}

static void
begin(OutboxProducer *producer)
{
	OutboxTxn  *txn = shard_txn;
	rd_kafka_error_t *error;

	if (txn->state == TS_OPEN)
		return;
	Assert(txn->state == TS_READY);
	error = rd_kafka_begin_transaction(outbox_producer_handle(producer));
	if (error != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("outbox: cannot begin a Kafka transaction: %s", take_error(error))));
	txn->state = TS_OPEN;
	txn->opened_at = GetCurrentTimestamp();
	txn->events = 0;
	txn->closing = false;
	txn->progress_failed = false;
	txn->waiting = false;
	txn->nids = 0;
	txn->extension = InvalidOid;
}

/* A call Kafka asks for again later: the worker waits, and calls again. */
static bool
call_again(OutboxTxn *txn, rd_kafka_error_t *error)
{
	if (outbox_kafka_call_error(error) != KAFKA_LATER)
		return false;
	rd_kafka_error_destroy(error);
	txn->waiting = true;
	return true;
}

/* An abort, a few short calls; false if the producer failed meanwhile. */
static TxnOutcome
abort_transaction(OutboxTxn *txn, rd_kafka_t *rk)
{
	rd_kafka_error_t *error = rd_kafka_abort_transaction(rk, CALL_TIMEOUT_MS);

	if (error == NULL)
	{
		outbox_stats_transaction_ended(false);
		txn->state = TS_READY;
		txn->waiting = false;
		return TXN_ABORTED;
	}
	if (call_again(txn, error))
		return TXN_NOTHING;
	ereport(LOG,
			(errmsg("%s: aborting a Kafka transaction failed", txn->who),
			 errdetail("%s", take_error(error))));
	txn->state = TS_LOST;
	txn->waiting = false;
	return TXN_LOST_OUTCOME;
}

/* The delivered events the settle will delete (every report is in). */
static int
delivered_ids(OutboxWindow *window, int64 **ids, Oid *extension)
{
	OutboxEvent **events;
	int			nevents = outbox_window_to_settle(window, &events, extension);
	int			n = 0;

	*ids = palloc(sizeof(int64) * Max(nevents, 1));
	for (int i = 0; i < nevents; i++)
		if (events[i]->outcome == EVENT_DELIVERED)
			(*ids)[n++] = events[i]->id;
	return n;
}

/*
 * The transaction takes no more reads: its progress record goes out,
 * naming ids, the events it carries (a read may start below an earlier
 * one's events, the read floor: sorted here).
 */
static void
close_transaction(OutboxTxn *txn, OutboxProducer *producer, Oid extension, int64 *ids, int n)
{
	char	   *record;
	const char *error = NULL;

	qsort(ids, n, sizeof(int64), outbox_compare_ids);
	record = outbox_progress_encode(txn->instance, extension, ids, n);
	txn->closing = true;
	txn->events = n;
	if (!outbox_producer_produce_progress(producer, outbox_progress_topic, txn->partition,
										  txn->key, record, strlen(record), &error))
	{
		txn->progress_failed = true;
		ereport(LOG,
				(errmsg("%s: the progress record was refused, the transaction is aborted: %s",
						txn->who, error)));
	}
}

/*
 * Keeps the ids of what a read produced; returns how many. Some may be
 * delivered already: a full librdkafka queue makes the produce serve
 * reports. (One that failed aborts the transaction: named or not.)
 */
static int
remember_produced(OutboxTxn *txn, OutboxBatch *batch)
{
	int			n = 0;

	if (txn->nids == 0)
		txn->extension = batch->extension_oid;
	else if (txn->extension != batch->extension_oid)
		txn->extension = InvalidOid;
	for (int i = 0; i < batch->nevents; i++)
	{
		EventOutcome outcome = batch->events[i].outcome;

		if (outcome != EVENT_IN_FLIGHT && outcome != EVENT_DELIVERED)
			continue;
		if (txn->nids == txn->ids_cap)
		{
			txn->ids_cap = Max(2 * txn->ids_cap, 1024);
			txn->ids = txn->ids == NULL ?
				MemoryContextAlloc(TopMemoryContext, sizeof(int64) * txn->ids_cap) :
				repalloc(txn->ids, sizeof(int64) * txn->ids_cap);
		}
		txn->ids[txn->nids++] = batch->events[i].id;
		n++;
	}
	return n;
}

/*
 * Whether the transaction closes as soon as its last read is produced: a
 * short read (the backlog is drained: what is committed next waits for
 * this commit anyway), or one that filled it. Its record then travels
 * with the events (librdkafka adds the progress topic's partition to the
 * transaction with theirs, in one request), instead of two more round
 * trips once every report is in. A drain's full reads keep accumulating.
 * The commit still waits for every report (finish); a failed event still
 * aborts it.
 */
static bool
closes_now(OutboxTxn *txn, OutboxProducer *producer, OutboxBatch *batch)
{
	if (batch->more && txn->events < MAX_TRANSACTION_EVENTS)
		return false;
	return txn->extension != InvalidOid &&
		outbox_kafka_fatal(outbox_producer_handle(producer), NULL, 0) == KAFKA_NO_ERROR;
}

/*
 * After a short read (or a full transaction) the transaction closes: its
 * progress record goes out at once.
 */
static void
produced(OutboxProducer *producer, OutboxBatch *batch)
{
	OutboxTxn  *txn = shard_txn;
	int			n;

	if (txn->state != TS_OPEN)
		return;
	n = remember_produced(txn, batch);
	txn->events += n;
	strlcpy(txn->instance, batch->instance, sizeof(txn->instance));
	/*
	 * Nothing went out: no transaction to commit. An abort that must be
	 * called again is finish's (the refused events abort it there; with
	 * none, it commits an empty progress record).
	 */
	if (txn->events == 0)
	{
		(void) abort_transaction(txn, outbox_producer_handle(producer));
		return;
	}
	if (closes_now(txn, producer, batch))
		close_transaction(txn, producer, txn->extension, txn->ids, txn->nids);
	publish(txn);
	if (n > 0)
		pause_at(txn, OUTBOX_PAUSE_AFTER_PRODUCE, "after_produce");
}

static TxnOutcome
commit_transaction(OutboxTxn *txn, rd_kafka_t *rk, const OutboxProgressReport *progress)
{
	rd_kafka_error_t *error;

	pause_at(txn, OUTBOX_PAUSE_BEFORE_COMMIT, "before_commit");

	/*
	 * The settle of the transaction before (an asynchronous commit) must be
	 * durable, and confirmed by the synchronous standbys if there are any,
	 * before this one commits: the progress record names only this one's
	 * events. (The read's own wait for durability covered it already with
	 * synchronous standbys; this is a flush otherwise.)
	 */
	if (!outbox_wait_durable(XactLastCommitEnd, XactLastCommitEnd))
		return TXN_NOTHING;
	error = rd_kafka_commit_transaction(rk, CALL_TIMEOUT_MS);
	if (error == NULL)
	{
		outbox_stats_transaction_ended(true);
		txn->state = TS_COMMITTED;
		txn->waiting = false;
		txn->known_offset = progress->offset;
		publish(txn);
		pause_at(txn, OUTBOX_PAUSE_AFTER_COMMIT, "after_commit");
		return TXN_COMMITTED;
	}
	if (call_again(txn, error))
		return TXN_NOTHING;
	if (outbox_kafka_call_error(error) == KAFKA_TXN_ABORTED)
	{
		ereport(LOG,
				(errmsg("%s: Kafka refused to commit a transaction, aborting it", txn->who),
				 errdetail("%s", take_error(error))));
		return abort_transaction(txn, rk);
	}
	ereport(LOG,
			(errmsg("%s: the commit of a Kafka transaction failed; its outcome is read back from the progress topic",
					txn->who),
			 errdetail("%s", take_error(error))));
	txn->state = TS_LOST;
	txn->waiting = false;
	return TXN_LOST_OUTCOME;
}

/*
 * Once every report of the window is in: close the transaction (its
 * progress record) if the last read did not, then commit it; abort it if
 * an event failed.
 */
static TxnOutcome
finish_transaction(OutboxTxn *txn, OutboxProducer *producer, OutboxWindow *window)
{
	const OutboxProgressReport *progress;
	rd_kafka_t *rk;
	TxnOutcome	outcome;
	int			failed = outbox_window_failed(window);

	if (producer == NULL)
		return TXN_NOTHING;
	/* lost outside finish (an abort in produced): said once */
	if (txn->state == TS_LOST && !txn->lost_told)
	{
		txn->lost_told = true;
		return TXN_LOST_OUTCOME;
	}
	if (txn->state != TS_OPEN || outbox_window_in_flight(window) > 0)
		return TXN_NOTHING;
	rk = outbox_producer_handle(producer);
	/* everything it produced is acknowledged: no more reads */
	if (!txn->closing && failed == 0 &&
		outbox_kafka_fatal(rk, NULL, 0) == KAFKA_NO_ERROR)
	{
		int64	   *ids;
		Oid			extension;
		int			n = delivered_ids(window, &ids, &extension);

		close_transaction(txn, producer, extension, ids, n);
	}
	progress = outbox_producer_progress(producer);
	if (txn->closing && !txn->progress_failed && !progress->reported)
		return TXN_NOTHING;
	if (outbox_kafka_fatal(rk, NULL, 0) != KAFKA_NO_ERROR)
	{
		txn->state = TS_LOST;
		outcome = TXN_LOST_OUTCOME;
	}
	else if (failed == 0 && txn->closing && !txn->progress_failed && !progress->failed)
		outcome = commit_transaction(txn, rk, progress);
	else
	{
		/* purged with the events after a failure of theirs: not its own */
		if (failed == 0 && txn->closing && progress->reported && progress->failed &&
			!txn->progress_failed)
		{
			ereport(LOG,
					(errmsg("%s: Kafka refused the progress record, the transaction is aborted: %s",
							txn->who, progress->error)));
			txn->progress_failed = true;
		}
		outcome = abort_transaction(txn, rk);
	}
	if (outcome == TXN_LOST_OUTCOME)
		txn->lost_told = true;
	publish(txn);
	return outcome;
}

/*
 * A commit: the window is settled at once (it holds the next transaction
 * back). An abort: what it delivered is read again, after a back-off when
 * the progress record, not an event, failed. A commit whose outcome is
 * unknown, or a fenced producer: a new producer, whose recovery settles
 * what did commit.
 */
static DeliveryFinish
finish(OutboxProducer *producer, OutboxWindow *window, const char **why)
{
	switch (finish_transaction(shard_txn, producer, window))
	{
		case TXN_NOTHING:
			break;
		case TXN_COMMITTED:
			return FINISH_SETTLE;
		case TXN_ABORTED:
			*why = "its Kafka transaction was aborted";
			return shard_txn->progress_failed ? FINISH_READ_AGAIN_LATER : FINISH_READ_AGAIN;
		case TXN_LOST_OUTCOME:
			*why = "its Kafka transaction's outcome is unknown";
			return FINISH_REBUILD;
	}
	return FINISH_NOTHING;
}

/* No settle while a transaction is open. */
static bool
may_settle(void)
{
	return shard_txn->state != TS_OPEN;
}

/* A committed transaction waits for its settle. */
static bool
settle_now(void)
{
	return shard_txn->state == TS_COMMITTED;
}

/*
 * A later timeline's progress record was found: another server delivers
 * this shard, this one delivers nothing.
 */
static bool
superseded(void)
{
	return shard_txn->state == TS_SUPERSEDED;
}

/* A commit or abort is to be called again soon. */
static TimestampTz
call_again_at(void)
{
	if (!shard_txn->waiting)
		return 0;
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), CALL_AGAIN_MS);
}

/* A committed transaction is done once the window is empty. */
static void
settled(bool window_empty)
{
	OutboxTxn  *txn = shard_txn;

	if (txn->state != TS_COMMITTED || !window_empty)
		return;
	txn->state = TS_READY;
	pause_at(txn, OUTBOX_PAUSE_AFTER_SETTLE, "after_settle");
}

/*
 * The producer goes: the next one starts with init_transactions and a
 * recovery. What an open transaction delivered was never committed by this
 * producer: withdrawn (it may have been, by the coordinator: the recovery
 * reads that back).
 */
static const char *
forget(void)
{
	OutboxTxn  *txn = shard_txn;
	bool		was_open = (txn->state == TS_OPEN || txn->state == TS_LOST);

	if (txn->state != TS_SUPERSEDED)
		txn->state = TS_NEED_INIT;
	txn->waiting = false;
	txn->lost_told = false;
	publish(txn);
	return was_open ? "its Kafka transaction was not committed" : NULL;
}

const OutboxDeliveryMode outbox_exactly_once = {
	.name = "exactly_once",
	.start = start,
	.transactional_id = transactional_id,
	.ready = ready,
	.begin = begin,
	.produced = produced,
	.finish = finish,
	.may_settle = may_settle,
	.settle_now = settle_now,
	.settled = settled,
	.call_again_at = call_again_at,
	.superseded = superseded,
	.forget = forget,
};
