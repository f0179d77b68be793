/*
 * schema_check.h
 *		The Schema Registry's check in the sender's transaction: an event's
 *		value and key checked against their topic's schemas
 *		(outbox_topic_schema) before the row is written.
 */
#ifndef OUTBOX_SEND_SCHEMA_CHECK_H
#define OUTBOX_SEND_SCHEMA_CHECK_H

#include "postgres.h"

#include "utils/jsonb.h"

/*
 * Raises an error if the payload (NULL: a tombstone, not checked) or the key
 * does not fit its topic's schema, or cannot be checked yet. json is the
 * payload as jsonb when the caller has it, else NULL. topic is checked
 * already (send.c).
 */
extern void outbox_check_schemas(text *topic, bytea *payload, char payload_type, Jsonb *json,
								 const char *key, int keylen, bool key_isnull);

#endif							/* OUTBOX_SEND_SCHEMA_CHECK_H */
