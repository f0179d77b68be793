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

/* What to do with a line's name and value: false with *error to stop. */
typedef bool (*SecretsLineFn) (const char *name, const char *value, void *arg, char **error);

/*
 * Hands each "name=value" line of the file at path to fn (blank lines and
 * lines starting with # skipped; the value runs to the end of its line,
 * without escapes). False with *error (naming the file and line, never a
 * value) if the file cannot be read, a line is not of that form, or fn
 * refuses one. An empty path is a file without lines.
 */
extern bool outbox_secrets_file_read(const char *path, SecretsLineFn fn, void *arg,
									 char **error);

#endif							/* OUTBOX_SECRETS_FILE_H */
