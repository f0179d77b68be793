/*
 * settings.c
 *		The outbox.* configuration parameters, and the checks that reject a
 *		bad value when it is set or reloaded rather than later in a worker.
 */
#include "settings.h"

#include <ctype.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <librdkafka/rdkafka.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/guc.h"

/* A secrets file is a few lines: anything bigger is not one. */
#define KAFKA_CONFIG_FILE_MAX (1024 * 1024)

char	   *outbox_brokers = NULL;
char	   *outbox_databases = NULL;
char	   *outbox_database = NULL;
int			outbox_shards = 1;
int			outbox_max_workers = 16;
int			outbox_batch_size = 1000;
int			outbox_poll_interval_ms = 1000;
int			outbox_max_message_bytes = 1024 * 1024;
int			outbox_message_format = OUTBOX_FORMAT_ENVELOPE;
char	   *outbox_kafka_config = NULL;
char	   *outbox_kafka_config_file = NULL;
bool		outbox_enabled = true;
bool		outbox_partition_pacing = true;
int			outbox_retry_backoff_min_ms = 1000;
int			outbox_retry_backoff_max_ms = 60000;
int			outbox_max_attempts = 10;
int			outbox_shutdown_timeout_ms = 5000;
int			outbox_window_size = 10000;
int			outbox_window_bytes = 64 * 1024 * 1024;
int			outbox_lag_warning_ms = 60 * 1000;
char	   *outbox_cloudevents_source = NULL;
int			outbox_delivery = OUTBOX_AT_LEAST_ONCE;
char	   *outbox_progress_topic = NULL;
int			outbox_test_pause_at = OUTBOX_PAUSE_NONE;
int			outbox_test_topic_handles = 10000;

static const struct config_enum_entry message_format_options[] = {
	{"envelope", OUTBOX_FORMAT_ENVELOPE, false},
	{"payload", OUTBOX_FORMAT_PAYLOAD, false},
	{"cloudevents", OUTBOX_FORMAT_CLOUDEVENTS, false},
	{NULL, 0, false}
};

static const struct config_enum_entry delivery_options[] = {
	{"at_least_once", OUTBOX_AT_LEAST_ONCE, false},
	{"exactly_once", OUTBOX_EXACTLY_ONCE, false},
	{NULL, 0, false}
};

static const struct config_enum_entry pause_options[] = {
	{"none", OUTBOX_PAUSE_NONE, false},
	{"after_produce", OUTBOX_PAUSE_AFTER_PRODUCE, false},
	{"before_commit", OUTBOX_PAUSE_BEFORE_COMMIT, false},
	{"after_commit", OUTBOX_PAUSE_AFTER_COMMIT, false},
	{"after_settle", OUTBOX_PAUSE_AFTER_SETTLE, false},
	{NULL, 0, false}
};

/*
 * Properties the worker sets itself, or that the idempotent producer fixes
 * (librdkafka would refuse other values only when the worker creates the
 * producer): changing them would break delivery order, partition placement,
 * the worker's accounting of delivery reports or its memory bound. And
 * properties that run code in the server: plugins and interceptors, OpenSSL
 * engines and providers (a path loads that library), the Kerberos kinit
 * command (run with system()); callbacks and opaques are pointers. All are
 * refused when set.
 */
static const char *const reserved_properties[] = {
	"bootstrap.servers", "metadata.broker.list", "enable.idempotence",
	"enable.gapless.guarantee", "partitioner", "log.queue",
	"internal.termination.signal", "transactional.id", "transaction.timeout.ms",
	"acks", "request.required.acks", "max.in.flight",
	"max.in.flight.requests.per.connection", "retries",
	"message.send.max.retries", "queuing.strategy",
	"plugin.library.paths", "interceptors", "opaque", "default_topic_conf",
	"delivery.report.only.error", "queue.buffering.max.kbytes",
	"enabled_events", "sasl.kerberos.kinit.cmd", "ssl.engine.location",
	"ssl.engine.id", "ssl_engine_callback_data", "ssl.providers", NULL
};

/*
 * librdkafka pastes these into its default kinit command, a shell command
 * line, as they are: a value must not be able to end the word it is in.
 */
static const char *const kinit_substituted[] = {
	"sasl.kerberos.principal", "sasl.kerberos.keytab", NULL
};

/*
 * librdkafka applies "topic.NAME" to the default topic configuration as
 * NAME, so the prefix must not hide a reserved name; "*_cb" are callbacks.
 */
