/*
 * launcher.c
 *		One background worker, registered at preload and connected to no
 *		database, that keeps every database with the extension delivered.
 *
 * It lists the databases (pg_database is a shared catalog, readable
 * without a database), and for each one outbox.databases allows it starts
 * a worker for shard 0, which looks for the extension: found, the launcher
 * starts the database's other shards; not found, the worker exits and the
 * launcher leaves the database alone until it hears of a CREATE EXTENSION
 * there (database_hooks.c), or, as a fallback, for a few minutes. Workers
 * are dynamic and never restarted by the postmaster: the launcher
 * restarts one that stopped, at once after a stop request, after
 * OUTBOX_RESTART_SECONDS after an error, so nothing crash-loops. When
 * outbox.max_workers or max_worker_processes is reached, each database
 * left without workers is named once in the log, and served as soon as a
 * slot frees up.
 *
 * The launcher's own memory: a hash of the databases it knows and the
 * handles of the workers it started, each kept (in TopMemoryContext, not
 * in the memory reset at every look) until its slot is freed. Shared
 * memory (slots.c) holds the worker slots, which outlive a launcher
 * restart; a slot is freed only if it still holds what the launcher saw.
 */
#include "worker/launcher.h"
#include "compat.h"
#include "settings.h"
#include "shared/inbox.h"
#include "shared/pauses.h"
#include "shared/slots.h"

#include <signal.h>

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* Seconds before a worker that failed is started again: no crash loops. */
#define OUTBOX_RESTART_SECONDS 10

/* How often the launcher lists the databases without being woken. */
#define SCAN_INTERVAL_MS (10 * 1000)

/* How long a database without the extension is left alone, unless woken. */
#define REPROBE_INTERVAL_MS (5 * 60 * 1000)

/* A slot registered but never taken by its worker is given up after this. */
#define START_TIMEOUT_MS (60 * 1000)

typedef struct DatabaseEntry
{
	Oid			oid;			/* hash key */
	char		name[NAMEDATALEN];
	bool		seen;			/* listed by the last scan */
	bool		has_extension;	/* a worker found it */
	TimestampTz probe_after;	/* without the extension: look again then */
	TimestampTz start_after;	/* a worker failed: start again then */
	TimestampTz requested_at;	/* last CREATE EXTENSION/DATABASE heard of */
	TimestampTz gone_at;		/* when a worker last found no extension */
	bool		starved;		/* logged that it could not get a worker */
} DatabaseEntry;

static HTAB *databases = NULL;
static BackgroundWorkerHandle **handles = NULL;

