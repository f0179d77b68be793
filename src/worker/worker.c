/*
 * worker.c
 *		The delivery worker, one per shard, as a pipeline: a commit wakes
 *		it, it reads what has committed and produces it at once, also while
 *		earlier events still wait for Kafka's acknowledgements, and it
 *		settles (deletes) acknowledged events in groups. What it holds
 *		between producing and settling is the window (window.c), bounded by
 *		outbox.window_size and outbox.window_bytes.
 *
 * Per-key order after a failure: the idempotent, gap-less producer fails
 * every message behind a failed one of the same partition, so the worker
 * stops producing at the first failure, drops what librdkafka has not sent
 * yet, waits for every report, settles, and reads again from the first
 * failed event (which now waits for its retry, holding its key back).
 *
 * The worker waits instead of exiting when the database is being dropped,
 * the extension is absent, the server is in recovery, delivery is paused
 * or Kafka is unreachable; an error in a pass is logged and the pass is
 * retried after a back-off, so the worker never crash-loops.
 *
 * A stop request (SIGTERM: a shutdown, pg_terminate_backend, a DDL pause)
 * only sets a flag: the worker sees its window through, at most for
 * outbox.shutdown_timeout, and then exits quietly. Interrupts are never
 * held, so what the server asks of every process (ProcSignalBarriers,
 * memory-context logging) is absorbed at once, also mid-pass.
 */
#include "worker/worker.h"
#include "backoff.h"
#include "compat.h"
#include "kafka/conf.h"
#include "settings.h"
#include "shared/registry.h"
#include "shared/slots.h"
#include "shared/stats.h"
#include "stop.h"
#include "table/durability.h"
#include "table/queue.h"
#include "worker/delivery.h"
#include "worker/heap.h"
#include "worker/lag_alert.h"
#include "worker/schema_resolution.h"
#include "worker/session.h"
#include "worker/sleep.h"
#include "worker/solo.h"
#include "worker/window.h"

#include <ctype.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* Longest sleep between two looks at Kafka's state and the shard's lag. */
#define LOOK_AROUND_MS 1000

/*
 * Acknowledged events wait at most this long to be deleted together (or
 * until outbox.batch_size of them are there): one transaction per group.
 */
#define SETTLE_INTERVAL_MS 10

/* How often a read held back for a partition's first report comes again. */
#define WARMUP_RETRY_MS 100

/*
 * What the pipeline does, written once in worker_mode():
 *
 *   PRODUCING --a delivery failed, or what is in flight reached
 *       message.timeout.ms--> REWINDING --every report in and
 *       settled--> PRODUCING
 *   PRODUCING, REWINDING --settings changed, the producer failed-->
 *       REBUILDING --window drained, producer dropped--> PRODUCING
 *   any --stop request (SIGTERM)--> STOPPING --window empty, or
 *       outbox.shutdown_timeout--> exit
 *
 * What is in flight is timed out at message.timeout.ms in every mode but
 * STOPPING (time_out_due): a rewind or a rebuild waits for its reports no
 * longer than the pipeline would, and no shorter (what is withdrawn before
 * Kafka answered may be written, and is sent again).
 *
 * Only PRODUCING reads and produces; the others produce nothing and settle
 * once, when every report is in. Over any mode, a back-off (after an error
 * in a pass, or Kafka taking nothing) suspends reads and settles until it
 * ends. outbox_status.state is derived from the mode (publish_state).
 */
typedef enum WorkerMode
{
	MODE_PRODUCING,
	MODE_REWINDING,				/* after a failure, for per-key order */
	MODE_REBUILDING,			/* the producer must go: see the window through */
	MODE_STOPPING				/* asked to stop: see the window through */
} WorkerMode;

typedef enum WaitReason
{
	WAIT_NONE,
	WAIT_DISABLED,
	WAIT_RECOVERY,
	WAIT_PRODUCER
} WaitReason;

typedef struct WorkerState
{
	int			slot;			/* in shared memory (slots.c) */
	int			shard;
	bool		extension_checked;	/* the first lookup was made */
	bool		extension_gone;	/* a read found no extension: exit */
	bool		exit_now;		/* no extension and nothing held */
	OutboxProducer *producer;
	const OutboxDeliveryMode *delivery; /* outbox.delivery's, chosen with
										 * the producer (delivery.h) */
	bool		rebuild_producer;	/* settings changed or producer failed */
	bool		no_producer;	/* creating one failed: waiting for a
								 * settings change */
	OutboxWindow *window;
	int64		cursor;			/* every id below is read or can't appear,
								 * but in a transaction of open_ids */
	Oid			cursor_extension;	/* the extension the cursor is of */
	int64	   *open_ids;		/* of transactions open below the cursor at
								 * the last read, ascending (registry.c) */
	int			nopen;
	uint64		rewind_generation;
	bool		adopted_orphans;
	bool		queue_kept;		/* rewinding, librdkafka's queue left to it:
								 * only unproven acknowledgements failed */
	bool		rewinding;		/* after a failure: produce nothing until
								 * every report is in and settled */
	bool		gave_up;		/* stopping after an error: leave at once */
	TimestampTz drain_deadline; /* stopping or rebuilding: last wait for reports */
	TimestampTz withdrawn_at;	/* what was in flight then was timed out */
	TimestampTz stop_deadline;	/* stopping: exit by then whatever is held */
	bool		read_wanted;	/* a commit woke us, or a read stopped at a limit */
	bool		solo_pending;	/* an event goes alone: read nothing more
								 * until the window is empty (solo.c) */
	bool		warming_up;		/* a read held events back for their
								 * partition's first acknowledgement */
	bool		warmup_reported;	/* a report came since */
	TimestampTz warmup_retry_at;	/* when to read without one */
	TimestampTz next_read_at;	/* read then even if no commit wakes us */
	int			pass_failures;	/* passes in a row that raised an error */
	int			kafka_failures; /* drains in a row Kafka took nothing of */
	bool		producer_refused;	/* Kafka refused a producer as a whole,
									 * nothing delivered since */
	TimestampTz backoff_until;	/* no read or settle before */
	WaitReason	logged_wait;	/* so each wait is logged once */
	MemoryContext pass_context; /* what a pass allocates outside the window */
	WaitEventSet *wait_set;		/* freed with the producer whose pipe it watches */
	bool		wait_set_pipe;	/* it watches the producer's pipe */
	char		held_by[NAMEDATALEN];	/* a subscription replicating into the
										 * outbox: nothing is read */
	TimestampTz last_look;		/* see look_around() */
	TimestampTz idle_since;		/* the shard had nothing to do since (0: busy) */
	bool		asleep;			/* idle long enough: exit (sleep.c) */
	bool		woken;			/* started for a commit to a sleeping shard */
} WorkerState;

