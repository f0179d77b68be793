/*
 * window.c
 *		The in-flight window of a worker: every event it read and produced
 *		and has not settled, as a list of reads (batches) in the order they
 *		were read, each in its own memory context, freed once all its
 *		events are settled. The window alone counts what is in flight,
 *		reported and unsettled; the producer only writes each event's
 *		outcome, and the worker asks the window what to do next.
 *
 * Settled events stay counted until the commit that settled them is
 * flushed, so that a crash re-sends at most outbox.window_size events.
 */
#include "worker/window.h"
#include "settings.h"
#include "shared/stats.h"

#include "access/xlog.h"
#include "lib/ilist.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define FLUSHED_UP_TO() GetFlushRecPtr(NULL)

/* How often the range of ids in the window is published while it changes. */
#define PUBLISH_INTERVAL_MS 100

typedef struct Chunk
{
	dlist_node	node;
	MemoryContext context;		/* the batch's events and records */
	OutboxBatch batch;
	int			settled;		/* events of the batch settled */
	int			first_unsettled;	/* no event before it is unsettled */
	int64		ids_up_to;		/* no id of this read or an earlier one in
								 * the window is above it */
} Chunk;

struct OutboxWindow
{
	MemoryContext context;
	dlist_head	chunks;			/* in the order they were read */
	int			events;			/* not settled */
	int64		bytes;			/* what they hold (OutboxEvent.size) */
	int			in_flight;		/* produced, no report yet */
	int			reported;		/* with an outcome, not settled */
	int			failed;			/* of those, undelivered */
	TimestampTz reported_since;	/* when reported went above 0 */
	int64		max_id;			/* highest id taken in */
	int			unflushed;		/* settled by a commit not yet flushed */
	XLogRecPtr	unflushed_lsn;
	Chunk	   *pending;		/* handed out, not yet added or discarded */
	bool		published;		/* a range was published, not "none" */
	TimestampTz published_at;
};

static Chunk *
chunk_of(OutboxBatch *batch)
{
	return (Chunk *) ((char *) batch - offsetof(Chunk, batch));
}

static int64
event_bytes(const OutboxEvent *event)
{
	return event->size;
}

OutboxWindow *
outbox_window_create(void)
{
	MemoryContext context = AllocSetContextCreate(TopMemoryContext, "outbox window",
												  ALLOCSET_SMALL_SIZES);
	OutboxWindow *window = MemoryContextAllocZero(context, sizeof(OutboxWindow));

	window->context = context;
	dlist_init(&window->chunks);
	return window;
}

static void
forget_flushed(OutboxWindow *window)
{
	if (window->unflushed > 0 && FLUSHED_UP_TO() >= window->unflushed_lsn)
		window->unflushed = 0;
}

int
outbox_window_room(OutboxWindow *window, int64 *bytes)
{
	int			events;

	forget_flushed(window);
	events = outbox_window_size - window->events - window->unflushed;
	if (events <= 0 && window->unflushed > 0)
	{
		XLogFlush(window->unflushed_lsn);
		window->unflushed = 0;
		events = outbox_window_size - window->events;
	}
	*bytes = (int64) outbox_window_bytes - window->bytes;
	/* an empty window takes one event of any size */
	if (window->events == 0)
		*bytes = Max(*bytes, 1);
	if (*bytes <= 0)
		return 0;
	return Max(events, 0);
}

OutboxBatch *
outbox_window_new_batch(OutboxWindow *window, MemoryContext *context)
{
	Chunk	   *chunk;

	/* left over by an error between reading and adding */
	if (window->pending != NULL)
		outbox_window_discard(window, &window->pending->batch);
	chunk = MemoryContextAllocZero(window->context, sizeof(Chunk));
	window->pending = chunk;

	/* most reads bring a few events; a big one grows its blocks */
	chunk->context = AllocSetContextCreate(window->context, "outbox batch",
										   ALLOCSET_START_SMALL_SIZES);
	*context = chunk->context;
	return &chunk->batch;
}

