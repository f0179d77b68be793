/*
 * json_schema.c
 *		A JSON Schema compiled into checks, and a jsonb value walked through
 *		them. Only the keywords below are checked; a schema with another one
 *		(annotations aside) does not compile, so a schema is never half
 *		checked without anyone knowing. docs/message.md lists them.
 *
 * $ref may name the root ("#") or a definition of the root
 * ("#/definitions/x", "#/$defs/x"): a definition is compiled once, when
 * first named, and may name itself.
 */
#include "schema/json_schema.h"
#include "schema/json_value.h"
#include "schema/schema_cache.h"

#include "catalog/pg_collation.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "regex/regex.h"
#include "utils/builtins.h"
#include "utils/numeric.h"

/* the instance types, as bits */
#define T_NULL		0x01
#define T_BOOLEAN	0x02
#define T_OBJECT	0x04
#define T_ARRAY		0x08
#define T_NUMBER	0x10
#define T_INTEGER	0x20
#define T_STRING	0x40

static const struct
{
	const char *name;
	int			bit;
}			type_names[] = {
	{"null", T_NULL}, {"boolean", T_BOOLEAN}, {"object", T_OBJECT},
	{"array", T_ARRAY}, {"number", T_NUMBER}, {"integer", T_INTEGER},
	{"string", T_STRING}
};

typedef struct Check Check;

typedef struct Property
{
	char	   *name;
	Check	   *schema;
} Property;

typedef struct CheckList
{
	int			n;
	Check	  **nodes;
} CheckList;

struct Check
{
	bool		never;			/* the schema false */
	int			types;			/* T_* bits, 0: any */
	int			n_required;
	char	  **required;
	int			n_properties;
	Property   *properties;
	bool		closed;			/* additionalProperties: false */
	Check	   *additional;		/* additionalProperties: a schema */
	Check	   *items;
	int			min_items,
				max_items;		/* -1: none */
	int			n_enum;
	JsonbValue *enum_values;	/* into the schema's jsonb, which the entry keeps */
	JsonbValue *constant;
	Numeric		minimum,
				maximum,
				exclusive_minimum,
				exclusive_maximum;
	int			min_length,
				max_length;		/* in characters, -1: none */
	text	   *pattern;
	const char *ref;			/* as written */
	Check	   *ref_target;
	CheckList	all_of,
				any_of,
				one_of;
	Check	   *not;
};

/* keywords that say nothing about a value: accepted, not checked */
static const char *const annotations[] = {
	"$schema", "$id", "id", "$comment", "title", "description", "default",
	"examples", "readOnly", "writeOnly", "deprecated", "format",
	"definitions", "$defs", "contentEncoding", "contentMediaType"
};

typedef struct Compiler
{
	JsonbValue	root;
	char	   *error;
	List	   *refs;			/* nodes whose $ref is still to resolve */
	List	   *defined;		/* "#/definitions/x" strings, then their nodes */
	List	   *defined_nodes;
} Compiler;

static Check *compile_node(Compiler *c, JsonbValue *schema, const char *where);

static void
fail(Compiler *c, const char *where, const char *reason)
{
	if (c->error == NULL)
		c->error = psprintf("At %s: %s.", where, reason);
}

static bool
is_object(const JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsObject(v->val.binary.data);
}

static bool
is_array(const JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data);
}

