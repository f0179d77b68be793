/*
 * subscription.c
 *		Whether the outbox is the target of a logical replication
 *		subscription. A FOR ALL TABLES publication (a blue/green major
 *		upgrade) copies the outbox to the subscriber, and the publisher's
 *		deletes of what it delivered follow later: a subscriber that
 *		delivered the copies would send every event again, under its own
 *		outbox_instance, where consumers cannot recognise them. So while a
 *		subscription of the database lists the outbox, its rows are the
 *		publisher's to deliver, and the subscriber's workers read nothing;
 *		once it is dropped (the cut-over, docs/operations.md), they deliver
 *		what is left.
 *
 * A subscription counts whether enabled or not: one disabled by an apply
 * error (disable_on_error) or by hand still holds rows whose deletes may
 * be on their way. It counts only if its owner may insert into the outbox
 * (a superuser, or a role granted INSERT on it: nobody by default), as
 * logical replication's apply checks the owner's privileges too: a role
 * that may create subscriptions (pg_create_subscription, PostgreSQL 16 and
 * later) but not write into the outbox cannot hold its delivery.
 *
 * The answer is kept until a subscription changes (the catalog caches'
 * invalidations, taken in at the start of the caller's transaction: a
 * subscription's rows arrive only after its catalog rows committed), and
 * for at most a second (an owner's privileges may change without one).
 * The catalogs are read directly: no SQL, so nothing resolves through a
 * search_path.
 */
#include "table/subscription.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_subscription.h"
#include "catalog/pg_subscription_rel.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#define SUBSCRIPTION_RECHECK_MS 1000

static uint64 subscription_changes = 0;
static bool answer_valid = false;
static Oid	answer_table = InvalidOid;
static TimestampTz answered_at = 0;
static char holding[NAMEDATALEN] = "";

static void
subscriptions_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	subscription_changes++;
	answer_valid = false;
}

static void
register_callbacks(void)
{
	static bool registered = false;

	if (registered)
		return;
	CacheRegisterSyscacheCallback(SUBSCRIPTIONRELMAP, subscriptions_changed, (Datum) 0);
	CacheRegisterSyscacheCallback(SUBSCRIPTIONOID, subscriptions_changed, (Datum) 0);
	registered = true;
}

/*
 * Takes subscription subid into holding if it is of this database and its
 * owner may insert into outbox_table (the first name in order, so the log
 * names one subscription however many there are).
 */
static void
consider_subscription(Oid subid, Oid outbox_table)
{
	HeapTuple	tuple = SearchSysCache1(SUBSCRIPTIONOID, ObjectIdGetDatum(subid));
	Form_pg_subscription subscription;

	if (!HeapTupleIsValid(tuple))
		return;
	subscription = (Form_pg_subscription) GETSTRUCT(tuple);
	if (subscription->subdbid == MyDatabaseId &&
		pg_class_aclcheck(outbox_table, subscription->subowner, ACL_INSERT) == ACLCHECK_OK &&
		(holding[0] == '\0' || strcmp(NameStr(subscription->subname), holding) < 0))
		strlcpy(holding, NameStr(subscription->subname), sizeof(holding));
	ReleaseSysCache(tuple);
}

/* The subscriptions listing the table: an index scan of pg_subscription_rel. */
static void
look_up_subscriptions(Oid outbox_table)
{
	Relation	catalog = table_open(SubscriptionRelRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;

	holding[0] = '\0';
	ScanKeyInit(&key, Anum_pg_subscription_rel_srrelid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(outbox_table));
	scan = systable_beginscan(catalog, SubscriptionRelSrrelidSrsubidIndexId, true, NULL, 1, &key);
	while (HeapTupleIsValid(tuple = systable_getnext(scan)))
		consider_subscription(((Form_pg_subscription_rel) GETSTRUCT(tuple))->srsubid,
							  outbox_table);
	systable_endscan(scan);
	table_close(catalog, AccessShareLock);
}

const char *
outbox_subscription_holding(Oid outbox_table)
{
	TimestampTz now = GetCurrentTimestamp();

	register_callbacks();
	if (!answer_valid || answer_table != outbox_table ||
		TimestampDifferenceExceeds(answered_at, now, SUBSCRIPTION_RECHECK_MS))
	{
		uint64		changes = subscription_changes;

		/* kept only if it succeeded and no change came in meanwhile */
		answer_valid = false;
		look_up_subscriptions(outbox_table);
		answer_table = outbox_table;
		answered_at = now;
		answer_valid = (changes == subscription_changes);
	}
	return holding[0] != '\0' ? holding : NULL;
}
