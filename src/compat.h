/*
 * compat.h
 *		Every difference between the PostgreSQL majors pg_outbox supports
 *		(15, 16, 17, 18, 19), so that no other file tests PG_VERSION_NUM, and
 *		the minor releases whose ABI changed under a built library (see
 *		module.c's guard).
 *
 * A macro here names what the code needs, not the version it appeared in.
 * Macros that name core symbols expand at the caller, which includes the
 * core header that declares them.
 */
#ifndef OUTBOX_COMPAT_H
#define OUTBOX_COMPAT_H

#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/syscache.h"
#include "utils/wait_event.h"

#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 200000
#error "pg_outbox supports PostgreSQL 15, 16, 17, 18 and 19"
#endif

/* 18: the module magic carries a name and version (pg_get_loaded_modules) */
#if PG_VERSION_NUM >= 180000
#define COMPAT_PG_MODULE_MAGIC \
	PG_MODULE_MAGIC_EXT(.name = "outbox", .version = OUTBOX_VERSION)
#else
#define COMPAT_PG_MODULE_MAGIC PG_MODULE_MAGIC
#endif

/* 16: get_guc_variables() counts the variables itself */
#if PG_VERSION_NUM >= 160000
#define compat_get_guc_variables(nvars) get_guc_variables(nvars)
#else
#define compat_get_guc_variables(nvars) \
	(*(nvars) = GetNumConfigOptions(), get_guc_variables())
#endif

/* 17: transaction_timeout, which a worker's session must not inherit */
#if PG_VERSION_NUM >= 170000
#define COMPAT_TRANSACTION_TIMEOUT_SETTING {"transaction_timeout", "0"},
#else
#define COMPAT_TRANSACTION_TIMEOUT_SETTING
#endif

/*
 * The executor's range table of one relation: 16 added the permission
 * infos (one, which checks nothing, but which a constraint's error message
 * looks up for its row detail), 18 the relations initial pruning kept
 * (the one). The caller includes parser/parse_relation.h from 16 on.
 */
#if PG_VERSION_NUM >= 180000
#define compat_ExecInitRangeTable(estate, rte) \
	do { \
		List	   *perminfos_ = NIL; \
		(void) addRTEPermissionInfo(&perminfos_, (rte)); \
		ExecInitRangeTable(estate, list_make1(rte), perminfos_, bms_make_singleton(1)); \
	} while (0)
#elif PG_VERSION_NUM >= 160000
#define compat_ExecInitRangeTable(estate, rte) \
	do { \
		List	   *perminfos_ = NIL; \
		(void) addRTEPermissionInfo(&perminfos_, (rte)); \
		ExecInitRangeTable(estate, list_make1(rte), perminfos_); \
	} while (0)
#else
#define compat_ExecInitRangeTable(estate, rte) \
	ExecInitRangeTable(estate, list_make1(rte))
#endif

/*
 * 16: an insert's index entries can be limited to summarizing indexes;
 * 19: its booleans became flags, after the state
 */
#if PG_VERSION_NUM >= 190000
#define compat_ExecInsertIndexTuples(result, slot, estate) \
	ExecInsertIndexTuples(result, estate, 0, slot, NIL, NULL)
#elif PG_VERSION_NUM >= 160000
#define compat_ExecInsertIndexTuples(result, slot, estate) \
	ExecInsertIndexTuples(result, slot, estate, false, false, NULL, NIL, false)
#else
#define compat_ExecInsertIndexTuples(result, slot, estate) \
	ExecInsertIndexTuples(result, slot, estate, false, false, NULL, NIL)
#endif

/* 16: one ownership check for every catalog */
#if PG_VERSION_NUM >= 160000
#define compat_database_ownercheck(dboid, roleid) \
	object_ownercheck(DatabaseRelationId, dboid, roleid)
#else
#define compat_database_ownercheck(dboid, roleid) \
	pg_database_ownercheck(dboid, roleid)
#endif

/* 19: a delete's partition-change boolean became options (first) */
#if PG_VERSION_NUM >= 190000
#define compat_table_tuple_delete(rel, tid, cid, snapshot, failure) \
	table_tuple_delete(rel, tid, cid, 0, snapshot, InvalidSnapshot, true, failure)
