/*
 * kafka_stats.h
 *		What a producer's librdkafka statistics say of Kafka's brokers, and
 *		whether Kafka is down.
 */
#ifndef OUTBOX_KAFKA_STATS_H
#define OUTBOX_KAFKA_STATS_H

#include "postgres.h"

typedef struct OutboxKafkaStats OutboxKafkaStats;

extern OutboxKafkaStats *outbox_kafka_stats_create(const char *name);
extern void outbox_kafka_stats_destroy(OutboxKafkaStats *ks);

/* from librdkafka's callbacks: they record only, never report */
extern void outbox_kafka_stats_keep(OutboxKafkaStats *ks, const char *json, size_t json_len);
extern void outbox_kafka_stats_all_down(OutboxKafkaStats *ks);
extern void outbox_kafka_stats_delivered(OutboxKafkaStats *ks);

/* the worker, about once a second: publishes the brokers, judges Kafka */
extern void outbox_kafka_stats_publish(OutboxKafkaStats *ks);
extern bool outbox_kafka_stats_down(OutboxKafkaStats *ks);

#endif							/* OUTBOX_KAFKA_STATS_H */
