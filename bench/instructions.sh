#!/usr/bin/env bash
# Instruction counts (valgrind --tool=callgrind) of outbox_send() and of a
# plain INSERT of the same row, per event. Instructions, unlike seconds, do
# not depend on what else the shared machine is doing, so this ratio is the
# stable companion of the enqueue timing in bench/run.sh.
# Runs PostgreSQL in single-user mode, without the workers.
# Usage: bash bench/instructions.sh [events]   (as root; default 20000)
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"
N=${1:-20000}

ensure_packages
command -v valgrind >/dev/null || { apt-get update -qq; apt-get install -y -qq valgrind >/dev/null; }
build_and_install
make_workdir

as_user "$PG_BIN/initdb" -D "$WORK/data" -A trust >/dev/null
single() { as_user "$PG_BIN/postgres" --single -D "$WORK/data" -c shared_buffers=256MB postgres; }
single >/dev/null 2>&1 <<'SQL'
CREATE EXTENSION outbox;
CREATE TABLE plain (LIKE outbox INCLUDING ALL);
CREATE SEQUENCE plain_seq;
SQL

send="SELECT count(outbox_send('bench', repeat('x', 200), 'k' || i)) FROM generate_series(1, \$N) i;"
insert="INSERT INTO plain (id, shard, topic, key, payload, created_at) SELECT nextval('plain_seq'), 0, 'bench', convert_to('k' || i, 'UTF8'), convert_to(repeat('x', 200), 'UTF8'), now() FROM generate_series(1, \$N) i;"

# Total instructions of one single-user session running $1 with $N events.
instructions() {
  local sql=${1//\$N/$2}
  local out="$WORK/cg.$RANDOM"
  echo "$sql" | as_user valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$PG_BIN/postgres" --single -D "$WORK/data" -c shared_buffers=256MB postgres >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out"
}

per_event() {  # the session's fixed cost cancels out: (I(N) - I(1)) / (N - 1)
  local full one
  full=$(instructions "$1" "$N")
  one=$(instructions "$1" 1)
  echo $(( (full - one) / (N - 1) ))
}

s=$(per_event "$send")
p=$(per_event "$insert")
echo "instructions per event: outbox_send $s, plain INSERT $p, ratio $(awk -v a="$s" -v b="$p" 'BEGIN {printf "%.2f", a / b}')"