static bool
is_reserved_property(const char *name)
{
	size_t		len;

	if (strncmp(name, "topic.", 6) == 0)
		name += 6;
	len = strlen(name);
	if (len >= 3 && strcmp(name + len - 3, "_cb") == 0)
		return true;
	if (strncmp(name, "interceptor", 11) == 0 || strncmp(name, "plugin", 6) == 0)
		return true;
	for (int i = 0; reserved_properties[i] != NULL; i++)
		if (strcmp(reserved_properties[i], name) == 0)
			return true;
	return false;
}

static bool
is_shell_safe(const char *value)
{
	for (const char *c = value; *c != '\0'; c++)
		if (!isalnum((unsigned char) *c) && strchr("/@._+-:=", *c) == NULL)
			return false;
	return true;
}

/*
 * The checks every property gets, wherever it comes from, before the
 * setter. The value never goes into an error: it may be a password.
 */
static bool
apply_property(const char *name, const char *value, void *target,
			   KafkaPropertySetter set_property, char **error)
{
	if (is_reserved_property(name))
	{
		*error = psprintf("property \"%s\" is set by pg_outbox and cannot be changed here", name);
		return false;
	}
	for (int i = 0; kinit_substituted[i] != NULL; i++)
		if (strcmp(name, kinit_substituted[i]) == 0 && !is_shell_safe(value))
		{
			*error = psprintf("property \"%s\" may contain only letters, digits and / @ . _ + - : =", name);
			return false;
		}
	return set_property(target, name, value, error);
}

/*
 * Splits "name=value,name=value" (a backslash escapes a comma or a
 * backslash in a value, for passwords) and hands each pair to the setter.
 */
bool
outbox_apply_kafka_config(const char *config, void *target,
						  KafkaPropertySetter set_property, char **error)
{
	const char *p = config;

	while (p != NULL && *p != '\0')
	{
		StringInfoData item;
		char	   *eq;
		char	   *name;
		char	   *value;

		initStringInfo(&item);
		while (*p != '\0' && *p != ',')
		{
			if (*p == '\\' && (p[1] == ',' || p[1] == '\\'))
				p++;
			appendStringInfoChar(&item, *p++);
		}
		if (*p == ',')
			p++;

		name = item.data;
		while (*name == ' ')
			name++;
		if (*name == '\0')
			continue;
		eq = strchr(name, '=');
		if (eq == NULL || eq == name)
		{
			*error = psprintf("\"%s\" is not of the form name=value", name);
			return false;
		}
		*eq = '\0';
		value = eq + 1;
		for (char *end = eq - 1; end > name && *end == ' '; end--)
			*end = '\0';
		if (!apply_property(name, value, target, set_property, error))
			return false;
	}
	return true;
}

/*
 * Reads outbox.kafka_config_file: only the server's user may have access
 * to it, since it holds secrets. Returns NULL with *error set.
 */
static char *
read_secrets_file(const char *path, char **error)
{
	struct stat st;
	char	   *contents;
	ssize_t		got;
	int			fd;

	if (!is_absolute_path(path))
	{
		*error = psprintf("\"%s\" is not an absolute path", path);
		return NULL;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
	{
		*error = psprintf("could not open file \"%s\": %m", path);
		return NULL;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > KAFKA_CONFIG_FILE_MAX)
	{
		*error = psprintf("\"%s\" is not a regular file of at most %d bytes", path,
						  KAFKA_CONFIG_FILE_MAX);
		close(fd);
		return NULL;
	}
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		*error = psprintf("file \"%s\" has group or world access; it must be accessible only by the server's user (chmod 0600)",
						  path);
		close(fd);
		return NULL;
	}
	contents = palloc(st.st_size + 1);
	got = read(fd, contents, st.st_size);
	close(fd);
	if (got != st.st_size)
	{
		*error = psprintf("could not read file \"%s\"", path);
		pfree(contents);
		return NULL;
	}
	contents[got] = '\0';
	return contents;
}

/*
 * Applies outbox.kafka_config_file's "name=value" lines (blank lines and
 * lines starting with # are skipped; the value runs to the end of its line,
 * without escapes) through set_property.
 */
