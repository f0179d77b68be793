/*
 * secrets_file.c
 *		Reads a file of secrets (outbox.kafka_config_file,
 *		outbox.schema_registry_secrets_file): an absolute path to a regular
 *		file of at most 1 MB that only the server's user may access (or, as
 *		PostgreSQL allows for ssl_key_file, root's and only readable by its
 *		group: how Kubernetes mounts a Secret for a pod's fsGroup, in
 *		CloudNativePG), and its "name=value" lines. A secret never goes into an error: errors name
 *		the file and the line, never a value.
 */
#include "secrets_file.h"

#include <ctype.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* A secrets file is a few lines: anything bigger is not one. */
#define SECRETS_FILE_MAX (1024 * 1024)

static char *
read_file(const char *path, size_t *size, char **error)
{
	struct stat st;
	char	   *contents;
	ssize_t		got;
	int			fd;

	if (!is_absolute_path(path))
	{
		*error = psprintf("\"%s\" is not an absolute path", path);
		return NULL;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
	{
		*error = psprintf("could not open file \"%s\": %m", path);
		return NULL;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > SECRETS_FILE_MAX)
	{
		*error = psprintf("\"%s\" is not a regular file of at most %d bytes", path,
						  SECRETS_FILE_MAX);
		close(fd);
		return NULL;
	}
	if ((st.st_mode & S_IRWXO) != 0 ||
		(st.st_mode & (st.st_uid == 0 ? S_IWGRP | S_IXGRP : S_IRWXG)) != 0)
	{
		*error = psprintf("file \"%s\" has group or world access; it must be accessible only by the server's user (chmod 0600), or be root's and only readable by its group (chmod 0440)",
						  path);
		close(fd);
		return NULL;
	}
	contents = palloc(st.st_size + 1);
	got = read(fd, contents, st.st_size);
	close(fd);
	if (got != st.st_size)
	{
		*error = psprintf("could not read file \"%s\"", path);
		pfree(contents);
		return NULL;
	}
	contents[got] = '\0';
	*size = got;
	return contents;
}

/*
 * The next line of *cursor, split in place: 1, 0 at the end, -1 for a
 * line not of the form name=value.
 */
static int
next_line(char **cursor, int *lineno, char **name_out, char **value_out)
{
	while (*cursor != NULL && **cursor != '\0')
	{
		char	   *name = *cursor;
		char	   *next = strchr(name, '\n');
		char	   *eq;
		char	   *value;

		(*lineno)++;
		if (next != NULL)
			*next++ = '\0';
		*cursor = next;
		if (name[0] != '\0' && name[strlen(name) - 1] == '\r')
			name[strlen(name) - 1] = '\0';
		while (isspace((unsigned char) *name))
			name++;
		if (*name == '\0' || *name == '#')
			continue;
		eq = strchr(name, '=');
		if (eq == NULL || eq == name)
			return -1;
		*eq = '\0';
		for (char *end = eq - 1; end > name && isspace((unsigned char) *end); end--)
			*end = '\0';
		value = eq + 1;
		while (*value == ' ' || *value == '\t')
			value++;
		*name_out = name;
		*value_out = value;
		return 1;
	}
	return 0;
}

bool
outbox_secrets_file_read(const char *path, SecretsLineFn fn, void *arg, char **error)
{
	char	   *contents;
	char	   *cursor;
	char	   *name;
	char	   *value;
	int			lineno = 0;
	int			found;
	size_t		size;
	bool		ok = true;

	if (path == NULL || path[0] == '\0')
		return true;
	if ((contents = read_file(path, &size, error)) == NULL)
		return false;
	cursor = contents;
	while ((found = next_line(&cursor, &lineno, &name, &value)) != 0)
	{
		char	   *line_error = NULL;

		if (found < 0 || !fn(name, value, arg, &line_error))
		{
			*error = psprintf("file \"%s\", line %d: %s", path, lineno,
							  found < 0 ? "not of the form name=value" : line_error);
			ok = false;
			break;
		}
	}
	/* the values were copied by fn: leave no secret in freed memory */
	explicit_bzero(contents, size);
	pfree(contents);
	return ok;
}
