/*
 * worker.h
 *		The delivery worker of one (database, shard).
 */
#ifndef OUTBOX_WORKER_H
#define OUTBOX_WORKER_H

#include "postgres.h"

PGDLLEXPORT void outbox_worker_main(Datum main_arg);

/* "outbox "db" shard N", for log lines of the modules the worker runs */
extern const char *outbox_worker_name(void);

#endif							/* OUTBOX_WORKER_H */