bool
outbox_apply_kafka_config_file(const char *path, void *target,
							   KafkaPropertySetter set_property, char **error)
{
	char	   *contents;
	char	   *line;
	int			lineno = 0;

	if (path == NULL || path[0] == '\0')
		return true;
	contents = read_secrets_file(path, error);
	if (contents == NULL)
		return false;
	for (line = contents; line != NULL && *line != '\0';)
	{
		char	   *next = strchr(line, '\n');
		char	   *name = line;
		char	   *eq;
		char	   *value;
		char	   *line_error = NULL;

		lineno++;
		if (next != NULL)
			*next++ = '\0';
		line = next;
		if (name[0] != '\0' && name[strlen(name) - 1] == '\r')
			name[strlen(name) - 1] = '\0';
		while (isspace((unsigned char) *name))
			name++;
		if (*name == '\0' || *name == '#')
			continue;
		eq = strchr(name, '=');
		if (eq == NULL || eq == name)
		{
			*error = psprintf("file \"%s\", line %d: not of the form name=value", path, lineno);
			return false;
		}
		*eq = '\0';
		for (char *end = eq - 1; end > name && isspace((unsigned char) *end); end--)
			*end = '\0';
		value = eq + 1;
		while (*value == ' ' || *value == '\t')
			value++;
		if (!apply_property(name, value, target, set_property, &line_error))
		{
			*error = psprintf("file \"%s\", line %d: %s", path, lineno, line_error);
			return false;
		}
	}
	pfree(contents);
	return true;
}

static bool
set_on_rdkafka_conf(void *target, const char *name, const char *value,
					char **error)
{
	char		errstr[512];

	if (rd_kafka_conf_set((rd_kafka_conf_t *) target, name, value,
						  errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
	{
		*error = pstrdup(errstr);
		return false;
	}
	return true;
}

typedef bool (*KafkaPropertiesApplier) (const char *source, void *target,
										KafkaPropertySetter set_property, char **error);

/*
 * Validates librdkafka properties against librdkafka itself. Building a
 * configuration object starts no threads, so this is safe in the
 * postmaster, where reloads are checked first.
 */
static bool
check_properties(const char *source, const char *parameter, KafkaPropertiesApplier apply)
{
	rd_kafka_conf_t *conf;
	char	   *error = NULL;
	bool		ok;

	if (source == NULL || source[0] == '\0')
		return true;
	conf = rd_kafka_conf_new();
	ok = apply(source, conf, set_on_rdkafka_conf, &error);
	rd_kafka_conf_destroy(conf);
	if (!ok)
	{
		GUC_check_errmsg("invalid %s", parameter);
		GUC_check_errdetail("%s", error);
	}
	return ok;
}

static bool
check_kafka_config(char **newval, void **extra, GucSource source)
{
	return check_properties(*newval, "outbox.kafka_config", outbox_apply_kafka_config);
}

/*
 * The postmaster checks the secrets file at each reload (the path is set
 * again even when unchanged), so a file that went bad is reported there;
 * the worker reads it again when it builds its producer.
 */
static bool
check_kafka_config_file(char **newval, void **extra, GucSource source)
{
	return check_properties(*newval, "outbox.kafka_config_file",
							outbox_apply_kafka_config_file);
}

/*
 * outbox.kafka_config may hold passwords. GUC_SUPERUSER_ONLY still lets
 * members of pg_read_all_settings read it, and pg_settings shows its reset
 * value raw, so it is left out of pg_settings and SHOW masks it for anyone
 * but a superuser.
 */
static const char *
show_kafka_config(void)
{
	if (outbox_kafka_config == NULL || outbox_kafka_config[0] == '\0' || superuser())
		return outbox_kafka_config ? outbox_kafka_config : "";
	return "********";
}

/* Kafka's rule for a topic name; its own topics start with "__". */
static bool
check_progress_topic(char **newval, void **extra, GucSource source)
{
	size_t		len = *newval == NULL ? 0 : strlen(*newval);

	if (len == 0 || len > 249 || strcmp(*newval, ".") == 0 || strcmp(*newval, "..") == 0 ||
		strncmp(*newval, "__", 2) == 0 || strspn(*newval,
											   "abcdefghijklmnopqrstuvwxyz"
											   "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
											   "0123456789._-") != len)
	{
		GUC_check_errdetail("A Kafka topic name has 1 to 249 letters, digits, '.', '_' or '-', and does not start with \"__\".");
		return false;
	}
	return true;
}

static bool
check_brokers(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || **newval == '\0')
	{
		GUC_check_errdetail("outbox.brokers must list at least one host:port.");
		return false;
	}
	return true;
}

/*
 * outbox.databases: '*' or database names separated by commas. Calls
 * visit(name, arg) for each name; stops and returns false when it does.
 */
static bool
for_each_database_name(const char *list, bool (*visit) (const char *name, void *arg),
					   void *arg)
{
	char	   *copy = pstrdup(list);
	char	   *p = copy;

	for (;;)
	{
		char	   *comma = strchr(p, ',');
		char	   *end;

		if (comma != NULL)
			*comma = '\0';
		while (*p == ' ')
			p++;
		end = p + strlen(p);
		while (end > p && end[-1] == ' ')
			*--end = '\0';
		if (!visit(p, arg))
			return false;
		if (comma == NULL)
			return true;
		p = comma + 1;
	}
}

static bool
is_database_name(const char *name, void *arg)
{
	return name[0] != '\0' && strlen(name) < NAMEDATALEN && strcmp(name, "*") != 0;
}

static bool
check_databases(char **newval, void **extra, GucSource source)
{
	if (*newval != NULL && strcmp(*newval, "*") == 0)
		return true;
	if (*newval == NULL || !for_each_database_name(*newval, is_database_name, NULL))
	{
		GUC_check_errdetail("outbox.databases must be '*' or database names separated by commas.");
		return false;
	}
	return true;
}

static bool
differs_from(const char *name, void *arg)
{
	return strcmp(name, (const char *) arg) != 0;
}

/*
 * The databases served: outbox.databases, or the deprecated
 * outbox.database when outbox.databases was left at '*'.
 */
bool
outbox_database_allowed(const char *dbname)
{
	const char *list = outbox_databases;

	if (outbox_database != NULL && outbox_database[0] != '\0' &&
		strcmp(outbox_databases, "*") == 0)
		list = outbox_database;
	if (strcmp(list, "*") == 0)
		return true;
	/* differs_from stops the walk at the name */
	return !for_each_database_name(list, differs_from, (void *) dbname);
}

/*
 * PostgreSQL replaces a bad value of a preloaded library's setting by the
 * default with only a WARNING. For outbox.shards that would silently run
 * the wrong number of workers: refuse to start.
 */
static void
refuse_replaced_value(const char *name, const char *configured, bool replaced)
{
	if (configured != NULL && replaced)
		ereport(FATAL,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for parameter \"%s\": \"%s\"", name, configured),
				 errhint("outbox.shards must be an integer from 1 to %d.", OUTBOX_MAX_SHARDS)));
}

