/*
 * sleep.h
 *		A worker with nothing to deliver leaves, and its next commit brings
 *		one back.
 */
#ifndef OUTBOX_SLEEP_H
#define OUTBOX_SLEEP_H

#include "postgres.h"

#include "datatype/timestamp.h"

extern TimestampTz outbox_sleep_due(TimestampTz idle_since);
extern bool outbox_fall_asleep(int shard);

#endif							/* OUTBOX_SLEEP_H */
