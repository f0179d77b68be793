/*
 * transaction.h
 *		Exactly-once delivery: Kafka transactions of what the reads found
 *		until one comes back short (or all of it is acknowledged), each with
 *		its progress record, settled only once committed (transaction.c).
 *		Every call is a no-op for a producer that is not transactional.
 */
#ifndef OUTBOX_TRANSACTION_H
#define OUTBOX_TRANSACTION_H

#include "kafka/producer.h"
#include "table/queue.h"
#include "worker/window.h"

typedef struct OutboxTxn OutboxTxn;

typedef enum TxnOutcome
{
	TXN_NOTHING,				/* nothing open, not due yet, or to call again */
	TXN_COMMITTED,				/* settle the window */
	TXN_ABORTED,				/* read its delivered events again */
	TXN_LOST_OUTCOME			/* fenced or unknown: rebuild the producer */
} TxnOutcome;

/* Sets the transactional.id of (system, database, shard) for the producers. */
extern OutboxTxn *outbox_txn_create(int shard, const char *who);

/*
 * Whether a read may be produced now: transactions initialised, and the
 * last committed transaction settled (the window empty), or a transaction
 * open that takes more reads. May block briefly.
 */
extern bool outbox_txn_ready(OutboxTxn *txn, OutboxProducer *producer, bool window_empty);

/*
 * Around the produce of a read; after a short read (or a full
 * transaction), produced closes it: the progress record goes out at once.
 */
extern void outbox_txn_begin(OutboxTxn *txn, OutboxProducer *producer);
extern void outbox_txn_produced(OutboxTxn *txn, OutboxProducer *producer, OutboxBatch *batch);

/*
 * Once every report of the window is in: close the transaction (its
 * progress record) if the last read did not, then commit it; abort it if
 * an event failed.
 */
extern TxnOutcome outbox_txn_finish(OutboxTxn *txn, OutboxProducer *producer,
									OutboxWindow *window);
extern bool outbox_txn_progress_failed(OutboxTxn *txn);

/* Whether the window may be settled: no transaction open. */
extern bool outbox_txn_may_settle(OutboxTxn *txn);

/* Whether a committed transaction waits for its settle (due at once). */
extern bool outbox_txn_committed(OutboxTxn *txn);

/*
 * A later timeline's progress record was found: another server delivers
 * this shard, this one delivers nothing.
 */
extern bool outbox_txn_superseded(OutboxTxn *txn);

/* A commit or abort is to be called again soon. */
extern bool outbox_txn_waiting(OutboxTxn *txn);

/* After a settle: a committed transaction is done once the window is empty. */
extern void outbox_txn_settled(OutboxTxn *txn, bool window_empty);

/*
 * The producer goes; true if a transaction was open (its delivered events
 * must be read again).
 */
extern bool outbox_txn_forget(OutboxTxn *txn);

#endif							/* OUTBOX_TRANSACTION_H */
