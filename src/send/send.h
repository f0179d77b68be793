/*
 * send.h
 *		The one way an event enters the outbox, for outbox_send() and the
 *		row-capture trigger: every check where the event enters, then the
 *		insert in the caller's transaction.
 */
#ifndef OUTBOX_SEND_H
#define OUTBOX_SEND_H

#include "event.h"

#include "fmgr.h"
#include "utils/jsonb.h"

/*
 * Stores one event. fcinfo is the calling SQL function's: the outbox of its
 * schema is used. payload may be NULL only with a key (a tombstone);
 * json is the payload as jsonb when the caller has it (for the schema
 * check), else NULL; headers may be NULL.
 */
extern int64 outbox_send_event(FunctionCallInfo fcinfo, text *topic,
							   bytea *payload, char payload_type, Jsonb *json,
							   const char *key, int keylen, bool key_isnull,
							   Jsonb *headers);

/* the transaction callbacks that register ids and wake the shards */
extern void outbox_install_send_callbacks(void);

#endif							/* OUTBOX_SEND_H */
