/*
 * avro_value.c
 *		A jsonb value written in Avro's binary encoding while it is walked
 *		through the schema libavro parsed: libavro owns the schema (names,
 *		namespaces, recursive types through links); the encoding is written
 *		here, straight into the caller's buffer, so that a union can try a
 *		branch and take back what it wrote, and nothing libavro allocates
 *		lives per value.
 *
 * libavro reports a schema it cannot parse with an error code and
 * avro_strerror(); it imports no abort(), exit() or assert (nm -D).
 */
#include "schema/avro_value.h"
#include "schema/json_value.h"
#include "schema/schema_cache.h"

#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/numeric.h"

#include <avro.h>
#include <errno.h>
#include <math.h>

typedef struct Walk
{
	StringInfo	out;
	StringInfoData path;
	char	   *reason;
} Walk;

static bool encode(avro_schema_t schema, JsonbValue *v, Walk *w);

static bool
refuse(Walk *w, char *reason)
{
	w->reason = reason;
	return false;
}

/*
 * Avro's long: a zig-zag varint, which is also how Kafka's
 * ByteUtils.writeVarint writes the Confluent framing's message indexes.
 */
void
outbox_zigzag_varint_append(StringInfo out, int64 value)
{
	uint64		zigzag = ((uint64) value << 1) ^ (uint64) (value >> 63);

	while (zigzag >= 0x80)
	{
		appendStringInfoChar(out, (char) ((zigzag & 0x7f) | 0x80));
		zigzag >>= 7;
	}
	appendStringInfoChar(out, (char) zigzag);
}

static void
write_bytes(StringInfo out, const char *data, int len)
{
	outbox_zigzag_varint_append(out, len);
	appendBinaryStringInfo(out, data, len);
}

/* little-endian, as Avro writes float and double */
static void
write_little_endian(StringInfo out, uint64 bits, int size)
{
	for (int i = 0; i < size; i++)
		appendStringInfoChar(out, (char) ((bits >> (8 * i)) & 0xff));
}

static avro_schema_t
resolved(avro_schema_t schema)
{
	return is_avro_link(schema) ? avro_schema_link_target(schema) : schema;
}

static const char *
type_name(avro_schema_t schema)
{
	const char *name;

	schema = resolved(schema);
	switch (avro_typeof(schema))
	{
		case AVRO_STRING:
			return "string";
		case AVRO_BYTES:
			return "bytes";
		case AVRO_INT32:
			return "int";
		case AVRO_INT64:
			return "long";
		case AVRO_FLOAT:
			return "float";
		case AVRO_DOUBLE:
			return "double";
		case AVRO_BOOLEAN:
			return "boolean";
		case AVRO_NULL:
			return "null";
		case AVRO_MAP:
			return "map";
		case AVRO_ARRAY:
			return "array";
		case AVRO_UNION:
			return "union";
		default:
			name = avro_schema_name(schema);
			return name ? name : "?";
	}
}

static char *
wrong_type(JsonbValue *v, avro_schema_t schema)
{
	const char *kind;

	schema = resolved(schema);
	kind = is_avro_record(schema) ? "the record " :
		is_avro_enum(schema) ? "the enum " : is_avro_fixed(schema) ? "the fixed " : "";

	return psprintf("is a JSON %s, the schema wants %s%s", outbox_json_type_name(v), kind,
					type_name(schema));
}

static bool
encode_integer(avro_schema_t schema, JsonbValue *v, Walk *w)
{
	char	   *digits;
	char	   *end;
	long long	value;

	if (v->type != jbvNumeric)
		return refuse(w, wrong_type(v, schema));
	digits = numeric_normalize(v->val.numeric);
	errno = 0;
	value = strtoll(digits, &end, 10);
	if (*end != '\0')
		return refuse(w, psprintf("is %s, the schema wants an integer (%s)", digits,
								  type_name(schema)));
	if (errno == ERANGE || (avro_typeof(schema) == AVRO_INT32 &&
							(value < PG_INT32_MIN || value > PG_INT32_MAX)))
		return refuse(w, psprintf("is %s, beyond the range of Avro's %s", digits,
								  type_name(schema)));
	outbox_zigzag_varint_append(w->out, value);
	return true;
}