static char *
string_of(const JsonbValue *v)
{
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* the elements of an array value, or the value alone */
static List *
elements_of(JsonbValue *v)
{
	List	   *list = NIL;
	JsonbIterator *it;
	JsonbValue	element;
	JsonbIteratorToken token;

	if (!is_array(v))
		return list_make1(v);
	it = JsonbIteratorInit(v->val.binary.data);
	while ((token = JsonbIteratorNext(&it, &element, true)) != WJB_DONE)
		if (token == WJB_ELEM)
			list = lappend(list, memcpy(palloc(sizeof(JsonbValue)), &element, sizeof(JsonbValue)));
	return list;
}

static void
compile_type(Compiler *c, Check *n, JsonbValue *v, const char *where)
{
	ListCell   *cell;

	foreach(cell, elements_of(v))
	{
		JsonbValue *name = lfirst(cell);
		int			bit = 0;

		for (size_t i = 0; i < lengthof(type_names) && name->type == jbvString; i++)
			if (strlen(type_names[i].name) == (size_t) name->val.string.len &&
				memcmp(type_names[i].name, name->val.string.val, name->val.string.len) == 0)
				bit = type_names[i].bit;
		if (bit == 0)
			fail(c, where, "\"type\" must name JSON Schema types");
		n->types |= bit;
	}
}

static void
compile_required(Compiler *c, Check *n, JsonbValue *v, const char *where)
{
	List	   *names = elements_of(v);
	ListCell   *cell;

	if (!is_array(v))
		fail(c, where, "\"required\" must be an array of strings");
	n->required = palloc(sizeof(char *) * (list_length(names) + 1));
	foreach(cell, names)
	{
		JsonbValue *name = lfirst(cell);

		if (name->type != jbvString)
			fail(c, where, "\"required\" must be an array of strings");
		else
			n->required[n->n_required++] = string_of(name);
	}
}

static int
property_order(const void *a, const void *b)
{
	return strcmp(((const Property *) a)->name, ((const Property *) b)->name);
}

static void
compile_properties(Compiler *c, Check *n, JsonbValue *v, const char *where)
{
	JsonbIterator *it;
	JsonbValue	element;
	JsonbIteratorToken token;
	char	   *name = NULL;

	if (!is_object(v))
	{
		fail(c, where, "\"properties\" must be an object");
		return;
	}
	n->properties = palloc(sizeof(Property) * (JsonContainerSize(v->val.binary.data) + 1));
	it = JsonbIteratorInit(v->val.binary.data);
	while ((token = JsonbIteratorNext(&it, &element, true)) != WJB_DONE)
	{
		if (token == WJB_KEY)
			name = string_of(&element);
		else if (token == WJB_VALUE)
		{
			Property   *p = &n->properties[n->n_properties++];

			p->name = name;
			p->schema = compile_node(c, &element, psprintf("%s/properties/%s", where, name));
		}
	}
	qsort(n->properties, n->n_properties, sizeof(Property), property_order);
}

static void
compile_list(Compiler *c, CheckList *list, JsonbValue *v, const char *where, const char *keyword)
{
	List	   *schemas = elements_of(v);
	ListCell   *cell;

	if (!is_array(v) || list_length(schemas) == 0)
	{
		fail(c, where, psprintf("\"%s\" must be a non-empty array of schemas", keyword));
		return;
	}
	list->nodes = palloc(sizeof(Check *) * list_length(schemas));
	foreach(cell, schemas)
	{
		list->nodes[list->n] = compile_node(c, lfirst(cell),
											psprintf("%s/%s/%d", where, keyword, list->n));
		list->n++;
	}
}

static void
compile_enum(Compiler *c, Check *n, JsonbValue *v, const char *where)
{
	List	   *values = elements_of(v);
	ListCell   *cell;

	if (!is_array(v) || list_length(values) == 0)
	{
		fail(c, where, "\"enum\" must be a non-empty array");
		return;
	}
	n->enum_values = palloc(sizeof(JsonbValue) * list_length(values));
	foreach(cell, values)
		n->enum_values[n->n_enum++] = *(JsonbValue *) lfirst(cell);
}

static Numeric
number_of(Compiler *c, JsonbValue *v, const char *where, const char *keyword)
{
	if (v->type != jbvNumeric)
	{
		fail(c, where, psprintf("\"%s\" must be a number%s", keyword,
								v->type == jbvBool ? " (the boolean form of draft 4 is not checked)" : ""));
		return NULL;
	}
	return v->val.numeric;
}

static int
count_of(Compiler *c, JsonbValue *v, const char *where, const char *keyword)
{
	if (v->type != jbvNumeric ||
		!DatumGetBool(DirectFunctionCall2(numeric_ge, NumericGetDatum(v->val.numeric),
										  NumericGetDatum(int64_to_numeric(0)))) ||
		!DatumGetBool(DirectFunctionCall2(numeric_le, NumericGetDatum(v->val.numeric),
										  NumericGetDatum(int64_to_numeric(PG_INT32_MAX)))))
	{
		fail(c, where, psprintf("\"%s\" must be a non-negative integer", keyword));
		return -1;
	}
	return DatumGetInt32(DirectFunctionCall1(numeric_int4, NumericGetDatum(v->val.numeric)));
}

static void
compile_pattern(Compiler *c, Check *n, JsonbValue *v, const char *where)
{
	if (v->type != jbvString)
	{
		fail(c, where, "\"pattern\" must be a string");
		return;
	}
	n->pattern = cstring_to_text_with_len(v->val.string.val, v->val.string.len);
	/* a pattern that is not a regular expression is refused here */
	(void) RE_compile_and_execute(n->pattern, "", 0, REG_ADVANCED, C_COLLATION_OID, 0, NULL);
}

static void
compile_ref(Compiler *c, Check *n, JsonbValue *v, const char *where)
{
	if (v->type != jbvString)
	{
		fail(c, where, "\"$ref\" must be a string");
		return;
	}
	n->ref = string_of(v);
	c->refs = lappend(c->refs, n);
}

static bool
is_annotation(const char *keyword)
{
	for (size_t i = 0; i < lengthof(annotations); i++)
		if (strcmp(annotations[i], keyword) == 0)
			return true;
	return false;
}

/* one keyword of a schema object */
static void
compile_keyword(Compiler *c, Check *n, const char *k, JsonbValue *v, const char *where)
{
	if (strcmp(k, "type") == 0)
		compile_type(c, n, v, where);
	else if (strcmp(k, "required") == 0)
		compile_required(c, n, v, where);
	else if (strcmp(k, "properties") == 0)
		compile_properties(c, n, v, where);
	else if (strcmp(k, "additionalProperties") == 0 && v->type == jbvBool && !v->val.boolean)
		n->closed = true;
	else if (strcmp(k, "additionalProperties") == 0)
		n->additional = compile_node(c, v, psprintf("%s/additionalProperties", where));
	else if (strcmp(k, "items") == 0 && !is_array(v))
		n->items = compile_node(c, v, psprintf("%s/items", where));
	else if (strcmp(k, "minItems") == 0)
		n->min_items = count_of(c, v, where, k);
	else if (strcmp(k, "maxItems") == 0)
		n->max_items = count_of(c, v, where, k);
	else if (strcmp(k, "enum") == 0)
		compile_enum(c, n, v, where);
	else if (strcmp(k, "const") == 0)
		n->constant = memcpy(palloc(sizeof(JsonbValue)), v, sizeof(JsonbValue));
	else if (strcmp(k, "minimum") == 0)
		n->minimum = number_of(c, v, where, k);
	else if (strcmp(k, "maximum") == 0)
		n->maximum = number_of(c, v, where, k);
	else if (strcmp(k, "exclusiveMinimum") == 0)
		n->exclusive_minimum = number_of(c, v, where, k);
	else if (strcmp(k, "exclusiveMaximum") == 0)
		n->exclusive_maximum = number_of(c, v, where, k);
	else if (strcmp(k, "minLength") == 0)
		n->min_length = count_of(c, v, where, k);
	else if (strcmp(k, "maxLength") == 0)
		n->max_length = count_of(c, v, where, k);
	else if (strcmp(k, "pattern") == 0)
		compile_pattern(c, n, v, where);
	else if (strcmp(k, "$ref") == 0)
		compile_ref(c, n, v, where);
	else if (strcmp(k, "allOf") == 0)
		compile_list(c, &n->all_of, v, where, k);
	else if (strcmp(k, "anyOf") == 0)
		compile_list(c, &n->any_of, v, where, k);
	else if (strcmp(k, "oneOf") == 0)
		compile_list(c, &n->one_of, v, where, k);
	else if (strcmp(k, "not") == 0)
		n->not = compile_node(c, v, psprintf("%s/not", where));
	else if (!is_annotation(k))
		fail(c, where, psprintf("keyword \"%s\" is not checked by pg_outbox%s", k,
								strcmp(k, "items") == 0 ? " in its array (tuple) form" : ""));
}

static Check *
compile_node(Compiler *c, JsonbValue *schema, const char *where)
{
	Check	   *n = palloc0(sizeof(Check));
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken token;
	char	   *keyword = NULL;

	check_stack_depth();
	n->min_items = n->max_items = n->min_length = n->max_length = -1;
	if (schema->type == jbvBool)
	{
		n->never = !schema->val.boolean;
		return n;
	}
	if (!is_object(schema))
	{
		fail(c, where, "a schema must be an object or a boolean");
		return n;
	}
	it = JsonbIteratorInit(schema->val.binary.data);
	while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (token == WJB_KEY)
			keyword = string_of(&v);
		else if (token == WJB_VALUE)
			compile_keyword(c, n, keyword, &v, where);
	}
	return n;
}

