/*
 * tracing.h
 *		W3C trace context for events: the outbox.traceparent and
 *		outbox.tracestate settings, and a SQLCommenter comment in the
 *		statement that sent the event.
 */
#ifndef OUTBOX_TRACING_H
#define OUTBOX_TRACING_H

#include "postgres.h"

#include "utils/jsonb.h"

extern char *outbox_traceparent;
extern char *outbox_tracestate;

extern void outbox_define_tracing_settings(void);

/*
 * The event's headers with the trace context of the sending statement
 * added, unless they have a traceparent already; headers itself (maybe
 * NULL) when there is no trace context.
 */
extern Jsonb *outbox_add_trace_context(Jsonb *headers);

#endif							/* OUTBOX_TRACING_H */
