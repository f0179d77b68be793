/*
 * registry.h
 *		The id registry in shared memory: the lowest outbox id each open
 *		transaction may still commit, so a worker can start its read at the
 *		read floor (registry.c explains the protocol end to end).
 */
#ifndef OUTBOX_REGISTRY_H
#define OUTBOX_REGISTRY_H

#include "postgres.h"

/* shared memory: module.c's hooks reserve the size, then set it up */
extern Size outbox_registry_shmem_size(void);
extern void outbox_registry_request_locks(void);
extern void outbox_registry_shmem_startup(void);

/* backends sending events (send.c) */
extern int64 outbox_next_id_registered(Oid sequence);
extern void outbox_register_reinsert(int64 min_id);
extern void outbox_note_async_commit(void);
extern void outbox_clear_inflight(void);
extern void outbox_note_preparing(void);
extern void outbox_move_to_prepared(void);

/* prepared transactions: the read's recovery (prepared.c), COMMIT PREPARED */
extern int	outbox_unregistered_prepared(TransactionId *xids);
extern void outbox_register_prepared(TransactionId xid, int64 lowest_id);
extern bool outbox_prepared_events_ended(void);

/*
 * What a read's snapshot may hold of asynchronous commits of events (see
 * "asynchronous commits" in registry.c): how many had ended, server-wide,
 * and whether one of this database was under way.
 */
typedef struct OutboxAsyncCommits
{
	uint64		ended;
	bool		under_way;
} OutboxAsyncCommits;

/* workers reading their shard (queue.c), and their lag look */
extern int	outbox_take_snapshot_open_ids(int slot, uint64 *rewind_generation,
										  OutboxAsyncCommits *async, int64 **open_ids);
extern int	outbox_open_ids_now(int64 **open_ids);
extern int64 outbox_lowest_ended(const int64 *known, int nknown, const int64 *open, int nopen);

#endif							/* OUTBOX_REGISTRY_H */
