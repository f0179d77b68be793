/*
 * debezium.c
 *		outbox_debezium(): a trigger function that delivers from a table of
 *		Debezium's outbox shape (id, aggregatetype, aggregateid, type,
 *		payload, and any other columns) the very records Debezium's outbox
 *		event router (the EventRouter transformation) makes of its rows, so
 *		that a team moves from Debezium without its consumers noticing.
 *
 *		CREATE TRIGGER outboxevent_kafka AFTER INSERT ON outboxevent
 *			FOR EACH ROW EXECUTE FUNCTION outbox_debezium(
 *				'table.fields.additional.placement=type:header:eventType');
 *
 * Each argument is one of the router's options, name=value, by its name
 * and with its default (docs/debezium.md has the table); the converters'
 * options say which bytes the connector's converters would have written.
 * The record: the topic route.topic.replacement makes of the route.by.field
 * column through route.topic.regex; the key, the table.field.event.key
 * column; the value, the payload (expanded, or in an envelope with the
 * columns placed there); the header "id" and the columns placed in
 * headers; the partition placed; the timestamp from
 * table.field.event.timestamp, else the transaction's start.
 *
 * It is a trigger of its own rather than options of outbox_capture(): that
 * one captures a table's changes as change events of pg_outbox's shape,
 * keyed by the primary key; this one routes the rows of an outbox table as
 * records of Debezium's shape. They share no option and no part of the
 * record; what they share, the way an event enters the outbox, is
 * outbox_send_event()'s, the one owner of it (send.c).
 *
 * The options are resolved against the table once per statement (kept in
 * the trigger's FmgrInfo, which lives as long as the statement); a bad one
 * is refused by CREATE TRIGGER (the utility hook calls
 * outbox_debezium_check_created(), where the library is preloaded), and
 * at the first row in any case (the table may have changed since).
 */
#include "send/debezium.h"
#include "send/connect_json.h"
#include "send/send.h"
#include "compat.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "parser/parse_func.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "regex/regex.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

PG_FUNCTION_INFO_V1(outbox_debezium);

/*
 * How Debezium's PostgreSQL connector hands a column's value to the
 * router, for the types supported: a string (its text), an integer, a
 * boolean, a double, a timestamp as a number (io.debezium.time
 * MicroTimestamp, or Timestamp in milliseconds up to 3 fractional
 * digits), bytes.
 */
typedef enum ValueKind
{
	KIND_STRING,
	KIND_INTEGER,
	KIND_BOOLEAN,
	KIND_DOUBLE,
	KIND_TIMESTAMP,
	KIND_BYTES,
	KIND_UNSUPPORTED
} ValueKind;

typedef struct RouterColumn
{
	AttrNumber	attnum;			/* 0: none */
	const char *name;
	Oid			type;
	ValueKind	kind;
	bool		millis;			/* a timestamp(0..3): milliseconds */
	bool		optional;		/* nullable: its Connect schema is optional */
	bool		has_default;	/* Debezium's schema would carry the default */
	FmgrInfo	output;
} RouterColumn;

typedef enum Placement
{
	PLACE_HEADER, PLACE_ENVELOPE, PLACE_PARTITION
} Placement;

typedef struct PlacedColumn
{
	RouterColumn column;
	Placement	placement;
	char	   *alias;
} PlacedColumn;

typedef enum Converter
{
	CONVERTER_JSON,				/* JsonConverter (schemas: *_schemas below) */
	CONVERTER_STRING,			/* StringConverter */
	CONVERTER_BINARY			/* Debezium's BinaryDataConverter, JSON for the rest */
} Converter;

typedef enum InvalidOp
{
	INVALID_OP_WARN, INVALID_OP_ERROR, INVALID_OP_FATAL
} InvalidOp;

/* The trigger's options, each defaulting as the router's does. */
typedef struct RouterOptions
{
	const char *field_event_id;
	const char *field_event_key;
	const char *field_event_type;
	const char *field_event_payload;
	const char *field_event_timestamp;
	const char *field_schema_version;
	const char *placement;
	const char *route_by_field;
	const char *route_topic_regex;
	const char *route_topic_replacement;
	const char *topic_prefix;	/* the connector's, in the envelope's schema name */
	bool		tombstone_on_empty;
	bool		expand_json;
	int			null_as_bytes;	/* table.json.payload.null.behavior: 1 optional_bytes */
	int			missing_ignored;	/* table.field.additional.missing: 1 ignore */
	int			invalid_op;		/* an InvalidOp */
	Converter	key_converter;
	Converter	value_converter;
	bool		key_schemas;	/* key.converter.schemas.enable */
	bool		value_schemas;	/* value.converter.schemas.enable */
	bool		delete_row;
} RouterOptions;

/* The options resolved against the table. */
typedef struct Router
{
	RouterOptions o;
	RouterColumn id;
	RouterColumn key;
	RouterColumn payload;
	RouterColumn route;
	RouterColumn timestamp;
	RouterColumn version;		/* table.field.event.schema.version, or attnum 0 */
	int			nplaced;
	PlacedColumn *placed;
	bool		envelope;		/* a column placed in the envelope */
	bool		envelope_schema;	/* ... and the envelope's schema written */
	char	   *schema_name;	/* its name up to the routed value */
	text	   *regex;			/* route.topic.regex, anchored, PostgreSQL's syntax */
	int			ngroups;
	List	   *group_names;	/* a name (or NULL) per group, from 1 */
	char	   *relation;		/* schema-qualified, quoted, for the delete */
	FmgrInfo	send_flinfo;	/* for outbox_send_event(): this function's, its
								 * fn_extra send.c's (the trigger's is ours) */
} Router;

/* ---- misuse ------------------------------------------------------------- */

static void
refuse(TriggerData *trigdata, int code, const char *message, const char *hint)
{
	ereport(ERROR,
			(errcode(code),
			 errmsg("%s in trigger \"%s\" on table \"%s\"", message,
					trigdata->tg_trigger->tgname,
					RelationGetRelationName(trigdata->tg_relation)),
			 hint ? errhint("%s", hint) : 0));
}

#define OPTIONS_HINT "outbox_debezium() takes Debezium's outbox router options as name=value arguments: see docs/debezium.md."

static void
refuse_event(TriggerData *trigdata)
{
	refuse(trigdata, ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
		   "outbox_debezium() must be fired AFTER INSERT FOR EACH ROW",
		   "CREATE TRIGGER ... AFTER INSERT ON ... FOR EACH ROW EXECUTE FUNCTION outbox_debezium().");
}

