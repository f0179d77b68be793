/*
 * tracing.c
 *		Carries the sending application's W3C trace context into an event's
 *		headers when the event is written (never when it is delivered): from
 *		outbox.traceparent and outbox.tracestate (meant for SET LOCAL), or,
 *		when neither is set, from a SQLCommenter comment in the statement
 *		that sent it, which ORMs and OpenTelemetry's SQL instrumentation
 *		already add (traceparent='00-<trace>-<span>-01' in a C-style comment
 *		of the statement). So a traced application gets its traces through
 *		Kafka with no change of its own.
 */
#include "send/tracing.h"
#include "compat.h"

#include <ctype.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define TRACEPARENT_LENGTH 55
#define TRACESTATE_MAX_LENGTH 512
#define TRACESTATE_MAX_MEMBERS 32

char	   *outbox_traceparent = NULL;
char	   *outbox_tracestate = NULL;

static bool
is_lower_hex(const char *s, int n)
{
	for (int i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static bool
all_zeros(const char *s, int n)
{
	for (int i = 0; i < n; i++)
		if (s[i] != '0')
			return false;
	return true;
}

/*
 * version-traceid-parentid-flags, lower-case hex; version ff and all-zero
 * ids are invalid; version 00 is exactly 55 characters, a later version
 * may add fields after a dash.
 */
static bool
valid_traceparent(const char *v)
{
	size_t		len = strlen(v);

	if (len < TRACEPARENT_LENGTH || !is_lower_hex(v, 2) || strncmp(v, "ff", 2) == 0)
		return false;
	if (v[2] != '-' || v[35] != '-' || v[52] != '-')
		return false;
	if (!is_lower_hex(v + 3, 32) || all_zeros(v + 3, 32) ||
		!is_lower_hex(v + 36, 16) || all_zeros(v + 36, 16) ||
		!is_lower_hex(v + 53, 2))
		return false;
	if (strncmp(v, "00", 2) == 0)
		return len == TRACEPARENT_LENGTH;
	return len == TRACEPARENT_LENGTH || v[TRACEPARENT_LENGTH] == '-';
}

static bool
valid_tracestate_key(const char *key, int len)
{
	if (len < 1 || len > 256 || !((key[0] >= 'a' && key[0] <= 'z') || (key[0] >= '0' && key[0] <= '9')))
		return false;
	for (int i = 1; i < len; i++)
	{
		char		c = key[i];

		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			  c == '_' || c == '-' || c == '*' || c == '/' || c == '@'))
			return false;
	}
	return true;
}

static bool
valid_tracestate_value(const char *value, int len)
{
	if (len < 1 || len > 256 || value[len - 1] == ' ')
		return false;
	for (int i = 0; i < len; i++)
		if (value[i] < 0x20 || value[i] > 0x7e || value[i] == ',' || value[i] == '=')
			return false;
	return true;
}

/* key=value members separated by commas (blanks around them allowed). */
static bool
valid_tracestate(const char *v)
{
	int			members = 0;
	const char *p = v;

	if (strlen(v) > TRACESTATE_MAX_LENGTH)
		return false;
	while (*p)
	{
		const char *end = strchr(p, ',');
		const char *eq;
		int			len;

		if (end == NULL)
			end = p + strlen(p);
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		len = end - p;
		while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len > 0)
		{
			eq = memchr(p, '=', len);
			if (eq == NULL || !valid_tracestate_key(p, eq - p) ||
				!valid_tracestate_value(eq + 1, len - (eq - p) - 1) ||
				++members > TRACESTATE_MAX_MEMBERS)
				return false;
		}
		p = (*end == ',') ? end + 1 : end;
	}
	return true;
}

static bool
check_traceparent(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || **newval == '\0' || valid_traceparent(*newval))
		return true;
	GUC_check_errdetail("A W3C traceparent is 00-<32 hex digits>-<16 hex digits>-<2 hex digits>, lower case, ids not all zeros.");
	return false;
}

static bool
check_tracestate(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || **newval == '\0' || valid_tracestate(*newval))
		return true;
	GUC_check_errdetail("A W3C tracestate is up to 32 key=value members separated by commas, at most 512 characters.");
	return false;
}

void
outbox_define_tracing_settings(void)
{
	DefineCustomStringVariable("outbox.traceparent",
							   "W3C traceparent header of the events this session sends.",
							   "Meant for SET LOCAL; an event's own traceparent header wins.",
							   &outbox_traceparent, "", PGC_USERSET, 0,
							   check_traceparent, NULL, NULL);
	DefineCustomStringVariable("outbox.tracestate",
							   "W3C tracestate header of the events this session sends.",
							   "Sent with outbox.traceparent.",
							   &outbox_tracestate, "", PGC_USERSET, 0,
							   check_tracestate, NULL, NULL);
}

/* ---- SQLCommenter ---------------------------------------------------- */

static int
hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * The URL-decoded value of name='...' inside the comment [from, to), or
 * NULL. SQLCommenter URL-encodes values and quotes them with '.
 */
