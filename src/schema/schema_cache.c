/*
 * schema_cache.c
 *		The compiled schemas of a process, by text. Few schemas are in use
 *		at once: a full cache is emptied and fills again, which bounds the
 *		memory of a table whose schemas keep changing.
 */
#include "schema/schema_cache.h"

#include "utils/memutils.h"

static void
empty(SchemaCache *cache)
{
	for (int i = 0; i < cache->used; i++)
	{
		SchemaCacheEntry *entry = &cache->entries[i];

		if (entry->compiled && cache->release)
			cache->release(entry->compiled);
		MemoryContextDelete(entry->context);
	}
	cache->used = 0;
}

static SchemaCacheEntry *
compile(SchemaCache *cache, const char *text, size_t len)
{
	SchemaCacheEntry *entry;
	MemoryContext context;
	MemoryContext old;
	char	   *error = NULL;
	void	   *compiled;

	if (cache->used == SCHEMA_CACHE_ENTRIES)
		empty(cache);
	context = AllocSetContextCreate(CacheMemoryContext, "outbox compiled schema",
									ALLOCSET_SMALL_SIZES);
	MemoryContextSetIdentifier(context, cache->name);
	old = MemoryContextSwitchTo(context);
	PG_TRY();
	{
		compiled = cache->compile(text, &error);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(old);
		MemoryContextDelete(context);
		PG_RE_THROW();
	}
	PG_END_TRY();
	entry = &cache->entries[cache->used++];
	entry->len = len;
	entry->text = pstrdup(text);
	entry->compiled = compiled;
	entry->error = error;
	entry->context = context;
	MemoryContextSwitchTo(old);
	return entry;
}

/* found by length and bytes: cheaper than hashing the text at every call */
void *
outbox_schema_cache_get(SchemaCache *cache, const char *text, char **error)
{
	size_t		len = strlen(text);
	SchemaCacheEntry *entry = NULL;

	for (int i = 0; i < cache->used && entry == NULL; i++)
		if (cache->entries[i].len == len && memcmp(cache->entries[i].text, text, len) == 0)
			entry = &cache->entries[i];
	if (entry == NULL)
		entry = compile(cache, text, len);
	if (entry->compiled == NULL)
		*error = pstrdup(entry->error ? entry->error : "the schema does not compile");
	return entry->compiled;
}