static bool
encode_real(avro_schema_t schema, JsonbValue *v, Walk *w)
{
	char	   *digits;
	double		value;

	if (v->type != jbvNumeric)
		return refuse(w, wrong_type(v, schema));
	digits = numeric_normalize(v->val.numeric);
	value = strtod(digits, NULL);
	if (avro_typeof(schema) == AVRO_DOUBLE)
	{
		uint64		bits;

		if (isinf(value))
			return refuse(w, psprintf("is %s, beyond the range of Avro's double", digits));
		memcpy(&bits, &value, sizeof(bits));
		write_little_endian(w->out, bits, 8);
	}
	else
	{
		float		single = (float) value;
		uint32		bits;

		if (isinf(single))
			return refuse(w, psprintf("is %s, beyond the range of Avro's float", digits));
		memcpy(&bits, &single, sizeof(bits));
		write_little_endian(w->out, bits, 4);
	}
	return true;
}

/* Avro's JSON form of bytes and fixed: one code point 0-255 per byte */
static bool
encode_octets(avro_schema_t schema, JsonbValue *v, Walk *w)
{
	const unsigned char *s;
	int			len;
	StringInfoData bytes;

	if (v->type != jbvString)
		return refuse(w, wrong_type(v, schema));
	/* code points are Unicode's, whatever the database's encoding */
	s = (const unsigned char *) pg_server_to_any(v->val.string.val, v->val.string.len, PG_UTF8);
	len = s == (const unsigned char *) v->val.string.val ? v->val.string.len : (int) strlen((const char *) s);
	initStringInfo(&bytes);
	for (int i = 0; i < len;)
	{
		int			width = pg_utf_mblen(s + i);
		pg_wchar	c = width == 1 ? s[i] : utf8_to_unicode(s + i);

		if (c > 0xff || i + width > len)
			return refuse(w, psprintf("has the character U+%04X at byte %d: %s takes one character 0-255 a byte",
									  c, i, type_name(schema)));
		appendStringInfoChar(&bytes, (char) c);
		i += width;
	}
	if (avro_typeof(schema) == AVRO_FIXED)
	{
		if (bytes.len != avro_schema_fixed_size(schema))
			return refuse(w, psprintf("is %d bytes, the fixed %s has %lld", bytes.len,
									  avro_schema_name(schema),
									  (long long) avro_schema_fixed_size(schema)));
		appendBinaryStringInfo(w->out, bytes.data, bytes.len);
	}
	else
		write_bytes(w->out, bytes.data, bytes.len);
	return true;
}

static bool
encode_enum(avro_schema_t schema, JsonbValue *v, Walk *w)
{
	char	   *symbol;
	int			index;

	if (v->type != jbvString)
		return refuse(w, wrong_type(v, schema));
	symbol = pnstrdup(v->val.string.val, v->val.string.len);
	index = avro_schema_enum_get_by_name(schema, symbol);
	if (index < 0)
		return refuse(w, psprintf("is \"%s\", not a symbol of the enum %s", symbol,
								  avro_schema_name(schema)));
	outbox_zigzag_varint_append(w->out, index);
	return true;
}

static void
pop(Walk *w, int len)
{
	w->path.len = len;
	w->path.data[len] = '\0';
}

static bool
nullable(avro_schema_t schema)
{
	schema = resolved(schema);
	if (is_avro_null(schema))
		return true;
	if (!is_avro_union(schema))
		return false;
	for (size_t i = 0; i < avro_schema_union_size(schema); i++)
		if (is_avro_null(avro_schema_union_branch(schema, (int) i)))
			return true;
	return false;
}

static bool
encode_record(avro_schema_t schema, JsonbValue *v, Walk *w)
{
	JsonbContainer *object;
	JsonbIterator *it;
	JsonbValue	element;
	JsonbIteratorToken token;
	int			len = w->path.len;

	if (v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data))
		return refuse(w, wrong_type(v, schema));
	object = v->val.binary.data;
	for (size_t i = 0; i < avro_schema_record_size(schema); i++)
	{
		const char *name = avro_schema_record_field_name(schema, (int) i);
		avro_schema_t field = avro_schema_record_field_get_by_index(schema, (int) i);
		JsonbValue *value = getKeyJsonValueFromContainer(object, name, strlen(name), NULL);
		JsonbValue	null = {.type = jbvNull};

		outbox_json_path_key(&w->path, name, strlen(name));
		if (value == NULL && !nullable(field))
			return refuse(w, "is missing, and its type does not allow null");
		if (!encode(field, value ? value : &null, w))
			return false;
		pop(w, len);
	}
	/* a field the record does not have is a mistake, not data to drop */
	it = JsonbIteratorInit(object);
	while ((token = JsonbIteratorNext(&it, &element, true)) != WJB_DONE)
	{
		char	   *name;

		if (token != WJB_KEY)
			continue;
		name = pnstrdup(element.val.string.val, element.val.string.len);
		if (avro_schema_record_field_get_index(schema, name) < 0)
		{
			outbox_json_path_key(&w->path, name, element.val.string.len);
			return refuse(w, psprintf("is not a field of the record %s", avro_schema_name(schema)));
		}
	}
	return true;
}

