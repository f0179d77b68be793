/*
 * module.c
 *		Entry point of the outbox library: defines the settings everywhere,
 *		and when preloaded, reserves shared state and registers the launcher
 *		that starts the workers of each database. Each piece of shared state
 *		has its owner (slots.c, inbox.c, pauses.c, registry.c, stats.c),
 *		which says its size and sets it up; the one request hook and the
 *		one startup hook here call them in turn. It also refuses to run
 *		on a minor release whose ABI differs from the one it was built on in
 *		a way no compiler sees (compat.h lists them).
 */
#include "compat.h"
#include "kafka/conf.h"
#include "schema/registry_client.h"
#include "send/database_hooks.h"
#include "send/send.h"
#include "send/tracing.h"
#include "settings.h"
#include "shared/inbox.h"
#include "shared/pauses.h"
#include "shared/registry.h"
#include "shared/slots.h"
#include "shared/stats.h"
#include "worker/launcher.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/guc.h"

COMPAT_PG_MODULE_MAGIC;

void		_PG_init(void);

/* "17.12" for 170012 */
static char *
version_text(int version_num)
{
	return psprintf("%d.%d", version_num / 10000, version_num % 10000);
}

/*
 * The major is checked by the module magic; within it, a library built on
 * one side of a struct change and loaded on the other reads the wrong
 * bytes: delivery waits forever for a synchronous standby that does not
 * exist or stops waiting for one that does (WalSndCtlData, durability.c),
 * or the server writes past what send.c allocated (ResultRelInfo).
 */
static const char *
abi_conflict(int built, int running)
{
	if (COMPAT_SYNC_STATUS_SINCE(built) != COMPAT_SYNC_STATUS_SINCE(running))
		return "WalSndCtlData.sync_standbys_status";
	if (COMPAT_RESULT_REL_INFO_CHANGED(built) != COMPAT_RESULT_REL_INFO_CHANGED(running))
		return "the size of ResultRelInfo";
	return NULL;
}

/*
 * The build's minor as the guard sees it. t/003_abi_guard.pl builds a
 * library that claims another, as no older minor's headers are at hand.
 */
#ifndef OUTBOX_ABI_BUILT_VERSION_NUM
#define OUTBOX_ABI_BUILT_VERSION_NUM PG_VERSION_NUM
#endif

/* In the postmaster, an ERROR here keeps the server from starting. */
static void
check_server_abi(void)
{
	int			built = OUTBOX_ABI_BUILT_VERSION_NUM;
	int			running = atoi(GetConfigOption("server_version_num", false, false));
	const char *conflict = abi_conflict(built, running);

	if (conflict != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("outbox was built for PostgreSQL %s and cannot run on PostgreSQL %s",
						version_text(built), version_text(running)),
				 errdetail("The minor releases between them changed %s.", conflict),
				 errhint("Install a build of outbox made against PostgreSQL %s.",
						 version_text(running))));
}

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
request_shared_memory(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(outbox_slots_shmem_size());
	RequestAddinShmemSpace(outbox_inbox_shmem_size());
	RequestAddinShmemSpace(outbox_pauses_shmem_size());
	RequestAddinShmemSpace(outbox_registry_shmem_size());
	RequestAddinShmemSpace(outbox_stats_shmem_size());
	outbox_registry_request_locks();
}

static void
start_shared_memory(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	outbox_slots_shmem_startup();
	outbox_inbox_shmem_startup();
	outbox_pauses_shmem_startup();
	outbox_registry_shmem_startup();
	outbox_stats_shmem_startup();
	LWLockRelease(AddinShmemInitLock);
}

static void
install_shared_memory_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = request_shared_memory;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = start_shared_memory;
}

void
_PG_init(void)
{
	check_server_abi();
	/* the rooms' settings first: outbox_define_settings() reserves the prefix */
	outbox_define_tracing_settings();
	outbox_define_kafka_settings();
	outbox_define_registry_settings();
	outbox_define_settings();
	outbox_install_send_callbacks();

	/* loaded by a backend on first use: outbox_send() works, nothing delivers */
	if (!process_shared_preload_libraries_in_progress)
		return;

	install_shared_memory_hooks();
	outbox_install_utility_hook();
	outbox_register_launcher();
}
