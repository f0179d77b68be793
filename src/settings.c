/*
 * settings.c
 *		The outbox.* configuration parameters of settings.h's table, and the
 *		checks that reject a bad value when it is set or reloaded rather
 *		than later in a worker.
 */
#include "settings.h"

#include "topic_name.h"

#include "miscadmin.h"
#include "utils/guc.h"

OUTBOX_STARTUP_SETTINGS(OUTBOX_SETTING_VARIABLE_STRING, OUTBOX_SETTING_VARIABLE_INT,
						OUTBOX_SETTING_VARIABLE_BOOL, OUTBOX_SETTING_VARIABLE_ENUM)
OUTBOX_SETTINGS(OUTBOX_SETTING_VARIABLE_STRING, OUTBOX_SETTING_VARIABLE_INT,
				OUTBOX_SETTING_VARIABLE_BOOL, OUTBOX_SETTING_VARIABLE_ENUM)

#define OUTBOX_ENUM_OPTION(value, name) {name, value, false},
static const struct config_enum_entry message_format_options[] = {
	OUTBOX_MESSAGE_FORMATS(OUTBOX_ENUM_OPTION) {NULL, 0, false}
};
static const struct config_enum_entry delivery_options[] = {
	OUTBOX_DELIVERY_MODES(OUTBOX_ENUM_OPTION) {NULL, 0, false}
};
static const struct config_enum_entry pause_options[] = {
	OUTBOX_PAUSE_POINTS(OUTBOX_ENUM_OPTION) {NULL, 0, false}
};

/* Kafka's rule for a topic name; its own topics start with "__". */
static bool
check_progress_topic(char **newval, void **extra, GucSource source)
{
	size_t		len = *newval == NULL ? 0 : strlen(*newval);

	if (outbox_topic_name_fault(*newval, len) != TOPIC_NAME_OK ||
		strncmp(*newval, "__", 2) == 0)
	{
		GUC_check_errdetail("A Kafka topic name has 1 to %d letters, digits, '.', '_' or '-', and does not start with \"__\".",
							KAFKA_MAX_TOPIC_LENGTH);
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

	OUTBOX_STARTUP_SETTINGS(OUTBOX_SETTING_DEFINE_STRING, OUTBOX_SETTING_DEFINE_INT,
							OUTBOX_SETTING_DEFINE_BOOL, OUTBOX_SETTING_DEFINE_ENUM)
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
	OUTBOX_SETTINGS(OUTBOX_SETTING_DEFINE_STRING, OUTBOX_SETTING_DEFINE_INT,
					OUTBOX_SETTING_DEFINE_BOOL, OUTBOX_SETTING_DEFINE_ENUM)

	/* not preloaded, outbox.shards and outbox.database stay placeholders */
	if (!process_shared_preload_libraries_in_progress)
		return;
	MarkGUCPrefixReserved("outbox");
}
