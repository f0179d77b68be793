/*
 * schema_resolution.h
 *		The topics' schemas as a worker holds them: outbox_topic_schema's
 *		rows, resolved at the Schema Registry (ids and schema texts written
 *		back to the rows), and the framing each event's value and key get.
 */
#ifndef OUTBOX_SCHEMA_RESOLUTION_H
#define OUTBOX_SCHEMA_RESOLUTION_H

#include "event.h"
#include "kafka/message.h"

/*
 * Loads the rows (a step of its own), resolves those that need it at the
 * registry, and writes what it found back. Before each produce, and about
 * once a second (a 'latest' version is looked up again when due).
 */
extern void outbox_schemas_refresh(void);

/*
 * The framing of an event's value and key. False if its topic's schema
 * is not resolved: the event's outcome says why (waiting for the registry,
 * or refused by it) and it is not produced.
 */
extern bool outbox_schemas_framing(OutboxEvent *event, OutboxFraming *value, OutboxFraming *key);

/* Whether a topic's events wait for a registry that cannot be reached. */
extern bool outbox_schemas_waiting(void);

#endif							/* OUTBOX_SCHEMA_RESOLUTION_H */
