#!/usr/bin/env bash
# Runs every test: pg_regress (SQL contract, bad input), the TAP tests on
# the project's broker (librdkafka's mock cluster: injected faults), the
# real-Kafka tier (a three-broker Apache Kafka cluster, t/KafkaCluster.pm)
# and PostgreSQL's own suites with and without the extension.
# Works as root on a fresh Debian 12: installs what it needs first.
# Usage: bash scripts/test.sh [t/NNN_name.pl ...]   (default: all; a named
#          t/1NN test runs on a real cluster; OUTBOX_TEST_KAFKA=real runs
#          any other named one there too)
#        bash scripts/test.sh --pg-suites-only
#        bash scripts/test.sh --pg MAJOR [t/NNN_name.pl ...]   one major of
# scripts/majors: the machine's own runs everything here, the others run in
# Debian chroots (scripts/chroot.sh: pg_regress and the core TAP tests) or
# from a PyPI wheel (scripts/pypi.sh: the same on this machine).
# With no --pg: every major there, in its order.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# failure_digest MAJOR LOG: what failed in one major's run, repeated at the
# end of the output (a failure early in a long run scrolls out of what a CI
# page shows): the failing checks, then the run's last lines.
failure_digest() {
  log "FAILURE DIGEST, PostgreSQL $1"
  grep -nE '^[[:space:]]*not ok|Failed test|Dubious|Parse errors|No plan found|\(Wstat: [1-9]|(^|[^_A-Z])FAILED|outputs differ|in one run only|did not run' "$2" |
    grep -vE '# TODO|\(TODO\)' | head -n 40 || true
  echo "-- its last lines:"
  tail -n 25 "$2"
}

if [ "${1:-}" = --pg ]; then
  major=${2:?--pg needs a major: $(majors | xargs)}
  shift 2
  case "$(major_field "$major" how)" in
    machine) ;;
    chroot) exec bash "$ROOT/scripts/chroot.sh" "$major" "$@" ;;
    pypi) exec bash "$ROOT/scripts/pypi.sh" "$major" "$@" ;;
    *) echo "test.sh: PostgreSQL $major is not in scripts/majors ($(majors | xargs))" >&2; exit 2 ;;
  esac