static bool
encode_items(avro_schema_t schema, JsonbValue *v, Walk *w)
{
	bool		map = is_avro_map(schema);
	avro_schema_t items = map ? avro_schema_map_values(schema) : avro_schema_array_items(schema);
	JsonbIterator *it;
	JsonbValue	element;
	JsonbIteratorToken token;
	int			count;
	int			index = 0;
	int			len = w->path.len;

	if (v->type != jbvBinary ||
		(map ? !JsonContainerIsObject(v->val.binary.data) : !JsonContainerIsArray(v->val.binary.data)))
		return refuse(w, wrong_type(v, schema));
	count = JsonContainerSize(v->val.binary.data);
	/* one block of every item, then the empty block that ends them */
	if (count > 0)
		outbox_zigzag_varint_append(w->out, count);
	it = JsonbIteratorInit(v->val.binary.data);
	while ((token = JsonbIteratorNext(&it, &element, true)) != WJB_DONE)
	{
		if (token == WJB_KEY)
		{
			write_bytes(w->out, element.val.string.val, element.val.string.len);
			outbox_json_path_key(&w->path, element.val.string.val, element.val.string.len);
			continue;
		}
		if (token == WJB_ELEM)
			outbox_json_path_index(&w->path, index++);
		if (token != WJB_VALUE && token != WJB_ELEM)
			continue;
		if (!encode(items, &element, w))
			return false;
		pop(w, len);
	}
	outbox_zigzag_varint_append(w->out, 0);
	return true;
}

static bool
branch_named(avro_schema_t branch, const char *name, int len)
{
	const char *short_name = type_name(branch);
	const char *space = NULL;
	char	   *full;

	branch = resolved(branch);
	if (strlen(short_name) == (size_t) len && memcmp(short_name, name, len) == 0)
		return true;
	if (is_avro_record(branch) || is_avro_enum(branch) || is_avro_fixed(branch))
		space = avro_schema_namespace(branch);
	if (space == NULL || *space == '\0')
		return false;
	full = psprintf("%s.%s", space, short_name);
	return strlen(full) == (size_t) len && memcmp(full, name, len) == 0;
}

/* Avro's JSON form of a union's value: {"<branch's name>": value} */
static int
wrapped_branch(avro_schema_t schema, JsonbValue *v, JsonbValue *inner, JsonbValue *key)
{
	JsonbIterator *it;

	if (v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data) ||
		JsonContainerSize(v->val.binary.data) != 1)
		return -1;
	it = JsonbIteratorInit(v->val.binary.data);
	(void) JsonbIteratorNext(&it, key, true);	/* WJB_BEGIN_OBJECT */
	(void) JsonbIteratorNext(&it, key, true);
	(void) JsonbIteratorNext(&it, inner, true);
	for (size_t i = 0; i < avro_schema_union_size(schema); i++)
		if (branch_named(avro_schema_union_branch(schema, (int) i),
						 key->val.string.val, key->val.string.len))
			return (int) i;
	return -1;
}