/* the schema a $ref names, compiled once */
static Check *
definition(Compiler *c, const char *ref)
{
	const char *name;
	const char *section;
	JsonbValue *defs;
	JsonbValue *target;
	JsonbValue	key;
	ListCell   *a,
			   *b;
	Check	   *n;

	forboth(a, c->defined, b, c->defined_nodes)
	{
		if (strcmp(lfirst(a), ref) == 0)
			return lfirst(b);
	}
	if (strncmp(ref, "#/definitions/", 14) == 0)
		section = "definitions", name = ref + 14;
	else if (strncmp(ref, "#/$defs/", 8) == 0)
		section = "$defs", name = ref + 8;
	else
		return NULL;
	if (strchr(name, '/') != NULL || strchr(name, '~') != NULL || strchr(name, '%') != NULL)
		return NULL;
	defs = getKeyJsonValueFromContainer(c->root.val.binary.data, section, strlen(section), NULL);
	if (defs == NULL || !is_object(defs))
		return NULL;
	key.type = jbvString;
	key.val.string.val = (char *) name;
	key.val.string.len = strlen(name);
	target = findJsonbValueFromContainer(defs->val.binary.data, JB_FOBJECT, &key);
	if (target == NULL)
		return NULL;
	n = compile_node(c, target, ref);
	c->defined = lappend(c->defined, pstrdup(ref));
	c->defined_nodes = lappend(c->defined_nodes, n);
	return n;
}

