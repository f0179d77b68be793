/*
 * outbox.h
 *		Declarations shared by pg_outbox's source files: settings, shared
 *		state, the batch a worker delivers, and the pieces that act on it.
 */
#ifndef OUTBOX_H
#define OUTBOX_H

#include "postgres.h"

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "storage/itemptr.h"
#include "fmgr.h"
#include "utils/jsonb.h"

/* outbox.shards is capped so a transaction can track its shards in a mask */
#define OUTBOX_MAX_SHARDS 64

/* Seconds before a worker that failed is started again: no crash loops. */
#define OUTBOX_RESTART_SECONDS 10

/* Kafka header that carries the event id on every message */
#define OUTBOX_ID_HEADER "outbox-id"

/*
 * Kafka header that names the id space the event id belongs to: a UUID made
 * at CREATE EXTENSION and replaced when ids may repeat (promotion to a new
 * timeline). Consumers deduplicate on the pair.
 */
#define OUTBOX_INSTANCE_HEADER "outbox-instance"

typedef enum OutboxMessageFormat
{
	OUTBOX_FORMAT_ENVELOPE,
	OUTBOX_FORMAT_PAYLOAD,
	OUTBOX_FORMAT_CLOUDEVENTS
} OutboxMessageFormat;

/* settings.c */
extern char *outbox_brokers;
extern char *outbox_databases;
extern char *outbox_database;
extern int	outbox_shards;
extern int	outbox_max_workers;
extern int	outbox_batch_size;
extern int	outbox_poll_interval_ms;
extern int	outbox_max_message_bytes;
extern int	outbox_message_format;
extern char *outbox_kafka_config;
extern bool outbox_enabled;
extern int	outbox_retry_backoff_min_ms;
extern int	outbox_retry_backoff_max_ms;
extern int	outbox_max_attempts;
extern int	outbox_shutdown_timeout_ms;
extern int	outbox_batch_bytes;
extern int	outbox_lag_warning_ms;
extern char *outbox_cloudevents_source;

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

/* shmem.c */
typedef enum OutboxSlotState
{
	SLOT_FREE,
	SLOT_STARTING,				/* registered by the launcher */
	SLOT_RUNNING,				/* attached, extension not looked for yet */
	SLOT_DELIVERING,			/* found the extension */
	SLOT_NO_EXTENSION,			/* found none and exited */
	SLOT_EXITED,				/* stopped (SIGTERM) */
	SLOT_FAILED					/* exited with an error */
} OutboxSlotState;

typedef struct OutboxWorkerInfo
{
	Oid			dboid;
	int			shard;
	int			pid;			/* 0 while no process runs */
	OutboxSlotState state;
	TimestampTz since;			/* of the state */
} OutboxWorkerInfo;

extern bool outbox_shmem_available(void);
extern void outbox_shmem_install_hooks(void);
extern int64 outbox_next_id_registered(Oid sequence);
extern void outbox_register_reinsert(int64 min_id);
extern void outbox_clear_inflight(void);
extern int64 outbox_take_snapshot_floor(int slot, uint64 *rewind_generation);
extern void outbox_wake_shards(uint64 shard_mask);
extern int	outbox_worker_slot_count(void);
extern OutboxWorkerInfo outbox_worker_info(int i);
extern uint32 outbox_reserve_worker_slot(int i, Oid dboid, int shard);
extern void outbox_release_worker_slot(int i);
extern bool outbox_worker_attach(int i, uint32 generation, Oid *dboid, int *shard);
extern void outbox_worker_found_extension(int i, bool found);
extern void outbox_launcher_attach(void);
extern void outbox_request_launcher(Oid dboid);
extern int	outbox_take_launcher_requests(Oid *dboids);
extern int	outbox_max_launcher_requests(void);
extern bool outbox_pause_database(Oid dboid);
extern void outbox_resume_database(Oid dboid);
extern bool outbox_database_paused(Oid dboid);

/* send.c */
extern void outbox_install_send_callbacks(void);

