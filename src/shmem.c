/*
 * shmem.c
 *		State the backends, the launcher and the workers share:
 *		- the worker slots: which (database, shard) each delivery worker
 *		  serves and who it is, so a commit can wake it and DDL can stop it;
 *		- the launcher's inbox: databases whose workers must be (re)started
 *		  or stopped, and databases paused while DDL needs them free of
 *		  connections;
 *		- the id registry: which outbox ids are still in uncommitted
 *		  transactions, per database, so a worker can start each read at the
 *		  first id that can still appear instead of rescanning the dead rows
 *		  its own deletes left behind.
 *
 * Only plain values live here (OIDs, process numbers, pids, ids), never
 * pointers into one process's memory.
 */
#include "shmem.h"
#include "compat.h"
#include "settings.h"

#include <signal.h>

#include "stats.h"

#include "access/twophase.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/*
 * Longest the workers of a database stay away for DDL that needs it free
 * of connections (DROP DATABASE waits at most 5 s for other sessions to
 * leave): a pause older than this was left by a statement that is gone.
 */
#define PAUSE_MAX_MS (60 * 1000)

/* Databases paused at once for DDL; more wait for a free entry. */
#define MAX_PAUSES 16

/* Requests to the launcher between two of its looks; more: look at all. */
#define MAX_REQUESTS 32

typedef struct DatabasePause
{
	Oid			dboid;
	int			pid;			/* backend running the DDL */
	TimestampTz since;
} DatabasePause;

typedef struct OutboxShared
{
	slock_t		mutex;			/* protects everything but the registry */
	int			launcher_procno;	/* -1 while no launcher runs */
	int			nrequests;
	bool		request_all;	/* requests overflowed: look at every database */
	Oid			requests[MAX_REQUESTS];
	DatabasePause pauses[MAX_PAUSES];
	int			nworkers;		/* outbox.max_workers */
	int			nprocs;			/* registry entries, one per PGPROC */
} OutboxShared;

/* One delivery worker: what the launcher and the backends know of it. */
typedef struct WorkerSlot
{
	OutboxWorkerInfo info;		/* changed under the mutex only */
	int			procno;			/* its PGPROC number, for waking it */
	/* bumped when old ids are put back, so the worker rescans */
	pg_atomic_uint64 rewind_generation;
} WorkerSlot;

#define MY_PROC_NUMBER COMPAT_MY_PROC_NUMBER

/* Registry entry of one PGPROC: its database and its lowest open id. */
typedef struct RegistryEntry
{
	Oid			dboid;
	pg_atomic_uint64 lowest_id;	/* 0 if none */
} RegistryEntry;

static OutboxShared *shared = NULL;
static WorkerSlot *slots = NULL;
static RegistryEntry *registry = NULL;
static LWLock *registry_lock = NULL;
static LWLock *registry_gate = NULL;
static bool registered_this_xact = false;

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;

static int
proc_count(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static void
request_shmem(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sizeof(OutboxShared));
	RequestAddinShmemSpace(mul_size(outbox_max_workers, sizeof(WorkerSlot)));
	RequestAddinShmemSpace(mul_size(proc_count(), sizeof(RegistryEntry)));
	RequestAddinShmemSpace(outbox_stats_shmem_size());
	/* the registry's lock and its gate; see "the id registry" below */
	RequestNamedLWLockTranche("outbox", 2);
}

static void
init_shared(void)
{
	memset(shared, 0, sizeof(*shared));
	SpinLockInit(&shared->mutex);
	shared->launcher_procno = -1;
	shared->nworkers = outbox_max_workers;
	shared->nprocs = proc_count();
	for (int i = 0; i < shared->nworkers; i++)
	{
		memset(&slots[i], 0, sizeof(slots[i]));
		slots[i].procno = -1;
		pg_atomic_init_u64(&slots[i].rewind_generation, 0);
	}
	for (int i = 0; i < shared->nprocs; i++)
	{
		registry[i].dboid = InvalidOid;
		pg_atomic_init_u64(&registry[i].lowest_id, 0);
	}
}