static void
resolve_refs(Compiler *c)
{
	/* a definition compiled here may add refs: the list grows as it is read */
	for (int i = 0; i < list_length(c->refs) && c->error == NULL; i++)
	{
		Check	   *n = list_nth(c->refs, i);

		n->ref_target = definition(c, n->ref);
		if (n->ref_target == NULL && c->error == NULL)
			c->error = psprintf("$ref \"%s\" is not checked by pg_outbox: it must name \"#\", \"#/definitions/<name>\" or \"#/$defs/<name>\" of this schema.",
								n->ref);
	}
}

static void *
compile(const char *text, char **error)
{
	Compiler	c = {0};
	Jsonb	   *json = outbox_json_parse(text, strlen(text), error);
	Check	   *root;

	if (json == NULL)
		return NULL;
	outbox_json_root(json, &c.root);
	if (c.root.type != jbvBool && !is_object(&c.root))
	{
		*error = pstrdup("A JSON Schema must be an object or a boolean.");
		return NULL;
	}
	root = compile_node(&c, &c.root, "#");
	c.defined = list_make1(pstrdup("#"));
	c.defined_nodes = list_make1(root);
	if (c.error == NULL && is_object(&c.root))
		resolve_refs(&c);
	if (c.error != NULL)
	{
		*error = c.error;
		return NULL;
	}
	return root;
}

static SchemaCache compiled = {.name = "outbox JSON Schemas", .compile = compile};

char *
outbox_json_schema_refusal(const char *schema_text)
{
	char	   *error = NULL;

	return outbox_schema_cache_get(&compiled, schema_text, &error) ? NULL : error;
}

/* ---- the check ---------------------------------------------------------- */

typedef struct Walk
{
	StringInfoData path;
	char	   *reason;
} Walk;

static bool fits(const Check *n, JsonbValue *v, Walk *w);

static bool
refuse(Walk *w, const char *reason)
{
	w->reason = (char *) reason;
	return false;
}

static int
compare(Numeric a, Numeric b)
{
	return DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(a), NumericGetDatum(b)));
}

static bool
is_integral(Numeric n)
{
	Datum		truncated;

	/* no digits after the point: the common case, without a new numeric */
	if (DatumGetInt32(DirectFunctionCall1(numeric_scale, NumericGetDatum(n))) == 0)
		return true;
	truncated = DirectFunctionCall2(numeric_trunc, NumericGetDatum(n), Int32GetDatum(0));
	return compare(n, DatumGetNumeric(truncated)) == 0;
}

static char *
wanted_types(int types)
{
	StringInfoData s;

	initStringInfo(&s);
	for (size_t i = 0; i < lengthof(type_names); i++)
		if (types & type_names[i].bit)
			appendStringInfo(&s, "%s%s", s.len ? " or " : "", type_names[i].name);
	return s.data;
}

