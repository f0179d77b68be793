/*
 * topic_name.c
 *		Kafka's rule for a topic name, said once: Kafka would refuse a
 *		topic that breaks it only when a worker produces to it, long after
 *		the transaction that sent the event committed.
 */
#include "topic_name.h"

static bool
is_topic_character(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

/* name holds len bytes, not necessarily ended by a zero byte */
TopicNameFault
outbox_topic_name_fault(const char *name, size_t len)
{
	if (len == 0)
		return TOPIC_NAME_EMPTY;
	if (len > KAFKA_MAX_TOPIC_LENGTH)
		return TOPIC_NAME_TOO_LONG;
	if ((len == 1 && name[0] == '.') ||
		(len == 2 && name[0] == '.' && name[1] == '.'))
		return TOPIC_NAME_DOTS;
	for (size_t i = 0; i < len; i++)
		if (!is_topic_character(name[i]))
			return TOPIC_NAME_BAD_CHARACTER;
	return TOPIC_NAME_OK;
}
