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
 * What an event may carry besides what outbox_send() always took: the
 * partition the sender chose (-1: none), and the record's time when it is
 * not the transaction's start (created_at_set).
 */
typedef struct OutboxSendExtras
{
	int32		partition;
	bool		created_at_set;
	TimestampTz created_at;
} OutboxSendExtras;

/*
 * Stores one event. fcinfo is the calling SQL function's: the outbox of its
 * schema is used. payload may be NULL only with a key (a tombstone);
 * headers may be NULL; extras may be NULL (none).
 */
extern int64 outbox_send_event(FunctionCallInfo fcinfo, text *topic,
							   bytea *payload, char payload_type,
							   const char *key, int keylen, bool key_isnull,
							   Jsonb *headers, const OutboxSendExtras *extras);

/* the transaction callbacks that register ids and wake the shards */
extern void outbox_install_send_callbacks(void);

#endif							/* OUTBOX_SEND_H */
