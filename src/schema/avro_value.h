/*
 * avro_value.h
 *		A JSON value in Avro's binary encoding, by an Avro schema text: the
 *		check in the sender's transaction encodes it to learn that it fits,
 *		the worker encodes it again to produce the record's body.
 *
 * The JSON value maps to the schema as docs/message.md says: a record is an
 * object with the record's fields (a field left out is null where its
 * type allows null; no other field), an enum a string, bytes and fixed a
 * string of code points 0-255, a union null, the first branch the value
 * fits, or Avro's JSON form {"<branch name>": value}; a logical type is
 * its underlying type. Parsed schemas are cached per process and text
 * (libavro's, freed when the cache lets them go). Raises no error for a
 * value or schema that does not fit: returns false.
 */
#ifndef OUTBOX_SCHEMA_AVRO_VALUE_H
#define OUTBOX_SCHEMA_AVRO_VALUE_H

#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/jsonb.h"

/* NULL if libavro parses the schema text, else its complaint (palloc'd) */
/* appends value as a zig-zag varint (Avro's long, Kafka's varint) */
extern void outbox_zigzag_varint_append(StringInfo out, int64 value);

extern char *outbox_avro_schema_refusal(const char *schema_text);

/*
 * Appends the encoding of the JSON text json (json_len bytes, the
 * database's encoding) to out, for the worker. False with *error
 * (palloc'd: the value's path, "$.lines[2].sku", then why) if the text is
 * not JSON, the schema does not parse, or the value does not fit it; out
 * is then as it was.
 */
extern bool outbox_avro_encode(const char *schema_text, const char *json, int json_len,
							   StringInfo out, char **error);

/*
 * The same for a jsonb value, with the path (NULL when the schema does not
 * parse) and the reason apart, for the send check.
 */
extern bool outbox_avro_encode_jsonb(const char *schema_text, Jsonb *value, StringInfo out,
									 char **path, char **reason);

#endif							/* OUTBOX_SCHEMA_AVRO_VALUE_H */