static char *
comment_value(const char *from, const char *to, const char *name)
{
	size_t		namelen = strlen(name);

	for (const char *p = from; p + namelen + 2 < to; p++)
	{
		StringInfoData value;
		const char *q;

		if (strncmp(p, name, namelen) != 0 || p[namelen] != '=' || p[namelen + 1] != '\'' ||
			(p > from && (isalnum((unsigned char) p[-1]) || p[-1] == '_')))
			continue;
		initStringInfo(&value);
		for (q = p + namelen + 2; q < to && *q != '\''; q++)
		{
			if (*q == '%' && q + 2 < to && hex_digit(q[1]) >= 0 && hex_digit(q[2]) >= 0)
			{
				appendStringInfoChar(&value, (char) (hex_digit(q[1]) * 16 + hex_digit(q[2])));
				q += 2;
			}
			else
				appendStringInfoChar(&value, *q);
		}
		if (q < to)
			return value.data;
		pfree(value.data);
	}
	return NULL;
}

typedef struct TraceContext
{
	char		traceparent[TRACEPARENT_LENGTH + 64];
	char		tracestate[TRACESTATE_MAX_LENGTH + 1];
} TraceContext;

/* The first valid traceparent in a comment of the statement, with its tracestate. */
static bool
parse_statement_comments(const char *query, TraceContext *found)
{
	const char *p = query;

	while ((p = strstr(p, "/*")) != NULL)
	{
		const char *end = strstr(p + 2, "*/");
		char	   *traceparent;
		char	   *tracestate;

		if (end == NULL)
			return false;
		traceparent = comment_value(p + 2, end, "traceparent");
		if (traceparent != NULL && strlen(traceparent) < sizeof(found->traceparent) &&
			valid_traceparent(traceparent))
		{
			strlcpy(found->traceparent, traceparent, sizeof(found->traceparent));
			tracestate = comment_value(p + 2, end, "tracestate");
			found->tracestate[0] = '\0';
			if (tracestate != NULL && valid_tracestate(tracestate))
				strlcpy(found->tracestate, tracestate, sizeof(found->tracestate));
			return true;
		}
		p = end + 2;
	}
	return false;
}

/*
 * The trace context of the statement running now. A statement that sends
 * many events (INSERT ... SELECT with a capture trigger) is parsed once.
 */
static bool
statement_trace_context(TraceContext *context)
{
	static const char *parsed_query = NULL;
	static TimestampTz parsed_at = 0;
	static bool parsed_found = false;
	static TraceContext parsed;
	TimestampTz started = GetCurrentStatementStartTimestamp();

	if (debug_query_string == NULL)
		return false;
	if (debug_query_string != parsed_query || started != parsed_at)
	{
		parsed_found = strstr(debug_query_string, "traceparent=") != NULL &&
			parse_statement_comments(debug_query_string, &parsed);
		parsed_query = debug_query_string;
		parsed_at = started;
	}
	if (parsed_found)
		*context = parsed;
	return parsed_found;
}

/* ---- headers ----------------------------------------------------------- */

static bool
has_header(Jsonb *headers, const char *name)
{
	return headers != NULL &&
		getKeyJsonValueFromContainer(&headers->root, name, strlen(name), NULL) != NULL;
}

static void
push_string(compat_jsonb_build *state, JsonbIteratorToken token, const char *s)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = (char *) s;
	v.val.string.len = strlen(s);
	compat_pushJsonbValue(state, token, &v);
}

Jsonb *
outbox_add_trace_context(Jsonb *headers)
{
	TraceContext context;
	compat_jsonb_build state = COMPAT_JSONB_BUILD_INIT;
	JsonbValue *result;
	bool		add_state;

	if (has_header(headers, "traceparent"))
		return headers;
	if (outbox_traceparent != NULL && outbox_traceparent[0] != '\0')
	{
		strlcpy(context.traceparent, outbox_traceparent, sizeof(context.traceparent));
		strlcpy(context.tracestate, outbox_tracestate ? outbox_tracestate : "",
				sizeof(context.tracestate));
	}
	else if (!statement_trace_context(&context))
		return headers;

	compat_pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	if (headers != NULL)
	{
		JsonbIterator *it = JsonbIteratorInit(&headers->root);
		JsonbValue	v;
		JsonbIteratorToken token;

		while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
			if (token == WJB_KEY || token == WJB_VALUE)
				compat_pushJsonbValue(&state, token, &v);
	}
	push_string(&state, WJB_KEY, "traceparent");
	push_string(&state, WJB_VALUE, context.traceparent);
	add_state = context.tracestate[0] != '\0' && !has_header(headers, "tracestate");
	if (add_state)
	{
		push_string(&state, WJB_KEY, "tracestate");
		push_string(&state, WJB_VALUE, context.tracestate);
	}
	result = compat_pushJsonbEnd(&state, WJB_END_OBJECT);
	return JsonbValueToJsonb(result);
}