static bool
fits_type(const Check *n, JsonbValue *v, Walk *w)
{
	int			is;

	switch (v->type)
	{
		case jbvNull:
			is = T_NULL;
			break;
		case jbvBool:
			is = T_BOOLEAN;
			break;
		case jbvString:
			is = T_STRING;
			break;
		case jbvNumeric:
			is = T_NUMBER;
			if ((n->types & (T_INTEGER | T_NUMBER)) == T_INTEGER && is_integral(v->val.numeric))
				is |= T_INTEGER;
			break;
		default:
			is = is_array(v) ? T_ARRAY : T_OBJECT;
			break;
	}
	if (n->types & is)
		return true;
	if (is == T_NUMBER && (n->types & T_INTEGER))
		return refuse(w, psprintf("is a number with a fraction, the schema wants %s",
								  wanted_types(n->types)));
	return refuse(w, psprintf("is %s %s, the schema wants %s",
							  is == T_OBJECT || is == T_ARRAY ? "an" : "a",
							  outbox_json_type_name(v), wanted_types(n->types)));
}

/* JSON equality: 1 equals 1.0; objects whatever their keys' order */
static bool
equals(const JsonbValue *expected, const JsonbValue *v)
{
	if (expected->type != v->type)
		return false;
	switch (v->type)
	{
		case jbvNull:
			return true;
		case jbvBool:
			return expected->val.boolean == v->val.boolean;
		case jbvString:
			return expected->val.string.len == v->val.string.len &&
				memcmp(expected->val.string.val, v->val.string.val, v->val.string.len) == 0;
		case jbvNumeric:
			return compare(expected->val.numeric, v->val.numeric) == 0;
		default:
			return compareJsonbContainers(expected->val.binary.data, v->val.binary.data) == 0;
	}
}

static bool
fits_values(const Check *n, JsonbValue *v, Walk *w)
{
	bool		found = false;

	if (n->constant && !equals(n->constant, v))
		return refuse(w, "is not the schema's const");
	for (int i = 0; i < n->n_enum && !found; i++)
		found = equals(&n->enum_values[i], v);
	if (n->n_enum > 0 && !found)
		return refuse(w, "is none of the schema's enum values");
	return true;
}

static bool
refuse_number(Walk *w, Numeric x, const char *relation, const char *keyword, Numeric bound)
{
	return refuse(w, psprintf("is %s, %s the %s %s", numeric_normalize(x), relation, keyword,
							  numeric_normalize(bound)));
}

static bool
fits_number(const Check *n, Numeric x, Walk *w)
{
	if (n->minimum && compare(x, n->minimum) < 0)
		return refuse_number(w, x, "below", "minimum", n->minimum);
	if (n->maximum && compare(x, n->maximum) > 0)
		return refuse_number(w, x, "above", "maximum", n->maximum);
	if (n->exclusive_minimum && compare(x, n->exclusive_minimum) <= 0)
		return refuse_number(w, x, "not above", "exclusiveMinimum", n->exclusive_minimum);
	if (n->exclusive_maximum && compare(x, n->exclusive_maximum) >= 0)
		return refuse_number(w, x, "not below", "exclusiveMaximum", n->exclusive_maximum);
	return true;
}

static bool
fits_string(const Check *n, JsonbValue *v, Walk *w)
{
	int			length;

	if (n->min_length >= 0 || n->max_length >= 0)
	{
		length = pg_mbstrlen_with_len(v->val.string.val, v->val.string.len);
		if (length < n->min_length)
			return refuse(w, psprintf("is %d characters long, below the minLength %d",
									  length, n->min_length));
		if (n->max_length >= 0 && length > n->max_length)
			return refuse(w, psprintf("is %d characters long, above the maxLength %d",
									  length, n->max_length));
	}
	if (n->pattern &&
		!RE_compile_and_execute(n->pattern, v->val.string.val, v->val.string.len,
								REG_ADVANCED, C_COLLATION_OID, 0, NULL))
		return refuse(w, psprintf("does not match the pattern \"%s\"", text_to_cstring(n->pattern)));
	return true;
}

/* descends into a property or an element: the path grows, and shrinks back if it fits */
static bool
fits_at(const Check *n, JsonbValue *v, Walk *w, const char *name, int index)
{
	int			len = w->path.len;

	if (name == NULL)
		outbox_json_path_index(&w->path, index);
	else
		outbox_json_path_key(&w->path, name, strlen(name));
	if (!fits(n, v, w))
		return false;
	w->path.len = len;
	w->path.data[len] = '\0';
	return true;
}

static const Property *
property(const Check *n, const char *name)
{
	Property	key = {.name = (char *) name};

	return bsearch(&key, n->properties, n->n_properties, sizeof(Property), property_order);
}

