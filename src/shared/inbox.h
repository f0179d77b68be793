/*
 * inbox.h
 *		The launcher's inbox in shared memory: which process the launcher
 *		is, so others can wake it, and the databases it was asked to look
 *		at again.
 */
#ifndef OUTBOX_INBOX_H
#define OUTBOX_INBOX_H

#include "postgres.h"

/* shared memory: module.c's hooks reserve the size, then set it up */
extern Size outbox_inbox_shmem_size(void);
extern void outbox_inbox_shmem_startup(void);

/* anyone */
extern void outbox_request_launcher(Oid dboid);
extern void outbox_wake_launcher(void);

/* the launcher */
extern void outbox_launcher_attach(void);
extern int	outbox_take_launcher_requests(Oid *dboids);
extern int	outbox_max_launcher_requests(void);

#endif							/* OUTBOX_INBOX_H */
