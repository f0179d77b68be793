/*
 * envelope.h
 *		The protobuf envelope (proto/outbox.proto), the default message
 *		value.
 */
#ifndef OUTBOX_ENVELOPE_H
#define OUTBOX_ENVELOPE_H

#include "event.h"

extern void outbox_envelope_init(const char *database);

/* The encoded event, palloc'd in the current memory context. */
extern void *outbox_envelope_encode_copy(const OutboxEvent *event,
										 const char *instance, size_t *len);

#endif							/* OUTBOX_ENVELOPE_H */
