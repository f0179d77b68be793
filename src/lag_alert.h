/*
 * lag_alert.h
 *		The server-log alert when a shard falls behind.
 */
#ifndef OUTBOX_LAG_ALERT_H
#define OUTBOX_LAG_ALERT_H

#include "postgres.h"

extern int64 outbox_check_lag(int shard, int64 from_id);

#endif							/* OUTBOX_LAG_ALERT_H */