static bool
encode_union(avro_schema_t schema, JsonbValue *v, Walk *w)
{
	int			size = (int) avro_schema_union_size(schema);
	int			start = w->out->len;
	int			len = w->path.len;
	JsonbValue	inner;
	JsonbValue	key;
	int			wrapped = wrapped_branch(schema, v, &inner, &key);
	int			not_null = -1;

	if (wrapped >= 0)
	{
		outbox_zigzag_varint_append(w->out, wrapped);
		outbox_json_path_key(&w->path, key.val.string.val, key.val.string.len);
		if (!encode(avro_schema_union_branch(schema, wrapped), &inner, w))
			return false;
		pop(w, len);
		return true;
	}
	/* a value for the one branch but null: its own fault says most */
	for (int i = 0; i < size && v->type != jbvNull; i++)
		if (!is_avro_null(avro_schema_union_branch(schema, i)))
			not_null = not_null == -1 ? i : -2;
	if (not_null >= 0)
	{
		outbox_zigzag_varint_append(w->out, not_null);
		return encode(avro_schema_union_branch(schema, not_null), v, w);
	}
	for (int i = 0; i < size; i++)
	{
		outbox_zigzag_varint_append(w->out, i);
		if (encode(avro_schema_union_branch(schema, i), v, w))
			return true;
		w->out->len = start;
		w->out->data[start] = '\0';
		pop(w, len);
	}
	return refuse(w, psprintf("is a JSON %s that fits no branch of the union", outbox_json_type_name(v)));
}

static bool
encode(avro_schema_t schema, JsonbValue *v, Walk *w)
{
	check_stack_depth();
	schema = resolved(schema);
	switch (avro_typeof(schema))
	{
		case AVRO_NULL:
			return v->type == jbvNull || refuse(w, wrong_type(v, schema));
		case AVRO_BOOLEAN:
			if (v->type != jbvBool)
				return refuse(w, wrong_type(v, schema));
			appendStringInfoChar(w->out, v->val.boolean ? 1 : 0);
			return true;
		case AVRO_INT32:
		case AVRO_INT64:
			return encode_integer(schema, v, w);
		case AVRO_FLOAT:
		case AVRO_DOUBLE:
			return encode_real(schema, v, w);
		case AVRO_STRING:
			if (v->type != jbvString)
				return refuse(w, wrong_type(v, schema));
			write_bytes(w->out, v->val.string.val, v->val.string.len);
			return true;
		case AVRO_BYTES:
		case AVRO_FIXED:
			return encode_octets(schema, v, w);
		case AVRO_ENUM:
			return encode_enum(schema, v, w);
		case AVRO_RECORD:
			return encode_record(schema, v, w);
		case AVRO_ARRAY:
		case AVRO_MAP:
			return encode_items(schema, v, w);
		case AVRO_UNION:
			return encode_union(schema, v, w);
		default:
			return refuse(w, psprintf("has a schema type libavro gave as %d", (int) avro_typeof(schema)));
	}
}

static void *
parse(const char *text, char **error)
{
	avro_schema_t schema;

	if (avro_schema_from_json_length(text, strlen(text), &schema) != 0)
	{
		*error = pstrdup(avro_strerror());
		return NULL;
	}
	return schema;
}

static void
release(void *schema)
{
	avro_schema_decref((avro_schema_t) schema);
}

static SchemaCache parsed = {.name = "outbox Avro schemas", .compile = parse, .release = release};

char *
outbox_avro_schema_refusal(const char *schema_text)
{
	char	   *error = NULL;

	return outbox_schema_cache_get(&parsed, schema_text, &error) ? NULL : error;
}

bool
outbox_avro_encode_jsonb(const char *schema_text, Jsonb *value, StringInfo out,
						 char **path, char **reason)
{
	char	   *error = NULL;
	avro_schema_t schema = outbox_schema_cache_get(&parsed, schema_text, &error);
	int			start = out->len;
	JsonbValue	root;
	Walk		w = {.out = out};

	*path = NULL;
	if (schema == NULL)
	{
		*reason = psprintf("the Avro schema does not parse: %s", error);
		return false;
	}
	initStringInfo(&w.path);
	appendStringInfoChar(&w.path, '$');
	outbox_json_root(value, &root);
	if (encode(schema, &root, &w))
		return true;
	out->len = start;
	out->data[start] = '\0';
	*path = w.path.data;
	*reason = w.reason;
	return false;
}

bool
outbox_avro_encode(const char *schema_text, const char *json, int json_len,
				   StringInfo out, char **error)
{
	char	   *path;
	char	   *reason;
	Jsonb	   *value = outbox_json_parse(json, json_len, &reason);

	if (value == NULL)
	{
		*error = psprintf("the value is not JSON: %s", reason);
		return false;
	}
	if (outbox_avro_encode_jsonb(schema_text, value, out, &path, &reason))
		return true;
	*error = path ? psprintf("%s %s", path, reason) : reason;
	return false;
}
