/*
 * registry_client.c
 *		The workers' HTTP client of the Schema Registry, on libcurl: three
 *		calls of Confluent's REST API, the URL list with its fail-over (the
 *		last URL that answered is tried first), authentication, TLS and the
 *		time-outs. Whose fault a failure is (an outage or the registry's
 *		refusal) is decided here, once, for every caller.
 *
 * libcurl runs on the calling thread: its callbacks only copy bytes into
 * malloc'd memory and read the stop flag, never elog. Every request is
 * bounded by outbox.schema_registry_timeout per URL and ends early once
 * the worker is asked to stop (the progress callback). No secret reaches
 * an error text: URLs are shown without their user information, and the
 * registry's own message is all of its answer that is quoted.
 */
#include "schema/registry_client.h"
#include "schema/json_value.h"
#include "secrets_file.h"
#include "stop.h"

#include <curl/curl.h>

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

OUTBOX_REGISTRY_SETTINGS(OUTBOX_SETTING_VARIABLE_STRING, OUTBOX_SETTING_VARIABLE_INT,
						 OUTBOX_SETTING_VARIABLE_BOOL, OUTBOX_SETTING_VARIABLE_ENUM)

#define REGISTRY_CONTENT_TYPE "application/vnd.schemaregistry.v1+json"

/* A registry's answer larger than this is not one. */
#define MAX_ANSWER_BYTES (64 * 1024 * 1024)

/* The registry's message quoted in an error, at most. */
#define MAX_QUOTED_MESSAGE 300

static CURL *curl = NULL;
static int	last_good_url = 0;

/* What libcurl's write callback gathers: malloc'd, so it never elogs. */
typedef struct Answer
{
	char	   *data;
	size_t		len;
	size_t		cap;
	bool		too_large;
} Answer;

static size_t
gather(char *ptr, size_t size, size_t nmemb, void *arg)
{
	Answer	   *answer = arg;
	size_t		n = size * nmemb;

	if (answer->len + n + 1 > answer->cap)
	{
		size_t		cap = Max(answer->cap * 2, answer->len + n + 1);
		char	   *data;

		if (cap > MAX_ANSWER_BYTES || (data = realloc(answer->data, cap)) == NULL)
		{
			answer->too_large = true;
			return 0;
		}
		answer->data = data;
		answer->cap = cap;
	}
	memcpy(answer->data + answer->len, ptr, n);
	answer->len += n;
	answer->data[answer->len] = '\0';
	return n;
}

/* A stop request ends the transfer at once. */
static int
progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	return outbox_stop_requested() ? 1 : 0;
}

/* The easy handle, made once per process; its connections are kept. */
static bool
ensure_curl(char **error)
{
	static bool global_done = false;

	if (!global_done)
	{
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		{
			*error = pstrdup("libcurl could not be initialised");
			return false;
		}
		global_done = true;
	}
	if (curl == NULL && (curl = curl_easy_init()) == NULL)
	{
		*error = pstrdup("libcurl could not make a handle");
		return false;
	}
	return true;
}

/* A URL as an error may show it: without "user:password@". */
static char *
shown_url(const char *url)
{
	const char *host = strstr(url, "://");
	const char *at;
	const char *slash;

	host = host ? host + 3 : url;
	at = strchr(host, '@');
	slash = strchr(host, '/');
	if (at == NULL || (slash != NULL && slash < at))
		return pstrdup(url);
	return psprintf("%.*s%s", (int) (host - url), url, at + 1);
}

/* The URLs of the setting, trimmed, without a trailing slash. */
static List *
registry_urls(void)
{
	List	   *urls = NIL;
	char	   *copy = pstrdup(outbox_schema_registry_url ? outbox_schema_registry_url : "");
	char	   *save = NULL;

	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
	{
		int			len;

		while (*tok == ' ' || *tok == '\t')
			tok++;
		len = strlen(tok);
		while (len > 0 && (tok[len - 1] == ' ' || tok[len - 1] == '\t' || tok[len - 1] == '/'))
			len--;
		if (len > 0)
			urls = lappend(urls, pnstrdup(tok, len));
	}
	return urls;
}