#else
#define compat_table_tuple_delete(rel, tid, cid, snapshot, failure) \
	table_tuple_delete(rel, tid, cid, snapshot, InvalidSnapshot, true, failure, false)
#endif

/* 19: a sequential scan takes flags of the caller's */
#if PG_VERSION_NUM >= 190000
#define compat_table_beginscan(rel, snapshot) table_beginscan(rel, snapshot, 0, NULL, 0)
#else
#define compat_table_beginscan(rel, snapshot) table_beginscan(rel, snapshot, 0, NULL)
#endif

/*
 * 19: a prepared transaction's dummy PGPROC is found by its full id; ours,
 * just prepared, is newer than any wraparound horizon. The caller includes
 * access/twophase.h.
 */
#if PG_VERSION_NUM >= 190000
#define compat_TwoPhaseGetDummyProc(xid, lock_held) \
	TwoPhaseGetDummyProc(FullTransactionIdFromAllowableAt(ReadNextFullTransactionId(), xid), \
						 lock_held)
#else
#define compat_TwoPhaseGetDummyProc(xid, lock_held) TwoPhaseGetDummyProc(xid, lock_held)
#endif

/* 19: a signal handler also gets the signal's information */
#if PG_VERSION_NUM >= 190000
#define COMPAT_SIG_IGN PG_SIG_IGN
#else
#define COMPAT_SIG_IGN SIG_IGN
#endif

/*
 * 19: a parameter's fields of its type are a member of config_generic
 * (struct config_TYPE was a config_generic followed by them). The caller
 * includes utils/guc_tables.h.
 */
#if PG_VERSION_NUM >= 190000
#define COMPAT_GUC_TYPED(gen, type) (&(gen)->_##type)
#define compat_config_enum_lookup_by_value(gen, value) \
	config_enum_lookup_by_value(gen, value)
#else
#define COMPAT_GUC_TYPED(gen, type) ((struct config_##type *) (gen))
#define compat_config_enum_lookup_by_value(gen, value) \
	config_enum_lookup_by_value((struct config_enum *) (gen), value)
#endif

/*
 * 19: a JSONB value is built in a JsonbInState, which holds it once
 * complete; before, in a stack of parse states that the closing push
 * returns it from. The caller includes utils/jsonb.h.
 */
#if PG_VERSION_NUM >= 190000
#define compat_jsonb_build JsonbInState
#define COMPAT_JSONB_BUILD_INIT {0}
#define compat_pushJsonbValue(build, token, value) pushJsonbValue(build, token, value)
#define compat_pushJsonbEnd(build, token) \
	(pushJsonbValue(build, token, NULL), (build)->result)
#else
#define compat_jsonb_build JsonbParseState *
#define COMPAT_JSONB_BUILD_INIT NULL
#define compat_pushJsonbValue(build, token, value) \
	((void) pushJsonbValue(build, token, value))
#define compat_pushJsonbEnd(build, token) pushJsonbValue(build, token, NULL)
#endif

/* 17: PGPROC.pgprocno became MyProcNumber */
#if PG_VERSION_NUM >= 170000
#define COMPAT_MY_PROC_NUMBER MyProcNumber
#else
#define COMPAT_MY_PROC_NUMBER (MyProc->pgprocno)
#endif

/*
 * 17: a wait event set belongs to a resource owner instead of a memory
 * context; the worker's lives as long as the process, in neither.
 */
#if PG_VERSION_NUM >= 170000
#define compat_CreateWaitEventSet(nevents) CreateWaitEventSet(NULL, nevents)
#else
#define compat_CreateWaitEventSet(nevents) \
	CreateWaitEventSet(TopMemoryContext, nevents)
#endif

/* 16: JSON semantic actions return an error code */
#if PG_VERSION_NUM >= 160000
#define COMPAT_JSON_ACTION JsonParseErrorType
#define COMPAT_JSON_ACTION_DONE return JSON_SUCCESS
#else
#define COMPAT_JSON_ACTION void
#define COMPAT_JSON_ACTION_DONE return
#endif

