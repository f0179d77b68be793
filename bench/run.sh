#!/usr/bin/env bash
# pg_outbox benchmark: enqueue cost, drain rate, commit-to-Kafka latency,
# sustained load with a long snapshot, worker memory. Each against a
# baseline measured in the same run, on a throw-away PostgreSQL 15 cluster
# and the project's Kafka-protocol broker (tools/outbox-broker).
#
# Usage (as root on Debian 12; installs what it needs first):
#   bash bench/run.sh [--quick] [--part NAME[,NAME...]]... [--out PATH]
#                     [--runs N] [--sustained-runs N] [--server-log PATH]
#
#   --part       enqueue | capture | drain | latency | sustained | memory | databases
#                (default: all)
#   --quick      fewer events and shorter runs, for a fast check
#   --out        where the JSON goes (default bench/results.json)
#   --runs       repetitions of each measurement (default 3)
#   --sustained-runs  repetitions of the 5-minute sustained part (default 1:
#                it has 10 windows of its own, and 3 runs would not fit the
#                25-minute budget)
#   --server-log also copy the server log there
#
# Parts (--quick: fewer events, shorter runs):
#   enqueue    outbox_send() against a plain INSERT of the same row into an
#              ordinary table: one statement of 100k rows, and pgbench with
#              1 and 8 clients, one event per transaction (delivery paused)
#   capture    INSERT into a 5-column table with a primary key and an
#              outbox_capture() trigger against the same INSERT into the same
#              table without it: one statement of 100k rows, and pgbench with
#              1 and 8 clients, one row per transaction (delivery paused)
#   drain      a 500k-event backlog drained by 1, 2 and 4 shards, and by one
#              shard when the backlog lands in a small outbox that nothing
#              analyzes first ("burst"); baselines: the same batches read
#              and deleted by SQL alone, a plain librdkafka producer
#   latency    at 1000/s and at 80% of the maximum rate (pgbench): commit to
#              Kafka's acknowledgement, sampled in the server (send, commit,
#              wait until the worker deleted the row: "ack"), and
#              outbox_send() to a consumer; floor: a plain producer through
#              the same broker and consumer
#   sustained  5 minutes at 50% of the maximum rate, a REPEATABLE READ
#              snapshot held for 60 s in the middle: per-30-s windows, and
#              the outbox's size before, at the end and 60 s later
#   databases  the drain part's backlog in 1 database, then spread over 4
#              databases of 1 shard each: the rate in events/s
#   memory     the worker's RSS and palloc total: idle, draining 1M events,
#              and draining 2000 events of 1 MB (bounded by outbox.batch_bytes),
#              after
#
# The server runs from a private copy of the PostgreSQL installation in the
# temporary directory, with the module just built in this tree.
#
# Prints one table (median and min-max over the runs, ratios computed per
# run and then summarised) and writes the same as JSON. Everything it
# starts is stopped at the end, also on failure or Ctrl-C.
set -euo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../scripts/common.sh
source "$BENCH/../scripts/common.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