static void
startup_shmem(void)
{
	bool		found;
	bool		found_slots;
	bool		found_registry;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("outbox", sizeof(OutboxShared), &found);
	slots = ShmemInitStruct("outbox workers",
							mul_size(outbox_max_workers, sizeof(WorkerSlot)),
							&found_slots);
	registry = ShmemInitStruct("outbox registry",
							   mul_size(proc_count(), sizeof(RegistryEntry)),
							   &found_registry);
	if (!found)
		init_shared();
	outbox_stats_shmem_startup();
	registry_lock = &(GetNamedLWLockTranche("outbox"))[0].lock;
	registry_gate = &(GetNamedLWLockTranche("outbox"))[1].lock;
	LWLockRelease(AddinShmemInitLock);
}

void
outbox_shmem_install_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = request_shmem;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = startup_shmem;
}

bool
outbox_shmem_available(void)
{
	return shared != NULL;
}

/* ---- the id registry --------------------------------------------------- */

/*
 * The read floor, end to end.
 *
 * What it is for: a worker deletes what Kafka acknowledged, so its shard is
 * a trail of dead rows below its position. Starting each read at its
 * cursor skips them, but is only safe if no event below the cursor can
 * still commit. The floor is the lowest id an open transaction of this
 * database may still commit; a read scans from min(cursor, floor) and
 * leaves the next read a cursor of at most its floor and at most the id
 * after the last event it read (worker.c, next_cursor).
 *
 * Why it holds: outbox_id_seq has CACHE 1 and NO CYCLE (send.c refuses
 * any other), so ids are handed out in call order. A transaction's first
 * nextval() runs with the registry lock held shared, and its id is stored
 * in the backend's entry before the lock is released; its later ids are
 * higher. The entry is cleared at XACT_EVENT_COMMIT, after the commit is
 * visible in the ProcArray, or at abort. A worker takes the registry lock
 * exclusively, scans the entries, takes its snapshot, then releases. Every
 * id is therefore, as seen by that read, either
 *  - handed out before the worker's exclusive hold, and its transaction
 *    still registered: the id is >= the floor, so >= the next cursor; or
 *    it ended before the scan: a commit is then in the snapshot (the
 *    clearing write follows the ProcArray update, and the worker's lock
 *    acquisitions order its reads after that write), so the read returns
 *    the id or stops below it; or
 *  - handed out after the hold: higher than every id handed out before,
 *    so than every id the snapshot shows, so at or above the next cursor.
 * Dead letters put back (outbox_register_reinsert) register their lowest
 * old id the same way and bump the workers' rewind generation, so the
 * next read starts from 0.
 *
 * Why the gate: LWLocks prefer no one. A shared acquirer gets the lock
 * whenever no one holds it exclusively, waiters or not, so with many
 * concurrent outbox_send calls (each holding the lock across nextval(),
 * which waits on the sequence's buffer lock and, every 32nd call, on WAL)
 * the shared count may never fall to zero and the worker's read waits
 * indefinitely (LWLock/outbox). So registrants first take and at once
 * release a second lock, the gate, in shared mode; the worker takes the
 * gate exclusively and then the registry lock. A shared hold of the gate
 * lasts a few instructions, so the worker gets the gate quickly; while it
 * holds it, no new registrant reaches the registry lock, and the worker
 * waits only for those already past the gate, one nextval() each. No one
 * holding the registry lock waits for the gate, so there is no cycle.
 */

/* Registrants pass the gate: a worker waiting for the floor goes first. */
static void
acquire_registry_shared(void)
{
	LWLockAcquire(registry_gate, LW_SHARED);
	LWLockRelease(registry_gate);
	LWLockAcquire(registry_lock, LW_SHARED);
}

static RegistryEntry *
my_entry(void)
{
	int			procno = MY_PROC_NUMBER;

	if (procno < 0 || procno >= shared->nprocs)
		elog(ERROR, "outbox: process number %d outside the registry", procno);
	return &registry[procno];
}

/* Lowers this backend's registered id to id; the caller holds the lock. */
static void
register_inflight_id(int64 id)
{
	RegistryEntry *entry = my_entry();
	uint64		current = pg_atomic_read_u64(&entry->lowest_id);

	entry->dboid = MyDatabaseId;
	if (current == 0 || (uint64) id < current)
		pg_atomic_write_u64(&entry->lowest_id, (uint64) id);
	registered_this_xact = true;
}

