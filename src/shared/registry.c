/*
 * registry.c
 *		The id registry: which outbox ids are still in uncommitted
 *		transactions, per database, so a worker can start each read at the
 *		first id that can still appear instead of rescanning the dead rows
 *		its own deletes left behind. Its parts: send.c registers each
 *		transaction's first id and clears it at commit or abort (or moves
 *		it to the prepared transaction's entry at PREPARE); this file
 *		lists the open transactions' ids with the read's snapshot; queue.c
 *		scans from the cursor, or from where a transaction the worker knew
 *		open below it has ended since; worker.c's next_cursor() moves the
 *		cursor and keeps the open ids below it.
 *		The same entries say which of them commit asynchronously, for
 *		durability.c.
 */
#include "shared/registry.h"
#include "compat.h"
#include "shared/slots.h"

#include "access/twophase.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/snapmgr.h"

/*
 * Registry entry of one PGPROC: its database, its lowest open id, and
 * whether its commit, under way, is asynchronous.
 */
typedef struct RegistryEntry
{
	Oid			dboid;
	pg_atomic_uint64 lowest_id;	/* 0 if none */
	pg_atomic_uint32 async_commit;	/* 1 from pre-commit until cleared */
	pg_atomic_uint32 xid;		/* a backend's: the transaction it prepares;
								 * a prepared transaction's: its own */
} RegistryEntry;

typedef struct RegistryShared
{
	int			nprocs;			/* one entry per PGPROC */
	pg_atomic_uint64 async_ended;	/* asynchronous commits cleared so far */
	RegistryEntry entries[FLEXIBLE_ARRAY_MEMBER];
} RegistryShared;

static RegistryShared *registry = NULL;
static LWLock *registry_lock = NULL;
static LWLock *registry_gate = NULL;
static bool registered_this_xact = false;
static TransactionId preparing_xid = InvalidTransactionId;

