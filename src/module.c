/*
 * module.c
 *		Entry point of the outbox library: defines the settings everywhere,
 *		and when preloaded, reserves shared state and registers the launcher
 *		that starts the workers of each database.
 */
#include "database_hooks.h"
#include "launcher.h"
#include "send.h"
#include "settings.h"
#include "shmem.h"

#include "miscadmin.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	outbox_define_settings();
	outbox_install_send_callbacks();

	/* loaded by a backend on first use: outbox_send() works, nothing delivers */
	if (!process_shared_preload_libraries_in_progress)
		return;

	outbox_shmem_install_hooks();
	outbox_install_utility_hook();
	outbox_register_launcher();
}