/*
 * Static, not on the stack: the exit callback reads it also when an error
 * outside a pass unwinds outbox_worker_main.
 */
static WorkerState worker_state;

/* For the log, the envelope and Kafka's client.id: set once connected. */
static char database_name[NAMEDATALEN];
static char worker_name[NAMEDATALEN + 32] = "outbox";
static char client_id[NAMEDATALEN + 32];

/*
 * Rounded up: a wait rounded down to 0 ms for a time less than 1 ms away
 * returns at once, and the worker would run pass after pass, each finding
 * nothing due yet, until it came (a core's worth per worker, meanwhile).
 */
static long
ms_until(TimestampTz t)
{
	long		secs;
	int			usecs;

	if (t == 0)
		return 0;
	TimestampDifference(GetCurrentTimestamp(), t, &secs, &usecs);
	return secs * 1000 + (usecs + 999) / 1000;
}

/*
 * Each rule of when something is due is one function returning the time
 * (0: not due of itself; a report, a commit or another rule brings it),
 * which the pass acts on once it came and the worker sleeps until
 * (idle_ms).
 */
static bool
due_now(TimestampTz due)
{
	return due != 0 && GetCurrentTimestamp() >= due;
}

/*
 * Without the extension (never created, or dropped) the worker exits once
 * it holds nothing; the launcher learns it from the slot. A look of its own
 * decides, not an earlier read's: the extension may be back since. Part of
 * a pass (an extension of another version is an error there, retried after
 * a back-off, not an exit).
 */
static void
look_for_extension(WorkerState *st)
{
	bool		found;
	TimestampTz looked_at = GetCurrentTimestamp();

	if (st->extension_checked && !st->extension_gone)
		return;
	if (st->extension_gone && !outbox_window_is_empty(st->window))
		return;
	found = outbox_extension_exists();
	st->extension_gone = !found;
	outbox_worker_found_extension(st->slot, found, looked_at);
	st->exit_now = !found;
	/* a start from sleep is routine: a line per commit of a quiet tenant */
	if (found && !st->extension_checked)
		ereport(st->woken ? DEBUG1 : LOG,
				(errmsg("%s of %d started: delivering to %s with librdkafka %s", worker_name,
						outbox_shards, outbox_brokers, rd_kafka_version_str())));
	st->extension_checked = true;
}

/* The slot says why: outbox_status shows no_extension (stats.c). */
static void
exit_without_extension(WorkerState *st)
{
	proc_exit(0);
}

/*
 * The slot says it sleeps: outbox_status shows sleeping, and the next
 * commit of the shard has the launcher start a worker (sleep.c).
 */