/*
 * The settings only the postmaster can set exist only when the library is
 * preloaded: PostgreSQL refuses to define them later. A backend that loads
 * the library on first use still needs the shard count to place events
 * where the workers will look once the library is preloaded.
 */
static void
define_startup_settings(void)
{
	const char *shards = GetConfigOption("outbox.shards", true, false);
	char	   *configured_shards = shards ? pstrdup(shards) : NULL;
	int			parsed;

	if (!process_shared_preload_libraries_in_progress)
	{
		outbox_database = "";
		if (shards != NULL)
			outbox_shards = Max(1, Min(OUTBOX_MAX_SHARDS, atoi(shards)));
		return;
	}

	DefineCustomStringVariable("outbox.database",
							   "Deprecated: use outbox.databases.",
							   NULL, &outbox_database, "",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("outbox.shards",
							"Number of delivery workers per database; events are spread over them by key.",
							NULL, &outbox_shards, 1, 1, OUTBOX_MAX_SHARDS,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("outbox.max_workers",
							"Most delivery workers on the server, all databases together.",
							NULL, &outbox_max_workers, 16, 1, 1024,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("outbox.progress_topic",
							   "Compacted Kafka topic of the exactly-once progress records.",
							   NULL, &outbox_progress_topic, "outbox_progress",
							   PGC_POSTMASTER, 0, check_progress_topic, NULL, NULL);
	refuse_replaced_value("outbox.shards", configured_shards,
						  configured_shards != NULL &&
						  (!parse_int(configured_shards, &parsed, 0, NULL) ||
						   parsed != outbox_shards));
	if (outbox_database[0] != '\0')
		ereport(WARNING,
				(errmsg("outbox.database is deprecated and will be removed"),
				 errhint("Set outbox.databases = '%s' instead (the default '*' serves every database that has the extension).",
						 outbox_database)));
}

void
outbox_define_settings(void)
{
	define_startup_settings();
	DefineCustomStringVariable("outbox.cloudevents_source",
							   "CloudEvents source attribute (ce_source) of the events.",
							   "Empty: /postgresql/<database>.",
							   &outbox_cloudevents_source, "", PGC_SIGHUP, 0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("outbox.databases",
							   "Databases whose outbox is delivered: '*' for every database that has the extension, or names separated by commas.",
							   NULL, &outbox_databases, "*",
							   PGC_SIGHUP, 0, check_databases, NULL, NULL);
	DefineCustomStringVariable("outbox.brokers",
							   "Kafka bootstrap servers, host:port separated by commas.",
							   NULL, &outbox_brokers, "localhost:9092",
							   PGC_SIGHUP, 0, check_brokers, NULL, NULL);
	DefineCustomIntVariable("outbox.batch_size",
							"Most events a worker reads at once.",
							NULL, &outbox_batch_size, 1000, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("outbox.window_size",
							"Most events a worker has produced and not yet settled.",
							"Also the most events a crash of the worker can send twice.",
							&outbox_window_size, 10000, 1, 1000000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("outbox.window_bytes",
							"Most bytes of payloads and keys a worker holds in flight.",
							"Bounds a worker's memory: about twice this much is held at most.",
							&outbox_window_bytes, 64 * 1024 * 1024, 1024 * 1024, 1024 * 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("outbox.poll_interval",
							"Longest a worker sleeps without a commit waking it.",
							NULL, &outbox_poll_interval_ms, 1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("outbox.max_message_bytes",
							"Largest payload outbox_send() accepts.",
							NULL, &outbox_max_message_bytes, 1024 * 1024,
							1, 1000000000,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomEnumVariable("outbox.message_format",
							 "Kafka message value: the protobuf envelope, the raw payload, or CloudEvents (binary mode).",
							 NULL, &outbox_message_format, OUTBOX_FORMAT_ENVELOPE,
							 message_format_options,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("outbox.kafka_config",
							   "Extra librdkafka producer properties, name=value separated by commas.",
							   NULL, &outbox_kafka_config, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL,
							   check_kafka_config, NULL, show_kafka_config);
	DefineCustomStringVariable("outbox.kafka_config_file",
							   "File of further librdkafka producer properties, name=value per line: where secrets go.",
							   "Read when a worker builds its producer; a reload never logs its contents.",
							   &outbox_kafka_config_file, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   check_kafka_config_file, NULL, NULL);
	DefineCustomBoolVariable("outbox.enabled",
							 "Whether the workers deliver; off pauses delivery.",
							 NULL, &outbox_enabled, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("outbox.partition_pacing",
							 "Whether a keyed event whose partition has 5 events in flight waits in the worker, not in librdkafka.",
							 "librdkafka's idempotent producer polls without waiting while such a partition has messages queued.",
							 &outbox_partition_pacing, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("outbox.retry_backoff_min",
							"First wait before retrying after a failed delivery.",
							NULL, &outbox_retry_backoff_min_ms, 1000, 1, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("outbox.retry_backoff_max",
							"Longest wait between retries; waits double up to it.",
							NULL, &outbox_retry_backoff_max_ms, 60000, 1, 24 * 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("outbox.max_attempts",
							"Attempts after which an event that Kafka refuses becomes a dead letter.",
							NULL, &outbox_max_attempts, 10, 1, 1000000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("outbox.shutdown_timeout",
							"How long a stopping worker waits for Kafka's acknowledgements.",
							NULL, &outbox_shutdown_timeout_ms, 5000, 0, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("outbox.lag_warning",
							"Age of a shard's oldest pending event that raises a WARNING in the log.",
							"0 turns the warning off.",
							&outbox_lag_warning_ms, 60 * 1000, 0, 24 * 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomEnumVariable("outbox.delivery",
							 "Delivery mode: at_least_once, or exactly_once with Kafka transactions.",
							 "A change rebuilds each worker's producer once its window is drained.",
							 &outbox_delivery, OUTBOX_AT_LEAST_ONCE, delivery_options,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	/* for the tests only: a worker waits there, to be killed in that gap */
	DefineCustomEnumVariable("outbox.test_pause_at",
							 "Test only: where an exactly-once worker pauses.",
							 NULL, &outbox_test_pause_at, OUTBOX_PAUSE_NONE, pause_options,
							 PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							 NULL, NULL, NULL);
	/* for the tests only: the limit past which topics go by name, reached */
	DefineCustomIntVariable("outbox.test_topic_handles",
							"Test only: the topic handles a worker's producer keeps.",
							NULL, &outbox_test_topic_handles, 10000, 1, 10000,
							PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);

	/* not preloaded, outbox.shards and outbox.database stay placeholders */
	if (!process_shared_preload_libraries_in_progress)
		return;
	MarkGUCPrefixReserved("outbox");
}
