/*
 * connect_json.c
 *		What Kafka Connect's JsonConverter writes of the values Debezium's
 *		outbox router hands it: the bytes a consumer of a Debezium outbox
 *		topic reads today, which debezium.c must write alike; with schemas
 *		enabled, also the schema the router infers for an expanded payload.
 *
 * The converter writes compact JSON through Jackson: strings escaped as
 * Jackson escapes them (control characters only; \u00XX in upper case),
 * doubles as Java prints them, bytes in base64.
 *
 * The expansion (table.expand.json.payload) follows the router's rules:
 * the payload text, when it starts with '{' or '[', is parsed; a schema is
 * inferred from it (a string, a boolean, an integer of 32 or 64 bits, else
 * a double; an object's members in document order, a member whose value
 * is null or an empty array left out; an array's elements all of one kind,
 * objects merged into one structure); the value is then written by that
 * schema, every member of a structure, the missing ones as null. Whatever
 * the router's expansion refuses (an array at the top, mixed arrays, an
 * integer beyond 64 bits, a number of another kind than its schema's),
 * this refuses too, and the caller keeps the payload as a string, as the
 * router does. One choice the router leaves to Java's hash order (the
 * member order of objects merged from an array's elements when they differ
 * in their members) is made here by first appearance.
 */
#include "send/connect_json.h"

#include <math.h>

#include "mb/pg_wchar.h"
#include "miscadmin.h"

/* ---- scalars ------------------------------------------------------------ */

void
connect_json_string(StringInfo out, const char *s, int len)
{
	static const char hex[] = "0123456789ABCDEF";

	appendStringInfoChar(out, '"');
	for (int i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		switch (c)
		{
			case '"':
				appendStringInfoString(out, "\\\"");
				break;
			case '\\':
				appendStringInfoString(out, "\\\\");
				break;
			case '\b':
				appendStringInfoString(out, "\\b");
				break;
			case '\f':
				appendStringInfoString(out, "\\f");
				break;
			case '\n':
				appendStringInfoString(out, "\\n");
				break;
			case '\r':
				appendStringInfoString(out, "\\r");
				break;
			case '\t':
				appendStringInfoString(out, "\\t");
				break;
			default:
				if (c < 0x20)
				{
					appendStringInfoString(out, "\\u00");
					appendStringInfoChar(out, hex[c >> 4]);
					appendStringInfoChar(out, hex[c & 0xF]);
				}
				else
					appendStringInfoChar(out, (char) c);
		}
	}
	appendStringInfoChar(out, '"');
}

/*
 * The digits Java 19 and later print for a double: the closest decimal of
 * the fewest significant digits that reads back as the same double (ties
 * to the even digit, as printf rounds), but never fewer than two digits to
 * choose from (5e-324 prints as 4.9E-324, 1e23 as 1.0E23). Into digits
 * (trailing zeros dropped), and the power of ten of the first digit.
 */
