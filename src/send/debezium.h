/*
 * debezium.h
 *		Debezium's outbox router as a trigger (debezium.c): the check of a
 *		new trigger's options, for the utility hook, so that bad ones are
 *		refused by CREATE TRIGGER rather than by the first insert.
 */
#ifndef OUTBOX_DEBEZIUM_H
#define OUTBOX_DEBEZIUM_H

#include "postgres.h"

#include "nodes/parsenodes.h"

/*
 * After CREATE TRIGGER ran: if its function is outbox_debezium(), resolve
 * its options against the table, raising the error the first row would.
 */
extern void outbox_debezium_check_created(CreateTrigStmt *stmt);

#endif							/* OUTBOX_DEBEZIUM_H */
