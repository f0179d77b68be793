/*
 * lag_alert.h
 *		The server-log alert when a shard falls behind.
 */
#ifndef OUTBOX_LAG_ALERT_H
#define OUTBOX_LAG_ALERT_H

#include "postgres.h"

/* who: the worker, for the log; called by its look around, once a second */
extern void outbox_check_lag(const char *who, int shard, int64 from_id, Oid from_extension);

#endif							/* OUTBOX_LAG_ALERT_H */
