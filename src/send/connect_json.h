/*
 * connect_json.h
 *		The bytes Kafka Connect's JsonConverter writes
 *		for the values Debezium's outbox router hands it, for debezium.c:
 *		strings, numbers, bytes, and a JSON payload expanded the way the
 *		router expands one (table.expand.json.payload).
 */
#ifndef OUTBOX_CONNECT_JSON_H
#define OUTBOX_CONNECT_JSON_H

#include "postgres.h"

#include "lib/stringinfo.h"

/* A string as the converter quotes and escapes it. */
extern void connect_json_string(StringInfo out, const char *s, int len);

/* A double as Java 19 and later print it (Double.toString). */
extern void connect_json_double(StringInfo out, double d);

/* Bytes as the converter writes them: base64 in a JSON string. */
extern void connect_json_bytes(StringInfo out, const char *data, int len);

/*
 * The payload text expanded into the JSON object the converter writes of
 * the router's structure; false (out untouched) where the router's
 * expansion fails and it keeps the payload as a string. null_as_bytes:
 * table.json.payload.null.behavior = optional_bytes (null members kept).
 * schema_out (unless NULL): the schema the router inferred, as the
 * converter writes it with schemas enabled.
 */
extern bool connect_json_expand(StringInfo out, const char *text, int len,
								bool null_as_bytes, StringInfo schema_out);

#endif							/* OUTBOX_CONNECT_JSON_H */
