/*
 * inbox.c
 *		The launcher's inbox: databases whose workers must be (re)started
 *		or stopped (the extension was created, the database was created, a
 *		DDL pause ended), and the launcher's process number, so that a
 *		backend or a worker can wake it.
 */
#include "shared/inbox.h"
#include "compat.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"

/* Requests to the launcher between two of its looks; more: look at all. */
#define MAX_REQUESTS 32

typedef struct InboxShared
{
	slock_t		mutex;
	int			launcher_procno;	/* -1 while no launcher runs */
	int			nrequests;
	bool		request_all;	/* requests overflowed: look at every database */
	Oid			requests[MAX_REQUESTS];
} InboxShared;

static InboxShared *inbox = NULL;

Size
outbox_inbox_shmem_size(void)
{
	return sizeof(InboxShared);
}

/* Called with AddinShmemInitLock held. */
void
outbox_inbox_shmem_startup(void)
{
	bool		found;

	inbox = ShmemInitStruct("outbox launcher inbox", sizeof(InboxShared), &found);
	if (found)
		return;
	memset(inbox, 0, sizeof(*inbox));
	SpinLockInit(&inbox->mutex);
	inbox->launcher_procno = -1;
}

void
outbox_launcher_attach(void)
{
	SpinLockAcquire(&inbox->mutex);
	inbox->launcher_procno = COMPAT_MY_PROC_NUMBER;
	SpinLockRelease(&inbox->mutex);
}

/*
 * Wakes the launcher without asking anything of it: it lists the
 * databases again (a new one is looked at at once), and changes no delay.
 */
void
outbox_wake_launcher(void)
{
	int			launcher;

	if (inbox == NULL)
		return;
	launcher = inbox->launcher_procno;
	if (launcher >= 0)
		SetLatch(&GetPGProcByNumber(launcher)->procLatch);
}

/*
 * Asks the launcher to look at a database again (InvalidOid: at all of
 * them): the extension was created there, the database was created, a DDL
 * pause ended.
 */
void
outbox_request_launcher(Oid dboid)
{
	if (inbox == NULL)
		return;
	SpinLockAcquire(&inbox->mutex);
	if (!OidIsValid(dboid) || inbox->nrequests >= MAX_REQUESTS)
		inbox->request_all = true;
	else
		inbox->requests[inbox->nrequests++] = dboid;
	SpinLockRelease(&inbox->mutex);
	outbox_wake_launcher();
}

/*
 * Launcher: takes the pending requests; returns how many were copied into
 * dboids (at most MAX_REQUESTS), or -1 for "look at every database".
 */
int
outbox_take_launcher_requests(Oid *dboids)
{
	int			n;

	SpinLockAcquire(&inbox->mutex);
	n = inbox->request_all ? -1 : inbox->nrequests;
	if (n > 0)
		memcpy(dboids, inbox->requests, sizeof(Oid) * n);
	inbox->nrequests = 0;
	inbox->request_all = false;
	SpinLockRelease(&inbox->mutex);
	return n;
}

int
outbox_max_launcher_requests(void)
{
	return MAX_REQUESTS;
}
