/*
 * conf.c
 *		The Kafka client's configuration, one owner for it: the settings it
 *		comes from (outbox.brokers, outbox.kafka_config and the secrets file
 *		outbox.kafka_config_file), the properties no user may set, and the
 *		one builder the producer and the progress consumer get their
 *		librdkafka configuration from (brokers, their own properties, the
 *		user's, the secrets, then what they derive from those). The check
 *		hooks apply the user's properties the same way, so a value a worker
 *		would refuse is refused at SET or reload. Every property set is
 *		recorded: the producer compares the record to decide its rebuild.
 *
 * A secret (a password in either setting, a line of the file) never goes
 * into an error or the log: errors name the property, never its value.
 */
#include "kafka/conf.h"
#include "secrets_file.h"

#include <ctype.h>

#include "miscadmin.h"
#include "utils/guc.h"

OUTBOX_KAFKA_SETTINGS(OUTBOX_SETTING_VARIABLE_STRING, OUTBOX_SETTING_VARIABLE_INT,
					  OUTBOX_SETTING_VARIABLE_BOOL, OUTBOX_SETTING_VARIABLE_ENUM)

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
apply_property(KafkaConf *kc, const char *name, const char *value, char **error)
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
	return outbox_kafka_conf_set(kc, name, value, error);
}

/*
 * Splits "name=value,name=value" (a backslash escapes a comma or a
 * backslash in a value, for passwords) and sets each pair on kc.
 */
static bool
apply_config(KafkaConf *kc, const char *config, char **error)
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
		if (!apply_property(kc, name, value, error))
			return false;
	}
	return true;
}

static bool
apply_config_line(const char *name, const char *value, void *arg, char **error)
{
	return apply_property((KafkaConf *) arg, name, value, error);
}

/* Applies outbox.kafka_config_file's "name=value" lines (secrets_file.h). */
static bool
apply_config_file(KafkaConf *kc, const char *path, char **error)
{
	return outbox_secrets_file_read(path, apply_config_line, kc, error);
}

/*
 * Every property set on a configuration goes through here, and is
 * recorded. A check hook's error is librdkafka's text, which names the
 * property; elsewhere the property's name leads it.
 */
bool
outbox_kafka_conf_set(KafkaConf *kc, const char *name, const char *value, char **error)
{
	char		errstr[512];

	if (rd_kafka_conf_set(kc->conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
	{
		*error = kc->checking ? pstrdup(errstr) : psprintf("%s: %s", name, errstr);
		return false;
	}
	appendStringInfo(&kc->applied, "%s=%s\n", name, value);
	return true;
}

static void
start_conf(KafkaConf *kc, bool checking)
{
	kc->conf = rd_kafka_conf_new();
	initStringInfo(&kc->applied);
	kc->checking = checking;
}

void
outbox_kafka_conf_discard(KafkaConf *kc)
{
	rd_kafka_conf_destroy(kc->conf);
	pfree(kc->applied.data);
}

/*
 * A client's configuration from the current settings: the brokers, the
 * role's own properties, outbox.kafka_config, the secrets file, then what
 * the role derives or insists on. Returns false with *error set, and
 * nothing to discard, when a property is refused.
 */
bool
outbox_kafka_conf_build(KafkaConf *kc, const KafkaConfRole *role, char **error)
{
	start_conf(kc, false);
	if (outbox_kafka_conf_set(kc, "bootstrap.servers", outbox_brokers, error) &&
		role->before_user(kc, role->arg, error) &&
		apply_config(kc, outbox_kafka_config, error) &&
		apply_config_file(kc, outbox_kafka_config_file, error) &&
		role->after_user(kc, role->arg, error))
		return true;
	outbox_kafka_conf_discard(kc);
	return false;
}

typedef bool (*KafkaPropertiesApplier) (KafkaConf *kc, const char *source, char **error);

/*
 * Validates librdkafka properties against librdkafka itself. Building a
 * configuration object starts no threads, so this is safe in the
 * postmaster, where reloads are checked first.
 */
static bool
check_properties(const char *source, const char *parameter, KafkaPropertiesApplier apply)
{
	KafkaConf	kc;
	char	   *error = NULL;
	bool		ok;

	if (source == NULL || source[0] == '\0')
		return true;
	start_conf(&kc, true);
	ok = apply(&kc, source, &error);
	outbox_kafka_conf_discard(&kc);
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
	return check_properties(*newval, "outbox.kafka_config", apply_config);
}

/*
 * The postmaster checks the secrets file at each reload (the path is set
 * again even when unchanged), so a file that went bad is reported there;
 * the worker reads it again when it builds its producer.
 */
static bool
check_kafka_config_file(char **newval, void **extra, GucSource source)
{
	return check_properties(*newval, "outbox.kafka_config_file", apply_config_file);
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


/* Before outbox_define_settings(), which reserves the prefix. */
void
outbox_define_kafka_settings(void)
{
	OUTBOX_KAFKA_SETTINGS(OUTBOX_SETTING_DEFINE_STRING, OUTBOX_SETTING_DEFINE_INT,
						  OUTBOX_SETTING_DEFINE_BOOL, OUTBOX_SETTING_DEFINE_ENUM)
}
