/*
 * registry_client.h
 *		The Schema Registry's REST client (Confluent's API, which Apicurio's
 *		ccompat speaks too), for the workers only: register a schema, look up
 *		a subject's version, fetch a schema by id. Its settings are its own
 *		(OUTBOX_REGISTRY_SETTINGS); it reads and writes no table.
 */
#ifndef OUTBOX_REGISTRY_CLIENT_H
#define OUTBOX_REGISTRY_CLIENT_H

#include "settings.h"

/*
 * settings.h's rows. The password and the token are secrets: they live in
 * a file (secrets_file.h), as a reload logs every setting's new value, and
 * never reach a log or last_error.
 */
#define OUTBOX_REGISTRY_SETTINGS(STRING, INT, BOOL, ENUM) \
	STRING(outbox_schema_registry_url, "outbox.schema_registry_url", \
		   "Schema Registry base URLs, separated by commas: tried in turn, the last good one first.", \
		   "Empty: no registry; topics with a schema wait.", \
		   "", PGC_SIGHUP, 0, check_registry_url, NULL) \
	STRING(outbox_schema_registry_user, "outbox.schema_registry_user", \
		   "User name of HTTP basic authentication to the Schema Registry.", NULL, \
		   "", PGC_SIGHUP, GUC_SUPERUSER_ONLY, NULL, NULL) \
	STRING(outbox_schema_registry_secrets_file, "outbox.schema_registry_secrets_file", \
		   "File of the Schema Registry's secrets: password=... (basic authentication) or token=... (a bearer token), a line each.", \
		   "Readable by the server's user only (0600); read at each request, so a new token needs no reload.", \
		   "", PGC_SIGHUP, GUC_SUPERUSER_ONLY, check_registry_secrets_file, NULL) \
	STRING(outbox_schema_registry_ca_file, "outbox.schema_registry_ca_file", \
		   "File of CA certificates (PEM) that verify the Schema Registry's TLS certificate.", \
		   "Empty: the system's CA certificates.", \
		   "", PGC_SIGHUP, GUC_SUPERUSER_ONLY, NULL, NULL) \
	BOOL(outbox_schema_registry_tls_verify, "outbox.schema_registry_tls_verify", \
		 "Whether the Schema Registry's TLS certificate and host name are verified.", NULL, \
		 true, PGC_SIGHUP, GUC_SUPERUSER_ONLY) \
	INT(outbox_schema_registry_connect_timeout_ms, "outbox.schema_registry_connect_timeout", \
		"Longest wait for a connection to one Schema Registry URL.", NULL, \
		2000, 10, 600 * 1000, PGC_SIGHUP, GUC_UNIT_MS) \
	INT(outbox_schema_registry_timeout_ms, "outbox.schema_registry_timeout", \
		"Longest a request to one Schema Registry URL may take, connection included.", NULL, \
		5000, 10, 600 * 1000, PGC_SIGHUP, GUC_UNIT_MS) \
	INT(outbox_schema_registry_refresh_ms, "outbox.schema_registry_refresh", \
		"How often a topic whose schema is a subject's latest version looks it up again.", NULL, \
		60 * 1000, 100, 24 * 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS)

OUTBOX_REGISTRY_SETTINGS(OUTBOX_SETTING_EXTERN_STRING, OUTBOX_SETTING_EXTERN_INT,
						 OUTBOX_SETTING_EXTERN_BOOL, OUTBOX_SETTING_EXTERN_ENUM)

/*
 * How a call ended. An outage is not the schema's fault: no registry
 * answered (connection, TLS, time-out), or one answered as a registry does
 * when it is unwell or not ours to use (5xx, 401, 403, an answer that is
 * not the registry's JSON). A refusal is the registry's word on this
 * subject, version, id or schema (404, 409, 422, any other 4xx).
 */
typedef enum RegistryResult
{
	REGISTRY_OK,
	REGISTRY_OUTAGE,
	REGISTRY_REFUSED
} RegistryResult;

/* What the registry said of a schema (palloc'd in the caller's context). */
typedef struct RegistrySchema
{
	int32		id;
	int32		version;		/* 0 if the answer did not say */
	char	   *schema;			/* NULL if the answer did not say */
} RegistrySchema;

/* POST /subjects/{subject}/versions: schema_type AVRO, JSON or PROTOBUF. */
extern RegistryResult outbox_registry_register(const char *subject, const char *schema_type,
											   const char *schema, RegistrySchema *out,
											   char **error);

/* GET /subjects/{subject}/versions/{version}: a number or "latest". */
extern RegistryResult outbox_registry_version(const char *subject, const char *version,
											  RegistrySchema *out, char **error);

/* GET /schemas/ids/{id} */
extern RegistryResult outbox_registry_schema(int32 id, RegistrySchema *out, char **error);

/* The registry's schemaType of a format of outbox_topic_schema. */
extern const char *outbox_registry_schema_type(const char *format);

extern void outbox_define_registry_settings(void);

#endif							/* OUTBOX_REGISTRY_CLIENT_H */