static int
proc_count(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

Size
outbox_registry_shmem_size(void)
{
	return add_size(offsetof(RegistryShared, entries),
					mul_size(proc_count(), sizeof(RegistryEntry)));
}

/* The registry's lock and its gate; see "the read floor" below. */
void
outbox_registry_request_locks(void)
{
	RequestNamedLWLockTranche("outbox", 2);
}

/* Called with AddinShmemInitLock held. */
void
outbox_registry_shmem_startup(void)
{
	bool		found;

	registry = ShmemInitStruct("outbox registry", outbox_registry_shmem_size(), &found);
	if (!found)
	{
		registry->nprocs = proc_count();
		pg_atomic_init_u64(&registry->async_ended, 0);
		for (int i = 0; i < registry->nprocs; i++)
		{
			registry->entries[i].dboid = InvalidOid;
			pg_atomic_init_u64(&registry->entries[i].lowest_id, 0);
			pg_atomic_init_u32(&registry->entries[i].async_commit, 0);
			pg_atomic_init_u32(&registry->entries[i].xid, InvalidTransactionId);
		}
	}
	registry_lock = &(GetNamedLWLockTranche("outbox"))[0].lock;
	registry_gate = &(GetNamedLWLockTranche("outbox"))[1].lock;
}

/*
 * The read floor, end to end.
 *
 * What it is for: a worker deletes what Kafka acknowledged, so its shard is
 * a trail of dead rows below its position. Starting each read at its
 * cursor skips them, but is only safe if every id below the cursor that
 * can still commit is known. A read's snapshot comes with the lowest id of
 * each transaction of this database open at that moment (the lowest of
 * them is the floor). The worker keeps those below the read's next cursor
 * (worker.c, next_cursor: the id after the last event it read); a later
 * read scans from the cursor, or from the lowest kept id that its own list
 * no longer has: that transaction ended, and its rows, below the cursor,
 * are found by that one read. A transaction still open is never scanned
 * for: its rows are invisible until it ends. So a transaction left open
 * (idle in transaction after outbox_send, for hours) costs the reads
 * nothing while it stays open, and one walk of what was deleted since its
 * first id when it ends, where a scan from the floor would walk all of
 * that at every read, as long as a snapshot keeps the dead rows' index
 * entries from being killed.
 *
 * Why it holds: outbox_id_seq has CACHE 1 and NO CYCLE (send.c refuses
 * any other), so ids are handed out in call order and never twice. A
 * transaction's first nextval() runs with the registry lock held shared,
 * and its id is stored in the backend's entry before the lock is released;
 * its later ids are higher. The entry is cleared at XACT_EVENT_COMMIT,
 * after the commit is visible in the ProcArray, or at abort. A worker
 * takes the registry lock exclusively, lists the entries, takes its
 * snapshot, then releases. Every id is therefore, as seen by that read,
 * either
 *  - handed out before the worker's exclusive hold, and its transaction
 *    still registered: the id is >= the registered id the read lists,
 *    which the worker keeps if it is below the next cursor (if not, the id
 *    is above the next cursor too); or it ended before the listing: a
 *    commit is then in the snapshot (the clearing write follows the
 *    ProcArray update, and the worker's lock acquisitions order its reads
 *    after that write), so the read returns the id or stops below it; or
 *  - handed out after the hold: higher than every id handed out before,
 *    so than every id the snapshot shows, so at or above the next cursor.
 * A kept id that a later read's list does not have belongs to a
 * transaction that ended before that listing: by the same argument its
 * commit is in that read's snapshot, and the read starts at that id. A
 * read with no event leaves the cursor where it was, which was valid
 * already (one from the start leaves it at 0, below).
 *
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
 *
 * Asynchronous commits. A worker must not produce an event whose commit
 * could still be lost: one made with synchronous_commit = off and not yet
 * flushed. At pre-commit such a transaction flags its entry; when it
 * clears the entry (after its commit is visible) it first counts itself
 * in async_ended, then unflags. A worker, after taking its snapshot, reads
 * the flags of its database, then the count. A commit its snapshot shows
 * flagged its entry before it became visible, so the worker sees the flag
 * or, once unflagged, the count that was raised before: either tells it
 * to flush (durability.c). Synchronous commits, flushed before they are
 * visible, leave neither, and neither do the worker's own asynchronous
 * deletes: so under synchronous load a worker flushes nothing.
 *
 * Prepared transactions. After PREPARE TRANSACTION no backend runs the
 * transaction any more, yet it may still commit its ids, from any session
 * and after a restart. So the registry keeps an entry per prepared
 * transaction too, at the number of the dummy PGPROC PostgreSQL gives it
 * (the last max_prepared_transactions entries), with its xid:
 *  - At pre-prepare a backend names the xid it prepares in its own entry;
 *    at prepare, once the prepared transaction is in the ProcArray, it
 *    moves its lowest id (0 if it sent nothing) and its database to the
 *    prepared transaction's entry and clears its own, under the registry
 *    lock (shared), so a listing sees the id in one of the two entries.
 *  - A read lists a prepared transaction's id only while the transaction
 *    is in progress (TransactionIdIsInProgress, inside the exclusive hold,
 *    before the snapshot): one that ended before is in the snapshot, as a
 *    backend's commit is; the worker clears its entry then.
 *    COMMIT PREPARED runs no callback of the preparing backend, so the
 *    utility hook of the session that runs it wakes the database's
 *    workers when such an entry ended (database_hooks.c); a COMMIT
 *    PREPARED is always flushed, so it is never an asynchronous commit.
 *  - A restart (or a crash's reinitialization, or a promotion) empties
 *    the registry, but brings the prepared transactions back. Before its
 *    listing a read asks for prepared transactions of its database that
 *    have no entry (outbox_unregistered_prepared: in the ProcArray, not
 *    named by a backend preparing it, not in an entry; every prepare is
 *    registered, events or not, so only a restart leaves any) and
 *    registers the lowest id prepared.c finds for each in the outbox.
 *    Nothing reads past their ids before: a worker's cursor starts at 0.
 * With max_prepared_transactions = 0 there are no such entries, and a
 * read looks at none.
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
	int			procno = COMPAT_MY_PROC_NUMBER;

	if (procno < 0 || procno >= registry->nprocs)
		elog(ERROR, "outbox: process number %d outside the registry", procno);
	return &registry->entries[procno];
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

/* The entries of prepared transactions: their dummy PGPROCs' numbers. */
static inline int
first_prepared_entry(void)
{
	return registry->nprocs - max_prepared_xacts;
}

/*
 * Allocates an outbox id and, on the transaction's first, registers it
 * before it can be seen anywhere (see "the read floor" above).
 */
int64
outbox_next_id_registered(Oid sequence)
{
	int64		id;

	if (registry == NULL || registered_this_xact)
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
	if (registry == NULL)
		return;
	acquire_registry_shared();
	register_inflight_id(min_id);
	outbox_rewind_database_slots(MyDatabaseId);
	LWLockRelease(registry_lock);
}

/*
 * At pre-commit of a transaction that sent events and will not wait for
 * its commit to be flushed.
 */
void
outbox_note_async_commit(void)
{
	if (registry == NULL || !registered_this_xact)
		return;
	pg_atomic_write_u32(&my_entry()->async_commit, 1);
	/* before the commit record and its visibility */
	pg_memory_barrier();
}

/*
 * At pre-prepare of every transaction, events or not (see "prepared
 * transactions" above): before its prepared transaction is in the ProcArray.
 */
void
outbox_note_preparing(void)
{
	if (registry == NULL)
		return;
	preparing_xid = GetTopTransactionIdIfAny();
	pg_atomic_write_u32(&my_entry()->xid, preparing_xid);
	pg_memory_barrier();
}

/*
 * At prepare: this transaction's lowest id moves to its prepared
 * transaction's entry, in one step as a read's listing sees it.
 */
void
outbox_move_to_prepared(void)
{
	RegistryEntry *mine;
	RegistryEntry *prepared;
	int			procno;

	if (registry == NULL || !TransactionIdIsValid(preparing_xid))
	{
		outbox_clear_inflight();
		return;
	}
	procno = compat_TwoPhaseGetDummyProc(preparing_xid, false) - ProcGlobal->allProcs;
	if (procno < first_prepared_entry() || procno >= registry->nprocs)
	{
		/* too late for an error: the transaction is prepared */
		elog(WARNING, "outbox: prepared transaction's process number %d outside the registry",
			 procno);
		outbox_clear_inflight();
		return;
	}
	mine = my_entry();
	prepared = &registry->entries[procno];
	acquire_registry_shared();
	prepared->dboid = MyDatabaseId;
	pg_atomic_write_u64(&prepared->lowest_id,
						registered_this_xact ? pg_atomic_read_u64(&mine->lowest_id) : 0);
	pg_atomic_write_u32(&prepared->xid, preparing_xid);
	/* the backend's name of it goes last: see outbox_unregistered_prepared */
	pg_write_barrier();
	pg_atomic_write_u64(&mine->lowest_id, 0);
	pg_atomic_write_u32(&mine->xid, InvalidTransactionId);
	LWLockRelease(registry_lock);
	registered_this_xact = false;
	preparing_xid = InvalidTransactionId;
}

void
outbox_clear_inflight(void)
{
	if (registry != NULL && registered_this_xact)
	{
		RegistryEntry *entry = my_entry();

		if (pg_atomic_read_u32(&entry->async_commit) != 0)
		{
			/* counted (a full barrier) before it looks ended */
			pg_atomic_fetch_add_u64(&registry->async_ended, 1);
			pg_atomic_write_u32(&entry->async_commit, 0);
		}
		pg_atomic_write_u64(&entry->lowest_id, 0);
	}
	if (registry != NULL && TransactionIdIsValid(preparing_xid))
		pg_atomic_write_u32(&my_entry()->xid, InvalidTransactionId);
	registered_this_xact = false;
	preparing_xid = InvalidTransactionId;
}

/* Whether a backend is preparing xid, its id still in its own entry. */
static bool
being_prepared(TransactionId xid)
{
	for (int i = 0; i < first_prepared_entry(); i++)
		if (pg_atomic_read_u32(&registry->entries[i].xid) == xid)
			return true;
	return false;
}

/*
 * Whether the prepared transaction xid, at dummy PGPROC i, is known: in
 * its entry, or still in the entry of the backend preparing it. The entry
 * is read again after the backends', which clear their name of it only
 * after writing the entry, so a transaction moving between the two is not
 * taken for one a restart left.
 */
static bool
prepared_registered(int i, TransactionId xid)
{
	if (pg_atomic_read_u32(&registry->entries[i].xid) == xid)
		return true;
	if (being_prepared(xid))
		return true;
	pg_read_barrier();
	return pg_atomic_read_u32(&registry->entries[i].xid) == xid;
}

/*
 * The prepared transactions of this database the registry has no entry
 * for (see "prepared transactions" above); xids has room for
 * max_prepared_transactions. Returns how many.
 */
int
outbox_unregistered_prepared(TransactionId *xids)
{
	int			n = 0;

	if (registry == NULL)
		return 0;
	for (int i = first_prepared_entry(); i < registry->nprocs; i++)
	{
		volatile PGPROC *proc = &ProcGlobal->allProcs[i];
		TransactionId xid = proc->xid;

		if (!TransactionIdIsValid(xid) || proc->databaseId != MyDatabaseId ||
			prepared_registered(i, xid))
			continue;
		if (TransactionIdIsInProgress(xid))
			xids[n++] = xid;
	}
	return n;
}

/*
 * Registers lowest_id (0: none) as the lowest id of the prepared
 * transaction xid of this database, unless it is registered already.
 */
void
outbox_register_prepared(TransactionId xid, int64 lowest_id)
{
	if (registry == NULL)
		return;
	LWLockAcquire(registry_gate, LW_EXCLUSIVE);
	LWLockAcquire(registry_lock, LW_EXCLUSIVE);
	for (int i = first_prepared_entry(); i < registry->nprocs; i++)
	{
		RegistryEntry *entry = &registry->entries[i];

		if (ProcGlobal->allProcs[i].xid != xid ||
			pg_atomic_read_u32(&entry->xid) == xid)
			continue;
		entry->dboid = MyDatabaseId;
		pg_atomic_write_u64(&entry->lowest_id, (uint64) lowest_id);
		pg_atomic_write_u32(&entry->xid, xid);
	}
	LWLockRelease(registry_lock);
	LWLockRelease(registry_gate);
}

/*
 * Whether the prepared transaction of entry i has ended; if so, its entry
 * no longer holds an open id. Called with the registry lock held exclusively.
 */
static bool
prepared_ended(int i)
{
	RegistryEntry *entry = &registry->entries[i];

	if (TransactionIdIsInProgress(pg_atomic_read_u32(&entry->xid)))
		return false;
	pg_atomic_write_u64(&entry->lowest_id, 0);
	return true;
}

/*
 * After COMMIT PREPARED: whether a prepared transaction of this database
 * that sent events has ended, so its shards have events to read.
 */
bool
outbox_prepared_events_ended(void)
{
	if (registry == NULL)
		return false;
	for (int i = first_prepared_entry(); i < registry->nprocs; i++)
	{
		RegistryEntry *entry = &registry->entries[i];

		if (entry->dboid == MyDatabaseId &&
			pg_atomic_read_u64(&entry->lowest_id) != 0 &&
			!TransactionIdIsInProgress(pg_atomic_read_u32(&entry->xid)))
			return true;
	}
	return false;
}

/* After the snapshot: see "asynchronous commits" above. */
static void
read_async_commits(OutboxAsyncCommits *async)
{
	async->under_way = false;
	pg_read_barrier();
	for (int i = 0; i < registry->nprocs; i++)
	{
		if (registry->entries[i].dboid == MyDatabaseId &&
			pg_atomic_read_u32(&registry->entries[i].async_commit) != 0)
		{
			async->under_way = true;
			break;
		}
	}
	pg_read_barrier();
	async->ended = pg_atomic_read_u64(&registry->async_ended);
}

/*
 * Fills ids (room for every entry) with the lowest ids of this database's
 * open transactions; returns how many.
 */
static int
collect_open_ids(int64 *ids)
{
	int			n = 0;

	for (int i = 0; i < registry->nprocs; i++)
	{
		uint64		id = pg_atomic_read_u64(&registry->entries[i].lowest_id);

		if (id == 0 || id > (uint64) PG_INT64_MAX ||
			registry->entries[i].dboid != MyDatabaseId)
			continue;
		if (i >= first_prepared_entry() && prepared_ended(i))
			continue;
		ids[n++] = (int64) id;
	}
	return n;
}

/*
 * Takes the snapshot a worker reads its batch with, and returns the lowest
 * id of each transaction of this database still open at that moment, as
 * registered (palloc'd, in no order; the lowest is the floor), with the
 * worker's rewind generation and what the snapshot may hold of
 * asynchronous commits. Must be called in a transaction; pushes the
 * snapshot as active. The gate first, so that registrants cannot keep the
 * registry lock from us.
 */
int
outbox_take_snapshot_open_ids(int slot, uint64 *rewind_generation, OutboxAsyncCommits *async,
							  int64 **open_ids)
{
	int			n;

	*open_ids = palloc(sizeof(int64) * registry->nprocs);
	LWLockAcquire(registry_gate, LW_EXCLUSIVE);
	LWLockAcquire(registry_lock, LW_EXCLUSIVE);
	n = collect_open_ids(*open_ids);
	*rewind_generation = outbox_slot_rewind_generation(slot);
	PushActiveSnapshot(GetTransactionSnapshot());
	LWLockRelease(registry_lock);
	LWLockRelease(registry_gate);
	read_async_commits(async);
	return n;
}

/*
 * The same ids without the lock or a snapshot, for a look that may be a
 * moment late (the lag look): an entry cleared just after is seen next
 * time.
 */
int
outbox_open_ids_now(int64 **open_ids)
{
	*open_ids = palloc(sizeof(int64) * registry->nprocs);
	return collect_open_ids(*open_ids);
}

/*
 * Of the ids a worker kept from an earlier list (known), the lowest no
 * longer in a later one (open), both ascending: its transaction ended
 * before the later list was taken (PG_INT64_MAX if none did).
 */
int64
outbox_lowest_ended(const int64 *known, int nknown, const int64 *open, int nopen)
{
	int			j = 0;

	for (int i = 0; i < nknown; i++)
	{
		while (j < nopen && open[j] < known[i])
			j++;
		if (j == nopen || open[j] != known[i])
			return known[i];
	}
	return PG_INT64_MAX;
}
