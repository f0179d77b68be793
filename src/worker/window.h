/*
 * window.h
 *		The worker's in-flight window: the events it read and produced and
 *		has not settled yet, bounded by outbox.window_size events and
 *		outbox.window_bytes bytes. It owns their memory and their counters.
 */
#ifndef OUTBOX_WINDOW_H
#define OUTBOX_WINDOW_H

#include "kafka/producer.h"
#include "table/queue.h"

typedef struct OutboxWindow OutboxWindow;

extern OutboxWindow *outbox_window_create(void);

/* Room left for a read: events, and bytes of payloads and keys. */
extern int	outbox_window_room(OutboxWindow *window, int64 *bytes);

/*
 * A batch to read into, with its own memory (switch to it while reading);
 * one not added to the window is freed by the next call.
 */
extern OutboxBatch *outbox_window_new_batch(OutboxWindow *window, MemoryContext *context);

/*
 * Takes a batch in before it is produced (its events are "skipped" until
 * produced), or frees one that has nothing to hold.
 */
extern void outbox_window_add(OutboxWindow *window, OutboxBatch *batch);
extern void outbox_window_discard(OutboxWindow *window, OutboxBatch *batch);

/* An event of the window was produced, or refused at once. */
extern void outbox_window_produced(OutboxWindow *window, OutboxEvent *event);
extern void outbox_window_refused(OutboxWindow *window, OutboxEvent *event);

/* Counts what the producer's delivery reports said. */
extern void outbox_window_reported(OutboxWindow *window, const OutboxReports *reports);

/*
 * Events with no report yet are read again: their fate is unknown. The
 * counters are made again from the events' outcomes (reports served where
 * the window did not hear of them, as in the producer's destroy, count).
 */
extern void outbox_window_abandon(OutboxWindow *window, const char *why);

extern void outbox_window_withdraw_delivered(OutboxWindow *window, const char *why);

extern int	outbox_window_in_flight(OutboxWindow *window);

/* When the oldest event in flight was produced, 0 if none is. */
extern TimestampTz outbox_window_oldest_in_flight(OutboxWindow *window);
extern int	outbox_window_failed(OutboxWindow *window);
extern bool outbox_window_failed_unproven_only(OutboxWindow *window);
extern bool outbox_window_is_empty(OutboxWindow *window);

/* Events with an outcome, not settled yet, and since when the oldest waits. */
extern int	outbox_window_unsettled(OutboxWindow *window, TimestampTz *since);

/*
 * The events to settle now (palloc'd list, in id order per read), all
 * read from one extension, *extension_oid (one transaction settles the
 * events of one extension; those of another wait for the next list).
 */
extern int	outbox_window_to_settle(OutboxWindow *window, OutboxEvent ***events,
									Oid *extension_oid);

/*
 * Marks a list settled by a transaction ending at lsn: its events leave
 * the window once that commit is flushed (outbox_window_room flushes it
 * when the window is full), so a crash re-sends at most the window.
 */
extern void outbox_window_settled(OutboxWindow *window, OutboxEvent **events,
								  int nevents, XLogRecPtr lsn);

/* The lowest id the window holds unsettled, PG_INT64_MAX if none. */
extern int64 outbox_window_lowest_id(OutboxWindow *window);

/*
 * The ids of the unsettled events read from extension_oid, at or above
 * from_id (palloc'd, in no order): a read pinned below them leaves them
 * out (queue.c), or they go out twice.
 */
extern int	outbox_window_unsettled_ids(OutboxWindow *window, Oid extension_oid,
										int64 from_id, int64 **ids);

#endif							/* OUTBOX_WINDOW_H */
