/*
 * database_hooks.h
 *		The utility hook that keeps the workers out of the way of database
 *		DDL and tells the launcher about CREATE/DROP EXTENSION.
 */
#ifndef OUTBOX_DATABASE_HOOKS_H
#define OUTBOX_DATABASE_HOOKS_H

#include "postgres.h"

extern void outbox_install_utility_hook(void);

#endif							/* OUTBOX_DATABASE_HOOKS_H */
