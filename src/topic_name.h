/*
 * topic_name.h
 *		Kafka's rule for a topic name, for every room that takes one: an
 *		event's topic (send.c) and the progress topic (settings.c).
 */
#ifndef OUTBOX_TOPIC_NAME_H
#define OUTBOX_TOPIC_NAME_H

#include "postgres.h"

#define KAFKA_MAX_TOPIC_LENGTH 249

/* What is wrong with a name, the first fault in this order. */
typedef enum TopicNameFault
{
	TOPIC_NAME_OK,
	TOPIC_NAME_EMPTY,
	TOPIC_NAME_TOO_LONG,		/* over KAFKA_MAX_TOPIC_LENGTH */
	TOPIC_NAME_DOTS,			/* "." or ".." */
	TOPIC_NAME_BAD_CHARACTER	/* not an ASCII letter, digit, '.', '_', '-' */
} TopicNameFault;

extern TopicNameFault outbox_topic_name_fault(const char *name, size_t len);

#endif							/* OUTBOX_TOPIC_NAME_H */