/*
 * Allocates an outbox id and, on the transaction's first, registers it
 * before it can be seen anywhere (see "the read floor" above).
 */
int64
outbox_next_id_registered(Oid sequence)
{
	int64		id;

	if (shared == NULL || registered_this_xact)
		return nextval_internal(sequence, false);

	/* wait for DDL on the sequence before, not while, holding the LWLock */
	LockRelationOid(sequence, RowExclusiveLock);
	acquire_registry_shared();
	id = nextval_internal(sequence, false);
	register_inflight_id(id);
	LWLockRelease(registry_lock);
	return id;
}

/*
 * Registers ids older than the workers' positions (dead letters put back
 * into the outbox) and makes the workers of this database read their
 * shards from the start.
 */
void
outbox_register_reinsert(int64 min_id)
{
	if (shared == NULL)
		return;
	acquire_registry_shared();
	register_inflight_id(min_id);
	for (int i = 0; i < shared->nworkers; i++)
		if (slots[i].info.dboid == MyDatabaseId)
			pg_atomic_fetch_add_u64(&slots[i].rewind_generation, 1);
	LWLockRelease(registry_lock);
}

void
outbox_clear_inflight(void)
{
	if (shared != NULL && registered_this_xact)
		pg_atomic_write_u64(&my_entry()->lowest_id, 0);
	registered_this_xact = false;
}

/*
 * Takes the snapshot a worker reads its batch with, and returns the lowest
 * id any transaction of this database still open at that moment can commit
 * (PG_INT64_MAX if none), with the worker's rewind generation. Must be
 * called in a transaction; pushes the snapshot as active. The gate first,
 * so that registrants cannot keep the registry lock from us.
 */
int64
outbox_take_snapshot_floor(int slot, uint64 *rewind_generation)
{
	uint64		floor = PG_UINT64_MAX;

	LWLockAcquire(registry_gate, LW_EXCLUSIVE);
	LWLockAcquire(registry_lock, LW_EXCLUSIVE);
	for (int i = 0; i < shared->nprocs; i++)
	{
		uint64		id = pg_atomic_read_u64(&registry[i].lowest_id);

		if (id != 0 && id < floor && registry[i].dboid == MyDatabaseId)
			floor = id;
	}
	*rewind_generation = pg_atomic_read_u64(&slots[slot].rewind_generation);
	PushActiveSnapshot(GetTransactionSnapshot());
	LWLockRelease(registry_lock);
	LWLockRelease(registry_gate);

	return floor > (uint64) PG_INT64_MAX ? PG_INT64_MAX : (int64) floor;
}

static void wake_launcher(void);

/* ---- worker slots ------------------------------------------------------ */

/* Wakes the workers of this database's shards in shard_mask. */
void
outbox_wake_shards(uint64 shard_mask)
{
	if (shared == NULL)
		return;
	for (int i = 0; i < shared->nworkers; i++)
	{
		WorkerSlot *slot = &slots[i];
		int			procno;

		if (slot->info.dboid != MyDatabaseId ||
			(shard_mask & (UINT64CONST(1) << slot->info.shard)) == 0)
			continue;
		/* a stale number only sets some other latch: harmless */
		procno = slot->procno;
		if (procno >= 0)
			SetLatch(&GetPGProcByNumber(procno)->procLatch);
	}
}

int
outbox_worker_slot_count(void)
{
	return shared->nworkers;
}

/* What slot i holds, as one consistent copy. */
OutboxWorkerInfo
outbox_worker_info(int i)
{
	OutboxWorkerInfo copy;

	SpinLockAcquire(&shared->mutex);
	copy = slots[i].info;
	SpinLockRelease(&shared->mutex);
	return copy;
}

/*
 * Launcher: reserves slot i for (dboid, shard); returns the reservation's
 * generation, which the worker presents to attach, or 0 if it is taken.
 */