void
outbox_window_discard(OutboxWindow *window, OutboxBatch *batch)
{
	Chunk	   *chunk = chunk_of(batch);

	Assert(chunk == window->pending);
	window->pending = NULL;
	MemoryContextDelete(chunk->context);
	pfree(chunk);
}

static void
count_reported(OutboxWindow *window, int reported, int failed)
{
	if (reported > 0 && window->reported == 0)
		window->reported_since = GetCurrentTimestamp();
	window->reported += reported;
	window->failed += failed;
}

/*
 * The window's range of ids, for outbox_explain(): when it empties or
 * fills, and otherwise at most every PUBLISH_INTERVAL_MS (finding the
 * lowest id walks the reads).
 */
static void
publish_range(OutboxWindow *window)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		lowest;

	if (window->events > 0 && window->published &&
		!TimestampDifferenceExceeds(window->published_at, now, PUBLISH_INTERVAL_MS))
		return;
	lowest = outbox_window_lowest_id(window);
	outbox_stats_in_flight(lowest == PG_INT64_MAX ? 0 : lowest, window->max_id);
	window->published = window->events > 0;
	window->published_at = now;
}

void
outbox_window_add(OutboxWindow *window, OutboxBatch *batch)
{
	Chunk	   *chunk = chunk_of(batch);

	Assert(chunk == window->pending);
	window->pending = NULL;
	dlist_push_tail(&window->chunks, &chunk->node);
	window->events += batch->nevents;
	window->bytes += batch->bytes;
	count_reported(window, batch->nevents, 0);
	if (batch->nevents > 0)
		window->max_id = Max(window->max_id, batch->events[batch->nevents - 1].id);
	chunk->ids_up_to = window->max_id;
	publish_range(window);
}

void
outbox_window_produced(OutboxWindow *window, OutboxEvent *event)
{
	Assert(event->outcome == EVENT_IN_FLIGHT);
	window->reported--;
	window->in_flight++;
}

/*
 * Reads are produced in the order they were read, so the first event in
 * flight is the oldest: one sent alone later (solo.c) went out with
 * nothing else in flight, and everything in flight since is younger.
 */
TimestampTz
outbox_window_oldest_in_flight(OutboxWindow *window)
{
	dlist_iter	iter;

	if (window->in_flight == 0)
		return 0;
	dlist_foreach(iter, &window->chunks)
	{
		Chunk	   *chunk = dlist_container(Chunk, node, iter.cur);

		for (int i = chunk->first_unsettled; i < chunk->batch.nevents; i++)
			if (chunk->batch.events[i].outcome == EVENT_IN_FLIGHT)
				return chunk->batch.events[i].produced_at;
	}
	return 0;
}

void
outbox_window_refused(OutboxWindow *window, OutboxEvent *event)
{
	Assert(outbox_event_undelivered(event));
	window->failed++;
}

void
outbox_window_reported(OutboxWindow *window, const OutboxReports *reports)
{
	window->in_flight -= reports->delivered + reports->failed;
	Assert(window->in_flight >= 0);
	count_reported(window, reports->delivered + reports->failed, reports->failed);
}

/*
 * The counters again from the events themselves: a producer destroyed
 * while events were in flight may have served reports the window never
 * heard of, and the counters must not drift (a negative failed count would
 * keep a rewind from ever ending).
 */
static void
recount(OutboxWindow *window)
{
	dlist_iter	iter;
	int			reported = 0;

	window->in_flight = 0;
	window->failed = 0;
	dlist_foreach(iter, &window->chunks)
	{
		Chunk	   *chunk = dlist_container(Chunk, node, iter.cur);

		for (int i = chunk->first_unsettled; i < chunk->batch.nevents; i++)
		{
			OutboxEvent *event = &chunk->batch.events[i];

			if (event->settled)
				continue;
			if (event->outcome == EVENT_IN_FLIGHT)
				window->in_flight++;
			else
				reported++;
			if (outbox_event_undelivered(event))
				window->failed++;
		}
	}
	if (reported > 0 && window->reported == 0)
		window->reported_since = GetCurrentTimestamp();
	window->reported = reported;
}

