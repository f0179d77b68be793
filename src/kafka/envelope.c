/*
 * envelope.c
 *		Encodes an event as the protobuf message outbox.v1.Event
 *		(proto/outbox.proto), the Kafka value in 'envelope' format.
 *
 * The header entries are reused from one event to the next and only grow.
 * The output is allocated in the caller's memory context (the batch's), so
 * librdkafka can send it without a copy of its own: a worker then holds
 * each value once.
 */
#include "kafka/envelope.h"

#include "utils/memutils.h"

#include "kafka/outbox.pb-c.h"

static char *source_database = NULL;
static Outbox__V1__Event__HeadersEntry *entries = NULL;
static Outbox__V1__Event__HeadersEntry **entry_pointers = NULL;
static int	entries_size = 0;

void
outbox_envelope_init(const char *database)
{
	source_database = MemoryContextStrdup(TopMemoryContext, database);
}

static void
reserve_entries(int n)
{
	if (n <= entries_size)
		return;
	if (entries != NULL)
	{
		pfree(entries);
		pfree(entry_pointers);
	}
	entries_size = Max(n, 2 * entries_size);
	entries = MemoryContextAlloc(TopMemoryContext, sizeof(*entries) * entries_size);
	entry_pointers = MemoryContextAlloc(TopMemoryContext, sizeof(*entry_pointers) * entries_size);
	for (int i = 0; i < entries_size; i++)
	{
		Outbox__V1__Event__HeadersEntry init = OUTBOX__V1__EVENT__HEADERS_ENTRY__INIT;

		entries[i] = init;
		entry_pointers[i] = &entries[i];
	}
}

/* Returns the encoded event, palloc'd in the current memory context. */
void *
outbox_envelope_encode_copy(const OutboxEvent *event, const char *instance,
							size_t *len)
{
	uint8_t    *buffer;
	Outbox__V1__Event message = OUTBOX__V1__EVENT__INIT;

	message.id = event->id;
	message.topic = event->topic;
	if (!event->key_isnull)
	{
		message.optional_key_case = OUTBOX__V1__EVENT__OPTIONAL_KEY_KEY;
		message.key.data = (uint8_t *) event->key;
		message.key.len = event->keylen;
	}
	message.payload.data = (uint8_t *) event->payload;
	message.payload.len = event->payloadlen;
	reserve_entries(event->nheaders);
	for (int i = 0; i < event->nheaders; i++)
	{
		entries[i].key = event->header_names[i];
		entries[i].value = event->header_values[i];
	}
	message.n_headers = event->nheaders;
	message.headers = entry_pointers;
	message.created_at_us = outbox_unix_microseconds(event->created_at);
	message.source_database = source_database;
	message.instance = (char *) instance;

	*len = outbox__v1__event__get_packed_size(&message);
	buffer = palloc_extended(*len, MCXT_ALLOC_HUGE);
	outbox__v1__event__pack(&message, buffer);
	return buffer;
}