elif [ "${1:-}" != --pg-suites-only ] && [ $# -eq 0 ]; then
  logs=$(mktemp -d); trap 'rm -rf "$logs"' EXIT; failed=(); times=()
  # run_part NAME COMMAND...: COMMAND's output in $logs/NAME.log (shown as
  # it comes too with TEE=1), its time in $logs/NAME.time, and
  # $logs/NAME.failed if it failed
  run_part() {
    local name=$1 started=$SECONDS; shift
    if [ "${TEE:-}" ]; then "$@" 2>&1 | tee "$logs/$name.log"; else "$@" >"$logs/$name.log" 2>&1; fi ||
      touch "$logs/$name.failed"
    echo "$name: $((SECONDS - started)) s" >"$logs/$name.time"
  }
  # The machine's major first, alone: it loads the machine, and some of its
  # tests measure time. Then its Debian package and the other majors all at
  # once: each has its own chroots, lock, logs and package port
  # (scripts/chroot.sh), their tests mostly wait, and together they take as
  # long as the slowest, not the sum. Their output follows, each whole.
  machine=$(machine_major)
  log "PostgreSQL $machine"
  OUTBOX_PACKAGE_LATER=1 TEE=1 run_part "$machine" bash "$0" --pg "$machine"
  run_part "$machine-package" bash "$ROOT/scripts/chroot.sh" "$machine" --package-only &
  parts="$machine-package"
  for major in $(majors | grep -vxF "$machine"); do
    run_part "$major" bash "$0" --pg "$major" &
    parts+=" $major"
  done
  # the CloudNativePG image, built and run in Debian systems of its own
  run_part cnpg bash "$ROOT/scripts/image_test.sh" &
  parts+=" cnpg"
  log "running at once: $parts (the output of each follows when all are done)"
  wait
  for part in $parts; do log "PostgreSQL $part"; cat "$logs/$part.log"; done
  for part in $machine $parts; do
    times+=("$(cat "$logs/$part.time")")
    [ ! -e "$logs/$part.failed" ] || { failed+=("$part"); echo "TESTS FAILED on PostgreSQL $part"; }
  done
  for part in "${failed[@]}"; do failure_digest "$part" "$logs/$part.log"; done
  # where the time went: each major, and each part of it (its log lines)
  log "TIMES ${times[*]}; total $SECONDS s"
  grep -h '^== \[+' "$logs"/*.log || true
  [ ${#failed[@]} -eq 0 ] || exit 1
  echo "ALL TESTS PASSED on PostgreSQL $(majors | xargs)"
  exit 0
fi

ensure_packages
build_and_install
[ "${1:-}" = --pg-suites-only ] && exec bash "$ROOT/scripts/pg_suites.sh"

ensure_js_packages
ensure_kafka_jars
ensure_xa_jars
ensure_newer_librdkafka
ensure_registry_tools
# Debezium's jars only when asked: t/120 and t/121 put pg_outbox beside
# Debezium itself (OUTBOX_TEST_DEBEZIUM=1; skipped otherwise)
[ -z "${OUTBOX_TEST_DEBEZIUM:-}" ] || ensure_debezium_jars
make_workdir
# a test killed hard cannot stop its brokers: whatever still runs from the
# copy of the tree is stopped with it
cleanup_push "pkill -KILL -u $RUN_USER -f '$WORK/tree' || true"

# PostgreSQL refuses root: run the suites as $RUN_USER on a copy it owns.
log "copying the tree to $WORK"
cp -a "$ROOT/." "$WORK/tree"
chown -R "$RUN_USER" "$WORK/tree"
cd "$WORK/tree"

# The real-Kafka tier: the t/1NN tests, which need a real cluster each, and
# again the tests of the contract that need no injected fault, on one
# cluster they share (their topic names differ).
REAL_AGAIN="t/001_delivery.pl t/012_reload.pl t/013_standby.pl t/033_durability.pl"
REAL_AGAIN+=" t/070_conventions.pl t/071_capture.pl"

report_failure() {
  [ -f regression.diffs ] && { log "regression.diffs"; cat regression.diffs; }
  for f in tmp_check/log/regress_log_*; do
    [ -f "$f" ] || continue
    log "$f (last 80 lines)"; tail -n 80 "$f"
  done
  for f in tmp_check/log/*.log; do
    [ -f "$f" ] || continue
    log "$f (outbox lines)"; grep -E "outbox|ERROR|FATAL|PANIC" "$f" | tail -n 40 || true
  done
  echo "TESTS FAILED"
  exit 1
}

# run_tap LABEL KAFKA TESTS [no-regress]: pg_regress unless told
# no-regress, then the TAP tests TESTS with OUTBOX_TEST_KAFKA=KAFKA,
# PROVE_JOBS of them at once (default 1)
run_tap() {
  log "running $1"
  [ -n "${4:-}" ] || as_user make -s PG_CONFIG=$PG_BIN/pg_config installcheck || report_failure
  as_user env OUTBOX_TEST_KAFKA="$2" OUTBOX_TEST_KAFKA_BOOTSTRAP="${OUTBOX_TEST_KAFKA_BOOTSTRAP:-}" \
    OUTBOX_TEST_LIBRDKAFKA="${OUTBOX_TEST_LIBRDKAFKA:-}" make -s PG_CONFIG=$PG_BIN/pg_config prove_installcheck \
    PROVE_FLAGS="--timer --verbose -j${PROVE_JOBS:-1}" PROVE_TESTS="$3" || report_failure
}

if [ $# -gt 0 ]; then
  run_tap "the tests named" "${OUTBOX_TEST_KAFKA:-}" "$*"
  echo "ALL TESTS PASSED"
  exit 0
fi
# The tests on the project's broker mostly wait (for faults, timeouts,
# reports; about a tenth of a core each), and each has its own broker,
# ports, nodes and topics: two run at once. Those that compare a time or
# CPU figure between two phases run alone afterwards, where a neighbour's
# load cannot land in one phase and not the other (t/060's ratio is of two
# threads in the same seconds, and the latency bounds are 5-10 times what
# is measured two at once: they share). t/050 too, until we know why its
# template copy once waited past 30 s for its first delivery two at once
# under a loaded machine (it passes alone and beside its neighbour). And
# t/028, whose broker answers 2 s late under a 3 s socket timeout: on a
# loaded machine a reply past 3 s makes librdkafka send again, and the
# project's broker (no idempotence check) writes the batch twice, which
# its duplicate count takes for a rebuild's (8 duplicates, once, two at
# once; it passed alone and in every other run).
MOCK_ALONE="t/026_retry_drain.pl t/028_rebuild_in_flight.pl t/050_databases.pl t/054_partition_pacing.pl t/062_long_snapshot.pl"
mock_together=()
for t in t/0*.pl; do [[ " $MOCK_ALONE " == *" $t "* ]] || mock_together+=("$t"); done
PROVE_JOBS=2 run_tap "pg_regress and the TAP tests on the project's broker, two at once" "" "${mock_together[*]}"
run_tap "the TAP tests on the project's broker that compare phases, alone" "" "$MOCK_ALONE" no-regress
run_tap "the TAP tests on real Kafka clusters" real "$(echo t/1*.pl)" no-regress
start_kafka_in_background "$WORK/tree" "$WORK/shared_kafka"
wait_for_file "$WORK/shared_kafka.bootstrap" || { cat "$WORK/shared_kafka.log"; echo "TESTS FAILED: no Kafka cluster"; exit 1; }
OUTBOX_TEST_KAFKA_BOOTSTRAP=$(cat "$WORK/shared_kafka.bootstrap") \
  run_tap "the tests of the contract again, on one real Kafka cluster" real "$REAL_AGAIN" no-regress
stop_kafka_in_background
bash "$ROOT/scripts/pg_suites.sh" || { echo "TESTS FAILED"; exit 1; }
# the Debian package for this major, built and installed into a clean
# system of its suite (with no --pg, beside the other majors instead)
if [ -z "${OUTBOX_PACKAGE_LATER:-}" ]; then
  bash "$ROOT/scripts/chroot.sh" "$PG_MAJOR" --package-only || { echo "TESTS FAILED"; exit 1; }
fi
echo "ALL TESTS PASSED"