/* 17: the lexer context can be the caller's (NULL: allocated) */
#if PG_VERSION_NUM >= 170000
#define compat_makeJsonLexContextCstringLen(json, len, encoding, need_escapes) \
	makeJsonLexContextCstringLen(NULL, json, len, encoding, need_escapes)
#else
#define compat_makeJsonLexContextCstringLen(json, len, encoding, need_escapes) \
	makeJsonLexContextCstringLen(json, len, encoding, need_escapes)
#endif

/*
 * have_createdb_privilege() is exported by recent minors only (15.20 has
 * it, 15.18 keeps it static): a library calling it would not load on the
 * others. The same rule, the caller's role being a superuser or CREATEDB.
 */
static inline bool
compat_have_createdb_privilege(void)
{
	HeapTuple	tuple;
	bool		createdb;

	if (superuser())
		return true;
	tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
	if (!HeapTupleIsValid(tuple))
		return false;
	createdb = ((Form_pg_authid) GETSTRUCT(tuple))->rolcreatedb;
	ReleaseSysCache(tuple);
	return createdb;
}

/*
 * What a process of the extension waits for: from 17 on a named event of
 * its own in pg_stat_activity.wait_event (and pg_wait_events), before it
 * the generic "Extension". Each name is registered once per process.
 */
typedef enum OutboxWait
{
	OUTBOX_WAIT_WORKER,			/* new events, Kafka's replies, a retry */
	OUTBOX_WAIT_SYNC_STANDBY,	/* the synchronous standbys' flush */
	OUTBOX_WAIT_LAUNCHER,		/* a database to serve, a worker to restart */
	OUTBOX_WAIT_WORKERS_EXIT,	/* a database's workers, before DDL on it */
	OUTBOX_WAIT_COUNT
} OutboxWait;

static inline uint32
compat_wait_event(OutboxWait wait)
{
#if PG_VERSION_NUM >= 170000
	static const char *const names[OUTBOX_WAIT_COUNT] = {
		"OutboxWorkerMain", "OutboxSyncStandby", "OutboxLauncherMain",
		"OutboxWorkersExit"
	};
	static uint32 ids[OUTBOX_WAIT_COUNT];

	if (ids[wait] == 0)
		ids[wait] = WaitEventExtensionNew(names[wait]);
	return ids[wait];
#else
	return PG_WAIT_EXTENSION;
#endif
}

/*
 * WalSndCtlData's "are synchronous standbys defined" became a status with
 * a "not published yet" bit in the minor releases of 2025-05-08 (15.13,
 * 16.9, 17.5; 18 has it from the start). A library built on one side of
 * that change misreads the other's field, so module.c refuses the mix.
 */
#define COMPAT_SYNC_STATUS_SINCE(v) \
	((v) >= 180000 || ((v) >= 170000 ? (v) >= 170005 : \
					   (v) >= 160000 ? (v) >= 160009 : (v) >= 150013))
#if COMPAT_SYNC_STATUS_SINCE(PG_VERSION_NUM)
/* the field's type: bits8 until 18 and uint8 from 19, the same type */
typedef uint8 compat_sync_standbys;
#define COMPAT_SYNC_STANDBYS_FIELD sync_standbys_status
/* before the checkpointer publishes it, the setting itself tells */
#define COMPAT_SYNC_STANDBYS_DEFINED(s) \
	(((s) & SYNC_STANDBY_INIT) == 0 ? \
	 (SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0') : \
	 ((s) & SYNC_STANDBY_DEFINED) != 0)
#else
typedef bool compat_sync_standbys;
#define COMPAT_SYNC_STANDBYS_FIELD sync_standbys_defined
#define COMPAT_SYNC_STANDBYS_DEFINED(s) (s)
#endif

/*
 * The minor releases of 2024-11-14 (15.9, 16.5, 17.1) changed the size of
 * ResultRelInfo, which send.c allocates; those of 2024-11-21 (15.10, 16.6,
 * 17.2) restored it. A library built on one of them runs only on it.
 */
#define COMPAT_RESULT_REL_INFO_CHANGED(v) \
	((v) == 150009 || (v) == 160005 || (v) == 170001)

#endif							/* OUTBOX_COMPAT_H */
