/*
 * shmem.c
 *		State the backends and the workers share: who each shard's worker is
 *		(so a commit can wake it), and which outbox ids are still in
 *		uncommitted transactions (so a worker can start each read at the
 *		first id that can still appear instead of rescanning the dead rows
 *		its own deletes left behind).
 *
 * Only plain values live here (process numbers, pids, ids), never pointers
 * into one process's memory.
 */
#include "outbox.h"

#include <signal.h>

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
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/*
 * Longest the workers stay away for a DROP DATABASE: the drop itself waits
 * at most 5 s for other sessions to leave, so a mark older than this was
 * left behind by a drop that did not happen.
 */
#define DROP_PENDING_MAX_MS (60 * 1000)

typedef struct ShardState
{
	int			pid;			/* 0 while no worker runs */
	int			procno;			/* its PGPROC number, for waking it */
	int			connect_failures;	/* consecutive failed connects */
} ShardState;

typedef struct OutboxShared
{
	/* bumped when old ids are put back, so workers rescan from the start */
	pg_atomic_uint64 rewind_generation;
	int			drop_pending_pid;	/* backend dropping outbox.database */
	TimestampTz drop_pending_since;
	ShardState	shards[OUTBOX_MAX_SHARDS];
	int			nslots;
	/* per PGPROC: lowest outbox id its open transaction made, 0 if none */
	pg_atomic_uint64 inflight[FLEXIBLE_ARRAY_MEMBER];
} OutboxShared;

/* PostgreSQL 17 replaced PGPROC.pgprocno with MyProcNumber */
#if PG_VERSION_NUM >= 170000
#define MY_PROC_NUMBER MyProcNumber
#else
#define MY_PROC_NUMBER (MyProc->pgprocno)
#endif

static OutboxShared *shared = NULL;
static LWLock *registry_lock = NULL;
static bool registered_this_xact = false;

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

static int
slot_count(void)
{
#if PG_VERSION_NUM >= 150000
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
#else
	/* MaxBackends is not computed yet when _PG_init runs before 15 */
	return MaxConnections + autovacuum_max_workers + 1 +
		max_worker_processes + max_wal_senders +
		NUM_AUXILIARY_PROCS + max_prepared_xacts;
#endif
}

static Size
shared_size(void)
{
	return add_size(offsetof(OutboxShared, inflight),
					mul_size(slot_count(), sizeof(pg_atomic_uint64)));
}

static void
request_shmem(void)
{
#if PG_VERSION_NUM >= 150000
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
#endif
	RequestAddinShmemSpace(shared_size());
	RequestNamedLWLockTranche("outbox", 1);
}

static void
startup_shmem(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("outbox", shared_size(), &found);
	if (!found)
	{
		memset(shared, 0, shared_size());
		pg_atomic_init_u64(&shared->rewind_generation, 0);
		for (int i = 0; i < OUTBOX_MAX_SHARDS; i++)
			shared->shards[i].procno = -1;
		shared->nslots = slot_count();
		for (int i = 0; i < shared->nslots; i++)
			pg_atomic_init_u64(&shared->inflight[i], 0);
	}
	registry_lock = &(GetNamedLWLockTranche("outbox"))->lock;
	LWLockRelease(AddinShmemInitLock);
}

void
outbox_shmem_install_hooks(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = request_shmem;
#else
	request_shmem();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = startup_shmem;
}

bool
outbox_shmem_available(void)
{
	return shared != NULL;
}

static pg_atomic_uint64 *
my_slot(void)
{
	int			procno = MY_PROC_NUMBER;

	if (procno < 0 || procno >= shared->nslots)
		elog(ERROR, "outbox: process number %d outside the registry", procno);
	return &shared->inflight[procno];
}

/* Lowers this backend's registered id to id; the caller holds the lock. */
static void
register_inflight_id(int64 id)
{
	pg_atomic_uint64 *slot = my_slot();
	uint64		current = pg_atomic_read_u64(slot);

	if (current == 0 || (uint64) id < current)
		pg_atomic_write_u64(slot, (uint64) id);
	registered_this_xact = true;
}