uint32
outbox_reserve_worker_slot(int i, Oid dboid, int shard)
{
	uint32		generation = 0;

	SpinLockAcquire(&shared->mutex);
	if (slots[i].info.state == SLOT_FREE)
	{
		if (++slots[i].info.generation == 0)
			slots[i].info.generation = 1;
		generation = slots[i].info.generation;
		slots[i].info.dboid = dboid;
		slots[i].info.shard = shard;
		slots[i].info.pid = 0;
		slots[i].procno = -1;
		slots[i].info.state = SLOT_STARTING;
		slots[i].info.since = GetCurrentTimestamp();
	}
	SpinLockRelease(&shared->mutex);
	return generation;
}

/*
 * Launcher: gives slot i up (its worker exited or never started), if it
 * still holds the reservation and state the launcher looked at. A worker
 * that attached, or exited, since the look changed the state: the slot is
 * kept, and the launcher learns the news at its next look. Returns whether
 * the slot was freed.
 */
bool
outbox_release_worker_slot(int i, uint32 generation, OutboxSlotState state)
{
	bool		released = false;

	SpinLockAcquire(&shared->mutex);
	if (slots[i].info.generation == generation && slots[i].info.state == state)
	{
		slots[i].info.state = SLOT_FREE;
		slots[i].info.dboid = InvalidOid;
		slots[i].info.pid = 0;
		slots[i].procno = -1;
		released = true;
	}
	SpinLockRelease(&shared->mutex);
	return released;
}

/* The slot this worker attached to, and the generation it attached with. */
static int	my_slot = -1;
static uint32 my_generation = 0;

static void
detach_worker(int code, Datum arg)
{
	int			i = my_slot;
	int			launcher;

	SpinLockAcquire(&shared->mutex);
	if (slots[i].info.generation != my_generation)
	{
		SpinLockRelease(&shared->mutex);
		return;
	}
	slots[i].info.pid = 0;
	slots[i].procno = -1;
	/* a worker that found no extension said so already, and when it looked */
	if (slots[i].info.state != SLOT_NO_EXTENSION)
	{
		slots[i].info.state = (code == 0) ? SLOT_EXITED : SLOT_FAILED;
		slots[i].info.since = GetCurrentTimestamp();
	}
	launcher = shared->launcher_procno;
	SpinLockRelease(&shared->mutex);
	if (launcher >= 0)
		SetLatch(&GetPGProcByNumber(launcher)->procLatch);
}

/*
 * Worker: takes slot i over if its reservation is still the one it was
 * started for; returns false (touching nothing) if the launcher gave the
 * slot up meanwhile. Sets the slot's database and shard. Also false, after
 * taking the slot (whose state says it exited), while DDL needs the
 * database free of connections: the worker must not connect, and the
 * launcher starts it again when the pause ends.
 */
bool
outbox_worker_attach(int i, uint32 generation, Oid *dboid, int *shard)
{
	if (i < 0 || i >= shared->nworkers)
		elog(FATAL, "outbox: worker slot %d does not exist", i);
	SpinLockAcquire(&shared->mutex);
	if (slots[i].info.generation != generation || slots[i].info.state != SLOT_STARTING)
	{
		SpinLockRelease(&shared->mutex);
		return false;
	}
	slots[i].info.pid = MyProcPid;
	slots[i].procno = MY_PROC_NUMBER;
	slots[i].info.state = SLOT_RUNNING;
	slots[i].info.since = GetCurrentTimestamp();
	*dboid = slots[i].info.dboid;
	*shard = slots[i].info.shard;
	SpinLockRelease(&shared->mutex);
	my_slot = i;
	my_generation = generation;
	on_shmem_exit(detach_worker, (Datum) 0);

	/*
	 * The DDL backend pauses, then stops the workers it sees: one that
	 * attached after its look sees the pause here, one before is signalled.
	 */
	return !outbox_database_paused(*dboid);
}

/*
 * Worker: whether its database has the extension, as a look that started
 * at looked_at saw it. Without, it exits and is not started again until
 * the launcher hears of one; with, the launcher starts the database's
 * other shards. The time is the look's start, not its end: a CREATE
 * EXTENSION the launcher heard of after then may have committed after the
 * look's snapshot, so the launcher looks again at once.
 */
