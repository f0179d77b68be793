/*
 * slots.c
 *		The delivery workers' slots: which (database, shard) each worker
 *		serves and who it is, so a commit can wake it and DDL can stop it,
 *		and where it is in its life (slots.h draws it), which the launcher
 *		acts on and outbox_status shows. Each slot also counts the rewinds
 *		(dead letters put back) its worker must cover.
 *
 * Only plain values live here (OIDs, process numbers, pids), never
 * pointers into one process's memory.
 */
#include "shared/slots.h"
#include "compat.h"
#include "settings.h"
#include "shared/inbox.h"
#include "shared/pauses.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

/* One delivery worker: what the launcher and the backends know of it. */
typedef struct WorkerSlot
{
	OutboxWorkerInfo info;		/* changed under the mutex only */
	int			procno;			/* its PGPROC number, for waking it */
	/* bumped when old ids are put back, so the worker rescans */
	pg_atomic_uint64 rewind_generation;
	/* the worker is going to sleep or asleep: a commit wakes the launcher */
	pg_atomic_uint32 sleeping;
	/* a commit came since: the launcher starts the shard's worker again */
	pg_atomic_uint32 wanted;
} WorkerSlot;

typedef struct SlotsShared
{
	slock_t		mutex;			/* protects every slot's info */
	int			nworkers;		/* outbox.max_workers */
	WorkerSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} SlotsShared;

static SlotsShared *shared = NULL;

/* The slot this worker attached to, and the generation it attached with. */
static int	my_slot = -1;
static uint32 my_generation = 0;

Size
outbox_slots_shmem_size(void)
{
	return add_size(offsetof(SlotsShared, slots),
					mul_size(outbox_max_workers, sizeof(WorkerSlot)));
}

/* Called with AddinShmemInitLock held. */
void
outbox_slots_shmem_startup(void)
{
	bool		found;

	shared = ShmemInitStruct("outbox workers", outbox_slots_shmem_size(), &found);
	if (found)
		return;
	SpinLockInit(&shared->mutex);
	shared->nworkers = outbox_max_workers;
	for (int i = 0; i < shared->nworkers; i++)
	{
		memset(&shared->slots[i], 0, sizeof(shared->slots[i]));
		shared->slots[i].procno = -1;
		pg_atomic_init_u64(&shared->slots[i].rewind_generation, 0);
		pg_atomic_init_u32(&shared->slots[i].sleeping, 0);
		pg_atomic_init_u32(&shared->slots[i].wanted, 0);
	}
}

/* Whether the library was preloaded: without, no worker runs. */
bool
outbox_slots_available(void)
{
	return shared != NULL;
}

/* ---- anyone ------------------------------------------------------------ */

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
	copy = shared->slots[i].info;
	SpinLockRelease(&shared->mutex);
	return copy;
}

/*
 * The worker serving (dboid, shard): its pid, or 0 with *state saying
 * whether one is starting (SLOT_STARTING), asleep (SLOT_SLEEPING) or none
 * is there (SLOT_FREE).
 */
int
outbox_shard_worker(Oid dboid, int shard, OutboxSlotState *state)
{
	*state = SLOT_FREE;
	for (int i = 0; i < shared->nworkers; i++)
	{
		OutboxWorkerInfo info = outbox_worker_info(i);

		if (info.dboid != dboid || info.shard != shard)
			continue;
		if (info.state == SLOT_STARTING || (info.state == SLOT_SLEEPING && info.pid == 0))
			*state = info.state;
		if (info.pid != 0 && (info.state == SLOT_RUNNING || info.state == SLOT_DELIVERING))
			return info.pid;
	}
	return 0;
}

/* Wakes the workers of this database's shards in shard_mask. */
void
outbox_wake_shards(uint64 shard_mask)
{
	if (shared == NULL)
		return;
	for (int i = 0; i < shared->nworkers; i++)
	{
		WorkerSlot *slot = &shared->slots[i];
		int			procno;

		if (slot->info.dboid != MyDatabaseId ||
			(shard_mask & (UINT64CONST(1) << slot->info.shard)) == 0)
			continue;
		/* a stale number only sets some other latch: harmless */
		procno = slot->procno;
		if (procno >= 0)
			SetLatch(&GetPGProcByNumber(procno)->procLatch);

		/*
		 * The worker takes its last look at the outbox after saying it
		 * sleeps (outbox_worker_fall_asleep): either that look saw this
		 * commit, or this read sees it sleeping.
		 */
		pg_memory_barrier();
		if (pg_atomic_read_u32(&slot->sleeping) != 0)
		{
			pg_atomic_write_u32(&slot->wanted, 1);
			outbox_wake_launcher();
		}
	}
}

/* ---- the launcher ------------------------------------------------------ */

/*
 * Launcher: reserves slot i for (dboid, shard); returns the reservation's
 * generation, which the worker presents to attach, or 0 if it is taken.
 */