/*
 * Allocates an outbox id and, on the transaction's first, registers it
 * before it can be seen anywhere. nextval() runs under the registry lock
 * so that a worker, which takes its snapshot under the exclusive lock,
 * either finds the id registered or was ahead of it entirely.
 */
int64
outbox_next_id_registered(Oid sequence)
{
	int64		id;

	if (shared == NULL || registered_this_xact)
		return nextval_internal(sequence, false);

	/* wait for DDL on the sequence before, not while, holding the LWLock */
	LockRelationOid(sequence, RowExclusiveLock);
	LWLockAcquire(registry_lock, LW_SHARED);
	id = nextval_internal(sequence, false);
	register_inflight_id(id);
	LWLockRelease(registry_lock);
	return id;
}

/*
 * Registers ids older than the workers' positions (dead letters put back
 * into the outbox) and makes every worker read its shard from the start.
 */
void
outbox_register_reinsert(int64 min_id)
{
	if (shared == NULL)
		return;
	LWLockAcquire(registry_lock, LW_SHARED);
	register_inflight_id(min_id);
	pg_atomic_fetch_add_u64(&shared->rewind_generation, 1);
	LWLockRelease(registry_lock);
}

void
outbox_clear_inflight(void)
{
	if (shared != NULL && registered_this_xact)
		pg_atomic_write_u64(my_slot(), 0);
	registered_this_xact = false;
}

/*
 * Takes the snapshot a worker reads its batch with, and returns the lowest
 * id any transaction still open at that moment can commit (PG_INT64_MAX if
 * none). Must be called in a transaction; pushes the snapshot as active.
 */
int64
outbox_take_snapshot_floor(uint64 *rewind_generation)
{
	uint64		floor = PG_UINT64_MAX;

	LWLockAcquire(registry_lock, LW_EXCLUSIVE);
	for (int i = 0; i < shared->nslots; i++)
	{
		uint64		id = pg_atomic_read_u64(&shared->inflight[i]);

		if (id != 0 && id < floor)
			floor = id;
	}
	*rewind_generation = pg_atomic_read_u64(&shared->rewind_generation);
	PushActiveSnapshot(GetTransactionSnapshot());
	LWLockRelease(registry_lock);

	return floor > (uint64) PG_INT64_MAX ? PG_INT64_MAX : (int64) floor;
}

void
outbox_wake_shards(uint64 shard_mask)
{
	if (shared == NULL)
		return;
	for (int shard = 0; shard < OUTBOX_MAX_SHARDS; shard++)
	{
		int			procno;

		if ((shard_mask & (UINT64CONST(1) << shard)) == 0)
			continue;
		/* a stale number only sets some other latch: harmless */
		procno = shared->shards[shard].procno;
		if (procno >= 0)
			SetLatch(&GetPGProcByNumber(procno)->procLatch);
	}
}

static void
detach_worker(int code, Datum arg)
{
	int			shard = DatumGetInt32(arg);

	shared->shards[shard].procno = -1;
	shared->shards[shard].pid = 0;
}

void
outbox_worker_attach(int shard)
{
	shared->shards[shard].pid = MyProcPid;
	shared->shards[shard].procno = MY_PROC_NUMBER;
	on_shmem_exit(detach_worker, Int32GetDatum(shard));
}

int
outbox_worker_pid(int shard)
{
	return shared->shards[shard].pid;
}

int
outbox_connect_failures(int shard)
{
	return shared->shards[shard].connect_failures;
}

void
outbox_set_connect_failures(int shard, int failures)
{
	shared->shards[shard].connect_failures = failures;
}

void
outbox_set_drop_pending(int pid)
{
	shared->drop_pending_since = GetCurrentTimestamp();
	shared->drop_pending_pid = pid;
}

/* True while a live backend is dropping outbox.database, for a while. */
bool
outbox_drop_pending(void)
{
	int			pid = shared->drop_pending_pid;

	return pid != 0 && kill(pid, 0) == 0 &&
		!TimestampDifferenceExceeds(shared->drop_pending_since, GetCurrentTimestamp(),
									DROP_PENDING_MAX_MS);
}