static void
check_trigger_event(TriggerData *trigdata)
{
	TriggerEvent event = trigdata->tg_event;

	if (!TRIGGER_FIRED_FOR_ROW(event) || !TRIGGER_FIRED_AFTER(event) ||
		TRIGGER_FIRED_BY_TRUNCATE(event))
		refuse_event(trigdata);
}

/* ---- the options -------------------------------------------------------- */

static bool
parse_flag(const char *value, bool *result)
{
	if (pg_strcasecmp(value, "true") == 0)
		*result = true;
	else if (pg_strcasecmp(value, "false") == 0)
		*result = false;
	else
		return false;
	return true;
}

static Converter
parse_converter(TriggerData *trigdata, const char *name, const char *value, bool for_value)
{
	if (strcmp(value, "org.apache.kafka.connect.json.JsonConverter") == 0 ||
		strcmp(value, "json") == 0)
		return CONVERTER_JSON;
	if (strcmp(value, "org.apache.kafka.connect.storage.StringConverter") == 0 ||
		strcmp(value, "string") == 0)
		return CONVERTER_STRING;
	if (for_value && (strcmp(value, "io.debezium.converters.BinaryDataConverter") == 0 ||
					  strcmp(value, "binary") == 0))
		return CONVERTER_BINARY;
	refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
		   psprintf("outbox_debezium() option \"%s\" does not support \"%s\"", name, value),
		   for_value ?
		   "Use org.apache.kafka.connect.json.JsonConverter (json), org.apache.kafka.connect.storage.StringConverter (string) or io.debezium.converters.BinaryDataConverter (binary)." :
		   "Use org.apache.kafka.connect.json.JsonConverter (json) or org.apache.kafka.connect.storage.StringConverter (string).");
	return CONVERTER_JSON;		/* keep compiler quiet */
}

/* An option whose only supported value is false (schemas disabled). */
static void
require_false(TriggerData *trigdata, const char *name, const char *value)
{
	bool		b;

	if (!parse_flag(value, &b))
		refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
			   psprintf("outbox_debezium() option \"%s\" must be true or false, not \"%s\"", name, value),
			   NULL);
	if (b)
		refuse(trigdata, ERRCODE_FEATURE_NOT_SUPPORTED,
			   psprintf("outbox_debezium() does not support \"%s=true\"", name),
			   "The BinaryDataConverter's delegate is supported with schemas disabled only: see docs/debezium.md.");
}

/* The position of value among an option's words (NULL-ended), any case. */
static int
choose(TriggerData *trigdata, const char *name, const char *value, const char *const *words)
{
	StringInfoData list;

	initStringInfo(&list);
	for (int i = 0; words[i] != NULL; i++)
	{
		if (pg_strcasecmp(value, words[i]) == 0)
			return i;
		appendStringInfo(&list, "%s%s", i > 0 ? ", " : "", words[i]);
	}
	refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
		   psprintf("outbox_debezium() option \"%s\" must be one of %s, not \"%s\"",
					name, list.data, value), NULL);
	return 0;					/* keep compiler quiet */
}

/* One name=value argument into *o; false if the name is unknown. */
static bool
set_option(TriggerData *trigdata, RouterOptions *o, const char *name, const char *value)
{
	static const struct
	{
		const char *name;
		size_t		offset;
	}			strings[] = {
		{"table.field.event.id", offsetof(RouterOptions, field_event_id)},
		{"table.field.event.key", offsetof(RouterOptions, field_event_key)},
		{"table.field.event.type", offsetof(RouterOptions, field_event_type)},
		{"table.field.event.payload", offsetof(RouterOptions, field_event_payload)},
		{"table.field.event.timestamp", offsetof(RouterOptions, field_event_timestamp)},
		{"table.field.event.schema.version", offsetof(RouterOptions, field_schema_version)},
		{"table.fields.additional.placement", offsetof(RouterOptions, placement)},
		{"route.by.field", offsetof(RouterOptions, route_by_field)},
		{"route.topic.regex", offsetof(RouterOptions, route_topic_regex)},
		{"route.topic.replacement", offsetof(RouterOptions, route_topic_replacement)},
		{"topic.prefix", offsetof(RouterOptions, topic_prefix)},
	};
	static const struct
	{
		const char *name;
		size_t		offset;
	}			flags[] = {
		{"route.tombstone.on.empty.payload", offsetof(RouterOptions, tombstone_on_empty)},
		{"table.expand.json.payload", offsetof(RouterOptions, expand_json)},
		{"outbox.delete.after.capture", offsetof(RouterOptions, delete_row)},
		{"key.converter.schemas.enable", offsetof(RouterOptions, key_schemas)},
		{"value.converter.schemas.enable", offsetof(RouterOptions, value_schemas)},
	};
	/* a value's position among its option's words is the value set */
	static const struct
	{
		const char *name;
		size_t		offset;
		const char *values[4];
	}			choices[] = {
		{"table.op.invalid.behavior", offsetof(RouterOptions, invalid_op),
		{"warn", "error", "fatal", NULL}},
		{"table.json.payload.null.behavior", offsetof(RouterOptions, null_as_bytes),
		{"ignore", "optional_bytes", NULL}},
		{"table.field.additional.missing", offsetof(RouterOptions, missing_ignored),
		{"error", "ignore", NULL}},
	};

	for (size_t i = 0; i < lengthof(strings); i++)
		if (strcmp(name, strings[i].name) == 0)
		{
			*(const char **) ((char *) o + strings[i].offset) = value;
			return true;
		}
	for (size_t i = 0; i < lengthof(flags); i++)
		if (strcmp(name, flags[i].name) == 0)
		{
			if (!parse_flag(value, (bool *) ((char *) o + flags[i].offset)))
				refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
					   psprintf("outbox_debezium() option \"%s\" must be true or false, not \"%s\"",
								name, value), NULL);
			return true;
		}
	for (size_t i = 0; i < lengthof(choices); i++)
		if (strcmp(name, choices[i].name) == 0)
		{
			*(int *) ((char *) o + choices[i].offset) =
				choose(trigdata, name, value, choices[i].values);
			return true;
		}
	if (strcmp(name, "key.converter") == 0)
		o->key_converter = parse_converter(trigdata, name, value, false);
	else if (strcmp(name, "value.converter") == 0)
		o->value_converter = parse_converter(trigdata, name, value, true);
	else if (strcmp(name, "value.converter.delegate.converter.type.schemas.enable") == 0)
		require_false(trigdata, name, value);
	else if (strcmp(name, "value.converter.delegate.converter.type") == 0)
	{
		if (parse_converter(trigdata, name, value, false) != CONVERTER_JSON)
			refuse(trigdata, ERRCODE_FEATURE_NOT_SUPPORTED,
				   psprintf("outbox_debezium() option \"%s\" supports the JsonConverter only", name),
				   NULL);
	}
	else
		return false;
	return true;
}

