/*
 * session.c
 *		The settings a worker's session runs with. A worker connects as the
 *		bootstrap superuser to a database whose owner need not be one, and
 *		at connection PostgreSQL applies what ALTER DATABASE ... SET and
 *		ALTER ROLE ... SET stored in pg_db_role_setting. The owner may store
 *		any USERSET parameter there: planner switches and costs (every read
 *		a sequential scan and a sort of the whole outbox), JIT for every
 *		statement, timeouts that end the worker's transactions, a role that
 *		runs its SQL without the rights it needs. A list of the dangerous
 *		ones cannot keep up with new parameters, so the worker puts back the
 *		server's own value of every parameter such a setting changed (that
 *		of postgresql.conf and ALTER SYSTEM, which are the superuser's, else
 *		the built-in default), and then forces what its SQL relies on,
 *		whatever the server's configuration says.
 *
 *		A parameter whose built-in default is NULL gets its value from the
 *		server once running, and that is the value put back: the session
 *		user is the one the worker connected as (a worker connected without
 *		a user name gets no session_authorization of its own, so the
 *		database's applies: it would run the worker's SQL as that role).
 */
#include "worker/session.h"
#include "compat.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/memutils.h"

/* A parameter to put back, and how. */
typedef struct Restore
{
	const char *name;
	const char *value;
	GucContext	context;
} Restore;

static bool
from_db_role_setting(GucSource source)
{
	/* ALTER ROLE ALL, ALTER DATABASE, ALTER ROLE, ALTER ROLE IN DATABASE */
	return source >= PGC_S_GLOBAL && source <= PGC_S_DATABASE_USER;
}

/*
 * The server's configuration files as they are now (a value edited but not
 * reloaded yet applies early); NULL, with a warning, if they cannot be read.
 */
static ConfigVariable *
read_config_files(void)
{
	ConfigVariable *head = NULL;
	ConfigVariable *tail = NULL;

	/* as ProcessConfigFile does; the postmaster reported any error already */
	if (ParseConfigFile(ConfigFileName, true, NULL, 0, 0, DEBUG1, &head, &tail) &&
		ParseConfigFile(PG_AUTOCONF_FILENAME, false, NULL, 0, 0, DEBUG1, &head, &tail))
		return head;
	ereport(WARNING,
			(errcode(ERRCODE_CONFIG_FILE_ERROR),
			 errmsg("outbox: could not read the server's configuration files"),
			 errdetail("Parameters set for the database or a role are put back to their built-in defaults.")));
	return NULL;
}

/* The last value the files give name, or NULL. */
static const char *
file_value(ConfigVariable *files, const char *name)
{
	const char *value = NULL;

	for (ConfigVariable *item = files; item != NULL; item = item->next)
		if (item->name != NULL && item->value != NULL && !item->ignore &&
			pg_strcasecmp(item->name, name) == 0)
			value = item->value;
	return value;
}

/* A parameter's built-in default as text; NULL for a NULL string. */
static const char *
boot_value(struct config_generic *gen)
{
	switch (gen->vartype)
	{
		case PGC_BOOL:
			return COMPAT_GUC_TYPED(gen, bool)->boot_val ? "on" : "off";
		case PGC_INT:
			/* in the parameter's base unit, which a number without one is */
			return psprintf("%d", COMPAT_GUC_TYPED(gen, int)->boot_val);
		case PGC_REAL:
			return psprintf("%.17g", COMPAT_GUC_TYPED(gen, real)->boot_val);
		case PGC_STRING:
			return COMPAT_GUC_TYPED(gen, string)->boot_val;
		case PGC_ENUM:
			return compat_config_enum_lookup_by_value(gen, COMPAT_GUC_TYPED(gen, enum)->boot_val);
	}
	return NULL;
}

/*
 * The server's value of a parameter whose built-in default is NULL: the
 * one PostgreSQL gives it once running. (The session user is put back by
 * run_as_connected_user(): the name needs a transaction to be looked up.)
 */
static const char *
running_default(struct config_generic *gen)
{
	/* pg_timezone_abbrev_initialize()'s */
	if (pg_strcasecmp(gen->name, "timezone_abbreviations") == 0)
		return "Default";
	if (pg_strcasecmp(gen->name, "session_authorization") != 0)
		ereport(WARNING,
				(errmsg("outbox: parameter \"%s\" keeps the value set for the database or a role",
						gen->name),
				 errdetail("The server gives it no value to put back.")));
	return NULL;
}