uint32
outbox_reserve_worker_slot(int i, Oid dboid, int shard)
{
	WorkerSlot *slot = &shared->slots[i];
	uint32		generation = 0;

	SpinLockAcquire(&shared->mutex);
	if (slot->info.state == SLOT_FREE)
	{
		if (++slot->info.generation == 0)
			slot->info.generation = 1;
		generation = slot->info.generation;
		slot->info.dboid = dboid;
		slot->info.shard = shard;
		slot->info.pid = 0;
		slot->procno = -1;
		slot->info.state = SLOT_STARTING;
		slot->info.since = GetCurrentTimestamp();
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
	WorkerSlot *slot = &shared->slots[i];
	bool		released = false;

	SpinLockAcquire(&shared->mutex);
	if (slot->info.generation == generation && slot->info.state == state)
	{
		slot->info.state = SLOT_FREE;
		slot->info.dboid = InvalidOid;
		slot->info.pid = 0;
		slot->procno = -1;
		pg_atomic_write_u32(&slot->sleeping, 0);
		pg_atomic_write_u32(&slot->wanted, 0);
		released = true;
	}
	SpinLockRelease(&shared->mutex);
	return released;
}

/* Launcher: whether a commit wants slot i's sleeping shard delivered. */
bool
outbox_sleeping_slot_wanted(int i)
{
	return pg_atomic_read_u32(&shared->slots[i].wanted) != 0;
}

/* ---- the worker of a slot ---------------------------------------------- */

static void
detach_worker(int code, Datum arg)
{
	WorkerSlot *slot = &shared->slots[my_slot];

	SpinLockAcquire(&shared->mutex);
	if (slot->info.generation != my_generation)
	{
		SpinLockRelease(&shared->mutex);
		return;
	}
	slot->info.pid = 0;
	slot->procno = -1;
	/* a worker that found no extension, or fell asleep, said so already */
	if (slot->info.state != SLOT_NO_EXTENSION && slot->info.state != SLOT_SLEEPING)
	{
		slot->info.state = (code == 0) ? SLOT_EXITED : SLOT_FAILED;
		slot->info.since = GetCurrentTimestamp();
	}
	SpinLockRelease(&shared->mutex);
	outbox_wake_launcher();
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
	WorkerSlot *slot;

	if (i < 0 || i >= shared->nworkers)
		elog(FATAL, "outbox: worker slot %d does not exist", i);
	slot = &shared->slots[i];
	SpinLockAcquire(&shared->mutex);
	if (slot->info.generation != generation || slot->info.state != SLOT_STARTING)
	{
		SpinLockRelease(&shared->mutex);
		return false;
	}
	slot->info.pid = MyProcPid;
	slot->procno = COMPAT_MY_PROC_NUMBER;
	pg_atomic_write_u32(&slot->sleeping, 0);
	pg_atomic_write_u32(&slot->wanted, 0);
	slot->info.state = SLOT_RUNNING;
	slot->info.since = GetCurrentTimestamp();
	*dboid = slot->info.dboid;
	*shard = slot->info.shard;
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
	WorkerSlot *slot = &shared->slots[i];

	SpinLockAcquire(&shared->mutex);
	if (slot->info.generation == my_generation)
	{
		slot->info.state = found ? SLOT_DELIVERING : SLOT_NO_EXTENSION;
		slot->info.since = looked_at;
	}
	SpinLockRelease(&shared->mutex);
	if (found)
		outbox_wake_launcher();
}

/* Worker: the state of the slot it attached to, while it still holds it. */
OutboxSlotState
outbox_my_slot_state(void)
{
	OutboxWorkerInfo info;

	if (my_slot < 0)
		return SLOT_FREE;
	info = outbox_worker_info(my_slot);
	return info.generation == my_generation ? info.state : SLOT_FREE;
}

/*
 * Worker: it is about to take its last look at the outbox before it exits
 * for want of work. From here a commit of its shard (outbox_wake_shards)
 * asks the launcher to start it again; the slot stays the shard's.
 */
void
outbox_worker_fall_asleep(void)
{
	WorkerSlot *slot = &shared->slots[my_slot];

	SpinLockAcquire(&shared->mutex);
	if (slot->info.generation == my_generation)
	{
		slot->info.state = SLOT_SLEEPING;
		slot->info.since = GetCurrentTimestamp();
	}
	SpinLockRelease(&shared->mutex);
	pg_atomic_write_u32(&slot->sleeping, 1);
	pg_memory_barrier();
}

/* Worker: the last look found work after all; it goes on delivering. */
void
outbox_worker_stay_awake(void)
{
	WorkerSlot *slot = &shared->slots[my_slot];

	pg_atomic_write_u32(&slot->sleeping, 0);
	pg_atomic_write_u32(&slot->wanted, 0);
	SpinLockAcquire(&shared->mutex);
	if (slot->info.generation == my_generation && slot->info.state == SLOT_SLEEPING)
		slot->info.state = SLOT_DELIVERING;
	SpinLockRelease(&shared->mutex);
}

/* ---- rewind generations ------------------------------------------------ */

/* Makes the workers of dboid read their shards again from the start. */
void
outbox_rewind_database_slots(Oid dboid)
{
	for (int i = 0; i < shared->nworkers; i++)
		if (shared->slots[i].info.dboid == dboid)
			pg_atomic_fetch_add_u64(&shared->slots[i].rewind_generation, 1);
}

uint64
outbox_slot_rewind_generation(int i)
{
	return pg_atomic_read_u64(&shared->slots[i].rewind_generation);
}
