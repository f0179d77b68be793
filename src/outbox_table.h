/*
 * outbox_table.h
 *		The outbox table's columns as the C code knows them: their order,
 *		names and types, once. The install script (sql/outbox--*.sql)
 *		creates the table in this order; outbox_send() checks a table's
 *		shape against it and writes its rows by it, and the worker's read
 *		selects its columns by name from it.
 */
#ifndef OUTBOX_TABLE_H
#define OUTBOX_TABLE_H

#include "postgres.h"

#include "catalog/pg_type.h"

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
	X(PAYLOAD_TYPE, "payload_type", CHAROID)

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

#endif							/* OUTBOX_TABLE_H */