/* The launcher and the workers alike: in this library, with a connection. */
static void
describe_worker(BackgroundWorker *worker, const char *function, const char *type,
				int restart_time)
{
	memset(worker, 0, sizeof(*worker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	/* on a standby the workers run and wait, to take over at promotion */
	worker->bgw_start_time = BgWorkerStart_ConsistentState;
	worker->bgw_restart_time = restart_time;
	snprintf(worker->bgw_library_name, BGW_MAXLEN, "outbox");
	snprintf(worker->bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker->bgw_type, BGW_MAXLEN, "%s", type);
}

void
outbox_register_launcher(void)
{
	BackgroundWorker worker;

	/* pg_upgrade's servers must not deliver, nor hold connections */
	if (IsBinaryUpgrade)
		return;
	describe_worker(&worker, "outbox_launcher_main", "outbox launcher",
					OUTBOX_RESTART_SECONDS);
	snprintf(worker.bgw_name, BGW_MAXLEN, "outbox launcher");
	RegisterBackgroundWorker(&worker);
}

static bool
may_serve(Form_pg_database db)
{
#ifdef DATCONNLIMIT_INVALID_DB
	/* a DROP DATABASE interrupted halfway left it unusable */
	if (db->datconnlimit == DATCONNLIMIT_INVALID_DB)
		return false;
#endif
	return db->datallowconn && !db->datistemplate &&
		outbox_database_allowed(NameStr(db->datname));
}

/* Lists the databases to serve; forgets those dropped or no longer allowed. */
static void
scan_databases(void)
{
	HASH_SEQ_STATUS status;
	DatabaseEntry *entry;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;

	hash_seq_init(&status, databases);
	while ((entry = hash_seq_search(&status)) != NULL)
		entry->seen = false;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);
		bool		found;

		if (!may_serve(db))
			continue;
		entry = hash_search(databases, &db->oid, HASH_ENTER, &found);
		if (!found)
		{
			entry->has_extension = false;
			entry->probe_after = 0;
			entry->start_after = 0;
			entry->requested_at = 0;
			entry->gone_at = 0;
			entry->starved = false;
		}
		strlcpy(entry->name, NameStr(db->datname), NAMEDATALEN);
		entry->seen = true;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();

	hash_seq_init(&status, databases);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (!entry->seen)
			hash_search(databases, &entry->oid, HASH_REMOVE, NULL);
}

/*
 * A request for one database (its extension was created, a DDL pause of it
 * ended) comes from a statement that needed the privilege to change it: its
 * workers are started, or it is looked at, at once, whatever the delays.
 * A request for every database (too many came at once to keep each) only
 * brings forward the look at those without the extension, at most once per
 * OUTBOX_RESTART_SECONDS, and never the restart of workers that failed.
 */
static TimestampTz all_pending_since = 0;
static TimestampTz all_done_at = 0;

static bool
look_at_all_due(TimestampTz now)
{
	return all_pending_since != 0 &&
		TimestampDifferenceExceeds(all_done_at, now, OUTBOX_RESTART_SECONDS * 1000);
}

static void
take_requests(void)
{
	Oid		   *requested = palloc(sizeof(Oid) * outbox_max_launcher_requests());
	int			n = outbox_take_launcher_requests(requested);
	/* after the take: a probe that looked before then may predate a request */
	TimestampTz now = GetCurrentTimestamp();
	bool		all;
	HASH_SEQ_STATUS status;
	DatabaseEntry *entry;

	if (n < 0 && all_pending_since == 0)
		all_pending_since = now;
	all = look_at_all_due(now);
	if (all)
	{
		all_done_at = now;
		all_pending_since = 0;
	}
	hash_seq_init(&status, databases);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (all && !entry->has_extension)
		{
			entry->probe_after = 0;
			entry->requested_at = now;
		}
		for (int i = 0; i < n; i++)
			if (requested[i] == entry->oid)
			{
				entry->probe_after = entry->start_after = 0;
				entry->requested_at = now;
			}
	}
	pfree(requested);
}

/* Only a database known to have the extension is short of a worker. */
static void
log_starved(DatabaseEntry *entry, const char *why)
{
	if (entry->starved || !entry->has_extension)
		return;
	entry->starved = true;
	ereport(LOG,
			(errmsg("outbox: database \"%s\" gets no delivery worker for now: %s",
					entry->name, why),
			 errhint("It gets one as soon as one is free; raise the limit to serve every database at once.")));
}

/* The handle of slot i's worker, kept from its start until the slot is freed. */
static void
forget_handle(int i)
{
	if (handles[i] != NULL)
		pfree(handles[i]);
	handles[i] = NULL;
}

