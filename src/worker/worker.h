/*
 * worker.h
 *		The delivery worker of one (database, shard).
 */
#ifndef OUTBOX_WORKER_H
#define OUTBOX_WORKER_H

#include "postgres.h"

PGDLLEXPORT void outbox_worker_main(Datum main_arg);

#endif							/* OUTBOX_WORKER_H */
