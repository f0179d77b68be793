/*
 * json_schema.h
 *		A JSON value checked against a JSON Schema, for the send check: the
 *		keywords docs/message.md lists are checked, and a schema with any
 *		other (but annotations) is refused rather than half checked.
 */
#ifndef OUTBOX_SCHEMA_JSON_SCHEMA_H
#define OUTBOX_SCHEMA_JSON_SCHEMA_H

#include "postgres.h"

#include "utils/jsonb.h"

/*
 * NULL if the schema text is a JSON Schema whose every keyword is checked,
 * else why not (palloc'd). Compiled once per process and text.
 */
extern char *outbox_json_schema_refusal(const char *schema_text);

/*
 * Whether value fits the schema. If not, *path (the value's place, "$",
 * "$.items[2].name") and *reason say where and why, palloc'd. A schema
 * that does not compile is a refusal too, with path NULL.
 */
extern bool outbox_json_schema_fits(const char *schema_text, Jsonb *value,
									char **path, char **reason);

#endif							/* OUTBOX_SCHEMA_JSON_SCHEMA_H */
