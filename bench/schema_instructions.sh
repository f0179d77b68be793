#!/usr/bin/env bash
# The Schema Registry's check in the sender's transaction, in instructions
# per outbox_send() (valgrind --tool=callgrind, single-user mode, as
# bench/instructions.sh counts): (I(N) - I(1)) / (N - 1), the session's
# fixed cost cancelled out. The same jsonb event, one statement of N sends,
# to: a topic while outbox_topic_schema is empty; a topic without a schema
# beside topics with one; a JSON Schema topic; an Avro topic.
# Usage: bash bench/schema_instructions.sh [events]   (as root; default 5000;
#        the installed build of PG_CONFIG's server, or PG_BIN's)
set -euo pipefail
N=${1:-5000}
PG_BIN=${PG_BIN:-$("${PG_CONFIG:-pg_config}" --bindir)}
RUN_USER=${RUN_USER:-postgres}
WORK=$(mktemp -d /tmp/outbox-schema-cost.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
chown "$RUN_USER" "$WORK"
as_user() { runuser -u "$RUN_USER" -- "$@"; }
as_user "$PG_BIN/initdb" -D "$WORK/data" -A trust >/dev/null
single() { as_user "$PG_BIN/postgres" --single -D "$WORK/data" -c shared_buffers=256MB postgres; }
echo 'CREATE EXTENSION outbox;' | single >/dev/null 2>&1

callgrind_total() { awk '/^totals:/ {t = $2} /^summary:/ {s = $2} END {print (t != "" ? t : s)}' "$1"; }
instructions() {  # topic, events
  local out=$WORK/cg.$RANDOM
  echo "SELECT count(outbox_send('$1', jsonb_build_object('id', i, 'amount', 9.5, 'currency', 'EUR', 'sku', 'ABC-12'), 'k' || i)) FROM generate_series(1, $2) i;" |
    as_user valgrind --tool=callgrind --callgrind-out-file="$out" \
      "$PG_BIN/postgres" --single -D "$WORK/data" -c shared_buffers=256MB postgres >/dev/null 2>&1
  callgrind_total "$out"
}
per_event() { local full one; full=$(instructions "$1" "$N"); one=$(instructions "$1" 1); echo $(( (full - one) / (N - 1) )); }

echo "no schema in outbox_topic_schema: $(per_event plain) instructions per outbox_send"
single >/dev/null 2>&1 <<'SQL'
SELECT outbox_topic_schema('json', 'json_schema', schema => '{"type": "object", "required": ["id", "amount"], "properties": {"id": {"type": "integer", "minimum": 1}, "amount": {"type": "number", "exclusiveMinimum": 0}, "currency": {"enum": ["EUR", "USD"]}, "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$", "maxLength": 10}}, "additionalProperties": false}');
SELECT outbox_topic_schema('avro', 'avro', schema => '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}, {"name": "currency", "type": {"type": "enum", "name": "Currency", "symbols": ["EUR", "USD"]}}, {"name": "sku", "type": ["null", "string"]}]}');
SELECT outbox_topic_schema('proto', 'protobuf', schema_id => 1);
SQL
echo "a topic without a schema, beside topics with one: $(per_event plain)"
echo "JSON Schema (type, required, properties, minimum, exclusiveMinimum, enum, pattern, maxLength, additionalProperties): $(per_event json)"
echo "Avro (a record of long, double, enum, union of null and string): $(per_event avro)"
