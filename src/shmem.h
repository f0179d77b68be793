/*
 * shmem.h
 *		State shared by the backends, the launcher and the workers: worker
 *		slots, the launcher's inbox, database pauses for DDL, and the
 *		registry of ids still in open transactions.
 */
#ifndef OUTBOX_SHMEM_H
#define OUTBOX_SHMEM_H

#include "postgres.h"

#include "datatype/timestamp.h"

typedef enum OutboxSlotState
{
	SLOT_FREE,
	SLOT_STARTING,				/* registered by the launcher */
	SLOT_RUNNING,				/* attached, extension not looked for yet */
	SLOT_DELIVERING,			/* found the extension */
	SLOT_NO_EXTENSION,			/* found none and exited */
	SLOT_EXITED,				/* stopped (SIGTERM) */
	SLOT_FAILED					/* exited with an error */
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

extern bool outbox_shmem_available(void);
extern void outbox_shmem_install_hooks(void);

/* the id registry (backends register, workers read the floor) */
extern int64 outbox_next_id_registered(Oid sequence);
extern void outbox_register_reinsert(int64 min_id);
extern void outbox_clear_inflight(void);
extern int64 outbox_take_snapshot_floor(int slot, uint64 *rewind_generation);
extern void outbox_wake_shards(uint64 shard_mask);

/* worker slots */
extern int	outbox_worker_slot_count(void);
extern OutboxWorkerInfo outbox_worker_info(int i);
extern uint32 outbox_reserve_worker_slot(int i, Oid dboid, int shard);
extern bool outbox_release_worker_slot(int i, uint32 generation, OutboxSlotState state);
extern bool outbox_worker_attach(int i, uint32 generation, Oid *dboid, int *shard);
extern void outbox_worker_found_extension(int i, bool found, TimestampTz looked_at);

/* the launcher's inbox and database pauses */
extern void outbox_launcher_attach(void);
extern void outbox_request_launcher(Oid dboid);
extern void outbox_wake_launcher(void);
extern int	outbox_take_launcher_requests(Oid *dboids);
extern int	outbox_max_launcher_requests(void);
extern bool outbox_pause_database(Oid dboid);
extern void outbox_resume_database(Oid dboid);
extern bool outbox_database_paused(Oid dboid);

#endif							/* OUTBOX_SHMEM_H */