/*
 * The parameters pg_db_role_setting changed, with the server's values.
 * Collected before any is set: setting one may change the GUC table.
 */
static int
collect_restores(Restore **restores)
{
	ConfigVariable *files = read_config_files();
	struct config_generic **vars;
	int			nvars;
	int			n = 0;

	vars = compat_get_guc_variables(&nvars);
	*restores = palloc(sizeof(Restore) * Max(nvars, 1));
	for (int i = 0; i < nvars; i++)
	{
		struct config_generic *gen = vars[i];
		const char *value;

		if ((gen->flags & GUC_CUSTOM_PLACEHOLDER) ||
			!(from_db_role_setting(gen->source) || from_db_role_setting(gen->reset_source)))
			continue;
		value = file_value(files, gen->name);
		if (value == NULL)
			value = boot_value(gen);
		if (value == NULL)
			value = running_default(gen);
		if (value == NULL)
			continue;
		(*restores)[n].name = pstrdup(gen->name);
		(*restores)[n].value = pstrdup(value);
		/* those applied at connection only (ignore_system_indexes) need a start-up context */
		(*restores)[n].context = (gen->context == PGC_BACKEND || gen->context == PGC_SU_BACKEND) ?
			PGC_SU_BACKEND : PGC_SUSET;
		n++;
	}
	return n;
}

/*
 * Puts back the server's value of every parameter the database's or the
 * role's settings changed; as the new default, so RESET keeps it. Outside
 * a transaction, so check hooks that would look names up in the catalog
 * accept what the server accepted at start.
 */
static void
restore_server_settings(void)
{
	Restore    *restores;
	int			n = collect_restores(&restores);

	for (int i = 0; i < n; i++)
	{
		ereport(DEBUG1,
				(errmsg_internal("outbox: %s = '%s', the server's value, not the database's or role's",
								 restores[i].name, restores[i].value)));
		(void) set_config_option(restores[i].name, restores[i].value, restores[i].context,
								 PGC_S_OVERRIDE, GUC_ACTION_SET, true, WARNING, false);
	}
}

/*
 * The worker's SQL runs as the user it connected as, whatever
 * session_authorization the database's or the role's settings gave it.
 * (Also after restore_server_settings(), which put role back to none: a
 * new session user takes the role off anyway.)
 */
static void
run_as_connected_user(void)
{
	Oid			connected = GetAuthenticatedUserId();
	MemoryContext context = CurrentMemoryContext;

	if (GetSessionUserId() == connected)
		return;
	StartTransactionCommand();
	ereport(DEBUG1,
			(errmsg_internal("outbox: session_authorization = '%s', the user connected as, not the database's or role's",
							 GetUserNameFromId(connected, false))));
	SetConfigOption("session_authorization", GetUserNameFromId(connected, false),
					PGC_SUSET, PGC_S_OVERRIDE);
	CommitTransactionCommand();
	MemoryContextSwitchTo(context);
}

/*
 * Whatever the server's configuration says, the worker's SQL resolves names
 * in pg_catalog only, and its transactions are never read-only, cancelled
 * or of another isolation.
 */
static void
force_settings(void)
{
	static const char *const settings[][2] = {
		{"search_path", "pg_catalog, pg_temp"},
		{"default_transaction_read_only", "off"},
		{"default_transaction_isolation", "read committed"},
		{"default_transaction_deferrable", "off"},
		{"statement_timeout", "0"},
		{"lock_timeout", "0"},
		{"idle_in_transaction_session_timeout", "0"},
		COMPAT_TRANSACTION_TIMEOUT_SETTING
		{"session_replication_role", "origin"},
		{"plan_cache_mode", "auto"},
		/* settles commit asynchronously; see window.c for the crash bound */
		{"synchronous_commit", "off"},
	};

	for (size_t i = 0; i < lengthof(settings); i++)
		SetConfigOption(settings[i][0], settings[i][1], PGC_SUSET, PGC_S_OVERRIDE);
}

/* Called once, right after the worker connected to its database. */
void
outbox_force_session_settings(void)
{
	MemoryContext context = AllocSetContextCreate(CurrentMemoryContext,
												  "outbox session settings",
												  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(context);

	restore_server_settings();
	run_as_connected_user();
	force_settings();
	MemoryContextSwitchTo(old);
	MemoryContextDelete(context);
}