static void
exit_asleep(WorkerState *st)
{
	ereport(DEBUG1,
			(errmsg("%s: nothing to deliver for outbox.worker_idle_timeout, exiting until the next commit",
					worker_name)));
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

static bool
stopping(void)
{
	return outbox_stop_requested();
}

/* A stopping worker waits at most a second, and never past its deadline. */
#define STOPPING_BACKOFF_MS 1000

static void
back_off(WorkerState *st)
{
	int			failures = Max(st->pass_failures, st->kafka_failures);
	int			ms = outbox_backoff_ms(failures);

	if (stopping())
		ms = Min(ms, STOPPING_BACKOFF_MS);
	st->backoff_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
	if (st->stop_deadline != 0)
		st->backoff_until = Min(st->backoff_until, st->stop_deadline);
}

static bool
backing_off(WorkerState *st)
{
	return st->backoff_until != 0 && GetCurrentTimestamp() < st->backoff_until;
}

/*
 * A pass that raised an error runs again once its back-off is over, not
 * before: the step that failed may come before any that honours the
 * back-off (the look for the extension does), and the worker would log
 * the same error as fast as it can raise it. Meanwhile it only takes in
 * librdkafka's reports, which need no SQL.
 */
static bool
pass_backing_off(WorkerState *st)
{
	return st->pass_failures > 0 && backing_off(st);
}

/* The mode (WorkerMode): a stop outranks a rebuild, a rebuild a rewind. */
static WorkerMode
worker_mode(WorkerState *st)
{
	if (stopping())
		return MODE_STOPPING;
	if (st->rebuild_producer)
		return MODE_REBUILDING;
	if (st->rewinding)
		return MODE_REWINDING;
	return MODE_PRODUCING;
}

/* Stopping, or the producer must go: produce nothing, see the window through. */
static bool
draining(WorkerState *st)
{
	WorkerMode	mode = worker_mode(st);

	return mode == MODE_STOPPING || mode == MODE_REBUILDING;
}

/* The one answer to "may the pipeline read and produce now?" */
static bool
may_produce(WorkerState *st)
{
	return worker_mode(st) == MODE_PRODUCING && !backing_off(st);
}

/* The producer knows what it was built from: it says if that changed. */
static void
reload_settings(WorkerState *st)
{
	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	if (st->producer != NULL && !st->rebuild_producer &&
		outbox_producer_outdated(st->producer, outbox_delivery_mode()->transactional_id()))
	{
		st->rebuild_producer = true;
		/* new settings may be what Kafka waited for (a password, a CA) */
		if (st->kafka_failures > 0)
		{
			st->kafka_failures = 0;
			st->backoff_until = 0;
		}
	}
	st->read_wanted = true;
}

/*
 * The wait set watches the producer's pipe: it goes with the producer. (A
 * new producer may get the old one's address and even its pipe's fd
 * number, so nothing short of a new set is sure to watch the new pipe.)
 */
static void
drop_producer(WorkerState *st)
{
	const char *why;

	if (st->producer != NULL)
		outbox_producer_destroy(st->producer);
	st->producer = NULL;
	if (st->delivery != NULL && (why = st->delivery->forget()) != NULL)
		outbox_window_withdraw_delivered(st->window, why);
	st->rebuild_producer = false;
	st->drain_deadline = 0;
	if (st->wait_set != NULL)
		FreeWaitEventSet(st->wait_set);
	st->wait_set = NULL;
}

/* librdkafka's threads must be gone before the process exits */
static void
drop_producer_at_exit(int code, Datum arg)
{
	drop_producer(&worker_state);
}

/* Makes the producer, once the old one (if any) was drained and dropped. */
static bool
ensure_producer(WorkerState *st)
{
	char	   *error = NULL;

	if (st->producer != NULL)
		return !st->rebuild_producer;
	/* built from outbox.delivery too: the mode serves it until it goes */
	st->delivery = outbox_delivery_mode();
	outbox_stats_delivery(st->delivery->name);
	st->producer = outbox_producer_create(worker_name, client_id,
										  st->delivery->transactional_id(), &error);
	st->no_producer = (st->producer == NULL);
	if (st->producer == NULL)
	{
		outbox_stats_error(error);
		log_wait_once(st, WAIT_PRODUCER,
					  psprintf("cannot create the Kafka producer, waiting for a settings change: %s",
							   error));
		return false;
	}
	return true;
}

/*
 * The first failure stops production: what librdkafka has not sent yet is
 * dropped (it fails as "purged"), so nothing behind the failure goes out
 * before it, and the worker reads again from it once the window settled.
 *
 * Not when the only failures are acknowledgements without an offset
 * (kafka/errors.c): what the worker still holds is withdrawn, but what
 * librdkafka holds is left to it. Its queue then also holds the messages
 * of requests whose answer was lost (Kafka may have written them), which
 * it is retrying with their sequence numbers, and requests not yet sent on
 * a connection being set up again. Dropped, the first are produced again
 * as new messages (duplicates), and a dropped request makes the gap-less
 * producer fail as a whole, so everything it had in flight is produced
 * again by the next one: after a 60-s outage of every broker, hundreds of
 * duplicates for one implicit acknowledgement (issue 40,
 * t/117_kafka_outage_duplicates). Left alone, they are delivered once,
 * and only the unproven event goes again. Its key's later events keep
 * their order: on a partition Kafka acknowledged nothing of this producer
 * yet, none is in librdkafka behind it (partitions.c's warm-up), and
 * elsewhere Kafka, holding the producer's state, refuses a later request
 * unless the unproven one was written (what the warm-up counts on too).
 * A failure of any other kind, even later in the same rewind, drops
 * librdkafka's queue as before.
 */
static void
withdraw_queued(WorkerState *st)
{
	st->queue_kept = st->producer != NULL &&
		outbox_window_failed_unproven_only(st->window);
	if (st->producer == NULL)
		return;
	if (st->queue_kept)
		outbox_producer_withdraw_waiting(st->producer);
	else
		outbox_producer_purge_queued(st->producer);
}

static void
start_rewind(WorkerState *st)
{
	st->rewinding = true;
	withdraw_queued(st);
	ereport(DEBUG1,
			(errmsg_internal("%s: a delivery failed, rewinding once %d event(s) in flight are reported%s",
							 worker_name, outbox_window_in_flight(st->window),
							 st->queue_kept ? " (unproven acknowledgements only: librdkafka's queue kept)" : "")));
}

/*
 * When the worker times out what is in flight: once the oldest event in
 * flight reached message.timeout.ms, unless that was withdrawn already (its
 * report is on its way) or the worker is stopping (a stop has its own,
 * shorter deadline: give_up_late_reports). 0 if not due at all. The one
 * answer, to act on and to sleep until.
 */
static TimestampTz
time_out_due(WorkerState *st)
{
	int			timeout_ms;
	TimestampTz oldest;

	if (worker_mode(st) == MODE_STOPPING || st->producer == NULL ||
		(timeout_ms = outbox_producer_timeout_ms(st->producer)) == 0)
		return 0;
	oldest = outbox_window_oldest_in_flight(st->window);
	if (oldest == 0 || oldest <= st->withdrawn_at)
		return 0;
	return TimestampTzPlusMilliseconds(oldest, timeout_ms);
}

/*
 * The worker, not librdkafka, times out what it produced (producer.c says
 * why): all that is not acknowledged fails at once, the events produced
 * message.timeout.ms ago as timed out, so nothing produced after them is
 * written before them.
 */
static void
time_out_in_flight(WorkerState *st)
{
	TimestampTz now;

	if (!due_now(time_out_due(st)))
		return;
	now = GetCurrentTimestamp();
	outbox_producer_time_out(st->producer,
							 TimestampTzPlusMilliseconds(now, -outbox_producer_timeout_ms(st->producer)));
	st->withdrawn_at = now;
	st->rewinding = true;
	ereport(DEBUG1,
			(errmsg_internal("%s: events in flight timed out, rewinding once %d event(s) withdrawn are reported",
							 worker_name, outbox_window_in_flight(st->window))));
}

/*
 * Events produced again though Kafka may have written them: the duplicates
 * an outage can cause (docs/guarantees.md), each one said, for an operator
 * tracing one and for t/117_kafka_outage_duplicates, which counts them.
 */
static void
log_unconfirmed(int n, const char *why)
{
	if (n > 0)
		ereport(LOG,
				(errmsg("%s: %d event(s) Kafka may have written are produced again: %s",
						worker_name, n, why)));
}

/* Reports served: the window takes them, and what they leave open is said. */
static void
take_reports(WorkerState *st, const OutboxReports *reports)
{
	outbox_window_reported(st->window, reports);
	log_unconfirmed(reports->unconfirmed,
					"reported without an offset, or failed after an unanswered request");
}

static void
serve_reports(WorkerState *st)
{
	OutboxReports reports = {0};
	char	   *reason;
	bool		whole = false;

	if (st->producer == NULL)
		return;
	outbox_producer_serve(st->producer, &reports);
	take_reports(st, &reports);
	if (reports.delivered + reports.failed > 0)
		st->warmup_reported = true;
	if (outbox_window_failed(st->window) > 0 && !st->rewinding)
		start_rewind(st);
	else if (st->rewinding && st->queue_kept)
		withdraw_queued(st);
	if (!st->rebuild_producer &&
		(reason = outbox_producer_fatal(st->producer, &whole)) != NULL)
	{
		ereport(LOG, (errmsg("%s: the Kafka producer failed, rebuilding it", worker_name),
					  errdetail("%s", reason)));
		outbox_stats_error(reason);
		st->rebuild_producer = true;
		/* refused as a whole: a new one at once would be refused at once */
		if (whole)
		{
			st->producer_refused = true;
			st->kafka_failures++;
			back_off(st);
		}
	}
}

/*
 * How long a drain waits for the reports in flight before it purges them.
 * A stop: outbox.shutdown_timeout. A rebuild is not hurried: it waits as
 * the pipeline would, up to message.timeout.ms (time_out_due withdraws
 * what is in flight first), since what it purges may have been written and
 * is sent again; but with Kafka down, or message.timeout.ms 0 (never),
 * outbox.shutdown_timeout, so that new settings Kafka waits for (a
 * password, a broker list) apply.
 */
static int
drain_wait_ms(WorkerState *st)
{
	int			timeout_ms = outbox_producer_timeout_ms(st->producer);

	if (worker_mode(st) == MODE_REBUILDING && timeout_ms > 0 &&
		!outbox_producer_kafka_down(st->producer))
		return timeout_ms;
	return outbox_shutdown_timeout_ms;
}

/*
 * When a drain with reports in flight gives up on them: drain_wait_ms
 * after its first look, by a stop's deadline at the latest.
 */
static TimestampTz
drain_due(WorkerState *st)
{
	if (!draining(st) || outbox_window_in_flight(st->window) == 0 || st->producer == NULL)
		return 0;
	if (st->drain_deadline == 0)
		st->drain_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 drain_wait_ms(st));
	if (stopping() && st->stop_deadline != 0)
		st->drain_deadline = Min(st->drain_deadline, st->stop_deadline);
	return st->drain_deadline;
}