static void
parse_options(TriggerData *trigdata, RouterOptions *o)
{
	Trigger    *trigger = trigdata->tg_trigger;

	memset(o, 0, sizeof(RouterOptions));
	o->field_event_id = "id";
	o->field_event_key = "aggregateid";
	o->field_event_type = "type";
	o->field_event_payload = "payload";
	o->route_by_field = "aggregatetype";
	o->route_topic_regex = "(?<routedByValue>.*)";
	o->route_topic_replacement = "outbox.event.${routedByValue}";

	for (int i = 0; i < trigger->tgnargs; i++)
	{
		char	   *arg = pstrdup(trigger->tgargs[i]);
		char	   *eq = strchr(arg, '=');

		if (eq == NULL)
			refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
				   psprintf("outbox_debezium() argument \"%s\" is not name=value", arg),
				   OPTIONS_HINT);
		*eq = '\0';
		if (strncmp(arg, "tracing.", 8) == 0)
			refuse(trigdata, ERRCODE_FEATURE_NOT_SUPPORTED,
				   psprintf("outbox_debezium() does not support option \"%s\"", arg),
				   "pg_outbox takes the trace context from outbox.traceparent (docs/message.md).");
		if (!set_option(trigdata, o, arg, eq + 1))
			refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
				   psprintf("unknown outbox_debezium() option \"%s\"", arg),
				   OPTIONS_HINT);
	}
	if (o->value_converter == CONVERTER_STRING && o->expand_json)
		refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
			   "outbox_debezium() option table.expand.json.payload=true needs a JSON value converter",
			   "The StringConverter would write the expanded structure's Java toString().");
}

/* ---- columns ------------------------------------------------------------ */

static ValueKind
value_kind(Oid type)
{
	Oid			base = getBaseType(type);

	switch (base)
	{
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
		case UUIDOID:
		case JSONOID:
		case JSONBOID:
			return KIND_STRING;
		case INT2OID:
		case INT4OID:
		case INT8OID:
			return KIND_INTEGER;
		case BOOLOID:
			return KIND_BOOLEAN;
		case FLOAT8OID:
			return KIND_DOUBLE;
		case TIMESTAMPOID:
			return KIND_TIMESTAMP;
		case BYTEAOID:
			return KIND_BYTES;
		default:
			return type_is_enum(base) ? KIND_STRING : KIND_UNSUPPORTED;
	}
}

/*
 * The column an option names, or (missing_ok) attnum 0. A column whose
 * value goes into the record (typed) must be of a type whose value the
 * router's converters are reproduced for.
 */
static void
find_typed_column(TriggerData *trigdata, const char *option, const char *name,
				  bool missing_ok, bool typed, RouterColumn *column)
{
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);

	memset(column, 0, sizeof(RouterColumn));
	column->name = name;
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(desc, i);
		Oid			func;
		bool		varlena;

		if (attr->attisdropped || strcmp(NameStr(attr->attname), name) != 0)
			continue;
		column->attnum = attr->attnum;
		column->type = attr->atttypid;
		column->kind = value_kind(attr->atttypid);
		column->millis = attr->atttypmod >= 0 && attr->atttypmod <= 3;
		column->optional = !attr->attnotnull;
		column->has_default = attr->atthasdef;
		if (typed && column->kind == KIND_UNSUPPORTED)
			refuse(trigdata, ERRCODE_FEATURE_NOT_SUPPORTED,
				   psprintf("column \"%s\" (option %s) is of type %s, which outbox_debezium() does not support",
							name, option, format_type_be(attr->atttypid)),
				   "Supported: text, varchar, char, uuid, json, jsonb, enums, smallint, integer, bigint, boolean, double precision, timestamp, bytea.");
		getTypeOutputInfo(attr->atttypid, &func, &varlena);
		fmgr_info(func, &column->output);
		return;
	}
	if (!missing_ok)
		refuse(trigdata, ERRCODE_UNDEFINED_COLUMN,
			   psprintf("column \"%s\" named by option %s does not exist", name, option),
			   NULL);
}

/* A column whose value goes into the record. */
static void
find_column(TriggerData *trigdata, const char *option, const char *name, bool missing_ok,
			RouterColumn *column)
{
	find_typed_column(trigdata, option, name, missing_ok, true, column);
}

static void
require_kind(TriggerData *trigdata, RouterColumn *column, const char *option, bool ok,
			 const char *what)
{
	if (!ok)
		refuse(trigdata, ERRCODE_DATATYPE_MISMATCH,
			   psprintf("column \"%s\" (option %s) is of type %s: it must be %s",
						column->name, option, format_type_be(column->type), what),
			   NULL);
}

/*
 * The Connect schema Debezium's PostgreSQL connector gives a column of a
 * type supported: its type, and its logical name (version 1) if any;
 * false for a type whose schema is not reproduced (an enum's carries its
 * labels; a domain's was not checked against Debezium's).
 */
static bool
column_schema_parts(RouterColumn *column, const char **type, const char **logical)
{
	*type = NULL;
	*logical = NULL;
	switch (column->type)
	{
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
			*type = "string";
			return true;
		case UUIDOID:
			*type = "string";
			*logical = "io.debezium.data.Uuid";
			return true;
		case JSONOID:
		case JSONBOID:
			*type = "string";
			*logical = "io.debezium.data.Json";
			return true;
		case INT2OID:
			*type = "int16";
			return true;
		case INT4OID:
			*type = "int32";
			return true;
		case INT8OID:
			*type = "int64";
			return true;
		case BOOLOID:
			*type = "boolean";
			return true;
		case FLOAT8OID:
			*type = "double";
			return true;
		case TIMESTAMPOID:
			*type = "int64";
			*logical = column->millis ? "io.debezium.time.Timestamp" : "io.debezium.time.MicroTimestamp";
			return true;
		case BYTEAOID:
			*type = "bytes";
			return true;
		default:
			return false;
	}
}

