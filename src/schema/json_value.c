/*
 * json_value.c
 *		JSON text as jsonb without raising an error for text that is not
 *		JSON: a worker encoding a payload must learn that an event is bad,
 *		not stop.
 */
#include "schema/json_value.h"
#include "compat.h"

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

Jsonb *
outbox_json_parse(const char *text, int len, char **error)
{
	JsonLexContext *lex;
	JsonParseErrorType result;
	MemoryContext context = CurrentMemoryContext;
	Jsonb	   *volatile json = NULL;
	char	   *copy;

	lex = compat_makeJsonLexContextCstringLen((char *) text, len, GetDatabaseEncoding(), true);
	result = pg_parse_json(lex, &nullSemAction);
	if (result != JSON_SUCCESS)
	{
		*error = json_errdetail(result, lex);
		return NULL;
	}
	/* JSON jsonb still refuses: \u0000, a number beyond numeric's range */
	copy = pnstrdup(text, len);
	PG_TRY();
	{
		json = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(copy)));
	}
	PG_CATCH();
	{
		ErrorData  *data;

		MemoryContextSwitchTo(context);
		data = CopyErrorData();
		/* only the value's faults: out of memory, a cancel go on up */
		if (ERRCODE_TO_CATEGORY(data->sqlerrcode) != ERRCODE_DATA_EXCEPTION)
			PG_RE_THROW();
		FlushErrorState();
		*error = data->detail ? psprintf("%s: %s", data->message, data->detail) :
			data->message;
	}
	PG_END_TRY();
	pfree(copy);
	return json;
}

void
outbox_json_root(Jsonb *json, JsonbValue *root)
{
	if (JB_ROOT_IS_SCALAR(json))
		JsonbExtractScalar(&json->root, root);
	else
	{
		root->type = jbvBinary;
		root->val.binary.data = &json->root;
		root->val.binary.len = VARSIZE(json) - VARHDRSZ;
	}
}

/* appended piece by piece: a format string costs more than the check */
void
outbox_json_path_key(StringInfo path, const char *name, int len)
{
	bool		plain = len > 0;

	for (int i = 0; i < len && plain; i++)
		plain = isalnum((unsigned char) name[i]) || name[i] == '_';
	appendStringInfoString(path, plain ? "." : "[\"");
	appendBinaryStringInfo(path, name, len);
	if (!plain)
		appendStringInfoString(path, "\"]");
}

void
outbox_json_path_index(StringInfo path, int index)
{
	char		digits[12];

	appendStringInfoChar(path, '[');
	appendBinaryStringInfo(path, digits, pg_ltoa(index, digits));
	appendStringInfoChar(path, ']');
}

const char *
outbox_json_type_name(const JsonbValue *value)
{
	switch (value->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "string";
		case jbvNumeric:
			return "number";
		case jbvBool:
			return "boolean";
		case jbvArray:
			return "array";
		case jbvObject:
			return "object";
		default:
			return JsonContainerIsArray(value->val.binary.data) ? "array" : "object";
	}
}