/*
 * A stop request (SIGTERM) or a producer rebuild waits for the reports in
 * flight (drain_due), then purges the rest: it stays in the outbox for the
 * next attempt. Reports that do not come back even then leave their
 * events' fate unknown, and the producer goes (destroying it is the only
 * way to be sure no late report lands in memory about to be reused).
 */
static void
give_up_late_reports(WorkerState *st)
{
	OutboxReports reports = {0};

	if (!due_now(drain_due(st)))
		return;
	outbox_producer_purge(st->producer, &reports);
	take_reports(st, &reports);
	if (outbox_window_in_flight(st->window) > 0)
	{
		log_unconfirmed(outbox_window_in_flight(st->window), "no report before the producer was stopped");
		drop_producer(st);
		outbox_window_abandon(st->window, "no delivery report before the producer was stopped");
	}
}

/*
 * When Kafka is down (no broker up) and said "later" for every event that
 * failed, with nothing delivered or refused, or when it refused the
 * producer itself (not authorized to write anywhere: its events' own
 * refusals blame none of them): the settle leaves the rows untouched, to
 * be read again in order after a back-off, instead of writing a retry
 * time on each row. A partition without a leader, with the brokers up, is
 * not that: its events record their failure and wait, holding back only
 * their keys. The events keep what Kafka said (the statistics count it).
 */
static bool
kafka_unavailable(WorkerState *st, OutboxEvent **events, int n)
{
	int			failed = 0;

	/*
	 * Kafka refused the producer itself: its events' refusals say nothing
	 * of them. (A refusal reported before the producer's can still count
	 * one attempt; from then on none does, until something is delivered.)
	 */
	bool		refused = st->producer_refused ||
		(st->producer != NULL && outbox_producer_refused(st->producer));

	if (st->producer != NULL && !refused && !outbox_producer_kafka_down(st->producer))
		return false;
	for (int i = 0; i < n; i++)
	{
		EventOutcome outcome = events[i]->outcome;

		if (outbox_outcome_policy(outcome)->deleted ||
			(outbox_outcome_policy(outcome)->counts_attempt && !refused))
			return false;
		if (outbox_event_failed(events[i]))
			failed++;
	}
	return failed > 0;
}

static void
log_refusals(OutboxEvent **events, int n, SettlePolicy policy)
{
	OutboxEvent *first = NULL;
	int			refused = 0;

	if (policy == SETTLE_LEAVING_FAILURES)
		return;
	for (int i = 0; i < n; i++)
	{
		if (!outbox_outcome_policy(events[i]->outcome)->counts_attempt)
			continue;
		if (first == NULL || events[i]->id < first->id)
			first = events[i];
		refused++;
	}
	if (first != NULL)
		ereport(LOG,
				(errmsg("%s: Kafka refused %d event(s), the first with id " INT64_FORMAT ": %s",
						worker_name, refused, first->id, first->error),
				 errdetail("Refused events are retried after a back-off and become dead letters after outbox.max_attempts.")));
}

/*
 * The lowest id of a settled list the next read must start at or below:
 * an event left in the outbox untouched, to be read again in order, or a
 * keyed failure (once: the read then passes over what it holds back, and
 * starts there again when its retry is due; if it became a dead letter,
 * what it held back is read at once). A keyless failure recorded on its
 * row needs neither: the read finds it through the retry index when due.
 */
static int64
lowest_to_read_again(OutboxEvent **events, int n, SettlePolicy policy)
{
	int64		lowest = PG_INT64_MAX;

	for (int i = 0; i < n; i++)
		if (outbox_outcome_policy(events[i]->outcome)->read_again &&
			!(outbox_event_failed(events[i]) && events[i]->key_isnull &&
			  policy == SETTLE_RECORDING_FAILURES))
			lowest = Min(lowest, events[i]->id);
	return lowest;
}

static bool
any_delivered(OutboxEvent **events, int n)
{
	for (int i = 0; i < n; i++)
		if (events[i]->outcome == EVENT_DELIVERED)
			return true;
	return false;
}

/*
 * When to settle: in groups while the pipeline runs (SETTLE_INTERVAL_MS
 * after the first acknowledgement, at once for a full group or window),
 * at once when the delivery mode says so (exactly once: a Kafka
 * transaction committed, and holds the next one back until settled);
 * after a failure or when stopping, once, when every report is in; never
 * while the mode forbids it (exactly once: a transaction open).
 */
static TimestampTz
settle_due(WorkerState *st)
{
	TimestampTz since;
	int			unsettled = outbox_window_unsettled(st->window, &since);
	int64		bytes;

	if (unsettled == 0 || backing_off(st) || !st->delivery->may_settle())
		return 0;
	if (worker_mode(st) != MODE_PRODUCING)
		return outbox_window_in_flight(st->window) == 0 ? GetCurrentTimestamp() : 0;
	if (st->delivery->settle_now() || unsettled >= outbox_batch_size ||
		outbox_window_room(st->window, &bytes) == 0)
		return GetCurrentTimestamp();
	return TimestampTzPlusMilliseconds(since, SETTLE_INTERVAL_MS);
}