/*
 * A column whose schema the converter writes (schemas enabled): of a type
 * whose schema is reproduced, without a default (Debezium's schema
 * carries the default as its converters read the expression).
 */
static void
require_schema(TriggerData *trigdata, RouterColumn *column, const char *option)
{
	const char *type;
	const char *logical;

	if (!column_schema_parts(column, &type, &logical))
		refuse(trigdata, ERRCODE_FEATURE_NOT_SUPPORTED,
			   psprintf("column \"%s\" (option %s) is of type %s, whose schema outbox_debezium() does not write",
						column->name, option, format_type_be(column->type)),
			   "With schemas enabled: text, varchar, char, uuid, json, jsonb, smallint, integer, bigint, boolean, double precision, timestamp, bytea.");
	if (column->has_default)
		refuse(trigdata, ERRCODE_FEATURE_NOT_SUPPORTED,
			   psprintf("column \"%s\" (option %s) has a default, which outbox_debezium() does not write in its schema",
						column->name, option),
			   "Debezium's schema of a column carries its default: drop the default, or disable schemas.");
}

/*
 * The envelope's schema (schemas enabled): Debezium's structure of the
 * payload's schema (the column's, or the expanded payload's) and the placed
 * columns' schemas, named
 * <topic.prefix>.<schema>.<table>.<routed value>.Value, versioned by the
 * table.field.event.schema.version column.
 */
static void
resolve_envelope_schema(TriggerData *trigdata, Router *r)
{
	Relation	rel = trigdata->tg_relation;

	if (r->o.topic_prefix == NULL)
		refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
			   "outbox_debezium() needs option topic.prefix to place a column in the envelope with value.converter.schemas.enable=true",
			   "Give the connector's topic.prefix: the envelope's schema is named after it.");
	for (int i = 0; i < r->nplaced; i++)
		if (r->placed[i].placement == PLACE_ENVELOPE)
			require_schema(trigdata, &r->placed[i].column, "table.fields.additional.placement");
	if (r->version.attnum != 0)
		require_kind(trigdata, &r->version, "table.field.event.schema.version",
					 r->version.type == INT4OID, "integer");
	r->schema_name = psprintf("%s.%s.%s.", r->o.topic_prefix,
							  get_namespace_name(RelationGetNamespace(rel)),
							  RelationGetRelationName(rel));
	r->envelope_schema = true;
}

/* table.fields.additional.placement: column:placement[:alias], comma-separated. */
static void
resolve_placements(TriggerData *trigdata, Router *r)
{
	const char *option = "table.fields.additional.placement";
	List	   *entries = NIL;
	ListCell   *lc;
	char	   *list = pstrdup(r->o.placement);
	char	   *save;

	for (char *entry = strtok_r(list, ",", &save); entry; entry = strtok_r(NULL, ",", &save))
		entries = lappend(entries, entry);
	r->placed = palloc0(sizeof(PlacedColumn) * Max(list_length(entries), 1));
	foreach(lc, entries)
	{
		char	   *parts[4] = {NULL};
		int			n = 0;
		char	   *part_save;
		PlacedColumn *p = &r->placed[r->nplaced];

		for (char *part = strtok_r(lfirst(lc), ":", &part_save); part && n < 4;
			 part = strtok_r(NULL, ":", &part_save))
			parts[n++] = part;
		if (n != 2 && n != 3)
			refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
				   psprintf("outbox_debezium() option %s has \"%s\": give column:placement or column:placement:alias",
							option, (char *) lfirst(lc)), NULL);
		for (int i = 0; i < n; i++)
		{
			char	   *end;

			while (isspace((unsigned char) *parts[i]))
				parts[i]++;
			end = parts[i] + strlen(parts[i]);
			while (end > parts[i] && isspace((unsigned char) end[-1]))
				*--end = '\0';
		}
		if (pg_strcasecmp(parts[1], "header") == 0)
			p->placement = PLACE_HEADER;
		else if (pg_strcasecmp(parts[1], "envelope") == 0)
			p->placement = PLACE_ENVELOPE;
		else if (pg_strcasecmp(parts[1], "partition") == 0)
			p->placement = PLACE_PARTITION;
		else
			refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
				   psprintf("outbox_debezium() option %s places column \"%s\" in \"%s\"",
							option, parts[0], parts[1]),
				   "A column goes in a header, the envelope or the partition.");
		find_column(trigdata, option, parts[0], r->o.missing_ignored, &p->column);
		if (p->column.attnum == 0)
			continue;
		if (p->placement == PLACE_PARTITION)
			require_kind(trigdata, &p->column, option, getBaseType(p->column.type) == INT4OID,
						 "integer to be placed in the partition");
		if (p->placement == PLACE_HEADER)
			require_kind(trigdata, &p->column, option, p->column.kind != KIND_BYTES,
						 "of another type than bytea to be placed in a header");
		p->alias = pstrdup(n == 3 ? parts[2] : parts[0]);
		r->envelope |= (p->placement == PLACE_ENVELOPE);
		r->nplaced++;
	}
}

/* ---- the topic ---------------------------------------------------------- */

/*
 * route.topic.regex in PostgreSQL's syntax: Java's named groups (?<name>...)
 * become plain groups, their names kept by number; the rest is the common
 * syntax of both engines. Anchored at both ends: Kafka's RegexRouter
 * routes only a value the expression matches as a whole.
 */
static void
resolve_regex(TriggerData *trigdata, Router *r)
{
	const char *java = r->o.route_topic_regex;
	StringInfoData re;
	bool		in_class = false;

	initStringInfo(&re);
	appendStringInfoString(&re, "^(?:");
	r->group_names = list_make1(NULL);	/* group 0: the whole match */
	for (const char *c = java; *c; c++)
	{
		if (*c == '\\' && c[1] != '\0')
		{
			appendBinaryStringInfo(&re, c, 2);
			c++;
			continue;
		}
		if (in_class)
			in_class = (*c != ']');
		else if (*c == '[')
		{
			in_class = true;
			/* a ] first in the class is one of its characters */
			appendStringInfoChar(&re, *c);
			if (c[1] == '^')
				appendStringInfoChar(&re, *++c);
			if (c[1] == ']')
				appendStringInfoChar(&re, *++c);
			continue;
		}
		else if (*c == '(' && c[1] == '?' && c[2] == '<' && c[3] != '=' && c[3] != '!')
		{
			const char *end = strchr(c + 3, '>');

			if (end == NULL)
				refuse(trigdata, ERRCODE_INVALID_REGULAR_EXPRESSION,
					   psprintf("outbox_debezium() option route.topic.regex \"%s\" has an unterminated group name",
								java), NULL);
			r->group_names = lappend(r->group_names, pnstrdup(c + 3, end - (c + 3)));
			appendStringInfoChar(&re, '(');
			c = end;
			continue;
		}
		else if (*c == '(' && c[1] != '?')
			r->group_names = lappend(r->group_names, NULL);
		appendStringInfoChar(&re, *c);
	}
	appendStringInfoString(&re, ")$");
	r->regex = cstring_to_text(re.data);
	r->ngroups = list_length(r->group_names) - 1;
	/* a bad expression is refused now, by the engine */
	(void) RE_compile_and_cache(r->regex, REG_ADVANCED, C_COLLATION_OID);
}

