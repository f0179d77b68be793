/*
 * pauses.h
 *		Databases whose workers stay away while DDL needs them free of
 *		connections (DROP DATABASE, ALTER DATABASE ... RENAME, ...), in
 *		shared memory.
 */
#ifndef OUTBOX_PAUSES_H
#define OUTBOX_PAUSES_H

#include "postgres.h"

/* shared memory: module.c's hooks reserve the size, then set it up */
extern Size outbox_pauses_shmem_size(void);
extern void outbox_pauses_shmem_startup(void);

extern bool outbox_pause_database(Oid dboid);
extern void outbox_resume_database(Oid dboid);
extern bool outbox_database_paused(Oid dboid);

#endif							/* OUTBOX_PAUSES_H */
