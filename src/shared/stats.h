/*
 * stats.h
 *		What each worker publishes about its shard's delivery (state,
 *		counters, acknowledgement latency, Kafka brokers, the ids in
 *		flight), for the outbox_status and outbox_kafka_brokers views and
 *		outbox_explain().
 */
#ifndef OUTBOX_STATS_H
#define OUTBOX_STATS_H

#include "event.h"

/*
 * What outbox_status.state says. A running worker publishes what it is
 * doing (IDLE to SUBSCRIBED); whether one runs, is starting or
 * is gone, and why, the worker slots say (slots.c).
 */
typedef enum OutboxShardState
{
	SHARD_STARTING,
	SHARD_IDLE,
	SHARD_DELIVERING,
	SHARD_WAITING_FOR_KAFKA,
	SHARD_WAITING_FOR_REGISTRY,	/* topics whose schema is not resolved wait */
	SHARD_BACKING_OFF,
	SHARD_PAUSED,
	SHARD_RECOVERY,
	SHARD_SUPERSEDED,
	SHARD_SUBSCRIBED,			/* the outbox is a subscription's target */
	SHARD_NO_EXTENSION,
	SHARD_SLEEPING,				/* no worker: none was needed for a while */
	SHARD_STOPPED
} OutboxShardState;

/* Brokers one producer's statistics can report; more are left out. */
#define OUTBOX_MAX_BROKERS 16

typedef struct OutboxBrokerInfo
{
	char		name[128];		/* host:port */
	char		state[16];		/* librdkafka's: UP, DOWN, CONNECT... */
	double		rtt_avg_ms;
	int64		in_flight;		/* requests waiting for a response */
	int64		requests;		/* sent by the current producer */
} OutboxBrokerInfo;

/* shared memory: module.c's hooks reserve the size, then set it up */
extern Size outbox_stats_shmem_size(void);
extern void outbox_stats_shmem_startup(void);

/* the worker of (dboid, shard), about itself */
extern bool outbox_stats_attach(Oid dboid, int shard);
extern void outbox_stats_set_state(OutboxShardState state);
extern void outbox_stats_error(const char *message);
extern void outbox_stats_settled(OutboxEvent *const *events, int nevents);
extern void outbox_stats_dead_lettered(uint64 count);
extern void outbox_stats_in_flight(int64 first_id, int64 last_id);
/* the delivery mode a worker serves its producer with (worker/delivery.h) */
extern void outbox_stats_delivery(const char *mode);
extern void outbox_stats_transaction(int events, TimestampTz opened_at);
extern void outbox_stats_transaction_ended(bool committed);
extern void outbox_stats_brokers(const OutboxBrokerInfo *brokers, int nbrokers);
extern void outbox_stats_last_error(char *buf, size_t size);
extern bool outbox_stats_lag_warned(TimestampTz *line_at);
extern void outbox_stats_set_lag_warned(bool warned, TimestampTz line_at);

#endif							/* OUTBOX_STATS_H */
