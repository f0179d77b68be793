/*
 * outbox_table.h
 *		The outbox table's columns as the C code knows them: their order,
 *		names and types, once. The install script (sql/outbox.sql)
 *		creates the table in this order; outbox_send() writes its rows by
 *		it, and the worker's read selects its columns by name from it; both
 *		check a table's columns against it first (outbox_table.c).
 */
#ifndef OUTBOX_TABLE_H
#define OUTBOX_TABLE_H

#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/relcache.h"

/* X(TAG, name, type), in the table's order. */
#define OUTBOX_TABLE_COLUMNS(X) \
	X(ID, "id", INT8OID) \
	X(SHARD, "shard", INT4OID) \
	X(TOPIC, "topic", TEXTOID) \
	X(KEY, "key", BYTEAOID) \
	X(PAYLOAD, "payload", BYTEAOID) \
	X(HEADERS, "headers", JSONBOID) \
	X(CREATED_AT, "created_at", TIMESTAMPTZOID) \
	X(ATTEMPTS, "attempts", INT4OID) \
	X(LAST_ERROR, "last_error", TEXTOID) \
	X(LAST_ATTEMPT_AT, "last_attempt_at", TIMESTAMPTZOID) \
	X(NEXT_ATTEMPT_AT, "next_attempt_at", TIMESTAMPTZOID) \
	X(PAYLOAD_TYPE, "payload_type", CHAROID) \
	X(PARTITION, "partition", INT4OID)

#define OUTBOX_COLUMN_ENUM(tag, name, type) OUTBOX_COL_##tag,
#define OUTBOX_COLUMN_NAME(tag, name, type) name,
#define OUTBOX_COLUMN_TYPE(tag, name, type) type,

/* A column's position in the table, from 0. */
typedef enum OutboxColumn
{
	OUTBOX_TABLE_COLUMNS(OUTBOX_COLUMN_ENUM)
	OUTBOX_NCOLUMNS
} OutboxColumn;

/* The columns of tables made before 0.3.0 (no payload_type yet). */
#define OUTBOX_NCOLUMNS_BEFORE_0_3 OUTBOX_COL_PAYLOAD_TYPE

/* The columns of tables made before 0.7.0 (no partition yet). */
#define OUTBOX_NCOLUMNS_BEFORE_0_7 OUTBOX_COL_PARTITION

/*
 * Refuses (55000, naming the table and the column) a table whose first
 * ncolumns columns are not those above, or that has any other.
 */
extern void outbox_check_table_columns(Relation rel, int ncolumns);
extern void outbox_refuse_table_shape(Relation rel, const char *what);

#endif							/* OUTBOX_TABLE_H */