/*
 * The unsettled events whose outcome chosen says, withdrawn: read again,
 * the why recorded. Events before a chunk's first unsettled one are
 * settled, never in flight.
 */
static void
rewrite_outcomes(OutboxWindow *window, bool (*chosen) (const OutboxEvent *event),
				 const char *why)
{
	dlist_iter	iter;

	dlist_foreach(iter, &window->chunks)
	{
		Chunk	   *chunk = dlist_container(Chunk, node, iter.cur);

		for (int i = chunk->first_unsettled; i < chunk->batch.nevents; i++)
		{
			OutboxEvent *event = &chunk->batch.events[i];

			if (event->settled || !chosen(event))
				continue;
			event->outcome = EVENT_NOT_SENT;
			event->error = why;
		}
	}
	recount(window);
}

static bool
in_flight(const OutboxEvent *event)
{
	return event->outcome == EVENT_IN_FLIGHT;
}

static bool
delivered(const OutboxEvent *event)
{
	return event->outcome == EVENT_DELIVERED;
}

void
outbox_window_abandon(OutboxWindow *window, const char *why)
{
	rewrite_outcomes(window, in_flight, why);
}

/*
 * A Kafka transaction that did not commit (exactly-once mode): what it
 * delivered is not there for a read_committed consumer, so those events are
 * read again like withdrawn ones; failures keep their outcome.
 */
void
outbox_window_withdraw_delivered(OutboxWindow *window, const char *why)
{
	rewrite_outcomes(window, delivered, why);
}

int
outbox_window_in_flight(OutboxWindow *window)
{
	return window->in_flight;
}

int
outbox_window_failed(OutboxWindow *window)
{
	return window->failed;
}

/*
 * Whether every failure in the window is an acknowledgement without an
 * offset (events withdrawn by the worker aside): worker.c then leaves what
 * librdkafka holds to librdkafka.
 */
bool
outbox_window_failed_unproven_only(OutboxWindow *window)
{
	dlist_iter	iter;

	dlist_foreach(iter, &window->chunks)
	{
		Chunk	   *chunk = dlist_container(Chunk, node, iter.cur);

		for (int i = chunk->first_unsettled; i < chunk->batch.nevents; i++)
		{
			OutboxEvent *event = &chunk->batch.events[i];

			if (!event->settled && outbox_event_undelivered(event) &&
				event->outcome != EVENT_NOT_SENT && !event->unproven)
				return false;
		}
	}
	return true;
}

bool
outbox_window_is_empty(OutboxWindow *window)
{
	return window->events == 0;
}

int
outbox_window_unsettled(OutboxWindow *window, TimestampTz *since)
{
	*since = window->reported_since;
	return window->reported;
}

static bool
to_settle(const OutboxEvent *event)
{
	return !event->settled && event->outcome != EVENT_IN_FLIGHT;
}

int
outbox_window_to_settle(OutboxWindow *window, OutboxEvent ***events, Oid *extension_oid)
{
	/* every unsettled event at most: a bound that needs no counter right */
	OutboxEvent **list = palloc(sizeof(OutboxEvent *) * Max(window->events, 1));
	dlist_iter	iter;
	int			n = 0;

	*extension_oid = InvalidOid;
	dlist_foreach(iter, &window->chunks)
	{
		Chunk	   *chunk = dlist_container(Chunk, node, iter.cur);

		for (int i = chunk->first_unsettled; i < chunk->batch.nevents; i++)
		{
			OutboxEvent *event = &chunk->batch.events[i];

			if (!to_settle(event))
				continue;
			/* one transaction settles the events of one extension */
			if (*extension_oid == InvalidOid)
				*extension_oid = chunk->batch.extension_oid;
			if (chunk->batch.extension_oid != *extension_oid)
				break;
			list[n++] = event;
		}
	}
	*events = list;
	return n;
}

