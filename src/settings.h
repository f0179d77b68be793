/*
 * settings.h
 *		The outbox.* settings every module reads, as one table, and how a
 *		row becomes a setting; the Kafka client's own are kafka/conf.h's.
 */
#ifndef OUTBOX_SETTINGS_H
#define OUTBOX_SETTINGS_H

#include "postgres.h"

/* outbox.shards is capped so a transaction can track its shards in a mask */
#define OUTBOX_MAX_SHARDS 64

/*
 * The options of the enum settings, as rows (C value, the setting's
 * value): each makes the enum's value here and its option in settings.c,
 * so a new option is one line.
 */
#define OUTBOX_MESSAGE_FORMATS(OPTION) \
	OPTION(OUTBOX_FORMAT_ENVELOPE, "envelope") \
	OPTION(OUTBOX_FORMAT_PAYLOAD, "payload") \
	OPTION(OUTBOX_FORMAT_CLOUDEVENTS, "cloudevents")

/* outbox.delivery: what a consumer may see (docs/guarantees.md) */
#define OUTBOX_DELIVERY_MODES(OPTION) \
	OPTION(OUTBOX_AT_LEAST_ONCE, "at_least_once") \
	OPTION(OUTBOX_EXACTLY_ONCE, "exactly_once")

/* outbox.test_pause_at: where a worker stops for a test to kill it */
#define OUTBOX_PAUSE_POINTS(OPTION) \
	OPTION(OUTBOX_PAUSE_NONE, "none") \
	OPTION(OUTBOX_PAUSE_AFTER_PRODUCE, "after_produce") \
	OPTION(OUTBOX_PAUSE_BEFORE_COMMIT, "before_commit") \
	OPTION(OUTBOX_PAUSE_AFTER_COMMIT, "after_commit") \
	OPTION(OUTBOX_PAUSE_AFTER_SETTLE, "after_settle")

#define OUTBOX_ENUM_VALUE(value, name) value,
typedef enum OutboxMessageFormat
{
	OUTBOX_MESSAGE_FORMATS(OUTBOX_ENUM_VALUE)
} OutboxMessageFormat;
typedef enum OutboxDelivery
{
	OUTBOX_DELIVERY_MODES(OUTBOX_ENUM_VALUE)
} OutboxDelivery;
typedef enum OutboxPausePoint
{
	OUTBOX_PAUSE_POINTS(OUTBOX_ENUM_VALUE)
} OutboxPausePoint;

/*
 * The settings as rows, in the order they are defined; each generates its
 * variable (settings.c), its extern declaration (below) and its
 * definition. A module that owns settings of its own lists them the same
 * way (kafka/conf.h).
 *
 * STRING(variable, name, short description, long description, default,
 *		  context, flags, check hook, show hook)
 * INT(variable, name, short description, long description, default, min,
 *	   max, context, flags)
 * BOOL(variable, name, short description, long description, default,
 *		context, flags)
 * ENUM(variable, name, short description, long description, default,
 *		options, context, flags)
 *
 * Only the postmaster can set these, and they exist only when the library
 * is preloaded (settings.c, define_startup_settings):
 */
#define OUTBOX_STARTUP_SETTINGS(STRING, INT, BOOL, ENUM) \
	STRING(outbox_database, "outbox.database", \
		   "Deprecated: use outbox.databases.", NULL, \
		   "", PGC_POSTMASTER, 0, NULL, NULL) \
	INT(outbox_shards, "outbox.shards", \
		"Number of delivery workers per database; events are spread over them by key.", NULL, \
		1, 1, OUTBOX_MAX_SHARDS, PGC_POSTMASTER, 0) \
	INT(outbox_max_workers, "outbox.max_workers", \
		"Most delivery workers on the server, all databases together.", NULL, \
		16, 1, 1024, PGC_POSTMASTER, 0) \
	STRING(outbox_progress_topic, "outbox.progress_topic", \
		   "Compacted Kafka topic of the exactly-once progress records.", NULL, \
		   "outbox_progress", PGC_POSTMASTER, 0, check_progress_topic, NULL)

