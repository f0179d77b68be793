/*
 * launcher.h
 *		The launcher: one background worker that starts the delivery
 *		workers of each database that has the extension.
 */
#ifndef OUTBOX_LAUNCHER_H
#define OUTBOX_LAUNCHER_H

#include "postgres.h"

extern void outbox_register_launcher(void);
PGDLLEXPORT void outbox_launcher_main(Datum main_arg);

#endif							/* OUTBOX_LAUNCHER_H */