static bool
check_registry_url(char **newval, void **extra, GucSource source)
{
	char	   *copy = pstrdup(*newval ? *newval : "");
	char	   *save = NULL;

	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
	{
		while (*tok == ' ' || *tok == '\t')
			tok++;
		if (*tok != '\0' && strncmp(tok, "http://", 7) != 0 && strncmp(tok, "https://", 8) != 0)
		{
			GUC_check_errdetail("Each Schema Registry URL starts with http:// or https://.");
			return false;
		}
	}
	return true;
}

typedef struct RegistrySecrets
{
	char	   *password;
	char	   *token;
} RegistrySecrets;

static bool
take_secret(const char *name, const char *value, void *arg, char **error)
{
	RegistrySecrets *secrets = arg;

	if (strcmp(name, "password") == 0)
		secrets->password = pstrdup(value);
	else if (strcmp(name, "token") == 0)
		secrets->token = pstrdup(value);
	else
	{
		*error = pstrdup("not password=... or token=...");
		return false;
	}
	return true;
}

/*
 * The secrets of outbox.schema_registry_secrets_file: false with *error
 * set (naming the file or line, never a value) if it cannot be used.
 */
static bool
read_secrets(const char *path, char **password, char **token, char **error)
{
	RegistrySecrets secrets = {NULL, NULL};
	bool		ok = outbox_secrets_file_read(path, take_secret, &secrets, error);

	*password = secrets.password;
	*token = secrets.token;
	return ok;
}

static bool
check_registry_secrets_file(char **newval, void **extra, GucSource source)
{
	char	   *password;
	char	   *token;
	char	   *error = NULL;

	if (read_secrets(*newval, &password, &token, &error))
		return true;
	GUC_check_errdetail("%s", error);
	return false;
}

/* The handle's options for one request to url + path. */
static struct curl_slist *
set_options(const char *url, const char *path, const char *body, Answer *answer,
			char *errbuf, const char *password, const char *token)
{
	struct curl_slist *headers = NULL;
	char	   *full = psprintf("%s%s", url, path);

	curl_easy_reset(curl);
	curl_easy_setopt(curl, CURLOPT_URL, full);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long) outbox_schema_registry_connect_timeout_ms);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long) outbox_schema_registry_timeout_ms);
	curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, progress);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, gather);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, answer);
	curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, outbox_schema_registry_tls_verify ? 1L : 0L);
	curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, outbox_schema_registry_tls_verify ? 2L : 0L);
	if (outbox_schema_registry_ca_file && outbox_schema_registry_ca_file[0])
		curl_easy_setopt(curl, CURLOPT_CAINFO, outbox_schema_registry_ca_file);
	headers = curl_slist_append(headers, "Accept: " REGISTRY_CONTENT_TYPE ", application/json");
	if (body != NULL)
	{
		headers = curl_slist_append(headers, "Content-Type: " REGISTRY_CONTENT_TYPE);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long) strlen(body));
	}
	if (token != NULL)
	{
		char	   *bearer = psprintf("Authorization: Bearer %s", token);

		headers = curl_slist_append(headers, bearer);
		explicit_bzero(bearer, strlen(bearer));
		pfree(bearer);
	}
	else if (outbox_schema_registry_user && outbox_schema_registry_user[0])
	{
		curl_easy_setopt(curl, CURLOPT_HTTPAUTH, (long) CURLAUTH_BASIC);
		curl_easy_setopt(curl, CURLOPT_USERNAME, outbox_schema_registry_user);
		curl_easy_setopt(curl, CURLOPT_PASSWORD, password ? password : "");
	}
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	pfree(full);
	return headers;
}