ORIG_ARGS="$*"
ALL_PARTS="enqueue capture drain latency sustained memory databases"
PARTS=()
QUICK=0
OUT="$BENCH/results.json"
RUNS=3
SUSTAINED_RUNS=1
LOG_COPY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --part) [ $# -ge 2 ] || { usage >&2; exit 2; }; IFS=, read -ra p <<< "$2"; PARTS+=("${p[@]}"); shift ;;
    --part=*) IFS=, read -ra p <<< "${1#--part=}"; PARTS+=("${p[@]}") ;;
    --quick) QUICK=1 ;;
    --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; OUT=$2; shift ;;
    --out=*) OUT=${1#--out=} ;;
    --runs) RUNS=$2; shift ;;
    --sustained-runs) SUSTAINED_RUNS=$2; shift ;;
    --server-log) LOG_COPY=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[ ${#PARTS[@]} -gt 0 ] || read -ra PARTS <<< "$ALL_PARTS"
for p in "${PARTS[@]}"; do
  [[ " $ALL_PARTS " == *" $p "* ]] || { echo "unknown part: $p (one of: $ALL_PARTS)" >&2; exit 2; }
done
[[ "$RUNS" =~ ^[1-9][0-9]*$ && "$SUSTAINED_RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "--runs/--sustained-runs: a positive number" >&2; exit 2; }
OUT=$(realpath -m "$OUT")
[ -z "$LOG_COPY" ] || LOG_COPY=$(realpath -m "$LOG_COPY")
want() { [[ " ${PARTS[*]} " == *" $1 "* ]]; }
fail() { echo "ERROR: $*" >&2; exit 1; }

# ---- sizes of things -------------------------------------------------------
if [ $QUICK -eq 1 ]; then
  ENQ_N=20000; PGB_T=4; DRAIN_N=100000; MAXTPS_T=4; LAT_T=5
  SUS_T=60; SUS_HOLD=20; SUS_WINDOW=10; SUS_AFTER=20; MEM_N=200000
else
  ENQ_N=100000; PGB_T=10; DRAIN_N=500000; MAXTPS_T=10; LAT_T=20
  SUS_T=300; SUS_HOLD=60; SUS_WINDOW=30; SUS_AFTER=60; MEM_N=1000000
fi
MULTI_DBS=4           # databases of the databases part
LARGE_N=2000          # events of LARGE_BYTES for the byte-bounded memory run
LARGE_BYTES=1048576
DRAIN_SHARDS="1 2 4"
LAT_SHARDS=1         # latency, sustained and memory run with one worker
LAT_RATE=1000
PGB_CLIENTS=8        # pgbench clients for the fixed-rate runs
PAYLOAD=200
TOPIC=bench
PARTITIONS=12
PGPORT=54329

# ---- setup -----------------------------------------------------------------
T_START=$(date +%s)
ensure_packages
if ! build_and_install; then
  # the module may be built even though `make install` failed (e.g. at DOCS):
  # this script runs its own copy of it, see below
  make -C "$ROOT" -s PG_CONFIG=$PG_BIN/pg_config WERROR=1 all tools/outbox-broker >/dev/null || fail "the build failed"
  echo "WARNING: 'make install' failed; going on with the module built in $ROOT" >&2
  INSTALL_WARNING="make install failed (see stderr); the benchmark used the module built in the tree"
fi
[ -f "$ROOT/outbox.so" ] && [ -x "$ROOT/tools/outbox-broker" ] || fail "outbox.so or tools/outbox-broker missing after the build"
make_workdir

# The server runs from a private copy of the PostgreSQL installation (it is
# relocatable) holding this build of the module: a restart loads the module
# from disk again, and another `make install` on the machine meanwhile must
# not swap it.
PGI=$WORK/pg
for d in "$($PG_BIN/pg_config --bindir)" "$($PG_BIN/pg_config --pkglibdir)" "$($PG_BIN/pg_config --sharedir)"; do
  mkdir -p "$PGI$(dirname "$d")"
  [ -e "$PGI$d" ] || cp -a "$d" "$PGI$d"
done
install -m 755 "$ROOT/outbox.so" "$PGI$($PG_BIN/pg_config --pkglibdir)/outbox.so"
install -m 644 "$ROOT/outbox.control" "$ROOT"/sql/outbox--*.sql "$PGI$($PG_BIN/pg_config --sharedir)/extension/"
PGBIN=$PGI$($PG_BIN/pg_config --bindir)
[ "$("$PGBIN/pg_config" --pkglibdir)" = "$PGI$($PG_BIN/pg_config --pkglibdir)" ] || fail "the private PostgreSQL copy is not relocatable"
MODULE_SUM=$(md5sum < "$ROOT/outbox.so")
BIN=$WORK/bin; DATA=$WORK/data; SERVER_LOG=$WORK/server.log
RESULTS=$WORK/results.tsv; WINDOWS=$WORK/windows.tsv; SIZES=$WORK/sizes.tsv
mkdir -p "$BIN" "$WORK/sql"
: > "$RESULTS"; : > "$WINDOWS"; : > "$SIZES"
BG_PIDS=()
BROKER_PID=""
SERVER_UP=0
FINISHED=0

log "building the helpers"
cc -O2 -Wall -Wextra -Werror -o "$BIN/baseline-producer" "$BENCH/baseline_producer.c" -lrdkafka
cc -O2 -Wall -Wextra -Werror -o "$BIN/latency-consumer" "$BENCH/latency_consumer.c" -lrdkafka -lm

kill_bg() {
  local p
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  BG_PIDS=()
}
stop_server() {
  [ $SERVER_UP -eq 1 ] || return 0
  as_user $PGBIN/pg_ctl -D "$DATA" -m fast -t 60 stop >/dev/null 2>&1 ||
    as_user $PGBIN/pg_ctl -D "$DATA" -m immediate stop >/dev/null 2>&1 || true
  SERVER_UP=0
}
stop_broker() {
  [ -n "$BROKER_PID" ] || return 0
  kill -TERM "$BROKER_PID" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$BROKER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$BROKER_PID" 2>/dev/null || true
  wait "$BROKER_PID" 2>/dev/null || true
  BROKER_PID=""
}
on_exit() {
  [ -z "$LOG_COPY" ] || [ ! -f "$SERVER_LOG" ] || cp "$SERVER_LOG" "$LOG_COPY" || true
  if [ $FINISHED -eq 0 ]; then
    echo "BENCHMARK FAILED" >&2
    if [ -f "$SERVER_LOG" ]; then
      echo "--- server log (last 40 lines)" >&2; tail -n 40 "$SERVER_LOG" >&2 || true
    fi
    [ ! -s "$WORK/broker.err" ] || { echo "--- broker stderr" >&2; tail -n 20 "$WORK/broker.err" >&2; }
    [ ! -s "$RESULTS" ] || { write_outputs failed || true; }
  fi
}
# run in reverse: background jobs, server, broker, then the report
cleanup_push on_exit
cleanup_push stop_broker
cleanup_push stop_server
cleanup_push kill_bg

# Background jobs: started with bg (an external command, so that $! is its
# pid), waited for with reap, killed by kill_bg if still there at the end.
bg() { "$@" & BG_PIDS+=($!); }
reap() { # pid: waits for it and forgets it; returns its status
  local rc=0 p keep=()
  wait "$1" || rc=$?
  for p in "${BG_PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  BG_PIDS=("${keep[@]}")
  return $rc
}

# ---- results ---------------------------------------------------------------
# results.tsv: part, metric, unit, run, value. Ratios are computed per run.
record() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >> "$RESULTS"
  printf '   %-9s %-30s run %s: %s %s\n' "$1" "$2" "$4" "$5" "$3"
}
calc() { awk "BEGIN { v = $1; printf \"%.6g\", v }"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "nan"; else printf "%.4f", a / b }'; }
# What each target means; checked against the median.
TARGETS=$(cat <<'EOF'
enqueue	stmt_time_ratio	<=	1.2
capture	stmt_time_ratio	<=	1.5
capture	pgbench_c1_time_ratio	<=	1.5
drain	ratio_s1_to_sql	>=	0.7
drain	ratio_s2_to_sql	>=	0.7
drain	ratio_s4_to_sql	>=	0.7
latency	r1000_ack_p50_ms	<=	3
latency	r1000_ack_p99_ms	<=	20
latency	r1000_p50_ms	<=	3
latency	r1000_p99_ms	<=	20
memory	peak_vmrss_mb	<	64
memory	peak_rssanon_mb	<	64
memory	large_peak_rssanon_mb	<	256
EOF
)

# ---- the broker --------------------------------------------------------------
log "starting the broker"
"$ROOT/tools/outbox-broker" --brokers 3 --topic "$TOPIC:$PARTITIONS" \
  > "$WORK/broker.out" 2> "$WORK/broker.err" < /dev/null &
BROKER_PID=$!
for _ in $(seq 300); do
  grep -q '^BOOTSTRAP ' "$WORK/broker.out" 2>/dev/null && break
  kill -0 "$BROKER_PID" 2>/dev/null || fail "the broker exited: $(cat "$WORK/broker.err")"
  sleep 0.1
done
BOOTSTRAP=$(sed -n 's/^BOOTSTRAP //p' "$WORK/broker.out")
[ -n "$BOOTSTRAP" ] || fail "the broker printed no BOOTSTRAP line"
echo "broker at $BOOTSTRAP"

# sum of the end offsets of the topic's partitions
kafka_total() {
  local args=() p
  for ((p = 0; p < PARTITIONS; p++)); do args+=(-t "$TOPIC:$p:-1"); done
  kcat -Q -b "$BOOTSTRAP" "${args[@]}" 2>/dev/null | awk '/offset/ { s += $NF; n++ } END { if (n != '"$PARTITIONS"') exit 1; print s }'
}

# ---- the server --------------------------------------------------------------
log "starting PostgreSQL in $WORK"
as_user $PGBIN/initdb -D "$DATA" -U postgres -A trust -E UTF8 --locale=C >/dev/null
cat >> "$DATA/postgresql.conf" <<EOF
# pg_outbox benchmark
listen_addresses = ''
unix_socket_directories = '$WORK'
port = $PGPORT
max_connections = 50
shared_preload_libraries = 'outbox'
shared_buffers = 1GB
max_wal_size = 4GB
checkpoint_timeout = 15min
autovacuum = on
max_worker_processes = 16
log_line_prefix = '%m [%p] %b '
log_checkpoints = on
log_autovacuum_min_duration = 0
outbox.brokers = '$BOOTSTRAP'
outbox.shards = $LAT_SHARDS
EOF
as_user $PGBIN/pg_ctl -D "$DATA" -l "$SERVER_LOG" -w -t 60 start >/dev/null
SERVER_UP=1

PSQL=("$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$WORK" -p "$PGPORT" -U postgres -d postgres)
sql() { "${PSQL[@]}" -c "$1"; }
# Runs one statement and prints its time in ms, commit included (psql \timing).
timed_sql() {
  "${PSQL[@]}" -c '\timing on' -c "$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
}
SHARDS_NOW=$LAT_SHARDS

set_enabled() {
  sql "ALTER SYSTEM SET outbox.enabled = $1"
  sql "SELECT pg_reload_conf()" >/dev/null
  sleep 0.3
}
wait_workers() {
  for _ in $(seq 300); do
    [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox shard'")" = "$1" ] && return 0
    sleep 0.1
  done
  fail "expected $1 outbox worker(s)"
}
set_shards() {
  [ "$SHARDS_NOW" = "$1" ] && return 0
  sql "ALTER SYSTEM SET outbox.shards = $1"
  as_user $PGBIN/pg_ctl -D "$DATA" -l "$SERVER_LOG" -m fast -w -t 60 restart >/dev/null
  SHARDS_NOW=$1
  wait_workers "$1"
}
# Waits until the outbox is empty; prints seconds since epoch t0 (the time
# delivery was switched on). See bench_wait_empty.
wait_empty() {
  sql "CALL bench_wait_empty(extract(epoch from clock_timestamp())::float8, ${1:-600}, $SHARDS_NOW, NULL)" >/dev/null
}
# With delivery paused: switch it on and time until the outbox is empty.
# Prints the seconds; timed_drain_sql writes the script (for a background run).
timed_drain_sql() {
  cat > "$WORK/sql/timed_drain.sql" <<EOF
SELECT extract(epoch from clock_timestamp()) AS t0 \gset
ALTER SYSTEM SET outbox.enabled = on;
SELECT pg_reload_conf() \g /dev/null
CALL bench_wait_empty(:t0, 900, $SHARDS_NOW, NULL);
EOF
}
timed_drain() {
  timed_drain_sql
  "${PSQL[@]}" -f "$WORK/sql/timed_drain.sql"
}
fill_outbox() {
  sql "SELECT count(outbox_send('$TOPIC', repeat('x', $PAYLOAD), 'k' || (i % 1000))) FROM generate_series(1, $1) i" >/dev/null
}
# One event per key of the first 100, delivered: the producers are up.
warm_up() {
  set_enabled on
  sql "SELECT count(outbox_send('$TOPIC', repeat('x', $PAYLOAD), 'k' || i)) FROM generate_series(1, 100) i" >/dev/null
  wait_empty 120
}
worker_pids() { sql "SELECT string_agg(pid::text, ' ' ORDER BY pid) FROM pg_stat_activity WHERE backend_type = 'outbox shard'"; }
# env: exec, so that a background pgbench is $!
PGBENCH=(env PGDATABASE=postgres "$PGBIN/pgbench" -h "$WORK" -p "$PGPORT" -U postgres -n -M prepared)
pgb_tps() { sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$1"; }
pgb_count() { sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1"; }

sql "CREATE EXTENSION outbox"
sql "CREATE SEQUENCE plain_id_seq NO CYCLE"
sql "CREATE TABLE plain (
    id              bigint      NOT NULL,
    shard           integer     NOT NULL,
    topic           text        NOT NULL,
    key             bytea,
    payload         bytea       NOT NULL,
    headers         jsonb,
    created_at      timestamptz NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    last_attempt_at timestamptz,
    next_attempt_at timestamptz,
    PRIMARY KEY (shard, id))"
# Polls until every shard is empty, committing between polls so that it
# holds no snapshot. Per shard it keeps the lowest id still there: the
# workers delete in id order and nothing is added while it waits, so an
# index probe from there replaces a scan over the dead rows.
"${PSQL[@]}" <<'EOF'
CREATE PROCEDURE bench_wait_empty(t0 float8, timeout_s float8, nshards int,
                                  INOUT elapsed float8 DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    low bigint[] := array_fill(0::bigint, ARRAY[nshards]);
    m bigint;
    busy bool;
BEGIN
    LOOP
        busy := false;
        FOR s IN 0 .. nshards - 1 LOOP
            SELECT min(id) INTO m FROM outbox WHERE shard = s AND id >= low[s + 1];
            IF m IS NOT NULL THEN
                low[s + 1] := m;
                busy := true;
                EXIT;
            END IF;
        END LOOP;
        elapsed := extract(epoch from clock_timestamp()) - t0;
        EXIT WHEN NOT busy;
        IF elapsed > timeout_s THEN
            RAISE EXCEPTION 'outbox not empty after % s', timeout_s;
        END IF;
        COMMIT;
        PERFORM pg_sleep(0.02);
    END LOOP;
END $$;

-- Baseline: the same batches a worker reads and deletes, without Kafka.
CREATE PROCEDURE bench_plain_drain(batch int, INOUT elapsed float8 DEFAULT NULL,
                                   INOUT total bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    cursor_id bigint := 0;
    ids bigint[];
    bytes bigint;
BEGIN
    total := 0;
    LOOP
        SELECT array_agg(id ORDER BY id), sum(length(payload) + length(topic) + coalesce(length(key), 0))
          INTO ids, bytes
          FROM (SELECT id, topic, key, payload, headers, created_at FROM plain
                 WHERE shard = 0 AND id >= cursor_id
                   AND (next_attempt_at IS NULL OR next_attempt_at <= now())
                 ORDER BY id LIMIT batch) b;
        EXIT WHEN ids IS NULL;
        DELETE FROM plain WHERE shard = 0 AND id = ANY (ids);
        total := total + cardinality(ids);
        cursor_id := ids[cardinality(ids)] + 1;
        COMMIT;
    END LOOP;
    elapsed := extract(epoch from clock_timestamp() - t0);
END $$;
EOF

cat > "$WORK/sql/enqueue_outbox.sql" <<EOF
\set i random(1, 1000000)
SELECT outbox_send('$TOPIC', repeat('x', $PAYLOAD), 'k' || :i);
EOF
cat > "$WORK/sql/enqueue_plain.sql" <<EOF
\set i random(1, 1000000)
INSERT INTO plain VALUES (nextval('plain_id_seq'), 0, '$TOPIC', convert_to('k' || :i, 'UTF8'), convert_to(repeat('x', $PAYLOAD), 'UTF8'), NULL, now());
EOF
cat > "$WORK/sql/latency.sql" <<EOF
\set i random(1, 1000)
SELECT outbox_send('$TOPIC', (extract(epoch from clock_timestamp()) * 1e6)::bigint::text, 'k' || :i);
EOF
# Commit-to-acknowledgement, measured in the server: send one event, commit,
# and poll until the worker has deleted it, which it does only after Kafka
# acknowledged it (so this is an upper bound: it includes the delete).
"${PSQL[@]}" >/dev/null <<'SQL'
CREATE TABLE ack_latency (ms float8);
CREATE PROCEDURE sample_ack_latency(samples int, pause float8) LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    t0 timestamptz;
BEGIN
    FOR i IN 1..samples LOOP
        v_id := outbox_send('ack_latency', 'x', 'ack');
        COMMIT;
        t0 := clock_timestamp();
        WHILE EXISTS (SELECT FROM outbox WHERE id = v_id) LOOP
            PERFORM pg_sleep(0.0002);
        END LOOP;
        INSERT INTO ack_latency VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
        COMMIT;
        PERFORM pg_sleep(pause);
    END LOOP;
END $$;
SQL
wait_workers "$SHARDS_NOW"
echo "server up: $(sql 'SHOW server_version'), outbox workers: $(worker_pids)"

# ---- part 1: enqueue cost ----------------------------------------------------
part_enqueue() {
  log "part enqueue: outbox_send vs INSERT, $ENQ_N rows in one statement; pgbench 1 and 8 clients, ${PGB_T}s"
  set_enabled off
  local run kind t c tps f
  local -A T TPS
  for ((run = 1; run <= RUNS; run++)); do
    # alternate the order, so that neither always runs first
    local order="outbox plain"; [ $((run % 2)) -eq 0 ] && order="plain outbox"
    for kind in $order; do
      sql "TRUNCATE outbox, plain"; sql "CHECKPOINT"
      if [ $kind = outbox ]; then
        t=$(timed_sql "SELECT count(outbox_send('$TOPIC', repeat('x', $PAYLOAD), 'k' || i)) FROM generate_series(1, $ENQ_N) i")
      else
        t=$(timed_sql "INSERT INTO plain SELECT nextval('plain_id_seq'), 0, '$TOPIC', convert_to('k' || i, 'UTF8'), convert_to(repeat('x', $PAYLOAD), 'UTF8'), NULL, now() FROM generate_series(1, $ENQ_N) i")
      fi
      [ -n "$t" ] || fail "no timing for the $kind statement"
      T[$kind]=$t
      record enqueue "stmt_${kind}_ms" ms $run "$t"
      record enqueue "stmt_${kind}_rows_per_s" rows/s $run "$(calc "$ENQ_N / ($t / 1000)")"
    done
    record enqueue stmt_time_ratio "outbox/plain" $run "$(ratio "${T[outbox]}" "${T[plain]}")"
    for c in 1 8; do
      for kind in $order; do
        sql "TRUNCATE outbox, plain"; sql "CHECKPOINT"
        f=$WORK/pgbench_enqueue.out
        "${PGBENCH[@]}" -c $c -j $((c > 1 ? 2 : 1)) -T $PGB_T -f "$WORK/sql/enqueue_$kind.sql" > "$f" 2>&1 || { cat "$f"; fail "pgbench failed"; }
        tps=$(pgb_tps "$f"); [ -n "$tps" ] || { cat "$f"; fail "no tps from pgbench"; }
        TPS[$kind]=$tps
        record enqueue "pgbench_c${c}_${kind}_tps" tps $run "$tps"
      done
      # time per transaction, outbox over plain
      record enqueue "pgbench_c${c}_time_ratio" "outbox/plain" $run "$(ratio "${TPS[plain]}" "${TPS[outbox]}")"
    done
  done
  sql "TRUNCATE outbox, plain"
}

# ---- part 2: drain rate ------------------------------------------------------
DRAIN_S1_RATES=()
# Named "burst": the backlog arrives at an outbox the worker has just been
# delivering while it was small (its saved plans made then), and nothing
# analyzes the table before the drain: as when Kafka comes back after an
# outage, or a bulk job sends at once. Otherwise VACUUM (ANALYZE) first.
drain_outbox_once() { # run shards [part] [name]
  local before after elapsed rate part=${3:-drain} name=${4:-s$2} i
  if [ "$name" = burst ]; then
    set_enabled on
    for i in $(seq 8); do
      sql "SELECT outbox_send('$TOPIC', repeat('x', $PAYLOAD), 'k' || $i)" >/dev/null
      wait_empty 60
    done
  fi
  set_enabled off
  before=$(kafka_total) || fail "cannot read the topic's offsets"
  fill_outbox "$DRAIN_N"
  [ "$name" = burst ] || sql "VACUUM (ANALYZE) outbox"
  sql "CHECKPOINT"
  elapsed=$(timed_drain)
  set_enabled off
  after=$(kafka_total) || fail "cannot read the topic's offsets"
  rate=$(calc "$DRAIN_N / $elapsed")
  record $part "outbox_${name}_events_per_s" events/s "$1" "$rate"
  record $part "outbox_${name}_seconds" s "$1" "$elapsed"
  # messages that reached the topic beyond the events (duplicates) or short of them
  record $part "outbox_${name}_kafka_surplus" messages "$1" "$((after - before - DRAIN_N))"
  DRAIN_RATE=$rate
}
part_drain() {
  log "part drain: $DRAIN_N events of $PAYLOAD bytes, shards $DRAIN_SHARDS (and 1 for a burst into a small outbox); baselines: SQL-only drain, plain producer"
  local run shards out elapsed total rate sql_rate prod_rate
  local -A RATE
  for ((run = 1; run <= RUNS; run++)); do
    # (a) the same batches read and deleted by one session, no Kafka
    set_enabled off
    sql "TRUNCATE plain"
    sql "INSERT INTO plain SELECT nextval('plain_id_seq'), 0, '$TOPIC', convert_to('k' || (i % 1000), 'UTF8'), convert_to(repeat('x', $PAYLOAD), 'UTF8'), NULL, now() FROM generate_series(1, $DRAIN_N) i"
    sql "VACUUM (ANALYZE) plain"; sql "CHECKPOINT"
    out=$(sql "CALL bench_plain_drain(1000, NULL, NULL)")
    elapsed=${out%%|*}; total=${out##*|}
    [ "$total" = "$DRAIN_N" ] || fail "plain drain deleted $total rows, not $DRAIN_N"
    sql_rate=$(calc "$DRAIN_N / $elapsed")
    record drain sql_drain_events_per_s events/s $run "$sql_rate"
    # (b) a plain librdkafka producer into the same broker
    out=$("$BIN/baseline-producer" -b "$BOOTSTRAP" -t "$TOPIC" -n "$DRAIN_N" -s "$PAYLOAD" -k 1000)
    prod_rate=$(sed -n 's/.*msgs_per_s=\([0-9.]*\).*/\1/p' <<< "$out")
    [ -n "$prod_rate" ] || fail "baseline-producer: $out"
    record drain producer_msgs_per_s msgs/s $run "$prod_rate"
    for shards in $DRAIN_SHARDS; do
      set_shards "$shards"
      sql "TRUNCATE outbox"
      warm_up
      drain_outbox_once $run "$shards"
      RATE[$shards]=$DRAIN_RATE
      [ "$shards" != 1 ] || DRAIN_S1_RATES+=("$DRAIN_RATE")
      record drain "ratio_s${shards}_to_sql" "outbox/sql" $run "$(ratio "$DRAIN_RATE" "$sql_rate")"
      record drain "ratio_s${shards}_to_producer" "outbox/producer" $run "$(ratio "$DRAIN_RATE" "$prod_rate")"
      if [ "$shards" = 1 ]; then
        # the same backlog arriving at a small outbox, not analyzed
        sql "TRUNCATE outbox"
        drain_outbox_once $run 1 drain burst
        record drain ratio_burst_to_sql "outbox/sql" $run "$(ratio "$DRAIN_RATE" "$sql_rate")"
      fi
    done
  done
  sql "TRUNCATE plain"
}

# The same backlog drained by one database's worker, then spread over
# MULTI_DBS databases of one shard each (their workers share the 2 cores).
db_sql() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$WORK" -p "$PGPORT" -U postgres -d "$1" -c "$2"; }
drain_databases_once() { # run count
  local run=$1 n=$2 per=$((DRAIN_N / $2)) d t0 elapsed
  set_enabled off
  for ((d = 1; d <= n; d++)); do
    db_sql bench_db$d "SELECT count(outbox_send('$TOPIC', repeat('x', $PAYLOAD), 'k' || (i % 1000))) FROM generate_series(1, $per) i" >/dev/null
    # as the drain part does: the workers' plans see the backlog
    db_sql bench_db$d "VACUUM (ANALYZE) outbox"
  done
  sql "CHECKPOINT"
  t0=$(date +%s.%N)
  set_enabled on
  for ((d = 1; d <= n; d++)); do
    until [ "$(db_sql bench_db$d "SELECT count(*) = 0 FROM outbox")" = t ]; do sleep 0.05; done
  done
  elapsed=$(calc "$(date +%s.%N) - $t0")
  record databases "dbs${n}_events_per_s" events/s $run "$(calc "$per * $n / $elapsed")"
}
part_databases() {
  log "part databases: $DRAIN_N events drained in 1 database, then spread over $MULTI_DBS databases, 1 shard each"
  local run d
  set_shards 1
  for ((d = 1; d <= MULTI_DBS; d++)); do
    sql "CREATE DATABASE bench_db$d"
    db_sql bench_db$d "CREATE EXTENSION outbox"
  done
  for ((run = 1; run <= RUNS; run++)); do
    drain_databases_once $run 1
    drain_databases_once $run $MULTI_DBS
  done
  for ((d = 1; d <= MULTI_DBS; d++)); do sql "DROP DATABASE bench_db$d"; done
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# ---- the maximum sustained rate (for parts 3 and 4) -------------------------
MAX_RATE=""
find_max_rate() {
  [ -z "$MAX_RATE" ] || return 0
  local f=$WORK/pgbench_max.out max_tps drain
  set_shards $LAT_SHARDS
  set_enabled on
  warm_up
  log "maximum rate: unthrottled pgbench ($PGB_CLIENTS clients, ${MAXTPS_T}s, delivery on)"
  "${PGBENCH[@]}" -c $PGB_CLIENTS -j 2 -T $MAXTPS_T -f "$WORK/sql/latency.sql" > "$f" 2>&1 || { cat "$f"; fail "pgbench failed"; }
  max_tps=$(pgb_tps "$f")
  record rate pgbench_max_tps tps 1 "$max_tps"
  wait_empty 600
  if [ ${#DRAIN_S1_RATES[@]} -gt 0 ]; then
    drain=$(median "${DRAIN_S1_RATES[@]}")
  else
    # not measured in this invocation: one shorter drain
    local n=$DRAIN_N
    DRAIN_N=$((n / 5))
    drain_outbox_once 1 $LAT_SHARDS rate
    DRAIN_N=$n
    drain=$DRAIN_RATE
    set_enabled on
  fi
  record rate drain_rate_used events/s 1 "$drain"
  MAX_RATE=$(awk -v a="$max_tps" -v b="$drain" 'BEGIN { printf "%d", (a < b ? a : b) }')
  record rate max_rate events/s 1 "$MAX_RATE"
}

# ---- part 3: latency ---------------------------------------------------------
# Starts the consumer in the background at the topic's end: CONSUMER_PID.
start_consumer() { # outfile [window_s]
  local args=(-b "$BOOTSTRAP" -t "$TOPIC" -T 100000 -f 1)
  [ -z "${2:-}" ] || args+=(-w "$2")
  "$BIN/latency-consumer" "${args[@]}" > "$1" 2> "$1.err" &
  CONSUMER_PID=$!
  BG_PIDS+=("$CONSUMER_PID")
  for _ in $(seq 300); do
    grep -q '^READY' "$1" && return 0
    kill -0 $CONSUMER_PID 2>/dev/null || fail "latency-consumer exited: $(cat "$1.err")"
    sleep 0.1
  done
  fail "latency-consumer not ready"
}
stop_consumer() { # outfile
  sleep 1
  kill -TERM "$CONSUMER_PID"
  reap "$CONSUMER_PID" || fail "latency-consumer failed: $(cat "$1.err")"
  grep -q '^RESULT' "$1" || fail "latency-consumer printed no result"
}
consumer_field() { sed -n "s/^RESULT.* $2=\([^ ]*\).*/\1/p" "$1"; }

latency_run() { # run label rate
  local f=$WORK/consumer.out pf=$WORK/pgbench_latency.out committed count sampler
  start_consumer "$f"
  sql "TRUNCATE ack_latency"
  # about 20 samples a second of commit-to-ack, under the pgbench load
  "${PSQL[@]}" -c "CALL sample_ack_latency($((LAT_T * 20 - 20)), 0.04)" >/dev/null &
  sampler=$!
  "${PGBENCH[@]}" -c $PGB_CLIENTS -j 2 -R "$3" -T $LAT_T -f "$WORK/sql/latency.sql" > "$pf" 2>&1 || { cat "$pf"; fail "pgbench failed"; }
  wait "$sampler" || fail "the commit-to-ack sampler failed"
  wait_empty 600
  stop_consumer "$f"
  record latency "${2}_ack_p50_ms" ms "$1" "$(sql "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3) FROM ack_latency")"
  record latency "${2}_ack_p99_ms" ms "$1" "$(sql "SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 3) FROM ack_latency")"
  record latency "${2}_ack_max_ms" ms "$1" "$(sql "SELECT round(max(ms)::numeric, 3) FROM ack_latency")"
  committed=$(pgb_count "$pf"); count=$(consumer_field "$f" count)
  record latency "${2}_pgbench_tps" tps "$1" "$(pgb_tps "$pf")"
  record latency "${2}_p50_ms" ms "$1" "$(consumer_field "$f" p50_ms)"
  record latency "${2}_p99_ms" ms "$1" "$(consumer_field "$f" p99_ms)"
  record latency "${2}_max_ms" ms "$1" "$(consumer_field "$f" max_ms)"
  # committed events the consumer did not see (negative: extra messages)
  record latency "${2}_missing" events "$1" "$((committed - count))"
}
part_latency() {
  find_max_rate
  local rate80=$((MAX_RATE * 8 / 10)) run f out
  log "part latency: ${LAT_T}s at $LAT_RATE/s and at 80% of $MAX_RATE/s = $rate80/s, $LAT_SHARDS shard(s)"
  set_enabled on
  for ((run = 1; run <= RUNS; run++)); do
    latency_run $run r1000 $LAT_RATE
    latency_run $run r80pct $rate80
    # the floor: a plain producer (linger.ms=0) at the same rate, same consumer
    f=$WORK/consumer.out
    start_consumer "$f"
    out=$("$BIN/baseline-producer" -b "$BOOTSTRAP" -t "$TOPIC" -n $((LAT_RATE * LAT_T)) -k 1000 -r $LAT_RATE -X linger.ms=0)
    stop_consumer "$f"
    record latency producer_r1000_p50_ms ms $run "$(consumer_field "$f" p50_ms)"
    record latency producer_r1000_p99_ms ms $run "$(consumer_field "$f" p99_ms)"
    record latency producer_r1000_max_ms ms $run "$(consumer_field "$f" max_ms)"
  done
}

# ---- part 4: sustained load with a long snapshot -----------------------------
sample_sizes() { # run label t
  local row
  row=$(sql "SELECT pg_relation_size('outbox'), pg_indexes_size('outbox'),
                    (SELECT count(*) FROM outbox), n_dead_tup, autovacuum_count
               FROM pg_stat_user_tables WHERE relid = 'outbox'::regclass" | tr '|' '\t')
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$row" >> "$SIZES"
}
part_sustained() {
  find_max_rate
  local rate=$((MAX_RATE / 2)) run f pf t0 w now committed count nw pgb_pid hold_pid
  local hold_at=$(((SUS_T - SUS_HOLD) / 2))
  log "part sustained: ${SUS_T}s at 50% of $MAX_RATE/s = $rate/s; a snapshot held ${SUS_HOLD}s from ${hold_at}s; ${SUS_WINDOW}s windows"
  set_shards $LAT_SHARDS
  set_enabled on
  for ((run = 1; run <= SUSTAINED_RUNS; run++)); do
    sql "TRUNCATE outbox"; sql "CHECKPOINT"
    warm_up
    f=$WORK/consumer_sustained.out; pf=$WORK/pgbench_sustained.out
    start_consumer "$f" $SUS_WINDOW
    t0=$(date +%s.%N)
    bg "${PGBENCH[@]}" -c $PGB_CLIENTS -j 2 -R $rate -T $SUS_T -f "$WORK/sql/latency.sql" > "$pf" 2>&1
    pgb_pid=$!
    # (the wait before it in the shell: a waiting statement would hold a snapshot too)
    bg bash -c 'sleep "$1"; shift; exec "$@"' _ $hold_at "${PSQL[@]}" \
      -c "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM plain LIMIT 1; SELECT pg_sleep($SUS_HOLD); COMMIT;"
    hold_pid=$!
    # a size sample at the end of each window
    nw=$((SUS_T / SUS_WINDOW))
    for ((w = 1; w <= nw; w++)); do
      now=$(date +%s.%N)
      sleep "$(awk -v t0="$t0" -v w=$w -v ws=$SUS_WINDOW -v now="$now" 'BEGIN { d = t0 + w * ws - now; print (d > 0 ? d : 0) }')"
      sample_sizes $run "w$((w - 1))" "$((w * SUS_WINDOW))"
    done
    reap $pgb_pid || { cat "$pf"; fail "pgbench failed"; }
    reap $hold_pid || fail "the snapshot-holding session failed"
    wait_empty 900
    sample_sizes $run end "$(awk -v t0="$t0" -v now="$(date +%s.%N)" 'BEGIN { printf "%d", now - t0 }')"
    sleep $SUS_AFTER
    sample_sizes $run "end+${SUS_AFTER}s" "$(awk -v t0="$t0" -v now="$(date +%s.%N)" 'BEGIN { printf "%d", now - t0 }')"
    stop_consumer "$f"
    committed=$(pgb_count "$pf"); count=$(consumer_field "$f" count)
    record sustained rate events/s $run "$rate"
    record sustained pgbench_tps tps $run "$(pgb_tps "$pf")"
    record sustained delivered_per_s events/s $run "$(calc "$count / $SUS_T")"
    record sustained p50_ms ms $run "$(consumer_field "$f" p50_ms)"
    record sustained p99_ms ms $run "$(consumer_field "$f" p99_ms)"
    record sustained max_ms ms $run "$(consumer_field "$f" max_ms)"
    record sustained missing events $run "$((committed - count))"
    awk -v run=$run '/^WINDOW/ { printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", run, $2, $3, $4, $5, $6, $7, $8, $9 }' "$f" >> "$WINDOWS"
    # table and index sizes: before the snapshot, at the end, and later
    local before_w=$((hold_at / SUS_WINDOW - 1))
    awk -F'\t' -v run=$run -v bw="w$before_w" -v after="end+${SUS_AFTER}s" '
      $1 == run && $2 == bw { print "before_hold", $4, $5 }
      $1 == run && $2 == "end" { print "end", $4, $5 }
      $1 == run && $2 == after { print "after", $4, $5 }' "$SIZES" |
    while read -r label tb ib; do
      record sustained "table_bytes_$label" bytes $run "$tb"
      record sustained "index_bytes_$label" bytes $run "$ib"
    done
  done
}

# ---- part 5: worker memory ---------------------------------------------------
proc_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
# The worker's palloc'd memory (all its memory contexts), in MB, from
# pg_log_backend_memory_contexts: tells its own allocations from librdkafka's.
palloc_mb() { # pid
  local before n
  before=$(grep -c "\[$1\] outbox shard LOG:  Grand total:" "$SERVER_LOG" || true)
  sql "SELECT pg_log_backend_memory_contexts($1)" >/dev/null
  for _ in $(seq 100); do
    n=$(grep -c "\[$1\] outbox shard LOG:  Grand total:" "$SERVER_LOG" || true)
    [ "$n" -gt "$before" ] && break
    sleep 0.1
  done
  grep "\[$1\] outbox shard LOG:  Grand total:" "$SERVER_LOG" | tail -n 1 |
    sed -n 's/.*Grand total: \([0-9]*\) bytes.*/\1/p' | awk '{ printf "%.3f", $1 / 1048576 }'
}
part_memory() {
  log "part memory: RSS of the worker idle, draining $MEM_N events, after"
  set_shards 1
  sql "TRUNCATE outbox"
  warm_up
  local run pid pid2 peak peak_anon peak_shmem v a s drain_pid i
  pid=$(worker_pids)
  [[ "$pid" =~ ^[0-9]+$ ]] || fail "no single worker pid: '$pid'"
  for ((run = 1; run <= RUNS; run++)); do
    set_enabled off
    sleep 1
    record memory idle_vmrss_mb MB $run "$(calc "$(proc_kb $pid VmRSS) / 1024")"
    record memory idle_rssanon_mb MB $run "$(calc "$(proc_kb $pid RssAnon) / 1024")"
    record memory idle_palloc_mb MB $run "$(palloc_mb $pid)"
    fill_outbox "$MEM_N"
    # (analyzed: the worker's plans are made again for the big table, see the drain part's "burst")
    sql "ANALYZE outbox"; sql "CHECKPOINT"
    timed_drain_sql
    bg "${PSQL[@]}" -o "$WORK/memory_drain.out" -f "$WORK/sql/timed_drain.sql"
    drain_pid=$!
    peak=0; peak_anon=0; peak_shmem=0; i=0
    while kill -0 $drain_pid 2>/dev/null; do
      # what the worker is doing, once a second (for a slow drain)
      if [ $((i++ % 5)) -eq 0 ]; then
        sql "SELECT $run, coalesce(wait_event_type || ':' || wait_event, 'CPU'), coalesce(query, '') FROM pg_stat_activity WHERE pid = $pid" 2>/dev/null |
          tr '|' '\t' >> "$WORK/worker_activity.tsv" || true
      fi
      v=$(proc_kb $pid VmRSS); a=$(proc_kb $pid RssAnon); s=$(proc_kb $pid RssShmem)
      [ -z "$v" ] && fail "the worker (pid $pid) is gone"
      [ "$v" -gt $peak ] && peak=$v
      [ "$a" -gt $peak_anon ] && peak_anon=$a
      [ "$s" -gt $peak_shmem ] && peak_shmem=$s
      sleep 0.2
    done
    reap $drain_pid || fail "the drain did not finish"
    record memory drain_events_per_s events/s $run "$(calc "$MEM_N / $(cat "$WORK/memory_drain.out")")"
    record memory peak_vmrss_mb MB $run "$(calc "$peak / 1024")"
    record memory peak_rssanon_mb MB $run "$(calc "$peak_anon / 1024")"
    record memory peak_rssshmem_mb MB $run "$(calc "$peak_shmem / 1024")"
    sleep 5
    record memory after_vmrss_mb MB $run "$(calc "$(proc_kb $pid VmRSS) / 1024")"
    record memory after_rssanon_mb MB $run "$(calc "$(proc_kb $pid RssAnon) / 1024")"
    record memory vmhwm_mb MB $run "$(calc "$(proc_kb $pid VmHWM) / 1024")"
    record memory after_palloc_mb MB $run "$(palloc_mb $pid)"
    pid2=$(worker_pids)
    [ "$pid2" = "$pid" ] || fail "the worker restarted during the memory part ($pid -> $pid2)"
  done
  # last: glibc keeps some of what it gave back, which would blur the above
  for ((run = 1; run <= RUNS; run++)); do large_payload_memory $run; done
  set_enabled off
}

# LARGE_N events of LARGE_BYTES (compressible, so the table stays small on
# disk; the worker holds them uncompressed): outbox.batch_bytes, not the
# event count, must bound the worker's memory.
large_payload_memory() { # run
  local run=$1 pid peak_anon=0 a t0
  sql "ALTER SYSTEM SET outbox.max_message_bytes = '2MB'"
  set_enabled off
  sleep 1
  sql "SELECT count(outbox_send('$TOPIC', convert_to(i || repeat('x', $LARGE_BYTES), 'UTF8'), NULL))
       FROM generate_series(1, $LARGE_N) i" >/dev/null
  set_enabled on
  pid=$(worker_pids)
  t0=$(date +%s.%N)
  while [ "$(sql "SELECT count(*) > 0 FROM outbox")" = t ]; do
    a=$(proc_kb $pid RssAnon)
    [ -z "$a" ] && fail "the worker (pid $pid) is gone"
    [ "$a" -gt $peak_anon ] && peak_anon=$a
    sleep 0.1
  done
  record memory large_drain_s s $run "$(calc "$(date +%s.%N) - $t0")"
  record memory large_peak_rssanon_mb MB $run "$(calc "$peak_anon / 1024")"
  sql "ALTER SYSTEM RESET outbox.max_message_bytes"
  sql "SELECT pg_reload_conf()" >/dev/null
}

# ---- part 6: row capture cost ------------------------------------------------
# Two tables of one definition, given the same rows; capture_captured has
# the capture trigger (no options: the payload carries all 5 columns).
capture_tables() {
  local t
  sql "CREATE SEQUENCE IF NOT EXISTS capture_id_seq"
  for t in capture_plain capture_captured; do
    sql "CREATE TABLE IF NOT EXISTS $t (
        id         bigint      PRIMARY KEY,
        customer   text        NOT NULL,
        amount     numeric     NOT NULL,
        status     text        NOT NULL,
        created_at timestamptz NOT NULL)"
  done
  sql "CREATE OR REPLACE TRIGGER capture_captured_outbox
       AFTER INSERT OR UPDATE OR DELETE ON capture_captured
       FOR EACH ROW EXECUTE FUNCTION outbox_capture('$TOPIC')"
  cat > "$WORK/sql/capture_plain.sql" <<EOF
\set i random(1, 1000000)
INSERT INTO capture_plain VALUES (nextval('capture_id_seq'), 'customer-' || :i, :i / 100.0, 'new', now());
EOF
  sed 's/capture_plain/capture_captured/' "$WORK/sql/capture_plain.sql" > "$WORK/sql/capture_captured.sql"
}
part_capture() {
  log "part capture: INSERT with outbox_capture() vs without, $ENQ_N rows in one statement; pgbench 1 and 8 clients, ${PGB_T}s"
  set_enabled off
  capture_tables
  local run kind t c tps f events
  local -A T TPS
  for ((run = 1; run <= RUNS; run++)); do
    # alternate the order, so that neither always runs first
    local order="captured plain"; [ $((run % 2)) -eq 0 ] && order="plain captured"
    for kind in $order; do
      sql "TRUNCATE outbox, capture_plain, capture_captured"; sql "CHECKPOINT"
      t=$(timed_sql "INSERT INTO capture_$kind SELECT i, 'customer-' || (i % 1000), (i % 100000) / 100.0, 'new', now() FROM generate_series(1, $ENQ_N) i")
      [ -n "$t" ] || fail "no timing for the $kind statement"
      if [ $kind = captured ]; then
        events=$(sql "SELECT count(*) FROM outbox")
        [ "$events" = "$ENQ_N" ] || fail "the captured statement sent $events events, expected $ENQ_N"
      fi
      T[$kind]=$t
      record capture "stmt_${kind}_ms" ms $run "$t"
      record capture "stmt_${kind}_rows_per_s" rows/s $run "$(calc "$ENQ_N / ($t / 1000)")"
    done
    record capture stmt_time_ratio "captured/plain" $run "$(ratio "${T[captured]}" "${T[plain]}")"
    for c in 1 8; do
      for kind in $order; do
        sql "TRUNCATE outbox, capture_plain, capture_captured"; sql "CHECKPOINT"
        f=$WORK/pgbench_capture.out
        "${PGBENCH[@]}" -c $c -j $((c > 1 ? 2 : 1)) -T $PGB_T -f "$WORK/sql/capture_$kind.sql" > "$f" 2>&1 || { cat "$f"; fail "pgbench failed"; }
        tps=$(pgb_tps "$f"); [ -n "$tps" ] || { cat "$f"; fail "no tps from pgbench"; }
        TPS[$kind]=$tps
        record capture "pgbench_c${c}_${kind}_tps" tps $run "$tps"
      done
      # time per transaction, captured over plain
      record capture "pgbench_c${c}_time_ratio" "captured/plain" $run "$(ratio "${TPS[plain]}" "${TPS[captured]}")"
    done
  done
  sql "DROP TABLE capture_plain, capture_captured"
  sql "DROP SEQUENCE capture_id_seq"
  sql "TRUNCATE outbox"
}

# ---- output ------------------------------------------------------------------
json_str() {
  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' -e 's/\r//g' |
    awk 'BEGIN { ORS = ""; print "\"" } NR > 1 { print "\\n" } { print } END { print "\"" }'
}

# Notable server log lines: errors, warnings, the workers' own messages
# other than the expected start/pause/shutdown ones.
log_lines() {
  [ -f "$SERVER_LOG" ] || return 0
  grep -E ' (ERROR|FATAL|PANIC|WARNING|DETAIL|HINT|STATEMENT):|outbox "[^"]*" shard [0-9]+:|terminated by signal|exited with exit code' "$SERVER_LOG" |
    grep -Ev 'outbox "[^"]*" shard [0-9]+ of [0-9]+ started|outbox launcher started|delivery paused|terminating background worker "outbox shard[^"]*" due to administrator command|waiting for CREATE EXTENSION|"logical replication launcher" \(PID [0-9]+\) exited with exit code 1|terminating autovacuum process due to administrator command|background worker "outbox shard" \(PID [0-9]+\) exited with exit code 1|automatic (analyze|vacuum) of table' || true
}

write_outputs() { # status
  local status=$1 tmp=$OUT.tmp
  mkdir -p "$(dirname "$OUT")"
  {
    printf '{\n  "status": "%s",\n' "$status"
    printf '  "meta": {\n'
    printf '    "date": "%s",\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '    "duration_s": %s,\n' "$(( $(date +%s) - T_START ))"
    printf '    "command": %s,\n' "$(printf '%s' "bash bench/run.sh $ORIG_ARGS" | json_str)"
    printf '    "quick": %s,\n' "$([ $QUICK -eq 1 ] && echo true || echo false)"
    printf '    "parts": %s,\n' "$(printf '%s' "${PARTS[*]}" | json_str)"
    printf '    "runs": %s,\n    "sustained_runs": %s,\n' "$RUNS" "$SUSTAINED_RUNS"
    printf '    "git": %s,\n' "$(git -C "$ROOT" describe --always --dirty 2>/dev/null | tr -d '\n' | json_str)"
    printf '    "postgres": %s,\n' "$($PGBIN/postgres --version | tr -d '\n' | json_str)"
    printf '    "librdkafka": %s,\n' "$(dpkg-query -W -f='${Version}' librdkafka1 2>/dev/null | json_str)"
    printf '    "cpus": %s,\n' "$(nproc)"
    printf '    "kernel": %s,\n' "$(uname -r | tr -d '\n' | json_str)"
    printf '    "install_warning": %s,\n' "$(printf '%s' "${INSTALL_WARNING:-}" | json_str)"
    printf '    "module_md5": "%s",\n' "${MODULE_SUM%% *}"
    printf '    "notes": [%s, %s, %s, %s, %s],\n' \
      "$(printf '%s' "Ratios are computed within each run, then summarised (median, min, max over runs)." | json_str)" \
      "$(printf '%s' "enqueue *_time_ratio: outbox time / plain time (for pgbench: plain tps / outbox tps); delivery paused." | json_str)" \
      "$(printf '%s' "drain: from switching delivery on to an empty outbox, after VACUUM (ANALYZE) and CHECKPOINT (outbox_burst_*: without them, the worker having just delivered single events from the small outbox); the SQL baseline reads and deletes the same batches (1000, in id order) from an ordinary table in one session; kafka_surplus = messages that reached the topic minus events (0 = none lost, none duplicated)." | json_str)" \
      "$(printf '%s' "latency: consumer receive time minus clock_timestamp() taken in the statement that calls outbox_send (so commit included); the consumer uses fetch.wait.max.ms=1 (the mock broker holds an empty fetch that long), producer_r1000_* is a plain librdkafka producer (linger.ms=0) through the same broker and consumer: the floor." | json_str)" \
      "$(printf '%s' "memory: VmRSS counts the shared buffers the worker touched (RssShmem); RssAnon is its private memory." | json_str)"
    printf '    "parameters": {"enqueue_rows": %s, "pgbench_seconds": %s, "drain_events": %s, "drain_shards": "%s", "payload_bytes": %s, "latency_seconds": %s, "latency_rate": %s, "latency_shards": %s, "pgbench_clients": %s, "sustained_seconds": %s, "sustained_hold_seconds": %s, "sustained_window_seconds": %s, "sustained_after_seconds": %s, "memory_events": %s, "topic_partitions": %s, "brokers": 3}\n' \
      $ENQ_N $PGB_T $DRAIN_N "$DRAIN_SHARDS" $PAYLOAD $LAT_T $LAT_RATE $LAT_SHARDS $PGB_CLIENTS $SUS_T $SUS_HOLD $SUS_WINDOW $SUS_AFTER $MEM_N $PARTITIONS
    printf '  },\n  "results": [\n'
    printf '%s\n' "$TARGETS" | awk -F'\t' '
      function num(v) { return (v == "nan" || v == "" || v == "-nan") ? "null" : v + 0 }
      FNR == NR { tgt[$1 SUBSEP $2] = $3 " " $4; next }
      { k = $1 SUBSEP $2
        if (!(k in n)) { order[++nk] = k; unit[k] = $3 }
        vals[k, ++n[k]] = $5; runs[k, n[k]] = $4 }
      END {
        for (i = 1; i <= nk; i++) {
          k = order[i]; split(k, pm, SUBSEP); m = n[k]
          # sort the values (insertion sort; few runs)
          cnt = 0
          for (j = 1; j <= m; j++) { v = vals[k, j]; if (v == "nan" || v == "-nan" || v == "") continue; s[++cnt] = v + 0 }
          for (a = 2; a <= cnt; a++) { x = s[a]; for (b = a - 1; b >= 1 && s[b] > x; b--) s[b + 1] = s[b]; s[b + 1] = x }
          med = cnt == 0 ? "null" : (cnt % 2 ? s[(cnt + 1) / 2] : (s[cnt / 2] + s[cnt / 2 + 1]) / 2)
          list = ""
          for (j = 1; j <= m; j++) list = list (j > 1 ? ", " : "") num(vals[k, j])
          t = (k in tgt) ? tgt[k] : ""
          ok = "null"
          if (t != "" && med != "null") {
            split(t, tt, " ")
            ok = (tt[1] == "<=" && med <= tt[2]) || (tt[1] == ">=" && med >= tt[2]) || (tt[1] == "<" && med < tt[2]) ? "true" : "false"
          }
          printf "    {\"part\": \"%s\", \"metric\": \"%s\", \"unit\": \"%s\", \"runs\": [%s], \"median\": %s, \"min\": %s, \"max\": %s, \"target\": %s, \"meets_target\": %s}%s\n",
            pm[1], pm[2], unit[k], list, med, cnt ? s[1] : "null", cnt ? s[cnt] : "null",
            t == "" ? "null" : "\"" t "\"", ok, i < nk ? "," : ""
        }
      }' - "$RESULTS"
    printf '  ],\n  "sustained_windows": [\n'
    # per window: consumer figures joined with the size sample at its end
    awk -F'\t' '
      FNR == NR { if ($2 ~ /^w[0-9]+$/) { w = substr($2, 2); tb[$1, w] = $4; ib[$1, w] = $5; bl[$1, w] = $6; dead[$1, w] = $7; av[$1, w] = $8 } next }
      { r = $1; w = $2
        line[++n] = sprintf("    {\"run\": %s, \"window\": %s, \"start_s\": %s, \"end_s\": %s, \"delivered\": %s, \"delivered_per_s\": %s, \"p50_ms\": %s, \"p99_ms\": %s, \"max_ms\": %s, \"table_bytes\": %s, \"index_bytes\": %s, \"backlog\": %s, \"dead_tuples\": %s, \"autovacuums\": %s}",
          r, w, $3, $4, $5, $6, ($7 == "nan" ? "null" : $7), ($8 == "nan" ? "null" : $8), ($9 == "nan" ? "null" : $9),
          ((r, w) in tb ? tb[r, w] : "null"), ((r, w) in ib ? ib[r, w] : "null"), ((r, w) in bl ? bl[r, w] : "null"),
          ((r, w) in dead ? dead[r, w] : "null"), ((r, w) in av ? av[r, w] : "null")) }
      END { for (i = 1; i <= n; i++) printf "%s%s\n", line[i], i < n ? "," : "" }' "$SIZES" "$WINDOWS"
    printf '  ],\n  "sustained_size_samples": [\n'
    awk -F'\t' '{ line[++n] = sprintf("    {\"run\": %s, \"at\": \"%s\", \"t_s\": %s, \"table_bytes\": %s, \"index_bytes\": %s, \"backlog\": %s, \"dead_tuples\": %s, \"autovacuums\": %s}", $1, $2, $3, $4, $5, $6, $7, $8) }
      END { for (i = 1; i <= n; i++) printf "%s%s\n", line[i], i < n ? "," : "" }' "$SIZES"
    printf '  ],\n  "memory_worker_activity": [\n'
    # once-a-second samples of the worker while it drained: run, wait event, activity, count
    [ ! -s "$WORK/worker_activity.tsv" ] || sort "$WORK/worker_activity.tsv" | uniq -c |
      awk '{ n = $1; sub(/^ *[0-9]+ /, ""); split($0, f, "\t"); gsub(/"/, "", f[3])
             line[++k] = sprintf("    {\"run\": %s, \"wait\": \"%s\", \"activity\": \"%s\", \"samples\": %d}", f[1], f[2], f[3], n) }
           END { for (i = 1; i <= k; i++) printf "%s%s\n", line[i], i < k ? "," : "" }'
    printf '  ],\n  "server_log": {\n'
    printf '    "errors": %s,\n' "$(grep -cE ' (ERROR|PANIC):' "$SERVER_LOG" 2>/dev/null || true)"
    printf '    "fatals": %s,\n' "$(grep -E ' FATAL:' "$SERVER_LOG" 2>/dev/null | grep -cv 'due to administrator command' || true)"
    printf '    "warnings": %s,\n' "$(grep -c ' WARNING:' "$SERVER_LOG" 2>/dev/null || true)"
    printf '    "autovacuums_of_outbox": %s,\n' "$(grep -c 'automatic vacuum of table "postgres.public.outbox"' "$SERVER_LOG" 2>/dev/null || true)"
    printf '    "notable_lines": [\n'
    log_lines | head -n 60 | while IFS= read -r l; do printf '      %s,\n' "$(printf '%s' "$l" | json_str)"; done | sed '$ s/,$//'
    printf '    ]\n  }\n}\n'
  } > "$tmp"
  mv "$tmp" "$OUT"
}

print_table() {
  printf '\n%-9s %-28s %12s %25s %-15s %-8s %s\n' part metric median "min - max (runs)" unit target ok
  printf '%s\n' "$TARGETS" | awk -F'\t' '
    function f(v) { v += 0; return (v >= 1000 || v <= -1000) ? sprintf("%.0f", v) : (v >= 100 || v <= -100) ? sprintf("%.1f", v) : sprintf("%.3g", v) }
    FNR == NR { tgt[$1 SUBSEP $2] = $3 " " $4; next }
    { k = $1 SUBSEP $2
      if (!(k in n)) { order[++nk] = k; unit[k] = $3 }
      if ($5 != "nan" && $5 != "-nan" && $5 != "") vals[k, ++n[k]] = $5 + 0; else if (!(k in n)) n[k] = 0 }
    END {
      for (i = 1; i <= nk; i++) {
        k = order[i]; split(k, pm, SUBSEP); m = n[k]
        for (j = 1; j <= m; j++) s[j] = vals[k, j]
        for (a = 2; a <= m; a++) { x = s[a]; for (b = a - 1; b >= 1 && s[b] > x; b--) s[b + 1] = s[b]; s[b + 1] = x }
        med = m == 0 ? "n/a" : (m % 2 ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2)
        t = (k in tgt) ? tgt[k] : ""; ok = ""
        if (t != "" && med != "n/a") { split(t, tt, " "); ok = ((tt[1] == "<=" && med <= tt[2]) || (tt[1] == ">=" && med >= tt[2]) || (tt[1] == "<" && med < tt[2])) ? "yes" : "NO" }
        printf "%-9s %-28s %12s %25s %-15s %-8s %s\n", pm[1], pm[2], med == "n/a" ? med : f(med),
          m == 0 ? "" : f(s[1]) " - " f(s[m]) " (" m ")", unit[k], t, ok
      }
    }' - "$RESULTS"
  if [ -s "$WINDOWS" ]; then
    printf '\nsustained, per %ss window (snapshot held from %ss for %ss):\n' $SUS_WINDOW $(((SUS_T - SUS_HOLD) / 2)) $SUS_HOLD
    printf '%-4s %-6s %-12s %10s %10s %10s %10s %12s %12s %9s %11s\n' run window t_s delivered/s p50_ms p99_ms max_ms table_bytes index_bytes backlog dead_tuples
    awk -F'\t' '
      FNR == NR { if ($2 ~ /^w[0-9]+$/) { w = substr($2, 2); tb[$1, w] = $4; ib[$1, w] = $5; bl[$1, w] = $6; dd[$1, w] = $7 } next }
      { printf "%-4s %-6s %-12s %10s %10s %10s %10s %12s %12s %9s %11s\n", $1, $2, $3 "-" $4, $6, $7, $8, $9, tb[$1, $2], ib[$1, $2], bl[$1, $2], dd[$1, $2] }' "$SIZES" "$WINDOWS"
    printf '\nsustained, outbox size samples:\n'
    printf '%-4s %-10s %6s %12s %12s %9s %11s %11s\n' run at t_s table_bytes index_bytes backlog dead_tuples autovacuums
    awk -F'\t' '{ printf "%-4s %-10s %6s %12s %12s %9s %11s %11s\n", $1, $2, $3, $4, $5, $6, $7, $8 }' "$SIZES"
  fi
  if [ -s "$WORK/worker_activity.tsv" ]; then
    printf '\nmemory: the worker while draining, once-a-second samples (run, count, wait, activity):\n'
    sort "$WORK/worker_activity.tsv" | uniq -c | sort -k2,2n -k1,1nr | awk -F'\t' '{ printf "  %s\t%s\t%s\n", $1, $2, $3 }'
  fi
  printf '\nserver log: %s ERROR/PANIC, %s FATAL (besides shutdowns), %s WARNING lines\n' \
    "$(grep -cE ' (ERROR|PANIC):' "$SERVER_LOG" || true)" \
    "$(grep -E ' FATAL:' "$SERVER_LOG" | grep -cv 'due to administrator command' || true)" \
    "$(grep -c ' WARNING:' "$SERVER_LOG" || true)"
  log_lines | head -n 30 | sed 's/^/  /'
}

for p in $ALL_PARTS; do
  if want "$p"; then "part_$p"; fi
done

FINISHED=1
write_outputs ok
print_table
printf '\nresults written to %s (%ss)\n' "$OUT" "$(( $(date +%s) - T_START ))"