/* The group a replacement's reference names: $n, or ${name}; -1 if none. */
static int
group_reference(Router *r, const char **c)
{
	const char *s = *c + 1;		/* past the $ */

	if (*s == '{')
	{
		const char *end = strchr(s, '}');
		ListCell   *lc;

		if (end == NULL)
			return -1;
		foreach(lc, r->group_names)
		{
			const char *name = lfirst(lc);

			if (name && strlen(name) == (size_t) (end - s - 1) &&
				strncmp(name, s + 1, end - s - 1) == 0)
			{
				*c = end;
				return foreach_current_index(lc);
			}
		}
		return -1;
	}
	if (isdigit((unsigned char) *s))
	{
		/* the first digit always; the next ones while the group exists */
		int			group = *s - '0';

		while (isdigit((unsigned char) s[1]) && group * 10 + (s[1] - '0') <= r->ngroups)
			group = group * 10 + (*++s - '0');
		*c = s;
		return group <= r->ngroups ? group : -1;
	}
	return -1;
}

/* The replacement, Java's syntax: $n, ${name}, and \ taking the next character as it is. */
static char *
replace(TriggerData *trigdata, Router *r, const char *value, const pg_wchar *wide,
		const regmatch_t *match)
{
	StringInfoData out;

	initStringInfo(&out);
	for (const char *c = r->o.route_topic_replacement; *c; c++)
	{
		int			group;

		if (*c == '\\' && c[1] != '\0')
			appendStringInfoChar(&out, *++c);
		else if (*c != '$')
			appendStringInfoChar(&out, *c);
		else if ((group = group_reference(r, &c)) < 0)
			refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
				   psprintf("outbox_debezium() option route.topic.replacement \"%s\" refers to a group route.topic.regex does not have",
							r->o.route_topic_replacement), NULL);
		else if (value != NULL && match[group].rm_so >= 0)
		{
			int			len = match[group].rm_eo - match[group].rm_so;
			char	   *bytes = palloc(len * MAX_MULTIBYTE_CHAR_LEN + 1);
			int			n = pg_wchar2mb_with_len(wide + match[group].rm_so, bytes, len);

			appendBinaryStringInfo(&out, bytes, n);
		}
	}
	return out.data;
}

/* The record's topic of a route.by.field value. */
static text *
route(TriggerData *trigdata, Router *r, const char *value)
{
	int			len = strlen(value);
	pg_wchar   *wide = palloc(sizeof(pg_wchar) * (len + 1));
	int			wlen = pg_mb2wchar_with_len(value, wide, len);
	regmatch_t *match = palloc(sizeof(regmatch_t) * (r->ngroups + 1));
	regex_t    *re = RE_compile_and_cache(r->regex, REG_ADVANCED, C_COLLATION_OID);

	/* not matched: the record keeps the value as its topic */
	if (pg_regexec(re, wide, wlen, 0, NULL, r->ngroups + 1, match, 0) != REG_OKAY)
		return cstring_to_text(value);
	return cstring_to_text(replace(trigdata, r, value, wide, match));
}

/* ---- the router, resolved ------------------------------------------------ */

static Router *
resolve_router(TriggerData *trigdata)
{
	Router	   *r = palloc0(sizeof(Router));
	Relation	rel = trigdata->tg_relation;

	parse_options(trigdata, &r->o);
	find_column(trigdata, "table.field.event.id", r->o.field_event_id, false, &r->id);
	find_column(trigdata, "table.field.event.key", r->o.field_event_key, false, &r->key);
	find_column(trigdata, "table.field.event.payload", r->o.field_event_payload, false,
				&r->payload);
	find_column(trigdata, "route.by.field", r->o.route_by_field, false, &r->route);
	require_kind(trigdata, &r->id, "table.field.event.id", r->id.kind != KIND_BYTES,
				 "of another type than bytea: it is the header \"id\"");
	require_kind(trigdata, &r->route, "route.by.field", r->route.kind == KIND_STRING,
				 "a string type (text, varchar, char, uuid, an enum)");
	require_kind(trigdata, &r->payload, "table.field.event.payload",
				 r->payload.kind == KIND_STRING || r->payload.kind == KIND_BYTES,
				 "jsonb, json, a string type or bytea");
	require_kind(trigdata, &r->key, "table.field.event.key",
				 r->key.kind != KIND_BYTES || r->o.key_converter == CONVERTER_JSON,
				 "of another type than bytea with the StringConverter");
	if (r->o.field_event_timestamp != NULL)
	{
		find_typed_column(trigdata, "table.field.event.timestamp", r->o.field_event_timestamp,
						  false, false, &r->timestamp);
		require_kind(trigdata, &r->timestamp, "table.field.event.timestamp",
					 r->timestamp.type == TIMESTAMPOID || r->timestamp.type == TIMESTAMPTZOID,
					 "timestamp (or timestamptz)");
	}
	if (r->o.field_schema_version != NULL)
	{
		/* a schema's version: only in the envelope's schema */
		find_typed_column(trigdata, "table.field.event.schema.version",
						  r->o.field_schema_version, false, false, &r->version);
	}
	if (r->o.placement != NULL)
		resolve_placements(trigdata, r);
	if (r->envelope && r->o.value_converter == CONVERTER_STRING)
		refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
			   "outbox_debezium() cannot place a column in the envelope with the StringConverter",
			   "The StringConverter would write the envelope structure's Java toString().");
	if (r->o.key_schemas && r->o.key_converter == CONVERTER_JSON)
		require_schema(trigdata, &r->key, "table.field.event.key");
	if (r->o.value_schemas && r->o.value_converter == CONVERTER_JSON)
	{
		require_schema(trigdata, &r->payload, "table.field.event.payload");
		if (r->envelope)
			resolve_envelope_schema(trigdata, r);
	}
	if (r->payload.kind == KIND_BYTES && r->o.value_converter == CONVERTER_STRING)
		refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
			   "outbox_debezium() cannot write a bytea payload with the StringConverter",
			   "Use io.debezium.converters.BinaryDataConverter for the bytes as they are.");
	resolve_regex(trigdata, r);
	/* a reference to a group the expression lacks: refused now too */
	(void) replace(trigdata, r, NULL, NULL, NULL);
	r->relation = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
											 RelationGetRelationName(rel));
	return r;
}

