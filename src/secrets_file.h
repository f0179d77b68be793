/*
 * secrets_file.h
 *		A file of secrets, "name=value" a line, that only the server's user
 *		may read: where the Kafka client's and the Schema Registry's
 *		passwords live, so that no setting (whose changes a reload logs)
 *		holds one.
 */
#ifndef OUTBOX_SECRETS_FILE_H
#define OUTBOX_SECRETS_FILE_H

#include "postgres.h"

/* The file's contents (palloc'd), or NULL with *error set (never a secret). */
extern char *outbox_read_secrets_file(const char *path, char **error);

/*
 * The next "name=value" line of contents from *cursor on (blank lines and
 * lines starting with # skipped; the value runs to the end of its line,
 * without escapes), split in place: 1, 0 at the end, -1 for a line not of
 * that form. *lineno counts the lines read.
 */
extern int	outbox_secrets_file_line(char **cursor, int *lineno, char **name, char **value);

#endif							/* OUTBOX_SECRETS_FILE_H */
