/*
 * settings.h
 *		The outbox.* settings every module reads, and the parsing of
 *		outbox.kafka_config and outbox.kafka_config_file that both their
 *		checks and the producer use.
 */
#ifndef OUTBOX_SETTINGS_H
#define OUTBOX_SETTINGS_H

#include "postgres.h"

/* outbox.shards is capped so a transaction can track its shards in a mask */
#define OUTBOX_MAX_SHARDS 64

typedef enum OutboxMessageFormat
{
	OUTBOX_FORMAT_ENVELOPE,
	OUTBOX_FORMAT_PAYLOAD,
	OUTBOX_FORMAT_CLOUDEVENTS
} OutboxMessageFormat;

/* outbox.delivery: what a consumer may see (docs/guarantees.md) */
typedef enum OutboxDelivery
{
	OUTBOX_AT_LEAST_ONCE,
	OUTBOX_EXACTLY_ONCE
} OutboxDelivery;

/* outbox.test_pause_at: where a worker stops for a test to kill it */
typedef enum OutboxPausePoint
{
	OUTBOX_PAUSE_NONE,
	OUTBOX_PAUSE_AFTER_PRODUCE,
	OUTBOX_PAUSE_BEFORE_COMMIT,
	OUTBOX_PAUSE_AFTER_COMMIT,
	OUTBOX_PAUSE_AFTER_SETTLE
} OutboxPausePoint;

extern char *outbox_brokers;
extern char *outbox_databases;
extern char *outbox_database;
extern int	outbox_shards;
extern int	outbox_max_workers;
extern int	outbox_batch_size;
extern int	outbox_window_size;
extern int	outbox_window_bytes;
extern int	outbox_poll_interval_ms;
extern int	outbox_max_message_bytes;
extern int	outbox_message_format;
extern char *outbox_kafka_config;
extern char *outbox_kafka_config_file;
extern bool outbox_enabled;
extern bool outbox_partition_pacing;
extern int	outbox_retry_backoff_min_ms;
extern int	outbox_retry_backoff_max_ms;
extern int	outbox_max_attempts;
extern int	outbox_shutdown_timeout_ms;
extern int	outbox_lag_warning_ms;
extern char *outbox_cloudevents_source;
extern int	outbox_delivery;
extern char *outbox_progress_topic;
extern int	outbox_test_pause_at;

/* outbox.test_topic_handles: a producer's topic handles, lowered for a test */
extern int	outbox_test_topic_handles;

extern void outbox_define_settings(void);
extern bool outbox_database_allowed(const char *dbname);

/*
 * Applies each "name=value" of outbox.kafka_config through set_property.
 * Returns false with *error set (palloc'd) on the first failure.
 */
typedef bool (*KafkaPropertySetter) (void *target, const char *name,
									 const char *value, char **error);
extern bool outbox_apply_kafka_config(const char *config, void *target,
									  KafkaPropertySetter set_property,
									  char **error);
/* The same for the "name=value" lines of the file at path ("" or NULL: none). */
extern bool outbox_apply_kafka_config_file(const char *path, void *target,
										   KafkaPropertySetter set_property,
										   char **error);

#endif							/* OUTBOX_SETTINGS_H */
