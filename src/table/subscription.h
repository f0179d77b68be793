/*
 * subscription.h
 *		Whether the outbox is the target of a logical replication
 *		subscription: its rows are then the publisher's to deliver.
 */
#ifndef OUTBOX_SUBSCRIPTION_H
#define OUTBOX_SUBSCRIPTION_H

#include "postgres.h"

/*
 * The name of a subscription of this database that replicates into the
 * table outbox_table, NULL if none. Inside a transaction.
 */
extern const char *outbox_subscription_holding(Oid outbox_table);

#endif							/* OUTBOX_SUBSCRIPTION_H */
