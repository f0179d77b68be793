/*
 * slots.h
 *		The delivery workers' slots in shared memory: which (database, shard)
 *		each worker serves, who it is, and where it is in its life. The one
 *		place that says whether a shard's worker is starting, running,
 *		delivering or gone.
 */
#ifndef OUTBOX_SLOTS_H
#define OUTBOX_SLOTS_H

#include "postgres.h"

#include "datatype/timestamp.h"

/*
 * A slot's life: FREE -> STARTING (the launcher reserved it) -> RUNNING
 * (the worker attached) -> DELIVERING or NO_EXTENSION (its look for the
 * extension) -> EXITED or FAILED (it left; NO_EXTENSION stays) -> FREE
 * (the launcher took the news). A worker that never attaches: STARTING ->
 * FREE. A worker with nothing to deliver for outbox.worker_idle_timeout:
 * DELIVERING -> SLEEPING (it exits, the slot stays its shard's) -> FREE
 * once a commit wants the shard delivered, and the launcher starts it.
 */
typedef enum OutboxSlotState
{
	SLOT_FREE,
	SLOT_STARTING,				/* registered by the launcher */
	SLOT_RUNNING,				/* attached, extension not looked for yet */
	SLOT_DELIVERING,			/* found the extension */
	SLOT_NO_EXTENSION,			/* found none and exited */
	SLOT_EXITED,				/* stopped (SIGTERM) */
	SLOT_FAILED,				/* exited with an error */
	SLOT_SLEEPING				/* left idle; a commit wakes the launcher */
} OutboxSlotState;

typedef struct OutboxWorkerInfo
{
	Oid			dboid;
	int			shard;
	int			pid;			/* 0 while no process runs */
	OutboxSlotState state;
	TimestampTz since;			/* of the state */
	/*
	 * Of the reservation. A worker of an older one must not touch the slot:
	 * a launcher started again has no handle of the workers registered
	 * before, gives their slots up only after a while, and may have given
	 * the slot to another shard when such a late worker comes.
	 */
	uint32		generation;
} OutboxWorkerInfo;

/* shared memory: module.c's hooks reserve the size, then set it up */
extern Size outbox_slots_shmem_size(void);
extern void outbox_slots_shmem_startup(void);
extern bool outbox_slots_available(void);

/* anyone */
extern int	outbox_worker_slot_count(void);
extern OutboxWorkerInfo outbox_worker_info(int i);
extern int	outbox_shard_worker(Oid dboid, int shard, OutboxSlotState *state);
extern void outbox_wake_shards(uint64 shard_mask);

/* the launcher */
extern uint32 outbox_reserve_worker_slot(int i, Oid dboid, int shard);
extern bool outbox_release_worker_slot(int i, uint32 generation, OutboxSlotState state);
extern bool outbox_sleeping_slot_wanted(int i);

/* the worker of a slot */
extern bool outbox_worker_attach(int i, uint32 generation, Oid *dboid, int *shard);
extern void outbox_worker_found_extension(int i, bool found, TimestampTz looked_at);
extern OutboxSlotState outbox_my_slot_state(void);
extern void outbox_worker_fall_asleep(void);
extern void outbox_worker_stay_awake(void);

/* the rewind generations the id registry bumps (registry.c) */
extern void outbox_rewind_database_slots(Oid dboid);
extern uint64 outbox_slot_rewind_generation(int i);

#endif							/* OUTBOX_SLOTS_H */