/*
 * Deletes what Kafka acknowledged and records failures, in one
 * transaction; the cursor comes back to any event left in the outbox.
 */
static void
settle(WorkerState *st)
{
	OutboxEvent **events;
	Oid			extension_oid;
	int			n = outbox_window_to_settle(st->window, &events, &extension_oid);
	bool		final = st->rewinding && outbox_window_in_flight(st->window) == 0;
	bool		unavailable;
	SettlePolicy policy;

	if (n == 0)
		return;
	unavailable = final && kafka_unavailable(st, events, n);
	policy = unavailable ? SETTLE_LEAVING_FAILURES : SETTLE_RECORDING_FAILURES;
	outbox_stats_settled(events, n);
	for (int i = 0; i < n; i++)
		if (events[i]->batch_too_large)
			outbox_solo_remember(events[i]->id);
	log_refusals(events, n, policy);
	if (!outbox_settle_events(worker_name, events, n, extension_oid, st->shard, policy))
		ereport(LOG,
				(errmsg("%s: the extension was dropped while events were in flight; they went with it",
						worker_name)));
	st->cursor = Min(st->cursor, lowest_to_read_again(events, n, policy));
	if (any_delivered(events, n))
	{
		st->kafka_failures = 0;
		st->producer_refused = false;
	}
	outbox_window_settled(st->window, events, n, XactLastCommitEnd);
	st->delivery->settled(outbox_window_is_empty(st->window));

	if (st->rewinding && outbox_window_failed(st->window) == 0 &&
		outbox_window_in_flight(st->window) == 0)
	{
		st->rewinding = false;
		st->queue_kept = false;
		st->read_wanted = true;
		if (unavailable)
		{
			ereport(DEBUG1, (errmsg_internal("%s: Kafka took none of the events in flight", worker_name)));
			st->kafka_failures++;
			back_off(st);
		}
	}
}

/*
 * Whether the read stops before event: at one to send alone, produced once
 * nothing else is in flight, after which the read stops too. What is left
 * of the read is read again.
 */
static bool
stops_for_solo(WorkerState *st, OutboxEvent *event)
{
	if (!outbox_solo_wanted(event->id))
		return false;
	st->solo_pending = true;
	st->read_wanted = true;
	if (outbox_window_in_flight(st->window) > 0)
		return true;
	outbox_solo_forget(event->id);
	event->alone = true;
	return false;
}

/*
 * An event to send alone waits for the window, or is in flight alone. The
 * next read waits for its settle too: a read that finds it still in the
 * table would have nothing new, and wait for the poll interval.
 */
static bool
waiting_for_solo(WorkerState *st)
{
	TimestampTz since;

	if (st->solo_pending && outbox_window_in_flight(st->window) == 0 &&
		outbox_window_unsettled(st->window, &since) == 0)
		st->solo_pending = false;
	return st->solo_pending;
}

/*
 * When the next read is due: at once when wanted (a commit woke us, or a
 * read stopped at a limit), else at the poll; only while the pipeline may
 * produce and the window has room, and not while an event to send alone
 * waits.
 *
 * A read held events back for their partition's first acknowledgement
 * (kafka/partitions.c): the next read waits until the settle took them out
 * of the window (a read before would not see them, and could send their
 * keys' later events first), and until a report came or a while passed (a
 * partition whose first report does not come holds back nothing else).
 */
static TimestampTz
read_due(WorkerState *st)
{
	TimestampTz since;
	int64		bytes;

	if (!may_produce(st) || waiting_for_solo(st) || outbox_window_room(st->window, &bytes) <= 0)
		return 0;
	if (st->warming_up)
	{
		if (outbox_window_unsettled(st->window, &since) > 0)
			return 0;
		if (!st->warmup_reported && GetCurrentTimestamp() < st->warmup_retry_at)
			return st->warmup_retry_at;
		st->warming_up = false;
		st->read_wanted = true;
	}
	return st->read_wanted ? GetCurrentTimestamp() : st->next_read_at;
}

/*
 * Produces a read in id order; a key refused at once, or waiting for its
 * partition's first acknowledgement, holds its rest.
 */
static void
produce_batch(WorkerState *st, OutboxBatch *batch)
{
	int		   *holding = palloc(sizeof(int) * Max(batch->nevents, 1));
	int			nholding = 0;

	for (int i = 0; i < batch->nevents; i++)
	{
		OutboxEvent *event = &batch->events[i];
		OutboxRecord record;
		OutboxFraming value;
		OutboxFraming key;
		bool		held = false;

		for (int r = 0; r < nholding && !held; r++)
			held = outbox_event_same_key(&batch->events[holding[r]], event);
		if (held)
			continue;
		if (stops_for_solo(st, event))
			break;

		/* a topic whose schema is not resolved, or a payload it refuses */
		if (!outbox_schemas_framing(event, &value, &key) ||
			!outbox_message_build(event, batch->instance, &value, &key, &record))
		{
			holding[nholding++] = i;
			outbox_window_refused(st->window, event);
			continue;
		}
		switch (outbox_producer_produce(st->producer, event, &record))
		{
			case PRODUCED:
				outbox_window_produced(st->window, event);
				break;
			case PRODUCE_HELD:
				holding[nholding++] = i;
				st->warming_up = true;
				break;
			case PRODUCE_REFUSED:
				holding[nholding++] = i;
				outbox_window_refused(st->window, event);
				break;
		}
		if (event->alone)
			break;
	}
}

/*
 * The next read starts at the lowest id that may still be in the outbox
 * for us: one of this read not produced, or the first id not read; below
 * it, only transactions open at this read can still commit, and the next
 * read looks below the cursor for those of them that ended since
 * (registry.c, "the read floor"). A read without events leaves the cursor
 * where it was, unless it read from the start. (Events in flight count as
 * delivered: if one is not, the settle moves the cursor back to it. An
 * event waiting for its retry brings the read back to it when due: see
 * due_keyed_retry() in queue.c.)
 */
static int64
next_cursor(WorkerState *st, OutboxBatch *batch)
{
	int64		cursor;

	if (batch->nevents == 0)
		return batch->from_start ? batch->scan_from : st->cursor;
	cursor = batch->events[batch->nevents - 1].id + 1;
	for (int i = 0; i < batch->nevents; i++)
	{
		EventOutcome outcome = batch->events[i].outcome;

		if (outcome != EVENT_DELIVERED && outcome != EVENT_IN_FLIGHT)
			cursor = Min(cursor, batch->events[i].id);
	}
	return cursor;
}