/* The others, defined wherever the library is loaded: */
#define OUTBOX_SETTINGS(STRING, INT, BOOL, ENUM) \
	STRING(outbox_cloudevents_source, "outbox.cloudevents_source", \
		   "CloudEvents source attribute (ce_source) of the events.", \
		   "Empty: /postgresql/<database>.", \
		   "", PGC_SIGHUP, 0, NULL, NULL) \
	STRING(outbox_databases, "outbox.databases", \
		   "Databases whose outbox is delivered: '*' for every database that has the extension, or names separated by commas.", NULL, \
		   "*", PGC_SIGHUP, 0, check_databases, NULL) \
	INT(outbox_batch_size, "outbox.batch_size", \
		"Most events a worker reads at once.", NULL, \
		1000, 1, 100000, PGC_SIGHUP, 0) \
	INT(outbox_window_size, "outbox.window_size", \
		"Most events a worker has produced and not yet settled.", \
		"Also the most events a crash of the worker can send twice.", \
		10000, 1, 1000000, PGC_SIGHUP, 0) \
	INT(outbox_window_bytes, "outbox.window_bytes", \
		"Most bytes of payloads and keys a worker holds in flight.", \
		"Bounds a worker's memory: about twice this much is held at most.", \
		64 * 1024 * 1024, 1024 * 1024, 1024 * 1024 * 1024, PGC_SIGHUP, GUC_UNIT_BYTE) \
	INT(outbox_poll_interval_ms, "outbox.poll_interval", \
		"Longest a worker sleeps without a commit waking it.", NULL, \
		1000, 10, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS) \
	INT(outbox_max_message_bytes, "outbox.max_message_bytes", \
		"Largest payload outbox_send() accepts.", NULL, \
		1024 * 1024, 1, 1000000000, PGC_SUSET, GUC_UNIT_BYTE) \
	ENUM(outbox_message_format, "outbox.message_format", \
		 "Kafka message value: the protobuf envelope, the raw payload, or CloudEvents (binary mode).", NULL, \
		 OUTBOX_FORMAT_ENVELOPE, message_format_options, PGC_SIGHUP, 0) \
	BOOL(outbox_enabled, "outbox.enabled", \
		 "Whether the workers deliver; off pauses delivery.", NULL, \
		 true, PGC_SIGHUP, 0) \
	BOOL(outbox_partition_pacing, "outbox.partition_pacing", \
		 "Whether a keyed event whose partition has 5 events in flight waits in the worker, not in librdkafka.", \
		 "librdkafka's idempotent producer polls without waiting while such a partition has messages queued.", \
		 true, PGC_SIGHUP, 0) \
	INT(outbox_retry_backoff_min_ms, "outbox.retry_backoff_min", \
		"First wait before retrying after a failed delivery.", NULL, \
		1000, 1, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS) \
	INT(outbox_retry_backoff_max_ms, "outbox.retry_backoff_max", \
		"Longest wait between retries; waits double up to it.", NULL, \
		60000, 1, 24 * 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS) \
	INT(outbox_max_attempts, "outbox.max_attempts", \
		"Attempts after which an event that Kafka refuses becomes a dead letter.", NULL, \
		10, 1, 1000000, PGC_SIGHUP, 0) \
	INT(outbox_shutdown_timeout_ms, "outbox.shutdown_timeout", \
		"How long a stopping worker waits for Kafka's acknowledgements.", NULL, \
		5000, 0, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS) \
	INT(outbox_worker_idle_timeout_ms, "outbox.worker_idle_timeout", \
		"How long a worker whose shard has nothing to deliver stays before it exits.", \
		"The next commit of its shard starts it again. 0 keeps workers running.", \
		60 * 1000, 0, 24 * 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS) \
	INT(outbox_lag_warning_ms, "outbox.lag_warning", \
		"Age of a shard's oldest pending event that raises a WARNING in the log.", \
		"0 turns the warning off.", \
		60 * 1000, 0, 24 * 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS) \
	ENUM(outbox_delivery, "outbox.delivery", \
		 "Delivery mode: at_least_once, or exactly_once with Kafka transactions.", \
		 "A change rebuilds each worker's producer once its window is drained.", \
		 OUTBOX_AT_LEAST_ONCE, delivery_options, PGC_SIGHUP, 0) \
	/* for the tests only: a worker waits there, to be killed in that gap */ \
	ENUM(outbox_test_pause_at, "outbox.test_pause_at", \
		 "Test only: where an exactly-once worker pauses.", NULL, \
		 OUTBOX_PAUSE_NONE, pause_options, PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE)

/* What a row makes: its variable's declaration, definition and setting. */
#define OUTBOX_SETTING_EXTERN_STRING(var, ...) extern char *var;
#define OUTBOX_SETTING_EXTERN_INT(var, ...) extern int var;
#define OUTBOX_SETTING_EXTERN_BOOL(var, ...) extern bool var;
#define OUTBOX_SETTING_EXTERN_ENUM(var, ...) extern int var;

/* a string is NULL until its setting is defined (PostgreSQL copies the default) */
#define OUTBOX_SETTING_VARIABLE_STRING(var, ...) char *var = NULL;
#define OUTBOX_SETTING_VARIABLE_INT(var, name, short_desc, long_desc, boot, ...) \
	int var = boot;
#define OUTBOX_SETTING_VARIABLE_BOOL(var, name, short_desc, long_desc, boot, ...) \
	bool var = boot;
#define OUTBOX_SETTING_VARIABLE_ENUM(var, name, short_desc, long_desc, boot, ...) \
	int var = boot;

#define OUTBOX_SETTING_DEFINE_STRING(var, name, short_desc, long_desc, boot, context, flags, check, show) \
	DefineCustomStringVariable(name, short_desc, long_desc, &var, boot, \
							   context, flags, check, NULL, show);
#define OUTBOX_SETTING_DEFINE_INT(var, name, short_desc, long_desc, boot, min, max, context, flags) \
	DefineCustomIntVariable(name, short_desc, long_desc, &var, boot, min, max, \
							context, flags, NULL, NULL, NULL);
#define OUTBOX_SETTING_DEFINE_BOOL(var, name, short_desc, long_desc, boot, context, flags) \
	DefineCustomBoolVariable(name, short_desc, long_desc, &var, boot, \
							 context, flags, NULL, NULL, NULL);
#define OUTBOX_SETTING_DEFINE_ENUM(var, name, short_desc, long_desc, boot, options, context, flags) \
	DefineCustomEnumVariable(name, short_desc, long_desc, &var, boot, options, \
							 context, flags, NULL, NULL, NULL);

OUTBOX_STARTUP_SETTINGS(OUTBOX_SETTING_EXTERN_STRING, OUTBOX_SETTING_EXTERN_INT,
						OUTBOX_SETTING_EXTERN_BOOL, OUTBOX_SETTING_EXTERN_ENUM)
OUTBOX_SETTINGS(OUTBOX_SETTING_EXTERN_STRING, OUTBOX_SETTING_EXTERN_INT,
				OUTBOX_SETTING_EXTERN_BOOL, OUTBOX_SETTING_EXTERN_ENUM)

extern void outbox_define_settings(void);
extern bool outbox_database_allowed(const char *dbname);

#endif							/* OUTBOX_SETTINGS_H */
