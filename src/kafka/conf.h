/*
 * conf.h
 *		The Kafka client's configuration: the settings it comes from
 *		(outbox.brokers, outbox.kafka_config, outbox.kafka_config_file),
 *		their checks, and the one builder the producer and the progress
 *		consumer get their librdkafka configuration from.
 */
#ifndef OUTBOX_KAFKA_CONF_H
#define OUTBOX_KAFKA_CONF_H

#include "settings.h"

#include <librdkafka/rdkafka.h>

#include "lib/stringinfo.h"

/*
 * STRING(variable, name, short description, long description, default,
 * context, flags, check hook, show hook): settings.h's rows.
 */
#define OUTBOX_KAFKA_SETTINGS(STRING, INT, BOOL, ENUM) \
	STRING(outbox_brokers, "outbox.brokers", \
		   "Kafka bootstrap servers, host:port separated by commas.", NULL, \
		   "localhost:9092", PGC_SIGHUP, 0, check_brokers, NULL) \
	STRING(outbox_kafka_config, "outbox.kafka_config", \
		   "Extra librdkafka producer properties, name=value separated by commas.", NULL, \
		   "", PGC_SIGHUP, GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL, \
		   check_kafka_config, show_kafka_config) \
	STRING(outbox_kafka_config_file, "outbox.kafka_config_file", \
		   "File of further librdkafka producer properties, name=value per line: where secrets go.", \
		   "Read when a worker builds its producer; a reload never logs its contents.", \
		   "", PGC_SIGHUP, GUC_SUPERUSER_ONLY, check_kafka_config_file, NULL)

OUTBOX_KAFKA_SETTINGS(OUTBOX_SETTING_EXTERN_STRING, OUTBOX_SETTING_EXTERN_INT,
					  OUTBOX_SETTING_EXTERN_BOOL, OUTBOX_SETTING_EXTERN_ENUM)

/*
 * A librdkafka configuration being built, and every "name=value" set on
 * it, in order: what librdkafka was told, settings and secrets alike.
 */
typedef struct KafkaConf
{
	rd_kafka_conf_t *conf;
	StringInfoData applied;
	bool		checking;		/* a check hook's: errors are librdkafka's
								 * text alone, under the setting's name */
} KafkaConf;

/*
 * A step of a client's own: it sets properties on kc, and returns false
 * with *error set on the first one refused.
 */
typedef bool (*KafkaConfStep) (KafkaConf *kc, void *arg, char **error);

/* What a client (the producer, the progress consumer) adds to the common part. */
typedef struct KafkaConfRole
{
	KafkaConfStep before_user;	/* its own properties: the user may change
								 * them */
	KafkaConfStep after_user;	/* derived from the user's, or not theirs to
								 * change */
	void	   *arg;
} KafkaConfRole;

extern bool outbox_kafka_conf_set(KafkaConf *kc, const char *name,
								  const char *value, char **error);
extern bool outbox_kafka_conf_build(KafkaConf *kc, const KafkaConfRole *role,
									char **error);
extern void outbox_kafka_conf_discard(KafkaConf *kc);
extern void outbox_define_kafka_settings(void);

#endif							/* OUTBOX_KAFKA_CONF_H */