/* The answer as a jsonb object, or NULL if it is not one. */
static Jsonb *
parse_answer(const char *text)
{
	char	   *error = NULL;
	Jsonb	   *result = outbox_json_parse(text, strlen(text), &error);

	if (result != NULL && !JB_ROOT_IS_OBJECT(result))
		return NULL;
	return result;
}

static char *
field_string(Jsonb *json, const char *key)
{
	JsonbValue	v;

	if (json == NULL ||
		getKeyJsonValueFromContainer(&json->root, key, strlen(key), &v) == NULL ||
		v.type != jbvString)
		return NULL;
	return pnstrdup(v.val.string.val, v.val.string.len);
}

/* An integer field within int32's range, else -1. */
static int64
field_int(Jsonb *json, const char *key)
{
	JsonbValue	v;
	char	   *text;
	char	   *end;
	long long	n;

	if (json == NULL ||
		getKeyJsonValueFromContainer(&json->root, key, strlen(key), &v) == NULL ||
		v.type != jbvNumeric)
		return -1;
	text = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v.val.numeric)));
	errno = 0;
	n = strtoll(text, &end, 10);
	if (errno != 0 || *end != '\0' || n < 0 || n > PG_INT32_MAX)
		return -1;
	return n;
}

/* The registry's own message, for an error: its error_code and text. */
static char *
registry_message(Jsonb *json)
{
	char	   *message = field_string(json, "message");
	int64		code = field_int(json, "error_code");

	if (message == NULL)
		return pstrdup("");
	if (strlen(message) > MAX_QUOTED_MESSAGE)
		message[MAX_QUOTED_MESSAGE] = '\0';
	if (code >= 0)
		return psprintf(": error %d, %s", (int) code, message);
	return psprintf(": %s", message);
}

/*
 * One request to one URL. REGISTRY_OK with *json the answer's object;
 * else *error says what happened there.
 */
static RegistryResult
request_one(const char *url, const char *path, const char *body, const char *password,
			const char *token, Jsonb **json, char **error)
{
	Answer		answer = {0};
	char		errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *headers = set_options(url, path, body, &answer, errbuf, password, token);
	CURLcode	code = curl_easy_perform(curl);
	long		status = 0;
	char	   *where = shown_url(url);
	RegistryResult result;

	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(headers);
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	*json = NULL;
	if (code == CURLE_ABORTED_BY_CALLBACK)
	{
		*error = psprintf("%s: the worker is stopping", where);
		result = REGISTRY_OUTAGE;
	}
	else if (code != CURLE_OK)
	{
		*error = psprintf("%s: %s%s%s", where, curl_easy_strerror(code),
						  errbuf[0] ? ": " : "", errbuf);
		result = REGISTRY_OUTAGE;
	}
	else
	{
		Jsonb	   *parsed = parse_answer(answer.data ? answer.data : "");

		if (status >= 200 && status < 300 && parsed != NULL)
		{
			*json = parsed;
			result = REGISTRY_OK;
		}
		else if (status >= 400 && status < 500 && status != 401 && status != 403 &&
				 status != 407 && status != 408 && status != 429 && parsed != NULL)
		{
			*error = psprintf("%s: HTTP %ld%s", where, status, registry_message(parsed));
			result = REGISTRY_REFUSED;
		}
		else
		{
			*error = psprintf("%s: HTTP %ld%s", where, status,
							  parsed ? registry_message(parsed) : " (not the registry's JSON)");
			result = REGISTRY_OUTAGE;
		}
	}
	free(answer.data);
	return result;
}

/*
 * A request to the registry: the last URL that answered first, then the
 * others in turn while each is out. An outage of every URL joins their
 * errors.
 */
