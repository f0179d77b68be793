#!/usr/bin/env bash
# The demo, end to end: a throwaway PostgreSQL (OUTBOX_PG_MAJOR, else the
# machine's major of scripts/majors) with the extension preloaded, a Kafka
# cluster, a few transactions (committed, rolled back, from a trigger), and
# what a Kafka consumer (kcat) reads back, envelopes decoded with protoc and
# proto/outbox.proto.
# Works as root on a fresh Debian 12: installs what it needs first.
#
# Usage: bash scripts/demo.sh [--kafka mock|real]   (or OUTBOX_DEMO_KAFKA)
#   mock (default, a few seconds): the project's Kafka-protocol broker,
#        librdkafka's mock cluster in one process (tools/outbox-broker)
#   real: Apache Kafka 4.4, three KRaft brokers on loopback, replication
#        factor 3, min.insync.replicas 2 (tools/kafka/cluster.pl); its jars
#        are fetched once with Maven into /var/cache/pg_outbox
set -euo pipefail
source "$(dirname "$0")/common.sh"

KAFKA=${OUTBOX_DEMO_KAFKA:-mock}
while [ $# -gt 0 ]; do
  case "$1" in
    --kafka) KAFKA=${2:-}; shift 2 || shift ;;
    --kafka=*) KAFKA=${1#--kafka=}; shift ;;
    *) echo "usage: bash scripts/demo.sh [--kafka mock|real]" >&2; exit 2 ;;
  esac
done
case "$KAFKA" in mock|real) ;; *) echo "--kafka: mock or real, not '$KAFKA'" >&2; exit 2 ;; esac

# OUTBOX_DEMO_INSTALLED=1: the extension comes from its Debian package
# (scripts/chroot.sh runs the demo so, in a clean system), not this tree
if [ -z "${OUTBOX_DEMO_INSTALLED:-}" ]; then
  ensure_packages
  build_and_install
fi
[ "$KAFKA" = real ] && ensure_kafka_jars
make_workdir

# The project's broker: stops on SIGTERM.
start_mock_kafka() {
  log "starting the local Kafka-protocol broker (3 brokers)"
  "$ROOT/tools/outbox-broker" --brokers 3 --topic orders:3 --topic payments:3 \
    --topic latency:1 --bootstrap-file "$WORK/bootstrap" </dev/null >"$WORK/broker.log" 2>&1 &
  cleanup_push "kill $!"
}

# Real Kafka, as the unprivileged user, from a copy of the files it needs
# (the tree may not be readable by that user).
start_real_kafka() {
  log "starting Apache Kafka 4.4 (3 KRaft brokers, replication factor 3, min.insync.replicas 2)"
  ensure_js_packages
  mkdir -p "$WORK/kafka-tools/tools/kafka" "$WORK/kafka-tools/t"
  cp "$ROOT/tools/kafka/cluster.pl" "$WORK/kafka-tools/tools/kafka/"
  cp -a "$ROOT/tools/js" "$WORK/kafka-tools/tools/"
  cp "$ROOT/t/KafkaCluster.pm" "$WORK/kafka-tools/t/"
  chown -R "$RUN_USER" "$WORK/kafka-tools"
  start_kafka_in_background "$WORK/kafka-tools" "$WORK/kafka" \
    --topic orders:3 --topic payments:3 --topic latency:1
  ln -s "$WORK/kafka.bootstrap" "$WORK/bootstrap"
  ln -s "$WORK/kafka.log" "$WORK/broker.log"
}

start_${KAFKA}_kafka
# the mock is up in well under a second; three JVMs take up to a few minutes
wait_for_file "$WORK/bootstrap" || { cat "$WORK/broker.log"; echo "DEMO FAILED: the Kafka cluster did not start"; exit 1; }
BOOTSTRAP=$(cat "$WORK/bootstrap")
echo "bootstrap servers: $BOOTSTRAP"

log "starting $("$PG_BIN/postgres" --version) with shared_preload_libraries = 'outbox'"
as_user "$PG_BIN/initdb" -D "$WORK/data" -A trust >/dev/null
cat >>"$WORK/data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$WORK'
port = 5499
shared_preload_libraries = 'outbox'
outbox.brokers = '$BOOTSTRAP'
outbox.shards = 2
EOF
as_user "$PG_BIN/pg_ctl" -D "$WORK/data" -l "$WORK/postgresql.log" -w start >/dev/null
cleanup_push "as_user $PG_BIN/pg_ctl -D $WORK/data -m fast -w stop >/dev/null"
psql_demo() { as_user psql -X -h "$WORK" -p 5499 -d postgres -v ON_ERROR_STOP=1 "$@"; }