/* database_hooks.c */
extern void outbox_install_utility_hook(void);

/* launcher.c */
extern void outbox_register_launcher(void);
PGDLLEXPORT void outbox_launcher_main(Datum main_arg);

/* worker.c */
PGDLLEXPORT void outbox_worker_main(Datum main_arg);
extern const char *outbox_worker_name(void);

/* One event of a batch, copied out of SPI into the batch's memory context. */
typedef enum EventOutcome
{
	EVENT_SKIPPED,				/* not produced this pass: held back */
	EVENT_IN_FLIGHT,
	EVENT_DELIVERED,
	EVENT_FAILED_RETRIABLE,		/* Kafka will take it later: no attempt counted */
	EVENT_FAILED_PERMANENT		/* counts an attempt; may become a dead letter */
} EventOutcome;

typedef struct OutboxEvent
{
	int64		id;
	ItemPointerData ctid;		/* where the row is, to delete it by */
	char	   *topic;
	char	   *key;
	int			keylen;
	bool		key_isnull;
	char	   *payload;
	int			payloadlen;
	bool		payload_isnull;	/* a tombstone */
	char		payload_type;	/* what outbox_send() was given, 0 if unknown */
	int			nheaders;
	char	  **header_names;
	char	  **header_values;
	TimestampTz created_at;
	EventOutcome outcome;
	TimestampTz acked_at;		/* when Kafka acknowledged it (DELIVERED) */
	const char *error;			/* set with a FAILED outcome */
} OutboxEvent;

typedef struct OutboxBatch
{
	int			nevents;
	OutboxEvent *events;
	int			in_flight;		/* produced, delivery report not yet served */
	int64		scan_from;		/* the read covered ids from here */
	int64		floor;			/* lowest id an open transaction can commit */
	int64		held_min_id;	/* lowest id waiting for its retry time */
	uint64		rewind_generation;	/* of the registry, when read */
	Oid			extension_oid;	/* the extension the rows were read from */
	XLogRecPtr	visible_lsn;	/* every commit the read saw ends before */
} OutboxBatch;

/* batch.c: the worker's SQL, as saved plans */
extern int	outbox_reshard_orphans(int shard);
extern bool outbox_extension_exists(void);
extern bool outbox_read_batch(OutboxBatch *batch, int slot, int shard,
							  int64 cursor, int limit, uint64 rewind_generation);
extern void outbox_finish_batch(OutboxBatch *batch, int shard);
extern bool outbox_oldest_pending(int shard, int64 from_id, TimestampTz *created_at);
extern int64 outbox_pending_count(int shard);
extern const char *outbox_instance_id(void);

/* durability.c */
extern XLogRecPtr outbox_visible_commits_end(void);
extern bool outbox_wait_durable(XLogRecPtr lsn);

/* producer.c */
typedef struct OutboxProducer OutboxProducer;

extern OutboxProducer *outbox_producer_create(const char *name,
											  const char *client_id, char **error);
extern void outbox_producer_destroy(OutboxProducer *producer);
struct OutboxRecord;
extern bool outbox_producer_produce(OutboxProducer *producer,
									OutboxBatch *batch, OutboxEvent *event,
									const struct OutboxRecord *record);
extern void outbox_producer_serve(OutboxProducer *producer, int timeout_ms);
extern void outbox_producer_purge(OutboxProducer *producer);
extern bool outbox_producer_is_fatal(OutboxProducer *producer);
extern void outbox_producer_report_state(OutboxProducer *producer);
extern void outbox_producer_poll(OutboxProducer *producer);
extern bool outbox_producer_kafka_down(OutboxProducer *producer);
extern void outbox_producer_publish_brokers(OutboxProducer *producer);

/* lag_alert.c */
extern void outbox_check_lag(int shard, int64 from_id);

/* envelope.c */
extern void outbox_envelope_init(const char *database);
extern void *outbox_envelope_encode_copy(const OutboxEvent *event,
										 const char *instance, size_t *len);

#endif							/* OUTBOX_H */
