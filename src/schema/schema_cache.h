/*
 * schema_cache.h
 *		Schema texts compiled once per process (a JSON Schema's checks, an
 *		Avro schema), found again by their text: the send check and the
 *		worker's encoder are given the text the table holds.
 */
#ifndef OUTBOX_SCHEMA_SCHEMA_CACHE_H
#define OUTBOX_SCHEMA_SCHEMA_CACHE_H

#include "postgres.h"

/*
 * Compiles a text into what the cache keeps, allocated in
 * CurrentMemoryContext (dropped with the entry); NULL with *error
 * (palloc'd) when the text does not compile. release, if not NULL, frees
 * what the compiled form holds outside PostgreSQL's memory.
 */
typedef void *(*SchemaCompileFn) (const char *text, char **error);
typedef void (*SchemaReleaseFn) (void *compiled);

#define SCHEMA_CACHE_ENTRIES 32

typedef struct SchemaCacheEntry
{
	size_t		len;
	char	   *text;
	void	   *compiled;		/* NULL: the text did not compile */
	char	   *error;
	MemoryContext context;
} SchemaCacheEntry;

/* a cache; a static one, zeroed, with its name and functions set */
typedef struct SchemaCache
{
	const char *name;
	SchemaCompileFn compile;
	SchemaReleaseFn release;
	int			used;
	SchemaCacheEntry entries[SCHEMA_CACHE_ENTRIES];
} SchemaCache;

/*
 * The compiled form of text, compiled now if it is not in the cache; NULL
 * with *error when the text does not compile (remembered too).
 */
extern void *outbox_schema_cache_get(SchemaCache *cache, const char *text, char **error);

#endif							/* OUTBOX_SCHEMA_SCHEMA_CACHE_H */
