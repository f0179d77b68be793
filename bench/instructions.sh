#!/usr/bin/env bash
# Instruction counts (valgrind --tool=callgrind), per event:
# - outbox_send() against a plain INSERT of the same row, in single-user
#   mode: all in one statement, and one event per transaction (a prepared
#   statement executed N times, as pgbench -M prepared sends them; commit
#   included). Single-user mode has no workers, so the commit's wake-up of
#   a shard worker (a kill() and the worker's pass) is not in these counts:
#   bench/run.sh's pgbench runs are where it shows;
# - a delivery worker per event it delivers, all its threads and its main
#   thread alone (librdkafka's threads are the others), with the whole
#   server running under callgrind and the project's broker. The worker's
#   once-a-second lag look is off (outbox.lag_warning = 0): it is work per
#   second, not per event, and callgrind's ~50x slower server made it a
#   third of the main thread's count: its full look, every 10 s, walked
#   the index entries of every row deleted so far, each time again (under
#   callgrind they were not marked dead between looks).
# Instructions, unlike seconds, do not depend on what else the shared
# machine is doing: these are the stable companions of bench/run.sh.
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
# one event per transaction: $N EXECUTEs of a prepared statement
send_xact="SELECT outbox_send('bench', repeat('x', 200), 'k' || \$1)"
insert_xact="INSERT INTO plain (id, shard, topic, key, payload, created_at) VALUES (nextval('plain_seq'), 0, 'bench', convert_to('k' || \$1, 'UTF8'), convert_to(repeat('x', 200), 'UTF8'), now())"

# A callgrind file's instruction count: "totals:" (every thread, every
# function), which "summary:" understates for a process forked from one
# that ran under callgrind.
callgrind_total() {
  awk '/^totals:/ {t = $2} /^summary:/ {s = $2} END {print (t != "" ? t : s)}' "$1"
}

# Total instructions of one single-user session running $1 with $N events.
instructions() {
  local sql=${1//\$N/$2}
  local out="$WORK/cg.$RANDOM"
  echo "$sql" | as_user valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$PG_BIN/postgres" --single -D "$WORK/data" -c shared_buffers=256MB postgres >/dev/null 2>&1
  callgrind_total "$out"
}

# The prepared statement $1 (parameter $1: the event's number) executed
# $2 times, each execution its own transaction.
transactions() {
  local i
  echo "PREPARE s(int) AS $1;"
  for ((i = 1; i <= $2; i++)); do echo "EXECUTE s($i);"; done
}

per_event() {  # the session's fixed cost cancels out: (I(N) - I(1)) / (N - 1)
  local full one
  full=$(instructions "$1" "$N")
  one=$(instructions "$1" 1)
  echo $(( (full - one) / (N - 1) ))
}

per_transaction() {  # likewise, with one event per transaction
  local full one
  full=$(instructions "$(transactions "$1" "$N")" "$N")
  one=$(instructions "$(transactions "$1" 1)" 1)
  echo $(( (full - one) / (N - 1) ))
}

s=$(per_event "$send")
p=$(per_event "$insert")
echo "instructions per event: outbox_send $s, plain INSERT $p, ratio $(awk -v a="$s" -v b="$p" 'BEGIN {printf "%.2f", a / b}')"
s=$(per_transaction "$send_xact")
p=$(per_transaction "$insert_xact")
echo "instructions per one-event transaction: outbox_send $s, plain INSERT $p, ratio $(awk -v a="$s" -v b="$p" 'BEGIN {printf "%.2f", a / b}')"

# The worker: the whole server under callgrind (each process writes its own
# file), N events delivered; the worker's fixed cost cancels out against a
# run with N/10 events.
"$ROOT/tools/outbox-broker" --brokers 1 --topic bench:4 --bootstrap-file "$WORK/bootstrap" \
  </dev/null >/dev/null 2>&1 &
cleanup_push "kill $!"
for _ in $(seq 100); do [ -s "$WORK/bootstrap" ] && break; sleep 0.1; done
cat >>"$WORK/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$WORK'
port = 5498
shared_preload_libraries = 'outbox'
outbox.brokers = '$(cat "$WORK/bootstrap")'
outbox.message_format = 'payload'
outbox.lag_warning = 0
CONF

# $1 events, $2 more settings: prints the worker's instructions, all
# threads and the main thread (callgrind writes one file per thread, the
# main thread's first)
worker_instructions() {
  local psql_="as_user psql -X -q -h $WORK -p 5498 -d postgres"
  printf 'outbox.enabled = off\n%s\n' "${2:-}" >"$WORK/data/postgresql.auto.conf"
  as_user bash -c "valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=$WORK/w.%p \
    $PG_BIN/postgres -D $WORK/data >$WORK/valgrind.log 2>&1 &"
  for _ in $(seq 180); do $psql_ -Atc 'SELECT 1' >/dev/null 2>&1 && break; sleep 1; done
  local pid
  pid=$($psql_ -Atc "SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox shard'")
  $psql_ -c "TRUNCATE outbox" -c "SELECT count(outbox_send('bench', repeat('x', 200), 'k' || (i % 1000))) FROM generate_series(1, $1) i" >/dev/null
  $psql_ -c "ALTER SYSTEM SET outbox.enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 900); do [ "$($psql_ -Atc 'SELECT count(*) FROM outbox')" = 0 ] && break; sleep 1; done
  as_user "$PG_BIN/pg_ctl" -D "$WORK/data" -m fast -w -t 300 stop >/dev/null
  local file all=0
  for file in "$WORK/w.$pid"-*; do all=$((all + $(callgrind_total "$file"))); done
  echo "$all $(callgrind_total "$WORK/w.$pid-01")"
}
# $1 events, $2 settings: the worker's instructions per delivered event
# beyond its fixed cost, all threads and the main thread
per_delivered() {
  local big big_main small small_main
  read -r big big_main < <(worker_instructions "$1" "$2")
  read -r small small_main < <(worker_instructions $(($1 / 10)) "$2")
  echo "$(( (big - small) / ($1 - $1 / 10) )), of which the main thread $(( (big_main - small_main) / ($1 - $1 / 10) ))"
}
echo "worker instructions per delivered event: $(per_delivered "$N" "")"
# One event per read: a read's fixed cost (its transaction, its look for
# retry times, executor start-up), which a fixed rate pays per commit and
# a drain shares among outbox.batch_size events.
echo "worker instructions per delivered event, one per read (outbox.batch_size = 1): $(per_delivered $((N / 10)) "outbox.batch_size = 1")"