static void
free_chunk_if_done(Chunk *chunk)
{
	while (chunk->first_unsettled < chunk->batch.nevents &&
		   chunk->batch.events[chunk->first_unsettled].settled)
		chunk->first_unsettled++;
	if (chunk->settled < chunk->batch.nevents)
		return;
	dlist_delete(&chunk->node);
	MemoryContextDelete(chunk->context);
	pfree(chunk);
}

static void
mark_settled(OutboxWindow *window, OutboxEvent *event)
{
	event->settled = true;
	window->events--;
	window->bytes -= event_bytes(event);
	window->reported--;
	if (outbox_event_undelivered(event))
		window->failed--;
}

/*
 * The list is in the order outbox_window_to_settle() made it: chunk by
 * chunk, so one walk finds each event's chunk.
 */
void
outbox_window_settled(OutboxWindow *window, OutboxEvent **events, int nevents,
					  XLogRecPtr lsn)
{
	dlist_mutable_iter iter;
	int			i = 0;

	dlist_foreach_modify(iter, &window->chunks)
	{
		Chunk	   *chunk = dlist_container(Chunk, node, iter.cur);
		OutboxEvent *first = chunk->batch.events;
		OutboxEvent *end = first + chunk->batch.nevents;

		while (i < nevents && events[i] >= first && events[i] < end)
		{
			mark_settled(window, events[i++]);
			chunk->settled++;
		}
		free_chunk_if_done(chunk);
	}
	Assert(i == nevents);
	window->unflushed += nevents;
	window->unflushed_lsn = Max(window->unflushed_lsn, lsn);
	if (window->reported > 0)
		window->reported_since = GetCurrentTimestamp();
	if (window->events == 0)
		window->max_id = 0;
	publish_range(window);
}

/* The first event of a read at or above an id (its events are in id order). */
static int
first_at_or_above(const Chunk *chunk, int64 from_id)
{
	int			low = chunk->first_unsettled;
	int			high = chunk->batch.nevents;

	while (low < high)
	{
		int			mid = low + (high - low) / 2;

		if (chunk->batch.events[mid].id < from_id)
			low = mid + 1;
		else
			high = mid;
	}
	return low;
}

/*
 * From the newest read back, as far as a read whose bound says no earlier
 * one holds an id at or above from_id: a read that starts past the window
 * (the steady drain) looks at one read, not at every event in flight.
 */
int
outbox_window_unsettled_ids(OutboxWindow *window, Oid extension_oid, int64 from_id,
							int64 **ids)
{
	int64	   *list = palloc(sizeof(int64) * Max(window->events, 1));
	dlist_iter	iter;
	int			n = 0;

	dlist_reverse_foreach(iter, &window->chunks)
	{
		Chunk	   *chunk = dlist_container(Chunk, node, iter.cur);

		if (chunk->ids_up_to < from_id)
			break;
		if (chunk->batch.extension_oid != extension_oid)
			continue;
		for (int i = first_at_or_above(chunk, from_id); i < chunk->batch.nevents; i++)
			if (!chunk->batch.events[i].settled)
				list[n++] = chunk->batch.events[i].id;
	}
	*ids = list;
	return n;
}

int64
outbox_window_lowest_id(OutboxWindow *window)
{
	dlist_iter	iter;
	int64		lowest = PG_INT64_MAX;

	dlist_foreach(iter, &window->chunks)
	{
		Chunk	   *chunk = dlist_container(Chunk, node, iter.cur);

		if (chunk->first_unsettled < chunk->batch.nevents)
			lowest = Min(lowest, chunk->batch.events[chunk->first_unsettled].id);
	}
	return lowest;
}