static bool
fits_object(const Check *n, JsonbValue *v, Walk *w)
{
	JsonbContainer *object = v->val.binary.data;
	JsonbIterator *it = JsonbIteratorInit(object);
	JsonbValue	element;
	JsonbIteratorToken token;
	char	   *name = NULL;

	for (int i = 0; i < n->n_required; i++)
		if (getKeyJsonValueFromContainer(object, n->required[i], strlen(n->required[i]), NULL) == NULL)
			return refuse(w, psprintf("lacks the required property \"%s\"", n->required[i]));
	while ((token = JsonbIteratorNext(&it, &element, true)) != WJB_DONE)
	{
		const Property *p;

		if (token == WJB_KEY)
		{
			name = string_of(&element);
			continue;
		}
		if (token != WJB_VALUE)
			continue;
		p = property(n, name);
		if (p == NULL && n->closed)
			return refuse(w, psprintf("has the property \"%s\", which the schema does not allow (additionalProperties is false)", name));
		if (!fits_at(p ? p->schema : n->additional, &element, w, name, 0))
			return false;
	}
	return true;
}

static bool
fits_array(const Check *n, JsonbValue *v, Walk *w)
{
	int			count = JsonContainerSize(v->val.binary.data);
	JsonbIterator *it;
	JsonbValue	element;
	JsonbIteratorToken token;
	int			i = 0;

	if (count < n->min_items)
		return refuse(w, psprintf("has %d items, below the minItems %d", count, n->min_items));
	if (n->max_items >= 0 && count > n->max_items)
		return refuse(w, psprintf("has %d items, above the maxItems %d", count, n->max_items));
	if (n->items == NULL)
		return true;
	it = JsonbIteratorInit(v->val.binary.data);
	while ((token = JsonbIteratorNext(&it, &element, true)) != WJB_DONE)
		if (token == WJB_ELEM && !fits_at(n->items, &element, w, NULL, i++))
			return false;
	return true;
}

/* whether the value fits, the walk left as it was */
static bool
fits_quietly(const Check *n, JsonbValue *v, Walk *w)
{
	int			len = w->path.len;
	bool		fit = fits(n, v, w);

	w->path.len = len;
	w->path.data[len] = '\0';
	return fit;
}

static int
count_fits(const CheckList *list, JsonbValue *v, Walk *w)
{
	int			count = 0;

	for (int i = 0; i < list->n; i++)
		count += fits_quietly(list->nodes[i], v, w);
	return count;
}

static bool
fits_combined(const Check *n, JsonbValue *v, Walk *w)
{
	int			count;

	for (int i = 0; i < n->all_of.n; i++)
		if (!fits(n->all_of.nodes[i], v, w))
			return false;
	if (n->any_of.n > 0 && count_fits(&n->any_of, v, w) == 0)
		return refuse(w, psprintf("fits none of the %d schemas of anyOf", n->any_of.n));
	if (n->one_of.n > 0 && (count = count_fits(&n->one_of, v, w)) != 1)
		return refuse(w, psprintf("fits %d of the %d schemas of oneOf, not exactly one",
								  count, n->one_of.n));
	if (n->not && fits_quietly(n->not, v, w))
		return refuse(w, "fits the schema of not");
	return true;
}

static bool
fits(const Check *n, JsonbValue *v, Walk *w)
{
	check_stack_depth();
	if (n == NULL)
		return true;
	if (n->never)
		return refuse(w, "is not allowed by the schema (false)");
	if (n->ref_target && !fits(n->ref_target, v, w))
		return false;
	if (n->types && !fits_type(n, v, w))
		return false;
	if (!fits_values(n, v, w))
		return false;
	if (v->type == jbvNumeric && !fits_number(n, v->val.numeric, w))
		return false;
	if (v->type == jbvString && !fits_string(n, v, w))
		return false;
	if (is_object(v) && !fits_object(n, v, w))
		return false;
	if (is_array(v) && !fits_array(n, v, w))
		return false;
	return fits_combined(n, v, w);
}

bool
outbox_json_schema_fits(const char *schema_text, Jsonb *value, char **path, char **reason)
{
	char	   *error = NULL;
	Check	   *root = outbox_schema_cache_get(&compiled, schema_text, &error);
	Walk		w;
	JsonbValue	v;

	if (root == NULL)
	{
		*path = NULL;
		*reason = error;
		return false;
	}
	initStringInfo(&w.path);
	appendStringInfoChar(&w.path, '$');
	outbox_json_root(value, &v);
	if (fits(root, &v, &w))
		return true;
	*path = w.path.data;
	*reason = w.reason;
	return false;
}