static int
java_digits(double d, char *digits, int *exponent)
{
	char		buf[64];
	int			n = 0;

	for (int precision = 2; precision <= 17; precision++)
	{
		snprintf(buf, sizeof(buf), "%.*e", precision - 1, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	/* buf: [-]d.ddde[+-]x */
	for (char *c = buf; *c && *c != 'e'; c++)
		if (isdigit((unsigned char) *c))
			digits[n++] = *c;
	*exponent = atoi(strchr(buf, 'e') + 1);
	while (n > 1 && digits[n - 1] == '0')
		n--;
	return n;
}

/*
 * Java's Double.toString: plain from 10^-3 up to 10^7, else as
 * d.dddE<n>; always a fractional digit.
 */
void
connect_json_double(StringInfo out, double d)
{
	char		digits[32];
	int			exponent;
	int			ndigits;
	int			point;			/* digits before the decimal point */

	if (d == 0)
	{
		appendStringInfoString(out, signbit(d) ? "-0.0" : "0.0");
		return;
	}
	if (d < 0)
	{
		appendStringInfoChar(out, '-');
		d = -d;
	}
	ndigits = java_digits(d, digits, &exponent);
	point = exponent + 1;

	if (exponent >= -3 && exponent < 7)
	{
		if (point <= 0)
		{
			appendStringInfoString(out, "0.");
			for (int i = point; i < 0; i++)
				appendStringInfoChar(out, '0');
			appendBinaryStringInfo(out, digits, ndigits);
			return;
		}
		for (int i = 0; i < point; i++)
			appendStringInfoChar(out, i < ndigits ? digits[i] : '0');
		appendStringInfoChar(out, '.');
		if (ndigits > point)
			appendBinaryStringInfo(out, digits + point, ndigits - point);
		else
			appendStringInfoChar(out, '0');
		return;
	}
	appendStringInfoChar(out, digits[0]);
	appendStringInfoChar(out, '.');
	if (ndigits > 1)
		appendBinaryStringInfo(out, digits + 1, ndigits - 1);
	else
		appendStringInfoChar(out, '0');
	appendStringInfo(out, "E%d", exponent);
}

/* Base64 with padding and no line breaks, as Jackson writes bytes. */
void
connect_json_bytes(StringInfo out, const char *data, int len)
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *s = (const unsigned char *) data;

	appendStringInfoChar(out, '"');
	for (int i = 0; i < len; i += 3)
	{
		uint32		bits = (uint32) s[i] << 16;
		int			left = len - i;

		if (left > 1)
			bits |= (uint32) s[i + 1] << 8;
		if (left > 2)
			bits |= s[i + 2];
		appendStringInfoChar(out, alphabet[(bits >> 18) & 63]);
		appendStringInfoChar(out, alphabet[(bits >> 12) & 63]);
		appendStringInfoChar(out, left > 1 ? alphabet[(bits >> 6) & 63] : '=');
		appendStringInfoChar(out, left > 2 ? alphabet[bits & 63] : '=');
	}
	appendStringInfoChar(out, '"');
}

/* ---- the parsed payload ------------------------------------------------- */

/* A JSON value as Jackson reads it: integers by the width they fit. */
typedef enum JsonKind
{
	J_NULL, J_BOOL, J_STRING, J_INT32, J_INT64, J_BIGINT, J_DOUBLE, J_ARRAY, J_OBJECT
} JsonKind;

typedef struct JsonNode
{
	JsonKind	kind;
	bool		boolean;
	int64		integer;
	double		real;
	StringInfoData text;		/* a string's value */
	int			n;				/* elements or members */
	struct JsonNode **items;
	StringInfoData *names;		/* members' names */
} JsonNode;

typedef struct Parser
{
	const char *s;
	int			len;
	int			pos;
	bool		failed;
} Parser;

static JsonNode *parse_value(Parser *p);

static void
skip_space(Parser *p)
{
	while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
							   p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
		p->pos++;
}

static bool
take(Parser *p, char c)
{
	skip_space(p);
	if (p->pos < p->len && p->s[p->pos] == c)
	{
		p->pos++;
		return true;
	}
	return false;
}

/* Four hex digits (a \u escape's), or -1. */
static int
parse_hex4(Parser *p)
{
	char		digits[5];
	char	   *end;
	long		v;

	if (p->pos + 4 > p->len)
		return -1;
	memcpy(digits, p->s + p->pos, 4);
	digits[4] = '\0';
	for (int i = 0; i < 4; i++)
		if (!isxdigit((unsigned char) digits[i]))
			return -1;
	v = strtol(digits, &end, 16);
	p->pos += 4;
	return (int) v;
}

/* A string's value, unescaped, into out (the opening quote taken). */
static bool
parse_string(Parser *p, StringInfo out)
{
	initStringInfo(out);
	while (p->pos < p->len)
	{
		char		c = p->s[p->pos++];

		if (c == '"')
			return true;
		if ((unsigned char) c < 0x20)
			return false;
		if (c != '\\')
		{
			appendStringInfoChar(out, c);
			continue;
		}
		if (p->pos >= p->len)
			return false;
		c = p->s[p->pos++];
		switch (c)
		{
			case '"':
			case '\\':
			case '/':
				appendStringInfoChar(out, c);
				break;
			case 'b':
				appendStringInfoChar(out, '\b');
				break;
			case 'f':
				appendStringInfoChar(out, '\f');
				break;
			case 'n':
				appendStringInfoChar(out, '\n');
				break;
			case 'r':
				appendStringInfoChar(out, '\r');
				break;
			case 't':
				appendStringInfoChar(out, '\t');
				break;
			case 'u':
				{
					int			code = parse_hex4(p);
					unsigned char utf8[8];

					if (code < 0)
						return false;
					if (code >= 0xD800 && code < 0xDC00)
					{
						int			low;

						if (p->pos + 2 > p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
							return false;
						p->pos += 2;
						low = parse_hex4(p);
						if (low < 0xDC00 || low > 0xDFFF)
							return false;
						code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
					}
					else if (code >= 0xDC00 && code <= 0xDFFF)
						return false;
					unicode_to_utf8((pg_wchar) code, utf8);
					appendBinaryStringInfo(out, (char *) utf8, pg_utf_mblen(utf8));
				}
				break;
			default:
				return false;
		}
	}
	return false;
}

/* A number: an integer by the width it fits (Jackson's int, long, big), else a double. */
static bool
parse_number(Parser *p, JsonNode *node)
{
	int			start = p->pos;
	bool		integral = true;
	char	   *text;
	char	   *end;

	if (p->pos < p->len && p->s[p->pos] == '-')
		p->pos++;
	if (p->pos >= p->len || !isdigit((unsigned char) p->s[p->pos]))
		return false;
	if (p->s[p->pos] == '0' && p->pos + 1 < p->len && isdigit((unsigned char) p->s[p->pos + 1]))
		return false;
	while (p->pos < p->len)
	{
		char		c = p->s[p->pos];

		if (c == '.' || c == 'e' || c == 'E')
			integral = false;
		else if (!isdigit((unsigned char) c) && c != '+' && c != '-')
			break;
		p->pos++;
	}
	text = pnstrdup(p->s + start, p->pos - start);
	errno = 0;
	if (integral)
	{
		long long	v = strtoll(text, &end, 10);

		if (*end != '\0')
			return false;
		if (errno == ERANGE)
			node->kind = J_BIGINT;
		else
		{
			node->integer = (int64) v;
			node->kind = (v >= PG_INT32_MIN && v <= PG_INT32_MAX) ? J_INT32 : J_INT64;
		}
		return true;
	}
	node->real = strtod(text, &end);
	node->kind = J_DOUBLE;
	return *end == '\0';
}

static bool
parse_literal(Parser *p, const char *word)
{
	int			n = strlen(word);

	if (p->pos + n > p->len || strncmp(p->s + p->pos, word, n) != 0)
		return false;
	p->pos += n;
	return true;
}

static bool
parse_members(Parser *p, JsonNode *node, bool object)
{
	int			capacity = 8;
	char		close = object ? '}' : ']';

	node->items = palloc(sizeof(JsonNode *) * capacity);
	if (object)
		node->names = palloc(sizeof(StringInfoData) * capacity);
	if (take(p, close))
		return true;
	do
	{
		if (node->n == capacity)
		{
			capacity *= 2;
			node->items = repalloc(node->items, sizeof(JsonNode *) * capacity);
			if (object)
				node->names = repalloc(node->names, sizeof(StringInfoData) * capacity);
		}
		if (object && !(take(p, '"') && parse_string(p, &node->names[node->n]) && take(p, ':')))
			return false;
		if ((node->items[node->n] = parse_value(p)) == NULL)
			return false;
		node->n++;
	} while (take(p, ','));
	return take(p, close);
}

static JsonNode *
parse_value(Parser *p)
{
	JsonNode   *node = palloc0(sizeof(JsonNode));
	bool		ok;

	check_stack_depth();
	skip_space(p);
	if (p->pos >= p->len)
		return NULL;
	switch (p->s[p->pos])
	{
		case '{':
		case '[':
			node->kind = p->s[p->pos] == '{' ? J_OBJECT : J_ARRAY;
			p->pos++;
			ok = parse_members(p, node, node->kind == J_OBJECT);
			break;
		case '"':
			p->pos++;
			node->kind = J_STRING;
			ok = parse_string(p, &node->text);
			break;
		case 't':
		case 'f':
			node->kind = J_BOOL;
			node->boolean = p->s[p->pos] == 't';
			ok = parse_literal(p, node->boolean ? "true" : "false");
			break;
		case 'n':
			node->kind = J_NULL;
			ok = parse_literal(p, "null");
			break;
		default:
			ok = parse_number(p, node);
			break;
	}
	return ok ? node : NULL;
}

/* ---- the inferred schema ------------------------------------------------ */

typedef enum SchemaType
{
	S_STRING, S_BOOLEAN, S_INT32, S_INT64, S_FLOAT64, S_BYTES, S_ARRAY, S_STRUCT
} SchemaType;

typedef struct Schema
{
	SchemaType	type;
	bool		required;		/* merged from different objects: a null fails */
	struct Schema *element;		/* of an array */
	int			n;				/* a structure's fields */
	int			capacity;
	const char **names;
	int		   *namelens;
	struct Schema **fields;
} Schema;

typedef struct Expansion
{
	bool		null_as_bytes;
	bool		failed;			/* the router's expansion would throw */
} Expansion;

static Schema *schema_of(Expansion *x, JsonNode *node);

static Schema *
new_schema(SchemaType type)
{
	Schema	   *s = palloc0(sizeof(Schema));

	s->type = type;
	return s;
}

static int
field_index(Schema *s, const char *name, int len)
{
	for (int i = 0; i < s->n; i++)
		if (s->namelens[i] == len && memcmp(s->names[i], name, len) == 0)
			return i;
	return -1;
}

static void
add_field(Schema *s, const char *name, int len, Schema *field)
{
	if (s->n == s->capacity)
	{
		s->capacity = Max(8, s->capacity * 2);
		s->names = s->names ? repalloc(s->names, sizeof(char *) * s->capacity) :
			palloc(sizeof(char *) * s->capacity);
		s->namelens = s->namelens ? repalloc(s->namelens, sizeof(int) * s->capacity) :
			palloc(sizeof(int) * s->capacity);
		s->fields = s->fields ? repalloc(s->fields, sizeof(Schema *) * s->capacity) :
			palloc(sizeof(Schema *) * s->capacity);
	}
	s->names[s->n] = name;
	s->namelens[s->n] = len;
	s->fields[s->n] = field;
	s->n++;
}

/* The number schemas are the same only when the kinds map alike. */
static SchemaType
number_type(JsonKind kind)
{
	return kind == J_INT32 ? S_INT32 : kind == J_INT64 ? S_INT64 : S_FLOAT64;
}

static bool
is_number(JsonKind kind)
{
	return kind == J_INT32 || kind == J_INT64 || kind == J_BIGINT || kind == J_DOUBLE;
}

/* Kafka Connect's equality of schemas, for the ones inferred here. */
static bool
same_schema(const Schema *a, const Schema *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	if (a->type != b->type || a->required != b->required || a->n != b->n)
		return false;
	if (a->type == S_ARRAY)
		return same_schema(a->element, b->element);
	for (int i = 0; i < a->n; i++)
		if (a->namelens[i] != b->namelens[i] ||
			memcmp(a->names[i], b->names[i], a->namelens[i]) != 0 ||
			!same_schema(a->fields[i], b->fields[i]))
			return false;
	return true;
}

static Schema *
copy_struct(const Schema *s)
{
	Schema	   *copy = new_schema(S_STRUCT);

	for (int i = 0; i < s->n; i++)
		add_field(copy, s->names[i], s->namelens[i], s->fields[i]);
	return copy;
}

/* New members appended; a member's schema kept unless it was bytes (a null). */
static void
merge_fields(Schema *merged, const Schema *s)
{
	for (int f = 0; f < s->n; f++)
	{
		int			at = field_index(merged, s->names[f], s->namelens[f]);

		if (at < 0)
			add_field(merged, s->names[f], s->namelens[f], s->fields[f]);
		else if (merged->fields[at]->type == S_BYTES && s->fields[f]->type != S_BYTES)
			merged->fields[at] = s->fields[f];
	}
}

/*
 * An array's element schema: from its first non-null element, every other
 * non-null one of the same kind (and numbers of the same width); objects
 * merged, their members in first appearance, a member's first schema kept
 * unless it was bytes (a null).
 */
static Schema *
element_schema(Expansion *x, JsonNode *array)
{
	JsonNode   *sample = NULL;
	Schema	   *first = NULL;
	Schema	   *merged = NULL;
	bool		distinct = false;

	for (int i = 0; i < array->n; i++)
	{
		JsonNode   *e = array->items[i];

		if (e->kind == J_NULL)
			continue;
		if (sample == NULL)
			sample = e;
		else if ((is_number(e->kind) != is_number(sample->kind)) ||
				 (!is_number(e->kind) && e->kind != sample->kind) ||
				 (is_number(e->kind) && number_type(e->kind) != number_type(sample->kind)))
		{
			x->failed = true;
			return NULL;
		}
	}
	if (sample == NULL || sample->kind != J_OBJECT)
	{
		Schema	   *s = sample ? schema_of(x, sample) :
		(x->null_as_bytes ? new_schema(S_BYTES) : NULL);

		if (s == NULL)
			x->failed = true;
		return s;
	}
	for (int i = 0; i < array->n && !x->failed; i++)
	{
		Schema	   *s;

		if (array->items[i]->kind != J_OBJECT)
			continue;
		s = schema_of(x, array->items[i]);
		if (first == NULL)
			first = s;
		else if (!same_schema(first, s))
			distinct = true;
		if (merged == NULL)
			merged = copy_struct(s);
		else
			merge_fields(merged, s);
	}
	/*
	 * Objects of one schema keep it; of several, the merged schema is not
	 * optional (Kafka Connect's copy of a schema's basics leaves that
	 * out), so a null element among them fails.
	 */
	if (!distinct)
		return first;
	merged->required = true;
	return merged;
}

static Schema *
schema_of(Expansion *x, JsonNode *node)
{
	Schema	   *s;

	check_stack_depth();
	switch (node->kind)
	{
		case J_STRING:
			return new_schema(S_STRING);
		case J_BOOL:
			return new_schema(S_BOOLEAN);
		case J_INT32:
		case J_INT64:
		case J_BIGINT:
		case J_DOUBLE:
			return new_schema(number_type(node->kind));
		case J_NULL:
			return x->null_as_bytes ? new_schema(S_BYTES) : NULL;
		case J_ARRAY:
			if (node->n == 0)
				return NULL;
			s = new_schema(S_ARRAY);
			s->element = element_schema(x, node);
			return s;
		case J_OBJECT:
			s = new_schema(S_STRUCT);
			for (int i = 0; i < node->n && !x->failed; i++)
			{
				Schema	   *field = schema_of(x, node->items[i]);

				if (field != NULL &&
					field_index(s, node->names[i].data, node->names[i].len) < 0)
					add_field(s, node->names[i].data, node->names[i].len, field);
			}
			return s;
	}
	return NULL;
}

/* ---- the schema, as the converter writes it with schemas enabled -------- */

/*
 * Kafka's JsonConverter's form of a schema: its type, a structure's fields
 * (each its schema, then "field") or an array's items, then "optional",
 * then a structure's name. The router names a structure by its path from
 * "payload": a member's is its parent's name, a dot and the member's name
 * (the member's name alone under an unnamed parent); an array's elements
 * take the array's path, but an array's elements' elements none.
 */
static void
write_schema(StringInfo out, const Schema *s, const char *field, int fieldlen,
			 const char *path)
{
	static const char *const names[] = {
		[S_STRING] = "string",[S_BOOLEAN] = "boolean",[S_INT32] = "int32",
		[S_INT64] = "int64",[S_FLOAT64] = "double",[S_BYTES] = "bytes",
		[S_ARRAY] = "array",[S_STRUCT] = "struct"
	};

	check_stack_depth();
	appendStringInfo(out, "{\"type\":\"%s\"", names[s->type]);
	if (s->type == S_STRUCT)
	{
		appendStringInfoString(out, ",\"fields\":[");
		for (int i = 0; i < s->n; i++)
		{
			char	   *member = path == NULL ? pnstrdup(s->names[i], s->namelens[i]) :
			psprintf("%s.%.*s", path, s->namelens[i], s->names[i]);

			if (i > 0)
				appendStringInfoChar(out, ',');
			write_schema(out, s->fields[i], s->names[i], s->namelens[i], member);
		}
		appendStringInfoChar(out, ']');
	}
	else if (s->type == S_ARRAY)
	{
		appendStringInfoString(out, ",\"items\":");
		write_schema(out, s->element, NULL, 0,
					 s->element->type == S_ARRAY ? NULL : path);
	}
	appendStringInfo(out, ",\"optional\":%s", s->required ? "false" : "true");
	if (s->type == S_STRUCT && path != NULL)
	{
		appendStringInfoString(out, ",\"name\":");
		connect_json_string(out, path, strlen(path));
	}
	if (field != NULL)
	{
		appendStringInfoString(out, ",\"field\":");
		connect_json_string(out, field, fieldlen);
	}
	appendStringInfoChar(out, '}');
}

/* ---- the value, written by its schema ------------------------------------ */

static JsonNode *
member(JsonNode *object, const char *name, int len)
{
	JsonNode   *found = NULL;

	/* Jackson keeps the last of repeated names */
	for (int i = 0; i < object->n; i++)
		if (object->names[i].len == len && memcmp(object->names[i].data, name, len) == 0)
			found = object->items[i];
	return found;
}

/*
 * A non-null value must be of its schema's own Java type (Kafka Connect
 * validates it): an int in an INT32 field, a long in INT64, a double in
 * FLOAT64.
 */
static void
write_value(Expansion *x, StringInfo out, JsonNode *node, Schema *schema)
{
	check_stack_depth();
	if (node == NULL || node->kind == J_NULL)
	{
		if (schema != NULL && schema->required)
			x->failed = true;
		appendStringInfoString(out, "null");
		return;
	}
	switch (schema->type)
	{
		case S_STRING:
			if (node->kind != J_STRING)
				break;
			connect_json_string(out, node->text.data, node->text.len);
			return;
		case S_BOOLEAN:
			if (node->kind != J_BOOL)
				break;
			appendStringInfoString(out, node->boolean ? "true" : "false");
			return;
		case S_INT32:
		case S_INT64:
			if (node->kind != (schema->type == S_INT32 ? J_INT32 : J_INT64))
				break;
			appendStringInfo(out, INT64_FORMAT, node->integer);
			return;
		case S_FLOAT64:
			if (node->kind != J_DOUBLE)
				break;
			connect_json_double(out, node->real);
			return;
		case S_BYTES:
			break;
		case S_ARRAY:
			if (node->kind != J_ARRAY)
				break;
			appendStringInfoChar(out, '[');
			for (int i = 0; i < node->n; i++)
			{
				if (i > 0)
					appendStringInfoChar(out, ',');
				write_value(x, out, node->items[i], schema->element);
			}
			appendStringInfoChar(out, ']');
			return;
		case S_STRUCT:
			if (node->kind != J_OBJECT)
				break;
			appendStringInfoChar(out, '{');
			for (int f = 0; f < schema->n; f++)
			{
				if (f > 0)
					appendStringInfoChar(out, ',');
				connect_json_string(out, schema->names[f], schema->namelens[f]);
				appendStringInfoChar(out, ':');
				write_value(x, out, member(node, schema->names[f], schema->namelens[f]),
							schema->fields[f]);
			}
			appendStringInfoChar(out, '}');
			return;
	}
	x->failed = true;
}

bool
connect_json_expand(StringInfo out, const char *text, int len, bool null_as_bytes,
					StringInfo schema_out)
{
	Parser		p = {text, len, 0, false};
	Expansion	x = {null_as_bytes, false};
	StringInfoData written;
	JsonNode   *root;
	Schema	   *schema;

	/* the router parses only what starts as an object or an array */
	if (len == 0 || (text[0] != '{' && text[0] != '['))
		return false;
	root = parse_value(&p);
	/* its structure takes an object only */
	if (root == NULL || root->kind != J_OBJECT)
		return false;
	schema = schema_of(&x, root);
	if (x.failed)
		return false;
	initStringInfo(&written);
	write_value(&x, &written, root, schema);
	if (x.failed)
		return false;
	appendBinaryStringInfo(out, written.data, written.len);
	if (schema_out != NULL)
		write_schema(schema_out, schema, NULL, 0, "payload");
	return true;
}