/* Keeps the read's open transactions below the cursor, for the next read. */
static void
keep_open_ids(WorkerState *st, OutboxBatch *batch)
{
	int			n = 0;

	while (n < batch->nopen && batch->open_ids[n] < st->cursor)
		n++;
	if (st->open_ids != NULL)
		pfree(st->open_ids);
	st->open_ids = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * Max(n, 1));
	memcpy(st->open_ids, batch->open_ids, sizeof(int64) * n);
	st->nopen = n;
}

/*
 * Takes in what a read saw: where the next read starts, and the rewind
 * (dead letters put back) it covered. Only a read whose events were
 * produced may do so: one thrown away must leave the rewind for the next.
 */
static void
take_in_read(WorkerState *st, OutboxBatch *batch)
{
	st->cursor = next_cursor(st, batch);
	st->cursor_extension = batch->extension_oid;
	st->rewind_generation = batch->rewind_generation;
	keep_open_ids(st, batch);
}

/* What a read leaves out: the window's events of the cursor's extension. */
static int
window_ids_at_or_above(void *arg, int64 from_id, int64 **ids)
{
	WorkerState *st = arg;

	return outbox_window_unsettled_ids(st->window, st->cursor_extension, from_id, ids);
}

/*
 * While a subscription replicates into the outbox, its rows are the
 * publisher's to deliver (subscription.c): nothing is read, the shard
 * shows subscribed. The log says when that starts and ends; the first read
 * after it starts from the shard's start, as the cursor never covered the
 * replicated rows' ids.
 */
static bool
hold_for_subscription(WorkerState *st, const char *subscription)
{
	if (subscription == NULL)
	{
		if (st->held_by[0] != '\0')
			ereport(LOG,
					(errmsg("%s: no subscription replicates into the outbox any more, delivering what it holds",
							worker_name)));
		st->held_by[0] = '\0';
		return false;
	}
	if (strcmp(st->held_by, subscription) != 0)
		ereport(LOG,
				(errmsg("%s: the outbox is the target of subscription \"%s\", whose publisher delivers its events; delivering once it is dropped",
						worker_name, subscription)));
	strlcpy(st->held_by, subscription, sizeof(st->held_by));
	st->cursor = 0;
	return true;
}

/*
 * Reads what has committed from the cursor, as much as the window has
 * room for, and produces it once the commits it saw are durable.
 */
static void
read_and_produce(WorkerState *st)
{
	int64		bytes;
	int			room = outbox_window_room(st->window, &bytes);
	MemoryContext batch_context;
	MemoryContext old;
	OutboxBatch *batch;
	OutboxWindowIds window_ids = {window_ids_at_or_above, st};
	OutboxReadPosition position = {st->cursor, st->cursor_extension, st->rewind_generation,
	st->open_ids, st->nopen};
	bool		found;

	if (room <= 0)
		return;
	batch = outbox_window_new_batch(st->window, &batch_context);
	old = MemoryContextSwitchTo(batch_context);
	found = outbox_read_batch(batch, st->slot, st->shard, &position, &window_ids,
							  Min(outbox_batch_size, room), bytes);
	MemoryContextSwitchTo(old);
	st->next_read_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   outbox_poll_interval_ms);
	st->extension_gone = !found;
	if (!found || hold_for_subscription(st, batch->held_by))
	{
		st->read_wanted = false;
		outbox_window_discard(st->window, batch);
		return;
	}
	/* a read that found only what the window holds waits for a wake-up */
	st->read_wanted = batch->more && batch->nevents > 0;
	if (batch->nevents == 0 || !outbox_wait_durable(batch->visible_lsn, batch->async_commits_lsn))
	{
		if (batch->nevents == 0)
			take_in_read(st, batch);
		outbox_window_discard(st->window, batch);
		return;
	}
	outbox_async_commits_flushed(batch->async_commits_ended);
	st->delivery->begin(st->producer);
	/* in the window before the first message: an error halfway keeps it */
	outbox_window_add(st->window, batch);
	/* the topics' schemas as of after the read: a row set before an event */
	outbox_schemas_refresh();
	pgstat_report_activity(STATE_RUNNING, "outbox: producing");
	old = MemoryContextSwitchTo(batch_context);
	produce_batch(st, batch);
	st->delivery->produced(st->producer, batch);
	MemoryContextSwitchTo(old);
	take_in_read(st, batch);
	if (st->warming_up)
	{
		st->warmup_reported = false;
		st->warmup_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), WARMUP_RETRY_MS);
	}
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* The state to show: "otherwise", unless the producer finds Kafka down. */
static OutboxShardState
kafka_state(WorkerState *st, OutboxShardState otherwise)
{
	if (st->producer != NULL && outbox_producer_kafka_down(st->producer))
		return SHARD_WAITING_FOR_KAFKA;
	return otherwise;
}

/* The one place that says what the shard is doing, after each pass. */
static void
publish_state(WorkerState *st)
{
	OutboxShardState state;

	if (st->kafka_failures > 0 && backing_off(st))
		state = SHARD_WAITING_FOR_KAFKA;
	else if (backing_off(st) ||
			 (st->no_producer && outbox_enabled && !RecoveryInProgress()))
		state = SHARD_BACKING_OFF;
	else if (outbox_enabled && outbox_schemas_waiting())
		state = SHARD_WAITING_FOR_REGISTRY;
	else if (!outbox_window_is_empty(st->window))
		state = kafka_state(st, SHARD_DELIVERING);
	else if (!outbox_enabled)
		state = SHARD_PAUSED;
	else if (RecoveryInProgress())
		state = SHARD_RECOVERY;
	else if (st->delivery->superseded())
		state = SHARD_SUPERSEDED;
	else if (st->held_by[0] != '\0')
		state = SHARD_SUBSCRIBED;
	else
		state = kafka_state(st, SHARD_IDLE);
	outbox_stats_set_state(state);
	if (state != SHARD_IDLE || st->read_wanted)
		st->idle_since = 0;
	else if (st->idle_since == 0)
		st->idle_since = GetCurrentTimestamp();
}

/*
 * Whether the worker may read and produce: producing (may_produce()),
 * enabled, a primary, with a producer.
 */