static bool
start_worker(DatabaseEntry *entry, int shard)
{
	BackgroundWorker worker;
	int			slot = -1;
	uint32		generation = 0;
	MemoryContext old_context;
	bool		registered;

	for (int i = 0; i < outbox_worker_slot_count() && slot < 0; i++)
		if ((generation = outbox_reserve_worker_slot(i, entry->oid, shard)) != 0)
			slot = i;
	if (slot < 0)
	{
		log_starved(entry, psprintf("outbox.max_workers (%d) workers run", outbox_max_workers));
		return false;
	}

	/* the launcher restarts workers itself, after a pause when they failed */
	describe_worker(&worker, "outbox_worker_main", "outbox shard", BGW_NEVER_RESTART);
	snprintf(worker.bgw_name, BGW_MAXLEN, "outbox %s shard %d of %d",
			 entry->name, shard, outbox_shards);
	worker.bgw_main_arg = Int32GetDatum(slot);
	memcpy(worker.bgw_extra, &generation, sizeof(generation));
	worker.bgw_notify_pid = MyProcPid;
	forget_handle(slot);
	/* the handle is looked at until the slot is freed, many loops later */
	old_context = MemoryContextSwitchTo(TopMemoryContext);
	registered = RegisterDynamicBackgroundWorker(&worker, &handles[slot]);
	MemoryContextSwitchTo(old_context);
	if (!registered)
	{
		(void) outbox_release_worker_slot(slot, generation, SLOT_STARTING);
		log_starved(entry, "max_worker_processes is reached");
		return false;
	}
	if (entry->starved)
		ereport(LOG, (errmsg("outbox: database \"%s\" has a delivery worker again", entry->name)));
	entry->starved = false;
	return true;
}

/*
 * A slot whose worker is gone (or never came, then outcome is SLOT_FAILED):
 * freed if it still holds what the launcher looked at, and what it says of
 * its database learnt.
 */
static void
release_slot(int i, OutboxWorkerInfo info, OutboxSlotState outcome,
			 DatabaseEntry *entry, TimestampTz now)
{
	if (!outbox_release_worker_slot(i, info.generation, info.state))
		return;
	forget_handle(i);
	if (entry == NULL)
		return;
	if (outcome == SLOT_NO_EXTENSION)
	{
		if (entry->has_extension)
			ereport(LOG,
					(errmsg("outbox: database \"%s\" no longer has the extension, its workers stopped",
							entry->name)));
		entry->has_extension = false;
		entry->gone_at = Max(entry->gone_at, info.since);
		/* a probe that looked before the CREATE EXTENSION we heard of says nothing */
		entry->probe_after = (entry->requested_at >= info.since) ? 0 :
			TimestampTzPlusMilliseconds(now, REPROBE_INTERVAL_MS);
	}
	else if (outcome != SLOT_EXITED)
		entry->start_after = TimestampTzPlusMilliseconds(now, OUTBOX_RESTART_SECONDS * 1000);
}

/*
 * Whether the worker registered for a slot still STARTING is gone without
 * having taken it. Without a handle (the slot was reserved by the launcher
 * before a restart of it) only a long wait says so.
 */
static bool
never_came(int i, OutboxWorkerInfo info, TimestampTz now)
{
	pid_t		pid;

	if (handles[i] != NULL)
		return GetBackgroundWorkerPid(handles[i], &pid) == BGWH_STOPPED;
	return TimestampDifferenceExceeds(info.since, now, START_TIMEOUT_MS);
}

/*
 * A reload that switched delivery on (commits made while it was off woke
 * no one, send.c) or workers' sleep off: every sleeping shard gets its
 * worker again, which looks for itself.
 */
static bool wake_sleepers = false;

/* Looks at every slot: frees those whose worker is gone, learns from them. */
static void
review_slots(TimestampTz now)
{
	for (int i = 0; i < outbox_worker_slot_count(); i++)
	{
		OutboxWorkerInfo info = outbox_worker_info(i);
		DatabaseEntry *entry;

		if (info.state == SLOT_FREE)
			continue;
		entry = hash_search(databases, &info.dboid, HASH_FIND, NULL);
		switch (info.state)
		{
			case SLOT_STARTING:
				if (never_came(i, info, now))
					release_slot(i, info, SLOT_FAILED, entry, now);
				break;
			case SLOT_SLEEPING:
				/* asleep: kept for its shard until a commit wants it */
				if (info.pid == 0 &&
					(entry == NULL || wake_sleepers || outbox_sleeping_slot_wanted(i)))
					release_slot(i, info, SLOT_EXITED, entry, now);
				else if (info.pid != 0 && entry == NULL)
					kill(info.pid, SIGTERM);
				break;
			case SLOT_RUNNING:
			case SLOT_DELIVERING:
				if (entry == NULL)
					kill(info.pid, SIGTERM);	/* no longer to be served */
				/* a shard that found it before another found it gone is stale */
				else if (info.state == SLOT_DELIVERING && info.since > entry->gone_at)
					entry->has_extension = true;
				break;
			default:
				release_slot(i, info, info.state, entry, now);
				break;
		}
	}
}