static RegistryResult
request(const char *path, const char *body, Jsonb **json, char **error)
{
	List	   *urls = registry_urls();
	int			n = list_length(urls);
	StringInfoData errors;
	char	   *password;
	char	   *token;

	*json = NULL;
	if (n == 0)
	{
		*error = pstrdup("no Schema Registry is configured (outbox.schema_registry_url)");
		return REGISTRY_OUTAGE;
	}
	if (!ensure_curl(error) ||
		!read_secrets(outbox_schema_registry_secrets_file, &password, &token, error))
		return REGISTRY_OUTAGE;
	initStringInfo(&errors);
	for (int i = 0; i < n && !outbox_stop_requested(); i++)
	{
		int			at = (last_good_url + i) % n;
		char	   *one = NULL;
		RegistryResult result = request_one(list_nth(urls, at), path, body, password, token,
											json, &one);

		if (result != REGISTRY_OUTAGE)
		{
			last_good_url = at;
			if (one)
				*error = one;
			return result;
		}
		appendStringInfo(&errors, "%s%s", errors.len ? "; " : "", one);
	}
	*error = errors.len ? errors.data : pstrdup("the worker is stopping");
	return REGISTRY_OUTAGE;
}

/* A path segment, percent-encoded. */
static char *
escaped(const char *segment)
{
	char	   *e = curl_easy_escape(curl, segment, 0);
	char	   *copy = pstrdup(e ? e : "");

	curl_free(e);
	return copy;
}

/* An answer of OK must carry the schema's id. */
static RegistryResult
take_schema(RegistryResult result, Jsonb *json, int32 id, RegistrySchema *out, char **error)
{
	if (result != REGISTRY_OK)
		return result;
	out->id = id >= 0 ? id : (int32) field_int(json, "id");
	out->version = Max(0, (int32) field_int(json, "version"));
	out->schema = field_string(json, "schema");
	if (out->id < 0)
	{
		*error = pstrdup("the Schema Registry's answer has no schema id");
		return REGISTRY_OUTAGE;
	}
	return REGISTRY_OK;
}

RegistryResult
outbox_registry_register(const char *subject, const char *schema_type, const char *schema,
						 RegistrySchema *out, char **error)
{
	StringInfoData body;
	Jsonb	   *json;
	char	   *path;
	RegistryResult result;

	if (!ensure_curl(error))
		return REGISTRY_OUTAGE;
	initStringInfo(&body);
	appendStringInfoString(&body, "{\"schemaType\":");
	escape_json(&body, schema_type);
	appendStringInfoString(&body, ",\"schema\":");
	escape_json(&body, schema);
	appendStringInfoChar(&body, '}');
	path = psprintf("/subjects/%s/versions", escaped(subject));
	result = request(path, body.data, &json, error);
	return take_schema(result, json, -1, out, error);
}

RegistryResult
outbox_registry_version(const char *subject, const char *version, RegistrySchema *out,
						char **error)
{
	Jsonb	   *json;
	char	   *path;
	RegistryResult result;

	if (!ensure_curl(error))
		return REGISTRY_OUTAGE;
	path = psprintf("/subjects/%s/versions/%s", escaped(subject), escaped(version));
	result = request(path, NULL, &json, error);
	return take_schema(result, json, -1, out, error);
}

RegistryResult
outbox_registry_schema(int32 id, RegistrySchema *out, char **error)
{
	Jsonb	   *json;
	RegistryResult result = request(psprintf("/schemas/ids/%d", id), NULL, &json, error);

	return take_schema(result, json, id, out, error);
}

const char *
outbox_registry_schema_type(const char *format)
{
	if (strcmp(format, "avro") == 0)
		return "AVRO";
	if (strcmp(format, "protobuf") == 0)
		return "PROTOBUF";
	return "JSON";
}

/* Before outbox_define_settings(), which reserves the prefix. */
void
outbox_define_registry_settings(void)
{
	OUTBOX_REGISTRY_SETTINGS(OUTBOX_SETTING_DEFINE_STRING, OUTBOX_SETTING_DEFINE_INT,
							 OUTBOX_SETTING_DEFINE_BOOL, OUTBOX_SETTING_DEFINE_ENUM)
}
