/*
 * event.c
 *		What each outcome of an event does when it is settled, as one table:
 *		whether its row goes, whether the failure is recorded on it and
 *		counts an attempt, whether the next read comes back to it, and how
 *		long it waits. Which Kafka error gives which outcome is
 *		kafka/errors.c's.
 */
#include "event.h"

const EventOutcomePolicy outbox_outcome_policies[] = {
	/* deleted, recorded, counts_attempt, rewinds, read_again, backoff */
	[EVENT_SKIPPED] = {false, false, false, false, true, BACKOFF_NONE},
	[EVENT_IN_FLIGHT] = {false, false, false, false, true, BACKOFF_NONE},
	[EVENT_DELIVERED] = {true, false, false, false, false, BACKOFF_NONE},
	[EVENT_FAILED_RETRIABLE] = {false, true, false, true, true, BACKOFF_SHORTEST},
	[EVENT_FAILED_PERMANENT] = {false, true, true, true, true, BACKOFF_BY_ATTEMPTS},
	[EVENT_NOT_SENT] = {false, false, false, true, true, BACKOFF_NONE},
};

StaticAssertDecl(lengthof(outbox_outcome_policies) == EVENT_NOT_SENT + 1,
				 "every EventOutcome has a policy");