static bool
shard_has_worker(Oid dboid, int shard)
{
	for (int i = 0; i < outbox_worker_slot_count(); i++)
	{
		OutboxWorkerInfo info = outbox_worker_info(i);

		if (info.state != SLOT_FREE && info.dboid == dboid && info.shard == shard)
			return true;
	}
	return false;
}

/*
 * Starts what is missing: shard 0 of a database not known to lack the
 * extension (it finds out), every shard of one known to have it.
 */
static void
start_missing_workers(TimestampTz now)
{
	HASH_SEQ_STATUS status;
	DatabaseEntry *entry;

	hash_seq_init(&status, databases);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		int			shards = entry->has_extension ? outbox_shards : 1;

		if (now < entry->start_after || (!entry->has_extension && now < entry->probe_after) ||
			outbox_database_paused(entry->oid))
			continue;
		for (int shard = 0; shard < shards; shard++)
			if (!shard_has_worker(entry->oid, shard) && !start_worker(entry, shard))
				break;
	}
}

/* How long to sleep: until the next start or look that is due, at most a scan. */
static long
nap_ms(TimestampTz now)
{
	TimestampTz next = TimestampTzPlusMilliseconds(now, SCAN_INTERVAL_MS);
	HASH_SEQ_STATUS status;
	DatabaseEntry *entry;
	long		secs;
	int			usecs;

	hash_seq_init(&status, databases);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->start_after > now)
			next = Min(next, entry->start_after);
		if (!entry->has_extension && entry->probe_after > now)
			next = Min(next, entry->probe_after);
		if (entry->starved)
			next = Min(next, TimestampTzPlusMilliseconds(now, 1000));
	}
	if (all_pending_since != 0)
		next = Min(next, TimestampTzPlusMilliseconds(all_done_at, OUTBOX_RESTART_SECONDS * 1000));
	TimestampDifference(now, next, &secs, &usecs);
	return Max(10L, secs * 1000 + usecs / 1000);
}

static void
create_state(void)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(DatabaseEntry);
	databases = hash_create("outbox databases", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	handles = MemoryContextAllocZero(TopMemoryContext,
									 sizeof(BackgroundWorkerHandle *) * outbox_worker_slot_count());
}

void
outbox_launcher_main(Datum main_arg)
{
	MemoryContext loop_context;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	/* a reload signalled before the handler was set is lost: see worker.c */
	ProcessConfigFile(PGC_SIGHUP);
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	outbox_launcher_attach();
	create_state();
	loop_context = AllocSetContextCreate(TopMemoryContext, "outbox launcher loop",
										 ALLOCSET_DEFAULT_SIZES);
	ereport(LOG,
			(errmsg("outbox launcher started: %d shard(s) per database, at most %d workers",
					outbox_shards, outbox_max_workers)));

	for (;;)
	{
		TimestampTz now;

		CHECK_FOR_INTERRUPTS();
		MemoryContextSwitchTo(loop_context);
		MemoryContextReset(loop_context);
		if (ConfigReloadPending)
		{
			bool		was_enabled = outbox_enabled;

			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			wake_sleepers = (outbox_enabled && !was_enabled) || outbox_worker_idle_timeout_ms == 0;
		}
		pgstat_report_activity(STATE_RUNNING, "outbox: starting workers");
		scan_databases();
		MemoryContextSwitchTo(loop_context);
		now = GetCurrentTimestamp();
		/* a request overrides what an exited probe said before it */
		review_slots(now);
		wake_sleepers = false;
		take_requests();
		start_missing_workers(now);
		pgstat_report_activity(STATE_IDLE, NULL);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 nap_ms(now), compat_wait_event(OUTBOX_WAIT_LAUNCHER));
		ResetLatch(MyLatch);
	}
}
