/*
 * pauses.c
 *		DDL pauses: a backend about to run DDL that needs a database free of
 *		connections pauses its workers (database_hooks.c), a worker about
 *		to connect sees the pause and leaves (slots.c), and the launcher
 *		starts none for the database until the pause ends or grows old.
 */
#include "shared/pauses.h"
#include "shared/inbox.h"

#include <signal.h>

#include "miscadmin.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

/*
 * Longest the workers of a database stay away for DDL that needs it free
 * of connections (DROP DATABASE waits at most 5 s for other sessions to
 * leave): a pause older than this was left by a statement that is gone.
 */
#define PAUSE_MAX_MS (60 * 1000)

/* Databases paused at once for DDL; more wait for a free entry. */
#define MAX_PAUSES 16

typedef struct DatabasePause
{
	Oid			dboid;
	int			pid;			/* backend running the DDL */
	TimestampTz since;
} DatabasePause;

typedef struct PausesShared
{
	slock_t		mutex;
	DatabasePause pauses[MAX_PAUSES];
} PausesShared;

static PausesShared *shared = NULL;

Size
outbox_pauses_shmem_size(void)
{
	return sizeof(PausesShared);
}

/* Called with AddinShmemInitLock held. */
void
outbox_pauses_shmem_startup(void)
{
	bool		found;

	shared = ShmemInitStruct("outbox pauses", sizeof(PausesShared), &found);
	if (found)
		return;
	memset(shared, 0, sizeof(*shared));
	SpinLockInit(&shared->mutex);
}

/*
 * Pauses the workers of a database for this backend's DDL, or renews the
 * pause it has; false when every pause entry is taken (the DDL then runs
 * without, and may be refused because of the workers' connections).
 */
bool
outbox_pause_database(Oid dboid)
{
	DatabasePause *entry = NULL;
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < MAX_PAUSES; i++)
	{
		DatabasePause *p = &shared->pauses[i];

		if (p->pid == MyProcPid && p->dboid == dboid)
		{
			entry = p;
			break;
		}
		if (entry == NULL &&
			(p->pid == 0 || TimestampDifferenceExceeds(p->since, now, PAUSE_MAX_MS)))
			entry = p;
	}
	if (entry != NULL)
	{
		entry->dboid = dboid;
		entry->pid = MyProcPid;
		entry->since = now;
	}
	SpinLockRelease(&shared->mutex);
	return entry != NULL;
}

void
outbox_resume_database(Oid dboid)
{
	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < MAX_PAUSES; i++)
		if (shared->pauses[i].pid == MyProcPid && shared->pauses[i].dboid == dboid)
			shared->pauses[i].pid = 0;
	SpinLockRelease(&shared->mutex);
	outbox_request_launcher(dboid);
}

/* True while a live backend runs DDL that needs the database, for a while. */
bool
outbox_database_paused(Oid dboid)
{
	TimestampTz now = GetCurrentTimestamp();
	int			pids[MAX_PAUSES];
	int			npids = 0;
	bool		paused = false;

	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < MAX_PAUSES; i++)
	{
		DatabasePause *p = &shared->pauses[i];

		if (p->pid != 0 && p->dboid == dboid &&
			!TimestampDifferenceExceeds(p->since, now, PAUSE_MAX_MS))
			paused = true;
		if (p->pid != 0 && p->dboid == dboid)
			pids[npids++] = p->pid;
	}
	SpinLockRelease(&shared->mutex);
	/* a backend that died in its DDL left its pause behind (no kill() under a spinlock) */
	for (int i = 0; paused && i < npids; i++)
		if (kill(pids[i], 0) != 0)
			paused = false;
	return paused;
}
