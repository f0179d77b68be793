/*
 * solo.h
 *		Events to send alone, after Kafka refused the record batch they
 *		were in for its size (solo.c).
 */
#ifndef OUTBOX_SOLO_H
#define OUTBOX_SOLO_H

#include "postgres.h"

extern void outbox_solo_remember(int64 id);
extern bool outbox_solo_wanted(int64 id);
extern void outbox_solo_forget(int64 id);

#endif							/* OUTBOX_SOLO_H */