/* The trigger's router, resolved at the statement's first row. */
static Router *
router_of(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	MemoryContext old;

	if (fcinfo->flinfo->fn_extra == NULL)
	{
		Router	   *r;

		old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
		r = resolve_router(trigdata);
		r->send_flinfo = *fcinfo->flinfo;
		r->send_flinfo.fn_extra = NULL;
		fcinfo->flinfo->fn_extra = r;
		MemoryContextSwitchTo(old);
	}
	return (Router *) fcinfo->flinfo->fn_extra;
}

/* ---- values ------------------------------------------------------------- */

static char *
column_text(RouterColumn *column, Datum value)
{
	return OutputFunctionCall(&column->output, value);
}

/* A timestamp as Debezium's number: microseconds, or milliseconds, since 1970. */
static int64
timestamp_number(RouterColumn *column, Datum value)
{
	int64		micros = outbox_unix_microseconds(DatumGetTimestamp(value));

	return column->millis ? micros / 1000 : micros;
}

/* A value as the JsonConverter writes it. */
static void
append_json(StringInfo out, RouterColumn *column, Datum value, bool isnull)
{
	char	   *text;

	if (isnull)
	{
		appendStringInfoString(out, "null");
		return;
	}
	switch (column->kind)
	{
		case KIND_STRING:
			text = column_text(column, value);
			connect_json_string(out, text, strlen(text));
			break;
		case KIND_INTEGER:
			appendStringInfoString(out, column_text(column, value));
			break;
		case KIND_BOOLEAN:
			appendStringInfoString(out, DatumGetBool(value) ? "true" : "false");
			break;
		case KIND_DOUBLE:
			connect_json_double(out, DatumGetFloat8(value));
			break;
		case KIND_TIMESTAMP:
			appendStringInfo(out, INT64_FORMAT, timestamp_number(column, value));
			break;
		case KIND_BYTES:
			connect_json_bytes(out, VARDATA_ANY(DatumGetByteaPP(value)),
							   VARSIZE_ANY_EXHDR(DatumGetByteaPP(value)));
			break;
		case KIND_UNSUPPORTED:
			pg_unreachable();
	}
}

/*
 * A column's schema as the JsonConverter writes it (schemas enabled);
 * field: its name as a structure's field, or NULL.
 */
static void
append_column_schema(StringInfo out, RouterColumn *column, const char *field)
{
	const char *type;
	const char *logical;

	(void) column_schema_parts(column, &type, &logical);
	appendStringInfo(out, "{\"type\":\"%s\",\"optional\":%s", type,
					 column->optional ? "true" : "false");
	if (logical != NULL)
		appendStringInfo(out, ",\"name\":\"%s\",\"version\":1", logical);
	if (field != NULL)
	{
		appendStringInfoString(out, ",\"field\":");
		connect_json_string(out, field, strlen(field));
	}
	appendStringInfoChar(out, '}');
}

/* The JsonConverter's envelope of a value and its schema (schemas enabled). */
static void
append_with_schema(StringInfo out, StringInfo schema, StringInfo value)
{
	appendStringInfoString(out, "{\"schema\":");
	appendBinaryStringInfo(out, schema->data, schema->len);
	appendStringInfoString(out, ",\"payload\":");
	appendBinaryStringInfo(out, value->data, value->len);
	appendStringInfoChar(out, '}');
}

/* A value as a string (the header converter's, the StringConverter's). */
static char *
plain_text(RouterColumn *column, Datum value)
{
	StringInfoData out;

	switch (column->kind)
	{
		case KIND_BOOLEAN:
			return DatumGetBool(value) ? "true" : "false";
		case KIND_DOUBLE:
			initStringInfo(&out);
			connect_json_double(&out, DatumGetFloat8(value));
			return out.data;
		case KIND_TIMESTAMP:
			return psprintf(INT64_FORMAT, timestamp_number(column, value));
		default:
			return column_text(column, value);
	}
}

/*
 * The payload as the value's converter writes it; NULL: a null value.
 * schema (unless NULL): the payload's schema, the column's or the one the
 * expansion inferred.
 */
static bytea *
payload_value(Router *r, Datum payload, bool isnull, StringInfo json, StringInfo schema)
{
	if (isnull)
	{
		appendStringInfoString(json, "null");
		if (schema != NULL)
			append_column_schema(schema, &r->payload, NULL);
		return NULL;
	}
	if (r->payload.kind == KIND_BYTES)
	{
		bytea	   *bytes = DatumGetByteaPP(payload);

		connect_json_bytes(json, VARDATA_ANY(bytes), VARSIZE_ANY_EXHDR(bytes));
		if (schema != NULL)
			append_column_schema(schema, &r->payload, NULL);
		return r->o.value_converter == CONVERTER_BINARY ? bytes : NULL;
	}
	else
	{
		char	   *text = column_text(&r->payload, payload);
		int			len = strlen(text);

		if (!(r->o.expand_json &&
			  connect_json_expand(json, text, len, r->o.null_as_bytes, schema)))
		{
			connect_json_string(json, text, len);
			if (schema != NULL)
				append_column_schema(schema, &r->payload, NULL);
		}
		return r->o.value_converter == CONVERTER_STRING ? (bytea *) cstring_to_text(text) : NULL;
	}
}

static bool
blank(const char *s)
{
	/* Java's trim(): every character up to the space */
	for (; *s; s++)
		if ((unsigned char) *s > ' ')
			return false;
	return true;
}

/* ---- the record --------------------------------------------------------- */

typedef struct RouterRecord
{
	text	   *topic;
	StringInfoData key;
	bool		key_isnull;
	bytea	   *value;			/* NULL: a tombstone */
	Jsonb	   *headers;
	OutboxSendExtras extras;
} RouterRecord;

static Datum
get_value(TupleTableSlot *slot, RouterColumn *column, bool *isnull)
{
	return slot_getattr(slot, column->attnum, isnull);
}