void
outbox_worker_found_extension(int i, bool found, TimestampTz looked_at)
{
	SpinLockAcquire(&shared->mutex);
	if (slots[i].info.generation == my_generation)
	{
		slots[i].info.state = found ? SLOT_DELIVERING : SLOT_NO_EXTENSION;
		slots[i].info.since = looked_at;
	}
	SpinLockRelease(&shared->mutex);
	if (found)
		wake_launcher();
}

/* ---- the launcher's inbox ---------------------------------------------- */

void
outbox_launcher_attach(void)
{
	SpinLockAcquire(&shared->mutex);
	shared->launcher_procno = MY_PROC_NUMBER;
	SpinLockRelease(&shared->mutex);
}

static void
wake_launcher(void)
{
	int			launcher = shared->launcher_procno;

	if (launcher >= 0)
		SetLatch(&GetPGProcByNumber(launcher)->procLatch);
}

/*
 * Wakes the launcher without asking anything of it: it lists the
 * databases again (a new one is looked at at once), and changes no delay.
 */
void
outbox_wake_launcher(void)
{
	if (shared != NULL)
		wake_launcher();
}

/*
 * Asks the launcher to look at a database again (InvalidOid: at all of
 * them): the extension was created there, the database was created, a DDL
 * pause ended.
 */
void
outbox_request_launcher(Oid dboid)
{
	if (shared == NULL)
		return;
	SpinLockAcquire(&shared->mutex);
	if (!OidIsValid(dboid) || shared->nrequests >= MAX_REQUESTS)
		shared->request_all = true;
	else
		shared->requests[shared->nrequests++] = dboid;
	SpinLockRelease(&shared->mutex);
	wake_launcher();
}

/*
 * Launcher: takes the pending requests; returns how many were copied into
 * dboids (at most MAX_REQUESTS), or -1 for "look at every database".
 */
int
outbox_take_launcher_requests(Oid *dboids)
{
	int			n;

	SpinLockAcquire(&shared->mutex);
	n = shared->request_all ? -1 : shared->nrequests;
	if (n > 0)
		memcpy(dboids, shared->requests, sizeof(Oid) * n);
	shared->nrequests = 0;
	shared->request_all = false;
	SpinLockRelease(&shared->mutex);
	return n;
}

int
outbox_max_launcher_requests(void)
{
	return MAX_REQUESTS;
}

/* ---- DDL pauses -------------------------------------------------------- */

/*
 * Pauses the workers of a database for this backend's DDL, or renews the
 * pause it has; false when every pause entry is taken (the DDL then runs
 * without, and may be refused because of the workers' connections).
 */
bool
outbox_pause_database(Oid dboid)
{
	DatabasePause *entry = NULL;
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < MAX_PAUSES; i++)
	{
		DatabasePause *p = &shared->pauses[i];

		if (p->pid == MyProcPid && p->dboid == dboid)
		{
			entry = p;
			break;
		}
		if (entry == NULL &&
			(p->pid == 0 || TimestampDifferenceExceeds(p->since, now, PAUSE_MAX_MS)))
			entry = p;
	}
	if (entry != NULL)
	{
		entry->dboid = dboid;
		entry->pid = MyProcPid;
		entry->since = now;
	}
	SpinLockRelease(&shared->mutex);
	return entry != NULL;
}

void
outbox_resume_database(Oid dboid)
{
	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < MAX_PAUSES; i++)
		if (shared->pauses[i].pid == MyProcPid && shared->pauses[i].dboid == dboid)
			shared->pauses[i].pid = 0;
	SpinLockRelease(&shared->mutex);
	outbox_request_launcher(dboid);
}

/* True while a live backend runs DDL that needs the database, for a while. */
bool
outbox_database_paused(Oid dboid)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		paused = false;

	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < MAX_PAUSES; i++)
	{
		DatabasePause *p = &shared->pauses[i];

		if (p->pid != 0 && p->dboid == dboid &&
			!TimestampDifferenceExceeds(p->since, now, PAUSE_MAX_MS))
			paused = true;
	}
	SpinLockRelease(&shared->mutex);
	/* a backend that died in its DDL left its pause behind */
	for (int i = 0; paused && i < MAX_PAUSES; i++)
		if (shared->pauses[i].dboid == dboid && shared->pauses[i].pid != 0 &&
			kill(shared->pauses[i].pid, 0) != 0)
			paused = false;
	return paused;
}
