/*
 * session.h
 *		The settings of a worker's session: the server's, never those a
 *		database owner or a role put into pg_db_role_setting.
 */
#ifndef OUTBOX_SESSION_H
#define OUTBOX_SESSION_H

#include "postgres.h"

extern void outbox_force_session_settings(void);

#endif							/* OUTBOX_SESSION_H */