static void
push_header(compat_jsonb_build *state, const char *name, const char *value)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = (char *) name;
	v.val.string.len = strlen(name);
	compat_pushJsonbValue(state, WJB_KEY, &v);
	v.val.string.val = (char *) value;
	v.val.string.len = strlen(value);
	compat_pushJsonbValue(state, WJB_VALUE, &v);
}

/*
 * The headers: "id", then the columns placed there. A NULL value has no
 * header (an event's headers are strings).
 */
static Jsonb *
build_headers(Router *r, TupleTableSlot *slot)
{
	compat_jsonb_build state = COMPAT_JSONB_BUILD_INIT;
	bool		isnull;
	Datum		value = get_value(slot, &r->id, &isnull);

	compat_pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	if (!isnull)
		push_header(&state, "id", plain_text(&r->id, value));
	for (int i = 0; i < r->nplaced; i++)
	{
		PlacedColumn *p = &r->placed[i];

		if (p->placement != PLACE_HEADER)
			continue;
		value = get_value(slot, &p->column, &isnull);
		if (!isnull)
			push_header(&state, p->alias, plain_text(&p->column, value));
	}
	return JsonbValueToJsonb(compat_pushJsonbEnd(&state, WJB_END_OBJECT));
}

/*
 * The envelope: the payload and the columns placed there; payload_schema
 * (unless NULL) as payload_value()'s schema.
 */
static void
append_envelope(StringInfo out, Router *r, TupleTableSlot *slot, Datum payload, bool isnull,
				StringInfo payload_schema)
{
	appendStringInfoString(out, "{\"payload\":");
	(void) payload_value(r, payload, isnull, out, payload_schema);
	for (int i = 0; i < r->nplaced; i++)
	{
		PlacedColumn *p = &r->placed[i];
		Datum		value;

		if (p->placement != PLACE_ENVELOPE)
			continue;
		value = get_value(slot, &p->column, &isnull);
		appendStringInfoChar(out, ',');
		connect_json_string(out, p->alias, strlen(p->alias));
		appendStringInfoChar(out, ':');
		append_json(out, &p->column, value, isnull);
	}
	appendStringInfoChar(out, '}');
}

/*
 * The envelope's schema (resolve_envelope_schema() says what), of the
 * payload's schema append_envelope() wrote, named after this row's routed
 * value: Debezium names it after the first record its task routed with the
 * same payload schema, and keeps that name (see docs/debezium.md).
 */
static void
append_envelope_schema(StringInfo out, Router *r, TupleTableSlot *slot, StringInfo payload_schema)
{
	bool		isnull;
	Datum		value = get_value(slot, &r->route, &isnull);
	char	   *name = psprintf("%s%s.Value", r->schema_name, column_text(&r->route, value));

	appendStringInfoString(out, "{\"type\":\"struct\",\"fields\":[");
	/* as a field: the field's name before its closing brace */
	appendBinaryStringInfo(out, payload_schema->data, payload_schema->len - 1);
	appendStringInfoString(out, ",\"field\":\"payload\"}");
	for (int i = 0; i < r->nplaced; i++)
	{
		PlacedColumn *p = &r->placed[i];

		if (p->placement != PLACE_ENVELOPE)
			continue;
		appendStringInfoChar(out, ',');
		append_column_schema(out, &p->column, p->alias);
	}
	appendStringInfoString(out, "],\"optional\":false,\"name\":");
	connect_json_string(out, name, strlen(name));
	if (r->version.attnum != 0)
	{
		value = get_value(slot, &r->version, &isnull);
		if (!isnull)
			appendStringInfo(out, ",\"version\":%d", DatumGetInt32(value));
	}
	appendStringInfoChar(out, '}');
}

/* The value: the payload, or the envelope of it and the columns placed there. */
static bytea *
build_value(Router *r, TupleTableSlot *slot)
{
	bool		isnull;
	Datum		payload = get_value(slot, &r->payload, &isnull);
	StringInfoData json;
	bytea	   *as_is;

	if (r->o.tombstone_on_empty &&
		(isnull || (r->payload.kind == KIND_STRING &&
					blank(column_text(&r->payload, payload)))))
		return NULL;

	/* bytea's header first, filled in at the end */
	initStringInfo(&json);
	appendStringInfoSpaces(&json, VARHDRSZ);
	if (r->envelope_schema ||
		(!r->envelope && r->o.value_schemas && r->o.value_converter == CONVERTER_JSON))
	{
		StringInfoData schema;
		StringInfoData value;

		initStringInfo(&schema);
		initStringInfo(&value);
		if (r->envelope)
		{
			StringInfoData payload_schema;

			initStringInfo(&payload_schema);
			append_envelope(&value, r, slot, payload, isnull, &payload_schema);
			append_envelope_schema(&schema, r, slot, &payload_schema);
		}
		else
			(void) payload_value(r, payload, isnull, &value, &schema);
		append_with_schema(&json, &schema, &value);
	}
	else if (r->envelope)
		append_envelope(&json, r, slot, payload, isnull, NULL);
	else
	{
		as_is = payload_value(r, payload, isnull, &json, NULL);
		/* the StringConverter's text, the BinaryDataConverter's bytes */
		if (as_is != NULL ||
			(isnull && (r->o.value_converter == CONVERTER_STRING ||
						(r->o.value_converter == CONVERTER_BINARY &&
						 r->payload.kind == KIND_BYTES))))
			return as_is;
	}
	SET_VARSIZE(json.data, json.len);
	return (bytea *) json.data;
}

static void
build_key(Router *r, TupleTableSlot *slot, RouterRecord *record)
{
	bool		isnull;
	Datum		value = get_value(slot, &r->key, &isnull);

	initStringInfo(&record->key);
	record->key_isnull = false;
	if (r->o.key_converter == CONVERTER_STRING)
	{
		/* the StringConverter writes no bytes of a null */
		if (isnull)
			record->key_isnull = true;
		else
			appendStringInfoString(&record->key, plain_text(&r->key, value));
	}
	else if (r->o.key_schemas)
	{
		StringInfoData schema;
		StringInfoData json;

		initStringInfo(&schema);
		initStringInfo(&json);
		append_column_schema(&schema, &r->key, NULL);
		append_json(&json, &r->key, value, isnull);
		append_with_schema(&record->key, &schema, &json);
	}
	else
		append_json(&record->key, &r->key, value, isnull);
}