static bool
may_read(WorkerState *st)
{
	if (!may_produce(st))
		return false;
	if (!outbox_enabled)
	{
		log_wait_once(st, WAIT_DISABLED, "delivery paused (outbox.enabled = off)");
		return false;
	}
	if (RecoveryInProgress())
	{
		log_wait_once(st, WAIT_RECOVERY, "server is in recovery, waiting for promotion");
		return false;
	}
	if (!ensure_producer(st))
		return false;
	/* the mode's gate (exactly once: a transaction at a time, after recovery) */
	if (!st->delivery->ready(st->producer, outbox_window_is_empty(st->window)))
		return false;
	st->logged_wait = WAIT_NONE;
	return true;
}

/* A drained window lets a producer that must go be rebuilt. */
static void
drop_drained_producer(WorkerState *st)
{
	if (st->rebuild_producer && outbox_window_is_empty(st->window))
	{
		if (st->producer != NULL)
			ereport(LOG, (errmsg("%s: rebuilding the Kafka producer", worker_name)));
		drop_producer(st);
	}
}

/*
 * The lag look starts at the lowest id the worker may still have to
 * deliver, which skips the dead index entries of what it deleted (a long
 * snapshot keeps them from being killed, and every look would walk them
 * again): the cursor, the window's lowest, where a transaction open below
 * the cursor at the last read ended since, the shard's start while a
 * rewind is pending. Retries below it, and the events held behind them,
 * are found through the retry index (queue.c).
 */
static void
look_at_lag(WorkerState *st)
{
	int64		from = Min(st->cursor, outbox_window_lowest_id(st->window));
	int64	   *open_ids;
	int			nopen = outbox_open_ids_now(&open_ids);

	qsort(open_ids, nopen, sizeof(int64), outbox_compare_ids);
	from = Min(from, outbox_lowest_ended(st->open_ids, st->nopen, open_ids, nopen));
	pfree(open_ids);
	if (outbox_slot_rewind_generation(st->slot) != st->rewind_generation)
		from = 0;
	outbox_check_lag(worker_name, st->shard, from, st->cursor_extension);
}

/* The look around's clock, the only one (lag_alert.c has none of its own). */
static TimestampTz
look_due(WorkerState *st)
{
	return TimestampTzPlusMilliseconds(st->last_look, LOOK_AROUND_MS);
}

/*
 * What the worker does about once a second whatever it is waiting for:
 * publish what its producer knows of Kafka, and look at the shard's lag.
 * Part of a pass: its SQL must not let a stop request cut the pass short.
 */
static void
look_around(WorkerState *st)
{
	if (!due_now(look_due(st)))
		return;
	st->last_look = GetCurrentTimestamp();
	if (st->producer != NULL)
	{
		outbox_producer_report_state(st->producer);
		outbox_producer_publish_brokers(st->producer);
		/* nothing in flight would make librdkafka reconnect */
		if (outbox_producer_kafka_down(st->producer) && outbox_window_is_empty(st->window))
			outbox_producer_probe(st->producer);
	}
	/* a subscription's rows are the publisher's lag, which it alerts on */
	if (st->held_by[0] == '\0')
		look_at_lag(st);
	/* rows set in SQL resolved before their events come, 'latest' refreshed */
	if (outbox_enabled && !RecoveryInProgress())
		outbox_schemas_refresh();
}

/*
 * Once every report is in, the delivery mode says what follows (exactly
 * once: the Kafka transaction committed, aborted, or its outcome is
 * unknown); what it did not make final is read again, a failed event
 * taking its failure path.
 */
static void
finish_delivery(WorkerState *st)
{
	const char *why = NULL;
	DeliveryFinish outcome = st->delivery->finish(st->producer, st->window, &why);

	switch (outcome)
	{
		case FINISH_NOTHING:
			break;
		case FINISH_SETTLE:
			st->read_wanted = true;
			break;
		case FINISH_READ_AGAIN:
		case FINISH_READ_AGAIN_LATER:
			outbox_window_withdraw_delivered(st->window, why);
			st->rewinding = true;
			/* the mode's own record, not an event, failed: wait before the next */
			if (outcome == FINISH_READ_AGAIN_LATER)
			{
				st->kafka_failures++;
				back_off(st);
			}
			break;
		case FINISH_REBUILD:
			outbox_window_withdraw_delivered(st->window, why);
			st->rewinding = true;
			st->rebuild_producer = true;
			break;
	}
}

/*
 * One turn of the pipeline: serve reports, settle what is due, read and
 * produce what has committed; and look around.
 */
static void
deliver(WorkerState *st)
{
	look_for_extension(st);
	if (st->exit_now)
		return;
	serve_reports(st);
	time_out_in_flight(st);
	finish_delivery(st);
	if (draining(st))
		give_up_late_reports(st);
	if (due_now(settle_due(st)))
		settle(st);
	drop_drained_producer(st);
	if (!st->adopted_orphans && may_read(st))
	{
		int			adopted = outbox_reshard_orphans(st->shard);

		if (adopted > 0)
			ereport(LOG,
					(errmsg("%s: adopted %d event(s) of removed shards", worker_name, adopted)));
		/* while a subscription holds the outbox, not yet */
		st->adopted_orphans = (adopted >= 0);
	}
	if (due_now(outbox_heap_release_due(st->idle_since)))
		outbox_heap_release(st->idle_since);
	/* nothing to do for a while: leave, unless the outbox holds a row */
	if (!st->read_wanted && due_now(outbox_sleep_due(st->idle_since)))
	{
		st->asleep = outbox_fall_asleep(st->shard);
		if (st->asleep)
			return;
		st->idle_since = GetCurrentTimestamp();
	}
	/* (a report wakes the worker when a solo or held-back event may go) */
	if (due_now(read_due(st)))
	{
		if (may_read(st))
			read_and_produce(st);
		else
		{
			/* paused, in recovery or without a producer: look again later */
			st->read_wanted = false;
			st->next_read_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														   outbox_poll_interval_ms);
		}
	}
	look_around(st);
}

/*
 * After an error in a pass: the window survives it (its memory is the
 * worker's, not the transaction's), so what is in flight is still seen
 * through and settled later, without being sent again. Only a stopping
 * worker gives it up, rather than retry an error until the postmaster
 * loses patience.
 */
static void
recover_from_error(WorkerState *st)
{
	if (stopping() && st->stop_deadline != 0 && GetCurrentTimestamp() >= st->stop_deadline)
	{
		drop_producer(st);
		st->gave_up = true;
	}
	if (outbox_window_is_empty(st->window))
		st->cursor = 0;
}

