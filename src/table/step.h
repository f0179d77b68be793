/*
 * step.h
 *		The worker's SQL steps over the extension's tables, for the read and
 *		settle (queue.c) and exactly-once's recovery (progress.c) alike: the
 *		transaction each step runs in, the extension and its instance as a
 *		step finds them, and the delete by shard and id.
 */
#ifndef OUTBOX_STEP_H
#define OUTBOX_STEP_H

#include "postgres.h"

#include "access/xlogdefs.h"
#include "utils/array.h"

/*
 * The worker runs as a superuser in a database whose owner may plant
 * functions and operators: besides the search_path the worker forces
 * (pg_catalog, pg_temp), every function and operator of its statements is
 * qualified. OPERATOR() binds like any other operator, so it is
 * parenthesised.
 */
#define EQ " OPERATOR(pg_catalog.=) "

/* The one row of outbox_instance, as a step read it. */
typedef struct OutboxInstance
{
	char	   *id;
	char	   *previous_id;	/* NULL if it replaced none */
	XLogRecPtr	previous_until; /* this server's WAL holds previous_id's to here */
} OutboxInstance;

/* The transaction bracket every step runs in, its activity shown. */
extern void outbox_step_begin(const char *activity);
extern void outbox_step_end(MemoryContext caller_context);

/*
 * Inside a step: the extension's oid and schema (unquoted); false if it is
 * absent. An ERROR if its version is not the library's.
 */
extern bool outbox_step_find_extension(Oid *oid, char **schema);

/*
 * Inside a step: outbox_instance of the extension in schema (quoted),
 * replaced first when rotate and the server moved; true if it replaced it.
 */
extern bool outbox_step_instance(const char *schema, bool rotate, OutboxInstance *instance);

/*
 * "DELETE FROM schema.outbox WHERE shard = $1 AND id = ANY($2)" and then
 * more: $1 integer, $2 bigint[] (outbox_int8_array).
 */
extern char *outbox_delete_by_id_sql(const char *schema, const char *more);
extern ArrayType *outbox_int8_array(const int64 *values, int n);

#endif							/* OUTBOX_STEP_H */