static void
build_extras(TriggerData *trigdata, Router *r, TupleTableSlot *slot, OutboxSendExtras *extras)
{
	bool		isnull;
	Datum		value;

	extras->partition = -1;
	extras->created_at_set = false;
	if (r->timestamp.attnum != 0)
	{
		value = get_value(slot, &r->timestamp, &isnull);
		/* a NULL: the router's processing time, here the transaction's start */
		if (!isnull)
		{
			extras->created_at_set = true;
			extras->created_at = DatumGetTimestampTz(value);
		}
	}
	for (int i = 0; i < r->nplaced; i++)
	{
		PlacedColumn *p = &r->placed[i];

		if (p->placement != PLACE_PARTITION)
			continue;
		value = get_value(slot, &p->column, &isnull);
		extras->partition = isnull ? -1 : DatumGetInt32(value);
		if (!isnull && extras->partition < 0)
			refuse(trigdata, ERRCODE_INVALID_PARAMETER_VALUE,
				   psprintf("column \"%s\" placed in the partition is negative: %d",
							p->column.name, extras->partition), NULL);
	}
}

static void
build_record(TriggerData *trigdata, Router *r, TupleTableSlot *slot, RouterRecord *record)
{
	bool		isnull;
	Datum		value = get_value(slot, &r->route, &isnull);

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NOT_NULL_VIOLATION),
				 errmsg("column \"%s\" (route.by.field) is NULL: the event has no topic",
						r->route.name)));
	record->topic = route(trigdata, r, column_text(&r->route, value));
	build_key(r, slot, record);
	record->value = build_value(r, slot);
	record->headers = build_headers(r, slot);
	build_extras(trigdata, r, slot, &record->extras);
}

/* outbox.delete.after.capture: the row goes once its event is stored. */
static void
delete_row(Router *r, HeapTuple tuple)
{
	Oid			argtypes[1] = {TIDOID};
	Datum		args[1] = {PointerGetDatum(&tuple->t_self)};

	SPI_connect();
	if (SPI_execute_with_args(psprintf("DELETE FROM ONLY %s WHERE ctid OPERATOR(pg_catalog.=) $1",
									   r->relation),
							  1, argtypes, args, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "outbox_debezium(): the delete of the captured row failed");
	SPI_finish();
}

/* An update of an outbox row: table.op.invalid.behavior says what it does. */
static void
unexpected_update(TriggerData *trigdata, Router *r)
{
	ereport(r->o.invalid_op == INVALID_OP_FATAL ? ERROR : WARNING,
			(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
			 errmsg("outbox_debezium() trigger \"%s\" on table \"%s\" ignores an update: outbox rows are inserted",
					trigdata->tg_trigger->tgname, RelationGetRelationName(trigdata->tg_relation)),
			 errhint("table.op.invalid.behavior=%s",
					 r->o.invalid_op == INVALID_OP_WARN ? "warn" :
					 r->o.invalid_op == INVALID_OP_ERROR ? "error" : "fatal")));
}

/*
 * The trigger CREATE TRIGGER just made, checked as its first row would
 * check it: its timing and level, its options against the table (locked
 * by CREATE TRIGGER, whose rights were checked).
 */
void
outbox_debezium_check_created(CreateTrigStmt *stmt)
{
	Oid			func = LookupFuncName(stmt->funcname, 0, NULL, true);
	FmgrInfo	flinfo;
	Trigger		trigger;
	TriggerData trigdata;
	MemoryContext context;
	MemoryContext old;

	char	   *name;

	/* by name first: fmgr_info() would load another C function's library */
	if (!OidIsValid(func) || (name = get_func_name(func)) == NULL ||
		strcmp(name, "outbox_debezium") != 0)
		return;
	fmgr_info(func, &flinfo);
	if (flinfo.fn_addr != outbox_debezium)
		return;

	memset(&trigger, 0, sizeof(trigger));
	memset(&trigdata, 0, sizeof(trigdata));
	trigger.tgname = stmt->trigname;
	trigger.tgnargs = list_length(stmt->args);
	trigger.tgargs = palloc(sizeof(char *) * Max(trigger.tgnargs, 1));
	for (int i = 0; i < trigger.tgnargs; i++)
		trigger.tgargs[i] = strVal(list_nth(stmt->args, i));
	trigdata.type = T_TriggerData;
	trigdata.tg_trigger = &trigger;
	trigdata.tg_relation = table_open(RangeVarGetRelid(stmt->relation, NoLock, false), NoLock);

	if (!stmt->row || stmt->timing != TRIGGER_TYPE_AFTER ||
		(stmt->events & TRIGGER_TYPE_INSERT) == 0 || (stmt->events & TRIGGER_TYPE_TRUNCATE) != 0)
		refuse_event(&trigdata);
	context = AllocSetContextCreate(CurrentMemoryContext, "outbox_debezium check",
									ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(context);
	(void) resolve_router(&trigdata);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(context);
	table_close(trigdata.tg_relation, NoLock);
}

static void
debezium_error_context(void *arg)
{
	TriggerData *trigdata = (TriggerData *) arg;

	errcontext("outbox_debezium() of trigger \"%s\" on table \"%s\"",
			   trigdata->tg_trigger->tgname,
			   RelationGetRelationName(trigdata->tg_relation));
}

Datum
outbox_debezium(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	ErrorContextCallback errcallback;
	RouterRecord record;
	Router	   *r;
	LOCAL_FCINFO(send_fcinfo, 0);

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("outbox_debezium() was not called by a trigger")));
	check_trigger_event(trigdata);
	r = router_of(fcinfo, trigdata);

	/* the router ignores deletes: outbox rows deleted after the insert */
	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		return PointerGetDatum(NULL);
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		unexpected_update(trigdata, r);
		return PointerGetDatum(NULL);
	}

	errcallback.callback = debezium_error_context;
	errcallback.arg = trigdata;
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;

	build_record(trigdata, r, trigdata->tg_trigslot, &record);
	InitFunctionCallInfoData(*send_fcinfo, &r->send_flinfo, 0, InvalidOid, NULL, NULL);
	outbox_send_event(send_fcinfo, record.topic, record.value, OUTBOX_PAYLOAD_RECORD, NULL,
					  record.key.data, record.key.len, record.key_isnull, record.headers,
					  &record.extras);
	if (r->o.delete_row)
		delete_row(r, trigdata->tg_trigtuple);

	error_context_stack = errcallback.previous;
	return PointerGetDatum(NULL);
}