/*
 * One pass with its own error recovery: an error is logged, the
 * transaction rolled back, and the pass retried after a back-off. A stop
 * request cannot cut a pass short (it only sets a flag), so what is in
 * flight is seen through and settled, never sent again for want of its
 * acknowledgement.
 */
static void
run_pass(WorkerState *st)
{
	MemoryContext pass_context = CurrentMemoryContext;

	PG_TRY();
	{
		if (pass_backing_off(st))
			serve_reports(st);
		else
		{
			deliver(st);
			st->pass_failures = 0;
		}
	}
	PG_CATCH();
	{
		ErrorData  *error;

		MemoryContextSwitchTo(pass_context);
		error = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		outbox_stats_error(error->message);
		st->pass_failures++;
		back_off(st);
		recover_from_error(st);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(pass_context);
	publish_state(st);
}

/*
 * Between passes: absorb what the server asks of every process, and stop
 * once a stop request finds the window empty, or its deadline passed.
 * The stop is quiet (exit code 0, no FATAL line): it was asked for.
 */
static void
handle_interrupts(WorkerState *st)
{
	CHECK_FOR_INTERRUPTS();
	if (stopping() && st->stop_deadline == 0)
	{
		TimestampTz now = GetCurrentTimestamp();

		st->stop_deadline = TimestampTzPlusMilliseconds(now, outbox_shutdown_timeout_ms);
		/* a back-off from before the stop: try again soon, within the deadline */
		if (backing_off(st))
			st->backoff_until = Min(st->backoff_until,
									TimestampTzPlusMilliseconds(now, STOPPING_BACKOFF_MS));
	}
	if (stopping() && GetCurrentTimestamp() >= st->stop_deadline)
		st->gave_up = true;
	if (stopping() && (st->gave_up || outbox_window_is_empty(st->window)))
	{
		if (!outbox_window_is_empty(st->window))
			ereport(LOG,
					(errmsg("%s: stopping with %d event(s) unsettled after outbox.shutdown_timeout; they stay in the outbox",
							worker_name, outbox_window_in_flight(st->window))));
		ereport(LOG, (errmsg("%s: stopping as asked", worker_name)));
		proc_exit(0);
	}
}

/* The wait set: the latch, postmaster death, and the producer's pipe. */
static WaitEventSet *
wait_set(WorkerState *st)
{
	if (st->wait_set != NULL && st->wait_set_pipe == (st->producer != NULL))
		return st->wait_set;
	if (st->wait_set != NULL)
		FreeWaitEventSet(st->wait_set);
	st->wait_set = compat_CreateWaitEventSet(3);
	AddWaitEventToSet(st->wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(st->wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	if (st->producer != NULL)
		AddWaitEventToSet(st->wait_set, WL_SOCKET_READABLE,
						  outbox_producer_wait_fd(st->producer), NULL, NULL);
	st->wait_set_pipe = (st->producer != NULL);
	return st->wait_set;
}

/*
 * The first time something is due, by the rules the pass acts on, and the
 * stop's deadline (handle_interrupts) and the back-off's end. Never 0: the
 * look around is always due at some time.
 */
static TimestampTz
next_due(WorkerState *st)
{
	TimestampTz due[] = {
		st->stop_deadline,
		backing_off(st) ? st->backoff_until : 0,
		look_due(st),
		read_due(st),
		settle_due(st),
		drain_due(st),
		time_out_due(st),
		outbox_sleep_due(st->idle_since),
		outbox_heap_release_due(st->idle_since),
		/* a commit or abort that timed out is called again soon */
		st->delivery->call_again_at(),
	};
	TimestampTz next = 0;

	for (size_t i = 0; i < lengthof(due); i++)
		if (due[i] != 0 && (next == 0 || due[i] < next))
			next = due[i];
	return next;
}

/* How long nothing is due. */
static long
idle_ms(WorkerState *st)
{
	/* a stop waits for nothing once the window is empty */
	if (stopping() && (st->gave_up || outbox_window_is_empty(st->window)))
		return 0;
	if (pass_backing_off(st))
		return Max(Min(LOOK_AROUND_MS, ms_until(st->backoff_until)), 0);
	return Max(Min(LOOK_AROUND_MS, ms_until(next_due(st))), 0);
}

/*
 * Sleeps until something is due, a commit sets the latch (a read is
 * wanted), or librdkafka has reports for us.
 */
static void
wait_for_work(WorkerState *st)
{
	WaitEvent	event;
	long		ms = idle_ms(st);

	if (ms == 0)
		return;
	if (WaitEventSetWait(wait_set(st), ms, &event, 1,
						 compat_wait_event(OUTBOX_WAIT_WORKER)) > 0 &&
		(event.events & WL_LATCH_SET))
	{
		ResetLatch(MyLatch);
		st->read_wanted = true;
	}
}

/*
 * Whatever the database's or the role's settings say, the worker runs with
 * the server's settings, and with those its SQL relies on (session.c).
 */
static void
force_session_settings(void)
{
	outbox_force_session_settings();
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
	st->woken = outbox_stats_attach(dboid, st->shard);
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
}

void
outbox_worker_main(Datum main_arg)
{
	WorkerState *st = &worker_state;

	st->slot = DatumGetInt32(main_arg);

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	/* see the file's header: a stop sets a flag, a cancel has nothing to cancel */
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGINT, COMPAT_SIG_IGN);
	BackgroundWorkerUnblockSignals();
	/*
	 * A reload signalled between our fork and the handler above was
	 * ignored (SIG_IGN until then), and we may have been forked with the
	 * settings from before it: read the files once now.
	 */
	ProcessConfigFile(PGC_SIGHUP);

	outbox_heap_bound_retention();
	connect_to_database(st);
	before_shmem_exit(drop_producer_at_exit, (Datum) 0);
	st->window = outbox_window_create();
	st->delivery = outbox_delivery_start(st->shard, worker_name);
	outbox_stats_delivery(st->delivery->name);
	st->pass_context = AllocSetContextCreate(TopMemoryContext, "outbox pass",
											 ALLOCSET_DEFAULT_SIZES);
	st->read_wanted = true;

	for (;;)
	{
		handle_interrupts(st);
		/* what a pass allocates outside the window lives until the next */
		MemoryContextSwitchTo(st->pass_context);
		MemoryContextReset(st->pass_context);
		if (ConfigReloadPending)
			reload_settings(st);
		run_pass(st);
		if (st->exit_now)
			exit_without_extension(st);
		if (st->asleep)
			exit_asleep(st);
		wait_for_work(st);
	}
}
