/*
 * json_value.h
 *		JSON text as jsonb, with its faults returned rather than raised: the
 *		schema texts and payloads the schema room reads, in a sender's
 *		backend and in a worker alike.
 */
#ifndef OUTBOX_SCHEMA_JSON_VALUE_H
#define OUTBOX_SCHEMA_JSON_VALUE_H

#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/jsonb.h"

/*
 * The JSON text of len bytes (in the database's encoding) as jsonb, or NULL
 * with *error (palloc'd) saying why it is not JSON.
 */
extern Jsonb *outbox_json_parse(const char *text, int len, char **error);

/* a jsonb container, or a scalar, as the JsonbValue the walkers take */
extern void outbox_json_root(Jsonb *json, JsonbValue *root);

/*
 * A value's path as the schema room's errors give it: "$", then ".name"
 * (a name of letters, digits and '_'), ["other name"] or [index].
 */
extern void outbox_json_path_key(StringInfo path, const char *name, int len);
extern void outbox_json_path_index(StringInfo path, int index);

/* "object", "array", "string", "number", "boolean" or "null" */
extern const char *outbox_json_type_name(const JsonbValue *value);

#endif							/* OUTBOX_SCHEMA_JSON_VALUE_H */