log "an application: orders, with a trigger that sends each change"
psql_demo -q <<'SQL'
CREATE EXTENSION outbox;
CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric NOT NULL);
CREATE FUNCTION orders_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox_send('orders', to_jsonb(NEW), NEW.customer,
                        jsonb_build_object('op', TG_OP));
    RETURN NEW;
END $$;
CREATE TRIGGER orders_outbox AFTER INSERT OR UPDATE ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_to_outbox();
SQL

log "transactions: two committed, one rolled back"
psql_demo -e <<'SQL'
BEGIN;
INSERT INTO orders VALUES (1, 'alice', 42.50);
SELECT outbox_send('payments', '{"order": 1, "amount": 42.50}'::jsonb, 'alice',
                   '{"source": "demo"}') AS payment_event_id;
COMMIT;

BEGIN;
INSERT INTO orders VALUES (2, 'bob', 13.00);
SELECT outbox_send('payments', '{"order": 2, "amount": 13.00}'::jsonb, 'bob');
ROLLBACK;

UPDATE orders SET total = 40.00 WHERE id = 1;
SQL

log "commit-to-acknowledgement time, 200 one-event transactions"
psql_demo -q <<'SQL'
-- Sends one event, commits, and waits until the worker has deleted it,
-- which it does only after Kafka acknowledged it.
CREATE PROCEDURE demo_latency(n int) LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    t0 timestamptz;
BEGIN
    CREATE TEMP TABLE IF NOT EXISTS latency_ms (ms float8);
    FOR i IN 1..n LOOP
        v_id := outbox_send('latency', jsonb_build_object('i', i), 'lat');
        COMMIT;
        t0 := clock_timestamp();
        WHILE EXISTS (SELECT FROM outbox WHERE id = v_id) LOOP
            PERFORM pg_sleep(0.0002);
        END LOOP;
        INSERT INTO latency_ms VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
        COMMIT;
    END LOOP;
END $$;
SQL
psql_demo -q <<'SQL'
CALL demo_latency(200);
SELECT count(*) AS events,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2) AS p50_ms,
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2) AS p99_ms,
       round(max(ms)::numeric, 2) AS max_ms
FROM latency_ms;
SQL

log "waiting for the outbox to drain"
for _ in $(seq 100); do
  [ "$(psql_demo -Atc 'SELECT count(*) FROM outbox')" = 0 ] && break
  sleep 0.1
done
psql_demo -Atc "SELECT 'rows left in the outbox: ' || count(*) FROM outbox"

log "what a Kafka consumer (kcat) reads back: orders and payments"
for topic in orders payments; do
  kcat -C -b "$BOOTSTRAP" -t "$topic" -e -q \
    -f "$topic partition %p offset %o key=%k headers=%h (%S bytes)\n"
done

log "the envelopes, decoded with protoc and proto/outbox.proto alone"
for topic in orders payments; do
  for p in 0 1 2; do
    n=$(kcat -C -b "$BOOTSTRAP" -t "$topic" -p "$p" -e -q -f 'x\n' | wc -l)
    for ((o = 0; o < n; o++)); do
      echo "--- $topic partition $p offset $o"
      kcat -C -b "$BOOTSTRAP" -t "$topic" -p "$p" -o "$o" -c 1 -e -q -D '' -f '%s' |
        protoc --proto_path="$ROOT/proto" --decode=outbox.v1.Event outbox.proto
    done
  done
done

log "figures"
sent=3        # orders: insert + update of alice; payments: alice's
delivered=$(for t in orders payments; do kcat -C -b "$BOOTSTRAP" -t "$t" -e -q -f 'x\n'; done | wc -l)
bob=$(for t in orders payments; do kcat -C -b "$BOOTSTRAP" -t "$t" -e -q -f '%k\n'; done | grep -c '^bob$' || true)
latency=$(kcat -C -b "$BOOTSTRAP" -t latency -e -q -f 'x\n' | wc -l)
echo "committed business events sent: $sent, delivered: $delivered"
echo "rolled-back events delivered:   $bob (must be 0)"
echo "latency events delivered:       $latency of 200"
[ "$delivered" -eq "$sent" ] && [ "$bob" -eq 0 ] && [ "$latency" -eq 200 ] || { echo "DEMO FAILED"; exit 1; }
echo "DEMO OK"
